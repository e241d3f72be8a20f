"""bench/gpu/bench_gpu.py on a tiny config on this CPU: the JAX worker trains and predicts with
our model without TensorFlow, and the report carries the figures (the GPU figures themselves
come from a GPU host: docs/BENCHMARKS.md); its kernel profile reads a GPU's trace."""

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
  proc = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--budget_s", "300",
                         "--prng=rbg", "--profile_steps=2"],
                        capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  report = json.loads(proc.stdout.strip().splitlines()[-1])
  assert report["tiny"] is True
  train, infer = report["figures"]["ours_train_tiny_32"], report["figures"]["ours_infer_tiny_32"]
  assert "error" not in train and "error" not in infer, (train, infer)
  assert train["seq_per_s"] > 0 and infer["seq_per_s"] > 0
  assert train["first_loss"] > 0 and train["tflops"] > 0
  # --prng=rbg: JAX's rbg generator drew the dropout masks (modeling._jax_key), and the
  # profile of 2 more steps has kernel times in it
  assert train["prng"] == "rbg"
  for record in (train, infer):
    assert record["profile"]["steps"] == 2 and record["profile"]["busy_ms"] > 0, record
    assert record["profile"]["top"] and record["profile"]["kinds_ms"]
  assert "profile ours train tiny 32: kernels" in proc.stdout
  hf = report["figures"]["hf_train_tiny_32"]
  if importlib.util.find_spec("transformers") and importlib.util.find_spec("torch"):
    assert "seq_per_s" in hf, hf
  else:
    assert "not installed" in hf["error"]


def test_kernel_profile_reads_the_device_streams(tmp_path):
  """kernel_profile sums a Perfetto trace's kernels on a GPU's streams only (not the host's
  threads, nor the device's derived lines, which repeat the same time), per step, by kind."""
  sys.path.insert(0, str(SCRIPT.parent))
  import gzip
  import kernel_profile
  events = [
      {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
      {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
      {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
      {"ph": "M", "name": "thread_name", "pid": 2, "tid": 7, "args": {"name": "Stream #7"}},
      {"ph": "M", "name": "thread_name", "pid": 2, "tid": 9, "args": {"name": "XLA Ops"}},
      {"ph": "X", "name": "PjitFunction(step)", "pid": 1, "tid": 1, "dur": 9000.0},
      {"ph": "X", "name": "fusion.3", "pid": 2, "tid": 9, "dur": 5000.0}]
  for _ in range(2):  # two steps
    events += [
        {"ph": "X", "name": "nvjet_hsh_256x128_gemm", "pid": 2, "tid": 7, "dur": 3000.0},
        {"ph": "X", "name": "nvjet_hsh_256x128_gemm", "pid": 2, "tid": 7, "dur": 1000.0},
        {"ph": "X", "name": "loop_multiply_fusion", "pid": 2, "tid": 7, "dur": 500.0},
        {"ph": "X", "name": "input_reduce_fusion", "pid": 2, "tid": 7, "dur": 250.0},
        {"ph": "X", "name": "cudnn_sdpa_flash_fprop_wgmma", "pid": 2, "tid": 7, "dur": 250.0}]
  path = tmp_path / "perfetto_trace.json.gz"
  with gzip.open(path, "wt") as f:
    json.dump({"traceEvents": events}, f)
  summary = kernel_profile.summarize(kernel_profile.perfetto_totals(str(path)), steps=2)
  assert summary["busy_ms"] == 5.0
  assert summary["kinds_ms"] == {"matmul": 4.0, "elementwise": 0.5, "reduce": 0.25,
                                 "attention": 0.25}
  assert summary["top"][0] == ["nvjet_hsh_256x128_gemm", 4.0, 2.0]
  lines = kernel_profile.format_summary("ours", summary, step_ms=10.0)
  assert lines[0] == "ours: kernels 5.0 ms a step of 10.0 ms timed (50% busy)"
