#!/usr/bin/env bash
# The GPU-machine runs behind benchmarks/RESULTS.md, in two calls of under 10 minutes:
#   PHASE=1 OUT=gpu_out bash benchmarks/gpu_final.sh   # GPU tests, train + val vs torchvision, ring off/on
#   PHASE=2 OUT=gpu_out bash benchmarks/gpu_final.sh   # all GPU tests, sweeps (workers, batch size), memory +
#                                                      # first batch, decoder alone, kernel
#   PHASE=3 OUT=gpu_out bash benchmarks/gpu_final.sh   # all GPU tests, train + val vs torchvision, decoder
#                                                      # alone on the same data, kernel (one call)
# Everything lands in $OUT/logs; $OUT/phaseN.tgz bundles it.
set -uo pipefail
OUT=${OUT:-gpu_out}; N=${N:-16384}; PHASE=${PHASE:-1}; L=$OUT/logs; mkdir -p "$L"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
W=$(nproc); D=/tmp/torchdali_data
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; echo "cpus $W"
  python3 -c "import torch, torchvision, triton; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'triton', triton.__version__)"; } | tee "$L/env.txt"
python3 -c "from torchdali._synthetic import make_image_folder as m; m('$D/synthetic-$N', $N, progress=False)" &
GEN=$!
bench() {  # name, then bench arguments
  local name=$1; shift
  timeout 200 python3 -m torchdali.bench --num-images $N --data-dir $D --out "$L/$name" --quiet "$@" > "$L/$name.log" 2>&1
  grep -E "^(torchdali|torchvision) +[0-9]|x$|^torchdali epoch" "$L/$name.log" | sed "s/^/$name: /"
}
if [ "$PHASE" = 1 ]; then
  timeout 150 python3 -m pytest -m cuda -q -rs --tb=short -p no:cacheprovider -o faulthandler_timeout=45 \
    tests/test_gpu_loader.py > "$L/pytest_cuda_loader.log" 2>&1; tail -2 "$L/pytest_cuda_loader.log"
  timeout 200 python3 -m pytest -m cuda -q -rs --tb=short -p no:cacheprovider -o faulthandler_timeout=45 \
    --ignore=tests/test_gpu_loader.py tests > "$L/pytest_cuda_rest.log" 2>&1; tail -2 "$L/pytest_cuda_rest.log"
  wait $GEN
  for R in train val; do
    bench $R --batch-size 256 --workers $W --recipe $R --epochs 3 --warmup 1
  done
  TORCHDALI_STAGING_RING=0 bench ring_off --only torchdali --batch-size 256 --workers $W --epochs 3 --warmup 1
elif [ "$PHASE" = 3 ]; then
  timeout 200 python3 -m pytest -m cuda -q -rs --tb=short -p no:cacheprovider -o faulthandler_timeout=45 \
    tests > "$L/pytest_cuda.log" 2>&1; tail -2 "$L/pytest_cuda.log"
  wait $GEN
  for R in train val; do
    bench $R --batch-size 256 --workers $W --recipe $R --epochs 3 --warmup 1
  done
  timeout 150 python3 benchmarks/profile_decode.py $D/synthetic-$N > "$L/profile_decode.log" 2>&1; tail -16 "$L/profile_decode.log"
  timeout 90 python3 benchmarks/kernel_bandwidth.py --sweep --json "$L/kernel.json" > "$L/kernel.log" 2>&1; tail -14 "$L/kernel.log"
else
  timeout 280 python3 -m pytest -m cuda -q -rs --tb=short -p no:cacheprovider -o faulthandler_timeout=45 \
    tests > "$L/pytest_cuda.log" 2>&1; tail -2 "$L/pytest_cuda.log"
  wait $GEN
  for w in 2 4 8; do bench sweep_w$w --only torchdali --batch-size 256 --workers $w --epochs 2 --warmup 1; done
  for b in 64 128 512; do bench sweep_b$b --only torchdali --batch-size $b --workers $W --epochs 2 --warmup 1; done
  timeout 150 python3 benchmarks/memory_ttfb.py $D/synthetic-$N > "$L/memory_ttfb.log" 2>&1; tail -12 "$L/memory_ttfb.log"
  timeout 120 python3 benchmarks/profile_decode.py $D/synthetic-$N > "$L/profile_decode.log" 2>&1; tail -12 "$L/profile_decode.log"
  timeout 90 python3 benchmarks/kernel_bandwidth.py --json "$L/kernel.json" > "$L/kernel.log" 2>&1; tail -12 "$L/kernel.log"
fi
tar czf "$OUT/phase$PHASE.tgz" -C "$OUT" logs
