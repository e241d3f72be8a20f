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


def import_quietly():
  """Imports tensorflow (if not yet imported) and lists its devices, dropping the noise."""
  if "tensorflow" in sys.modules:
    return
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
  with quietly():
    import tensorflow as tf
    tf.config.list_physical_devices()  # the CUDA probe happens here


import_quietly()
