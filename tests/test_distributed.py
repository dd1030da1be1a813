"""torchrun and Lightning DDP on the CPU (gloo), two processes each."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from torch.utils.data.distributed import DistributedSampler

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def _load(out, n=2):
    return [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(n)]


def test_torchrun_two_processes_cover_every_index_once_and_reshuffle(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(HERE, "_dist_worker.py"), str(tmp_path)]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = _load(tmp_path)
    n = 29
    for epoch in range(2):
        per_rank = [r["epochs"][epoch] for r in ranks]
        # DistributedSampler pads to a multiple of the world size by repeating indices
        expected = [None, None]
        for k in range(2):
            s = DistributedSampler(range(n), num_replicas=2, rank=k, shuffle=True, seed=5)
            s.set_epoch(epoch)
            expected[k] = list(s)
            assert per_rank[k] == expected[k]
        union = per_rank[0] + per_rank[1]
        assert sorted(set(union)) == list(range(n))
        assert len(union) == 30  # 29 padded to 30, exactly as torch pads
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # set_epoch reshuffles
    assert ranks[0]["len"] == 4  # ceil(15 / 4)
    for r in ranks:  # mid-epoch state_dict/load_state_dict per rank, num_workers 0 and 2
        assert r["resume_ok_w0"] and r["resume_ok_w2"]


def test_lightning_ddp_with_user_datamodule_returning_torchdali_loader(tmp_path):
    pytest.importorskip("lightning")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "_lightning_worker.py"), str(tmp_path)],
                          env=_env(), capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = _load(tmp_path)
    for r in ranks:  # Lightning re-created our loader with a DistributedSampler, keeping our arguments
        assert r["loader"]["type"] == "DataLoader" and r["loader"]["sampler"] == "DistributedSampler"
        assert r["loader"]["seed"] == 1 and "channels_last" in r["loader"]["memory_format"]
    a, b = set(ranks[0]["seen"]), set(ranks[1]["seen"])
    assert not (a & b)
    assert a | b == set(range(26))
