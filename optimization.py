"""Learning-rate schedule and optimizers of BERT pre-training, as Keras 3 objects.

* `WarmupLinearDecay`: the original schedule — linear warm-up from 0 for
  `num_warmup_steps`, then linear (polynomial power 1) decay to 0 measured from
  step 0, so the peak `init_lr` is never reached when warm-up is on.
* `AdamWeightDecay`: the original AdamWeightDecayOptimizer — Adam moments WITHOUT
  bias correction, epsilon outside the square root, decoupled weight decay added
  to the update before it is multiplied by the learning rate, no decay for
  variables whose path matches "LayerNorm", "layer_norm" or "bias" (re.search).
* `Lamb`: LAMB (You et al. 2019, as in NVIDIA's BERT recipe) — Adam moments WITH
  bias correction, decoupled weight decay, and a layer-wise trust ratio
  ||w|| / ||update|| (1 when either norm is 0); excluded variables get neither
  weight decay nor the trust ratio.

Both optimizers clip gradients by their global norm (`global_clipnorm`, 1.0 in
`create_optimizer`) AFTER the gradients are summed across replicas, so clipping
sees the gradient of the global batch under any tf.distribute strategy (Keras'
own `global_clipnorm` clips each replica's partial gradient before the sum).
"""

import re

from bert_keras.utils import backend  # first: TensorFlow quietly, where it is Keras's backend
import keras
from keras import ops

# TensorFlow where it is the backend (cross-replica clipping, the XLA-compiled update), else
# None: on JAX and PyTorch this module imports no TensorFlow.
tf = backend.tensorflow()
# PyTorch where it is the backend (AdamWeightDecay's multi-tensor update), else None.
if backend.name() == "torch":
  import torch
else:
  torch = None

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


def variable_name(variable):
  """The name matched by the exclusion patterns: the Keras path (for example
  "bert/encoder/layer_0/attention/output/LayerNorm/gamma"), else the tf name
  without its ":N" suffix."""
  name = getattr(variable, "path", None) or variable.name
  match = re.match(r"^(.*):\d+$", name)
  return match.group(1) if match else name


def _matches_any(name, patterns):
  return any(re.search(p, name) is not None for p in patterns or ())


@keras.saving.register_keras_serializable(package="bert_keras")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
  """lr(t) = init_lr * t / num_warmup_steps            if t < num_warmup_steps,
     lr(t) = init_lr * (1 - min(t, T) / T) ** power    otherwise (T = num_train_steps).

  `num_warmup_steps` 0 or None disables the warm-up. `t` is the optimizer's step
  counter before the update (0 for the first update), as in the original.
  Computed in float32 in the same order as the original graph.
  """

  def __init__(self, init_lr, num_train_steps, num_warmup_steps, end_lr=0.0, power=1.0):
    super().__init__()
    self.init_lr = float(init_lr)
    self.num_train_steps = int(num_train_steps)
    self.num_warmup_steps = int(num_warmup_steps or 0)
    self.end_lr = float(end_lr)
    self.power = float(power)

  def __call__(self, step):
    step = ops.convert_to_tensor(step)
    step_f = ops.cast(step, "float32")
    decay_steps = ops.convert_to_tensor(float(max(self.num_train_steps, 1)), "float32")
    fraction = ops.minimum(step_f, decay_steps) / decay_steps
    lr = ((self.init_lr - self.end_lr) * ops.power(1.0 - fraction, self.power)
          + self.end_lr)
    if self.num_warmup_steps:
      step_i = ops.cast(step, "int32")
      warmup_lr = self.init_lr * (ops.cast(step_i, "float32") /
                                  float(self.num_warmup_steps))
      is_warmup = ops.cast(step_i < self.num_warmup_steps, "float32")
      lr = (1.0 - is_warmup) * lr + is_warmup * warmup_lr
    return lr

  def get_config(self):
    return {"init_lr": self.init_lr, "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps, "end_lr": self.end_lr,
            "power": self.power}


def clip_by_global_norm(grads, clip_norm):
  """The original's clipping, g * c / max(||grads||, c) with ||grads|| the global norm over the
  list (None entries kept): tf.clip_by_global_norm's formula, in Keras ops."""
  present = [g for g in grads if g is not None]
  if not present:
    return grads
  norm = ops.sqrt(sum(ops.sum(ops.square(ops.cast(g, "float32"))) for g in present))
  scale = clip_norm / ops.maximum(norm, clip_norm)
  return [None if g is None else g * ops.cast(scale, g.dtype) for g in grads]


def _read(variable):
  """A variable's current value as a tensor of the backend. On TensorFlow a read tensor
  (tf.convert_to_tensor): keras.ops.convert_to_tensor hands a variable back as it is, and the
  XLA-compiled update would then capture the variable itself (its trace kept alive past the
  optimizer's, and untraceable inside tf.function)."""
  value = variable.value if isinstance(variable, keras.Variable) else variable
  return tf.convert_to_tensor(value) if tf is not None else ops.convert_to_tensor(value)


class _ClipAfterReduce:
  """Mixin: global-norm clipping of the cross-replica SUM of the gradients.

  Keras' base optimizer clips (`_clip_gradients`) before the TF backend sums the
  per-replica gradients (`_all_reduce_sum_gradients`); under TensorFlow we clip after the sum,
  with tf.clip_by_global_norm (the original's op: g * c / max(norm, c)), and dense-ify
  IndexedSlices gradients (embedding lookups), as the original did. On JAX and PyTorch the
  gradients reach the optimizer already summed (Keras's distribution shards the batch inside
  one program), so they are clipped where Keras clips, by the same formula.
  """

  def _clip_gradients(self, grads):
    if tf is not None or not self.global_clipnorm:
      return grads
    if torch is not None:
      return _torch_clip_by_global_norm(grads, self.global_clipnorm)
    return clip_by_global_norm(grads, self.global_clipnorm)

  def _all_reduce_sum_gradients(self, grads_and_vars):
    grads_and_vars = [
        (tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g, v)
        for g, v in grads_and_vars]
    grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)
    if not self.global_clipnorm:
      return grads_and_vars
    present = [i for i, (g, _) in enumerate(grads_and_vars) if g is not None]
    clipped, _ = tf.clip_by_global_norm(
        [grads_and_vars[i][0] for i in present], self.global_clipnorm)
    grads_and_vars = list(grads_and_vars)
    for i, g in zip(present, clipped):
      grads_and_vars[i] = (g, grads_and_vars[i][1])
    return grads_and_vars


def _adam_weight_decay_math(grad, m, v, w, lr, beta_1, one_minus_beta_1, beta_2,
                            one_minus_beta_2, epsilon, decay):
  """AdamWeightDecay's update of one variable -> (m, v, w) after it, in Keras ops; every
  argument a tensor of the variable's dtype: the same operations on the same float32
  constants as the original's (1 - beta is rounded from the double, as its Python float is).
  decay 0: none (u + 0 * w = u)."""
  next_m = beta_1 * m + one_minus_beta_1 * grad
  next_v = beta_2 * v + one_minus_beta_2 * ops.square(grad)
  update = next_m / (ops.sqrt(next_v) + epsilon) + decay * w
  return next_m, next_v, w - lr * update


def _torch_clip_by_global_norm(grads, clip_norm):
  """clip_by_global_norm's formula on PyTorch in multi-tensor ops: a handful of kernels over
  all the gradients instead of three per gradient (float32 gradients; others: the general
  path)."""
  present = [g for g in grads if g is not None]
  if not present or any(g.dtype != torch.float32 for g in present):
    return clip_by_global_norm(grads, clip_norm)
  with torch.no_grad():
    squares = torch.stack(torch._foreach_norm(present)).square().sum()
    scale = clip_norm / torch.clamp(torch.sqrt(squares), min=clip_norm)
    clipped = iter(torch._foreach_mul(present, scale))
  return [None if g is None else next(clipped) for g in grads]


def _torch_adam_weight_decay(grads, ms, vs, ws, lr, beta_1, beta_2, epsilon, decays):
  """AdamWeightDecay's update (_adam_weight_decay_math) of all the variables at once in
  PyTorch's multi-tensor (_foreach) ops, in place: float32 tensors of the moments and the
  variables; decays[i] the weight-decay rate of ws[i] (0: none)."""
  torch._foreach_mul_(ms, beta_1)
  torch._foreach_add_(ms, grads, alpha=1.0 - beta_1)
  torch._foreach_mul_(vs, beta_2)
  torch._foreach_add_(vs, torch._foreach_mul(grads, grads), alpha=1.0 - beta_2)
  denominators = torch._foreach_sqrt(vs)
  torch._foreach_add_(denominators, epsilon)
  updates = torch._foreach_div(ms, denominators)
  decayed = [i for i, d in enumerate(decays) if d]
  if decayed:
    torch._foreach_add_([updates[i] for i in decayed],
                        torch._foreach_mul([ws[i] for i in decayed],
                                           [decays[i] for i in decayed]))
  torch._foreach_mul_(updates, lr)
  torch._foreach_sub_(ws, updates)


# Under TensorFlow compiled by XLA into one pass over g, m, v and w, not a dozen (twice as
# fast on a CPU); JAX compiles the whole step anyway, PyTorch runs it as it is.
_adam_weight_decay_step = (tf.function(_adam_weight_decay_math, jit_compile=True)
                           if tf is not None else _adam_weight_decay_math)


@keras.saving.register_keras_serializable(package="bert_keras")
class AdamWeightDecay(_ClipAfterReduce, keras.optimizers.Optimizer):
  """The original BERT AdamWeightDecayOptimizer as a Keras 3 optimizer.

  Per variable w with gradient g (after global-norm clipping):
    m <- beta_1 m + (1 - beta_1) g;   v <- beta_2 v + (1 - beta_2) g^2
    u <- m / (sqrt(v) + epsilon)          (no bias correction)
    u <- u + weight_decay_rate * w        (unless the path matches an exclusion)
    w <- w - lr * u
  Slots are named <path>_adam_m / <path>_adam_v.
  """

  def __init__(self, learning_rate=0.001, weight_decay_rate=0.0, beta_1=0.9,
               beta_2=0.999, epsilon=1e-6, exclude_from_weight_decay=None,
               global_clipnorm=None, name="AdamWeightDecay", **kwargs):
    super().__init__(learning_rate=learning_rate, global_clipnorm=global_clipnorm,
                     name=name, **kwargs)
    self.weight_decay_rate = float(weight_decay_rate or 0.0)
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay_patterns = list(exclude_from_weight_decay or [])

  def use_weight_decay(self, variable):
    if not self.weight_decay_rate:
      return False
    return not _matches_any(variable_name(variable),
                            self.exclude_from_weight_decay_patterns)

  def build(self, var_list):
    if self.built:
      return
    super().build(var_list)
    self._adam_m, self._adam_v = self.add_optimizer_variables(
        var_list, ["adam_m", "adam_v"])

  def _backend_update_step(self, grads, trainable_variables, learning_rate):
    """On PyTorch, every float32 variable's update at once in multi-tensor ops (eager PyTorch
    would run update_step's ten ops per variable one by one); elsewhere Keras's own."""
    if torch is None:
      return super()._backend_update_step(grads, trainable_variables, learning_rate)
    fused = [i for i, v in enumerate(trainable_variables) if v.dtype == "float32"]
    with torch.no_grad():
      if fused:
        variables = [trainable_variables[i] for i in fused]
        indices = [self._get_variable_index(v) for v in variables]
        _torch_adam_weight_decay(
            [ops.cast(grads[i], "float32") for i in fused],
            [self._adam_m[i].value for i in indices], [self._adam_v[i].value for i in indices],
            [v.value for v in variables], ops.cast(learning_rate, "float32"),
            self.beta_1, self.beta_2, self.epsilon,
            [self.weight_decay_rate if self.use_weight_decay(v) else 0.0 for v in variables])
      for i, variable in enumerate(trainable_variables):
        if variable.dtype != "float32":
          self.update_step(grads[i], variable, learning_rate)

  def update_step(self, gradient, variable, learning_rate):
    dtype = variable.dtype
    index = self._get_variable_index(variable)
    m, v = self._adam_m[index], self._adam_v[index]
    constant = lambda x: ops.convert_to_tensor(x, dtype)
    decay = self.weight_decay_rate if self.use_weight_decay(variable) else 0.0
    next_m, next_v, next_w = _adam_weight_decay_step(
        ops.cast(gradient, dtype), _read(m), _read(v), _read(variable),
        ops.cast(learning_rate, dtype),
        constant(self.beta_1), constant(1.0 - self.beta_1), constant(self.beta_2),
        constant(1.0 - self.beta_2), constant(self.epsilon), constant(decay))
    self.assign(m, next_m)
    self.assign(v, next_v)
    self.assign(variable, next_w)

  def get_config(self):
    config = super().get_config()
    config.update({
        "weight_decay_rate": self.weight_decay_rate, "beta_1": self.beta_1,
        "beta_2": self.beta_2, "epsilon": self.epsilon,
        "exclude_from_weight_decay": self.exclude_from_weight_decay_patterns})
    return config


@keras.saving.register_keras_serializable(package="bert_keras")
class Lamb(AdamWeightDecay):
  """LAMB with decoupled weight decay and a layer-wise trust ratio.

  t = step + 1;  m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2
  u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + epsilon) + wd * w
  r = ||w|| / ||u|| if both norms > 0 else 1
  w <- w - lr * r * u
  Variables whose path matches `exclude_from_weight_decay` get no decay;
  those matching `exclude_from_layer_adaptation` (default: the same list) get r = 1.
  The hyper-parameters and the weight-decay exclusion are AdamWeightDecay's.
  """

  def __init__(self, learning_rate=0.001, weight_decay_rate=0.0, beta_1=0.9,
               beta_2=0.999, epsilon=1e-6, exclude_from_weight_decay=None,
               exclude_from_layer_adaptation=None, global_clipnorm=None,
               name="Lamb", **kwargs):
    super().__init__(learning_rate=learning_rate, weight_decay_rate=weight_decay_rate,
                     beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                     exclude_from_weight_decay=exclude_from_weight_decay,
                     global_clipnorm=global_clipnorm, name=name, **kwargs)
    if exclude_from_layer_adaptation is None:
      exclude_from_layer_adaptation = self.exclude_from_weight_decay_patterns
    self.exclude_from_layer_adaptation_patterns = list(exclude_from_layer_adaptation)

  # Keras's own per-variable loop of update_step (not AdamWeightDecay's multi-tensor update).
  _backend_update_step = keras.optimizers.Optimizer._backend_update_step

  def use_layer_adaptation(self, variable):
    return not _matches_any(variable_name(variable),
                            self.exclude_from_layer_adaptation_patterns)

  def build(self, var_list):
    if self.built:
      return
    keras.optimizers.Optimizer.build(self, var_list)  # not AdamWeightDecay's adam_m/adam_v
    self._lamb_m, self._lamb_v = self.add_optimizer_variables(
        var_list, ["lamb_m", "lamb_v"])

  def update_step(self, gradient, variable, learning_rate):
    dtype = variable.dtype
    lr = ops.cast(learning_rate, dtype)
    grad = ops.cast(gradient, dtype)
    w = _read(variable)
    index = self._get_variable_index(variable)
    m, v = self._lamb_m[index], self._lamb_v[index]
    t = ops.cast(self.iterations + 1, dtype)
    beta_1 = ops.cast(self.beta_1, dtype)
    beta_2 = ops.cast(self.beta_2, dtype)
    next_m = beta_1 * m + (1.0 - beta_1) * grad
    next_v = beta_2 * v + (1.0 - beta_2) * ops.square(grad)
    m_hat = next_m / (1.0 - ops.power(beta_1, t))
    v_hat = next_v / (1.0 - ops.power(beta_2, t))
    update = m_hat / (ops.sqrt(v_hat) + ops.cast(self.epsilon, dtype))
    if self.use_weight_decay(variable):
      update += ops.cast(self.weight_decay_rate, dtype) * w
    ratio = ops.convert_to_tensor(1.0, dtype)
    if self.use_layer_adaptation(variable):
      w_norm = ops.sqrt(ops.sum(ops.square(w)))
      u_norm = ops.sqrt(ops.sum(ops.square(update)))
      ratio = ops.where(ops.logical_and(w_norm > 0.0, u_norm > 0.0),
                        w_norm / ops.where(u_norm > 0.0, u_norm, 1.0), 1.0)
    self.assign(m, next_m)
    self.assign(v, next_v)
    self.assign(variable, w - lr * ratio * update)

  def get_config(self):
    return {**super().get_config(),
            "exclude_from_layer_adaptation": self.exclude_from_layer_adaptation_patterns}


def create_optimizer(init_lr, num_train_steps, num_warmup_steps, optimizer_type="adamw",
                     weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                     clip_norm=1.0, exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
                     power=1.0):
  """The optimizer of the original create_optimizer (without the train op).

  Args:
    init_lr: peak learning rate (float).
    num_train_steps: decay horizon in optimizer steps (lr reaches 0 there).
    num_warmup_steps: linear warm-up steps (0/None: none).
    optimizer_type: "adamw" (the original AdamWeightDecay) or "lamb".
    clip_norm: global-norm clip of the (cross-replica summed) gradients; None: off.
    power: polynomial decay power (1.0 = the original's linear decay).
  Returns:
    a keras.optimizers.Optimizer whose learning_rate is a WarmupLinearDecay of
    its own `iterations` counter (one per applied update).
  """
  schedule = WarmupLinearDecay(init_lr, num_train_steps, num_warmup_steps, power=power)
  kwargs = dict(learning_rate=schedule, weight_decay_rate=weight_decay_rate,
                beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                exclude_from_weight_decay=list(exclude_from_weight_decay or []),
                global_clipnorm=clip_norm)
  optimizer_type = optimizer_type.lower()
  if optimizer_type in ("adamw", "adam", "adamweightdecay"):
    return AdamWeightDecay(**kwargs)
  if optimizer_type == "lamb":
    return Lamb(**kwargs)
  raise ValueError(f"unknown optimizer {optimizer_type!r} (expected adamw or lamb)")
