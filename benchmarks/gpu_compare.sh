#!/usr/bin/env bash
# One GPU-machine call: this tree against another torchdali tree, side by side in the same run.
#   OLD=path/to/old/tree OUT=gpu_out bash benchmarks/gpu_compare.sh
# 1. `pytest -m cuda` on this tree;
# 2. bitwise comparison of both trees' batches on photographs (benchmarks/same_output.py);
# 3. throughput of both trees on the same photographs, train and val recipes, runs interleaved
#    (old, new, old, new) so drift of the machine hits both alike;
# 4. fused-kernel time of both trees (benchmarks/kernel_bandwidth.py).
# Everything lands in $OUT/logs and $OUT/compare.tgz.
set -uo pipefail
OUT=${OUT:-gpu_out}; N=${N:-16384}; REPS=${REPS:-2}; L=$OUT/logs; mkdir -p "$L"
OLD=$(cd "${OLD:?set OLD to the tree to compare with}" && pwd); NEW=$PWD
export PYTHONUNBUFFERED=1
W=$(nproc); D=/tmp/torchdali_photos-$N
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; echo "cpus $W"
  python3 -c "import torch, torchvision, triton; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'triton', triton.__version__)"
  echo "old $OLD"; echo "new $NEW $(git -C "$NEW" rev-parse --short HEAD 2>/dev/null)"; } | tee "$L/env.txt"
PYTHONPATH=$NEW python3 benchmarks/photo_folder.py "$D" --num-images $N --quiet > "$L/photos.log" 2>&1 &
GEN=$!
PYTHONPATH=$NEW timeout 240 python3 -m pytest -m cuda -q -rs --tb=short -p no:cacheprovider -o faulthandler_timeout=60 \
  tests > "$L/pytest_cuda.log" 2>&1; tail -3 "$L/pytest_cuda.log"
wait $GEN; cat "$L/photos.log"
timeout 150 python3 benchmarks/same_output.py "$D" "$OLD" "$NEW" > "$L/same_output.log" 2>&1; cat "$L/same_output.log"
bench() {  # tree label recipe rep
  (cd "$1" && PYTHONPATH=$1 timeout 150 python3 -m torchdali.bench "$D" --only torchdali --batch-size 256 \
     --workers $W --recipe "$3" --epochs 4 --warmup 1 --quiet --out "$L/bench_$2_$3_$4") > "$L/bench_$2_$3_$4.log" 2>&1
  grep -E "^torchdali +[0-9]" "$L/bench_$2_$3_$4.log" | sed "s/^/$2 $3 rep$4: /"
}
for R in train val; do
  for k in $(seq 1 $REPS); do bench "$OLD" old $R $k; bench "$NEW" new $R $k; done
done
for t in old new; do
  T=$([ $t = old ] && echo "$OLD" || echo "$NEW")
  (cd "$T" && PYTHONPATH=$T timeout 90 python3 "$T/benchmarks/kernel_bandwidth.py" --json "$L/kernel_$t.json") \
    > "$L/kernel_$t.log" 2>&1; sed "s/^/kernel $t: /" "$L/kernel_$t.log" | tail -5
done
tar czf "$OUT/compare.tgz" -C "$OUT" logs
