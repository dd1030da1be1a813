#!/usr/bin/env bash
# Everything the GPU machine should run in one call: GPU tests, kernel bandwidth,
# and the loader benchmark (train and val recipes). Logs go to $OUT (or ./gpu_out).
#   bash benchmarks/gpu_suite.sh [num_images]
set -uo pipefail
OUT=${OUT:-gpu_out}
N=${1:-16384}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
  python3 -c "import torch, torchvision, triton; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'triton', triton.__version__)"
} 2>&1 | tee "$OUT/env.txt"
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m cuda -q -rs -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest_cuda.log" | tail -40
timeout 120 python3 benchmarks/kernel_bandwidth.py --json "$OUT/kernel.json" 2>&1 | tee "$OUT/kernel.log"
W=$(nproc)
timeout ${BENCH_TIMEOUT:-400} python3 -m torchdali.bench --num-images "$N" --batch-size 256 --workers "$W" \
  --epochs 3 --warmup 1 --data-dir /tmp/torchdali_data --out "$OUT/train" --quiet 2>&1 | tee "$OUT/bench_train.log"
