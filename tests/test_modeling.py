"""Unit tests of modeling.py with tiny configs: config, activations, each layer against NumPy,
masks and dropout, errors, Keras serialisation, mixed precision and XLA."""

import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import pair_features, randomize
from bert_keras import losses
from bert_keras import modeling

CONFIG = modeling.BertConfig(
    vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=20, max_position_embeddings=10, type_vocab_size=2,
    initializer_range=0.3)


def _np_layer_norm(x, gamma, beta, eps=1e-12):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _np_gelu(x):
  return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


# --- config ----------------------------------------------------------------------------------

def test_config_defaults_are_the_originals():
  config = modeling.BertConfig(vocab_size=30522)
  assert config.to_dict() == {
      "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
      "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
      "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
      "max_position_embeddings": 512, "type_vocab_size": 16, "initializer_range": 0.02}


def test_config_keeps_unknown_keys_and_round_trips(tmp_path):
  multilingual = dict(modeling.BertConfig(vocab_size=105879).to_dict(), type_vocab_size=2,
                      directionality="bidi", pooler_fc_size=768,
                      pooler_type="first_token_transform")
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps(multilingual))
  config = modeling.BertConfig.from_json_file(str(path))
  assert config.directionality == "bidi" and config.pooler_type == "first_token_transform"
  assert config.hidden_act == "gelu"
  text = config.to_json_string()
  assert text.endswith("}\n") and json.loads(text) == multilingual
  assert text == json.dumps(multilingual, indent=2, sort_keys=True) + "\n"
  modeling.BertModel(config.from_dict(dict(config.to_dict(), vocab_size=30, hidden_size=8,
                                           num_hidden_layers=1, num_attention_heads=2,
                                           intermediate_size=8)))   # extra keys are ignored


def test_config_from_huggingface_maps_activation_names(tmp_path):
  hf = {"model_type": "bert", "vocab_size": 30, "hidden_act": "gelu", "layer_norm_eps": 1e-7}
  config = modeling.BertConfig.from_hf_dict(hf)
  assert config.hidden_act == "gelu_exact" and config.layer_norm_eps == 1e-7
  assert modeling.BertConfig.from_hf_dict(dict(hf, hidden_act="gelu_new")).hidden_act == "gelu"
  assert modeling.BertConfig.from_dict(hf).hidden_act == "gelu"   # not a HF read: kept
  # Written as bert_config.json (a run's model files), it reads back the same.
  for act in ("gelu", "gelu_new"):
    config = modeling.BertConfig.from_hf_dict(dict(hf, hidden_act=act, architectures=["BertModel"]))
    (tmp_path / "bert_config.json").write_text(config.to_json_string())
    assert modeling.BertConfig.from_json_file(str(tmp_path / "bert_config.json")) == config
    assert "model_type" not in config.to_dict() and "architectures" not in config.to_dict()


def test_activations():
  x = np.linspace(-5, 5, 101).astype(np.float32)
  np.testing.assert_allclose(modeling.gelu(x), _np_gelu(x), atol=1e-6)
  np.testing.assert_allclose(modeling.gelu(x), tf.nn.gelu(x, approximate=True), atol=1e-6)
  erf = np.vectorize(math.erf)
  np.testing.assert_allclose(modeling.gelu_exact(x), 0.5 * x * (1 + erf(x / math.sqrt(2))),
                             atol=1e-6)
  assert not np.allclose(modeling.gelu(x), modeling.gelu_exact(x), atol=1e-5)
  assert modeling.get_activation("GELU") is modeling.gelu
  assert modeling.get_activation("gelu_exact") is modeling.gelu_exact
  assert modeling.get_activation("linear") is None and modeling.get_activation("") is None
  assert modeling.get_activation(tf.tanh) is tf.tanh
  np.testing.assert_allclose(modeling.get_activation("relu")(x), np.maximum(x, 0))
  with pytest.raises(ValueError, match=r"unsupported activation 'swishy' \(supported: gelu, "):
    modeling.get_activation("swishy")
  with pytest.raises(ValueError, match=r"unsupported activation 5 \(supported: "):
    modeling.get_activation(5)


# --- layers against NumPy --------------------------------------------------------------------

def test_layer_norm():
  layer = modeling.LayerNorm()
  x = np.random.RandomState(0).normal(3, 2, (2, 3, 16)).astype(np.float32)
  y = layer(x)
  gamma = np.random.RandomState(1).normal(size=16).astype(np.float32)
  layer.gamma.assign(gamma)
  layer.beta.assign(gamma[::-1])
  np.testing.assert_allclose(layer(x), _np_layer_norm(x, gamma, gamma[::-1]), atol=1e-5)
  assert y.dtype == tf.float32 and layer.epsilon == 1e-12
  assert layer(x.astype(np.float16)).dtype == tf.float32


def test_embeddings_and_sequence_too_long():
  layer = randomize(modeling.BertModel(CONFIG)).embeddings
  f = pair_features()
  ours = layer(f["input_ids"], f["segment_ids"]).numpy()
  s = f["input_ids"].shape[1]
  total = (layer.word_embeddings.numpy()[f["input_ids"]]
           + layer.token_type_embeddings.numpy()[f["segment_ids"]]
           + layer.position_embeddings.numpy()[:s])
  expected = _np_layer_norm(total, layer.layer_norm.gamma.numpy(), layer.layer_norm.beta.numpy())
  np.testing.assert_allclose(ours, expected, atol=1e-5)
  ids = np.zeros((1, 11), np.int32)
  with pytest.raises(ValueError, match=r"sequence length \(11\) is longer than "
                     r"max_position_embeddings \(10\)"):
    layer(ids, ids)
  model = modeling.BertModel(CONFIG)
  with pytest.raises(ValueError, match="max_position_embeddings"):
    model({"input_ids": ids})
  dynamic = tf.function(lambda x: model(x)["sequence_output"],
                        input_signature=[tf.TensorSpec([None, None], tf.int32)])
  assert dynamic(ids[:, :10]).shape == (1, 10, 16)
  with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings"):
    dynamic(ids)


def test_self_attention_against_numpy():
  block = randomize(modeling.BertModel(CONFIG)).encoder_layers[0]
  attention = block.attention
  rng = np.random.RandomState(2)
  x = rng.normal(size=(2, 5, 16)).astype(np.float32)
  mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], np.int32)
  ours = attention(x, mask).numpy()
  w = {n: (getattr(attention, n).kernel.numpy(), getattr(attention, n).bias.numpy())
       for n in ("query", "key", "value", "output_dense")}
  lin = lambda t, n: t @ w[n][0] + w[n][1]
  split = lambda t: t.reshape(2, 5, 4, 4).transpose(0, 2, 1, 3)
  q, k, v = split(lin(x, "query")), split(lin(x, "key")), split(lin(x, "value"))
  scores = q @ k.transpose(0, 1, 3, 2) / 2.0 + (1 - mask[:, None, None, :]) * -10000.0
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  expected = lin((probs @ v).transpose(0, 2, 1, 3).reshape(2, 5, 16), "output_dense")
  np.testing.assert_allclose(ours, expected, atol=1e-5)


def test_feed_forward_and_block_against_numpy():
  block = randomize(modeling.BertModel(CONFIG)).encoder_layers[1]
  x = np.random.RandomState(3).normal(size=(2, 5, 16)).astype(np.float32)
  mask = np.ones((2, 5), np.int32)
  ff = block.feed_forward
  hidden = _np_gelu(x @ ff.intermediate.kernel.numpy() + ff.intermediate.bias.numpy())
  expected_ff = hidden @ ff.output_dense.kernel.numpy() + ff.output_dense.bias.numpy()
  np.testing.assert_allclose(ff(x), expected_ff, atol=1e-5)
  ln = lambda t, layer: _np_layer_norm(t, layer.gamma.numpy(), layer.beta.numpy())
  a = ln(x + block.attention(x, mask).numpy(), block.attention_layer_norm)
  expected = ln(a + ff(a).numpy(), block.output_layer_norm)
  np.testing.assert_allclose(block(x, mask), expected, atol=1e-5)


def test_pooler_and_outputs():
  model = randomize(modeling.BertModel(CONFIG))
  assert set(model(pair_features())) == {"sequence_output", "pooled_output"}
  out = model(pair_features(), output_hidden_states=True)
  assert set(out) == {"sequence_output", "pooled_output", "encoder_outputs", "embedding_output"}
  assert set(modeling.BertModel(CONFIG, output_hidden_states=True)(pair_features())) == set(out)
  assert out["sequence_output"].shape == (2, 6, 16) and out["pooled_output"].shape == (2, 16)
  assert len(out["encoder_outputs"]) == 2 and out["embedding_output"].shape == (2, 6, 16)
  np.testing.assert_array_equal(out["encoder_outputs"][-1], out["sequence_output"])
  dense = model.pooler.dense
  expected = np.tanh(out["sequence_output"].numpy()[:, 0] @ dense.kernel.numpy()
                     + dense.bias.numpy())
  np.testing.assert_allclose(out["pooled_output"], expected, atol=1e-5)
  assert model.embedding_table is model.embeddings.word_embeddings


def test_padding_is_masked_as_key_only():
  model = randomize(modeling.BertModel(CONFIG))
  f = pair_features()
  changed = dict(f, input_ids=f["input_ids"].copy())
  changed["input_ids"][1, 4:] = [17, 23]            # padded positions of row 1
  a, b = model(f)["sequence_output"].numpy(), model(changed)["sequence_output"].numpy()
  np.testing.assert_allclose(a[:, :3], b[:, :3], atol=1e-6)   # real tokens: unaffected
  assert not np.allclose(a[1, 4:], b[1, 4:])                  # padded queries still computed


@pytest.mark.parametrize("mask_rows", [
    [[1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]],
    [[1, 0, 1, 1, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 1]]])
def test_skip_padding_computes_the_same_at_the_real_tokens(mask_rows):
  """BertModel.skip_padding (the dense layers on the real tokens only): the same outputs at
  the real positions, pooled output and gradients as the full computation, zeros at the
  padding; masks that are not a prefix and a row with no real token included."""
  model = randomize(modeling.BertModel(CONFIG))
  mask = np.array(mask_rows, np.int32)
  rng = np.random.RandomState(3)
  inputs = {"input_ids": rng.randint(1, 40, mask.shape).astype(np.int32), "input_mask": mask,
            "segment_ids": rng.randint(0, 2, mask.shape).astype(np.int32)}
  weight = tf.constant(rng.normal(size=(1, 1, CONFIG.hidden_size)), tf.float32)

  def run(skip):
    model.skip_padding = skip
    with tf.GradientTape() as tape:
      out = model(inputs, output_hidden_states=True)
      real = tf.cast(mask, tf.float32)[:, :, None]
      loss = (tf.reduce_sum(out["sequence_output"] * weight * real)
              + tf.reduce_sum(out["pooled_output"] * mask[:, :1]))
    grads = tape.gradient(loss, model.trainable_variables)
    return out, [tf.convert_to_tensor(g).numpy() for g in grads]

  (full, full_grads), (skip, skip_grads) = run(False), run(True)
  real = mask.astype(bool)
  for key in ("sequence_output", "embedding_output"):
    np.testing.assert_allclose(skip[key].numpy()[real], full[key].numpy()[real], atol=1e-5)
  for a, b in zip(skip["encoder_outputs"], full["encoder_outputs"]):
    np.testing.assert_allclose(a.numpy()[real], b.numpy()[real], atol=1e-5)
    assert not a.numpy()[~real].any()                       # zeros at the padding
  assert full["sequence_output"].numpy()[~real].any()     # (where the full one has values)
  has_cls = real[:, 0]
  np.testing.assert_allclose(skip["pooled_output"].numpy()[has_cls],
                             full["pooled_output"].numpy()[has_cls], atol=1e-5)
  for a, b in zip(skip_grads, full_grads):
    np.testing.assert_allclose(a, b, atol=1e-5)
  # Traced with unknown shapes, as the scripts' steps are.
  spec = {k: tf.TensorSpec([None, None], tf.int32) for k in inputs}
  traced = tf.function(lambda x: model(x)["sequence_output"], input_signature=[spec])
  np.testing.assert_allclose(traced(inputs).numpy()[real], full["sequence_output"].numpy()[real],
                             atol=1e-5)


def test_default_mask_and_segments_and_bare_ids():
  model = randomize(modeling.BertModel(CONFIG))
  ids = pair_features()["input_ids"]
  full = model({"input_ids": ids, "input_mask": np.ones_like(ids),
                "segment_ids": np.zeros_like(ids)})
  for inputs in ({"input_ids": ids}, ids, {"input_ids": ids.astype(np.int64)}):
    np.testing.assert_allclose(model(inputs)["sequence_output"], full["sequence_output"],
                               atol=1e-6)
  with pytest.raises(ValueError, match="rank 2"):
    model({"input_ids": ids[0]})


def test_hidden_size_must_divide_into_heads():
  bad = modeling.BertConfig.from_dict(dict(CONFIG.to_dict(), num_attention_heads=3))
  with pytest.raises(ValueError, match=r"hidden size \(16\) is not a multiple of the number "
                     r"of attention heads \(3\)"):
    modeling.BertModel(bad)


def test_dropout_only_when_training():
  model = randomize(modeling.BertPretrainer(CONFIG))
  f = pair_features()
  a = model.bert(f)["sequence_output"].numpy()
  np.testing.assert_array_equal(a, model.bert(f, training=False)["sequence_output"])
  b = model.bert(f, training=True)["sequence_output"].numpy()
  logits = model(f)["masked_lm_logits"].numpy()
  assert not np.allclose(logits, model(f, training=True)["masked_lm_logits"])
  assert not np.allclose(a, b)
  no_dropout = modeling.BertConfig.from_dict(dict(CONFIG.to_dict(), hidden_dropout_prob=0.0,
                                                  attention_probs_dropout_prob=0.0))
  model0 = modeling.BertModel(no_dropout)
  for x, y in zip(model0.weights, model.bert.weights):
    x.assign(y)
  np.testing.assert_allclose(model0(f, training=True)["sequence_output"], a, atol=1e-6)


def test_initialisation():
  config = modeling.BertConfig.from_dict(dict(CONFIG.to_dict(), initializer_range=0.02,
                                              vocab_size=2000))
  model = modeling.BertPretrainer(config)
  table = model.bert.embedding_table.numpy()
  assert abs(table.std() - 0.02 * 0.88) < 0.002 and np.abs(table).max() <= 0.04  # 2-sigma cut
  emb = model.bert.embeddings
  assert not np.allclose(emb.token_type_embeddings.numpy(), table[:2])  # independent draws
  np.testing.assert_array_equal(model.masked_lm.output_bias.numpy(), 0)
  np.testing.assert_array_equal(emb.layer_norm.gamma.numpy(), 1)
  assert model.next_sentence.output_weights.shape == (2, 16)


# --- pretraining heads and losses ------------------------------------------------------------

def test_pretraining_heads_against_numpy():
  model = randomize(modeling.BertPretrainer(CONFIG))
  f = pair_features()
  out = {**model(f), **model.bert(f)}
  assert set(model(f)) == {"masked_lm_logits", "next_sentence_logits"}
  assert out["masked_lm_logits"].shape == (2, 2, 40) and out["masked_lm_logits"].dtype == tf.float32
  assert out["next_sentence_logits"].shape == (2, 2)
  seq = out["sequence_output"].numpy()
  gathered = np.stack([seq[b, f["masked_lm_positions"][b]] for b in range(2)])
  head = model.masked_lm
  x = _np_gelu(gathered @ head.transform.kernel.numpy() + head.transform.bias.numpy())
  x = _np_layer_norm(x, head.layer_norm.gamma.numpy(), head.layer_norm.beta.numpy())
  logits = x @ model.bert.embedding_table.numpy().T + head.output_bias.numpy()
  np.testing.assert_allclose(out["masked_lm_logits"], logits, atol=1e-4)
  nsp = model.next_sentence
  expected = (out["pooled_output"].numpy() @ nsp.output_weights.numpy().T
              + nsp.output_bias.numpy())
  np.testing.assert_allclose(out["next_sentence_logits"], expected, atol=1e-5)


def test_losses():
  logits = np.random.RandomState(0).normal(size=(2, 3, 7)).astype(np.float32)
  ids = np.array([[1, 2, 3], [4, 5, 0]])
  weights = np.array([[1, 1, 1], [1, 1, 0]], np.float32)
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  nll = -np.take_along_axis(log_probs, ids[..., None], -1)[..., 0]
  expected = (nll * weights).sum() / (weights.sum() + 1e-5)
  np.testing.assert_allclose(losses.masked_lm_loss(logits, ids, weights), expected, rtol=1e-6)
  nsp_logits = logits[:, 0, :2]
  labels = np.array([[0], [1]])
  lp = nsp_logits - np.log(np.exp(nsp_logits).sum(-1, keepdims=True))
  np.testing.assert_allclose(losses.next_sentence_loss(nsp_logits, labels),
                             -(lp[0, 0] + lp[1, 1]) / 2, rtol=1e-6)
  total = losses.pretraining_loss(
      {"masked_lm_logits": logits, "next_sentence_logits": nsp_logits},
      {"masked_lm_ids": ids, "masked_lm_weights": weights, "next_sentence_labels": labels})
  np.testing.assert_allclose(total, expected - (lp[0, 0] + lp[1, 1]) / 2, rtol=1e-6)


# --- Keras serialisation ---------------------------------------------------------------------

@pytest.mark.parametrize("cls", [modeling.BertModel, modeling.BertPretrainer])
def test_get_config_and_keras_file_round_trip(tmp_path, cls):
  model = randomize(cls(CONFIG))
  clone = cls.from_config(model.get_config())
  assert type(clone) is cls and clone.config == CONFIG
  config = json.loads(json.dumps(model.get_config()))
  if cls is modeling.BertPretrainer:   # the encoder as a nested Keras object
    config = config["encoder"]["config"]
  assert config["config"] == CONFIG.to_dict()
  path = str(tmp_path / "model.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  assert type(loaded) is cls and loaded.config == CONFIG
  f = pair_features()
  a, b = model(f), loaded(f)
  for key in a:
    if key != "encoder_outputs":
      np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize("make", [lambda: modeling.BertPretrainer(CONFIG),
                                  lambda: modeling.BertClassifier(CONFIG, 3),
                                  lambda: modeling.BertSquad(CONFIG)])
def test_sublayer_names_are_distinct_and_variable_paths_unique(make):
  """Within each layer the sublayers have distinct names (saying what they are), so every
  Keras variable path is unique (optimizer slots are named after them)."""
  model = make()
  for layer in model._flatten_layers(include_self=True, recursive=True):
    names = [child.name for child in layer._flatten_layers(include_self=False, recursive=False)]
    assert len(names) == len(set(names)), (layer.name, names)
  paths = [v.path for v in model.variables]
  assert len(paths) == len(set(paths)), paths
  for path in ("bert/layer_1/attention/attention_output/kernel",
               "bert/layer_1/feed_forward/intermediate/kernel",
               "bert/layer_1/feed_forward/output/kernel", "bert/pooler/dense/bias"):
    assert path in paths


_LOAD_IN_FRESH_PROCESS = """
import sys
import keras
import numpy as np
directory = sys.argv[1]
try:  # Keras imports only its own packages by itself: our classes are unknown until imported
  keras.models.load_model(directory + "/bert.keras")
  sys.exit("loaded without importing bert_keras.modeling")
except TypeError as error:
  assert "Could not locate class 'BertModel'" in str(error), error
import bert_keras.modeling  # noqa: E402,F401  (registers the classes with Keras)
features = dict(np.load(directory + "/features.npz"))
for name, key in (("bert", "sequence_output"), ("classifier", None)):
  loaded = keras.models.load_model(directory + "/%s.keras" % name)
  assert type(loaded).__name__ == {"bert": "BertModel", "classifier": "BertClassifier"}[name]
  out = loaded(features) if key is None else loaded(features)[key]
  np.testing.assert_allclose(out, np.load(directory + "/%s.npy" % name),
                             rtol=1e-5, atol=1e-5, err_msg=name)
print("OK")
"""


@pytest.mark.slow
def test_keras_file_loads_in_a_fresh_process(tmp_path):
  """model.save("x.keras") of a BertModel and a BertClassifier, keras.models.load_model in a
  new Python process: it needs `import bert_keras.modeling` first, then gives the same
  outputs."""
  import subprocess
  import sys
  config = modeling.BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=10, type_vocab_size=2)
  features = {k: v for k, v in pair_features().items() if k != "masked_lm_positions"}
  np.savez(tmp_path / "features.npz", **features)
  for name, model, key in (("bert", modeling.BertModel(config), "sequence_output"),
                           ("classifier", modeling.BertClassifier(config, 3), None)):
    randomize(model)
    model.save(str(tmp_path / ("%s.keras" % name)))
    out = model(features) if key is None else model(features)[key]
    np.save(tmp_path / ("%s.npy" % name), out.numpy())
  result = subprocess.run([sys.executable, "-c", _LOAD_IN_FRESH_PROCESS, str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
  assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_layers_are_registered_serializable():
  for cls in (modeling.Dense, modeling.LayerNorm, modeling.Embeddings, modeling.SelfAttention,
              modeling.FeedForward, modeling.TransformerBlock, modeling.Pooler,
              modeling.MaskedLMHead, modeling.NextSentenceHead, modeling.BertModel,
              modeling.BertPretrainer, modeling.BertClassifier, modeling.BertSquad):
    assert keras.saving.get_registered_object("bert_keras>" + cls.__name__) is cls
  layer = modeling.TransformerBlock(CONFIG, name="layer_0")
  clone = keras.layers.deserialize(keras.layers.serialize(layer))
  assert type(clone) is modeling.TransformerBlock and clone.config == CONFIG


# --- mixed precision and XLA -----------------------------------------------------------------

@pytest.mark.parametrize("policy,atol", [("mixed_bfloat16", 0.1), ("mixed_float16", 0.02)])
def test_mixed_precision(policy, atol):
  reference = randomize(modeling.BertPretrainer(CONFIG))
  model = modeling.BertPretrainer(CONFIG, dtype=policy)
  for a, b in zip(model.weights, reference.weights):
    a.assign(b)
  assert {v.dtype for v in model.weights} == {"float32"}        # float32 master weights
  f = dict(pair_features(), masked_lm_ids=np.array([[3, 4], [5, 0]]),
           masked_lm_weights=np.array([[1, 1], [1, 0]], np.float32),
           next_sentence_labels=np.array([[0], [1]]))
  compute = policy.split("_")[1]
  with tf.GradientTape() as tape:
    out = model(f, training=True)
    loss = losses.pretraining_loss(out, f)
  grads = tape.gradient(loss, model.trainable_variables)
  encoded = model.bert(f)
  assert encoded["sequence_output"].dtype == compute
  assert encoded["pooled_output"].dtype == compute
  assert out["masked_lm_logits"].dtype == "float32"
  assert out["next_sentence_logits"].dtype == "float32" and loss.dtype == "float32"
  assert all(g is not None and np.isfinite(tf.convert_to_tensor(g).numpy()).all()
             for g in grads)
  # LayerNorm runs in float32 even here.
  assert model.bert.embeddings.layer_norm.compute_dtype == "float32"
  ours, ref = {**model(f), **model.bert(f)}, {**reference(f), **reference.bert(f)}
  for key in ("sequence_output", "masked_lm_logits", "next_sentence_logits"):
    np.testing.assert_allclose(tf.cast(ours[key], tf.float32), ref[key], atol=atol,
                               err_msg=key)


def test_mixed_policy_survives_get_config():
  model = modeling.BertPretrainer(CONFIG, dtype="mixed_bfloat16")
  clone = modeling.BertPretrainer.from_config(json.loads(json.dumps(model.get_config())))
  assert clone.dtype_policy.name == "mixed_bfloat16"
  assert clone.bert.encoder_layers[1].feed_forward.intermediate.compute_dtype == "bfloat16"


def test_global_mixed_policy():
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model = modeling.BertModel(CONFIG)
    assert model.encoder_layers[0].attention.query.compute_dtype == "bfloat16"
    assert model(pair_features())["sequence_output"].dtype == "bfloat16"
  finally:
    keras.mixed_precision.set_global_policy("float32")


def test_xla_compiles_training_step():
  model = randomize(modeling.BertPretrainer(CONFIG))
  f = dict(pair_features(), masked_lm_ids=np.array([[3, 4], [5, 0]]),
           masked_lm_weights=np.array([[1, 1], [1, 0]], np.float32),
           next_sentence_labels=np.array([[0], [1]]))

  def step(features):
    with tf.GradientTape() as tape:
      loss = losses.pretraining_loss(model(features, training=False), features)
    return loss, tape.gradient(loss, model.trainable_variables)

  eager_loss, eager_grads = step(f)
  xla_loss, xla_grads = tf.function(step, jit_compile=True)(f)
  np.testing.assert_allclose(xla_loss, eager_loss, rtol=1e-5)
  for a, b in zip(xla_grads, eager_grads):
    np.testing.assert_allclose(tf.convert_to_tensor(a), tf.convert_to_tensor(b), atol=1e-5)


_REPLICA_DROPOUT = """
import numpy as np, tensorflow as tf, keras
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from bert_keras import modeling
x = tf.ones((4, 64))
# One replica: the same masks as Keras's own Dropout with the same seed.
ours, theirs = modeling.Dropout(0.5, seed=7), keras.layers.Dropout(0.5, seed=7)
assert np.array_equal(ours(x, training=True).numpy(), theirs(x, training=True).numpy())
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
  layer = modeling.Dropout(0.5, seed=7)
  layer.build(x.shape)
@tf.function
def step():
  return strategy.run(lambda: layer(x, training=True))
masks = [m.numpy() for m in strategy.experimental_local_results(step())]
assert not np.array_equal(masks[0], masks[1]), "replicas drew the same dropout mask"
print("OK")
"""


@pytest.mark.slow
def test_dropout_masks_differ_between_replicas():
  import subprocess
  import sys
  result = subprocess.run([sys.executable, "-c", _REPLICA_DROPOUT], capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


# ----------------------------------------------------------------------------
# Config validation: a bad or absurd config is a one-line ValueError naming the file and
# field, before any weight is allocated.

@pytest.mark.parametrize("change, message", [
    ({"hidden_size": 64.5}, "hidden_size must be a positive integer, got 64.5"),
    ({"num_hidden_layers": 1e6}, "num_hidden_layers must be a positive integer"),
    ({"num_attention_heads": 3}, r"The hidden size \(64\) is not a multiple of the number"),
    ({"vocab_size": 0}, "vocab_size must be a positive integer"),
    ({"hidden_dropout_prob": 1.5}, r"hidden_dropout_prob must be a number in \[0, 1\)"),
    ({"hidden_act": "swishy"}, r"hidden_act: unsupported activation 'swishy' \(supported: "),
    ({"hidden_act": 5}, "hidden_act: unsupported activation 5 "),
    ({"layer_norm_eps": -1}, "layer_norm_eps must be a positive number, got -1"),
    ({"layer_norm_eps": 0}, "layer_norm_eps must be a positive number, got 0"),
    ({"initializer_range": float("nan")}, "initializer_range must be a non-negative number"),
    ({"hidden_size": 10**9, "num_attention_heads": 1},
     "these sizes make a model of 9e.18 parameters"),
    ({"num_hidden_layers": 10**6}, "these sizes make a model of .* more than this"),
])
def test_config_file_validation(tmp_path, change, message):
  config = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=128, max_position_embeddings=64, type_vocab_size=2)
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps(dict(config, **change)))
  with pytest.raises(ValueError, match=str(path) + ": " + message):
    modeling.BertConfig.from_json_file(str(path))
  with pytest.raises(ValueError, match=message):  # built from a dict: BertModel checks
    modeling.BertModel(modeling.BertConfig.from_dict(dict(config, **change)))


def test_config_file_errors_name_the_file(tmp_path):
  path = tmp_path / "bert_config.json"
  path.write_text('{"vocab_size": 100,')
  with pytest.raises(ValueError, match=str(path) + ": not valid JSON"):
    modeling.BertConfig.from_json_file(str(path))
  path.write_bytes(b'{"vocab_size": "\xff"}')
  with pytest.raises(ValueError, match=str(path) + ", line 1: not UTF-8"):
    modeling.BertConfig.from_json_file(str(path))
  with pytest.raises(ValueError, match="missing.json: no such file"):
    modeling.BertConfig.from_json_file(str(tmp_path / "missing.json"))


def test_num_parameters_counts_the_built_model():
  config = modeling.BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=48,
                               max_position_embeddings=40, type_vocab_size=3)
  model = modeling.BertModel(config)
  assert config.num_parameters() == sum(int(np.prod(v.shape)) for v in model.weights)


def test_a_keras_file_whose_config_has_fewer_layers_than_its_weights_is_refused(tmp_path):
  """Keras builds what config.json says and loads the weights of those layers only: a .keras
  file whose config names fewer encoder layers than its weights hold loaded without a word,
  its last layer dropped. The encoder records its layer count beside its weights."""
  import zipfile
  config = modeling.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=32)
  path, edited = tmp_path / "model.keras", tmp_path / "edited.keras"
  modeling.BertClassifier(config, 2).save(str(path))
  assert len(keras.saving.load_model(str(path)).weights) == 57
  with zipfile.ZipFile(path) as source, zipfile.ZipFile(edited, "w") as target:
    for name in source.namelist():
      data = source.read(name)
      if name == "config.json":
        data = data.replace(b'"num_hidden_layers": 3', b'"num_hidden_layers": 2')
      target.writestr(name, data)
  with pytest.raises(ValueError, match="the saved weights hold 3 encoder layers, the model's "
                     "config 2"):
    keras.saving.load_model(str(edited))
