#!/usr/bin/env bash
# Source trees of torchdali side by side on one GPU machine, alternating, with DALI between
# them: a change is only measured against the tree before it in the same call (machines of
# one kind differ by 12-17%, and one machine drifts between runs).
#
#   TREES="new=$PWD old=/tmp/old" REPS=3 EPOCHS=3 bash benchmarks/ab_trees.sh DATA
#
# Each tree is a checkout (e.g. `git archive REV | tar -x -C /tmp/old`); each rep runs the
# plain and val recipes of every tree's own benchmarks/recipes.py with 16 workers, then
# DALI (from the first tree); then CORES3 reps of the first and last tree and DALI under
# `taskset -c 0-2` with 3 workers, and torchvision once when TV=1. VARIANTS (recipes.py --variants, e.g.
# core) runs those variants of every tree beside its default in each rep, and SHARES (recipes.py
# --cpu-shares, e.g. 0.1) torchdali with those CPU decode shares. Logs and recipes.json files
# go to $OUT/ab (a table of every run with the loader's per-batch executor and nvJPEG times
# at the end).
set -uo pipefail
D=${1:?data folder}; L=${OUT:-ab_out}/ab; mkdir -p "$L"; export PYTHONUNBUFFERED=1
read -r -a TREE <<< "${TREES:?TREES=\"name=dir ...\"}"
A="$D --epochs ${EPOCHS:-3} --size 224 --val-resize 256"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "cpus $(nproc)"
  python3 -c "import torch, torchvision, triton; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'triton', triton.__version__)"
  python3 -c "import nvidia.dali as d; print('dali', d.__version__)" 2>&1 | tail -1; echo "trees ${TREES}"; } | tee "$L/env.txt"
run() { # tag dir systems extra...   (PRE: a command prefix, e.g. taskset)
  local tag=$1 dir=$2 sys=$3; shift 3
  env PYTHONPATH="$dir" ${PRE:-} python3 "$dir/benchmarks/recipes.py" $A --variants "${VARIANTS:-}" --cpu-shares "${SHARES:-}" --recipes plain,val \
    --systems "$sys" --out "$L/$tag" "$@" 2>&1 | grep "img/s\|ERROR\|Error" | grep -v "nvjpeg2k\|nvtiff" \
    | sed "s/^/$tag /" | tee -a "$L/all.log"; }
first=${TREE[0]#*=}; last=${TREE[-1]}
for rep in $(seq 1 "${REPS:-3}"); do
  for t in "${TREE[@]}"; do run "${t%%=*}$rep" "${t#*=}" torchdali --workers 16; done
  run "dali$rep" "$first" dali --workers 16
done
for rep in $(seq 1 "${CORES3:-2}"); do
  PRE="taskset -c 0-2" run "c3${TREE[0]%%=*}$rep" "$first" torchdali,dali --workers 3 --dali-threads 3
  [ ${#TREE[@]} -gt 1 ] && PRE="taskset -c 0-2" run "c3${last%%=*}$rep" "${last#*=}" torchdali --workers 3
done
[ -n "${TV:-}" ] && run tv "$first" torchvision --workers 16
python3 - "$L" <<'PY' | tee "$L/table.txt"
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*", "recipes.json"))):
    tag = os.path.basename(os.path.dirname(f))
    for key, r in json.load(open(f))["results"].items():
        if "images_per_s" not in r:
            continue
        s = r.get("last_epoch_stats") or {}
        per = {k: round(1e3 * s[k] / s["batches"], 2) for k in ("executor_s", "executor_cpu_s", "nvjpeg_s", "launch_s") if k in s}
        if "first_batch_s" in s:  # the last epoch's first batch, ms after iter()
            per["first_ms"] = round(1e3 * s["first_batch_s"], 1)
        if "ran_ahead" in s:  # the last epoch started with batches the one before prepared
            per["ran_ahead"] = s["ran_ahead"]
        print(tag, key, round(r["images_per_s"]), round(r.get("steady_images_per_s") or 0),
              round(r.get("cpu_s_per_1000") or 0, 3), per)
PY
