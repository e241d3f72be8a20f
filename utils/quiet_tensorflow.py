"""Imports TensorFlow without its start-up noise on a machine that has no GPU.

TensorFlow 2.21 prints, before its logging is set up (so TF_CPP_MIN_LOG_LEVEL cannot hide
them), lines such as "oneDNN custom operations are on", "Could not find cuda drivers" and, on
the first operation, "E0000 ... failed call to cuInit: ... CUDA error". Importing this module
first (the scripts do, as their first import) imports TensorFlow and initialises its devices
with file descriptor 2 pointed at a temporary file, then writes back every line that is not
one of those, so real errors are still shown. Set BERT_KERAS_TF_NOISE=1 to see everything.

On a machine with an NVIDIA device node the CUDA lines are real news and are kept.
TensorFlow's C++ INFO lines during a run ("TFRecordDataset `buffer_size` is unspecified", ...)
are hidden by TF_CPP_MIN_LOG_LEVEL=1, set here when the environment does not set it (its
warnings and errors still show; TF_CPP_MIN_LOG_LEVEL=0 shows everything).
"""

import contextlib
import os
import re
import sys
import tempfile

_NOISE = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called"
    r"|oneDNN custom operations are on"
    r"|cpu_feature_guard\.cc"
    r"|^To enable the following instructions: "
    r"|Unable to register cu(DNN|FFT|BLAS) factory"
    r"|computation placer already registered"
    r"|TF-TRT Warning"
    r"|cudart_stub\.cc.*Could not find cuda drivers"
    r"|failed call to cuInit")


def _has_nvidia_device():
  return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia")


@contextlib.contextmanager
def quietly():
  """Runs its body (an import of TensorFlow, or of a library that loads TensorFlow's shared
  objects again, like tensorflow_text) with fd 2 captured; writes back what is not start-up
  noise. Does nothing where an NVIDIA device node exists or with BERT_KERAS_TF_NOISE=1."""
  if os.environ.get("BERT_KERAS_TF_NOISE") == "1" or _has_nvidia_device():
    yield
    return
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as capture:
    os.dup2(capture.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      capture.seek(0)
      lines = capture.read().decode("utf-8", "replace").splitlines(keepends=True)
      sys.stderr.write("".join(line for line in lines if not _NOISE.search(line)))
      sys.stderr.flush()


# TensorFlow's lines during a run that are no error of ours: tf.data's generator datasets
# (which tf.distribute wraps around every input), the end of an iterator, and oneDNN's note
# on a CPU without AVX-512 at the first op of a type it leaves to Eigen (an E-level line of
# tensorflow/core/util/util.cc: "oneDNN supports DT_INT64 only on platforms with AVX-512.
# Falling back to the default Eigen-based implementation if present.", DT_BOOL and DT_HALF
# alike; the model's int64 inputs print it). Dropped by filter_run_noise with their indented
# continuation lines ("\t [[{{node IteratorGetNext}}]]").
RUN_NOISE = (r"GeneratorDatasetOp::Dataset will not be optimized"
             r"|Error occurred when finalizing GeneratorDataset iterator"
             r"|Local rendezvous is aborting with status: (OUT_OF_RANGE|CANCELLED)"
             r"|Local rendezvous (recv|send) item cancelled"
             r"|oneDNN supports DT_[A-Z0-9]+ only on platforms with AVX-512\. Falling back to "
             r"the default Eigen-based implementation")

# The filter process: fd 0 (what the script writes to fd 2) to fd 1 (the real stderr), line
# by line, less the lines matching argv[1]; a partial line that cannot be a TensorFlow log
# line (a progress line rewritten in place: "\r", or not starting as TensorFlow's lines do with
# I, W, E, F or a date) is passed on at once.
_FILTER = r"""
import os, re, sys
noise = re.compile(sys.argv[1].encode())
pending, dropping, passing = b"", False, False
while True:
  try:
    chunk = os.read(0, 65536)
  except OSError:
    chunk = b""
  if not chunk:
    break
  pending += chunk
  out = []
  while pending:
    end = pending.find(b"\n")
    if end < 0:
      if passing or b"\r" in pending or pending[:1] not in b"IWEF0123456789":
        out.append(pending)
        pending, passing = b"", True
      break
    line, pending = pending[:end + 1], pending[end + 1:]
    if passing:
      out.append(line)
      passing = False
    elif noise.search(line):
      dropping = True
    elif not (dropping and line[:1] in b" \t" and b"[[{{" in line):
      dropping = False
      out.append(line)
  if out:
    os.write(1, b"".join(out))
if pending:
  os.write(1, pending)
"""


def filter_run_noise():
  """From now on (a script's run: utils/errors.script_main calls this), the process's fd 2
  goes through a filter process that drops RUN_NOISE lines and writes everything else to the
  real stderr (a terminal stays a terminal: a pseudo-terminal then). The filter is a separate
  process so that nothing written before a crash is lost. Not with BERT_KERAS_TF_NOISE=1.
  The real stderr is restored at exit, once the filter has written everything."""
  if os.environ.get("BERT_KERAS_TF_NOISE") == "1" or _filter[0] is not None:
    return
  import atexit
  import subprocess
  sys.stderr.flush()
  terminal = os.isatty(2)
  read_end, write_end = os.openpty() if terminal else os.pipe()
  if terminal:
    import tty
    tty.setraw(write_end)  # (no "\n" -> "\r\n" translation, no echo)
  saved = os.dup(2)
  try:
    child = subprocess.Popen([sys.executable, "-S", "-E", "-c", _FILTER, RUN_NOISE],
                             stdin=read_end, stdout=saved, close_fds=True)
  except OSError:
    for fd in (read_end, write_end, saved):
      os.close(fd)
    return
  os.close(read_end)
  os.dup2(write_end, 2)
  os.close(write_end)
  _filter[0] = (child, saved)
  atexit.register(_stop_filter)


_filter = [None]  # (the filter process, the real stderr's fd) while filtering


def _stop_filter():
  """Points fd 2 back at the real stderr; waits (at most 5 s) for the filter to write out."""
  if _filter[0] is None:
    return
  child, saved = _filter[0]
  _filter[0] = None
  sys.stderr.flush()
  os.dup2(saved, 2)
  os.close(saved)
  try:
    child.wait(timeout=5)
  except Exception:
    pass


def import_quietly():
  """Imports tensorflow (if not yet imported) and lists its devices, dropping the noise."""
  if "tensorflow" in sys.modules:
    return
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
  with quietly():
    import tensorflow as tf
    tf.config.list_physical_devices()  # the CUDA probe happens here


import_quietly()
