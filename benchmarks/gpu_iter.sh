#!/usr/bin/env bash
# Quick GPU iteration: GPU tests, then torchdali-only loader runs with the staging ring
# off and on (same data, same machine), then torchvision for the ratio.
#   OUT=gpu_out bash benchmarks/gpu_iter.sh [N]
set -uo pipefail
OUT=${OUT:-gpu_out}; N=${1:-16384}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
W=$(nproc); D=/tmp/torchdali_data
if [ "${TESTS:-1}" = 1 ]; then
  timeout 240 python3 -m pytest -m cuda -q -rs -p no:cacheprovider tests > "$OUT/pytest_cuda.log" 2>&1; tail -3 "$OUT/pytest_cuda.log"
fi
python3 -c "from torchdali._synthetic import make_image_folder as m; m('$D/synthetic-$N', $N, progress=False)"
for RING in ${RINGS:-0 1}; do
  TORCHDALI_STAGING_RING=$RING timeout 150 python3 -m torchdali.bench --only torchdali --num-images "$N" \
    --batch-size 256 --workers $W --epochs 3 --warmup 1 --data-dir $D --out "$OUT/td_ring$RING" --quiet 2>&1 \
    | tee "$OUT/td_ring$RING.log" | grep -E "epoch|torchdali  "
done
if [ "${TV:-1}" = 1 ]; then
  timeout 200 python3 -m torchdali.bench --only torchvision --num-images "$N" --batch-size 256 --workers $W \
    --epochs 2 --warmup 1 --data-dir $D --out "$OUT/tv" --quiet 2>&1 | tee "$OUT/tv.log" | grep -E "torchvision  "
fi
