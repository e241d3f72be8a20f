"""modeling.py and optimization.py on every installed Keras backend against the TensorFlow
backend: the same weights and inputs give every layer, head, loss, schedule value and two
optimizer steps' updated weights within 1e-5; get_config and .keras round trips; importing
them on JAX or PyTorch imports no TensorFlow.

The reference is computed here (this process runs Keras on TensorFlow, whose model the other
test files hold to the original); tests/backend_worker.py computes the same on each other
backend in a subprocess (KERAS_BACKEND=jax / torch). jax (CPU) is in the test extra; torch is
not: its cases skip unless it is installed (pip install torch, CPU wheel, then run this file).
"""

import importlib.util
import json
import os
import subprocess
import sys
import types

import keras
import numpy as np
import pytest

from bert_keras import modeling, optimization
import backend_worker

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = [pytest.param(name, marks=pytest.mark.skipif(
    importlib.util.find_spec(name) is None, reason=f"{name} is not installed"))
    for name in ("jax", "torch")]
CONFIG = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=37, max_position_embeddings=16, type_vocab_size=2)


def _case(tmp_path_factory):
  """The case file (weights, inputs, loss arguments) and the TensorFlow results."""
  rng = np.random.RandomState(0)
  config = modeling.BertConfig.from_dict(CONFIG)
  case = {"config": np.array(json.dumps(config.to_dict()))}
  models = backend_worker.build_models(modeling, config)
  for name, model in models.items():
    # random weights (LayerNorm and biases too), so that no term is a zero or a one
    weights = [rng.normal(0, 0.3, w.shape).astype("float32") for w in model.get_weights()]
    model.set_weights(weights)
    for i, w in enumerate(model.get_weights()):
      case["weights/%s/%d" % (name, i)] = w
  b, s, p = 3, 12, 3
  mask = (np.arange(s)[None] < np.array([[12], [7], [3]])).astype("int32")
  inputs = {"input_ids": rng.randint(1, 99, (b, s)).astype("int32") * mask,
            "input_mask": mask,
            "segment_ids": ((np.arange(s)[None] >= 4) * mask).astype("int32"),
            "masked_lm_positions": np.array([[1, 2, 5], [0, 3, 6], [1, 2, 0]], "int32"),
            "masked_lm_ids": rng.randint(1, 99, (b, p)).astype("int32"),
            "masked_lm_weights": np.array([[1, 1, 1], [1, 1, 0], [1, 1, 0]], "float32"),
            "next_sentence_labels": np.array([[0], [1], [1]], "int32")}
  for key, value in inputs.items():
    case["inputs/" + key] = value
  logits = lambda *shape: rng.normal(0, 3, shape).astype("float32")
  loss_args = {
      "masked_lm_per_position_loss": [logits(b, p, 99), inputs["masked_lm_ids"]],
      "next_sentence_per_example_loss": [logits(b, 2), inputs["next_sentence_labels"]],
      "masked_lm_loss": [logits(b, p, 99), inputs["masked_lm_ids"],
                         inputs["masked_lm_weights"]],
      "next_sentence_loss": [logits(b, 2), inputs["next_sentence_labels"]],
      "classifier_loss": [logits(b, 3), np.array([0, 2, 1], "int32")],
      "multi_label_loss": [logits(b, 4), (rng.rand(b, 4) > 0.5).astype("float32")],
      "multi_label_loss_weighted": [logits(b, 4), (rng.rand(b, 4) > 0.5).astype("float32"),
                                    np.array([0.5, 1.0, 2.0, 4.0], "float32")],
      "token_classifier_loss": [logits(b, s, 5),
                                rng.randint(-1, 5, (b, s)).astype("int32")],
      "squad_loss": [logits(b, s), logits(b, s), np.array([1, 11, 40], "int32"),
                     np.array([2, 0, 3], "int32")],
      "pretrainer_weights": models["pretrainer"].get_weights(),
  }
  for name, args in loss_args.items():
    for i, arg in enumerate(args):
      case["losses/%s/%d" % (name, i)] = arg
  path = str(tmp_path_factory.mktemp("backends") / "case.npz")
  np.savez(path, **case)
  reference = backend_worker.compute(keras, modeling, optimization, config, dict(np.load(path)))
  return path, reference


@pytest.fixture(scope="module")
def case(tmp_path_factory):
  assert keras.backend.backend() == "tensorflow"
  return _case(tmp_path_factory)


def _run_worker(backend, case_path, tmp_path):
  results = str(tmp_path / ("%s.npz" % backend))
  env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2",
             CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, os.path.join(HERE, "backend_worker.py"), case_path,
                         results], env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return dict(np.load(results))


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_same_numbers_as_tensorflow(backend, case, tmp_path):
  case_path, reference = case
  results = _run_worker(backend, case_path, tmp_path)
  assert str(results["backend"]) == backend
  assert not bool(results["tensorflow_imported_before_saving"]), (
      "modeling / optimization imported TensorFlow on " + backend)
  compared = [k for k in reference if not k.startswith("round_trip/")
              and k != "tensorflow_imported_before_saving"]
  assert len(compared) > 40
  for key in compared:
    np.testing.assert_allclose(results[key], reference[key], rtol=1e-5, atol=1e-5,
                               err_msg="%s on %s" % (key, backend))
  for key in reference:
    if key.startswith("round_trip/"):
      assert float(results[key]) <= 1e-6, (key, float(results[key]))


@pytest.mark.slow
def test_reference_is_not_trivial(case):
  """What the backends are held to moves: the optimizer steps change the weights, clipping
  and weight decay act, skip_padding zeroes the padding and the schedule warms up."""
  _, reference = case
  assert reference["train/adamw/loss_1"] < reference["train/adamw/loss_0"]
  assert not np.allclose(reference["train/adamw/weight_0"], reference["train/lamb/weight_0"])
  assert np.all(reference["encoder/skip_padding"][2, 3:] == 0)
  assert np.any(reference["encoder/sequence_output"][2, 3:] != 0)
  np.testing.assert_allclose(reference["encoder/skip_padding"][0],
                             reference["encoder/sequence_output"][0], atol=1e-5)
  assert reference["schedule"][0] == 0 and reference["schedule"][4] > reference["schedule"][1]
  for key, value in reference.items():
    if key.startswith("round_trip/"):
      assert float(value) <= 1e-6, key


@pytest.mark.parametrize("backend", BACKENDS)
def test_import_without_tensorflow(backend):
  """`import bert_keras` then Keras, modeling and optimization on JAX / PyTorch: no TensorFlow,
  and a model built and called."""
  script = ("import sys, numpy as np, bert_keras, keras\n"
            "from bert_keras import modeling, optimization\n"
            "c = modeling.BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1, "
            "num_attention_heads=2, intermediate_size=8)\n"
            "y = modeling.BertClassifier(c, num_labels=2)(np.ones((1, 4), 'int32'))\n"
            "assert tuple(y.shape) == (1, 2), y.shape\n"
            "print(keras.backend.backend(), 'tensorflow' in sys.modules)\n")
  env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split() == [backend, "False"]


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_scripts_refuse_another_backend(tmp_path):
  """The run_* scripts (tf.data, tf.distribute, TensorFlow's loops) stay on TensorFlow: under
  KERAS_BACKEND=jax one line says so before any work, and nothing is written."""
  env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
  out = tmp_path / "out"
  proc = subprocess.run(
      [sys.executable, os.path.join(os.path.dirname(HERE), "run_classifier.py"),
       "--task_name=mrpc", "--do_train", "--data_dir=%s" % tmp_path, "--vocab_file=v",
       "--bert_config_file=c", "--output_dir=%s" % out],
      env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "error: the scripts run Keras on TensorFlow, but KERAS_BACKEND")
  assert "Traceback" not in proc.stderr and not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoints_load_without_tensorflow(backend, tmp_path):
  """A HuggingFace directory, Google's layout (a TF1 checkpoint) and a run's output_dir (task
  files and its TF2 training checkpoint) load on JAX / PyTorch with the logits TensorFlow
  gives, and TensorFlow is not imported."""
  import tensorflow as tf
  from bert_keras import checkpoints
  from bert_keras import huggingface_layout
  from bert_keras.runtime import model_dir, training_checkpoints
  config = modeling.BertConfig.from_dict(CONFIG)
  model = modeling.BertClassifier(config, num_labels=3)
  rng = np.random.RandomState(1)
  model.set_weights([rng.normal(0, 0.3, w.shape).astype("float32")
                     for w in model.get_weights()])
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join("w%d\n" % i for i in range(99)), encoding="utf-8")
  labels = ["a", "b", "c"]
  huggingface_layout.save_huggingface(model, str(tmp_path / "hf"), str(vocab), True, labels)
  checkpoints.save_pretrained(model, str(tmp_path / "google"), str(vocab), True)
  run = tmp_path / "run"
  run.mkdir()
  options = types.SimpleNamespace(vocab_file=str(vocab), do_lower_case=True, max_seq_length=12)
  model_dir.write_model_dir(str(run), options, config, "classifier", labels=labels)
  manager = training_checkpoints.make_checkpoint_manager(
      training_checkpoints.make_checkpoint(model, optimization.create_optimizer(1e-3, 10, 1),
                                           tf.Variable(1, dtype=tf.int64),
                                           checkpoints.tf1_variable_map(model)), str(run))
  manager.save(checkpoint_number=1)
  ids = rng.randint(1, 99, (2, 12)).astype("int32")
  np.savez(tmp_path / "inputs.npz", input_ids=ids)
  expected = keras.ops.convert_to_numpy(model({"input_ids": ids}))
  directories = {"hf": [str(tmp_path / "hf"), "classifier"],
                 "google": [str(tmp_path / "google"), "classifier"],
                 "run": [str(run), "classifier"]}
  results = str(tmp_path / "loaded.npz")
  env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, os.path.join(HERE, "backend_worker.py"), "load",
                         json.dumps(directories), str(tmp_path / "inputs.npz"), results],
                        env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  loaded = dict(np.load(results))
  assert not bool(loaded["tensorflow_imported"])
  assert [str(loaded[n + "/format"]) for n in ("hf", "google", "run")] == [
      "huggingface", "tf1", "tf2"]
  for name in directories:
    np.testing.assert_allclose(loaded[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_raw_text_through_tf_data(backend, tmp_path):
  """On JAX / PyTorch the tokenizer runs in tf.data (BertPreprocessor, TensorFlow ops) and the
  model on the backend, as KerasHub's preprocessors do: fit and predict from raw text give the
  logits of the ids the original's tokenizer makes; load_model(text_input=True) says how."""
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "good",
                              "film", "dull", "joy", "##s"]) + "\n", encoding="utf-8")
  script = f"""
import sys, numpy as np, bert_keras, keras, tensorflow as tf
from bert_keras import checkpoints, modeling, optimization, preprocessing, tokenization
pre = preprocessing.BertPreprocessor({str(vocab)!r}, True, 12)
config = modeling.BertConfig(vocab_size=11, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=2, intermediate_size=37)
clf = modeling.BertClassifier(config, num_labels=2)
clf.compile(optimizer=optimization.create_optimizer(1e-3, 10, 1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
texts = ["a good film", "dull", "a joy", "Films"]
data = {{"text_a": texts, "text_b": [""] * 4}}
clf.fit(tf.data.Dataset.from_tensor_slices((data, [1, 0, 1, 0])).batch(2)
        .map(lambda x, y: (pre(x), y)), epochs=1, verbose=0)
got = clf.predict(tf.data.Dataset.from_tensor_slices(data).batch(2).map(pre), verbose=0)
tok = tokenization.FullTokenizer({str(vocab)!r}, do_lower_case=True)
ids = np.zeros((4, 12), "int32")
for i, t in enumerate(texts):
  pieces = tok.convert_tokens_to_ids(["[CLS]"] + tok.tokenize(t) + ["[SEP]"])
  ids[i, :len(pieces)] = pieces
want = keras.ops.convert_to_numpy(clf({{"input_ids": ids, "input_mask": (ids > 0) * 1}}))
np.testing.assert_allclose(got, want, atol=1e-5)
try:
  checkpoints.load_model("unused", task="classifier", text_input=True)
except ValueError as e:
  assert "tf.data" in str(e), e
print(keras.backend.backend(), "ok")
"""
  env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split()[-2:] == [backend, "ok"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_dropout_under_each_jax_generator():
  """modeling's Dropout on JAX under each generator `jax_default_prng_impl` can name (Keras's
  own Dropout and initializers fail under "rbg", whose keys are 4 words; so the model is built
  first, then the generator switched): rate 0.1 drops about a tenth and scales the rest by
  1 / 0.9; each call, and each jitted stateless call of a pretrainer (the seed state carried),
  draws a new mask; under the default (threefry) the masks are Keras's; under rbg they differ
  from threefry's (the generator in use is the one named)."""
  script = """
import numpy as np, jax, keras
from bert_keras import modeling
x = np.ones((64, 256), "float32")
c = modeling.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=37)
model = modeling.BertPretrainer(c)
rng = np.random.RandomState(0)
data = {"input_ids": rng.randint(1, 50, (4, 16)), "input_mask": np.ones((4, 16), "int32"),
        "masked_lm_positions": np.array([[1, 2]] * 4), "masked_lm_ids": np.ones((4, 2), "int32"),
        "masked_lm_weights": np.ones((4, 2), "float32"), "next_sentence_labels": np.zeros((4, 1))}
model(data)
masks = {}
for impl in ("threefry2x32", "rbg", "unsafe_rbg"):
  jax.config.update("jax_default_prng_impl", impl)
  ours = modeling.Dropout(0.1, seed=7)
  a, b = (np.asarray(ours(x, training=True)) for _ in range(2))
  assert abs((a == 0).mean() - 0.1) < 0.01, (impl, (a == 0).mean())
  np.testing.assert_allclose(a[a != 0], 1 / 0.9, rtol=1e-6)
  assert (a != b).mean() > 0.1, impl
  masks[impl] = a
  tv = [v.value for v in model.trainable_variables]
  ntv = [v.value for v in model.non_trainable_variables]
  step = jax.jit(lambda tv, ntv: model.stateless_call(tv, ntv, data, training=True))
  out1, ntv = step(tv, ntv)
  out2, _ = step(tv, ntv)
  assert not np.allclose(out1["masked_lm_logits"], out2["masked_lm_logits"]), impl
  print(impl, "ok")
jax.config.update("jax_default_prng_impl", "threefry2x32")
keras_mask = np.asarray(keras.layers.Dropout(0.1, seed=7)(x, training=True))
assert (masks["threefry2x32"] == keras_mask).all()
assert (masks["rbg"] != masks["threefry2x32"]).mean() > 0.1
"""
  env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split() == ["threefry2x32", "ok", "rbg", "ok", "unsafe_rbg", "ok"]
