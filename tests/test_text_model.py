"""Keras over text: `import bert_keras` registers our Keras classes (a .keras file
reloads in a fresh process after that one import), BertPreprocessor's vocabulary is a .keras
asset (small configs), and checkpoints.load_model(..., text_input=True): a compiled model whose
fit/evaluate/predict take Python lists of strings or pairs, checked against the token-id model
on tokenization.FullTokenizer's ids."""

import json
import os
import subprocess
import sys
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import modeling
from bert_keras import preprocessing
from bert_keras import tokenization

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["a", "b", "c", "d", "film", "good"] + [f"w{i}" for i in range(6000)]
SEQ = 16


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
  """Google's layout (save_pretrained) of a 2-layer, hidden-32 encoder under a 2-label head;
  a vocab of 6,011 tokens, so that the weights (not the file format) make most of a file."""
  root = tmp_path_factory.mktemp("text_model")
  vocab = root / "words.txt"
  vocab.write_text("".join(t + "\n" for t in SPECIAL + WORDS))
  config = modeling.BertConfig(vocab_size=len(SPECIAL + WORDS), hidden_size=32,
                               num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=SEQ, type_vocab_size=2)
  classifier = modeling.BertClassifier(config, 2)
  classifier(_ids([[2, 5, 3]]))
  for v in classifier.weights:   # a non-trivial head and encoder
    v.assign(tf.random.stateless_normal(v.shape, [1, len(v.name)]) * 0.2)
  return checkpoints.save_pretrained(classifier, str(root / "bert"), str(vocab), True)


def _ids(rows, segments=None):
  ids = np.zeros((len(rows), SEQ), np.int32)
  types = np.zeros_like(ids)
  for i, row in enumerate(rows):
    ids[i, :len(row)] = row
    if segments is not None:
      types[i, :len(row)] = segments[i]
  return {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32), "segment_ids": types}


def _original_features(directory, texts):
  """FullTokenizer's ids of texts (str or (a, b) pairs), packed as run_classifier packs."""
  tokenizer = tokenization.FullTokenizer(os.path.join(directory, "vocab.txt"), True)
  rows, segments = [], []
  for text in texts:
    a, b = (text, None) if isinstance(text, str) else text
    tokens = ["[CLS]"] + tokenizer.tokenize(a) + ["[SEP]"]
    types = [0] * len(tokens)
    more = tokenizer.tokenize(b) if b else []   # as convert_single_example: no b, no [SEP]
    if more:
      tokens, types = tokens + more + ["[SEP]"], types + [1] * (len(more) + 1)
    rows.append(tokenizer.convert_tokens_to_ids(tokens))
    segments.append(types)
  return _ids(rows, segments)


def _softmax(logits):
  e = np.exp(logits - logits.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _weight_bytes(model):
  return sum(int(np.prod(v.shape)) * 4 for v in model.weights)


def test_preprocessor_config_is_small_and_its_vocabulary_an_asset(tmp_path):
  vocabulary = SPECIAL + [f"word{i}" for i in range(30000)]
  layer = preprocessing.BertPreprocessor(vocabulary=vocabulary, max_seq_length=8)
  config = layer.get_config()
  assert len(json.dumps(config)) < 2000, len(json.dumps(config))
  text = keras.Input(shape=(), dtype="string")
  model = keras.Model(text, layer(text)["input_ids"])
  path = str(tmp_path / "preprocess.keras")
  model.save(path)
  names = zipfile.ZipFile(path).namelist()
  assert any(n.endswith("/" + preprocessing.VOCABULARY_ASSET) for n in names), names
  assert len(zipfile.ZipFile(path).read("config.json")) < 4000
  loaded = keras.saving.load_model(path)
  texts = tf.constant(["word17 word29999 zzz", "word3"])
  np.testing.assert_array_equal(loaded(texts), model(texts))
  assert model(texts).numpy()[0, :5].tolist() == [2, 22, 30004, 1, 3]


@pytest.mark.slow
def test_text_classifier_predict_pairs_fit_and_file_size(tiny_dir, tmp_path):
  model = checkpoints.load_model(tiny_dir, task="classifier", num_labels=2, text_input=True,
                                 max_seq_length=SEQ)
  assert isinstance(model.preprocessor, preprocessing.BertPreprocessor) and model.compiled
  assert model.preprocessor.do_lower_case and model.vocab_file.endswith("vocab.txt")
  texts = ["a b", "C d film", "w12 good w7 a", "d"]   # batches of 4 here: one trace
  expected = _softmax(model.task_model(_original_features(tiny_dir, texts)).numpy())
  assert np.abs(expected[:, 0] - 0.5).max() > 1e-3   # the head is not near-uniform
  np.testing.assert_allclose(model.predict(texts, verbose=0), expected, atol=1e-6)
  np.testing.assert_allclose(model.predict(np.array(texts), verbose=0), expected, atol=1e-6)
  pairs = [("a b", "c"), ("film", "good w1 w2"), ("d", ""), ("a", "a")]
  expected = _softmax(model.task_model(_original_features(tiny_dir, pairs)).numpy())
  np.testing.assert_allclose(model.predict(pairs, verbose=0), expected, atol=1e-6)
  np.testing.assert_allclose(model.predict(np.array(pairs), verbose=0), expected, atol=1e-6)
  with pytest.raises(ValueError, match="list of strings or of"):
    model.predict([[("a", "b", "c")]], verbose=0)
  with pytest.raises(ValueError, match="text_input=True takes task"):
    checkpoints.load_model(tiny_dir, task="pretrainer", text_input=True)
  with pytest.raises(ValueError, match="max_seq_length=128 is longer than the model's "
                                       "max_position_embeddings \\(16\\)"):
    checkpoints.load_model(tiny_dir, task="classifier", text_input=True)

  before = [v.numpy().copy() for v in model.task_model.trainable_weights]
  train = ["a b", "c d", "film", "good", "a film", "d d", "good film", "c"]
  history = model.fit(train, [0, 1, 0, 1, 0, 1, 0, 1], batch_size=4, epochs=1, verbose=0)
  assert set(history.history) == {"loss", "accuracy"}
  schedule = model.optimizer._learning_rate
  assert (schedule.num_train_steps, int(model.optimizer.iterations)) == (2, 2)
  changed = {v.path: not np.array_equal(a, v.numpy())
             for a, v in zip(before, model.task_model.trainable_weights)}
  assert sum(changed.values()) > 0.8 * len(changed), changed
  assert all(changed[v.path] for v in model.task_model.classifier.weights)
  loss, accuracy = model.evaluate(train[:4], np.array([0, 1, 0, 1]), verbose=0)
  probabilities = model.predict(train[:4], verbose=0)
  np.testing.assert_allclose(
      loss, -np.log(probabilities[np.arange(4), [0, 1, 0, 1]]).mean(), rtol=1e-4)

  # Saved without the optimizer: about the weights' size; with it: its state too.
  small, full = str(tmp_path / "small.keras"), str(tmp_path / "full.keras")
  model.save(small, include_optimizer=False)
  model.save(full)
  weights = _weight_bytes(model)
  assert os.path.getsize(small) < 1.3 * weights, (os.path.getsize(small), weights)
  assert os.path.getsize(full) > 2.5 * weights
  reloaded = keras.saving.load_model(small)
  assert type(reloaded) is preprocessing.TextModel and not reloaded.compiled
  np.testing.assert_allclose(reloaded.predict(texts, verbose=0),
                             model.predict(texts, verbose=0), atol=1e-6)


def test_text_tasks(tiny_dir):
  texts = [("a b", "film"), ("c", "d good")]
  shapes = {"squad": {"start_logits": (2, SEQ), "end_logits": (2, SEQ)}}
  for task, shape in shapes.items():
    model = checkpoints.load_model(tiny_dir, task=task, text_input=True, max_seq_length=SEQ)
    out = model.predict(texts, verbose=0)
    assert tf.nest.map_structure(np.shape, out) == shape, task
    ids = _original_features(tiny_dir, texts)
    tf.nest.map_structure(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                          out, model.task_model(ids))
  tagger = checkpoints.load_model(tiny_dir, task="tagger", num_labels=2, text_input=True,
                                  max_seq_length=SEQ)
  out = tagger.predict(["a b c"], verbose=0)
  assert out.shape == (1, SEQ, 2)
  np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-5)


_FRESH_LOAD = """
import json, sys
import bert_keras
import bert_keras.create_pretraining_data  # the pure-Python job: no TensorFlow, no Keras yet
assert not [m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras")]
import numpy as np
import keras   # registers our classes (bert_keras's hook) once Keras is imported
loaded = keras.saving.load_model(sys.argv[1])
texts = np.array(json.loads(sys.argv[2]), object)
print("RESULT", json.dumps(loaded.predict(texts, verbose=0).tolist()))
"""


@pytest.mark.slow
def test_a_keras_file_reloads_after_import_bert_keras_only(tiny_dir, tmp_path):
  """A functional model of a BertPreprocessor and a BertClassifier, as built by hand, saved
  here and loaded in a new process that imports bert_keras (then Keras) only; there,
  `import bert_keras` and create_pretraining_data leave TensorFlow and Keras unimported."""
  encoder = checkpoints.load_model(tiny_dir)
  classifier = modeling.BertClassifier(encoder, num_labels=2)
  preprocess = preprocessing.BertPreprocessor(encoder.vocab_file, True, max_seq_length=SEQ)
  text = keras.Input(shape=(), dtype="string")
  model = keras.Model(text, classifier(preprocess(text)))
  path = str(tmp_path / "classifier.keras")
  model.save(path)
  texts = ["a b film", "good"]
  result = subprocess.run([sys.executable, "-c", _FRESH_LOAD, path, json.dumps(texts)],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert result.returncode == 0, result.stderr[-3000:]
  line = [s for s in result.stdout.splitlines() if s.startswith("RESULT ")][-1]
  np.testing.assert_allclose(json.loads(line[7:]), model(tf.constant(texts)), atol=1e-5)
