"""What checkpoints.load_checkpoint accounts for, tensor by tensor: which checkpoint entries may
be left unused, which parts of a model may be absent from a checkpoint, and what a weight it reads
must be. Names only (TF1 and HuggingFace), numpy for the values: no TensorFlow.

  may_be_unused(name)      an entry of an excepted kind (UNUSED_KINDS) that a model may leave
  part(tf1_name)           "encoder", "pooler" or a head's scope ("cls/predictions", ...)
  check_absent(...)        CheckpointError for model variables that may not stay initialised
  is_floating(dtype)       a stored dtype a weight may have (floating point)
  checked_value(...)       a tensor read, refused unless floating point and finite
  listed(names)            a few names, then "and N more"

The rules themselves are documented in docs/DESIGN.md ("Checkpoints").
"""

import re

import numpy as np
from absl import logging

from bert_keras.utils import weight_files

CheckpointError = weight_files.CheckpointError

# What a checkpoint may hold that the model does not take, by kind, besides a known head that the
# model lacks (checkpoints.is_head_name: each head declares its names in modeling). Anything
# else left over is an error: a config with fewer layers than the checkpoint, a tensor of a
# model we do not implement.
UNUSED_KINDS = (
    # optimizer slots, step counters (TF1 and TF2 names) and the dropout seed states our
    # training checkpoints keep as model_variables/other_<i>
    ("training state", re.compile(
        r"(?:^|/)(?:global_step|beta[12]_power|save_counter|step|_CHECKPOINTABLE_OBJECT_GRAPH)"
        r"(?:/\.ATTRIBUTES/VARIABLE_VALUE)?$|/(?:adam_[mv]|Adam(?:_1)?|Momentum)$"
        r"|OPTIMIZER_SLOT|^optimizer/|^other_\d+$")),
    ("HuggingFace's position_ids buffer", re.compile(r"^(?:bert\.)?embeddings\.position_ids$")))


def may_be_unused(name):
  """Whether the checkpoint entry `name` (a TF1 or HuggingFace name) is of an UNUSED_KINDS
  kind."""
  return any(pattern.search(name) for _, pattern in UNUSED_KINDS)


def listed(names, n=5):
  """The first n names joined by ", ", then "and N more"."""
  names = list(names)
  more = " and %d more" % (len(names) - n) if len(names) > n else ""
  return ", ".join(names[:n]) + more


def part(tf1):
  """The part of a model a TF1 name is in: "encoder", "pooler" or its head's scope."""
  if tf1.startswith("bert/pooler/"):
    return "pooler"
  if tf1.startswith("bert/"):
    return "encoder"
  if "/" not in tf1:  # run_classifier's root-scope output_weights / output_bias
    return "classifier"
  return "/".join(tf1.split("/")[:2])  # cls/predictions, cls/seq_relationship, cls/squad


def check_absent(absent, present, path, config, new_heads):
  """CheckpointError for the model variables `absent` from checkpoint `path` that may not stay
  at their initial values: any of the encoder; part of a head or pooler whose other variables
  are `present` (a set of parts); a whole head unless new_heads. A pooler wholly absent (HF
  question-answering and token-classification weights have none) is logged.

  Args:
    absent: {part: [(TF1 name, checkpoint name, variable)]}.
    present: set of the parts with at least one variable in the checkpoint.
    path: str, the checkpoint.
    config: the model's BertConfig (named in the message).
    new_heads: bool.
  """
  for scope, entries in absent.items():
    names = listed("%s (model shape %s)" % (ckpt, list(variable.shape))
                   for _, ckpt, variable in entries)
    if scope == "encoder":
      raise CheckpointError(
          "%s is missing from checkpoint %s. The model was probably built from a "
          "bert_config.json that does not match the checkpoint (num_hidden_layers=%d), or this "
          "is not a BERT checkpoint." % (names, path, config.num_hidden_layers))
    if scope in present:
      raise CheckpointError("%s is missing from checkpoint %s, which holds the rest of the %s"
                            % (names, path, scope))
    if scope == "pooler":
      logging.warning("%s has no pooler: it keeps its initial values (pooled_output is then not"
                      " the checkpoint's)", path)
    elif not new_heads:
      raise CheckpointError("%s is missing from checkpoint %s: the model's %s head is not in it"
                            " (new_heads=True starts it from initial values)"
                            % (names, path, scope))


def is_floating(dtype):
  """Whether a stored dtype (a safetensors name such as "F32", or TensorFlow's "float32") is
  floating point."""
  return str(dtype).upper() in weight_files.FLOAT_DTYPES or str(dtype) in (
      "float16", "bfloat16", "float32", "float64")


def checked_value(path, name, value):
  """`value` (np.ndarray, tensor `name` of checkpoint `path`), or a CheckpointError if it is not
  floating point or holds a NaN or Inf (the model it was saved from diverged)."""
  if not np.issubdtype(value.dtype, np.floating):
    raise CheckpointError("%s: tensor %s is stored as %s, not floating point: refused"
                          % (path, name, value.dtype))
  bad = value.size - int(np.count_nonzero(np.isfinite(value)))
  if bad:
    raise CheckpointError("%s: tensor %s holds %d values that are not finite (NaN or Inf): the "
                          "model it was saved from diverged; refused" % (path, name, bad))
  return value
