"""The JAX-only steps of modeling.py, each where Keras ops fall short on JAX: a dropout key
for JAX's generators with 4-word keys, and cuDNN's flash attention on a GPU.

Nothing here imports JAX at module import: each function runs on the JAX backend only.
"""

import functools


def platform():
  """JAX's default platform: "cpu", "gpu" or "tpu"."""
  import jax
  return jax.default_backend()


def dropout_key(seed):
  """Keras's seed (uint32 [2]) as the raw key of JAX's configured random generator.

  Under JAX's default generator (threefry, a [2] key) it is the seed itself, so the masks are
  Keras's own. Keras hands its [2] seed to every generator, so its layers and initializers
  fail under "rbg" and "unsafe_rbg" (a [4] key: XLA's RngBitGenerator, less integer work per
  random bit than threefry). Here the seed is widened for them: the seed, then the seed xor a
  constant. So a model built under threefry can train under rbg: build it, then
  `jax.config.update("jax_default_prng_impl", "rbg")` before the training step is first
  traced (the setting is not part of jit's cache key: a step traced before keeps threefry)."""
  import jax
  words = _key_words(jax.config.jax_default_prng_impl)
  if words == 2:
    return seed
  if words != 4:
    raise ValueError("modeling.Dropout takes JAX generators with keys of 2 or 4 words, not %d "
                     "(jax_default_prng_impl=%s)" % (words, jax.config.jax_default_prng_impl))
  seed = jax.numpy.asarray(seed, "uint32")
  return jax.numpy.concatenate([seed, seed ^ jax.numpy.uint32(0x9E3779B9)])


@functools.lru_cache(maxsize=None)
def _key_words(impl):
  """How many uint32 words a raw key of JAX's generator `impl` (its name) has."""
  import jax
  return jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0, impl=impl))).shape[-1]


def cudnn_attention(q, k, v, attention_bias):
  """softmax(q k^T / sqrt(d) + bias) v by cuDNN's flash attention (jax.nn.dot_product_attention;
  its softmax is float32 too), or None where cuDNN does not take these shapes.

  q, k, v [B, S, A, d] bfloat16 or float16; attention_bias float32 [B, 1, 1, S], which cuDNN
  wants as [B, 1, S, S] -> [B, S, A, d]."""
  import jax
  b, s = q.shape[0], q.shape[1]
  if not cudnn_takes(tuple(q.shape), str(q.dtype)):
    return None
  bias = jax.numpy.broadcast_to(attention_bias, (b, 1, s, s)).astype(q.dtype)
  return jax.nn.dot_product_attention(q, k, v, bias=bias, implementation="cudnn")


@functools.lru_cache(maxsize=None)
def cudnn_takes(shape, dtype):
  """Whether cuDNN's attention compiles for q, k, v [B, S, A, d] of `dtype` with a [B, 1, S, S]
  bias: JAX checks some limits when tracing and cuDNN others when XLA compiles, so the probe
  compiles (once per shape and dtype)."""
  import jax
  qkv = jax.ShapeDtypeStruct(shape, dtype)
  bias = jax.ShapeDtypeStruct((shape[0], 1, shape[1], shape[1]), dtype)
  attention = functools.partial(jax.nn.dot_product_attention, implementation="cudnn")
  try:
    jax.jit(attention).lower(qkv, qkv, qkv, bias).compile()
    return True
  except Exception:  # noqa: BLE001  (any refusal, at trace or compile time: the path written out)
    return False
