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
#   bench/gpu_checks.sh pretrain OUT CORPUS VOCAB MAX_STEPS WARMUP [more pretrain flags]
#       `accelerate launch pretrain.py --size small` in bf16 on a local corpus, with its curves; the run directory
#       is /tmp/gpu-run and OUT receives metrics.csv, summary.json, curves.png and the log.
set -euo pipefail
mode=${1:?bench|profile|pretrain}; out=${2:?OUT}
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
corpus=${3:?CORPUS}; vocab=${4:?VOCAB}; steps=${5:?MAX_STEPS}; warmup=${6:?WARMUP}
shift 6
rm -rf /tmp/gpu-run
start=$(date +%s)
accelerate launch --num_processes 1 --num_machines 1 --mixed_precision bf16 --dynamo_backend no \
  pretrain.py --size small --corpus "$corpus" --vocab "$vocab" --mixed-precision bf16 --max-steps "$steps" \
  --set warmup_steps="$warmup" --set log_every=100 --set save_every="$steps" --num-proc 16 \
  --output /tmp/gpu-run "$@" > "$out/pretrain.log" 2>&1 || { tail -50 "$out/pretrain.log"; exit 1; }
echo "wall seconds: $(( $(date +%s) - start ))" | tee -a "$out/pretrain.log"
tr '\r' '\n' < "$out/pretrain.log" | grep -v "it/s\]$" | tail -25
cp /tmp/gpu-run/metrics.csv /tmp/gpu-run/summary.json /tmp/gpu-run/curves.png "$out/"
