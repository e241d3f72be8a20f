"""Which Keras 3 backend runs the model (tensorflow, jax or torch), known before Keras is
imported, and TensorFlow imported (quietly) only where it is that backend.

modeling.py and optimization.py are written in Keras ops and run on every backend. Under the
TensorFlow backend a few steps keep a TensorFlow op that Keras ops do not express (the dropout
seed of each tf.distribute replica, BiasAdd for grappler's MatMul fusion, skip_padding's
data-dependent gather, XLA-compiled optimizer updates); they import TensorFlow through
`tensorflow()` here, which is None on the other backends, so that importing the model on JAX
or PyTorch imports no TensorFlow.

Keras reads its backend once, at its import, from KERAS_BACKEND or else the "backend" of
$KERAS_HOME/keras.json (~/.keras/keras.json); `name()` reads the same places (or asks Keras
when it is already imported).
"""

import json
import os
import sys

BACKENDS = ("tensorflow", "jax", "torch")


def name():
  """The Keras backend's name: "tensorflow", "jax", "torch" (or another Keras knows)."""
  keras = sys.modules.get("keras")
  if keras is not None and hasattr(keras, "backend"):
    return keras.backend.backend()
  if os.environ.get("KERAS_BACKEND"):
    return os.environ["KERAS_BACKEND"]
  home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
  try:
    with open(os.path.join(home, "keras.json")) as f:
      return json.load(f).get("backend", "tensorflow")
  except (OSError, ValueError, AttributeError):
    return "tensorflow"


def is_tensorflow():
  """Whether Keras runs on TensorFlow."""
  return name() == "tensorflow"


def tensorflow():
  """The tensorflow module (imported without its start-up noise) under the TensorFlow
  backend; None under any other."""
  if not is_tensorflow():
    return None
  if "tensorflow" not in sys.modules:
    from bert_keras.utils import quiet_tensorflow  # noqa: F401  (imports it quietly)
  return sys.modules["tensorflow"]


def require_tensorflow(what):
  """The tensorflow module whatever the backend, for `what` (a phrase: "reading a TF1
  checkpoint") that needs TensorFlow itself; a one-line ValueError when it is not installed."""
  try:
    if "tensorflow" not in sys.modules:
      from bert_keras.utils import quiet_tensorflow  # noqa: F401
    return sys.modules["tensorflow"]
  except ImportError:
    raise ValueError("%s needs TensorFlow, which is not installed here (pip install "
                     "tensorflow, or use a HuggingFace / safetensors copy of the weights: "
                     "convert_checkpoint.py writes one)" % what) from None


# Under TensorFlow, TensorFlow (which imports Keras) first, quietly, as the scripts always have.
if is_tensorflow():
  tensorflow()
