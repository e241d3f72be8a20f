"""optimization.py: the original schedule, AdamWeightDecay and LAMB.

Checked against a NumPy re-statement of each update, the original's own
optimization_test case, the schedule's values worked out by hand, and (differentially)
the original create_optimizer/AdamWeightDecayOptimizer run in a TF1 graph.
"""

import contextlib
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import optimization

import oracle

EXCLUDE = ["LayerNorm", "layer_norm", "bias"]

# name (TF1 style, also our Keras path) -> shape
VARIABLES = [
    ("bert/embeddings/word_embeddings", (7, 4)),
    ("bert/encoder/layer_0/attention/output/LayerNorm/gamma", (4,)),
    ("bert/encoder/layer_0/attention/output/LayerNorm/beta", (4,)),
    ("bert/encoder/layer_0/intermediate/dense/kernel", (4, 6)),
    ("bert/encoder/layer_0/intermediate/dense/bias", (6,)),
    ("cls/predictions/output_bias", (7,)),
    ("cls/seq_relationship/output_weights", (2, 4)),
]


def _scoped_variable(path, value):
  """A keras.Variable whose .path is `path` (keras name scopes cannot contain '/')."""
  *scopes, name = path.split("/")
  with contextlib.ExitStack() as stack:
    for scope in scopes:
      stack.enter_context(keras.name_scope(scope))
    return keras.Variable(value, name=name)


def _initial_values(seed=0):
  rng = np.random.RandomState(seed)
  return [rng.normal(0, 0.5, shape).astype(np.float32) for _, shape in VARIABLES]


def _gradients(steps, seed=1, scale=1.0):
  rng = np.random.RandomState(seed)
  return [[(scale * rng.normal(0, 1, shape)).astype(np.float32) for _, shape in VARIABLES]
          for _ in range(steps)]


def _schedule(t, init_lr, total, warmup):
  lr = init_lr * (1.0 - min(t, total) / total)
  if warmup and t < warmup:
    lr = init_lr * t / warmup
  return lr


def _clip(grads, clip_norm):
  norm = np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads))
  return [g * clip_norm / max(norm, clip_norm) for g in grads]


def _numpy_adamw(values, grad_steps, init_lr, total, warmup, wd=0.01, clip_norm=1.0,
                 b1=0.9, b2=0.999, eps=1e-6):
  params = [v.astype(np.float64) for v in values]
  m = [np.zeros_like(p) for p in params]
  v = [np.zeros_like(p) for p in params]
  for t, grads in enumerate(grad_steps):
    lr = _schedule(t, init_lr, total, warmup)
    grads = _clip(grads, clip_norm) if clip_norm else grads
    for i, ((name, _), g) in enumerate(zip(VARIABLES, grads)):
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      update = m[i] / (np.sqrt(v[i]) + eps)
      if wd and not any(re.search(p, name) for p in EXCLUDE):
        update = update + wd * params[i]
      params[i] = params[i] - lr * update
  return params


def _numpy_lamb(values, grad_steps, init_lr, total, warmup, wd=0.01, clip_norm=1.0,
                b1=0.9, b2=0.999, eps=1e-6):
  params = [v.astype(np.float64) for v in values]
  m = [np.zeros_like(p) for p in params]
  v = [np.zeros_like(p) for p in params]
  for t, grads in enumerate(grad_steps):
    lr = _schedule(t, init_lr, total, warmup)
    grads = _clip(grads, clip_norm) if clip_norm else grads
    for i, ((name, _), g) in enumerate(zip(VARIABLES, grads)):
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      m_hat = m[i] / (1 - b1 ** (t + 1))
      v_hat = v[i] / (1 - b2 ** (t + 1))
      update = m_hat / (np.sqrt(v_hat) + eps)
      excluded = any(re.search(p, name) for p in EXCLUDE)
      if wd and not excluded:
        update = update + wd * params[i]
      ratio = 1.0
      if not excluded:
        w_norm, u_norm = np.linalg.norm(params[i]), np.linalg.norm(update)
        if w_norm > 0 and u_norm > 0:
          ratio = w_norm / u_norm
      params[i] = params[i] - lr * ratio * update
  return params


def _run_keras(optimizer, values, grad_steps):
  variables = [_scoped_variable(name, value) for (name, _), value in zip(VARIABLES, values)]
  assert [v.path for v in variables] == [name for name, _ in VARIABLES]
  for grads in grad_steps:
    optimizer.apply([tf.constant(g) for g in grads], variables)
  return [v.numpy() for v in variables]


def test_schedule_golden_values():
  # Linear warmup to 1e-4 over 10 steps, then linear decay to 0 at step 100 (the original's
  # schedule: during warmup lr * step / warmup, after it lr * (1 - step / total)).
  schedule = optimization.WarmupLinearDecay(1e-4, 100, 10)
  expected = {0: 0.0, 1: 1e-5, 5: 5e-5, 9: 9e-5, 10: 9e-5, 11: 8.9e-5, 50: 5e-5,
              99: 1e-6, 100: 0.0, 250: 0.0}
  for step, lr in expected.items():
    np.testing.assert_allclose(float(schedule(step)), lr, rtol=1e-5, atol=1e-12)
  # no warm-up: plain linear decay from init_lr at step 0.
  schedule = optimization.WarmupLinearDecay(2e-5, 20, 0)
  np.testing.assert_allclose([float(schedule(t)) for t in (0, 10, 20)], [2e-5, 1e-5, 0.0],
                             rtol=1e-6)


def test_exclusion_by_path():
  opt = optimization.create_optimizer(1e-3, 10, 1)
  decayed = {name for name, _ in VARIABLES
             if opt.use_weight_decay(_scoped_variable(name, np.zeros((1,), np.float32)))}
  assert decayed == {"bert/embeddings/word_embeddings",
                     "bert/encoder/layer_0/intermediate/dense/kernel",
                     "cls/seq_relationship/output_weights"}


def test_adamw_matches_numpy_restatement():
  values = _initial_values()
  grad_steps = _gradients(6, scale=0.7)  # global norm ~ 5: clipping active
  got = _run_keras(optimization.create_optimizer(1e-2, 8, 3), values, grad_steps)
  want = _numpy_adamw(values, grad_steps, 1e-2, 8, 3)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
  # and the update did something beyond weight decay: first step (lr 0) changes nothing.
  assert not np.allclose(got[0], values[0])


def test_adamw_original_test_case():
  # The original optimization_test: 100 steps, lr 0.2, no decay; ~ target within 1e-2.
  w = keras.Variable(np.array([0.1, -0.2, -0.1], np.float32), name="w")
  x = tf.constant([0.4, 0.2, -0.5])
  opt = optimization.AdamWeightDecay(learning_rate=0.2)
  for _ in range(100):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(x - w.value))
    opt.apply([tape.gradient(loss, w.value)], [w])
  np.testing.assert_allclose(w.numpy(), x.numpy(), rtol=1e-2, atol=1e-2)
  np.testing.assert_allclose(w.numpy(), [0.4016, 0.1978, -0.4978], atol=2e-4)


def test_adamw_matches_original_optimizer():
  """Differential: the original create_optimizer (schedule, clip 1.0, AdamWeightDecay
  with decay 0.01 and its exclusions) in a TF1 graph vs ours, same grads, 7 steps."""
  original = oracle.original("optimization")
  tf1 = tf.compat.v1
  values = _initial_values(3)
  grad_steps = _gradients(7, seed=4, scale=0.5)
  init_lr, total, warmup = 5e-2, 10, 3
  with tf.Graph().as_default():
    tvars = [tf1.get_variable(name, initializer=value)
             for (name, _), value in zip(VARIABLES, values)]
    feeds = [tf1.placeholder(tf.float32, shape) for _, shape in VARIABLES]
    # d(loss)/d(var) = the fed gradient exactly.
    loss = tf.add_n([tf.reduce_sum(v * tf.stop_gradient(g)) for v, g in zip(tvars, feeds)])
    train_op = original.create_optimizer(loss, init_lr, total, warmup, use_tpu=False)
    # One inter-op thread: the original's train_op groups the update (whose learning rate
    # reads global_step) with global_step's increment, no order between them; with several
    # threads a loaded machine now and then runs the increment first (a step's rate off).
    with tf1.Session(config=tf1.ConfigProto(inter_op_parallelism_threads=1)) as sess:
      sess.run(tf1.global_variables_initializer())
      for grads in grad_steps:
        sess.run(train_op, feed_dict=dict(zip(feeds, grads)))
      want = sess.run(tvars)
  got = _run_keras(optimization.create_optimizer(init_lr, total, warmup), values, grad_steps)
  for (name, _), g, w in zip(VARIABLES, got, want):
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7, err_msg=name)


def test_lamb_matches_numpy_restatement():
  values = _initial_values(5)
  values[3] = np.zeros_like(values[3])  # ||w|| = 0 -> trust ratio 1
  grad_steps = _gradients(5, seed=6, scale=0.3)
  opt = optimization.create_optimizer(1e-2, 6, 2, optimizer_type="lamb")
  assert isinstance(opt, optimization.Lamb)
  got = _run_keras(opt, values, grad_steps)
  want = _numpy_lamb(values, grad_steps, 1e-2, 6, 2)
  for (name, _), g, w in zip(VARIABLES, got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_unknown_optimizer():
  with pytest.raises(ValueError, match="lamb"):
    optimization.create_optimizer(1e-3, 10, 1, optimizer_type="sgd")


def test_bert_variable_paths_select_the_original_decay_set():
  """Keras paths of modeling.BertPretrainer's variables give the same decay/no-decay
  split as the original's TF1 names (every LayerNorm beta/gamma and bias excluded)."""
  from bert_keras import checkpoints
  from bert_keras import modeling
  config = modeling.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=32)
  model = modeling.BertPretrainer(config)
  tf1_names = {id(v): name for name, v in checkpoints.tf1_variable_map(model).items()}
  assert len(tf1_names) == len(model.trainable_variables)
  for opt in (optimization.create_optimizer(1e-3, 10, 1),
              optimization.create_optimizer(1e-3, 10, 1, optimizer_type="lamb")):
    for v in model.trainable_variables:
      name = tf1_names[id(v)]
      original = not any(re.search(p, name) for p in EXCLUDE)
      assert opt.use_weight_decay(v) == original, (v.path, name)


# The private hooks of Keras's TensorFlow optimizer that optimization._ClipAfterReduce
# overrides (to clip after the cross-replica sum): a Keras upgrade that renames or stops
# calling them would silently bring back Keras's clip-before-sum.
KERAS_HOOKS = ("_clip_gradients", "_all_reduce_sum_gradients")


def test_the_private_keras_hooks_we_override_still_exist():
  import inspect
  for name in KERAS_HOOKS:
    theirs = getattr(keras.optimizers.Optimizer, name, None)
    assert theirs is not None, f"keras {keras.__version__} has no Optimizer.{name}"
    ours = getattr(optimization.AdamWeightDecay, name)
    assert ours is not theirs
    assert (list(inspect.signature(ours).parameters)
            == list(inspect.signature(theirs).parameters)), name


def test_keras_calls_our_hooks_and_we_clip_after_the_sum():
  calls = []

  class Recording(optimization.AdamWeightDecay):

    def _clip_gradients(self, grads):
      out = super()._clip_gradients(grads)
      calls.append(("clip", float(tf.linalg.global_norm(out))))
      return out

    def _all_reduce_sum_gradients(self, grads_and_vars):
      out = super()._all_reduce_sum_gradients(grads_and_vars)
      calls.append(("sum", float(tf.linalg.global_norm([g for g, _ in out]))))
      return out

  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  with strategy.scope():
    variable = tf.Variable([1.0, 2.0])
    optimizer = Recording(learning_rate=0.1, global_clipnorm=1.0)
    optimizer.build([variable])

  # Eagerly, so that the hooks can read their norms; in a replica context, as in training.
  strategy.run(lambda: optimizer.apply_gradients([(tf.constant([6.0, 8.0]), variable)]))
  assert [name for name, _ in calls] == ["clip", "sum"], calls
  assert calls[0][1] == pytest.approx(10.0)  # Keras's clip (before the sum) is a no-op here
  assert calls[1][1] == pytest.approx(1.0)   # ours, after the sum, clips to global_clipnorm


@pytest.mark.parametrize("optimizer_type", ["adamw", "lamb"])
def test_update_in_tf_function_equals_eager(optimizer_type):
  """The training loops apply the optimizer inside tf.function (and XLA): the same update as
  eagerly, from the same state."""
  rng = np.random.RandomState(3)
  start = rng.normal(size=(4, 3)).astype("float32")
  grads = [rng.normal(size=(4, 3)).astype("float32") for _ in range(3)]
  results = []
  for compiled in (False, True):
    variable = keras.Variable(start, name="kernel")
    optimizer = optimization.create_optimizer(1e-2, 10, 0, optimizer_type=optimizer_type)
    optimizer.build([variable])
    apply = lambda g: optimizer.apply([g], [variable])
    if compiled:
      apply = tf.function(apply)
    for g in grads:
      apply(tf.constant(g))
    results.append(variable.numpy())
  assert not np.allclose(results[0], start)
  np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-7)
