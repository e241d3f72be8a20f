"""bench/gpu/bench_gpu.py on a tiny config on this CPU: the JAX worker trains and predicts with
our model without TensorFlow, and the report carries the figures (the GPU figures themselves
come from a GPU host: docs/BENCHMARKS.md)."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "bench" / "gpu" / "bench_gpu.py"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_tiny_run_on_cpu(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
  env.pop("KERAS_BACKEND", None)
  proc = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--budget_s", "300"],
                        capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  report = json.loads(proc.stdout.strip().splitlines()[-1])
  assert report["tiny"] is True
  train, infer = report["figures"]["ours_train_tiny_32"], report["figures"]["ours_infer_tiny_32"]
  assert "error" not in train and "error" not in infer, (train, infer)
  assert train["seq_per_s"] > 0 and infer["seq_per_s"] > 0
  assert train["first_loss"] > 0 and train["tflops"] > 0
  hf = report["figures"]["hf_train_tiny_32"]
  if importlib.util.find_spec("transformers") and importlib.util.find_spec("torch"):
    assert "seq_per_s" in hf, hf
  else:
    assert "not installed" in hf["error"]
