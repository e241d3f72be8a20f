"""Throughput figures of the training loop: BERT's training FLOPs per sequence and the
measured matmul peak of this device, whose ratio to the achieved rate is the model FLOPs
utilisation (MFU). The FLOP counts need no TensorFlow."""

import time

_PEAK_FLOPS = {}


def measured_peak_flops(dtype="float32", n=2048, repeats=5):
  """FLOP/s of a large matmul on the first device (measured once per dtype):
  the denominator of model FLOPs utilisation (MFU)."""
  if dtype in _PEAK_FLOPS:
    return _PEAK_FLOPS[dtype]
  import tensorflow as tf  # here only: the FLOP counts below serve JAX hosts too (bench/gpu)
  tf_dtype = {"float32": tf.float32, "bfloat16": tf.bfloat16, "float16": tf.float16}[dtype]
  if not tf.config.list_logical_devices("GPU") and not tf.config.list_logical_devices("TPU"):
    n = min(n, 1024)
  a = tf.random.normal([n, n], dtype=tf.float32)
  a = tf.cast(a, tf_dtype)

  @tf.function
  def matmuls(x):
    y = x
    for _ in range(repeats):
      y = tf.matmul(y, x) * tf.cast(1.0 / n, tf_dtype)
    return tf.reduce_sum(tf.cast(y, tf.float32))

  matmuls(a).numpy()
  start = time.perf_counter()
  matmuls(a).numpy()
  elapsed = time.perf_counter() - start
  _PEAK_FLOPS[dtype] = 2.0 * n ** 3 * repeats / max(elapsed, 1e-9)
  return _PEAK_FLOPS[dtype]


def bert_training_flops_per_sequence(config, seq_length, predictions_per_seq):
  """Matmul FLOPs of one training step per sequence (forward x 3): per layer and
  token 2*(4H^2 + 2HI) for the projections and 4*S*H for scores and context;
  pooler 2H^2; masked-LM head P*(2H^2 + 2HV); NSP 4H."""
  h, i = config.hidden_size, config.intermediate_size
  layers, v, s, p = config.num_hidden_layers, config.vocab_size, seq_length, predictions_per_seq
  forward = (s * layers * (2 * (4 * h * h + 2 * h * i) + 4 * s * h) + 2 * h * h +
             p * (2 * h * h + 2 * h * v) + 4 * h)
  return 3.0 * forward
