"""Differential tests: our modeling.py against the original (bert-tensorflow) in a TF1 graph.

Both directions go through a TF1 name-based checkpoint:
  * the original builds BertModel + the run_pretraining heads, saves; we load and compare;
  * we save with save_tf1_checkpoint; the original restores it and we compare.
Compared: embedding output, every encoder layer, sequence and pooled output, masked-LM and
next-sentence log-probabilities and losses, all to 1e-5 in float32, with padding in the mask.
"""


import numpy as np
import pytest
import tensorflow as tf

import oracle
from bert_keras import checkpoints
from bert_keras import losses
from bert_keras import modeling

TOL = 1e-5


def _original_run_pretraining():
  """The original run_pretraining (for its head functions)."""
  oracle.original("modeling")
  return oracle.original("run_pretraining")


CONFIG = modeling.BertConfig(
    vocab_size=101, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
    intermediate_size=37, hidden_act="gelu", max_position_embeddings=16, type_vocab_size=3,
    initializer_range=0.2)  # large init so differences are not hidden by tiny activations


def _features(batch=3, seq=9, predictions=4, seed=0):
  rng = np.random.RandomState(seed)
  lengths = [seq, seq - 3, 2][:batch]
  mask = np.array([[1] * n + [0] * (seq - n) for n in lengths], np.int32)
  ids = rng.randint(0, CONFIG.vocab_size, (batch, seq)).astype(np.int32) * mask
  segments = np.array([[0] * (n // 2) + [1] * (seq - n // 2) for n in lengths], np.int32) * mask
  segments[0, -1] = 2
  positions = rng.randint(0, seq, (batch, predictions)).astype(np.int32)
  positions[-1, 2:] = 0                                  # padded predictions gather [CLS]
  weights = np.ones((batch, predictions), np.float32)
  weights[-1, 2:] = 0.0
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segments,
          "masked_lm_positions": positions,
          "masked_lm_ids": rng.randint(0, CONFIG.vocab_size, (batch, predictions)).astype(
              np.int32),
          "masked_lm_weights": weights,
          "next_sentence_labels": np.array([[0], [1], [1]][:batch], np.int32)}


def _run_original(features, restore=None, save=None, extra_variables=False):
  """Builds the original graph (is_training=False) and returns its fetched outputs."""
  original = oracle.original("modeling")
  pretraining = _original_run_pretraining()
  tf1 = tf.compat.v1
  with tf.Graph().as_default():
    tf1.set_random_seed(1)
    t = {k: tf1.constant(v) for k, v in features.items()}
    config = original.BertConfig.from_dict(CONFIG.to_dict())
    model = original.BertModel(config, is_training=False, input_ids=t["input_ids"],
                               input_mask=t["input_mask"], token_type_ids=t["segment_ids"])
    mlm_loss, _, mlm_log_probs = pretraining.get_masked_lm_output(
        config, model.get_sequence_output(), model.get_embedding_table(),
        t["masked_lm_positions"], t["masked_lm_ids"], t["masked_lm_weights"])
    nsp_loss, _, nsp_log_probs = pretraining.get_next_sentence_output(
        config, model.get_pooled_output(), t["next_sentence_labels"])
    if extra_variables:   # what run_pretraining checkpoints also hold
      tf1.train.get_or_create_global_step()
      tf1.get_variable("bert/embeddings/word_embeddings/adam_m",
                       [CONFIG.vocab_size, CONFIG.hidden_size])
    fetches = {"embedding_output": model.get_embedding_output(),
               "encoder_outputs": model.get_all_encoder_layers(),
               "sequence_output": model.get_sequence_output(),
               "pooled_output": model.get_pooled_output(),
               "mlm_log_probs": mlm_log_probs, "mlm_loss": mlm_loss,
               "nsp_log_probs": nsp_log_probs, "nsp_loss": nsp_loss}
    with tf1.Session() as sess:
      if restore:
        tf1.train.Saver().restore(sess, restore)
      else:
        sess.run(tf1.global_variables_initializer())
      out = sess.run(fetches)
      if save:
        tf1.train.Saver().save(sess, save, write_meta_graph=False)
  return out


def _run_ours(model, features):
  out = {**model(features, training=False),
         **model.bert(features, training=False, output_hidden_states=True)}
  logits = out["masked_lm_logits"]
  return {"embedding_output": out["embedding_output"].numpy(),
          "encoder_outputs": [x.numpy() for x in out["encoder_outputs"]],
          "sequence_output": out["sequence_output"].numpy(),
          "pooled_output": out["pooled_output"].numpy(),
          "mlm_log_probs": tf.nn.log_softmax(logits).numpy().reshape(-1, CONFIG.vocab_size),
          "mlm_loss": losses.masked_lm_loss(logits, features["masked_lm_ids"],
                                              features["masked_lm_weights"]).numpy(),
          "nsp_log_probs": tf.nn.log_softmax(out["next_sentence_logits"]).numpy(),
          "nsp_loss": losses.next_sentence_loss(out["next_sentence_logits"],
                                                  features["next_sentence_labels"]).numpy()}


def _assert_same(ours, theirs):
  assert len(ours["encoder_outputs"]) == CONFIG.num_hidden_layers
  for i, (a, b) in enumerate(zip(ours["encoder_outputs"], theirs["encoder_outputs"])):
    np.testing.assert_allclose(a, b, atol=TOL, rtol=0, err_msg="encoder layer %d" % i)
  for key in ("embedding_output", "sequence_output", "pooled_output", "mlm_log_probs",
              "mlm_loss", "nsp_log_probs", "nsp_loss"):
    np.testing.assert_allclose(ours[key], theirs[key], atol=TOL, rtol=0, err_msg=key)
  # Non-trivial values: the comparison would be vacuous on constant outputs.
  assert np.std(theirs["sequence_output"]) > 0.1
  assert np.std(theirs["mlm_log_probs"]) > 0.1


@pytest.mark.slow
def test_original_checkpoint_loads_and_matches(tmp_path):
  features = _features()
  prefix = str(tmp_path / "bert_model.ckpt")
  theirs = _run_original(features, save=prefix, extra_variables=True)
  model = modeling.BertPretrainer(CONFIG)
  result = checkpoints.load_checkpoint(model, str(tmp_path))   # the directory works too
  assert result.format == "tf1"
  assert sorted(result.loaded) == sorted(checkpoints.tf1_variable_map(model))
  assert result.unused == ["bert/embeddings/word_embeddings/adam_m", "global_step"]
  assert result.missing == []
  _assert_same(_run_ours(model, features), theirs)


def test_encoder_only_model_ignores_heads(tmp_path):
  features = _features()
  prefix = str(tmp_path / "bert_model.ckpt")
  theirs = _run_original(features, save=prefix)
  model = modeling.BertModel(CONFIG)
  result = checkpoints.load_checkpoint(model, prefix)
  assert all(name.startswith("cls/") for name in result.unused) and len(result.unused) == 7
  out = model(features)
  np.testing.assert_allclose(out["sequence_output"], theirs["sequence_output"], atol=TOL)
  np.testing.assert_allclose(out["pooled_output"], theirs["pooled_output"], atol=TOL)


def test_our_tf1_checkpoint_restores_in_the_original(tmp_path):
  features = _features(seed=3)
  model = modeling.BertPretrainer(CONFIG)
  # Random heads and LayerNorms, so every variable matters for the comparison.
  rng = np.random.RandomState(7)
  for variable in model.weights:
    variable.assign(rng.normal(0, 0.2, variable.shape).astype(np.float32) +
                    (1.0 if variable.path.endswith("gamma") else 0.0))
  prefix = str(tmp_path / "out" / "model.ckpt")
  names = checkpoints.save_tf1_checkpoint(model, prefix)
  assert sorted(dict(tf.train.list_variables(prefix))) == sorted(names)
  theirs = _run_original(features, restore=prefix)
  _assert_same(_run_ours(model, features), theirs)
