"""BERT (Devlin et al., 2018) as Keras 3 layers and models, checkpoint-compatible.

Read top to bottom:
  1. BertConfig                      the original's config (plus HuggingFace config.json)
  2. activations                     gelu (tanh form, the original's), gelu_exact (erf form)
  3. layers                          Dense, LayerNorm, Embeddings, SelfAttention, FeedForward,
                                     TransformerBlock, Pooler, MaskedLMHead, NextSentenceHead
  4. models                          BertModel (the encoder), BertPretrainer (encoder + MLM/NSP),
                                     BertClassifier (encoder + run_classifier head),
                                     BertSquad (encoder + run_squad span head)
  5. losses                          masked_lm_loss, next_sentence_loss, classifier_loss,
                                     squad_loss (float32)
  6. checkpoints                     tf1_variable_map (THE name table), load_checkpoint,
                                     save_tf1_checkpoint, safetensors / pytorch_model.bin readers

Shapes: B batch, S sequence length, H hidden size, A attention heads, d = H / A,
I intermediate size, V vocabulary size, P masked positions per sequence.

The math is the original's (spec section 2): post-LN Transformer blocks, LayerNorm epsilon
1e-12, -10000 added to the attention scores of padded keys, truncated-normal initialisers,
dropout after the embeddings, on the attention probabilities and after every dense output.
Under a Keras mixed-precision policy the matmuls run in the compute dtype (bfloat16/float16)
while LayerNorm, softmax, the logits and the losses are float32.

  config = BertConfig.from_json_file("uncased_L-12_H-768_A-12/bert_config.json")
  model = BertModel(config)
  load_checkpoint(model, "uncased_L-12_H-768_A-12/bert_model.ckpt")
  out = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
  out["pooled_output"]                                    # [B, H]
"""

from bert_keras import quiet_tensorflow  # noqa: F401  (first: before TensorFlow is imported)
import collections
import copy
import dataclasses
import io
import json
import math
import os
import pickle
import re
import struct
import zipfile

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from keras import ops

_PACKAGE = "bert_keras"


# ----------------------------------------------------------------------------------------------
# 1. Config
# ----------------------------------------------------------------------------------------------

class BertConfig(object):
  """Configuration of a BertModel: the original's fields and defaults (spec 2.1).

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
    (our "gelu").
    """
    json_object = dict(json_object)
    act = json_object.get("hidden_act", "gelu")
    json_object["hidden_act"] = _HF_ACTIVATIONS.get(act, act)
    return cls.from_dict(json_object)

  @classmethod
  def from_json_file(cls, json_file):
    """Reads a bert_config.json (local or gs://); a HuggingFace config.json is recognised by
    its "model_type"/"architectures" keys and read with from_hf_dict."""
    with tf.io.gfile.GFile(json_file, "r") as reader:
      json_object = json.loads(reader.read())
    if _is_hf_config(json_object):
      return cls.from_hf_dict(json_object)
    return cls.from_dict(json_object)

  def to_dict(self):
    return copy.deepcopy(self.__dict__)

  def to_json_string(self):
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

  def __repr__(self):
    return "BertConfig(%s)" % json.dumps(self.to_dict(), sort_keys=True)

  def __eq__(self, other):
    return isinstance(other, BertConfig) and self.to_dict() == other.to_dict()


def _is_hf_config(json_object):
  return "model_type" in json_object or "architectures" in json_object


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

  tf.nn.gelu computes that same formula; grappler recognises it after a MatMul + BiasAdd and
  runs the three as one oneDNN kernel (Dense below), 5-7% faster than separate ops for
  BERT-Base on CPU (bench/bench_model.py).
  """
  return tf.nn.gelu(x, approximate=True)


def gelu_exact(x):
  """The exact gelu, x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))): HuggingFace's "gelu"."""
  return tf.nn.gelu(x, approximate=False)


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
  "gelu_exact" (alias "gelu_erf") is the erf form. Unknown names raise ValueError.
  """
  if not isinstance(activation, str):
    return activation
  name = activation.lower()
  if name in ("", "linear"):
    return None
  if name not in _ACTIVATIONS:
    raise ValueError("Unsupported activation: %s" % activation)
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
  """keras Dropout whose mask also depends on the tf.distribute replica it runs on.

  Keras keeps the dropout seed state in a variable that tf.distribute mirrors, so every
  replica would draw the same mask; here the replica id is added to the seed. On one
  replica the masks are Keras's own (same seed, same stateless op).
  """

  def call(self, inputs, training=False):
    if not training or self.rate <= 0:
      return inputs
    seed = self.seed_generator.next()
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
      replica = tf.cast(context.replica_id_in_sync_group, seed.dtype)
      seed = seed + tf.stack([tf.zeros_like(replica), replica])
    if seed.dtype != tf.int32:  # as Keras's TF backend casts its seed
      seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    return tf.nn.experimental.stateless_dropout(inputs, rate=self.rate, seed=seed,
                                                noise_shape=self.noise_shape)


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
    # grappler's remapper fuses into one kernel (a broadcast "+ bias" is not fused).
    shape = ops.shape(x)
    y = tf.nn.bias_add(tf.matmul(tf.reshape(x, (-1, shape[-1])), self.kernel), self.bias)
    fn = get_activation(self.activation)
    if fn is not None:
      y = fn(y)
    return tf.reshape(y, tuple(shape[:-1]) + (self.units,))

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
    mean = ops.mean(x, axis=-1, keepdims=True)
    variance = ops.mean(ops.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * ops.rsqrt(variance + self.epsilon) * self.gamma + self.beta

  def get_config(self):
    config = super().get_config()
    config.pop("dtype", None)
    return {**config, "epsilon": self.epsilon}


def _layer_norm_epsilon(config):
  return float(getattr(config, "layer_norm_eps", 1e-12))


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Embeddings(keras.layers.Layer):
  """Word + token-type + position embeddings, then LayerNorm and dropout.

  input_ids, segment_ids int [B, S] -> [B, S, H]. `word_embeddings` [V, H] is the table the
  masked-LM head reuses as its output matrix.
  """

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = _as_config(config)
    self.layer_norm = LayerNorm(_layer_norm_epsilon(self.config), name="LayerNorm")
    self.dropout = Dropout(self.config.hidden_dropout_prob, dtype=self.dtype_policy)

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
    if seq_length is None:   # traced with an unknown length: checked when it runs
      tf.debugging.assert_less_equal(tf.shape(input_ids)[1], max_length,
                                     message=message % ("?", max_length, max_length))
    positions = self.position_embeddings[:ops.shape(input_ids)[1]]       # [S, H]
    x = (ops.take(self.word_embeddings, input_ids, axis=0)                # [B, S, H]
         + ops.take(self.token_type_embeddings, segment_ids, axis=0)
         + positions[None])
    x = ops.cast(self.layer_norm(x), self.compute_dtype)
    return self.dropout(x, training=training)

  def get_config(self):
    return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class SelfAttention(keras.layers.Layer):
  """Multi-head scaled dot-product self-attention with an output projection.

  x [B, S, H], input_mask int [B, S] (1 real token, 0 padding) -> [B, S, H]. Padding is
  masked as a key only, by adding -10000 to its scores (queries at padding still attend).
  Head h owns columns h*d .. h*d+d-1 of the query/key/value kernels [H, H]. Scores, mask
  and softmax are float32; dropout falls on the probabilities.
  """

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = c = _as_config(config)
    if c.hidden_size % c.num_attention_heads != 0:
      raise ValueError(
          "The hidden size (%d) is not a multiple of the number of attention heads (%d)"
          % (c.hidden_size, c.num_attention_heads))
    self.num_heads = c.num_attention_heads
    self.head_size = c.hidden_size // c.num_attention_heads
    dense = lambda name: Dense(c.hidden_size, initializer_range=c.initializer_range,
                               name=name, dtype=self.dtype_policy)
    self.query, self.key, self.value = dense("query"), dense("key"), dense("value")
    self.output_dense = dense("dense")
    self.dropout = Dropout(c.attention_probs_dropout_prob, dtype=self.dtype_policy)

  def build(self, input_shape=None):
    shape = (None, None, self.config.hidden_size)
    for layer in (self.query, self.key, self.value, self.output_dense):
      layer.build(shape)

  def _split_heads(self, x):
    """[B, S, H] -> [B, A, S, d]."""
    b, s = ops.shape(x)[0], ops.shape(x)[1]
    return ops.transpose(ops.reshape(x, (b, s, self.num_heads, self.head_size)), (0, 2, 1, 3))

  def call(self, x, input_mask, training=None):
    # [B, 1, 1, S]: broadcast over heads and queries.
    attention_bias = (1.0 - ops.cast(input_mask, "float32")[:, None, None, :]) * -10000.0
    q = self._split_heads(self.query(x))
    k = self._split_heads(self.key(x))
    v = self._split_heads(self.value(x))
    scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))                # [B, A, S, S]
    scores = ops.cast(scores, "float32") * (1.0 / math.sqrt(self.head_size)) + attention_bias
    probs = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
    probs = self.dropout(probs, training=training)
    context = ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3))          # [B, S, A, d]
    b, s = ops.shape(x)[0], ops.shape(x)[1]
    return self.output_dense(ops.reshape(context, (b, s, self.config.hidden_size)))

  def get_config(self):
    return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class FeedForward(keras.layers.Layer):
  """Position-wise feed-forward: [B, S, H] -> dense(I, hidden_act) -> dense(H) -> [B, S, H]."""

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = c = _as_config(config)
    self.intermediate = Dense(c.intermediate_size, activation=c.hidden_act,
                              initializer_range=c.initializer_range, name="dense",
                              dtype=self.dtype_policy)
    self.output_dense = Dense(c.hidden_size, initializer_range=c.initializer_range,
                              name="dense", dtype=self.dtype_policy)

  def build(self, input_shape=None):
    c = self.config
    self.intermediate.build((None, None, c.hidden_size))
    self.output_dense.build((None, None, c.intermediate_size))

  def call(self, x):
    return self.output_dense(self.intermediate(x))

  def get_config(self):
    return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TransformerBlock(keras.layers.Layer):
  """One post-LN encoder layer:
       a = LayerNorm(x + dropout(SelfAttention(x)))
       y = LayerNorm(a + dropout(FeedForward(a)))
  [B, S, H] -> [B, S, H].
  """

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = c = _as_config(config)
    eps = _layer_norm_epsilon(c)
    self.attention = SelfAttention(c, name="attention", dtype=self.dtype_policy)
    self.attention_dropout = Dropout(c.hidden_dropout_prob, dtype=self.dtype_policy)
    self.attention_layer_norm = LayerNorm(eps, name="attention_LayerNorm")
    self.feed_forward = FeedForward(c, name="feed_forward", dtype=self.dtype_policy)
    self.output_dropout = Dropout(c.hidden_dropout_prob, dtype=self.dtype_policy)
    self.output_layer_norm = LayerNorm(eps, name="output_LayerNorm")

  def build(self, input_shape=None):
    shape = (None, None, self.config.hidden_size)
    self.attention.build(shape)
    self.attention_layer_norm.build(shape)
    self.feed_forward.build(shape)
    self.output_layer_norm.build(shape)

  def call(self, x, input_mask, training=None):
    h = self.attention_dropout(self.attention(x, input_mask, training=training),
                               training=training)
    a = ops.cast(self.attention_layer_norm(x + h), self.compute_dtype)
    h = self.output_dropout(self.feed_forward(a), training=training)
    return ops.cast(self.output_layer_norm(a + h), self.compute_dtype)

  def get_config(self):
    return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Pooler(keras.layers.Layer):
  """tanh(dense(sequence_output[:, 0])): [B, S, H] -> [B, H]. No dropout."""

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = c = _as_config(config)
    self.dense = Dense(c.hidden_size, activation="tanh", initializer_range=c.initializer_range,
                       name="dense", dtype=self.dtype_policy)

  def build(self, input_shape=None):
    self.dense.build((None, self.config.hidden_size))

  def call(self, sequence_output):
    return self.dense(sequence_output[:, 0])

  def get_config(self):
    return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class MaskedLMHead(keras.layers.Layer):
  """Masked-LM head of run_pretraining (TF1 scope cls/predictions).

  Gathers sequence_output [B, S, H] at masked_lm_positions [B, P], transforms with
  dense(H, hidden_act) + LayerNorm, and scores against the word-embedding table [V, H]
  (tied, passed in) plus its own output_bias [V]: -> float32 logits [B, P, V].
  """

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = c = _as_config(config)
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
    x = tf.gather(sequence_output, masked_lm_positions, batch_dims=1)     # [B, P, H]
    x = ops.cast(self.layer_norm(self.transform(x)), self.compute_dtype)
    b, p = ops.shape(x)[0], ops.shape(x)[1]
    table = ops.cast(embedding_table, self.compute_dtype)                  # [V, H]
    logits = tf.matmul(ops.reshape(x, (-1, self.config.hidden_size)), table, transpose_b=True)
    logits = ops.cast(logits, "float32") + ops.cast(self.output_bias, "float32")
    return ops.reshape(logits, (b, p, self.config.vocab_size))

  def get_config(self):
    return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class NextSentenceHead(keras.layers.Layer):
  """Next-sentence head (TF1 scope cls/seq_relationship): pooled [B, H] -> float32 [B, 2].

  output_weights is [2, H] ([out, in], as in the original); label 0 = "is next".
  """

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = _as_config(config)

  def build(self, input_shape=None):
    self.output_weights = self.add_weight(
        name="output_weights", shape=(2, self.config.hidden_size),
        initializer=_initializer(self.config))
    self.output_bias = self.add_weight(name="output_bias", shape=(2,), initializer="zeros")

  def call(self, pooled_output):
    logits = ops.matmul(pooled_output, ops.transpose(self.output_weights))
    return ops.cast(logits, "float32") + ops.cast(self.output_bias, "float32")

  def get_config(self):
    return {**super().get_config(), "config": self.config.to_dict()}


# ----------------------------------------------------------------------------------------------
# 4. Models
# ----------------------------------------------------------------------------------------------

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
    encoder_outputs             list of the L layer outputs, each [B, S, H]
    embedding_output [B, S, H]  input of the first layer (after LayerNorm and dropout)
  `model.embedding_table` is the word-embedding variable [V, H].
  """

  def __init__(self, config, **kwargs):
    kwargs.setdefault("name", "bert")
    super().__init__(**kwargs)
    self.config = c = _as_config(config)
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

  def call(self, inputs, training=None):
    input_ids, input_mask, segment_ids = _unpack_inputs(inputs)
    x = self.embeddings(input_ids, segment_ids, training=training)
    embedding_output = x
    encoder_outputs = []
    for block in self.encoder_layers:
      x = block(x, input_mask, training=training)
      encoder_outputs.append(x)
    return {"sequence_output": x,
            "pooled_output": self.pooler(x),
            "encoder_outputs": encoder_outputs,
            "embedding_output": embedding_output}

  def get_config(self):
    return {"name": self.name, "trainable": self.trainable,
            "dtype": keras.saving.serialize_keras_object(self.dtype_policy),
            "config": self.config.to_dict()}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    if isinstance(config.get("dtype"), dict):
      config["dtype"] = keras.saving.deserialize_keras_object(config["dtype"])
    return cls(BertConfig.from_dict(config.pop("config")), **config)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertPretrainer(keras.Model):
  """BertModel plus the masked-LM and next-sentence heads of run_pretraining.

  Inputs: BertModel's dict plus "masked_lm_positions" int32 [B, P]. Returns BertModel's dict
  plus "masked_lm_logits" float32 [B, P, V] and "next_sentence_logits" float32 [B, 2].
  Losses: masked_lm_loss / next_sentence_loss below (or `pretraining_loss`).
  """

  def __init__(self, config, **kwargs):
    kwargs.setdefault("name", "bert_pretrainer")
    super().__init__(**kwargs)
    self.config = c = _as_config(config)
    self.bert = BertModel(c, dtype=self.dtype_policy)
    self.masked_lm = MaskedLMHead(c, name="predictions", dtype=self.dtype_policy)
    self.next_sentence = NextSentenceHead(c, name="seq_relationship", dtype=self.dtype_policy)
    self.build()

  def build(self, input_shape=None):
    self.masked_lm.build()
    self.next_sentence.build()

  def call(self, inputs, training=None):
    outputs = dict(self.bert(inputs, training=training))
    positions = ops.cast(inputs["masked_lm_positions"], "int32")
    outputs["masked_lm_logits"] = self.masked_lm(
        outputs["sequence_output"], positions, self.bert.embedding_table)
    outputs["next_sentence_logits"] = self.next_sentence(outputs["pooled_output"])
    return outputs

  def get_config(self):
    return BertModel.get_config(self)

  @classmethod
  def from_config(cls, config):
    return BertModel.from_config.__func__(cls, config)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class ClassifierHead(keras.layers.Layer):
  """run_classifier's head: dropout 0.1 (fixed, not the config's; training only) on the pooled
  output [B, H], then logits = pooled . output_weights^T + output_bias -> float32 [B, num_labels].

  output_weights [num_labels, H] (truncated normal, stddev 0.02 fixed) and output_bias
  [num_labels] (zeros) are the original's root-scope TF1 variables of the same names.
  """

  def __init__(self, config, num_labels, **kwargs):
    super().__init__(**kwargs)
    self.config = _as_config(config)
    self.num_labels = int(num_labels)
    self.dropout = Dropout(0.1, dtype=self.dtype_policy)

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
class BertClassifier(keras.Model):
  """BertModel plus run_classifier's head (ClassifierHead).

  Inputs: BertModel's dict. Returns BertModel's dict plus "logits" float32 [B, num_labels];
  loss: classifier_loss below. TF1 names: bert/* and the root-scope output_weights /
  output_bias (tf1_variable_map), so the original's fine-tuned checkpoints load and ours
  load in the original.
  """

  def __init__(self, config, num_labels, **kwargs):
    kwargs.setdefault("name", "bert_classifier")
    super().__init__(**kwargs)
    self.config = c = _as_config(config)
    self.num_labels = int(num_labels)
    self.bert = BertModel(c, dtype=self.dtype_policy)
    self.classifier = ClassifierHead(c, num_labels, name="classifier", dtype=self.dtype_policy)
    self.build()

  def build(self, input_shape=None):
    self.classifier.build()

  def call(self, inputs, training=None):
    outputs = dict(self.bert(inputs, training=training))
    outputs["logits"] = self.classifier(outputs["pooled_output"], training=training)
    return outputs

  def get_config(self):
    return {**BertModel.get_config(self), "num_labels": self.num_labels}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    if isinstance(config.get("dtype"), dict):
      config["dtype"] = keras.saving.deserialize_keras_object(config["dtype"])
    return cls(BertConfig.from_dict(config.pop("config")), config.pop("num_labels"), **config)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class SquadHead(keras.layers.Layer):
  """run_squad's span head: logits = sequence_output . output_weights^T + output_bias,
  float32 [B, S, 2], returned as (start_logits [B, S], end_logits [B, S]).

  No dropout and no masking: padding and question positions get logits too, as in the
  original (write_predictions filters them). output_weights [2, H] (truncated normal, stddev
  0.02 fixed) and output_bias [2] (zeros) are the original's TF1 variables
  cls/squad/output_weights and cls/squad/output_bias.
  """

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = _as_config(config)

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

  def get_config(self):
    return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertSquad(keras.Model):
  """BertModel plus run_squad's span head (SquadHead).

  Inputs: BertModel's dict. Returns BertModel's dict plus "start_logits" and "end_logits",
  float32 [B, S] each; loss: squad_loss below. TF1 names: bert/* and cls/squad/* (see
  tf1_variable_map), so the original's SQuAD checkpoints load and ours load in the original.
  """

  def __init__(self, config, **kwargs):
    kwargs.setdefault("name", "bert_squad")
    super().__init__(**kwargs)
    self.config = c = _as_config(config)
    self.bert = BertModel(c, dtype=self.dtype_policy)
    self.squad = SquadHead(c, name="squad", dtype=self.dtype_policy)
    self.build()

  def build(self, input_shape=None):
    self.squad.build()

  def call(self, inputs, training=None):
    outputs = dict(self.bert(inputs, training=training))
    outputs["start_logits"], outputs["end_logits"] = self.squad(outputs["sequence_output"])
    return outputs

  def get_config(self):
    return BertModel.get_config(self)

  @classmethod
  def from_config(cls, config):
    return BertModel.from_config.__func__(cls, config)


# ----------------------------------------------------------------------------------------------
# 5. Losses (float32)
# ----------------------------------------------------------------------------------------------

def masked_lm_per_position_loss(logits, label_ids):
  """-log p(label) at each masked position: logits [B, P, V], label_ids int [B, P] ->
  float32 [B, P]."""
  return tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.cast(label_ids, tf.int32), logits=tf.cast(logits, tf.float32))


def next_sentence_per_example_loss(logits, labels):
  """-log p(label) per example: logits [B, 2], labels int [B] or [B, 1] (0 = is next) ->
  float32 [B]."""
  return tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.reshape(tf.cast(labels, tf.int32), [-1]), logits=tf.cast(logits, tf.float32))


def masked_lm_loss(logits, label_ids, label_weights, weight_sum=None):
  """sum(w * -log p(label)) / (weight_sum + 1e-5), as run_pretraining; weight_sum defaults
  to sum(w) of this batch (a distributed loop passes the sum over the global batch).

  logits [B, P, V], label_ids int [B, P], label_weights float [B, P] -> scalar float32.
  """
  weights = tf.cast(label_weights, tf.float32)
  if weight_sum is None:
    weight_sum = tf.reduce_sum(weights)
  return (tf.reduce_sum(weights * masked_lm_per_position_loss(logits, label_ids)) /
          (weight_sum + 1e-5))


def next_sentence_loss(logits, labels, num_examples=None):
  """The sum of -log p(label) over the batch / num_examples (default: this batch's size, i.e.
  the batch mean). logits [B, 2], labels int [B] or [B, 1] (0 = is next) -> scalar float32."""
  per_example = next_sentence_per_example_loss(logits, labels)
  if num_examples is None:
    num_examples = tf.cast(tf.shape(per_example)[0], tf.float32)
  return tf.reduce_sum(per_example) / num_examples


def classifier_loss(logits, label_ids):
  """Per-example -log softmax(logits)[label]: logits [B, N], label_ids int [B] -> float32 [B]
  (the original's per_example_loss; its "loss" is the batch mean)."""
  log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
  labels = tf.reshape(tf.cast(label_ids, tf.int32), [-1])
  return -tf.gather(log_probs, labels, batch_dims=1)


def squad_loss(start_logits, end_logits, start_positions, end_positions):
  """Per-example (-log softmax(start_logits)[start] - log softmax(end_logits)[end]) / 2:
  logits float [B, S], positions int [B] (or [B, 1]) -> float32 [B]. The softmax runs over
  all S positions (padding included); a position outside [0, S) contributes 0 (the
  original's one-hot). The batch mean is the original's total_loss = (start_loss +
  end_loss) / 2."""
  def nll(logits, positions):
    logits = tf.cast(logits, tf.float32)
    one_hot = tf.one_hot(tf.reshape(tf.cast(positions, tf.int32), [-1]),
                         depth=tf.shape(logits)[-1], dtype=tf.float32)
    return -tf.reduce_sum(one_hot * tf.nn.log_softmax(logits, axis=-1), axis=-1)
  return (nll(start_logits, start_positions) + nll(end_logits, end_positions)) / 2.0


def pretraining_loss(outputs, features, masked_lm_weight_sum=None, num_examples=None):
  """masked_lm_loss + next_sentence_loss from BertPretrainer outputs (masked_lm_logits
  [B, P, V], next_sentence_logits [B, 2]) and the run_pretraining features (masked_lm_ids,
  masked_lm_weights [B, P], next_sentence_labels [B, 1]) -> scalar float32. The
  denominators default to this batch's own; run_pretraining's loop passes the global
  batch's sum of masked_lm_weights and number of examples."""
  return (masked_lm_loss(outputs["masked_lm_logits"], features["masked_lm_ids"],
                         features["masked_lm_weights"], masked_lm_weight_sum)
          + next_sentence_loss(outputs["next_sentence_logits"],
                               features["next_sentence_labels"], num_examples))


# ----------------------------------------------------------------------------------------------
# 6. Checkpoints
# ----------------------------------------------------------------------------------------------

def _encoder_of(model):
  if isinstance(model, BertModel):
    return model
  bert = getattr(model, "bert", None)
  if isinstance(bert, BertModel):
    return bert
  raise TypeError("expected a BertModel or a model with a `bert` BertModel attribute, got %s"
                  % type(model).__name__)


def tf1_variable_map(model):
  """{TF1 checkpoint name: keras variable}, the one name table (spec section 3).

  For a BertModel, the bert/* names; for a BertPretrainer (or any model with a `bert`
  attribute and optional `masked_lm` / `next_sentence` heads) also the cls/* names; for a
  BertClassifier (a `classifier` head) also the root-scope output_weights / output_bias; for
  a BertSquad (a `squad` head) also cls/squad/output_weights [2, H] / cls/squad/output_bias.
  Kernels are [in, out] on both sides; cls/seq_relationship/output_weights is [2, H] on both.
  """
  bert = _encoder_of(model)
  names = collections.OrderedDict()
  emb = bert.embeddings
  names["bert/embeddings/word_embeddings"] = emb.word_embeddings
  names["bert/embeddings/token_type_embeddings"] = emb.token_type_embeddings
  names["bert/embeddings/position_embeddings"] = emb.position_embeddings
  _add_layer_norm(names, "bert/embeddings/LayerNorm", emb.layer_norm)
  for i, block in enumerate(bert.encoder_layers):
    prefix = "bert/encoder/layer_%d/" % i
    attention = block.attention
    _add_dense(names, prefix + "attention/self/query", attention.query)
    _add_dense(names, prefix + "attention/self/key", attention.key)
    _add_dense(names, prefix + "attention/self/value", attention.value)
    _add_dense(names, prefix + "attention/output/dense", attention.output_dense)
    _add_layer_norm(names, prefix + "attention/output/LayerNorm", block.attention_layer_norm)
    _add_dense(names, prefix + "intermediate/dense", block.feed_forward.intermediate)
    _add_dense(names, prefix + "output/dense", block.feed_forward.output_dense)
    _add_layer_norm(names, prefix + "output/LayerNorm", block.output_layer_norm)
  _add_dense(names, "bert/pooler/dense", bert.pooler.dense)
  mlm = getattr(model, "masked_lm", None)
  if mlm is not None:
    _add_dense(names, "cls/predictions/transform/dense", mlm.transform)
    _add_layer_norm(names, "cls/predictions/transform/LayerNorm", mlm.layer_norm)
    names["cls/predictions/output_bias"] = mlm.output_bias
  nsp = getattr(model, "next_sentence", None)
  if nsp is not None:
    names["cls/seq_relationship/output_weights"] = nsp.output_weights
    names["cls/seq_relationship/output_bias"] = nsp.output_bias
  head = getattr(model, "classifier", None)
  if head is not None:  # run_classifier's root-scope variables
    names["output_weights"] = head.output_weights
    names["output_bias"] = head.output_bias
  squad = getattr(model, "squad", None)
  if squad is not None:  # run_squad's span head
    names["cls/squad/output_weights"] = squad.output_weights
    names["cls/squad/output_bias"] = squad.output_bias
  return names


def _add_dense(names, scope, layer):
  names[scope + "/kernel"] = layer.kernel
  names[scope + "/bias"] = layer.bias


def _add_layer_norm(names, scope, layer):
  names[scope + "/beta"] = layer.beta
  names[scope + "/gamma"] = layer.gamma


def hf_name(tf1_name):
  """TF1 name -> (HuggingFace BertForPreTraining state-dict name, transpose?).

  HF Linear weights are [out, in], so */kernel is transposed; LayerNorm gamma/beta are
  weight/bias; the MLM output bias is cls.predictions.bias; cls/seq_relationship/
  output_weights is already [2, H] (= HF [out, in]), not transposed, and so are the
  fine-tuning heads: run_classifier's output_weights = HF classifier.weight, run_squad's
  cls/squad/output_weights = HF qa_outputs.weight.
  """
  special = {"cls/predictions/output_bias": "cls.predictions.bias",
             "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
             "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
             # BertForSequenceClassification / BertForQuestionAnswering heads: Linear
             # [out, in] weights, the same layout as output_weights [num_labels or 2, H].
             "output_weights": "classifier.weight",
             "output_bias": "classifier.bias",
             "cls/squad/output_weights": "qa_outputs.weight",
             "cls/squad/output_bias": "qa_outputs.bias"}
  if tf1_name in special:
    return special[tf1_name], False
  name = re.sub(r"layer_(\d+)", r"layer.\1", tf1_name)
  name = re.sub(r"_embeddings$", "_embeddings/weight", name)
  transpose = name.endswith("/kernel")
  name = re.sub(r"/(kernel|gamma)$", "/weight", name)
  name = re.sub(r"/beta$", "/bias", name)
  return name.replace("/", "."), transpose


@dataclasses.dataclass
class LoadResult:
  """What load_checkpoint did. `loaded`: our variables' TF1 names that got values; `unused`:
  checkpoint entries not used (optimizer slots, global_step, heads the model lacks);
  `missing`: head variables absent from the checkpoint (left at their initial values)."""
  path: str
  format: str                                   # "tf1", "huggingface" or "tf2"
  loaded: list = dataclasses.field(default_factory=list)
  unused: list = dataclasses.field(default_factory=list)
  missing: list = dataclasses.field(default_factory=list)

  def __str__(self):
    return ("loaded %d variables from %s checkpoint %s; %d checkpoint entries unused%s; "
            "%d model variables not in the checkpoint%s" % (
                len(self.loaded), self.format, self.path, len(self.unused),
                _preview(self.unused), len(self.missing), _preview(self.missing)))


def _preview(names, n=5):
  if not names:
    return ""
  more = ", ..." if len(names) > n else ""
  return " (" + ", ".join(names[:n]) + more + ")"


class CheckpointError(ValueError):
  """A checkpoint does not fit the model (names the variable, shapes and the likely cause)."""


def load_checkpoint(model, path):
  """Loads weights into a BertModel or a model holding one (BertPretrainer, BertClassifier,
  BertSquad); returns a LoadResult.

  `path` may be:
    * a TF1 checkpoint prefix (Google's released `.../bert_model.ckpt`, a run_pretraining
      `model.ckpt-N`; gs:// works), or the directory holding it: names of spec section 3;
      global_step, adam_m/adam_v and heads the model lacks are ignored (LoadResult.unused);
    * a HuggingFace directory with config.json and model.safetensors or pytorch_model.bin
      (read without unpickling arbitrary objects), or such a file itself; HF names, [out, in]
      Linear weights, with or without the "bert." prefix;
    * a TF2 object-based checkpoint written by our training: training.make_checkpoint's
      `model_variables` (TF1 names), or plainly
      `tf.train.Checkpoint(model=model, optimizer=..., step=...).save(...)`; only the model
      variables are read (optimizer slots and step are reported unused). A BertModel can
      load from a BertPretrainer checkpoint and the other way around (heads then stay
      initialised).
  A missing encoder variable (the pooler excepted: HF question-answering weights have none;
  it is then reported in LoadResult.missing and logged) or any shape mismatch raises
  CheckpointError naming the variable, both shapes and the likely cause (a bert_config.json
  that does not match). HF fine-tuned heads load too: BertForSequenceClassification's
  classifier.* into BertClassifier, BertForQuestionAnswering's qa_outputs.* into BertSquad.
  """
  path = os.fspath(path)
  kind, resolved = _resolve_checkpoint(path)
  if kind == "huggingface":
    state = _read_hf_weights(resolved)
    result = _assign_from_hf(model, state, resolved)
  else:
    reader = tf.train.load_checkpoint(resolved)
    shapes = reader.get_variable_to_shape_map()
    if "_CHECKPOINTABLE_OBJECT_GRAPH" in shapes:
      result = _restore_tf2(model, resolved, reader, shapes)
    else:
      values = {name: (lambda n=name: reader.get_tensor(n)) for name in shapes}
      result = _assign(model, values, {k: tuple(v) for k, v in shapes.items()}, resolved,
                       "tf1", lambda name: (name, False))
  logging.info("%s", result)
  return result


def _resolve_checkpoint(path):
  """-> ("huggingface", file) or ("tf", checkpoint prefix)."""
  gfile = tf.io.gfile
  if gfile.isdir(path):
    for name in ("model.safetensors", "pytorch_model.bin"):
      if gfile.exists(os.path.join(path, name)):
        return "huggingface", os.path.join(path, name)
    if gfile.exists(os.path.join(path, "bert_model.ckpt.index")):
      return "tf", os.path.join(path, "bert_model.ckpt")
    latest = tf.train.latest_checkpoint(path)
    if latest:
      return "tf", latest
    indexes = gfile.glob(os.path.join(path, "*.index"))
    if len(indexes) == 1:
      return "tf", indexes[0][:-len(".index")]
    raise CheckpointError(
        "%s: no checkpoint found (expected bert_model.ckpt.index, a `checkpoint` file, "
        "model.safetensors or pytorch_model.bin)%s" % (
            path, "; several *.index files, give the prefix" if indexes else ""))
  if path.endswith((".safetensors", ".bin")) and gfile.exists(path):
    return "huggingface", path
  if path.endswith(".index"):
    path = path[:-len(".index")]
  if not gfile.exists(path + ".index"):
    raise CheckpointError("%s: not a checkpoint (no %s.index)" % (path, path))
  return "tf", path


def _shape_error(name, ckpt_shape, model_shape, config):
  return CheckpointError(
      "%s: checkpoint shape %s != model shape %s. The model was probably built from a "
      "bert_config.json that does not match the checkpoint (vocab_size=%s, hidden_size=%s, "
      "intermediate_size=%s, max_position_embeddings=%s, type_vocab_size=%s)." % (
          name, list(ckpt_shape), list(model_shape), config.vocab_size, config.hidden_size,
          config.intermediate_size, config.max_position_embeddings, config.type_vocab_size))


def _assign(model, values, shapes, path, fmt, checkpoint_name):
  """Assigns values[checkpoint_name(tf1)] to every model variable of tf1_variable_map."""
  config = _encoder_of(model).config
  result = LoadResult(path=path, format=fmt)
  used = set()
  assignments = []
  for tf1, variable in tf1_variable_map(model).items():
    ckpt, transpose = checkpoint_name(tf1)
    if ckpt is None or ckpt not in values:
      if tf1.startswith("bert/pooler/"):
        # HF BertForQuestionAnswering / BertForTokenClassification weights have no pooler.
        logging.warning("%s is not in checkpoint %s: the pooler keeps its initial values "
                        "(pooled_output is then not the checkpoint's)", ckpt or tf1, path)
      elif tf1.startswith("bert/"):
        raise CheckpointError(
            "%s (model shape %s) is missing from checkpoint %s. The model was probably built "
            "from a bert_config.json that does not match the checkpoint (num_hidden_layers=%d)"
            ", or this is not a BERT checkpoint." % (
                ckpt or tf1, list(variable.shape), path, config.num_hidden_layers))
      result.missing.append(tf1)
      continue
    shape = tuple(shapes[ckpt])
    if transpose:
      shape = shape[::-1]
    if shape != tuple(variable.shape):
      raise _shape_error(ckpt, shapes[ckpt], variable.shape, config)
    assignments.append((variable, ckpt, transpose))
    used.add(ckpt)
    result.loaded.append(tf1)
  for variable, ckpt, transpose in assignments:
    value = np.asarray(values[ckpt]())
    variable.assign(np.ascontiguousarray(value.T if transpose else value)
                    .astype(variable.dtype))
  result.unused = sorted(set(shapes) - used)
  return result


def _assign_from_hf(model, state, path):
  prefix = "bert." if any(k.startswith("bert.") for k in state) else ""
  # Older HF checkpoints name LayerNorm parameters gamma/beta.
  state = {re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight",
                  re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", k)): v
           for k, v in state.items()}

  def checkpoint_name(tf1):
    name, transpose = hf_name(tf1)
    if tf1.startswith("bert/"):
      name = prefix + name[len("bert."):]
    return name, transpose

  shapes = {k: tuple(v.shape) for k, v in state.items()}
  values = {k: (lambda v=v: v) for k, v in state.items()}
  return _assign(model, values, shapes, path, "huggingface", checkpoint_name)


def _restore_tf2(model, path, reader, shapes):
  """Loads the model variables of a TF2 object-based checkpoint (tf.train.Checkpoint).

  Two layouts are read:
    * a `model_variables` dict keyed by the TF1 names, as training.make_checkpoint writes
      ("model_variables/bert.Sembeddings.Sword_embeddings/.ATTRIBUTES/VARIABLE_VALUE");
    * the object graph of the model itself, tf.train.Checkpoint(model=model, ...)
      ("model/bert/embeddings/word_embeddings/.ATTRIBUTES/VARIABLE_VALUE"), found wherever
      it sits: a BertModel reads the `bert` subtree of a BertPretrainer (or of a wrapper
      holding one), and a BertPretrainer reads a BertModel checkpoint (heads then stay
      initialised).
  """
  by_name = {}
  for key in shapes:
    match = re.match(r"model_variables/(.+)/\.ATTRIBUTES/VARIABLE_VALUE$", key)
    if match:
      by_name[re.sub(r"\.(.)", lambda m: "/" if m.group(1) == "S" else m.group(1),
                     match.group(1))] = key
  if by_name:
    names = {tf1: by_name.get(tf1) for tf1 in tf1_variable_map(model)}
  else:
    names = _object_graph_names(model, shapes, path)
  values = {name: (lambda n=name: reader.get_tensor(n)) for name in shapes}
  result = _assign(model, values, {k: tuple(v) for k, v in shapes.items()}, path, "tf2",
                   lambda tf1: (names[tf1], False))
  result.unused = [k for k in result.unused if k != "_CHECKPOINTABLE_OBJECT_GRAPH"]
  return result


def _object_graph_names(model, shapes, path):
  """{TF1 name: TF2 checkpoint key} by locating our encoder's object paths in the keys."""
  anchor = "embeddings/word_embeddings/.ATTRIBUTES/VARIABLE_VALUE"
  found = sorted((k for k in shapes if k.endswith("/" + anchor) and "OPTIMIZER_SLOT" not in k),
                 key=len)
  if not found:
    raise CheckpointError("%s: a TF2 checkpoint without BERT embeddings (expected a key "
                          "ending in %s)" % (path, anchor))
  bert_prefix = found[0][:-len(anchor)]                 # e.g. "model/" or "model/bert/"
  bert = _encoder_of(model)
  key_of = {id(v): k for k, v in _object_keys(bert, bert_prefix).items()}
  if model is not bert and bert_prefix.endswith("bert/"):
    heads_prefix = bert_prefix[:-len("bert/")]
    for key, variable in _object_keys(model, heads_prefix).items():
      key_of.setdefault(id(variable), key)
  return {tf1: key_of.get(id(variable)) for tf1, variable in tf1_variable_map(model).items()}


def _object_keys(root, prefix):
  """{TF2 checkpoint key: keras variable} for the objects under `root`, breadth first as
  tf.train.Checkpoint names them."""
  keys, seen, queue = {}, {id(root)}, [(root, prefix)]
  while queue:
    obj, path = queue.pop(0)
    children = obj._trackable_children(save_type="checkpoint")  # pylint: disable=protected-access
    for name, child in children.items():
      if id(child) in seen:
        continue
      seen.add(id(child))
      if isinstance(child, (keras.Variable, tf.Variable)):
        keys[path + name + "/.ATTRIBUTES/VARIABLE_VALUE"] = child
      else:
        queue.append((child, path + name + "/"))
  return keys


def save_tf1_checkpoint(model, prefix):
  """Writes `prefix.index` and `prefix.data-00000-of-00001` with the original TF1 variable
  names (bert/*, plus the heads' names of tf1_variable_map: cls/* for a BertPretrainer or a
  BertSquad, output_weights/output_bias for a BertClassifier), float32: the original code,
  tf1 Savers, tf.train.init_from_checkpoint and the converters written for Google's
  checkpoints read it.
  Written under a temporary prefix, then renamed. Returns the list of names written."""
  names = tf1_variable_map(model)
  prefix = os.fspath(prefix)
  directory = os.path.dirname(prefix)
  if directory:
    tf.io.gfile.makedirs(directory)
  tmp = "%s.tmp-%d" % (prefix, os.getpid())
  tf.raw_ops.SaveV2(prefix=tmp, tensor_names=list(names),
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.cast(v.value, tf.float32) for v in names.values()])
  for suffix in (".data-00000-of-00001", ".index"):
    tf.io.gfile.rename(tmp + suffix, prefix + suffix, overwrite=True)
  return list(names)


# --- HuggingFace weight files -----------------------------------------------------------------

_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
                       "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
                       "U8": np.uint8, "BOOL": np.bool_}


def _read_hf_weights(path):
  if path.endswith(".safetensors"):
    return read_safetensors(path)
  return read_pytorch_bin(path)


def _bf16_to_f32(raw):
  return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)


def read_safetensors(path):
  """{name: np.ndarray} from a .safetensors file (8-byte header length, JSON header, data)."""
  with tf.io.gfile.GFile(path, "rb") as f:
    data = f.read()
  (header_len,) = struct.unpack("<Q", data[:8])
  header = json.loads(data[8:8 + header_len])
  body = memoryview(data)[8 + header_len:]
  tensors = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    start, end = info["data_offsets"]
    raw = body[start:end]
    if info["dtype"] == "BF16":
      array = _bf16_to_f32(raw)
    elif info["dtype"] in _SAFETENSORS_DTYPES:
      array = np.frombuffer(raw, _SAFETENSORS_DTYPES[info["dtype"]])
    else:
      raise CheckpointError("%s: tensor %s has unsupported dtype %s"
                            % (path, name, info["dtype"]))
    tensors[name] = array.reshape(info["shape"])
  return tensors


# pytorch_model.bin (torch.save's zip format) is a pickle whose tensors are rebuilt by a few
# torch functions from storages kept as raw files in the zip. The unpickler below resolves
# only those names, to NumPy stand-ins; any other global is refused, so no arbitrary code runs.
_TORCH_STORAGES = {"FloatStorage": np.float32, "DoubleStorage": np.float64,
                   "HalfStorage": np.float16, "BFloat16Storage": "bfloat16",
                   "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
                   "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}
_TORCH_DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
                 "bfloat16": "bfloat16", "int64": np.int64, "int32": np.int32,
                 "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


def _rebuild_tensor(storage, offset, size, stride, *unused):
  if not size:
    return storage[offset:offset + 1].reshape(()).copy()
  itemsize = storage.itemsize
  return np.lib.stride_tricks.as_strided(
      storage[offset:], shape=tuple(size), strides=tuple(s * itemsize for s in stride)).copy()


def _rebuild_parameter(data, *unused):
  return data


class _StorageType(object):
  def __init__(self, dtype):
    self.dtype = dtype


class _RestrictedUnpickler(pickle.Unpickler):
  """Unpickles a torch state dict into NumPy arrays, refusing every other global."""

  def __init__(self, file, archive, root):
    super().__init__(file)
    self._archive, self._root = archive, root

  def find_class(self, module, name):
    if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
      return _rebuild_tensor
    if module == "torch._utils" and name == "_rebuild_parameter":
      return _rebuild_parameter
    if module == "collections" and name == "OrderedDict":
      return collections.OrderedDict
    if module == "torch" and name in _TORCH_STORAGES:
      return _StorageType(_TORCH_STORAGES[name])
    if module == "torch" and name in _TORCH_DTYPES:
      return _TORCH_DTYPES[name]
    if module == "torch" and name == "UntypedStorage":
      return _StorageType(None)
    raise pickle.UnpicklingError("refusing to load %s.%s from a pytorch_model.bin (only "
                                 "tensors are allowed)" % (module, name))

  def persistent_load(self, pid):
    # ("storage", storage type, key, location, numel)
    if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
      raise pickle.UnpicklingError("unexpected persistent id %r" % (pid,))
    storage_type, key = pid[1], pid[2]
    dtype = storage_type.dtype if isinstance(storage_type, _StorageType) else storage_type
    raw = self._archive.read("%s/data/%s" % (self._root, key))
    if dtype == "bfloat16":
      return _bf16_to_f32(raw)
    if dtype is None:
      dtype = np.uint8
    return np.frombuffer(raw, dtype)


def read_pytorch_bin(path):
  """{name: np.ndarray} from a torch.save zip file, without executing pickled code."""
  with tf.io.gfile.GFile(path, "rb") as f:
    data = f.read()
  if not zipfile.is_zipfile(io.BytesIO(data)):
    raise CheckpointError("%s: legacy (non-zip) torch format is not supported; re-save it "
                          "with a recent torch or convert it to model.safetensors" % path)
  with zipfile.ZipFile(io.BytesIO(data)) as archive:
    pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
    if len(pickles) != 1:
      raise CheckpointError("%s: expected one data.pkl in the archive" % path)
    root = pickles[0][:-len("/data.pkl")]
    state = _RestrictedUnpickler(io.BytesIO(archive.read(pickles[0])), archive, root).load()
  if not isinstance(state, dict):
    raise CheckpointError("%s: expected a state dict, got %s" % (path, type(state).__name__))
  return {k: np.asarray(v) for k, v in state.items() if isinstance(v, np.ndarray)}
