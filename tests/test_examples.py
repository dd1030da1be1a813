"""The examples and the main job run end to end on the CPU (a few steps each)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args, cwd, timeout=600):
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_train_imagenet_example(tmp_path):
    out = _run([os.path.join(ROOT, "examples", "train_imagenet.py"), "--arch", "resnet18", "--image-size", "64",
                "--batch-size", "4", "--steps", "4", "--warmup-steps", "1", "--workers", "1",
                "--num-images", "24"], cwd=tmp_path)
    assert "images/s" in out and "data wait" in out


def test_lightning_example(tmp_path):
    pytest.importorskip("lightning")
    out = _run([os.path.join(ROOT, "examples", "lightning_train.py"), "--steps", "2", "--batch-size", "4",
                "--image-size", "64", "--workers", "0", "--accelerator", "cpu", "--num-images", "16"], cwd=tmp_path)
    assert "trained 2 steps" in out


def test_external_source_example(tmp_path):
    out = _run([os.path.join(ROOT, "examples", "external_source.py"), "--batches", "2", "--batch-size", "4",
                "--workers", "2", "--device", "cpu"], cwd=tmp_path)
    assert out.count("batch ") >= 2 and "(4, 3, 128, 128)" in out


def test_train_detection_example(tmp_path):
    out = _run([os.path.join(ROOT, "examples", "train_detection.py"), "--device", "cpu", "--steps", "2",
                "--batch-size", "4", "--workers", "0", "--num-images", "8"], cwd=tmp_path)
    losses = [float(line.split()[3]) for line in out.splitlines() if line.startswith("step ")]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), out
    assert "images/s" in out


def test_train_video_example(tmp_path):
    pytest.importorskip("av")
    out = _run([os.path.join(ROOT, "examples", "train_video.py"), "--device", "cpu", "--steps", "2",
                "--batch-size", "2", "--workers", "0", "--num-videos", "4", "--frames", "4"], cwd=tmp_path)
    losses = [float(line.split()[3]) for line in out.splitlines() if line.startswith("step ")]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), out
    assert "clips/s" in out


def test_main_job_bench_on_embedded_dataset(tmp_path):
    out = _run(["-m", "torchdali.bench", "--num-images", "24", "--batch-size", "4", "--epochs", "1",
                "--warmup", "0", "--workers", "1", "--quiet", "--out", str(tmp_path / "o")], cwd=tmp_path)
    assert "torchdali / torchvision images/s" in out
    res = json.load(open(tmp_path / "o" / "results.json"))
    assert set(res["results"]) == {"torchvision", "torchdali"}
    assert res["results"]["torchdali"]["images_per_s"] > 0
    assert (tmp_path / "o" / "bench.png").exists()
