#!/usr/bin/env bash
# GPU-machine calls after DALI is installed (../shared/dali/pack.sh, then install.sh in three
# back-to-back calls carrying .dali/c1, .dali/c2, .dali/c3), each under the 10-minute call limit:
#   STEP=tests OUT=$OUT bash benchmarks/gpu_recipes.sh   # also starts the photo folder in /tmp
#   STEP=bench OUT=$OUT bash benchmarks/gpu_recipes.sh
#   STEP=soak OUT=$OUT bash benchmarks/gpu_recipes.sh    # 50 epochs, 1% bad files, then Ctrl-C
#   STEP=decode OUT=$OUT bash benchmarks/gpu_recipes.sh  # the decoder and the kernel alone (RGB and planar),
#                                                        # and the fuzz corpus per backend
#   STEP=pytest OUT=$OUT bash benchmarks/gpu_recipes.sh  # `pytest -m cuda` as two concurrent runs (the
#                                                        # hostile/loader files and the rest); starts the photos
#   STEP=verify OUT=$OUT bash benchmarks/gpu_recipes.sh  # one call: STEP=pytest, then the soak on 8192
#                                                        # photographs and the decoder alone
# tests: `pytest -m cuda` on this tree (the kernels natively: slot ops, finish, interpolation,
#    warps, policies, batch transforms, hostile inputs) and the per-op parity table against
#    torchvision (benchmarks/parity_table.py);
# bench: the recipes through torchdali, DALI and torchvision's DataLoader on photographs at
#    ImageNet's statistics (benchmarks/recipes.py), at the ResNet-50 sizes: plain RRC 224 and
#    val (Resize 256, CenterCrop 224) three ways, torchvision's reference recipe
#    (TrivialAugmentWide, RandomErasing 0.1, MixUp/CutMix) against DALI, then plain and val
#    on 3 CPU cores (taskset -c 0-2) against DALI with 3 threads.
# soak: benchmarks/soak.py on 8192 of the photographs plus 1% bad files.
# The photo folder is made in its own session (setsid), so it outlives the call that starts it
# while the machine stays warm. Logs land in $OUT/logs.
set -uo pipefail
OUT=${OUT:-gpu_out}; N=${N:-16384}; EPOCHS=${EPOCHS:-4}; L=$OUT/logs; mkdir -p "$L"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
W=$(nproc); D=/tmp/torchdali_photos-$N
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; echo "cpus $W"
  python3 -c "import torch, torchvision, triton; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'triton', triton.__version__)"
  python3 -c "import nvidia.dali as d; print('dali', d.__version__)" 2>&1 | tail -1
  echo "tree $(git rev-parse --short HEAD 2>/dev/null)"; } | tee "$L/env.txt"
[ "${STEP:-tests}" = verify ] && D=/tmp/torchdali_photos-8192 && N=8192
# "[p]hoto": the pattern must not match a command line that quotes it (a caller's bash -c)
if [ ! -f "$D/stats.json" ] && ! pgrep -f "[p]hoto_folder.py" > /dev/null; then
  setsid nohup python3 benchmarks/photo_folder.py "$D" --num-images $N --quiet > /tmp/photos.log 2>&1 < /dev/null &
fi
if [ "${STEP:-tests}" = tests ]; then
  timeout 480 python3 -m pytest -m cuda -q -rs --tb=short -p no:cacheprovider -o faulthandler_timeout=240 \
    tests > "$L/pytest_cuda.log" 2>&1; tail -3 "$L/pytest_cuda.log"
  timeout 60 python3 benchmarks/parity_table.py --markdown > "$L/parity.md" 2>&1; tail -3 "$L/parity.md"
elif [ "${STEP:-tests}" = pytest ] || [ "${STEP:-tests}" = verify ]; then
  HOSTILE="tests/test_gpu_hostile.py tests/test_gpu_loader.py"
  PT="python3 -m pytest -m cuda -q -rs --tb=short -p no:cacheprovider --durations=10 -o faulthandler_timeout=300"
  timeout 360 $PT $HOSTILE > "$L/pytest_cuda_a.log" 2>&1 & A=$!
  timeout 360 $PT -s tests $(for f in $HOSTILE; do echo --ignore=$f; done) > "$L/pytest_cuda_b.log" 2>&1 & B=$!
  wait $A; wait $B; tail -n 1 "$L/pytest_cuda_a.log" "$L/pytest_cuda_b.log"
  grep -h "^FAILED\|^ERROR\|within 1" "$L"/pytest_cuda_?.log
  # a failure under the two runs' load, again alone
  F=$(grep -h "^FAILED" "$L"/pytest_cuda_?.log | sed 's/^FAILED \([^ ]*\).*/\1/' | head -4)
  [ -n "$F" ] && timeout 120 $PT $F > "$L/pytest_cuda_again.log" 2>&1; [ -n "$F" ] && tail -n 1 "$L/pytest_cuda_again.log"
fi
if [ "${STEP:-tests}" = verify ]; then
  while pgrep -f "[p]hoto_folder.py" > /dev/null; do sleep 2; done; tail -1 /tmp/photos.log
  timeout 200 python3 benchmarks/soak.py "$D" --images $N --epochs 50 --workers $W --out "$L" 2>&1 | tail -15 | tee "$L/soak.log"
  # the decoder alone on the same photographs, if the call has time left
  timeout 120 python3 benchmarks/profile_decode.py "$D" --batches 4 2>&1 | grep -v "^\[" > "$L/profile_decode.log"
  tail -25 "$L/profile_decode.log"
elif [ "${STEP:-tests}" != pytest ]; then
  while pgrep -f "[p]hoto_folder.py" > /dev/null; do sleep 2; done; tail -2 /tmp/photos.log
fi
if [ "${STEP:-tests}" = decode ]; then
  timeout 300 python3 benchmarks/profile_decode.py "$D" 2>&1 | grep -v "^\[" | tee "$L/profile_decode.log"
  timeout 120 python3 benchmarks/kernel_bandwidth.py --json "$L/kernel_bandwidth.json" 2>&1 | tee "$L/kernel_bandwidth.log"
  timeout 240 python3 benchmarks/fuzz_nvjpeg.py --out "$L" 2>&1 | grep -v "^\[" | tee "$L/fuzz_nvjpeg.log"
elif [ "${STEP:-tests}" = soak ]; then
  timeout ${SOAK_TIMEOUT:-560} python3 benchmarks/soak.py "$D" --images ${SOAK_IMAGES:-8192} --epochs 50 --workers $W --out "$L" \
    2>&1 | tail -n 12 | tee "$L/soak.log"
elif [ "${STEP:-tests}" = bench ]; then
  # the ResNet-50 sizes (RRC 224, Resize 256 + CenterCrop 224); BENCH_ARGS adds to every run
  NOISE="nvjpeg2k\|nvtiff\|nvJPEG2000\|nvTIFF\|Deprecat\|operator was\|_handle_op"
  R="python3 benchmarks/recipes.py $D --epochs $EPOCHS --size 224 --val-resize 256 ${BENCH_ARGS:-}"
  timeout 300 $R --workers $W --recipes plain,val --variants core,nopin,hw1 --cpu-shares 0.1 --out "$L/train_val" 2>&1 \
    | grep -v "$NOISE" | tee "$L/recipes.log"
  timeout 120 $R --workers $W --recipes reference --systems torchdali,dali --variants "" --cpu-shares "" \
    --out "$L/reference" 2>&1 | grep "img/s\|ERROR" | tee -a "$L/recipes.log"
  # 3 CPU cores per GPU: the whole process tree on cores 0-2, 3 workers against DALI's 3 threads
  timeout 150 taskset -c 0-2 $R --workers 3 --dali-threads 3 --recipes plain,val --systems torchdali,dali \
    --variants "" --cpu-shares "" --out "$L/cores3" 2>&1 | grep "img/s\|ERROR" | tee "$L/recipes_cores3.log"
fi
