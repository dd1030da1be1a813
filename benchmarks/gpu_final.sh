#!/usr/bin/env bash
# The full GPU-machine run behind benchmarks/RESULTS.md, in one call (about 7 minutes):
# GPU tests, kernel bandwidth, train and val recipes vs torchvision, sweeps over
# workers and batch size, and train_imagenet.py (2 processes on the GPU) with both loaders.
#   OUT=gpu_out bash benchmarks/gpu_final.sh
set -uo pipefail
OUT=${OUT:-gpu_out}; N=${N:-16384}; mkdir -p "$OUT/sweep"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
W=$(nproc); D=/tmp/torchdali_data
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; echo "cpus $W"
  python3 -c "import torch, torchvision, triton; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'triton', triton.__version__)"; } | tee "$OUT/env.txt"
timeout 240 python3 -m pytest -m cuda -q -rs -p no:cacheprovider tests > "$OUT/pytest_cuda.log" 2>&1; tail -3 "$OUT/pytest_cuda.log"
timeout 90 python3 benchmarks/kernel_bandwidth.py --json "$OUT/kernel.json" 2>&1 | tee "$OUT/kernel.log"
python3 -c "from torchdali._synthetic import make_image_folder as m; m('$D/synthetic-$N', $N, progress=False)"
for R in train val; do
  timeout 150 python3 -m torchdali.bench --num-images $N --batch-size 256 --workers $W --recipe $R --epochs 3 \
    --warmup 1 --data-dir $D --out "$OUT/$R" --quiet 2>&1 | tee "$OUT/bench_$R.log" | grep -vE "^wrote"
done
for w in 2 4 8; do
  timeout 60 python3 -m torchdali.bench --only torchdali --num-images $N --batch-size 256 --workers $w --epochs 2 \
    --warmup 1 --data-dir $D --out "$OUT/sweep/w$w" --quiet 2>&1 | grep -E "^torchdali +[0-9]"
done
for b in 64 128 512; do
  timeout 60 python3 -m torchdali.bench --only torchdali --num-images $N --batch-size $b --workers $W --epochs 2 \
    --warmup 1 --data-dir $D --out "$OUT/sweep/b$b" --quiet 2>&1 | grep -E "^torchdali +[0-9]"
done
for L in torchdali torchvision; do
  timeout 120 torchrun --standalone --nproc_per_node=2 examples/train_imagenet.py $D/synthetic-$N --loader $L \
    --batch-size 128 --workers $((W / 2)) --steps 50 --warmup-steps 10 2>&1 | grep -E "images/s" | tee -a "$OUT/train_imagenet.log"
done
