"""Checkpoint file formats of BERT models: the TF1 name table, readers and writers.

Read top to bottom:
  1. the name tables              tf1_variable_map (our variables under the original's TF1
                                  names), hf_name (TF1 name -> HuggingFace state-dict name)
  2. load_checkpoint              TF1 checkpoints (Google's released ones, run_pretraining's),
                                  HuggingFace weights and our TF2 object checkpoints; LoadResult,
                                  CheckpointError
  3. save_tf1_checkpoint          writes the original's TF1 names, readable by the original code
  4. HuggingFace weight files     read_safetensors, read_pytorch_bin (no pickled code runs)
  5. checkpoint directories       load_model (a directory -> a ready model, its vocab and
                                  casing), save_pretrained (a model -> Google's layout)

Every function takes a modeling.BertModel or a model holding one as `bert` (BertPretrainer,
BertClassifier, BertSquad); the models themselves live in modeling.py.

  model = modeling.BertModel(modeling.BertConfig.from_json_file("bert_config.json"))
  checkpoints.load_checkpoint(model, "uncased_L-12_H-768_A-12/bert_model.ckpt")
  checkpoints.save_tf1_checkpoint(model, "/tmp/exported/bert_model.ckpt")

  encoder = checkpoints.load_model("uncased_L-12_H-768_A-12")   # or HF's, or a run_* output_dir
  checkpoints.save_pretrained(modeling.BertClassifier(encoder, 2), "/tmp/mine")
"""

from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
import collections
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

from bert_keras import modeling
from bert_keras import preprocessing
from bert_keras.utils import file_io


# ----------------------------------------------------------------------------------------------
# 1. Name tables
# ----------------------------------------------------------------------------------------------

def _encoder_of(model):
  if isinstance(model, modeling.BertModel):
    return model
  bert = getattr(model, "bert", None)
  if isinstance(bert, modeling.BertModel):
    return bert
  raise TypeError("expected a BertModel or a model with a `bert` BertModel attribute, got %s"
                  % type(model).__name__)


def tf1_variable_map(model):
  """{TF1 checkpoint name: keras variable}, the one name table.

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


# ----------------------------------------------------------------------------------------------
# 2. Loading
# ----------------------------------------------------------------------------------------------

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
      `model.ckpt-N`; gs:// works), or the directory holding it: the names of tf1_variable_map;
      global_step, adam_m/adam_v and heads the model lacks are ignored (LoadResult.unused);
    * a HuggingFace directory with config.json and model.safetensors or pytorch_model.bin
      (read without unpickling arbitrary objects), or such a file itself; HF names, [out, in]
      Linear weights, with or without the "bert." prefix;
    * a TF2 object-based checkpoint written by our training: training_checkpoints.make_checkpoint's
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
    result = _assign_from_hf(model, resolved)
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


def checkpoint_shapes(path):
  """{checkpoint name: shape tuple} of the checkpoint at `path` (anything load_checkpoint
  reads), from its index or header alone: no tensor is read. CheckpointError if `path` is not
  a checkpoint."""
  kind, resolved = _resolve_checkpoint(os.fspath(path))
  if kind == "tf":
    try:
      shapes = tf.train.load_checkpoint(resolved).get_variable_to_shape_map()
    except tf.errors.OpError as e:
      raise CheckpointError("%s: unreadable checkpoint: %s"
                            % (resolved, " ".join(str(e.message).split())[:200])) from None
    return {k: tuple(v) for k, v in shapes.items()}
  if resolved.endswith(".safetensors"):
    return _safetensors_shapes(resolved)
  return _read_pytorch_state(resolved, read_storages=False)


_CONFIG_SHAPES = (  # (config field, key pattern, axis of the field in that variable's shape)
    ("vocab_size", r"embeddings/word_embeddings(?:/weight)?$", 0),
    ("hidden_size", r"embeddings/word_embeddings(?:/weight)?$", 1),
    ("max_position_embeddings", r"embeddings/position_embeddings(?:/weight)?$", 0),
    ("type_vocab_size", r"embeddings/token_type_embeddings(?:/weight)?$", 0),
    ("intermediate_size", r"layer[_/]0/intermediate/dense/kernel$", 1),
    ("intermediate_size", r"layer[_/]0/intermediate/dense/weight$", 0))


def config_sizes(shapes):
  """{BertConfig field: size} that a checkpoint's {name: shape} implies (any of our formats:
  TF1, HuggingFace, our TF2 checkpoints), with "num_hidden_layers" the number of encoder
  layers; a field is absent where its variable is not found. Optimizer slots are ignored."""
  normal = {}
  for key, shape in shapes.items():
    normal.setdefault(_normal_name(key), shape)
  sizes = {}
  for field, pattern, axis in _CONFIG_SHAPES:
    for name, shape in normal.items():
      if field not in sizes and re.search(r"(?:^|/)" + pattern, name) and len(shape) == 2:
        sizes[field] = int(shape[axis])
  layers = {int(m.group(1)) for m in (re.search(r"(?:^|/)encoder/layer[_/](\d+)/", name)
                                      for name in normal) if m}
  if layers:
    sizes["num_hidden_layers"] = max(layers) + 1
  return sizes


def _normal_name(key):
  """A checkpoint key in one spelling for every format: "/" between scopes, no TF2 suffix
  (model_variables/cls.Ssquad.Soutput_bias/.ATTRIBUTES/VARIABLE_VALUE ->
  model_variables/cls/squad/output_bias; HuggingFace's qa_outputs.weight -> qa_outputs/weight)."""
  return key.replace("/.ATTRIBUTES/VARIABLE_VALUE", "").replace(".S", "/").replace(".", "/")


def checkpoint_task(path):
  """The task model whose head a checkpoint holds, from its names: "squad" (run_squad's
  cls/squad, HuggingFace's qa_outputs), "classifier" (run_classifier's root-scope
  output_weights, HuggingFace's classifier), "tagger" (the same head names, in a directory
  with run_ner's labels.txt, or a HuggingFace config.json of BertForTokenClassification; a
  run_* output_dir's task.json decides first),
  "pretrainer" (the MLM head cls/predictions) or "encoder" (none of these)."""
  task = _task_of_names([_normal_name(key) for key in checkpoint_shapes(path)])
  if task == "classifier":
    directory = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
    architectures = []
    if tf.io.gfile.exists(os.path.join(directory, "config.json")):
      with tf.io.gfile.GFile(os.path.join(directory, "config.json")) as f:
        try:
          architectures = json.loads(f.read()).get("architectures") or []
        except (ValueError, AttributeError):
          architectures = []
    described = _model_dir_task(directory)  # a run_* output_dir's task.json says which
    if described is not None:
      return "tagger" if described == "tagger" else "classifier"
    if "BertForTokenClassification" in architectures or read_labels(directory) is not None:
      return "tagger"
  return task


def _model_dir_task(directory):
  """The "task" of a run_* script's task.json in `directory` (runtime/model_dir.py), or None
  (none there, or unreadable)."""
  path = os.path.join(directory, "task.json")
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    try:
      return json.loads(f.read()).get("task")
    except (ValueError, AttributeError):
      return None


def _task_of_names(names):
  """The task whose head the normalized checkpoint names hold (checkpoint_task's rules)."""

  def has(pattern):
    return any(re.search(pattern, name) for name in names)

  if has(r"(?:^|/)cls/squad/output_weights$|^qa_outputs/weight$"):
    return "squad"
  if has(r"^(?:model_variables/)?output_weights$|^classifier/weight$"):
    return "classifier"
  if has(r"(?:^|/)cls/predictions/"):
    return "pretrainer"
  return "encoder"


def check_config_matches(config, checkpoint):
  """CheckpointError (one line) when the BertConfig `config` cannot load `checkpoint` (a path,
  or its checkpoint_shapes), found from the checkpoint's shapes before any model is built: a
  vocab, hidden, intermediate, position or token-type size that differs, or more layers than
  it holds (fewer load: the first ones)."""
  shapes = checkpoint if isinstance(checkpoint, dict) else checkpoint_shapes(checkpoint)
  sizes = config_sizes(shapes)
  wrong = []
  for field, size in sizes.items():
    value = getattr(config, field, None)
    if field == "num_hidden_layers" and value is not None and value <= size:
      continue
    if value != size:
      wrong.append("%s %s in the config, %d in the checkpoint" % (field, value, size))
  if wrong:
    raise CheckpointError("; ".join(wrong))


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
    try:
      value = np.asarray(values[ckpt]())
    except (IndexError, tf.errors.OpError) as e:  # a .data file cut short or damaged
      message = " ".join(str(getattr(e, "message", e)).split())[:300]
      raise CheckpointError("%s: tensor %s cannot be read (the checkpoint is truncated or "
                            "damaged): %s" % (path, ckpt, message)) from None
    variable.assign(np.ascontiguousarray(value.T if transpose else value)
                    .astype(variable.dtype))
  result.unused = sorted(set(shapes) - used)
  return result


def _assign_from_hf(model, path):
  """Loads a HuggingFace weight file: its shapes first (header or pickle alone), checked
  against the model by _assign; then only the tensors the model takes are read."""
  file_shapes = checkpoint_shapes(path)
  prefix = "bert." if any(k.startswith("bert.") for k in file_shapes) else ""
  # Older HF checkpoints name LayerNorm parameters gamma/beta.
  original = {re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight",
                     re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", k)): k
              for k in file_shapes}

  def checkpoint_name(tf1):
    name, transpose = hf_name(tf1)
    if tf1.startswith("bert/"):
      name = prefix + name[len("bert."):]
    return name, transpose

  shapes = {k: tuple(file_shapes[v]) for k, v in original.items()}
  needed = {original[name] for name in (checkpoint_name(tf1)[0]
                                        for tf1 in tf1_variable_map(model)) if name in original}
  read = {}

  def value(name):
    if not read:  # (after _assign checked every shape: the tensors it takes, at once)
      read.update(_read_hf_weights(path, needed))
    return read[original[name]]
  values = {k: (lambda k=k: value(k)) for k in shapes}
  return _assign(model, values, shapes, path, "huggingface", checkpoint_name)


def _restore_tf2(model, path, reader, shapes):
  """Loads the model variables of a TF2 object-based checkpoint (tf.train.Checkpoint).

  Two layouts are read:
    * a `model_variables` dict keyed by the TF1 names, as training_checkpoints.make_checkpoint
      writes
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
    children = obj._trackable_children(save_type="checkpoint")
    for name, child in children.items():
      if id(child) in seen:
        continue
      seen.add(id(child))
      if isinstance(child, (keras.Variable, tf.Variable)):
        keys[path + name + "/.ATTRIBUTES/VARIABLE_VALUE"] = child
      else:
        queue.append((child, path + name + "/"))
  return keys


# ----------------------------------------------------------------------------------------------
# 3. Saving
# ----------------------------------------------------------------------------------------------

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
  tmp = file_io.temp_name(prefix)  # .<name>.tmp-<pid>: a dead run's is removed by the next
  tf.raw_ops.SaveV2(prefix=tmp, tensor_names=list(names),
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.cast(v.value, tf.float32) for v in names.values()])
  for suffix in (".data-00000-of-00001", ".index"):
    tf.io.gfile.rename(tmp + suffix, prefix + suffix, overwrite=True)
  return list(names)


# ----------------------------------------------------------------------------------------------
# 4. HuggingFace weight files
# ----------------------------------------------------------------------------------------------

_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
                       "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
                       "U8": np.uint8, "BOOL": np.bool_}


def _read_hf_weights(path, names=None):
  if path.endswith(".safetensors"):
    return read_safetensors(path, names)
  return read_pytorch_bin(path, names)


def _bf16_to_f32(raw):
  return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)


_MAX_HEADER_BYTES = 100 << 20  # the safetensors format's own limit on the JSON header


def read_safetensors(path, names=None):
  """{name: np.ndarray} from a .safetensors file (8-byte header length, JSON header, data).

  The header is read first (at most the format's 100 MB) and checked before any tensor data
  is read: every tensor's byte range lies inside the file's data and holds exactly its
  shape's elements of its dtype; CheckpointError otherwise. Then only the data bytes the
  declared tensors span are read. names: only these tensors (None: all).
  """
  with tf.io.gfile.GFile(path, "rb") as f:
    header = _safetensors_header(path, f)
    body_size = tf.io.gfile.stat(path).length - 8 - header["__length__"]
    entries = {name: info for name, info in header.items()
               if name not in _HEADER_KEYS and (names is None or name in names)}
    spans = [_safetensors_span(path, name, info, body_size) for name, info in entries.items()]
    end = max((stop for _, stop in spans), default=0)
    data = f.read(end)
  if len(data) != end:
    raise CheckpointError("%s: the file ends before its tensors' data (%d of %d bytes)"
                          % (path, len(data), end))
  body = memoryview(data)
  return {name: _safetensors_array(path, name, info, body) for name, info in entries.items()}


_HEADER_KEYS = ("__metadata__", "__length__")


def _safetensors_header(path, f):
  """The JSON header of an open .safetensors file (with "__length__": its byte length); the
  file is left at the start of the data."""
  head = f.read(8)
  if len(head) < 8:
    raise CheckpointError("%s: not a safetensors file (%d bytes)" % (path, len(head)))
  (header_len,) = struct.unpack("<Q", head)
  if header_len > _MAX_HEADER_BYTES:
    raise CheckpointError("%s: header length %d exceeds the file or the format's limit of "
                          "%d bytes" % (path, header_len, _MAX_HEADER_BYTES))
  raw = f.read(header_len)
  if len(raw) != header_len:
    raise CheckpointError("%s: header length %d exceeds the file" % (path, header_len))
  try:
    header = json.loads(raw)
  except ValueError as e:
    raise CheckpointError("%s: unreadable safetensors header: %s"
                          % (path, str(e)[:200])) from None
  if not isinstance(header, dict):
    raise CheckpointError("%s: the safetensors header is not a JSON object" % path)
  header["__length__"] = header_len
  return header


def _safetensors_shapes(path):
  """{name: shape} from a .safetensors file's header alone."""
  with tf.io.gfile.GFile(path, "rb") as f:
    header = _safetensors_header(path, f)
  shapes = {}
  for name, info in header.items():
    shape = info.get("shape") if isinstance(info, dict) else None
    if name not in _HEADER_KEYS and isinstance(shape, list) and all(map(_is_count, shape)):
      shapes[name] = tuple(shape)
  return shapes


def _safetensors_span(path, name, info, body_size):
  """(start, stop) of a header entry's data, checked against its dtype and shape and the
  file's `body_size` data bytes."""
  def bad(what):
    return CheckpointError("%s: tensor %s: %s" % (path, name, what))
  if not isinstance(info, dict):
    raise bad("its header entry is not an object")
  dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
  if dtype != "BF16" and dtype not in _SAFETENSORS_DTYPES:
    raise bad("unsupported dtype %r" % (dtype,))
  if not (isinstance(shape, list) and all(_is_count(d) for d in shape)):
    raise bad("shape %r is not a list of non-negative integers" % (shape,))
  if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))
          and offsets[0] <= offsets[1] <= body_size):
    raise bad("data_offsets %r are not a range inside the file's %d data bytes"
              % (offsets, body_size))
  itemsize = 2 if dtype == "BF16" else np.dtype(_SAFETENSORS_DTYPES[dtype]).itemsize
  if offsets[1] - offsets[0] != math.prod(shape) * itemsize:
    raise bad("shape %s of %s needs %d bytes, its data_offsets span %d"
              % (shape, dtype, math.prod(shape) * itemsize, offsets[1] - offsets[0]))
  return offsets[0], offsets[1]


def _safetensors_array(path, name, info, body):
  """The array of a header entry that _safetensors_span checked."""
  dtype, shape = info["dtype"], info["shape"]
  start, stop = info["data_offsets"]
  raw = body[start:stop]
  if dtype == "BF16":
    return _bf16_to_f32(raw).reshape(shape)
  return np.frombuffer(raw, _SAFETENSORS_DTYPES[dtype]).reshape(shape)


def _is_count(value):
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


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


class _TensorSpec(collections.namedtuple("_TensorSpec", "storage offset size stride")):
  """What torch._utils._rebuild_tensor_v2 receives: made into an array only after unpickling,
  when its name is known and its extent has been checked against its storage."""


def _rebuild_tensor(storage, offset, size, stride, *unused):
  return _TensorSpec(storage, offset, size, stride)


def _rebuild_parameter(data, *unused):
  return data


def _spec_extent(path, name, spec):
  """The number of elements of its storage that the _TensorSpec `spec` reads (0 for an empty
  tensor); CheckpointError naming the tensor if its offset, sizes or strides are not
  integers of a view inside its storage's declared length (a crafted file could otherwise read
  process memory past the storage, or allocate without limit)."""
  def bad(what):
    return CheckpointError("%s: tensor %s: %s" % (path, name, what))
  storage, offset = spec.storage, spec.offset
  size, stride = tuple(spec.size or ()), tuple(spec.stride or ())
  if not isinstance(storage, _StorageRef):
    raise bad("its storage is not a storage of the archive")
  if not (_is_count(offset) and all(map(_is_count, size)) and all(map(_is_count, stride))):
    raise bad("offset %r, size %r, stride %r are not non-negative integers"
              % (spec.offset, spec.size, spec.stride))
  if len(size) != len(stride):
    raise bad("size %s and stride %s differ in rank" % (size, stride))
  count = math.prod(size)
  if count == 0:
    return 0
  last = offset + sum((n - 1) * step for n, step in zip(size, stride))
  if last >= storage.length or count > storage.length:
    raise bad("size %s with stride %s at offset %d needs elements past its storage of %d"
              % (size, stride, offset, storage.length))
  return last + 1


def _tensor_from_spec(spec):
  """The array of a _TensorSpec whose extent _spec_extent checked and whose storage is read."""
  size, stride = tuple(spec.size or ()), tuple(spec.stride or ())
  array = spec.storage.array
  if math.prod(size) == 0:
    return np.zeros(size, array.dtype)
  return np.lib.stride_tricks.as_strided(
      array[spec.offset:], shape=size,
      strides=tuple(n * array.itemsize for n in stride)).copy()


class _StorageRef(object):
  """A storage of the archive, not yet read: its member, element type and declared length."""

  def __init__(self, key, dtype, info):
    self.key, self.dtype, self.info = key, dtype, info
    self.itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype or np.uint8).itemsize
    self.length = info.file_size // self.itemsize
    self.array = None

  def read(self, archive, path, elements):
    """Reads (inflates) only the first `elements` elements of the member: the most the
    tensors over it use, so what is inflated is bounded by the declared tensors."""
    raw = read_archive_member(archive, self.info, elements * self.itemsize, path)
    if self.dtype == "bfloat16":
      self.array = _bf16_to_f32(raw)
    else:
      self.array = np.frombuffer(raw, self.dtype or np.uint8)


def read_archive_member(archive, info, limit, path):
  """At most `limit` bytes of zip member `info`, its declared size checked before anything is
  inflated (zipfile then inflates no more than it declares, and we read no more than `limit`);
  reading less than the whole member reads only its first `limit` bytes. CheckpointError when
  the member is shorter than `limit` bytes would need."""
  want = min(limit, info.file_size)
  with archive.open(info) as f:
    raw = f.read(want)
  if len(raw) != want:
    raise CheckpointError("%s: archive member %s holds %d bytes, it declares %d"
                          % (path, info.filename, len(raw), info.file_size))
  return raw


class _StorageType(object):
  def __init__(self, dtype):
    self.dtype = dtype


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
  """A pytorch_model.bin that asks for something other than tensors, or whose storages are
  not what they claim."""


class _RestrictedUnpickler(pickle.Unpickler):
  """Unpickles a torch state dict into _TensorSpecs over NumPy storages, refusing every other
  global."""

  def __init__(self, file, archive, root, path):
    super().__init__(file)
    self._archive, self._root, self._path = archive, root, path
    self._storages = {}

  def _refuse(self, what):
    return UnsafeCheckpointError("%s: %s" % (self._path, what))

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
    raise self._refuse("refusing to load %s.%s from a pytorch_model.bin (only tensors are "
                       "allowed)" % (module, name))

  def persistent_load(self, pid):
    # ("storage", storage type, key, location, numel)
    if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
      raise self._refuse("unexpected persistent id %r" % (pid,))
    storage_type, key = pid[1], pid[2]
    dtype = storage_type.dtype if isinstance(storage_type, _StorageType) else storage_type
    if dtype not in _TORCH_STORAGES.values() and dtype is not None:
      raise self._refuse("storage %r has an unknown type" % (key,))
    try:
      info = self._archive.getinfo("%s/data/%s" % (self._root, key))
    except (KeyError, TypeError):
      raise self._refuse("storage %r is not in the archive" % (key,)) from None
    if info.file_size > 64 * info.compress_size + (1 << 20):
      raise self._refuse("storage %r expands %d bytes to %d: refused"
                         % (key, info.compress_size, info.file_size))
    if key not in self._storages:
      storage = _StorageRef(key, dtype, info)
      if info.file_size % storage.itemsize:
        raise self._refuse("storage %r: %d bytes is not a whole number of %d-byte elements"
                           % (key, info.file_size, storage.itemsize))
      self._storages[key] = storage
    return self._storages[key]


def read_pytorch_bin(path, names=None):
  """{name: np.ndarray} from a torch.save zip file, without executing pickled code. Every
  archive member is read with a limit set before it is inflated: the pickle at most
  MAX_PICKLE_BYTES, a storage only the elements its tensors' declared shapes use. names:
  only these tensors (None: all; the others' storages are not read)."""
  return _read_pytorch_state(path, names=names)


def _read_pytorch_state(path, read_storages=True, names=None):
  """read_storages: {name: np.ndarray} of a torch.save zip file; without, {name: shape
  tuple} from its pickle alone (no storage is read)."""
  with file_io.open_read(path) as f:
    try:
      return _unpickle_state(path, f, read_storages, names)
    except zipfile.BadZipFile:
      raise CheckpointError("%s: legacy (non-zip) torch format is not supported; re-save it "
                            "with a recent torch or convert it to model.safetensors"
                            % path) from None


MAX_PICKLE_BYTES = 64 << 20  # a BERT state dict's pickle is a few hundred KB


def _unpickle_state(path, file, read_storages, names=None):
  try:
    is_zip = zipfile.is_zipfile(file)
  except Exception:  # a remote file shorter than the zip trailer it seeks to
    is_zip = False
  if not is_zip:
    raise zipfile.BadZipFile(path)
  try:
    with zipfile.ZipFile(file) as archive:
      pickles = [info for info in archive.infolist() if info.filename.endswith("/data.pkl")]
      if len(pickles) != 1:
        raise CheckpointError("%s: expected one data.pkl in the archive" % path)
      if pickles[0].file_size > MAX_PICKLE_BYTES:
        raise UnsafeCheckpointError(
            "%s: its pickle %s declares %d bytes (%d compressed), more than a state dict's "
            "limit of %d: refused" % (path, pickles[0].filename, pickles[0].file_size,
                                      pickles[0].compress_size, MAX_PICKLE_BYTES))
      root = pickles[0].filename[:-len("/data.pkl")]
      raw = read_archive_member(archive, pickles[0], MAX_PICKLE_BYTES, path)
      state = _RestrictedUnpickler(io.BytesIO(raw), archive, root, path).load()
      if not isinstance(state, dict):
        raise CheckpointError("%s: expected a state dict, got %s"
                              % (path, type(state).__name__))
      specs = {name: spec for name, spec in state.items() if isinstance(spec, _TensorSpec)}
      if not read_storages:
        return {name: tuple(spec.size or ()) for name, spec in specs.items()}
      if names is not None:
        specs = {name: spec for name, spec in specs.items() if name in names}
      need = {}
      for name, spec in specs.items():
        extent = _spec_extent(path, name, spec)
        need[id(spec.storage)] = max(need.get(id(spec.storage), 0), extent)
      for spec in specs.values():
        if spec.storage.array is None:
          spec.storage.read(archive, path, need[id(spec.storage)])
      return {name: _tensor_from_spec(spec) for name, spec in specs.items()}
  except CheckpointError:
    raise
  except Exception as e:  # a damaged archive or pickle
    raise CheckpointError("%s: unreadable torch archive: %s: %s"
                          % (path, type(e).__name__, str(e)[:300])) from None


# ----------------------------------------------------------------------------------------------
# 5. Checkpoint directories: load_model, save_pretrained
# ----------------------------------------------------------------------------------------------

_TASKS = {"encoder": modeling.BertModel, "classifier": modeling.BertClassifier,
          "squad": modeling.BertSquad, "pretrainer": modeling.BertPretrainer,
          "embeddings": modeling.BertSentenceEncoder, "tagger": modeling.BertTokenClassifier}
_HEADED = ("classifier", "tagger")  # the tasks whose model takes num_labels
# run_ner's tag set in its output_dir: one tag a line, in the order of the model's outputs.
LABELS_FILE = "labels.txt"
# The files save_pretrained writes: what it may replace in an existing directory.
_PRETRAINED_FILES = ("bert_config.json", "bert_model.ckpt.index",
                     "bert_model.ckpt.data-00000-of-00001", "vocab.txt", "tokenizer_config.json")


def load_model(path, task="encoder", num_labels=None, bert_config_file=None, vocab_file=None,
               do_lower_case=None, text_input=False, max_seq_length=128, **model_kwargs):
  """One call from a checkpoint directory to a ready model, its weights loaded.

  path: Google's TF1 directory (bert_config.json, bert_model.ckpt.*, vocab.txt), a
  HuggingFace directory (config.json, model.safetensors or pytorch_model.bin, vocab.txt), one
  of our run_* output directories (its newest model.ckpt-N; pass bert_config_file unless a
  bert_config.json lies beside it), what save_pretrained writes, or a checkpoint prefix/file
  (its config is looked for in its directory).
  task: "encoder" (modeling.BertModel), "classifier" (BertClassifier; num_labels defaults to
  the rows of the checkpoint's classifier head), "tagger" (BertTokenClassifier; a run_ner
  output_dir's labels.txt gives its tags, else num_labels as for "classifier"), "squad"
  (BertSquad), "pretrainer" (BertPretrainer) or "embeddings" (BertSentenceEncoder: pass
  pooling="mean"|"cls"|"max" and normalize); heads absent from the checkpoint keep their
  initial values.
  model_kwargs go to the model's constructor (dtype, name, output_hidden_states of a
  BertModel). The returned model also carries:
    model.vocab_file      vocab_file, else the directory's vocab.txt, else None
    model.do_lower_case   do_lower_case, else tokenizer_config.json's "do_lower_case", else
                          True unless the vocabulary has upper-case words; None without one
    model.load_result     load_checkpoint's LoadResult
    model.labels          (tasks "classifier", "tagger") the label of each output, from
                          labels.txt in the directory (or, for an output_dir/best, its
                          parent); else None (e.g. a regression)
  Given a model directory (a run_* output_dir or its best/, with task.json), a
  bert_config_file, vocab_file or do_lower_case that disagrees with its own files is a
  ValueError naming both.
  text_input=True: a compiled preprocessing.TextModel over text instead (BertPreprocessor of
  the vocab and do_lower_case above with max_seq_length; the original's optimizer at 2e-5 and
  the task's loss: preprocessing.text_model), the same attributes set on it; not for
  "pretrainer".
  Problems (no checkpoint or config, unknown task, a config that does not fit the
  checkpoint's shapes: check_config_matches) are ValueErrors naming the file, raised before
  the model is built (a wrong config must not first allocate gigabytes).
  """
  path = os.fspath(path)
  if task not in _TASKS:
    raise ValueError("task must be one of %s, got %r" % (", ".join(_TASKS), task))
  if text_input and task not in preprocessing.TEXT_TASKS:
    raise ValueError("text_input=True takes task %s, not %r" % (
        ", ".join(preprocessing.TEXT_TASKS), task))
  kind, resolved = _resolve_checkpoint(path)
  directory = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
  config_file = bert_config_file or _config_file_in(directory, path)
  config = modeling.BertConfig.from_json_file(config_file)
  shapes = checkpoint_shapes(resolved)  # headers and pickles only: no tensor is read
  try:
    check_config_matches(config, shapes)
  except CheckpointError as e:
    raise CheckpointError("%s does not fit the checkpoint %s: %s"
                          % (config_file, resolved, e)) from None
  _check_model_dir(directory, bert_config_file, config, vocab_file, do_lower_case)
  labels = read_labels(directory) if task in _HEADED else None
  if labels is not None:
    if num_labels is not None and num_labels != len(labels):
      raise ValueError("num_labels=%d, but %s lists %d labels" % (
          num_labels, os.path.join(directory, LABELS_FILE), len(labels)))
    num_labels = len(labels)
  if task in _HEADED and num_labels is None:
    num_labels = _classifier_rows(shapes, resolved)
  model = (_TASKS[task](config, num_labels, **model_kwargs) if task in _HEADED
           else _TASKS[task](config, **model_kwargs))
  result = load_checkpoint(model, resolved)
  if task in _HEADED:
    model.labels = labels
  if vocab_file is None and tf.io.gfile.exists(os.path.join(directory, "vocab.txt")):
    vocab_file = os.path.join(directory, "vocab.txt")
  if do_lower_case is None:
    do_lower_case = _do_lower_case_of(directory, vocab_file)
  model.vocab_file, model.do_lower_case, model.load_result = vocab_file, do_lower_case, result
  if text_input:
    if vocab_file is None or do_lower_case is None:
      raise ValueError("%s: text_input=True needs a vocab.txt there (or vocab_file) and "
                       "do_lower_case" % path)
    text = preprocessing.text_model(model, task, vocab_file, do_lower_case, max_seq_length)
    text.vocab_file, text.do_lower_case, text.load_result = vocab_file, do_lower_case, result
    text.labels = labels
    return text
  return model


def _check_model_dir(directory, bert_config_file, config, vocab_file, do_lower_case):
  """load_model's arguments against a model directory's own files (only where `directory`
  holds a run_* script's task.json): a ValueError naming the argument and the file."""
  if not tf.io.gfile.exists(os.path.join(directory, "task.json")):
    return
  own = os.path.join(directory, "bert_config.json")
  if bert_config_file and tf.io.gfile.exists(own) and (
      modeling.BertConfig.from_json_file(own).to_dict() != config.to_dict()):
    raise ValueError("bert_config_file=%s conflicts with the model directory's %s"
                     % (bert_config_file, own))
  own = os.path.join(directory, "vocab.txt")
  if vocab_file and tf.io.gfile.exists(own):
    with tf.io.gfile.GFile(own) as a, tf.io.gfile.GFile(vocab_file) as b:
      if a.read().split() != b.read().split():
        raise ValueError("vocab_file=%s conflicts with the model directory's %s"
                         % (vocab_file, own))
  lower = _do_lower_case_of(directory, None)
  if do_lower_case is not None and lower is not None and bool(do_lower_case) != lower:
    raise ValueError("do_lower_case=%s conflicts with the model directory %s (trained with "
                     "do_lower_case=%s)" % (do_lower_case, directory, lower))


def read_labels(directory):
  """The tags of labels.txt (one a line) in `directory`, or in its parent when `directory` is
  a run_ner output_dir's best/; None without one. An empty or repeated tag is a ValueError."""
  for where in (directory, os.path.dirname(directory.rstrip("/"))
                if os.path.basename(directory.rstrip("/")) == "best" else None):
    path = where is not None and os.path.join(where, LABELS_FILE)
    if path and tf.io.gfile.exists(path):
      with tf.io.gfile.GFile(path) as f:
        labels = [line.strip() for line in f.read().splitlines()]
      while labels and not labels[-1]:
        labels.pop()
      if not labels or "" in labels or len(set(labels)) != len(labels):
        raise ValueError("%s: expected distinct non-empty tags, one a line" % path)
      return labels
  return None


def _config_file_in(directory, path):
  for name in ("bert_config.json", "config.json"):
    candidate = os.path.join(directory, name)
    if tf.io.gfile.exists(candidate):
      return candidate
  raise ValueError("%s: no bert_config.json or config.json beside the checkpoint; pass "
                   "bert_config_file" % path)


def _classifier_rows(shapes, resolved):
  """num_labels of the checkpoint's classifier head (output_weights [num_labels, H]), from its
  checkpoint_shapes."""
  names = ("classifier.weight", "output_weights",
           "model_variables/output_weights/.ATTRIBUTES/VARIABLE_VALUE")
  for name in names:
    if name in shapes and len(shapes[name]) == 2:
      return int(shapes[name][0])
  raise ValueError("%s: no classifier head (output_weights) in the checkpoint: pass "
                   "num_labels" % resolved)


def _do_lower_case_of(directory, vocab_file):
  """tokenizer_config.json's do_lower_case, else what the vocabulary suggests (a cased
  vocabulary has upper-case words besides the [CLS]-style special tokens), else None."""
  tokenizer_config = os.path.join(directory, "tokenizer_config.json")
  if tf.io.gfile.exists(tokenizer_config):
    with tf.io.gfile.GFile(tokenizer_config) as f:
      try:
        value = json.loads(f.read()).get("do_lower_case")
      except (ValueError, AttributeError):
        value = None
    if isinstance(value, bool):
      return value
  if vocab_file is None:
    return None
  with tf.io.gfile.GFile(vocab_file) as f:
    words = [line.strip() for line in f]
  return not any(w != w.lower() for w in words if not (w.startswith("[") and w.endswith("]")))


def save_pretrained(model, directory, vocab_file=None, do_lower_case=None):
  """Writes `model` (a BertModel or a task model holding one) as a checkpoint directory in
  Google's layout: bert_config.json, bert_model.ckpt.{index,data-00000-of-00001} (the
  original TF1 names, heads included: save_tf1_checkpoint), vocab.txt (a copy of vocab_file,
  default model.vocab_file as load_model sets it) and tokenizer_config.json
  ({"do_lower_case": ...}, default model.do_lower_case, left out when unknown); for a task
  model built around a loaded encoder, the encoder's. load_model reads it back; the original
  code reads bert_config.json and bert_model.ckpt (if hidden_act is one it knows: not
  HuggingFace's erf "gelu_exact").

  Atomic: written into a temporary sibling directory, then renamed to `directory`. An
  existing `directory` is replaced only when it holds nothing but these files (a previous
  save_pretrained); otherwise ValueError. Returns `directory`."""
  directory = os.fspath(directory).rstrip("/") or "/"
  vocab_file = vocab_file or _loaded_attribute(model, "vocab_file")
  if do_lower_case is None:
    do_lower_case = _loaded_attribute(model, "do_lower_case")
  if not vocab_file:
    raise ValueError("save_pretrained: vocab_file is needed (the model was not loaded with one)")
  if not tf.io.gfile.exists(vocab_file):
    raise ValueError("%s: no such vocab file" % vocab_file)
  gfile = tf.io.gfile
  _check_replaceable(directory, _PRETRAINED_FILES)
  config = {k: v for k, v in _encoder_of(model).config.to_dict().items()
            if k not in ("model_type", "architectures")}   # read back as our format
  tmp = file_io.temp_name(directory.rstrip("/") or directory)  # (.<name>.tmp-<pid>)
  try:
    gfile.makedirs(tmp)
    with gfile.GFile(os.path.join(tmp, "bert_config.json"), "w") as f:
      f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_tf1_checkpoint(model, os.path.join(tmp, "bert_model.ckpt"))
    gfile.copy(vocab_file, os.path.join(tmp, "vocab.txt"), overwrite=True)
    if do_lower_case is not None:
      with gfile.GFile(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        f.write(json.dumps({"do_lower_case": bool(do_lower_case)}) + "\n")
    _replace_directory(tmp, directory)
  finally:
    if gfile.exists(tmp):
      gfile.rmtree(tmp)
  return directory


def _loaded_attribute(model, name):
  """What load_model set on `model`, or on its encoder (a task model built around it)."""
  value = getattr(model, name, None)
  return getattr(_encoder_of(model), name, None) if value is None else value


def _replace_directory(new, directory):
  """Renames `new` to `directory`; an existing `directory` is moved aside first and deleted
  after."""
  gfile = tf.io.gfile
  if not gfile.exists(directory):
    parent = os.path.dirname(directory)
    if parent:
      gfile.makedirs(parent)
    gfile.rename(new, directory)
    return
  old = file_io.temp_name((directory.rstrip("/") or directory) + ".old")
  gfile.rename(directory, old)
  try:
    gfile.rename(new, directory)
  except BaseException:
    gfile.rename(old, directory)
    raise
  gfile.rmtree(old)


# ----------------------------------------------------------------------------------------------
# 6. HuggingFace's layout, written
# ----------------------------------------------------------------------------------------------

# Our activation names -> HuggingFace's, so that each side computes the same function: the
# original's (and our) "gelu" is the tanh form, HuggingFace's "gelu_new"; HuggingFace's "gelu"
# is the exact erf form, our "gelu_exact".
_HF_ACTIVATION_NAMES = {"gelu": "gelu_new", "gelu_exact": "gelu", "gelu_erf": "gelu",
                        "relu": "relu", "tanh": "tanh", "silu": "silu", "swish": "silu"}
# The transformers class each of our models is, and its state dict's encoder prefix.
_HF_ARCHITECTURES = ((modeling.BertTokenClassifier, "BertForTokenClassification"),
                     (modeling.BertPretrainer, "BertForPreTraining"),
                     (modeling.BertClassifier, "BertForSequenceClassification"),
                     (modeling.BertSquad, "BertForQuestionAnswering"),
                     (modeling.BertSentenceEncoder, "BertModel"),
                     (modeling.BertModel, "BertModel"))
_HF_FILES = ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json")


def hf_architecture(model):
  """The transformers class name of `model` (BertModel, BertForPreTraining, ...)."""
  for cls, name in _HF_ARCHITECTURES:
    if isinstance(model, cls):
      return name
  raise TypeError("no HuggingFace architecture for %s" % type(model).__name__)


def hf_state_dict(model):
  """{HuggingFace state-dict name: float32 array} of `model`: tf1_variable_map's names through
  hf_name, Linear kernels transposed to [out, in]. A bare BertModel's names have no "bert."
  prefix (as transformers' BertModel saves them); the MLM decoder weight is tied to the word
  embeddings and written once, as its bias (transformers ties both on load)."""
  prefix = "" if hf_architecture(model) == "BertModel" else "bert."
  state = {}
  for tf1, variable in tf1_variable_map(model).items():
    name, transpose = hf_name(tf1)
    if tf1.startswith("bert/"):
      name = prefix + name[len("bert."):]
    value = np.asarray(variable.numpy(), np.float32)
    state[name] = np.ascontiguousarray(value.T if transpose else value)
  if "cls.predictions.bias" in state:
    state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
  return state


def hf_config(model, label_names=None):
  """transformers' config.json (a dict) of `model`: BertConfig's fields, model_type "bert",
  the architecture, layer_norm_eps, hidden_act in HuggingFace's name of the same function,
  and for a classifier id2label / label2id (label_names, default LABEL_0...)."""
  config = _encoder_of(model).config
  act = config.hidden_act
  if not isinstance(act, str) or act.lower() not in _HF_ACTIVATION_NAMES:
    raise ValueError("hidden_act %r has no HuggingFace name" % (act,))
  out = {k: v for k, v in config.to_dict().items() if k not in ("architectures", "model_type")}
  out.update(model_type="bert", architectures=[hf_architecture(model)],
             hidden_act=_HF_ACTIVATION_NAMES[act.lower()],
             layer_norm_eps=float(getattr(config, "layer_norm_eps", 1e-12)))
  head = getattr(model, "classifier", None)
  if head is not None:
    count = int(head.output_weights.shape[0])
    if label_names is None:
      label_names = getattr(model, "labels", None)  # a tagger's tags, from load_model
    names = list(label_names) if label_names is not None else ["LABEL_%d" % i
                                                               for i in range(count)]
    if len(names) != count:
      raise ValueError("%d label names for a head of %d labels" % (len(names), count))
    out["id2label"] = {str(i): str(n) for i, n in enumerate(names)}
    out["label2id"] = {str(n): i for i, n in enumerate(names)}
  return out


def write_safetensors(path, tensors):
  """Writes {name: array} (float32, int32, ...) as a .safetensors file: the little-endian
  header length, the JSON header (dtype, shape, data_offsets; padded with spaces to a multiple
  of 8 bytes), then the tensors' bytes in name order."""
  dtypes = {np.dtype(v): k for k, v in _SAFETENSORS_DTYPES.items()}
  header, offset, arrays = {}, 0, []
  for name in sorted(tensors):
    array = np.ascontiguousarray(tensors[name])
    if array.dtype not in dtypes:
      raise ValueError("%s: dtype %s has no safetensors name" % (name, array.dtype))
    header[name] = {"dtype": dtypes[array.dtype], "shape": list(array.shape),
                    "data_offsets": [offset, offset + array.nbytes]}
    offset += array.nbytes
    arrays.append(array.astype(array.dtype.newbyteorder("<"), copy=False))
  text = json.dumps(header, separators=(",", ":")).encode("utf-8")
  text += b" " * (-len(text) % 8)
  with tf.io.gfile.GFile(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for array in arrays:
      f.write(array.tobytes())


def save_huggingface(model, directory, vocab_file=None, do_lower_case=None, label_names=None):
  """Writes `model` in HuggingFace's layout, for transformers' from_pretrained and
  sentence-transformers: config.json (hf_config), model.safetensors (hf_state_dict, float32),
  vocab.txt and tokenizer_config.json (do_lower_case, the tokenizer class). vocab_file and
  do_lower_case default to what load_model set. Atomic as save_pretrained: written into a
  temporary sibling, then renamed; an existing `directory` is replaced only when it holds
  nothing but these files. Returns `directory`."""
  directory = os.fspath(directory).rstrip("/") or "/"
  vocab_file = vocab_file or _loaded_attribute(model, "vocab_file")
  if do_lower_case is None:
    do_lower_case = _loaded_attribute(model, "do_lower_case")
  if not vocab_file or not tf.io.gfile.exists(vocab_file):
    raise ValueError("save_huggingface: a vocab file is needed (%s)" % (vocab_file or "none"))
  _check_replaceable(directory, _HF_FILES)
  config = hf_config(model, label_names)
  tmp = file_io.temp_name(directory.rstrip("/") or directory)  # (.<name>.tmp-<pid>)
  gfile = tf.io.gfile
  try:
    gfile.makedirs(tmp)
    with gfile.GFile(os.path.join(tmp, "config.json"), "w") as f:
      f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    write_safetensors(os.path.join(tmp, "model.safetensors"), hf_state_dict(model))
    gfile.copy(vocab_file, os.path.join(tmp, "vocab.txt"), overwrite=True)
    tokenizer = {"tokenizer_class": "BertTokenizer"}
    if do_lower_case is not None:
      tokenizer["do_lower_case"] = bool(do_lower_case)
    with gfile.GFile(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
      f.write(json.dumps(tokenizer, indent=2, sort_keys=True) + "\n")
    _replace_directory(tmp, directory)
  finally:
    if gfile.exists(tmp):
      gfile.rmtree(tmp)
  return directory


def _check_replaceable(directory, files):
  """A ValueError unless `directory` is absent or a directory holding only `files`."""
  gfile = tf.io.gfile
  if not gfile.exists(directory):
    return
  if not gfile.isdir(directory):
    raise ValueError("%s: exists and is not a directory" % directory)
  others = sorted(set(gfile.listdir(directory)) - set(files))
  if others:
    raise ValueError("%s: exists and holds other files (%s); save into a new directory"
                     % (directory, ", ".join(others[:5])))
