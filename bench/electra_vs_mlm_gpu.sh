#!/usr/bin/env bash
# ELECTRA against MLM at equal FLOPs on one GPU in one command (bench/electra_vs_mlm.py; docs/results/central-claim.md).
#
#   bench/electra_vs_mlm_gpu.sh prepare DATA
#       on the machine that has the data: copies what the study reads from DATA (glue/SST-2, RTE, MRPC, STS-B
#       train and dev; corpus/brown) into runs/evm-data (git-ignored, about 18 MB), and downloads into .whl/
#       (git-ignored, about 10 MB) the wheels of the dependencies a bare GPU image may lack (Python 3.12).
#   bench/electra_vs_mlm_gpu.sh run OUT [BUDGET [MINUTES [CORPUS]]]
#       on the GPU machine, from the repository root, with runs/evm-data and .whl carried: installs the carried
#       wheels and this package into /tmp/site, checks the imports, then trains ELECTRA-Small and MLM-Small to
#       BUDGET training FLOPs each (default 3e15) in bf16 with CUDA graphs, probes them, and fine-tunes GLUE while
#       MINUTES (default 9, the whole study) leave room. The study's folder is runs/evm-small (git-ignored: a
#       rerun on the same machine resumes there); OUT receives the table, the figure, compare's report, both runs'
#       metrics.csv, the log and the GPU's name.
#       Without CORPUS both train on the library's default corpus (shipped in the package: nothing to carry).
set -euo pipefail
mode=${1:?prepare|run}
if [ "$mode" = prepare ]; then
  src=${2:?DATA}; dest=runs/evm-data
  for task in SST-2 RTE MRPC STS-B; do
    mkdir -p "$dest/glue/$task"; cp "$src/glue/$task/train.tsv" "$src/glue/$task/dev.tsv" "$dest/glue/$task/"
  done
  mkdir -p "$dest/corpus/brown"; cp "$src"/corpus/brown/c[a-r][0-9][0-9] "$dest/corpus/brown/"
  mkdir -p .whl
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 evaluate==0.4.6 yacs==0.1.8 termcolor==3.3.0 \
    zstandard==0.25.0 jiwer==4.0.0 rapidfuzz==3.14.6 bm25s==0.3.16
  python3 -m pip wheel -q --no-deps -w .whl fvcore==0.1.5.post20221221 iopath==0.1.10  # no wheels published
  du -sh "$dest" .whl
  exit 0
fi
out=${2:?OUT}; budget=${3:-3e15}; minutes=${4:-9}
started=$(date +%s)
corpus=(); if [ $# -ge 5 ]; then corpus=(--corpus "$5"); fi
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site .
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
# from /tmp: in the repository root, the source folder electra/ (without probes/, which the wheel maps in) shadows
# the installed package
(cd /tmp && python3 -c "import torch, transformers, datasets, pyarrow, electra.app.compare, electra.probes.run; \
print('torch', torch.__version__, 'transformers', transformers.__version__, 'datasets', datasets.__version__, \
'pyarrow', pyarrow.__version__)") | tee -a "$out/gpu.txt"
# stopped at 9.5 minutes from the wrapper's start whatever happens, so that the copies below always run inside a
# 10-minute command (the table is rewritten after every cell: a stopped study keeps what it finished)
hard=$(( 570 - $(date +%s) + started ))
start=$(date +%s)
status=0
timeout "$hard" python3 bench/electra_vs_mlm.py --size small --flops-budget "$budget" --checkpoints 1 "${corpus[@]}" \
  --sst2 runs/evm-data/glue/SST-2 --pos runs/evm-data/corpus/brown --glue-data runs/evm-data/glue \
  --probe-max-train 1000 --time-limit "$minutes" --out runs/evm-small 2>&1 | tr '\r' '\n' | grep --line-buffered -v 'it/s' \
  > "$out/run.log" || status=$?
echo "wall seconds: $(( $(date +%s) - start ))" | tee -a "$out/run.log"
cp runs/evm-small/electra_vs_mlm.md runs/evm-small/electra_vs_mlm.json runs/evm-small/electra_vs_mlm.png "$out/" || true
cp runs/evm-small/results.md "$out/compare-results.md" || true
for arm in electra mlm; do cp "runs/evm-small/pretrain/$arm/metrics.csv" "$out/$arm-metrics.csv" || true; done
tail -25 "$out/run.log"
exit "$status"
