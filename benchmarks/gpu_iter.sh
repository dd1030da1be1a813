#!/usr/bin/env bash
# Quick GPU iteration: decode profile + torchdali-only loader runs at a few worker counts.
set -uo pipefail
OUT=${OUT:-gpu_out}; N=${1:-16384}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c "from torchdali._synthetic import make_image_folder as m; m('/tmp/torchdali_data/synthetic-$N', $N, progress=False)"
timeout 120 python3 benchmarks/profile_decode.py /tmp/torchdali_data/synthetic-$N 2>&1 | tee "$OUT/profile.log"
for W in ${WORKERS:-16 8}; do
  for SPLIT in ${SPLITS:-0}; do
    TORCHDALI_HYBRID_SPLIT=$SPLIT timeout 150 python3 -m torchdali.bench --only torchdali --num-images "$N" \
      --batch-size 256 --workers $W --epochs 3 --warmup 1 --data-dir /tmp/torchdali_data \
      --out "$OUT/td_w${W}_s$SPLIT" --quiet 2>&1 | tee "$OUT/td_w${W}_s$SPLIT.log" | grep -E "epoch|torchdali  "
  done
done
