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
  # --prng=rbg trains (the generator's own masks: tests/test_backends.py), and the profile
  # of 2 more steps has kernel times in it
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


def _trace(path, events):
  import gzip
  with gzip.open(path, "wt") as f:
    json.dump({"traceEvents": events}, f)
  return str(path)


def _meta(kind, pid, name, tid=None):
  event = {"ph": "M", "name": kind, "pid": pid, "args": {"name": name}}
  if tid is not None:
    event["tid"] = tid
  return event


def test_kernel_profile_reads_the_device_streams(tmp_path, monkeypatch):
  """kernel_profile sums a Perfetto trace's kernels on a GPU's streams only (not the host's
  threads, nor the device's derived lines or CUPTI's overhead, which repeat or add other
  time), per step, by kind; a GPU trace without a device stream is an error, not host time."""
  monkeypatch.syspath_prepend(str(SCRIPT.parent))
  import kernel_profile
  events = [
      _meta("process_name", 1, "/host:CPU"), _meta("process_name", 2, "/device:GPU:0"),
      _meta("thread_name", 1, "python", 1), _meta("thread_name", 1, "tf_XLAPjRtClient", 2),
      _meta("thread_name", 2, "Stream #7(Kernel,MemcpyH2D,MemcpyD2H)", 7),
      _meta("thread_name", 2, "XLA Ops", 9), _meta("thread_name", 2, "CUPTI overhead", 11),
      {"ph": "X", "name": "PjitFunction(step)", "pid": 1, "tid": 1, "dur": 9000.0},
      {"ph": "X", "name": "fusion.3", "pid": 1, "tid": 2, "dur": 9000.0},
      {"ph": "X", "name": "fusion.3", "pid": 2, "tid": 9, "dur": 5000.0},
      {"ph": "X", "name": "overhead", "pid": 2, "tid": 11, "dur": 700.0}]
  for _ in range(2):  # two steps
    events += [
        {"ph": "X", "name": "nvjet_hsh_256x128_gemm", "pid": 2, "tid": 7, "dur": 3000.0},
        {"ph": "X", "name": "nvjet_hsh_256x128_gemm", "pid": 2, "tid": 7, "dur": 1000.0},
        {"ph": "X", "name": "loop_multiply_fusion", "pid": 2, "tid": 7, "dur": 500.0},
        {"ph": "X", "name": "input_reduce_fusion", "pid": 2, "tid": 7, "dur": 250.0},
        {"ph": "X", "name": "cudnn_sdpa_flash_fprop_wgmma", "pid": 2, "tid": 7, "dur": 250.0}]
  path = _trace(tmp_path / "gpu.json.gz", events)
  summary = kernel_profile.summarize(kernel_profile.perfetto_totals(path, "gpu"), steps=2)
  assert summary["busy_ms"] == 5.0
  assert summary["kinds_ms"] == {"matmul": 4.0, "elementwise": 0.5, "reduce": 0.25,
                                 "attention": 0.25}
  assert summary["top"][0] == ["nvjet_hsh_256x128_gemm", 4.0, 2.0]
  lines = kernel_profile.format_summary("ours", summary, step_ms=10.0)
  assert lines[0] == "ours: kernels 5.0 ms a step of 10.0 ms timed (50% busy)"
  host_only = _trace(tmp_path / "host.json.gz", events[:4] + events[7:9])
  with pytest.raises(ValueError, match="no kernel stream"):
    kernel_profile.perfetto_totals(host_only, "gpu")
  assert kernel_profile.perfetto_totals(host_only, "cpu") == {"fusion.3": [9000.0, 1]}
  idle = _trace(tmp_path / "idle.json.gz", events[:7])  # the streams, none of their kernels
  with pytest.raises(ValueError, match="no kernels"):
    kernel_profile.summarize(kernel_profile.perfetto_totals(idle, "gpu"), steps=2)


@pytest.mark.parametrize("flag, message", [
    ("--runs=train:large", "error: --runs: 'train:large' is not JOB:MODEL:SEQ:BATCH"),
    ("--runs=train:huge:128:8", "error: --runs: 'train:huge:128:8' is not JOB:MODEL:SEQ:BATCH"),
    ("--runs=infer:tiny:32:0", "error: --runs: 'infer:tiny:32:0' is not JOB:MODEL:SEQ:BATCH"),
    ("--runs=train:base:1024:8", "error: --runs: 'train:base:1024:8': SEQ is over 512"),
    ("--profile_steps=-1", "error: --profile_steps=-1: must be >= 0"),
    ("--peers=jax,tf", "error: --peers=jax,tf: tf is none of jax, torch")])
def test_a_wrong_flag_is_one_error_line(flag, message, tmp_path):
  """Before any worker starts: one `error:` line naming the flag, exit 1, no traceback."""
  proc = subprocess.run([sys.executable, str(SCRIPT), flag], capture_output=True, text=True,
                        timeout=60, cwd=tmp_path)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
  assert proc.stderr.startswith(message), proc.stderr
  assert proc.stdout == "" and not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_cudnn_attention_path_with_a_stand_in(tmp_path):
  """The cuDNN path of SelfAttention (JAX, a GPU, bfloat16, inference), with XLA's attention
  standing in for cuDNN on this CPU: the heads' layout and the bias are right (the encoder's
  output equals the path written out within bfloat16's rounding), and bench_gpu's infer run
  times both paths, tracing the stand-in once (for the fused pass only: a second jit of the
  same function would reuse the fused trace) and finding their outputs apart when the
  stand-in is off by 1%."""
  script = """
import sys, numpy as np, jax, keras
sys.path.insert(0, %r)
import bench_gpu
from bert_keras import modeling
from bert_keras.utils import jax_ops
keras.mixed_precision.set_global_policy("mixed_bfloat16")
calls = []
def stand_in(q, k, v, bias, scale=1.0):
  calls.append(q.shape)
  b, s = q.shape[0], q.shape[1]
  bias = jax.numpy.broadcast_to(bias, (b, 1, s, s))
  return jax.nn.dot_product_attention(q, k, v, bias=bias, implementation="xla") * scale
jax_ops.platform = lambda: "gpu"
jax_ops.cudnn_takes = lambda shape, dtype: True
jax_ops.cudnn_attention = stand_in
config = modeling.BertConfig.from_dict({**bench_gpu.COMMON, **bench_gpu.CONFIGS["tiny"]})
model = modeling.BertModel(config)
rng = np.random.RandomState(0)
mask = (np.arange(32)[None] < np.array([[32], [20], [9], [1]])).astype("int32")
inputs = {"input_ids": rng.randint(1, 512, (4, 32)) * mask, "input_mask": mask,
          "segment_ids": np.zeros((4, 32), "int32")}
fused = np.asarray(model(inputs)["sequence_output"], "float32")
assert calls, "the cuDNN path was not taken"
original = modeling.SelfAttention._fused_attention
modeling.SelfAttention._fused_attention = lambda self, training: None
plain = np.asarray(model(inputs)["sequence_output"], "float32")
modeling.SelfAttention._fused_attention = original
assert np.abs(fused - plain).max() < 0.05, np.abs(fused - plain).max()
jax_ops.cudnn_attention = lambda *a: stand_in(*a, scale=1.01)
del calls[:]
class Args: min_time, min_steps, max_steps, profile_steps, compare_attention = 0.0, 2, 2, 0, True
record = bench_gpu._jax_infer(jax, keras, modeling, None, config,
                              bench_gpu._random_batch(rng, 512, 32, 4, "infer"), Args)
assert record["attention"] == "cudnn", record
assert len(calls) == config.num_hidden_layers, calls
assert record["written_out_seq_per_s"] > 0 and record["max_abs_diff_vs_written_out"] > 0.001
print("ok", record["max_abs_diff_vs_written_out"])
""" % str(SCRIPT.parent)
  env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                        timeout=300, cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split()[0] == "ok"
