"""BERT (Devlin et al., 2018) as Keras 3 layers and models, checkpoint-compatible.

Read top to bottom:
  1. BertConfig                      the original's config (plus HuggingFace config.json)
  2. activations                     gelu (tanh form, the original's), gelu_exact (erf form)
  3. layers                          Dense, LayerNorm, Embeddings, SelfAttention, FeedForward,
                                     TransformerBlock, Pooler, MaskedLMHead, NextSentenceHead
  4. models                          BertModel (the encoder), BertPretrainer (encoder + MLM/NSP),
                                     BertClassifier (encoder + run_classifier head),
                                     BertSquad (encoder + run_squad span head),
                                     BertTokenClassifier (encoder + run_ner tagging head),
                                     BertSentenceEncoder (encoder + pooling: bi-encoders),
                                     BertCrossEncoder (one relevance logit: rerankers)
The losses of every task kind are losses.py's. Checkpoint files (the TF1 name table,
load_checkpoint, save_tf1_checkpoint, HuggingFace weights) are checkpoints.py's.

Shapes: B batch, S sequence length, H hidden size, A attention heads, d = H / A,
I intermediate size, V vocabulary size, P masked positions per sequence.

The math is the original's: post-LN Transformer blocks, LayerNorm epsilon
1e-12, -10000 added to the attention scores of padded keys, truncated-normal initialisers,
dropout after the embeddings, on the attention probabilities and after every dense output.
Under a Keras mixed-precision policy the matmuls run in the compute dtype (bfloat16/float16)
while LayerNorm, softmax and the logits are float32.

  config = BertConfig.from_json_file("uncased_L-12_H-768_A-12/bert_config.json")
  model = BertModel(config)
  checkpoints.load_checkpoint(model, "uncased_L-12_H-768_A-12/bert_model.ckpt")
  out = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
  out["pooled_output"]                                    # [B, H]
  classifier = BertClassifier(model, num_labels=2)        # shares model's weights
  classifier(inputs)                                      # logits [B, 2]

checkpoints.load_model(directory) builds and loads a model in one call.
"""

from bert_keras.utils import backend  # first: TensorFlow quietly, where it is Keras's backend
import copy
import json
import math

import keras
import numpy as np
from keras import ops

from bert_keras.utils import file_io
from bert_keras.utils import jax_ops
from bert_keras.utils import memory
from bert_keras.utils import text_lines

# TensorFlow where it is the backend (a few TensorFlow-only steps below), else None: on JAX and
# PyTorch this module imports no TensorFlow.
tf = backend.tensorflow()
# PyTorch where it is the backend (its fused kernels for a few steps below: addmm, layer_norm,
# scaled_dot_product_attention, that eager PyTorch would otherwise run as several ops), else None.
if backend.name() == "torch":
  import torch
else:
  torch = None

_PACKAGE = "bert_keras"


# ----------------------------------------------------------------------------------------------
# 1. Config
# ----------------------------------------------------------------------------------------------

class BertConfig(object):
  """Configuration of a BertModel: the original's fields and defaults.

  Unknown keys given to from_dict (e.g. `directionality`, `pooler_type` of the released
  multilingual configs, or `layer_norm_eps` of HuggingFace configs) are kept as attributes.
  """

  def __init__(self,
               vocab_size,
               hidden_size=768,
               num_hidden_layers=12,
               num_attention_heads=12,
               intermediate_size=3072,
               hidden_act="gelu",
               hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1,
               max_position_embeddings=512,
               type_vocab_size=16,
               initializer_range=0.02):
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.num_hidden_layers = num_hidden_layers
    self.num_attention_heads = num_attention_heads
    self.hidden_act = hidden_act
    self.intermediate_size = intermediate_size
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.initializer_range = initializer_range

  @classmethod
  def from_dict(cls, json_object):
    """Builds a config from a dict, keeping every key (unknown ones too)."""
    config = cls(vocab_size=None)
    for key, value in json_object.items():
      config.__dict__[key] = value
    return config

  @classmethod
  def from_hf_dict(cls, json_object):
    """Builds a config from a HuggingFace BERT config.json dict.

    The field names are the same; only the activation names differ: HuggingFace "gelu" is
    the exact erf form (our "gelu_exact") and "gelu_new"/"gelu_pytorch_tanh" the tanh form
    (our "gelu"). The keys that mark a HuggingFace file ("model_type", "architectures") are
    dropped: the config is ours, and a bert_config.json written from it must not read back as
    HuggingFace's (its "gelu" would become "gelu_exact").
    """
    _refuse_unimplemented(json_object)   # before its markers (model_type) are dropped
    json_object = {k: v for k, v in json_object.items() if k not in _HF_MARKERS}
    act = json_object.get("hidden_act", "gelu")
    if isinstance(act, str):
      json_object["hidden_act"] = _HF_ACTIVATIONS.get(act, act)
    return cls.from_dict(json_object)

  @classmethod
  def from_json_file(cls, json_file):
    """Reads a bert_config.json (local or gs://); a HuggingFace config.json is recognised by
    its "model_type"/"architectures" keys and read with from_hf_dict. The config is
    validated; any problem is a ValueError whose message starts with the file's name."""
    try:
      with file_io.open_read(json_file) as reader:
        json_object = json.loads(reader.read())
    except UnicodeDecodeError:
      text_lines.check_utf8(json_file)
      raise
    except ValueError as e:
      raise ValueError("%s: not valid JSON: %s" % (json_file, e)) from None
    except Exception as e:  # noqa: BLE001  (OSError, or TensorFlow's file errors on gs://)
      text = file_io.file_error_text(e)
      if text is None:
        raise
      if isinstance(e, FileNotFoundError) or "NotFound" in type(e).__name__:
        raise ValueError("%s: no such file" % json_file) from None
      reason = e.strerror if isinstance(e, OSError) and e.strerror else text
      raise ValueError("%s: cannot read it: %s" % (json_file, reason)) from None
    if not isinstance(json_object, dict):
      raise ValueError("%s: not a JSON object of config fields" % json_file)
    try:
      config = (cls.from_hf_dict if _is_hf_config(json_object) else cls.from_dict)(json_object)
      config.validate()
    except ValueError as e:
      raise ValueError("%s: %s" % (json_file, e)) from None
    return config

  def validate(self):
    """Raises ValueError naming the first field that no BertModel can be built from, or a
    model whose float32 weights alone would not fit in this machine's memory."""
    for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "max_position_embeddings", "type_vocab_size"):
      value = getattr(self, name, None)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError("%s must be a positive integer, got %r" % (name, value))
    if self.hidden_size % self.num_attention_heads:
      raise ValueError("The hidden size (%d) is not a multiple of the number of attention "
                       "heads (%d)" % (self.hidden_size, self.num_attention_heads))
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
      value = getattr(self, name, None)
      if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
        raise ValueError("%s must be a number in [0, 1), got %r" % (name, value))
    if not _is_number(self.initializer_range) or not 0 <= self.initializer_range < math.inf:
      raise ValueError("initializer_range must be a non-negative number, got %r"
                       % (self.initializer_range,))
    eps = getattr(self, "layer_norm_eps", 1e-12)
    if not _is_number(eps) or not 0 < eps < math.inf:
      raise ValueError("layer_norm_eps must be a positive number, got %r" % (eps,))
    try:
      get_activation(self.hidden_act)
    except ValueError as e:
      raise ValueError("hidden_act: %s" % e) from None
    _refuse_unimplemented(self.__dict__)
    gigabytes, available = 4 * self.num_parameters() / 1e9, memory.physical_bytes() / 1e9
    if gigabytes > available:
      raise ValueError("these sizes make a model of %.3g parameters (%.3g GB of float32 "
                       "weights), more than this machine's %.1f GB of memory"
                       % (self.num_parameters(), gigabytes, available))

  def num_parameters(self):
    """The encoder's parameter count (embeddings, L blocks, pooler), computed in Python."""
    hidden, inner = self.hidden_size, self.intermediate_size
    embeddings = (self.vocab_size + self.max_position_embeddings + self.type_vocab_size
                  + 2) * hidden
    block = 4 * (hidden + 1) * hidden + (hidden + 1) * inner + (inner + 1) * hidden + 4 * hidden
    return embeddings + self.num_hidden_layers * block + (hidden + 1) * hidden

  def to_dict(self):
    return copy.deepcopy(self.__dict__)

  def to_json_string(self):
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

  def __repr__(self):
    return "BertConfig(%s)" % json.dumps(self.to_dict(), sort_keys=True)

  def __eq__(self, other):
    return isinstance(other, BertConfig) and self.to_dict() == other.to_dict()


def _is_number(value):
  """Whether a config value is an int or float (not a bool, a string or None)."""
  return isinstance(value, (int, float)) and not isinstance(value, bool)


# Keys of HuggingFace configs that change the model, and the values BertModel computes: any other
# value (relative position embeddings, a decoder, cross-attention, RoBERTa or another model type)
# is refused by validate rather than loaded as plain BERT.
_IMPLEMENTED_VALUES = {"model_type": ("bert",), "position_embedding_type": ("absolute",),
                       "is_decoder": (False,), "add_cross_attention": (False,),
                       "is_encoder_decoder": (False,)}
# The keys of a HuggingFace config.json that ours lacks (from_json_file reads a file with one
# as HuggingFace's).
_HF_MARKERS = ("model_type", "architectures")


def _refuse_unimplemented(fields):
  """ValueError naming the first HuggingFace key in `fields` (a config's dict) whose value
  BertModel does not compute, or an architecture that is not BERT's."""
  for key, values in _IMPLEMENTED_VALUES.items():
    value = fields.get(key)
    if value is not None and value not in values:
      raise ValueError("%s %s is not implemented (only %s): this is not the model BertModel "
                       "computes" % (key, json.dumps(value), json.dumps(values[0])))
  for name in fields.get("architectures") or ():
    if not str(name).startswith("Bert"):
      raise ValueError("architectures %s: not a BERT model" % json.dumps(name))


def _is_hf_config(json_object):
  return any(key in json_object for key in _HF_MARKERS)


def _as_config(config):
  if isinstance(config, BertConfig):
    return copy.deepcopy(config)
  if isinstance(config, dict):
    return BertConfig.from_dict(config)
  raise TypeError("config must be a BertConfig or a dict, got %r" % (config,))


# ----------------------------------------------------------------------------------------------
# 2. Activations
# ----------------------------------------------------------------------------------------------

def gelu(x):
  """The original's gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

  keras.ops.gelu computes that same formula (tf.nn.gelu on TensorFlow, which grappler
  recognises after a MatMul + BiasAdd and runs the three as one oneDNN kernel: Dense below,
  5-7% faster than separate ops for BERT-Base on CPU, bench/bench_model.py).
  """
  return ops.gelu(x, approximate=True)


def gelu_exact(x):
  """The exact gelu, x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))): HuggingFace's "gelu"."""
  return ops.gelu(x, approximate=False)


_ACTIVATIONS = {
    "gelu": gelu,
    "gelu_exact": gelu_exact,
    "gelu_erf": gelu_exact,
    "relu": ops.relu,
    "tanh": ops.tanh,
    "silu": ops.silu,
    "swish": ops.silu,
}
# HuggingFace activation names -> ours.
_HF_ACTIVATIONS = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
                   "gelu_fast": "gelu"}


def get_activation(activation):
  """Maps an activation name (case-insensitive) to a function; callables pass through.

  None, "" and "linear" give None. "gelu" is the tanh approximation (the original's);
  "gelu_exact" (alias "gelu_erf") is the erf form. Unknown names and non-names (a number) raise
  ValueError.
  """
  if callable(activation) or activation is None:
    return activation
  name = activation.lower() if isinstance(activation, str) else None
  if name in ("", "linear"):
    return None
  if name not in _ACTIVATIONS:
    raise ValueError("unsupported activation %r (supported: %s, linear)"
                     % (activation, ", ".join(sorted(_ACTIVATIONS))))
  return _ACTIVATIONS[name]


# ----------------------------------------------------------------------------------------------
# 3. Layers
# ----------------------------------------------------------------------------------------------

def _initializer(config):
  """Truncated normal (cut at 2 stddev, like TF1) with stddev config.initializer_range.
  A fresh one per variable: a Keras initializer reused draws the same values again."""
  return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Dropout(keras.layers.Dropout):
  """keras Dropout whose mask, under TensorFlow, also depends on the tf.distribute replica it
  runs on.

  Keras keeps the dropout seed state in a variable that tf.distribute mirrors, so every
  replica would draw the same mask; here the replica id is added to the seed. On one
  replica the masks are Keras's own (same seed, same stateless op). On PyTorch this is
  Keras's Dropout; on JAX too, except that it also runs under the generators with 4-word keys
  that `jax_default_prng_impl` can name ("rbg", "unsafe_rbg"; see utils/jax_ops.py).
  """

  def call(self, inputs, training=False):
    if not training or self.rate <= 0:
      return inputs
    if tf is None:
      if backend.name() == "jax":
        return keras.random.dropout(inputs, self.rate, noise_shape=self.noise_shape,
                                    seed=jax_ops.dropout_key(self.seed_generator.next()))
      return super().call(inputs, training=training)
    seed = self.seed_generator.next()
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
      replica = tf.cast(context.replica_id_in_sync_group, seed.dtype)
      seed = seed + tf.stack([tf.zeros_like(replica), replica])
    if seed.dtype != tf.int32:  # as Keras's TF backend casts its seed
      seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    return tf.nn.experimental.stateless_dropout(inputs, rate=self.rate, seed=seed,
                                                noise_shape=self.noise_shape)


def _bias_add(y, bias):
  """y [N, units] + bias [units]: TensorFlow's BiasAdd (fused with the MatMul) or a plain add."""
  return tf.nn.bias_add(y, bias) if tf is not None else ops.add(y, bias)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Dense(keras.layers.Layer):
  """x @ kernel + bias, optionally activated. kernel [in, out] (the TF1 layout), bias [out].

  [..., in] -> [..., out]; computed as one 2-D matmul over the flattened leading axes.
  """

  def __init__(self, units, activation=None, initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.activation = activation
    self.initializer_range = initializer_range

  def build(self, input_shape):
    self.kernel = self.add_weight(
        name="kernel", shape=(input_shape[-1], self.units),
        initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range))
    self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")

  def call(self, x):
    # MatMul, BiasAdd and the activation, in that order on the 2-D tensor: the pattern that
    # TensorFlow's grappler remapper fuses into one kernel (a broadcast "+ bias" is not fused).
    shape = ops.shape(x)
    x = ops.reshape(x, (-1, shape[-1]))
    if torch is not None:  # bias + x @ kernel as one kernel (eager PyTorch fuses nothing)
      y = torch.addmm(ops.convert_to_tensor(self.bias), x, ops.convert_to_tensor(self.kernel))
    else:
      y = _bias_add(ops.matmul(x, self.kernel), self.bias)
    fn = get_activation(self.activation)
    if fn is not None:
      y = fn(y)
    return ops.reshape(y, tuple(shape[:-1]) + (self.units,))

  def get_config(self):
    return {**super().get_config(), "units": self.units, "activation": self.activation,
            "initializer_range": self.initializer_range}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class LayerNorm(keras.layers.Layer):
  """Layer normalisation over the last axis, always computed in float32.

  gamma * (x - mean) / sqrt(variance + epsilon) + beta, population variance, epsilon 1e-12.
  [..., H] -> [..., H] in float32 (callers cast back to their compute dtype).
  """

  def __init__(self, epsilon=1e-12, **kwargs):
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    self.epsilon = epsilon

  def build(self, input_shape):
    self.gamma = self.add_weight(name="gamma", shape=(input_shape[-1],), initializer="ones")
    self.beta = self.add_weight(name="beta", shape=(input_shape[-1],), initializer="zeros")

  def call(self, x):
    x = ops.cast(x, "float32")
    if torch is not None:  # PyTorch's one layer_norm kernel (the same formula), not ten ops
      return ops.layer_normalization(x, self.gamma, self.beta, epsilon=self.epsilon)
    mean = ops.mean(x, axis=-1, keepdims=True)
    variance = ops.mean(ops.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * ops.rsqrt(variance + self.epsilon) * self.gamma + self.beta

  def get_config(self):
    config = super().get_config()
    config.pop("dtype", None)
    return {**config, "epsilon": self.epsilon}


def _layer_norm_epsilon(config):
  return float(getattr(config, "layer_norm_eps", 1e-12))


class ConfigLayer(keras.layers.Layer):
  """A layer built from a BertConfig (or its dict): `self.config`, saved by get_config so that
  from_config (and keras.models.load_model) rebuild the same layer."""

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = _as_config(config)

  def get_config(self):
    return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Embeddings(ConfigLayer):
  """Word + token-type + position embeddings, then LayerNorm and dropout.

  input_ids, segment_ids int [B, S] -> [B, S, H]. `word_embeddings` [V, H] is the table the
  masked-LM head reuses as its output matrix.
  """

  def __init__(self, config, **kwargs):
    super().__init__(config, **kwargs)
    self.layer_norm = LayerNorm(_layer_norm_epsilon(self.config), name="LayerNorm")
    self.dropout = Dropout(self.config.hidden_dropout_prob, name="dropout",
                           dtype=self.dtype_policy)

  def build(self, input_shape=None):
    c = self.config
    self.word_embeddings = self.add_weight(
        name="word_embeddings", shape=(c.vocab_size, c.hidden_size),
        initializer=_initializer(c))
    self.token_type_embeddings = self.add_weight(
        name="token_type_embeddings", shape=(c.type_vocab_size, c.hidden_size),
        initializer=_initializer(c))
    self.position_embeddings = self.add_weight(
        name="position_embeddings", shape=(c.max_position_embeddings, c.hidden_size),
        initializer=_initializer(c))
    self.layer_norm.build((None, None, c.hidden_size))

  def call(self, input_ids, segment_ids, training=None):
    seq_length = input_ids.shape[1]
    max_length = self.config.max_position_embeddings
    message = ("The sequence length (%s) is longer than max_position_embeddings (%d) of the "
               "config: truncate the input (e.g. --max_seq_length <= %d) or use a model with "
               "more positions.")
    if seq_length is not None and seq_length > max_length:
      raise ValueError(message % (seq_length, max_length, max_length))
    if seq_length is None and tf is not None:  # a TF graph of unknown length: checked at run
      tf.debugging.assert_less_equal(tf.shape(input_ids)[1], max_length,
                                     message=message % ("?", max_length, max_length))
    positions = self.position_embeddings[:ops.shape(input_ids)[1]]       # [S, H]
    # The token types as the original computes them: a one-hot matmul, not a gather (a table of
    # 2 rows: the gather's gradient would add every token into the same 2 rows, in bfloat16 a
    # fifth of a BERT-Large training step on a GPU; the matmul's is one small GEMM). Equal to
    # the gather to the bit (x * 1 + y * 0).
    token_types = ops.matmul(ops.one_hot(segment_ids, self.config.type_vocab_size,
                                         dtype=self.compute_dtype),
                             ops.cast(self.token_type_embeddings, self.compute_dtype))
    x = (ops.take(self.word_embeddings, input_ids, axis=0)                # [B, S, H]
         + token_types + positions[None])
    x = ops.cast(self.layer_norm(x), self.compute_dtype)
    return self.dropout(x, training=training)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class SelfAttention(ConfigLayer):
  """Multi-head scaled dot-product self-attention with an output projection.

  x [B, S, H], input_mask int [B, S] (1 real token, 0 padding) -> [B, S, H]. Padding is
  masked as a key only, by adding -10000 to its scores (queries at padding still attend).
  Head h owns columns h*d .. h*d+d-1 of the query/key/value kernels [H, H]. Scores, mask
  and softmax are float32; dropout falls on the probabilities.
  """

  def __init__(self, config, **kwargs):
    super().__init__(config, **kwargs)
    c = self.config
    if c.hidden_size % c.num_attention_heads != 0:
      raise ValueError(
          "The hidden size (%d) is not a multiple of the number of attention heads (%d)"
          % (c.hidden_size, c.num_attention_heads))
    self.num_heads = c.num_attention_heads
    self.head_size = c.hidden_size // c.num_attention_heads
    dense = lambda name: Dense(c.hidden_size, initializer_range=c.initializer_range,
                               name=name, dtype=self.dtype_policy)
    self.query, self.key, self.value = dense("query"), dense("key"), dense("value")
    self.output_dense = dense("attention_output")
    self.dropout = Dropout(c.attention_probs_dropout_prob, name="attention_probs_dropout",
                           dtype=self.dtype_policy)

  def build(self, input_shape=None):
    shape = (None, None, self.config.hidden_size)
    for layer in (self.query, self.key, self.value, self.output_dense):
      layer.build(shape)

  def _split_heads(self, x):
    """[B, S, H] -> [B, A, S, d]."""
    b, s = ops.shape(x)[0], ops.shape(x)[1]
    return ops.transpose(ops.reshape(x, (b, s, self.num_heads, self.head_size)), (0, 2, 1, 3))

  def _fused_attention(self, training):
    """Which fused kernel computes the attention, at inference only (a fused kernel's dropout
    would not be Keras's, and its gradients, summed in another order, move an Adam-type update
    of a near-zero gradient by more than 1e-5); None for the path written out below.
      "torch": PyTorch's scaled_dot_product_attention, in float32 (the scores of the path
               below are float32 in any policy);
      "cudnn": on JAX on a GPU in bfloat16 or float16, cuDNN's flash attention, where it
               takes the shapes (on a CPU, XLA's own jax.nn.dot_product_attention is slower
               than the path below: bench/bench_jax_variants.py)."""
    if training:
      return None
    if torch is not None:
      return "torch" if self.compute_dtype == "float32" else None
    if (backend.name() == "jax" and self.compute_dtype in ("bfloat16", "float16")
        and jax_ops.platform() == "gpu"):
      return "cudnn"
    return None

  def call(self, x, input_mask, training=None, token_index=None):
    # [B, 1, 1, S]: broadcast over heads and queries.
    attention_bias = (1.0 - ops.cast(input_mask, "float32")[:, None, None, :]) * -10000.0
    q, k, v = self.query(x), self.key(x), self.value(x)
    if token_index is not None:  # x is [T, H], the real tokens only: back to [B, S, H]
      q, k, v = (scatter_tokens(t, token_index, input_mask) for t in (q, k, v))
    fused = self._fused_attention(training)
    context = None
    if fused == "cudnn":  # [B, S, A, d] in and out: the heads need no transposes
      b, s = ops.shape(q)[0], ops.shape(q)[1]
      context = jax_ops.cudnn_attention(
          *(ops.reshape(t, (b, s, self.num_heads, self.head_size)) for t in (q, k, v)),
          attention_bias)                                                 # [B, S, A, d] or None
    if context is None:
      q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
      if fused == "torch":
        context = torch.nn.functional.scaled_dot_product_attention(q, k, v, attention_bias)
      else:
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))            # [B, A, S, S]
        scores = ops.cast(scores, "float32") * (1.0 / math.sqrt(self.head_size)) + attention_bias
        probs = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        probs = self.dropout(probs, training=training)
        context = ops.matmul(probs, v)                                    # [B, A, S, d]
      context = ops.transpose(context, (0, 2, 1, 3))                      # [B, S, A, d]
    b, s = ops.shape(input_mask)[0], ops.shape(input_mask)[1]
    context = ops.reshape(context, (b, s, self.config.hidden_size))
    if token_index is not None:
      context = gather_tokens(context, token_index)                       # [T, H]
    return self.output_dense(context)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class FeedForward(ConfigLayer):
  """Position-wise feed-forward: [B, S, H] -> dense(I, hidden_act) -> dense(H) -> [B, S, H]."""

  def __init__(self, config, **kwargs):
    super().__init__(config, **kwargs)
    c = self.config
    self.intermediate = Dense(c.intermediate_size, activation=c.hidden_act,
                              initializer_range=c.initializer_range, name="intermediate",
                              dtype=self.dtype_policy)
    self.output_dense = Dense(c.hidden_size, initializer_range=c.initializer_range,
                              name="output", dtype=self.dtype_policy)

  def build(self, input_shape=None):
    c = self.config
    self.intermediate.build((None, None, c.hidden_size))
    self.output_dense.build((None, None, c.intermediate_size))

  def call(self, x):
    return self.output_dense(self.intermediate(x))


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TransformerBlock(ConfigLayer):
  """One post-LN encoder layer:
       a = LayerNorm(x + dropout(SelfAttention(x)))
       y = LayerNorm(a + dropout(FeedForward(a)))
  [B, S, H] -> [B, S, H].
  """

  def __init__(self, config, **kwargs):
    super().__init__(config, **kwargs)
    c = self.config
    eps = _layer_norm_epsilon(c)
    self.attention = SelfAttention(c, name="attention", dtype=self.dtype_policy)
    self.attention_dropout = Dropout(c.hidden_dropout_prob, name="attention_dropout",
                                     dtype=self.dtype_policy)
    self.attention_layer_norm = LayerNorm(eps, name="attention_LayerNorm")
    self.feed_forward = FeedForward(c, name="feed_forward", dtype=self.dtype_policy)
    self.output_dropout = Dropout(c.hidden_dropout_prob, name="output_dropout",
                                  dtype=self.dtype_policy)
    self.output_layer_norm = LayerNorm(eps, name="output_LayerNorm")

  def build(self, input_shape=None):
    shape = (None, None, self.config.hidden_size)
    self.attention.build(shape)
    self.attention_layer_norm.build(shape)
    self.feed_forward.build(shape)
    self.output_layer_norm.build(shape)

  def call(self, x, input_mask, training=None, token_index=None):
    h = self.attention_dropout(
        self.attention(x, input_mask, training=training, token_index=token_index),
        training=training)
    a = ops.cast(self.attention_layer_norm(x + h), self.compute_dtype)
    h = self.output_dropout(self.feed_forward(a), training=training)
    return ops.cast(self.output_layer_norm(a + h), self.compute_dtype)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Pooler(ConfigLayer):
  """tanh(dense(sequence_output[:, 0])): [B, S, H] -> [B, H]. No dropout."""

  def __init__(self, config, **kwargs):
    super().__init__(config, **kwargs)
    c = self.config
    self.dense = Dense(c.hidden_size, activation="tanh", initializer_range=c.initializer_range,
                       name="dense", dtype=self.dtype_policy)

  def build(self, input_shape=None):
    self.dense.build((None, self.config.hidden_size))

  def call(self, sequence_output):
    return self.dense(sequence_output[:, 0])


# Each head layer carries its checkpoint names, as CHECKPOINT_NAMES: (attribute, TF1 name,
# HuggingFace name) triples; a Dense or LayerNorm attribute's TF1 name is its scope, and a
# HuggingFace name of None follows from the TF1 name by checkpoints.hf_name's rule; an
# attribute of None is a name the head's checkpoints hold but the model does not read.
# CHECKPOINT_TASK: the task a checkpoint that holds the head was trained for (None: told by
# another head of its model). checkpoints and model_files read heads through these alone.
_CHECKPOINT_HEADS = []


def checkpoint_heads():
  """The head layer classes that carry checkpoint names, those declared last (the
  fine-tuning heads) first: the order in which a checkpoint's task is looked for."""
  return tuple(reversed(_CHECKPOINT_HEADS))


def _checkpoint_head(cls):
  _CHECKPOINT_HEADS.append(cls)
  return cls


def heads_of(model):
  """The head layers of `model` that carry checkpoint names, in the model's order."""
  return [layer for layer in getattr(model, "layers", ())
          if getattr(type(layer), "CHECKPOINT_NAMES", None)]


@_checkpoint_head
@keras.saving.register_keras_serializable(package=_PACKAGE)
class MaskedLMHead(ConfigLayer):
  """Masked-LM head of run_pretraining (TF1 scope cls/predictions).

  Gathers sequence_output [B, S, H] at masked_lm_positions [B, P], transforms with
  dense(H, hidden_act) + LayerNorm, and scores against the word-embedding table [V, H]
  (tied, passed in) plus its own output_bias [V]: -> float32 logits [B, P, V].
  """
  CHECKPOINT_NAMES = (("transform", "cls/predictions/transform/dense", None),
                      ("layer_norm", "cls/predictions/transform/LayerNorm", None),
                      ("output_bias", "cls/predictions/output_bias", "cls.predictions.bias"),
                      # HuggingFace's decoder, tied to the word embeddings
                      (None, None, "cls.predictions.decoder.weight"),
                      (None, None, "cls.predictions.decoder.bias"))
  CHECKPOINT_TASK = "pretrainer"

  def __init__(self, config, **kwargs):
    super().__init__(config, **kwargs)
    c = self.config
    self.transform = Dense(c.hidden_size, activation=c.hidden_act,
                           initializer_range=c.initializer_range, name="transform",
                           dtype=self.dtype_policy)
    self.layer_norm = LayerNorm(_layer_norm_epsilon(c), name="LayerNorm")

  def build(self, input_shape=None):
    self.transform.build((None, None, self.config.hidden_size))
    self.layer_norm.build((None, None, self.config.hidden_size))
    self.output_bias = self.add_weight(name="output_bias", shape=(self.config.vocab_size,),
                                       initializer="zeros")

  def call(self, sequence_output, masked_lm_positions, embedding_table):
    x = gather_positions(sequence_output, masked_lm_positions)           # [B, P, H]
    x = ops.cast(self.layer_norm(self.transform(x)), self.compute_dtype)
    b, p = ops.shape(x)[0], ops.shape(x)[1]
    table = ops.cast(embedding_table, self.compute_dtype)                  # [V, H]
    logits = ops.matmul(ops.reshape(x, (-1, self.config.hidden_size)), ops.transpose(table))
    logits = ops.cast(logits, "float32") + ops.cast(self.output_bias, "float32")
    return ops.reshape(logits, (b, p, self.config.vocab_size))


def gather_positions(x, positions):
  """x [B, S, H] at positions int [B, P] -> [B, P, H] (the original's gather_indexes: one
  gather from the flattened [B * S, H])."""
  b, s, h = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
  flat = ops.reshape(positions + ops.arange(b, dtype="int32")[:, None] * s, (-1,))
  return ops.reshape(ops.take(ops.reshape(x, (-1, h)), flat, axis=0), (b, -1, h))


@_checkpoint_head
@keras.saving.register_keras_serializable(package=_PACKAGE)
class NextSentenceHead(ConfigLayer):
  """Next-sentence head (TF1 scope cls/seq_relationship): pooled [B, H] -> float32 [B, 2].

  output_weights is [2, H] ([out, in], as in the original); label 0 = "is next".
  """
  CHECKPOINT_NAMES = (
      ("output_weights", "cls/seq_relationship/output_weights", "cls.seq_relationship.weight"),
      ("output_bias", "cls/seq_relationship/output_bias", "cls.seq_relationship.bias"))
  CHECKPOINT_TASK = None  # (a pretrainer's: its masked-LM head tells it)

  def __init__(self, config, **kwargs):
    super().__init__(config, **kwargs)

  def build(self, input_shape=None):
    self.output_weights = self.add_weight(
        name="output_weights", shape=(2, self.config.hidden_size),
        initializer=_initializer(self.config))
    self.output_bias = self.add_weight(name="output_bias", shape=(2,), initializer="zeros")

  def call(self, pooled_output):
    logits = ops.matmul(pooled_output, ops.transpose(self.output_weights))
    return ops.cast(logits, "float32") + ops.cast(self.output_bias, "float32")


# ----------------------------------------------------------------------------------------------
# 4. Models
# ----------------------------------------------------------------------------------------------

def real_token_index(input_mask):
  """int [B, S] (1 real token, 0 padding) -> int32 [T]: the flat positions (b * S + s) of
  the T real tokens, in order. This and the two below: TensorFlow only (BertModel)."""
  return tf.cast(tf.where(tf.reshape(input_mask, [-1]) != 0)[:, 0], tf.int32)


def gather_tokens(x, token_index):
  """[B, S, H] -> [T, H]: the rows of the real tokens (real_token_index)."""
  return tf.gather(tf.reshape(x, (-1, x.shape[-1])), token_index)


def scatter_tokens(x, token_index, input_mask):
  """[T, H] -> [B, S, H] (B, S: input_mask's shape), zeros at the padding: gather_tokens
  undone."""
  b, s = tf.shape(input_mask)[0], tf.shape(input_mask)[1]
  flat = tf.scatter_nd(token_index[:, None], x, tf.stack([b * s, tf.shape(x)[1]]))
  return tf.reshape(flat, (b, s, x.shape[-1]))


def _unpack_inputs(inputs):
  """dict (or bare input_ids) -> (input_ids, input_mask, segment_ids), int32 [B, S] each.

  A missing input_mask means all ones, a missing segment_ids all zeros (as the original).
  """
  if not isinstance(inputs, dict):
    inputs = {"input_ids": inputs}
  input_ids = ops.cast(inputs["input_ids"], "int32")
  if len(input_ids.shape) != 2:
    raise ValueError("input_ids must have rank 2 [batch, seq], got shape %s"
                     % (input_ids.shape,))
  input_mask = inputs.get("input_mask")
  segment_ids = inputs.get("segment_ids")
  input_mask = (ops.ones_like(input_ids) if input_mask is None
                else ops.cast(input_mask, "int32"))
  segment_ids = (ops.zeros_like(input_ids) if segment_ids is None
                 else ops.cast(segment_ids, "int32"))
  return input_ids, input_mask, segment_ids


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertModel(keras.Model):
  """The BERT encoder.

  Called on {"input_ids", "input_mask" (optional), "segment_ids" (optional)}, int32 [B, S]
  (or on input_ids alone), with `training=True` for dropout. Returns a dict:
    sequence_output [B, S, H]   last encoder layer
    pooled_output [B, H]        tanh(dense(sequence_output[:, 0]))
  and, with output_hidden_states (the constructor's default, or the call's argument), also
    encoder_outputs             list of the L layer outputs, each [B, S, H]
    embedding_output [B, S, H]  input of the first layer (after LayerNorm and dropout)
  `model.embedding_table` is the word-embedding variable [V, H].

  `model.skip_padding = True` (not saved in the config) computes the dense layers of every
  block on the T real tokens only ([T, H], gathered by the input_mask) and only the
  attention on [B, S]: the outputs at the real positions are the same (the attention masks
  the padding out as a key), the work on the padding is saved (about half of it on
  sentences of mixed lengths; on TensorFlow only: on JAX and PyTorch every position is
  computed), and sequence_output and the encoder outputs are 0 at the padding, where the
  original's hold values that nothing should read. Turn it on only where no output at the
  padding is read, and not under XLA or on TPUs (T is known only when the step runs). Task
  models (BertClassifier, BertSquad, BertPretrainer) take a BertModel and share its weights.
  `checkpoints.load_model(directory)` builds one from a checkpoint directory.
  """
  HEADS = ()  # the head layer classes it carries (heads_of)

  def __init__(self, config, output_hidden_states=False, **kwargs):
    kwargs.setdefault("name", "bert")
    super().__init__(**kwargs)
    self.config = c = _as_config(config)
    self.output_hidden_states = bool(output_hidden_states)
    self.skip_padding = False
    c.validate()  # before any weight is allocated
    self.embeddings = Embeddings(c, name="embeddings", dtype=self.dtype_policy)
    # One attribute per block (not a list): TF2 object checkpoints do not follow Keras 3's
    # tracked lists, so tf.train.Checkpoint(model=...) would silently miss the blocks.
    for i in range(c.num_hidden_layers):
      setattr(self, "layer_%d" % i,
              TransformerBlock(c, name="layer_%d" % i, dtype=self.dtype_policy))
    self.pooler = Pooler(c, name="pooler", dtype=self.dtype_policy)
    self.build()

  def build(self, input_shape=None):
    self.embeddings.build()
    for block in self.encoder_layers:
      block.build()
    self.pooler.build()

  @property
  def encoder_layers(self):
    """The L TransformerBlocks, in order."""
    return [getattr(self, "layer_%d" % i) for i in range(self.config.num_hidden_layers)]

  @property
  def embedding_table(self):
    return self.embeddings.word_embeddings

  def call(self, inputs, training=None, output_hidden_states=None):
    input_ids, input_mask, segment_ids = _unpack_inputs(inputs)
    x = self.embeddings(input_ids, segment_ids, training=training)
    embedding_output = x
    # skip_padding gathers the real tokens on TensorFlow only: JAX compiles every step with
    # XLA, whose shapes cannot depend on the data, so there (and on PyTorch) the blocks run on
    # [B, S, H] and the padding is zeroed afterwards, the same outputs.
    token_index = (real_token_index(input_mask) if self.skip_padding and tf is not None
                   else None)
    if token_index is not None:
      x = gather_tokens(x, token_index)                                   # [T, H]
    encoder_outputs = []
    for block in self.encoder_layers:
      x = block(x, input_mask, training=training, token_index=token_index)
      encoder_outputs.append(x)
    if token_index is not None:  # zeros at the padding
      encoder_outputs = [scatter_tokens(y, token_index, input_mask) for y in encoder_outputs]
      x = encoder_outputs[-1]
    elif self.skip_padding:
      real = ops.cast(input_mask, x.dtype)[:, :, None]
      encoder_outputs = [y * real for y in encoder_outputs]
      x = encoder_outputs[-1]
    outputs = {"sequence_output": x, "pooled_output": self.pooler(x)}
    if self.output_hidden_states if output_hidden_states is None else output_hidden_states:
      outputs["encoder_outputs"] = encoder_outputs
      outputs["embedding_output"] = embedding_output
    return outputs

  def get_config(self):
    config = {"name": self.name, "trainable": self.trainable,
              "dtype": keras.saving.serialize_keras_object(self.dtype_policy),
              "config": self.config.to_dict()}
    if self.output_hidden_states:
      config["output_hidden_states"] = True
    return config

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    if isinstance(config.get("dtype"), dict):
      config["dtype"] = keras.saving.deserialize_keras_object(config["dtype"])
    return cls(BertConfig.from_dict(config.pop("config")), **config)

  # A saved encoder records its number of layers beside its weights: a .keras file whose
  # config.json says fewer (or more) layers than its model.weights.h5 holds is refused, where
  # Keras loads the layers the config names and drops the rest without a word.
  _LAYERS_KEY = "num_hidden_layers"

  def save_own_variables(self, store):
    super().save_own_variables(store)
    store[self._LAYERS_KEY] = np.asarray(self.config.num_hidden_layers, np.int64)

  def load_own_variables(self, store):
    names = list(store.keys())
    if self._LAYERS_KEY in names:
      saved = int(np.asarray(store[self._LAYERS_KEY]))
      if saved != self.config.num_hidden_layers:
        self._refused = (f"the saved weights hold {saved} encoder layers, the model's config "
                         f"{self.config.num_hidden_layers} (num_hidden_layers): refused (a "
                         ".keras file whose config.json and weights do not match)")
      store = {name: store[name] for name in names if name != self._LAYERS_KEY}
    if getattr(self, "_refused", None):  # (again on Keras's second path to this layer)
      raise ValueError(self._refused)
    super().load_own_variables(store)


class _TaskModel(keras.Model):
  """A BertModel (`self.bert`) plus a head. The first argument is either a built BertModel,
  used as it is (its weights shared, not copied; the task model's dtype policy defaults to
  the encoder's), or a BertConfig / its dict, from which a new BertModel is built.
  get_config serialises the encoder as a nested Keras object."""
  HEADS = ()  # the head layer classes it carries (heads_of)

  def __init__(self, encoder_or_config, **kwargs):
    encoder = encoder_or_config if isinstance(encoder_or_config, BertModel) else None
    if encoder is None and not isinstance(encoder_or_config, (BertConfig, dict)):
      raise TypeError("%s takes a BertModel, a BertConfig or its dict, got %r (a checkpoint "
                      "directory? use checkpoints.load_model)"
                      % (type(self).__name__, encoder_or_config))
    if encoder is not None:
      kwargs.setdefault("dtype", encoder.dtype_policy)
    super().__init__(**kwargs)
    self.bert = encoder or BertModel(encoder_or_config, dtype=self.dtype_policy)

  @property
  def config(self):
    """The encoder's BertConfig."""
    return self.bert.config

  def _encode(self, inputs, training):
    return self.bert(inputs, training=training, output_hidden_states=False)

  def get_config(self):
    return {"name": self.name, "trainable": self.trainable,
            "dtype": keras.saving.serialize_keras_object(self.dtype_policy),
            "encoder": keras.saving.serialize_keras_object(self.bert)}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    if isinstance(config.get("dtype"), dict):
      config["dtype"] = keras.saving.deserialize_keras_object(config["dtype"])
    if "encoder" in config:
      encoder = keras.saving.deserialize_keras_object(config.pop("encoder"))
    else:  # written before task models took an encoder
      encoder = BertConfig.from_dict(config.pop("config"))
    return cls(encoder, **config)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertPretrainer(_TaskModel):
  """A BertModel plus the masked-LM and next-sentence heads of run_pretraining.

  BertPretrainer(encoder_or_config): a built BertModel (shared) or a BertConfig.
  Inputs: BertModel's dict plus "masked_lm_positions" int32 [B, P]. Returns
  {"masked_lm_logits" float32 [B, P, V], "next_sentence_logits" float32 [B, 2]}.
  Losses: masked_lm_loss / next_sentence_loss below (or `pretraining_loss`).
  """
  HEADS = (MaskedLMHead, NextSentenceHead)

  def __init__(self, encoder_or_config, **kwargs):
    kwargs.setdefault("name", "bert_pretrainer")
    super().__init__(encoder_or_config, **kwargs)
    c = self.config
    self.masked_lm = MaskedLMHead(c, name="predictions", dtype=self.dtype_policy)
    self.next_sentence = NextSentenceHead(c, name="seq_relationship", dtype=self.dtype_policy)
    self.build()

  def build(self, input_shape=None):
    self.masked_lm.build()
    self.next_sentence.build()

  def call(self, inputs, training=None):
    encoded = self._encode(inputs, training)
    positions = ops.cast(inputs["masked_lm_positions"], "int32")
    return {"masked_lm_logits": self.masked_lm(encoded["sequence_output"], positions,
                                               self.bert.embedding_table),
            "next_sentence_logits": self.next_sentence(encoded["pooled_output"])}


@_checkpoint_head
@keras.saving.register_keras_serializable(package=_PACKAGE)
class ClassifierHead(keras.layers.Layer):
  """run_classifier's head: dropout 0.1 (fixed, not the config's; training only) on the pooled
  output [B, H], then logits = pooled . output_weights^T + output_bias -> float32 [B, num_labels].
  (BertTokenClassifier applies it to the sequence output [B, S, H] -> [B, S, num_labels].)

  output_weights [num_labels, H] (truncated normal, stddev 0.02 fixed) and output_bias
  [num_labels] (zeros) are the original's root-scope TF1 variables of the same names.
  """
  # ([out, in] on both sides: HuggingFace's Linear layout)
  CHECKPOINT_NAMES = (("output_weights", "output_weights", "classifier.weight"),
                      ("output_bias", "output_bias", "classifier.bias"))
  CHECKPOINT_TASK = "classifier"

  def __init__(self, config, num_labels, **kwargs):
    super().__init__(**kwargs)
    self.config = _as_config(config)
    self.num_labels = int(num_labels)
    self.dropout = Dropout(0.1, name="dropout", dtype=self.dtype_policy)

  def build(self, input_shape=None):
    self.output_weights = self.add_weight(
        name="output_weights", shape=(self.num_labels, self.config.hidden_size),
        initializer=keras.initializers.TruncatedNormal(stddev=0.02))
    self.output_bias = self.add_weight(name="output_bias", shape=(self.num_labels,),
                                       initializer="zeros")

  def call(self, pooled_output, training=None):
    x = self.dropout(pooled_output, training=training)
    logits = ops.matmul(x, ops.transpose(ops.cast(self.output_weights, x.dtype)))
    return ops.cast(logits, "float32") + ops.cast(self.output_bias, "float32")

  def get_config(self):
    return {**super().get_config(), "config": self.config.to_dict(),
            "num_labels": self.num_labels}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertClassifier(_TaskModel):
  """A BertModel plus run_classifier's head (ClassifierHead).

  BertClassifier(encoder_or_config, num_labels): a built BertModel (shared) or a BertConfig.
  Inputs: BertModel's dict. Returns the logits, float32 [B, num_labels] (a tensor, so that
  compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)) applies);
  loss: classifier_loss below. TF1 names: bert/* and the root-scope output_weights /
  output_bias (checkpoints.tf1_variable_map), so the original's fine-tuned checkpoints load
  and ours load in the original.

  multi_label=True (several labels per example, one sigmoid output each): the model still
  returns the logits [B, num_labels] (numerically stable losses; the same weights and names),
  the probabilities are sigmoid(logits) (`probabilities(logits)`), the loss is
  multi_label_loss below, which is keras.losses.BinaryCrossentropy(from_logits=True) per
  example (compile(loss=that) with multi-hot float labels [B, num_labels]). get_config
  records multi_label, so a saved model knows how to read its outputs.
  """
  HEADS = (ClassifierHead,)

  def __init__(self, encoder_or_config, num_labels, multi_label=False, **kwargs):
    kwargs.setdefault("name", "bert_classifier")
    super().__init__(encoder_or_config, **kwargs)
    self.num_labels = int(num_labels)
    self.multi_label = bool(multi_label)
    self.classifier = ClassifierHead(self.config, num_labels, name="classifier",
                                     dtype=self.dtype_policy)
    self.build()

  def build(self, input_shape=None):
    self.classifier.build()

  def call(self, inputs, training=None):
    pooled = self._encode(inputs, training)["pooled_output"]
    return self.classifier(pooled, training=training)

  def probabilities(self, logits):
    """The model's logits [B, num_labels] -> probabilities float32 [B, num_labels]: softmax
    over the labels, or for multi_label each label's sigmoid."""
    logits = ops.cast(logits, "float32")
    return ops.sigmoid(logits) if self.multi_label else ops.softmax(logits, axis=-1)

  def get_config(self):
    config = {**super().get_config(), "num_labels": self.num_labels}
    if self.multi_label:
      config["multi_label"] = True
    return config


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertTokenClassifier(_TaskModel):
  """A BertModel plus a token classification (tagging, NER) head: run_classifier's
  ClassifierHead (dropout 0.1 in training, output_weights [num_labels, H], output_bias
  [num_labels]) applied at every position of the sequence output.

  BertTokenClassifier(encoder_or_config, num_labels): a built BertModel (shared) or a
  BertConfig. Inputs: BertModel's dict. Returns the logits, float32 [B, S, num_labels]
  (compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
  ignore_class=-1)) with labels int [B, S], -1 where no tag is learned); loss:
  token_classifier_loss below. TF1 names: bert/* and the root-scope output_weights /
  output_bias, as BertClassifier (HuggingFace: classifier.weight / classifier.bias, as its
  BertForTokenClassification).
  """
  HEADS = (ClassifierHead,)

  def __init__(self, encoder_or_config, num_labels, **kwargs):
    kwargs.setdefault("name", "bert_token_classifier")
    super().__init__(encoder_or_config, **kwargs)
    self.num_labels = int(num_labels)
    self.classifier = ClassifierHead(self.config, num_labels, name="classifier",
                                     dtype=self.dtype_policy)
    self.build()

  def build(self, input_shape=None):
    self.classifier.build()

  def call(self, inputs, training=None):
    sequence = self._encode(inputs, training)["sequence_output"]
    return self.classifier(sequence, training=training)

  def get_config(self):
    return {**super().get_config(), "num_labels": self.num_labels}


@_checkpoint_head
@keras.saving.register_keras_serializable(package=_PACKAGE)
class SquadHead(ConfigLayer):
  """run_squad's span head: logits = sequence_output . output_weights^T + output_bias,
  float32 [B, S, 2], returned as (start_logits [B, S], end_logits [B, S]).

  No dropout and no masking: padding and question positions get logits too, as in the
  original (write_predictions filters them). output_weights [2, H] (truncated normal, stddev
  0.02 fixed) and output_bias [2] (zeros) are the original's TF1 variables
  cls/squad/output_weights and cls/squad/output_bias.
  """
  CHECKPOINT_NAMES = (("output_weights", "cls/squad/output_weights", "qa_outputs.weight"),
                      ("output_bias", "cls/squad/output_bias", "qa_outputs.bias"))
  CHECKPOINT_TASK = "squad"

  def __init__(self, config, **kwargs):
    super().__init__(config, **kwargs)

  def build(self, input_shape=None):
    self.output_weights = self.add_weight(
        name="output_weights", shape=(2, self.config.hidden_size),
        initializer=keras.initializers.TruncatedNormal(stddev=0.02))
    self.output_bias = self.add_weight(name="output_bias", shape=(2,), initializer="zeros")

  def call(self, sequence_output):
    x = sequence_output
    logits = ops.matmul(x, ops.transpose(ops.cast(self.output_weights, x.dtype)))
    logits = ops.cast(logits, "float32") + ops.cast(self.output_bias, "float32")
    return logits[:, :, 0], logits[:, :, 1]


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertSquad(_TaskModel):
  """A BertModel plus run_squad's span head (SquadHead).

  BertSquad(encoder_or_config): a built BertModel (shared) or a BertConfig.
  Inputs: BertModel's dict. Returns {"start_logits", "end_logits"}, float32 [B, S] each;
  loss: squad_loss below. TF1 names: bert/* and cls/squad/* (see
  checkpoints.tf1_variable_map), so the original's SQuAD checkpoints load and ours load in
  the original.
  """
  HEADS = (SquadHead,)

  def __init__(self, encoder_or_config, **kwargs):
    kwargs.setdefault("name", "bert_squad")
    super().__init__(encoder_or_config, **kwargs)
    self.squad = SquadHead(self.config, name="squad", dtype=self.dtype_policy)
    self.build()

  def build(self, input_shape=None):
    self.squad.build()

  def call(self, inputs, training=None):
    start, end = self.squad(self._encode(inputs, training)["sequence_output"])
    return {"start_logits": start, "end_logits": end}


POOLINGS = ("mean", "cls", "max")


def pool_embeddings(sequence_output, input_mask, pooling="mean", normalize=False):
  """One vector per text, float32 [B, H], from sequence_output [B, S, H] and input_mask
  [B, S] (1 = real token): "mean" over the real tokens, "cls" the [CLS] position's vector,
  "max" the element-wise maximum over the real tokens (sentence-transformers' three poolings);
  `normalize` divides each vector by its L2 norm (at least 1e-12), as its Normalize module."""
  if pooling not in POOLINGS:
    raise ValueError("pooling must be one of %s, got %r" % (", ".join(POOLINGS), pooling))
  x = ops.cast(sequence_output, "float32")
  mask = ops.cast(input_mask, "float32")[:, :, None]
  if pooling == "mean":
    pooled = ops.sum(x * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1e-9)
  elif pooling == "cls":
    pooled = x[:, 0]
  else:
    pooled = ops.max(ops.where(mask > 0, x, -1e9), axis=1)
  if normalize:
    pooled = pooled / ops.maximum(ops.sqrt(ops.sum(pooled * pooled, axis=-1,
                                                   keepdims=True)), 1e-12)
  return pooled


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertSentenceEncoder(_TaskModel):
  """A BertModel whose outputs are pooled into one vector per text (pool_embeddings):
  sentence embeddings, as sentence-transformers computes them (all-MiniLM-L6-v2: pooling
  "mean", normalize=True).

  BertSentenceEncoder(encoder_or_config, pooling="mean", normalize=False). Inputs: BertModel's
  dict. Returns float32 [B, H]. No weights beyond the encoder's.
  """

  def __init__(self, encoder_or_config, pooling="mean", normalize=False, **kwargs):
    if pooling not in POOLINGS:
      raise ValueError("pooling must be one of %s, got %r" % (", ".join(POOLINGS), pooling))
    kwargs.setdefault("name", "bert_sentence_encoder")
    super().__init__(encoder_or_config, **kwargs)
    self.pooling, self.normalize = pooling, bool(normalize)

  def call(self, inputs, training=None):
    _, input_mask, _ = _unpack_inputs(inputs)
    sequence_output = self._encode(inputs, training)["sequence_output"]
    return pool_embeddings(sequence_output, input_mask, self.pooling, self.normalize)

  def get_config(self):
    return {**super().get_config(), "pooling": self.pooling, "normalize": self.normalize}


@keras.saving.register_keras_serializable(package="bert_keras")
class BertCrossEncoder(BertClassifier):
  """A reranker: BertClassifier with one output, the relevance logit of a (query, passage)
  pair (the query as text_a / segment 0, the passage as text_b / segment 1), as
  sentence-transformers' CrossEncoder with num_labels=1. Its weights and TF1 / HuggingFace
  names are a one-output BertClassifier's (BertForSequenceClassification); its class tells it
  apart from a regression (task_registry's "reranker").

  BertCrossEncoder(encoder_or_config[, num_labels=1]). Inputs: BertModel's dict [B, S]. Returns
  the logits float32 [B, 1]; sigmoid(logit) is the probability of relevance."""

  def __init__(self, encoder_or_config, num_labels=1, **kwargs):
    if int(num_labels) != 1:
      raise ValueError(f"a cross-encoder has one output (the relevance logit), not "
                       f"num_labels={num_labels}")
    kwargs.setdefault("name", "bert_cross_encoder")
    kwargs.pop("multi_label", None)
    super().__init__(encoder_or_config, 1, **kwargs)

  def probabilities(self, logits):
    """The logits [B, 1] -> the probabilities of relevance float32 [B, 1] (sigmoid)."""
    return ops.sigmoid(ops.cast(logits, "float32"))
