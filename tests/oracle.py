"""The original google-research/bert code (PyPI bert-tensorflow==1.0.4) as a test oracle.

The original is TF1 code. Its tokenization and create_pretraining_data import
`tensorflow.compat.v1` directly and run as they are. Its modeling.py also needs
two things that TF 2.21 with Keras 3 no longer has, supplied here as stand-ins
with the original variable names:
  * `tensorflow.contrib.layers.layer_norm` -> variables `<scope>/beta`, `<scope>/gamma`
    (scope default "LayerNorm"), normalising the last axis, variance epsilon 1e-12;
  * `tf.compat.v1.layers.dense` -> variables `<name>/kernel` [in, out] and `<name>/bias`.
Build the original graph inside `tf.Graph().as_default()` so the rest of the
test process stays in eager mode.

Nothing here is copied from the original; it is only imported and called.
"""

import importlib
import importlib.util
import re
import sys
import types

import pytest


def _layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1, scope=None):
  import tensorflow.compat.v1 as tf1
  with tf1.variable_scope(scope, default_name="LayerNorm"):
    depth = inputs.shape[-1]
    beta = tf1.get_variable("beta", [depth], initializer=tf1.zeros_initializer())
    gamma = tf1.get_variable("gamma", [depth], initializer=tf1.ones_initializer())
    mean, variance = tf1.nn.moments(inputs, [-1], keepdims=True)
    return tf1.nn.batch_normalization(inputs, mean, variance, beta, gamma, 1e-12)


def _dense(inputs, units, activation=None, name=None, kernel_initializer=None, **unused):
  import tensorflow.compat.v1 as tf1
  with tf1.variable_scope(name, default_name="dense"):
    kernel = tf1.get_variable("kernel", [inputs.shape[-1], units],
                              initializer=kernel_initializer)
    bias = tf1.get_variable("bias", [units], initializer=tf1.zeros_initializer())
    outputs = tf1.tensordot(inputs, kernel, [[inputs.shape.ndims - 1], [0]])
    outputs = tf1.nn.bias_add(outputs, bias)
    return activation(outputs) if activation is not None else outputs


def _install_stand_ins():
  import tensorflow.compat.v1 as tf1
  if "tensorflow.contrib" not in sys.modules:
    contrib = types.ModuleType("tensorflow.contrib")
    contrib.layers = types.SimpleNamespace(layer_norm=_layer_norm)
    sys.modules["tensorflow.contrib"] = contrib
  try:
    tf1.layers.dense  # noqa: B018  (Keras 3 makes this attribute raise)
  except Exception:
    tf1.layers = types.SimpleNamespace(dense=_dense)
  else:
    tf1.layers.dense = _dense


def _forget_clashing_flags(module_name):
  """Removes absl flags the original module is about to define again.

  The original scripts define their flags at import, several with the same
  names (input_file, output_dir, ...); absl refuses a second definition, so
  before the first import of a script the names it defines are released.
  """
  from absl import flags
  spec = importlib.util.find_spec("bert." + module_name)
  source = open(spec.origin, encoding="utf-8").read()
  for name in re.findall(r'DEFINE_\w+\(\s*"(\w+)"', source):
    if name in flags.FLAGS:
      delattr(flags.FLAGS, name)


def original(module_name):
  """Returns the original `bert.<module_name>` module, or skips the test if absent."""
  pytest.importorskip("bert.tokenization", reason="bert-tensorflow (the oracle) not installed")
  _install_stand_ins()
  if "bert." + module_name not in sys.modules:
    importlib.import_module("bert.tokenization")  # its flag is shared by all, never redefined
    if module_name != "tokenization":
      _forget_clashing_flags(module_name)
  module = importlib.import_module("bert." + module_name)
  from absl import flags
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  return module


_FLAGS_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
from absl import flags
import oracle
original = oracle.original({name!r})
FLAGS = flags.FLAGS
names = [f.name for f in FLAGS.get_flags_for_module(original.__name__)]
want = {{n: [FLAGS[n].default, type(FLAGS[n]).__name__, FLAGS[n].flag_type()] for n in names}}
for n in names:
  delattr(FLAGS, n)
import importlib
importlib.import_module("bert_keras." + {name!r}).define_flags()
got = {{n: [FLAGS[n].default, type(FLAGS[n]).__name__, FLAGS[n].flag_type()]
        for n in names if n in FLAGS}}
print("FLAGS", json.dumps([want, got]))
"""


def original_and_our_flags(name, env=None):
  """-> (want, got): {flag: [default, class, type]} of the original script `name`'s flags,
  and of ours (bert_keras.<name>.define_flags()) for the same names. Run in a subprocess:
  both define flags of the same names in absl's global registry."""
  import json
  import os
  import subprocess
  tests = os.path.dirname(os.path.abspath(__file__))
  proc = subprocess.run([sys.executable, "-c", _FLAGS_SCRIPT.format(tests=tests, name=name)],
                        env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.split("FLAGS ", 1)[1])
