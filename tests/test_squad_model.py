"""run_squad's model: the span head (BertSquad) and the loss against the original's graph and
model_fn (a TF1 session), one training step against the original's train_op, the config round
trip. run_squad's reading, features and command line are in test_run_squad.py."""

import functools
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import oracle
from bert_keras import checkpoints
from bert_keras import losses
from bert_keras import modeling
from bert_keras import run_squad
from bert_keras.runtime import settings
from bert_keras.runtime import distribution
from bert_keras.runtime import input_pipeline
from bert_keras.runtime import training
from bert_keras.tasks.squad import data as squad_data
from test_run_squad import TINY


@pytest.fixture(scope="module")
def orig():
  return oracle.original("run_squad")


# ----------------------------------------------------------------------------
# The span head and the loss.

def _tiny_config(**overrides):
  return modeling.BertConfig(**{**TINY, "vocab_size": 100, "max_position_embeddings": 32,
                                **overrides})


def _inputs(batch=3, seq=12, seed=0):
  rng = np.random.RandomState(seed)
  ids = rng.randint(1, 100, (batch, seq)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 8:] = 0
  segments = np.zeros_like(ids)
  segments[:, 5:] = 1
  return ids, mask, segments


def _original_graph(config, ids, mask, segments, body):
  """Builds the original create_model(is_training=False) in a TF1 graph and calls
  body(session-less graph, start_logits, end_logits)."""
  import tensorflow.compat.v1 as tf1
  orig = oracle.original("run_squad")
  original_modeling = oracle.original("modeling")
  tf1.disable_v2_tensorshape()
  try:
    with tf.Graph().as_default():
      start, end = orig.create_model(
          original_modeling.BertConfig.from_dict(config.to_dict()), False, tf1.constant(ids),
          tf1.constant(mask), tf1.constant(segments), False)
      return body(start, end)
  finally:
    tf1.enable_v2_tensorshape()


def test_span_head_against_the_original_graph(tmp_path):
  """Our TF1 checkpoint restores in the original's create_model graph (same names and
  shapes, nothing extra) with the same start/end logits; the original graph's checkpoint
  loads into ours with the same logits."""
  import tensorflow.compat.v1 as tf1
  config = _tiny_config(initializer_range=0.2)
  ids, mask, segments = _inputs()
  model = modeling.BertSquad(config)
  with tf.init_scope():
    model.squad.output_bias.assign([0.3, -0.2])
  ours_prefix = str(tmp_path / "ours" / "model.ckpt")
  written = checkpoints.save_tf1_checkpoint(model, ours_prefix)
  assert written[-2:] == ["cls/squad/output_weights", "cls/squad/output_bias"]
  outputs = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
  ours = (outputs["start_logits"].numpy(), outputs["end_logits"].numpy())
  assert ours[0].shape == (3, 12) and outputs["start_logits"].dtype == tf.float32
  theirs_prefix = str(tmp_path / "theirs" / "model.ckpt")

  def body(start, end):
    graph_vars = {v.op.name: v.shape.as_list() for v in tf1.global_variables()}
    assert graph_vars == {n: list(s) for n, s in tf.train.list_variables(ours_prefix)}
    assert graph_vars["cls/squad/output_weights"] == [2, 32]
    with tf1.Session() as sess:
      saver = tf1.train.Saver()
      saver.restore(sess, ours_prefix)
      restored = sess.run([start, end])
      sess.run(tf1.global_variables_initializer())   # fresh (original) weights
      fresh = sess.run([start, end])
      saver.save(sess, theirs_prefix)
    return restored, fresh

  restored, fresh = _original_graph(config, ids, mask, segments, body)
  np.testing.assert_allclose(restored[0], ours[0], atol=1e-5)
  np.testing.assert_allclose(restored[1], ours[1], atol=1e-5)
  assert np.abs(ours[0] - ours[1]).max() > 1e-2   # two different rows of output_weights
  other = modeling.BertSquad(config)
  result = checkpoints.load_checkpoint(other, theirs_prefix)
  assert not result.missing and "cls/squad/output_bias" in result.loaded
  outputs = other({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
  np.testing.assert_allclose(outputs["start_logits"].numpy(), fresh[0], atol=1e-5)
  np.testing.assert_allclose(outputs["end_logits"].numpy(), fresh[1], atol=1e-5)


def _stand_in_estimator(monkeypatch):
  """tf.estimator is gone from TF 2.21: a stand-in for what the original's model_fn reads of it
  (the mode keys) and builds (a TPUEstimatorSpec, here the dict of its fields)."""
  import tensorflow.compat.v1 as tf1
  monkeypatch.setattr(tf1, "estimator", types.SimpleNamespace(
      ModeKeys=types.SimpleNamespace(TRAIN="train", PREDICT="infer"),
      tpu=types.SimpleNamespace(TPUEstimatorSpec=lambda **spec: spec)), raising=False)


@pytest.mark.slow
def test_loss_matches_the_original_model_fn(tmp_path, monkeypatch):
  """The original model_fn in TRAIN mode (dropout 0, warm-started from our checkpoint):
  its total_loss equals the batch mean of losses.squad_loss. tf.estimator is gone from
  TF 2.21, so a stand-in carries the mode key and the returned TPUEstimatorSpec's fields."""
  import tensorflow.compat.v1 as tf1
  orig = oracle.original("run_squad")
  original_modeling = oracle.original("modeling")
  config = _tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        initializer_range=0.2)
  model = modeling.BertSquad(config)
  prefix = str(tmp_path / "model.ckpt")
  checkpoints.save_tf1_checkpoint(model, prefix)
  ids, mask, segments = _inputs()
  starts, ends = np.array([3, 0, 11], np.int32), np.array([4, 0, 7], np.int32)
  outputs = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments},
                  training=True)
  per_example = losses.squad_loss(outputs["start_logits"], outputs["end_logits"], starts,
                                    ends).numpy()
  assert per_example.shape == (3,)
  _stand_in_estimator(monkeypatch)
  tf1.disable_v2_tensorshape()
  try:
    with tf.Graph().as_default():
      model_fn = orig.model_fn_builder(original_modeling.BertConfig.from_dict(config.to_dict()),
                                       prefix, 1e-3, 10, 1, False, False)
      features = {"unique_ids": tf1.constant([1, 2, 3]), "input_ids": tf1.constant(ids),
                  "input_mask": tf1.constant(mask), "segment_ids": tf1.constant(segments),
                  "start_positions": tf1.constant(starts), "end_positions": tf1.constant(ends)}
      spec = model_fn(features, None, "train", {})
      with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        theirs = sess.run(spec["loss"])
  finally:
    tf1.enable_v2_tensorshape()
  np.testing.assert_allclose(per_example.mean(), theirs, rtol=1e-5)
  assert theirs > 1.0


def _training_records(path, num_records, seq, seed):
  """num_records random training windows (ids 1..40 of a vocabulary of 100, masks of 4..seq
  tokens, segments, start <= end inside the tokens, some at [CLS]) written by
  run_squad.FeatureWriter to `path`."""
  rng = np.random.RandomState(seed)
  writer = run_squad.FeatureWriter(path, is_training=True)
  for i in range(num_records):
    length = rng.randint(4, seq + 1)
    ids = np.zeros(seq, np.int32)
    ids[:length] = rng.randint(1, 41, length)
    mask = (np.arange(seq) < length).astype(np.int32)
    segments = ((np.arange(seq) >= length // 3) & (mask == 1)).astype(np.int32)
    start = 0 if i % 5 == 0 else rng.randint(1, length)
    end = 0 if start == 0 else rng.randint(start, min(start + 4, length))
    writer.process_feature(squad_data.InputFeatures(
        unique_id=squad_data.FIRST_UNIQUE_ID + i, example_index=i, doc_span_index=0,
        tokens=None, token_to_orig_map={}, token_is_max_context={}, input_ids=list(ids),
        input_mask=list(mask), segment_ids=list(segments), start_position=int(start),
        end_position=int(end), is_impossible=False))
  writer.close()


def _train_the_original(config, init_checkpoint, batches, learning_rate, num_train_steps,
                        num_warmup_steps, monkeypatch, one_hot=False, restarts=()):
  """The original model_fn's train_op (its create_optimizer: warmup, linear decay, global-norm
  clip 1.0, AdamWeightDecayOptimizer) in a TF1 session, warm-started from init_checkpoint,
  one step per batch. A state is {name: value} of every variable of the graph: the weights,
  their <name>/adam_m and <name>/adam_v slots, global_step.

  -> (losses, states, restarted, norms): the loss of each step; the state before the first
  step and after each; for each (step, state) of `restarts`, the state after one step on
  batches[step] from `state` (loaded into the graph's variables); for each step, the global
  norm of the gradients as tf.clip_by_global_norm takes it (of an IndexedSlices gradient,
  its values), and that of the dense gradients.
  """
  import tensorflow.compat.v1 as tf1
  orig = oracle.original("run_squad")
  original_modeling = oracle.original("modeling")
  _stand_in_estimator(monkeypatch)
  tf1.disable_v2_tensorshape()
  try:
    with tf.Graph().as_default():
      model_fn = orig.model_fn_builder(
          original_modeling.BertConfig.from_dict(config.to_dict()), init_checkpoint,
          learning_rate, num_train_steps, num_warmup_steps, False, one_hot)
      seq = batches[0]["input_ids"].shape[1]
      features = {"unique_ids": tf1.placeholder(tf.int32, [None]),
                  "start_positions": tf1.placeholder(tf.int32, [None]),
                  "end_positions": tf1.placeholder(tf.int32, [None])}
      for name in ("input_ids", "input_mask", "segment_ids"):
        features[name] = tf1.placeholder(tf.int32, [None, seq])
      spec = model_fn(features, None, "train", {})
      variables = {v.op.name: v for v in tf1.global_variables()}
      grads = [g for g in tf1.gradients(spec["loss"], tf1.trainable_variables())
               if g is not None]
      norms = (tf1.global_norm(grads), tf1.global_norm([tf1.convert_to_tensor(g)
                                                        for g in grads]))
      # One inter-op thread: the original's train_op reads global_step (the learning rate)
      # and increments it with no order between the two (test_optimization says more).
      with tf1.Session(config=tf1.ConfigProto(inter_op_parallelism_threads=1)) as sess:

        def step(batch):
          feed = {features[k]: batch[k] for k in features}
          norm = sess.run(norms, feed)
          loss, _ = sess.run([spec["loss"], spec["train_op"]], feed)
          return float(loss), norm

        sess.run(tf1.global_variables_initializer())
        states = [sess.run(variables)]
        losses, global_norms = [], []
        for batch in batches:
          loss, norm = step(batch)
          losses.append(loss)
          global_norms.append(norm)
          states.append(sess.run(variables))
        restarted = []
        for index, state in restarts:
          for name, variable in variables.items():
            variable.load(state[name], sess)
          step(batches[index])
          restarted.append(sess.run(variables))
        return losses, states, restarted, global_norms
  finally:
    tf1.enable_v2_tensorshape()


def _our_state(trainer, names):
  """Our trainer's state under the original's names (see _train_the_original)."""
  optimizer = trainer.optimizer
  state = {"global_step": trainer.global_step.numpy()}
  for name, variable in names.items():
    index = optimizer._get_variable_index(variable)
    state[name] = variable.numpy()
    state[name + "/adam_m"] = optimizer._adam_m[index].numpy()
    state[name + "/adam_v"] = optimizer._adam_v[index].numpy()
  return state


@pytest.mark.slow
def test_training_matches_the_original_model_fn(tmp_path, monkeypatch):
  """Differential training: run_squad's own path (training.build_trainer with SquadTask and
  optimization.create_optimizer, training.fine_tune over run_squad's TFRecords, warm-started
  from --init_checkpoint) against the original model_fn's train_op in a TF1 session, from
  the same checkpoint on the same batches in the same order (dropout 0), 6 steps of which 2
  warmup (the first at learning rate 0), learning rate 1e-3.

  * Step by step: the original restarted from our state after step s-1 gives our state
    after step s (weights, Adam's m and v) to float rounding, with the original's one-hot
    embedding lookup (its TPU path).
  * Its default gather lookup (CPU/GPU) clips differently: tf.clip_by_global_norm takes the
    norm of the word-embedding gradient's IndexedSlices values, one row per token, before
    repeated tokens are summed; ours (and its one-hot path) the norm of the summed gradient.
    So the clipped gradients differ by a factor, visible in m after the first step.
  * Free-running from the same checkpoint (the gather lookup): the same per-step losses
    (rtol 1e-4) and learning rates; final weights within 0.5% of how far each tensor moved
    (Frobenius norm; seen: up to 0.09%) and 1e-3 element-wise (seen: up to 2e-4, a ~1e-2
    move). Not to rounding: the trajectories drift apart because Adam divides by
    sqrt(v) + 1e-6, so an element whose gradient is near 1e-6 moves in proportion to it, and
    the ~1e-7 gradient differences that rounding leaves after a step or two become ~1e-5
    weight differences there (more with higher learning rates or more steps).
  * Word-embedding rows that no batch uses move by weight decay alone, on both sides.
  * The pooler has no gradient: both leave it alone (no weight decay).
  """
  keras.utils.set_random_seed(1)
  config = _tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        initializer_range=0.2, max_position_embeddings=16)
  batch_size, seq, num_train_steps, learning_rate = 4, 16, 6, 1e-3
  init_checkpoint = str(tmp_path / "init" / "model.ckpt")
  checkpoints.save_tf1_checkpoint(modeling.BertSquad(config), init_checkpoint)
  records = str(tmp_path / "train.tf_record")
  _training_records(records, 4 * batch_size, seq, seed=3)
  options = run_squad.options(
      output_dir=str(tmp_path / "ours"), init_checkpoint=init_checkpoint,
      learning_rate=learning_rate, train_batch_size=batch_size, log_every_steps=1,
      warmup_proportion=0.4)
  num_warmup_steps = int(num_train_steps * options.warmup_proportion)   # as run_squad
  assert num_warmup_steps == 2

  # Ours, as run_squad._train_predict builds and trains it; its state after every step.
  run_settings = settings.RunSettings.from_flags(options)
  trainer = training.build_trainer(run_settings.training,
                                   distribution.strategy_for(run_settings.placement),
                                   lambda: modeling.BertSquad(config), run_squad.SquadTask(),
                                   num_train_steps, num_warmup_steps)
  names = checkpoints.tf1_variable_map(trainer.model)
  logged, ours = [], [None]

  def log(step, stats):
    logged.append((step, stats))
    ours.append(_our_state(trainer, names))

  decode = run_squad.decode_fn(seq, is_training=True)
  training.fine_tune(trainer, run_settings.training, records, decode, num_train_steps, log_fn=log)
  assert [step for step, _ in logged] == list(range(1, num_train_steps + 1))

  # The batches fine_tune read, in its order (its input pipeline is seeded): the original's.
  dataset = input_pipeline.training_dataset([records], decode, batch_size, seed=options.seed)
  batches = list(dataset.take(num_train_steps).as_numpy_iterator())
  assert len({u for b in batches for u in b["unique_ids"]}) > batch_size
  original = functools.partial(_train_the_original, config, init_checkpoint, batches,
                               learning_rate, num_train_steps, num_warmup_steps, monkeypatch)
  losses, theirs, _, norms = original()
  one_hot_losses, one_hot, restarted, _ = original(
      one_hot=True, restarts=[(step, ours[step]) for step in range(1, num_train_steps)])
  initial = theirs[0]
  pooler = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")
  assert set(theirs[0]) == set(ours[1]) - {n + slot for n in pooler
                                           for slot in ("/adam_m", "/adam_v")}

  ours_losses = [stats["loss"] for _, stats in logged]
  np.testing.assert_allclose(ours_losses, losses, rtol=1e-4)
  np.testing.assert_allclose(ours_losses, one_hot_losses, rtol=1e-4)
  assert min(losses) > 1.0
  # The learning rate of update t (t = 0..5): warmup, then linear decay to 0 at step 6.
  rates = [learning_rate * t / num_warmup_steps if t < num_warmup_steps else
           learning_rate * (1.0 - t / num_train_steps) for t in range(num_train_steps)]
  np.testing.assert_allclose([stats["learning_rate"] for _, stats in logged[:-1]], rates[1:],
                             rtol=1e-6)   # logged after step s: the rate of update s

  # Step by step from the same state (the original's one-hot lookup). Gradients that are 0
  # mathematically (a softmax over positions ignores a shift) are rounding noise of ~1e-8,
  # below Adam's epsilon: m / (sqrt(v) + 1e-6) turns their differences into updates of up to
  # ~lr * 1e-2 (elsewhere the weights agree to a few ulps).
  no_gradient = ("bert/encoder/layer_0/attention/self/key/bias",
                 "bert/encoder/layer_1/attention/self/key/bias",
                 "bert/encoder/layer_1/output/LayerNorm/beta", "cls/squad/output_bias")
  for step in range(1, num_train_steps + 1):
    want = one_hot[1] if step == 1 else restarted[step - 2]
    assert want["global_step"] == ours[step]["global_step"] == step
    for name in sorted(set(want) - {"global_step"} - set(pooler)):
      if name.endswith(("/adam_m", "/adam_v")):
        rtol, atol = 1e-5, 1e-7 if name.endswith("/adam_m") else 1e-9
      else:   # a weight decay of lr * 0.01 * w per step shows: no rtol
        rtol, atol = 0.0, 1e-5 if name in no_gradient else 2e-6
      np.testing.assert_allclose(ours[step][name], want[name], rtol=rtol, atol=atol,
                                 err_msg=f"step {step}: {name}")

  # The original's gather lookup clips by another norm (the padding and the repeated ids of
  # every batch make it differ): after step 1 (learning rate 0, the same weights) its m is
  # ours times the ratio of the two clipping factors, for every variable.
  clipped_norm, dense_norm = norms[0]
  ratio = max(dense_norm, 1.0) / max(clipped_norm, 1.0)
  assert clipped_norm > 1.0 and abs(ratio - 1.0) > 1e-4   # clipped, by another factor
  for name in [name for name in theirs[1] if name.endswith("/adam_m")]:
    np.testing.assert_allclose(theirs[1][name], ratio * ours[1][name], rtol=1e-5, atol=1e-7,
                               err_msg=name)

  # Free-running: the final weights (the original's default, gather lookup).
  for name in sorted(set(names) - set(pooler)):
    np.testing.assert_allclose(ours[-1][name], theirs[-1][name], rtol=0, atol=1e-3,
                               err_msg=name)
    moved = theirs[-1][name] - initial[name]
    if name in no_gradient:
      assert np.abs(moved).max() < 5e-5, name
    else:
      assert np.abs(moved).max() > 3e-3, name
      assert (np.linalg.norm(ours[-1][name] - theirs[-1][name]) <
              5e-3 * np.linalg.norm(moved)), name

  # Rows of word_embeddings no batch uses: weight decay alone, exactly.
  decayed = np.prod([1.0 - 0.01 * rate for rate in rates])
  unused = sorted(set(range(config.vocab_size)) - {int(i) for b in batches
                                                   for i in b["input_ids"].ravel()})
  assert len(unused) >= 50
  rows = initial["bert/embeddings/word_embeddings"][unused]
  for side in (ours[-1], theirs[-1]):
    np.testing.assert_allclose(side["bert/embeddings/word_embeddings"][unused],
                               rows * decayed, rtol=0, atol=2e-7)
  assert np.abs(rows * decayed - rows).max() > 3e-6

  # The pooler (unread by the span head) has no gradient: both optimizers leave it alone
  # (no weight decay either), and ours makes no update of its Adam slots.
  for name in pooler:
    np.testing.assert_array_equal(theirs[-1][name], initial[name])
    np.testing.assert_array_equal(ours[-1][name], initial[name])
    assert not ours[-1][name + "/adam_m"].any() and not ours[-1][name + "/adam_v"].any()


def test_squad_model_config_round_trip_and_head():
  model = modeling.BertSquad(_tiny_config())
  clone = modeling.BertSquad.from_config(model.get_config())
  assert clone.config == model.config
  assert [v.shape for v in clone.weights] == [v.shape for v in model.weights]
  w = model.squad.output_weights.numpy()
  assert w.shape == (2, 32) and np.abs(w).max() <= 0.04 + 1e-6 and 0.005 < w.std() < 0.03
  assert not model.squad.output_bias.numpy().any()
  names = list(checkpoints.tf1_variable_map(model))
  assert names[-2:] == ["cls/squad/output_weights", "cls/squad/output_bias"]
  assert not any(n.startswith("output_") for n in names)
  # No dropout in the head: with the encoder's dropout off, training changes nothing.
  quiet = modeling.BertSquad(_tiny_config(hidden_dropout_prob=0.0,
                                          attention_probs_dropout_prob=0.0))
  ids = np.ones((2, 8), np.int32)
  np.testing.assert_array_equal(quiet(ids, training=True)["start_logits"].numpy(),
                                quiet(ids, training=False)["start_logits"].numpy())
