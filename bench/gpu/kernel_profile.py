"""Where a step's device time goes, for bench_gpu.py's --profile_steps: the time of each kernel
over a few steps, from JAX's profiler (its Perfetto trace) or PyTorch's, summed by name and grouped
into kinds (matmul, fused attention, random bits, copies, reductions, other element-wise).

Read the kinds as leads, not as a ledger: XLA names its fusions after their root op, so the
random bits of JAX's threefry generator land in "elementwise" (bench_gpu.py's --prng=rbg
measures them by difference), and a softmax fusion may land in "reduce".
"""

import collections
import glob
import gzip
import json
import os
import re
import shutil
import tempfile

# (kind, pattern), the first match wins: cuDNN's attention kernels also say "gemm"/"wgmma".
KINDS = [("attention", r"flash|fmha|attention|sdpa"),
         ("matmul", r"gemm|xmma|cutlass|cublas|nvjet|wgmma|matmul|sm\d\d_|\bdot"
                    r"|aten::(addmm|mm|bmm|baddbmm|linear)$"),
         ("rng", r"rng|philox|threefry|random"),
         ("copy", r"copy|transpose|memcpy|memset"),
         ("reduce", r"reduce|reduction|softmax|norm")]


def kind(name):
  lowered = name.lower()
  for label, pattern in KINDS:
    if re.search(pattern, lowered):
      return label
  return "elementwise"


def summarize(totals, steps, top=15):
  """totals {kernel name: [microseconds, calls]} over `steps` steps -> a per-step summary:
  busy_ms (the kernels' time summed), kinds_ms {kind: ms}, top [[name, ms, calls], ...].
  No kernels at all is a ValueError (a profile of nothing is no figure)."""
  if not totals or steps < 1:
    raise ValueError("the profiler recorded no kernels over %d steps" % steps)
  kinds = collections.Counter()
  for name, (micros, _) in totals.items():
    kinds[kind(name)] += micros
  ranked = sorted(totals.items(), key=lambda item: -item[1][0])[:top]
  return {"steps": steps,
          "busy_ms": round(sum(m for m, _ in totals.values()) / 1e3 / steps, 3),
          "kinds_ms": {k: round(v / 1e3 / steps, 3) for k, v in kinds.most_common()},
          "top": [[name[:100], round(m / 1e3 / steps, 3), round(n / steps, 1)]
                  for name, (m, n) in ranked]}


def perfetto_totals(path, platform):
  """{name: [microseconds, calls]} of the complete events of a Perfetto trace (.json.gz) on
  the device's kernel streams: on a GPU its "Stream #N..." threads (not its derived lines,
  such as "XLA Ops", which repeat the same time); on a CPU the host's XLA threads, whose
  events nest (a loop holds its body), so that the sum counts some time twice. A GPU trace
  without a device (the profiler could not load CUPTI) is a ValueError."""
  with gzip.open(path, "rt") as f:
    data = json.load(f)
  events = data["traceEvents"] if isinstance(data, dict) else data
  processes, threads = {}, {}
  for e in events:
    if e.get("ph") == "M" and e.get("name") == "process_name":
      processes[e["pid"]] = e["args"].get("name", "")
    elif e.get("ph") == "M" and e.get("name") == "thread_name":
      threads[(e["pid"], e["tid"])] = e["args"].get("name", "")
  if platform == "cpu":
    wanted = {key for key, name in threads.items() if "xla" in name.lower()}
  else:
    devices = {pid for pid, name in processes.items() if "/device:" in name}
    wanted = {key for key, name in threads.items()
              if key[0] in devices and name.lower().startswith("stream")}
    if not wanted:
      raise ValueError("the trace has no kernel stream of a device (was CUPTI loaded?)")
  totals = collections.defaultdict(lambda: [0.0, 0])
  for e in events:
    if (e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in wanted
        and not e.get("name", "").startswith("ThunkExecutor")):  # a CPU's wrapper of the rest
      total = totals[e.get("name", "?")]
      total[0] += float(e.get("dur", 0.0))
      total[1] += 1
  return dict(totals)


def jax_profile(jax, step, sync, steps, platform):
  """Calls step() `steps` times, then sync(), under JAX's profiler: summarize()'s dict."""
  folder = tempfile.mkdtemp(prefix="bench_gpu_trace_")
  try:
    with jax.profiler.trace(folder, create_perfetto_trace=True):
      for _ in range(steps):
        step()
      sync()
    paths = glob.glob(os.path.join(folder, "**", "perfetto_trace.json.gz"), recursive=True)
    if not paths:
      return {"error": "the profiler wrote no Perfetto trace"}
    return summarize(perfetto_totals(paths[0], platform), steps)
  finally:
    shutil.rmtree(folder, ignore_errors=True)


def torch_profile(torch, step, sync, steps, device):
  """As jax_profile, with PyTorch's profiler: the CUDA kernels' own time on a GPU, the
  operators' own CPU time otherwise."""
  activities = [torch.profiler.ProfilerActivity.CPU]
  if device == "cuda":
    activities.append(torch.profiler.ProfilerActivity.CUDA)
  with torch.profiler.profile(activities=activities) as profiler:
    for _ in range(steps):
      step()
    sync()
  totals = {}
  for event in profiler.key_averages():
    if device == "cuda":
      # the kernels themselves: an operator's row also carries its kernels' time, and a
      # user annotation (Optimizer.step#...) spans others
      if (event.device_type != torch.autograd.DeviceType.CUDA
          or getattr(event, "is_user_annotation", False)):
        continue
      micros = getattr(event, "self_device_time_total", None)
      if micros is None:
        micros = getattr(event, "self_cuda_time_total", 0)
    else:
      micros = event.self_cpu_time_total
    if micros > 0:
      totals[event.key] = [float(micros), int(event.count)]
  return summarize(totals, steps)


def format_summary(label, summary, step_ms=None):
  """A few lines for bench_gpu.py's table."""
  if "error" in summary:
    return ["%s: profile failed: %s" % (label, summary["error"])]
  busy = summary["busy_ms"]
  head = "%s: kernels %.1f ms a step" % (label, busy)
  if step_ms:
    head += " of %.1f ms timed (%.0f%% busy)" % (step_ms, 100.0 * busy / step_ms)
  kinds = ", ".join("%s %.1f (%.0f%%)" % (k, v, 100.0 * v / busy if busy else 0)
                    for k, v in summary["kinds_ms"].items())
  lines = [head, "    by kind (ms): " + kinds]
  for name, ms, calls in summary["top"][:8]:
    lines.append("    %8.2f ms %6.1fx  %s" % (ms, calls, name[:80]))
  return lines
