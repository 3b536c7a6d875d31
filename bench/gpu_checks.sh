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
#   bench/gpu_checks.sh cpu OUT [CORPUS [VOCAB]]
#       `quick`'s three paths on the CPU at small shapes (tiny model, batch 4 x 32, a few steps; the CUDA-graph
#       options, which need a GPU, left out), in about two minutes: the test suite runs it
#       (tests/test_gpu_checks_cpu.py), so the script a GPU's few minutes depend on cannot break unseen.
#   bench/gpu_checks.sh pretrain OUT CORPUS VOCAB MAX_STEPS WARMUP [more pretrain flags]
#       `accelerate launch pretrain.py --size small` in bf16 on a local corpus, with its curves; the run directory
#       is /tmp/gpu-run and OUT receives metrics.csv, summary.json, curves.png and the log.
set -euo pipefail
mode=${1:?bench|profile|quick|cpu|pretrain}; out=${2:?OUT}
mkdir -p "$out"
# The shapes and options of the checks: a GPU's, or the CPU mode's (the same paths, small and short).
device=cuda size=small batch=128 seq=128 dtype=bf16 graphs=(--compile-mode reduce-overhead) profile_json=profile-cudagraphs.json
throughput_modes=(--compile-modes reduce-overhead) launch_precision=bf16 num_proc=16 run_dir=/tmp/gpu-run
if [ "$mode" = cpu ]; then
  device=cpu size=tiny batch=4 seq=32 dtype=fp32 graphs=() throughput_modes=() launch_precision=no num_proc=1
  run_dir="$out/run" profile_json=profile.json
  lscpu | grep -m1 "Model name" | tee -a "$out/gpu.txt"
else
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee -a "$out/gpu.txt"
fi
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
# One-process pretraining (ELECTRA-Small in bf16 on a GPU) into $run_dir; its log, metrics, summary and curves into
# OUT.
pretrain_small() {
  rm -rf "$run_dir"
  local start; start=$(date +%s)
  accelerate launch --num_processes 1 --num_machines 1 --mixed_precision "$launch_precision" --dynamo_backend no \
    pretrain.py --size "$size" --mixed-precision "$launch_precision" --num-proc "$num_proc" \
    --output "$run_dir" "$@" > "$out/pretrain.log" 2>&1 || { tail -50 "$out/pretrain.log"; exit 1; }
  echo "wall seconds: $(( $(date +%s) - start ))" | tee -a "$out/pretrain.log"
  tr '\r' '\n' < "$out/pretrain.log" | grep -v "it/s\]$" | tail -25
  cp "$run_dir/metrics.csv" "$run_dir/summary.json" "$run_dir/curves.png" "$out/"
}
if [ "$mode" = quick ] || [ "$mode" = cpu ]; then
  if [ "$mode" = quick ]; then
    minutes=${3:-3} steps=10 timed=50 window=10 warmup=5 max_steps=6000 warmup_steps=500 log_every=100
    data=()
    if [ $# -ge 5 ]; then data=(--corpus "$4" --vocab "$5"); fi
  else
    minutes=1 steps=2 timed=3 window=1 warmup=1 max_steps=4 warmup_steps=1 log_every=2
    data=()
    if [ $# -ge 3 ]; then data=(--corpus "$3"); fi
    if [ $# -ge 4 ]; then data+=(--vocab "$4"); fi
  fi
  python3 bench/profile_step.py --device "$device" --size "$size" --batch-size "$batch" --seq-len "$seq" \
    --dtype "$dtype" --steps "$steps" --rows 30 "${graphs[@]}" --json "$out/$profile_json" 2>&1 \
    | tee "$out/profile.txt"
  python3 bench/pretrain_throughput.py --device "$device" --size "$size" --batch-size "$batch" --seq-len "$seq" \
    --steps "$timed" --window "$window" --warmup "$warmup" --dtypes "$dtype" "${throughput_modes[@]}" \
    --json "$out/throughput.json" 2>&1 | tee "$out/throughput.txt"
  # the learning rate decays over the budget (the time clock), so the curves show the whole schedule; one
  # checkpoint, at the end
  pretrain_small "${data[@]}" --max-steps "$max_steps" --set warmup_steps="$warmup_steps" \
    --set log_every="$log_every" --time-budget "$minutes" --schedule-clock time --set save_every="$max_steps"
  exit 0
fi
corpus=${3:?CORPUS}; vocab=${4:?VOCAB}; steps=${5:?MAX_STEPS}; warmup=${6:?WARMUP}
shift 6
pretrain_small --corpus "$corpus" --vocab "$vocab" --max-steps "$steps" --set warmup_steps="$warmup" \
  --set log_every=100 --set save_every="$steps" "$@"
