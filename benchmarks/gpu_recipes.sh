#!/usr/bin/env bash
# One GPU-machine call after DALI is installed (../shared/dali/pack.sh, then install.sh in three
# back-to-back calls carrying .dali/c1, .dali/c2, .dali/c3):
#   OUT=$OUT bash benchmarks/gpu_recipes.sh
# 1. `pytest -m cuda` on this tree (the kernels natively: slot ops, finish, interpolation, warps,
#    policies, batch transforms, hostile inputs);
# 2. the per-op parity table against torchvision (benchmarks/parity_table.py);
# 3. the recipes through torchdali, DALI and torchvision's DataLoader on photographs at
#    ImageNet's statistics (benchmarks/recipes.py): plain RRC 176, torchvision's reference
#    recipe (TrivialAugmentWide, RandomErasing 0.1, MixUp/CutMix), and val.
# Logs land in $OUT/logs.
set -uo pipefail
OUT=${OUT:-gpu_out}; N=${N:-16384}; EPOCHS=${EPOCHS:-4}; L=$OUT/logs; mkdir -p "$L"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
W=$(nproc); D=/tmp/torchdali_photos-$N
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; echo "cpus $W"
  python3 -c "import torch, torchvision, triton; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'triton', triton.__version__)"
  python3 -c "import nvidia.dali as d; print('dali', d.__version__)" 2>&1 | tail -1
  echo "tree $(git rev-parse --short HEAD 2>/dev/null)"; } | tee "$L/env.txt"
python3 benchmarks/photo_folder.py "$D" --num-images $N --quiet > "$L/photos.log" 2>&1 &
GEN=$!
timeout 300 python3 -m pytest -m cuda -q -rs --tb=short -p no:cacheprovider -o faulthandler_timeout=120 \
  tests > "$L/pytest_cuda.log" 2>&1; tail -3 "$L/pytest_cuda.log"
timeout 120 python3 benchmarks/parity_table.py --markdown > "$L/parity.md" 2>&1; tail -5 "$L/parity.md"
wait $GEN; tail -2 "$L/photos.log"
timeout 420 python3 benchmarks/recipes.py "$D" --workers $W --epochs $EPOCHS --out "$L" 2>&1 | tee "$L/recipes.log"
