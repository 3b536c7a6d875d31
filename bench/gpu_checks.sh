#!/usr/bin/env bash
# The standing GPU checks (README, "On a GPU").
#
#   bench/gpu_checks.sh bench OUT
#       throughput and MFU of the ELECTRA-Small step, batch 128 x 128, timed in windows of 10 steps: the naive
#       transformers step and ours in fp32; ours in bf16 eager, compiled, and compiled with CUDA graphs
#       (reduce-overhead); Electric in bf16 eager and with CUDA graphs.
#   bench/gpu_checks.sh profile OUT
#       where the GPU's time goes in the bf16 ELECTRA-Small step, batch 128 x 128, eager and with CUDA graphs:
#       kernels by device time (the GEMMs as one line), the GPU's busy time against the step's wall time, and the
#       kernels per step (bench/profile_step.py; JSON beside the text).
#   bench/gpu_checks.sh quick OUT [MINUTES [CORPUS VOCAB]]
#       all three, sized for one command inside a 15-minute device lease (about 9 minutes with MINUTES=3, the
#       default): the CUDA-graph profile; the naive fp32 step against ours in bf16, eager and with CUDA graphs (50
#       timed steps); and a MINUTES-long `accelerate launch pretrain.py --size small` with CUDA graphs, its curves
#       in OUT. Without CORPUS it trains on the embedded corpus (nothing to carry; 4,000 examples, so the curves
#       show throughput and a falling loss, not what a real corpus gives).
#   bench/gpu_checks.sh pretrain OUT CORPUS VOCAB MAX_STEPS WARMUP [more pretrain flags]
#       `accelerate launch pretrain.py --size small` in bf16 on a local corpus, with its curves; the run directory
#       is /tmp/gpu-run and OUT receives metrics.csv, summary.json, curves.png and the log.
set -euo pipefail
mode=${1:?bench|profile|quick|pretrain}; out=${2:?OUT}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee -a "$out/gpu.txt"
python3 -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__)" | tee -a "$out/gpu.txt"
if [ "$mode" = bench ]; then
  common=(--device cuda --size small --batch-size 128 --steps 100 --window 10 --warmup 5)
  python3 bench/pretrain_throughput.py "${common[@]}" --dtypes fp32 --json "$out/throughput-fp32.json" \
    2>&1 | tee "$out/throughput.txt"
  python3 bench/pretrain_throughput.py "${common[@]}" --dtypes bf16 --no-baseline \
    --compile-modes default,reduce-overhead --json "$out/throughput-bf16.json" 2>&1 | tee -a "$out/throughput.txt"
  python3 bench/pretrain_throughput.py "${common[@]}" --dtypes bf16 --no-baseline --objective electric \
    --compile-modes reduce-overhead --json "$out/throughput-electric.json" 2>&1 | tee -a "$out/throughput.txt"
  exit 0
fi
if [ "$mode" = profile ]; then
  common=(--device cuda --size small --batch-size 128 --dtype bf16 --steps 10 --rows 30)
  python3 bench/profile_step.py "${common[@]}" --json "$out/profile-eager.json" 2>&1 | tee "$out/profile.txt"
  python3 bench/profile_step.py "${common[@]}" --compile-mode reduce-overhead --json "$out/profile-cudagraphs.json" \
    2>&1 | tee -a "$out/profile.txt"
  exit 0
fi
# One-GPU pretraining of ELECTRA-Small in bf16 into /tmp/gpu-run; its log, metrics, summary and curves into OUT.
pretrain_small() {
  rm -rf /tmp/gpu-run
  local start; start=$(date +%s)
  accelerate launch --num_processes 1 --num_machines 1 --mixed_precision bf16 --dynamo_backend no \
    pretrain.py --size small --mixed-precision bf16 --set log_every=100 --num-proc 16 \
    --output /tmp/gpu-run "$@" > "$out/pretrain.log" 2>&1 || { tail -50 "$out/pretrain.log"; exit 1; }
  echo "wall seconds: $(( $(date +%s) - start ))" | tee -a "$out/pretrain.log"
  tr '\r' '\n' < "$out/pretrain.log" | grep -v "it/s\]$" | tail -25
  cp /tmp/gpu-run/metrics.csv /tmp/gpu-run/summary.json /tmp/gpu-run/curves.png "$out/"
}
if [ "$mode" = quick ]; then
  minutes=${3:-3}
  python3 bench/profile_step.py --device cuda --size small --batch-size 128 --dtype bf16 --steps 10 --rows 30 \
    --compile-mode reduce-overhead --json "$out/profile-cudagraphs.json" 2>&1 | tee "$out/profile.txt"
  python3 bench/pretrain_throughput.py --device cuda --size small --batch-size 128 --steps 50 --window 10 \
    --warmup 5 --dtypes bf16 --compile-modes reduce-overhead --json "$out/throughput.json" 2>&1 \
    | tee "$out/throughput.txt"
  # the learning rate decays over the budget (the time clock), so the curves show the whole schedule; one
  # checkpoint, at the end
  data=()
  if [ $# -ge 5 ]; then data=(--corpus "$4" --vocab "$5"); fi
  pretrain_small "${data[@]}" --max-steps 6000 --set warmup_steps=500 --time-budget "$minutes" \
    --schedule-clock time --set save_every=6000
  exit 0
fi
corpus=${3:?CORPUS}; vocab=${4:?VOCAB}; steps=${5:?MAX_STEPS}; warmup=${6:?WARMUP}
shift 6
pretrain_small --corpus "$corpus" --vocab "$vocab" --max-steps "$steps" --set warmup_steps="$warmup" \
  --set save_every="$steps" "$@"
