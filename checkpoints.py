"""Checkpoint file formats of BERT models: the TF1 name table, readers and writers.

Read top to bottom:
  1. the name tables              tf1_variable_map (our variables under the original's TF1
                                  names), hf_name (TF1 name -> HuggingFace state-dict name)
  2. load_checkpoint              TF1 checkpoints (Google's released ones, run_pretraining's),
                                  HuggingFace weights and our TF2 object checkpoints; LoadResult,
                                  CheckpointError
  3. save_tf1_checkpoint          writes the original's TF1 names, readable by the original code
  4. checkpoint directories       load_model (a directory -> a ready model, its vocab and
                                  casing), save_pretrained (a model -> Google's layout)
HuggingFace's layout and sentence-transformers' are written by huggingface_layout.py.
The weight files themselves (safetensors, pytorch_model.bin: read_safetensors,
read_pytorch_bin, write_safetensors) are read and written by utils/weight_files.py, the files of
a model directory (labels.txt, task.json, tokenizer_config.json, ...) by model_files.py; what
loading accounts for (tensors that may go unused, parts that may be absent, float and finite
values) is checkpoint_rules.py's.

Every function takes a modeling.BertModel or a model holding one as `bert` (BertPretrainer,
BertClassifier, BertSquad); the models themselves live in modeling.py.

  model = modeling.BertModel(modeling.BertConfig.from_json_file("bert_config.json"))
  checkpoints.load_checkpoint(model, "uncased_L-12_H-768_A-12/bert_model.ckpt")
  checkpoints.save_tf1_checkpoint(model, "/tmp/exported/bert_model.ckpt")

  encoder = checkpoints.load_model("uncased_L-12_H-768_A-12")   # or HF's, or a run_* output_dir
  checkpoints.save_pretrained(modeling.BertClassifier(encoder, 2), "/tmp/mine")
"""

from bert_keras.utils import backend  # first: TensorFlow quietly, where it is Keras's backend
import collections
import dataclasses
import functools
import json
import os
import re

import keras
import numpy as np
from absl import logging

from bert_keras import checkpoint_rules
from bert_keras import model_files
from bert_keras import modeling
from bert_keras import sentence_transformers_layout
from bert_keras import task_registry
from bert_keras import tokenization
from bert_keras.utils import file_io
from bert_keras.utils import tensor_bundle
from bert_keras.utils import weight_files

# TensorFlow where it is Keras's backend, else None: on JAX and PyTorch, HuggingFace and
# safetensors files, model directories and TensorFlow's checkpoint files (utils/tensor_bundle)
# load without importing it.
tf = backend.tensorflow()
_OP_ERRORS = (tf.errors.OpError,) if tf is not None else ()


def _checkpoint_reader(prefix):
  """TensorFlow's reader of a checkpoint prefix, or on another backend our NumPy one."""
  if tf is not None or file_io.is_remote(prefix):
    return backend.require_tensorflow("reading %s" % prefix).train.load_checkpoint(prefix)
  return tensor_bundle.Reader(prefix)


def _latest_checkpoint(directory):
  """The prefix the `checkpoint` file of `directory` names (tf.train.latest_checkpoint), or
  None."""
  if tf is not None or file_io.is_remote(directory):
    return backend.require_tensorflow("reading %s" % directory).train.latest_checkpoint(
        directory)
  try:
    with open(os.path.join(directory, "checkpoint"), encoding="utf-8") as f:
      match = re.search(r'^model_checkpoint_path:\s*"(.*)"\s*$', f.read(), re.M)
  except OSError:
    return None
  if not match:
    return None
  prefix = match.group(1)
  prefix = prefix if os.path.isabs(prefix) else os.path.join(directory, prefix)
  return prefix if os.path.exists(prefix + ".index") else None


# ----------------------------------------------------------------------------------------------
# 1. Name tables
# ----------------------------------------------------------------------------------------------

def encoder_of(model):
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
  bert = encoder_of(model)
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
  for head in modeling.heads_of(model):  # each head's own names (modeling's CHECKPOINT_NAMES)
    for attribute, tf1, _ in type(head).CHECKPOINT_NAMES:
      layer = getattr(head, attribute) if attribute else None
      if isinstance(layer, modeling.Dense):
        _add_dense(names, tf1, layer)
      elif isinstance(layer, modeling.LayerNorm):
        _add_layer_norm(names, tf1, layer)
      elif layer is not None:
        names[tf1] = layer
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
  special = _head_hf_names()  # (the heads' own: [out, in] Linear weights, not transposed)
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
  checkpoint entries not used, each of an excepted kind (training state: optimizer slots,
  global_step; the known heads the model lacks; HuggingFace's position_ids buffer and tied MLM
  decoder); `missing`: variables absent from the checkpoint, left at their initial values (a
  new head, allowed by new_heads; a pooler that HuggingFace weights without one lack)."""
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


# A checkpoint does not fit the model, or cannot be read (names the variable, shapes and the
# likely cause); the weight-file readers' own classes, so that one `except` catches both.
CheckpointError = weight_files.CheckpointError
UnsafeCheckpointError = weight_files.UnsafeCheckpointError
# HuggingFace weight files (utils/weight_files.py), under the names callers know.
read_safetensors = weight_files.read_safetensors
write_safetensors = weight_files.write_safetensors
read_pytorch_bin = weight_files.read_pytorch_bin
read_archive_member = weight_files.read_archive_member
MAX_PICKLE_BYTES = weight_files.MAX_PICKLE_BYTES


def load_checkpoint(model, path, new_heads=True):
  """Loads weights into a BertModel or a model holding one (BertPretrainer, BertClassifier,
  BertSquad, ...), accounting for every tensor both ways (docs/DESIGN.md, "Checkpoints").

  Each of these is a CheckpointError naming the tensors (a few, then "and N more") and the
  likely cause, raised before any tensor is read: an encoder variable the checkpoint lacks
  (the pooler excepted when the checkpoint has none: HF question-answering and token
  classification weights; it is then in LoadResult.missing and logged); a head the checkpoint
  holds only part of, or (new_heads=False) lacks; a shape mismatch; a checkpoint tensor the
  model does not take unless it is of an excepted kind (_UNUSED_KINDS: training state, the
  known heads, HF's position_ids and tied decoder), so a config with fewer layers than the
  checkpoint is refused; a tensor the model takes that is not stored as floating point. While
  reading, a tensor with a NaN or Inf is refused, naming it. HF fine-tuned heads load too:
  BertForSequenceClassification's classifier.* into BertClassifier, BertForQuestionAnswering's
  qa_outputs.* into BertSquad.

  Args:
    model: a modeling.BertModel, or a task model with a `bert` BertModel attribute; its
      variables (tf1_variable_map: kernels [in, out], output_weights [num_labels or 2, H]) are
      assigned in place. It must be built.
    path: str or path-like, one of
      * a TF1 checkpoint prefix (Google's released `.../bert_model.ckpt`, a run_pretraining
        `model.ckpt-N`; gs:// works), or the directory holding it: the names of
        tf1_variable_map; global_step, adam_m/adam_v and heads the model lacks are ignored
        (LoadResult.unused);
      * a HuggingFace directory with config.json and model.safetensors or pytorch_model.bin
        (read without unpickling arbitrary objects), or such a file itself; HF names,
        [out, in] Linear weights, with or without the "bert." prefix;
      * a TF2 object-based checkpoint written by our training:
        training_checkpoints.make_checkpoint's `model_variables` (TF1 names), or plainly
        `tf.train.Checkpoint(model=model, optimizer=..., step=...).save(...)`; only the model
        variables are read (optimizer slots and step are reported unused). A BertModel can
        load from a BertPretrainer checkpoint and the other way around (heads then stay
        initialised).
    new_heads: bool; True (a warm start: a fine-tuning head starts from its initial values)
      lets a head that is wholly absent from the checkpoint keep its initial values (listed in
      LoadResult.missing); False refuses it.

  Returns:
    A LoadResult: the checkpoint's path and format ("tf1", "huggingface" or "tf2") and lists
    of names (str): `loaded` (our TF1 names that got values), `unused` (checkpoint entries
    not used, of the excepted kinds), `missing` (variables absent from the checkpoint, left
    initialised: new heads, a pooler HF weights lack).
  """
  path = os.fspath(path)
  kind, resolved = _resolve_checkpoint(path)
  if kind == "huggingface":
    result = _assign_from_hf(model, resolved, new_heads)
  else:
    reader = _checkpoint_reader(resolved)
    shapes = reader.get_variable_to_shape_map()
    source = _Source(resolved, "tf1", {k: tuple(v) for k, v in shapes.items()},
                     {k: v.name for k, v in reader.get_variable_to_dtype_map().items()},
                     lambda name: reader.get_tensor(name), may_be_unused)
    if "_CHECKPOINTABLE_OBJECT_GRAPH" in shapes:
      result = _restore_tf2(model, source, new_heads)
    else:
      result = _assign(model, source, lambda name: (name, False), new_heads)
  logging.info("%s", result)
  return result


def _resolve_checkpoint(path):
  """-> ("huggingface", file) or ("tf", checkpoint prefix). A sentence-transformers directory
  resolves to its Transformer module's weights.

  A directory holds one source of weights: HuggingFace's (model.safetensors, else
  pytorch_model.bin: the same weights in two formats, as transformers reads them) or a
  TensorFlow checkpoint (bert_model.ckpt, else the newest one its `checkpoint` file names, else
  its only *.index). A directory holding both kinds is a CheckpointError naming both files:
  which one is meant cannot be told (a stray model.safetensors beside a run's checkpoint)."""
  gfile = file_io.gfile
  path = sentence_transformers_layout.transformer_dir(path)
  if gfile.isdir(path):
    hf = [os.path.join(path, name) for name in ("model.safetensors", "pytorch_model.bin")
          if gfile.exists(os.path.join(path, name))]
    indexes = gfile.glob(os.path.join(path, "*.index"))
    prefix = None
    if gfile.exists(os.path.join(path, "bert_model.ckpt.index")):
      prefix = os.path.join(path, "bert_model.ckpt")
    else:
      prefix = _latest_checkpoint(path)
      if not prefix and len(indexes) == 1:
        prefix = indexes[0][:-len(".index")]
    if hf and (prefix or indexes):
      raise CheckpointError(
          "%s holds two sources of weights, %s and the TensorFlow checkpoint %s: give the one "
          "to load (its file or checkpoint prefix) or remove the other"
          % (path, hf[0], prefix + ".index" if prefix else indexes[0]))
    if hf:
      return "huggingface", hf[0]
    if prefix:
      return "tf", prefix
    raise CheckpointError(
        "%s: no checkpoint found (expected bert_model.ckpt.index, a `checkpoint` file, "
        "model.safetensors or pytorch_model.bin)%s" % (
            path, "; several *.index files, give the prefix" if indexes else ""))
  if is_weight_file(path):
    return "huggingface", path
  if path.endswith(".index"):
    path = path[:-len(".index")]
  if not gfile.exists(path + ".index"):
    raise CheckpointError("%s: not a checkpoint (no %s.index)" % (path, path))
  return "tf", path


def is_weight_file(path):
  """Whether `path` is a HuggingFace weight file (model.safetensors, pytorch_model.bin, any
  *.safetensors or *.bin file): accepted wherever a HuggingFace directory is, its directory
  supplying config.json, vocab.txt and the other model files."""
  path = os.fspath(path)
  return (path.endswith((".safetensors", ".bin")) and file_io.gfile.exists(path)
          and not file_io.gfile.isdir(path))


def checkpoint_source(path):
  """What load_checkpoint reads at `path`: ("huggingface", weight file) or ("tf", checkpoint
  prefix); a CheckpointError for no checkpoint, or a directory holding two sources of weights
  (the rule every entry point applies, docs/DESIGN.md "Checkpoints")."""
  return _resolve_checkpoint(os.fspath(path))


def checkpoint_shapes(path):
  """{checkpoint name: shape tuple} of the checkpoint at `path` (anything load_checkpoint
  reads), from its index or header alone: no tensor is read. CheckpointError if `path` is not
  a checkpoint."""
  kind, resolved = _resolve_checkpoint(os.fspath(path))
  if kind == "tf":
    try:
      shapes = _checkpoint_reader(resolved).get_variable_to_shape_map()
    except _OP_ERRORS + (ValueError,) as e:
      raise CheckpointError("%s: unreadable checkpoint: %s"
                            % (resolved, " ".join(str(getattr(e, "message", e)).split())[:200])
                            ) from None
    return {k: tuple(v) for k, v in shapes.items()}
  return weight_files.weight_file_shapes(resolved)


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


def _head_hf_names():
  """{TF1 name: HuggingFace name} that the heads declare (modeling's CHECKPOINT_NAMES)."""
  return {tf1: hf for head in modeling.checkpoint_heads()
          for _, tf1, hf in head.CHECKPOINT_NAMES if tf1 and hf}


@functools.lru_cache(maxsize=None)
def _head_name_patterns(head):
  """The normalized checkpoint names (_normal_name) of `head`'s variables, as one regex: its
  TF1 names (a Dense's or LayerNorm's scope and what is under it; a root-scope name alone,
  or under TF2's model_variables/) and its HuggingFace names."""
  patterns = []
  for _, tf1, hf in head.CHECKPOINT_NAMES:
    if tf1 and "/" in tf1:
      patterns.append(r"(?:^|/)%s(?:/|$)" % re.escape(tf1))
    elif tf1:
      patterns.append(r"^(?:model_variables/)?%s$" % re.escape(tf1))
    if hf:
      patterns.append(r"^%s$" % re.escape(hf.replace(".", "/")))
  return re.compile("|".join(patterns))


def may_be_unused(name):
  """Whether a model may leave the checkpoint entry `name` (a TF1 or HuggingFace name) unused:
  training state and the like (checkpoint_rules.may_be_unused), or a known head's."""
  return checkpoint_rules.may_be_unused(name) or is_head_name(name)


def is_head_name(name):
  """Whether the checkpoint entry `name` (TF1, TF2 or HuggingFace) is a known head's (a head
  the model may lack: it is left unused without complaint)."""
  normal = _normal_name(name)
  return any(_head_name_patterns(head).search(normal) for head in modeling.checkpoint_heads())


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
  if task == modeling.ClassifierHead.CHECKPOINT_TASK:  # (a tagger's head has the same names)
    tagger = next(kind for kind in task_registry.kinds() if kind.family.tagged)
    directory = path if file_io.gfile.isdir(path) else os.path.dirname(path)
    architectures = []
    if file_io.gfile.exists(os.path.join(directory, "config.json")):
      with file_io.gfile.GFile(os.path.join(directory, "config.json")) as f:
        try:
          architectures = json.loads(f.read()).get("architectures") or []
        except (ValueError, AttributeError):
          architectures = []
    described = model_files.read_task(directory)  # a run_* output_dir's task.json says which
    if described is not None:
      return tagger.name if described in (tagger.name, *tagger.aliases) else task
    if tagger.hf_architecture in architectures or model_files.read_labels(directory) is not None:
      return tagger.name
  return task


def checkpoint_head(shapes):
  """(the task whose head a checkpoint holds by its names alone: "squad", "classifier" (a
  tagger's head too), "pretrainer" or "encoder"; the classifier head's number of outputs, or
  None) of the checkpoint's {name: shape} (checkpoint_shapes): what model_files.check_head
  compares a model directory's task.json with."""
  task = _task_of_names([_normal_name(key) for key in shapes])
  try:
    rows = (_classifier_rows(shapes, "") if task == modeling.ClassifierHead.CHECKPOINT_TASK
            else None)
  except ValueError:
    rows = None
  return task, rows


def _task_of_names(names):
  """The task whose head the normalized checkpoint names hold: the CHECKPOINT_TASK of the
  first head (modeling.checkpoint_heads: fine-tuning heads first) whose names are there,
  else "encoder"."""
  for head in modeling.checkpoint_heads():
    pattern = _head_name_patterns(head)
    if head.CHECKPOINT_TASK and any(pattern.search(name) for name in names):
      return head.CHECKPOINT_TASK
  return "encoder"


def check_config_matches(config, checkpoint):
  """CheckpointError (one line) when the BertConfig `config` cannot load `checkpoint` (a path,
  or its checkpoint_shapes), found from the checkpoint's shapes before any model is built: a
  vocab, hidden, intermediate, position or token-type size or a number of layers that
  differs (fewer layers would leave the checkpoint's others unused)."""
  shapes = checkpoint if isinstance(checkpoint, dict) else checkpoint_shapes(checkpoint)
  sizes = config_sizes(shapes)
  wrong = []
  for field, size in sizes.items():
    value = getattr(config, field, None)
    if value != size:
      wrong.append("%s %s in the config, %d in the checkpoint" % (field, value, size))
  if wrong:
    raise CheckpointError("; ".join(wrong))


def _shape_error(path, name, ckpt_shape, model_shape, config, labels_head=False):
  """The CheckpointError of tensor `name` of the checkpoint `path`, of shape ckpt_shape, for
  a variable of model_shape. labels_head: the variable is a classifier or tagger head's
  (output_weights [num_labels, H], output_bias [num_labels]), whose first axis is its number
  of labels."""
  model_shape = tuple(model_shape)
  if labels_head and ckpt_shape[1:] == model_shape[1:]:
    return CheckpointError(
        "%s: the checkpoint's head has %d labels (%s %s), the model %d: a label list or "
        "num_labels of another size" % (path, ckpt_shape[0], name, list(ckpt_shape),
                                         model_shape[0]))
  return CheckpointError(
      "%s: %s: checkpoint shape %s != model shape %s. The model was probably built from a "
      "bert_config.json that does not match the checkpoint (vocab_size=%s, hidden_size=%s, "
      "intermediate_size=%s, max_position_embeddings=%s, type_vocab_size=%s)." % (
          path, name, list(ckpt_shape), list(model_shape), config.vocab_size,
          config.hidden_size, config.intermediate_size, config.max_position_embeddings,
          config.type_vocab_size))


@dataclasses.dataclass
class _Source:
  """A checkpoint being loaded: {name: shape}, {name: dtype name}, read(name) -> array, and
  may_be_unused(name), the excepted kinds of leftover entries."""
  path: str
  format: str
  shapes: dict
  dtypes: dict
  read: object
  may_be_unused: object


def _assign(model, source, checkpoint_name, new_heads):
  """Assigns source.read(checkpoint_name(tf1)) to every model variable of tf1_variable_map,
  after every check of load_checkpoint (names, shapes, dtypes) has passed; then reads one
  tensor at a time, each refused if not finite."""
  config = encoder_of(model).config
  result = LoadResult(path=source.path, format=source.format)
  assignments, absent, present = [], collections.defaultdict(list), set()
  for tf1, variable in tf1_variable_map(model).items():
    ckpt, transpose = checkpoint_name(tf1)
    if ckpt is None or ckpt not in source.shapes:
      absent[checkpoint_rules.part(tf1)].append((tf1, ckpt or tf1, variable))
      continue
    present.add(checkpoint_rules.part(tf1))
    shape = tuple(source.shapes[ckpt])
    if (shape[::-1] if transpose else shape) != tuple(variable.shape):
      raise _shape_error(source.path, ckpt, shape, variable.shape, config,
                         not transpose and checkpoint_rules.part(tf1) == "classifier")
    if not checkpoint_rules.is_floating(source.dtypes.get(ckpt, "F32")):
      raise CheckpointError("%s: tensor %s is stored as %s, not floating point: refused (a "
                            "weight is a float)" % (source.path, ckpt, source.dtypes[ckpt]))
    assignments.append((variable, ckpt, transpose))
    result.loaded.append(tf1)
  checkpoint_rules.check_absent(absent, present, source.path, config, new_heads)
  result.missing = [tf1 for part in absent.values() for tf1, _, _ in part]
  used = {ckpt for _, ckpt, _ in assignments}
  result.unused = sorted(set(source.shapes) - used)
  leftover = [name for name in result.unused if not source.may_be_unused(name)]
  if leftover:
    raise CheckpointError(
        "checkpoint %s holds %d tensors the model does not take: %s. Is the config's "
        "num_hidden_layers (%d) smaller than the checkpoint's, or is this another kind of "
        "model? Only training state and the known heads may be left unused."
        % (source.path, len(leftover), checkpoint_rules.listed(leftover),
           config.num_hidden_layers))
  for variable, ckpt, transpose in assignments:
    value = _read_tensor(source, ckpt)
    variable.assign(np.ascontiguousarray(value.T if transpose else value)
                    .astype(variable.dtype))
    del value
  return result


def _read_tensor(source, name):
  """source.read(name), a damaged file and a non-finite value each a CheckpointError."""
  try:
    value = np.asarray(source.read(name))
  except (IndexError, ValueError) + _OP_ERRORS as e:  # a .data file cut short or damaged
    message = " ".join(str(getattr(e, "message", e)).split())[:300]
    raise CheckpointError("%s: tensor %s cannot be read (the checkpoint is truncated or "
                          "damaged): %s" % (source.path, name, message)) from None
  return checkpoint_rules.checked_value(source.path, name, value)


def _assign_from_hf(model, path, new_heads):
  """Loads a HuggingFace weight file: its header or pickle first (names, shapes, dtypes),
  checked against the model by _assign; then the tensors the model takes, one at a time.
  numpy and the safetensors library only: no TensorFlow here."""
  with weight_files.open_weight_file(path) as f:
    prefix = "bert." if any(k.startswith("bert.") for k in f.entries) else ""
    # Older HF checkpoints name LayerNorm parameters gamma/beta.
    original = {re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight",
                       re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", k)): k
                for k in f.entries}

    def checkpoint_name(tf1):
      name, transpose = hf_name(tf1)
      if tf1.startswith("bert/"):
        name = prefix + name[len("bert."):]
      return name, transpose

    source = _Source(path, "huggingface",
                     {k: f.entries[v][0] for k, v in original.items()},
                     {k: f.entries[v][1] for k, v in original.items()},
                     lambda name: f.read(original[name]), may_be_unused)
    return _assign(model, source, checkpoint_name, new_heads)


def _restore_tf2(model, source, new_heads):
  """Loads the model variables of a TF2 object-based checkpoint (tf.train.Checkpoint).

  Two layouts are read:
    * a `model_variables` dict keyed by the TF1 names, as training_checkpoints.make_checkpoint
      writes
      ("model_variables/bert.Sembeddings.Sword_embeddings/.ATTRIBUTES/VARIABLE_VALUE"); every
      other object (model, optimizer, step) is training state;
    * the object graph of the model itself, tf.train.Checkpoint(model=model, ...)
      ("model/bert/embeddings/word_embeddings/.ATTRIBUTES/VARIABLE_VALUE"), found wherever
      it sits: a BertModel reads the `bert` subtree of a BertPretrainer (or of a wrapper
      holding one), and a BertPretrainer reads a BertModel checkpoint (heads then stay
      initialised). Every variable under the encoder's path must be taken; the rest (heads,
      optimizer, step) may be left.
  """
  by_name = {}
  for key in source.shapes:
    match = re.match(r"model_variables/(.+)/\.ATTRIBUTES/VARIABLE_VALUE$", key)
    if match:
      by_name[re.sub(r"\.(.)", lambda m: "/" if m.group(1) == "S" else m.group(1),
                     match.group(1))] = key
  if by_name:
    names = {tf1: by_name.get(tf1) for tf1 in tf1_variable_map(model)}
    tf1_of = {key: tf1 for tf1, key in by_name.items()}
    source.may_be_unused = lambda key: (key not in tf1_of
                                        or may_be_unused(tf1_of[key]))
  else:
    names, bert_prefix = _object_graph_names(model, source.shapes, source.path)
    source.may_be_unused = lambda key: (
        not key.startswith(bert_prefix) or "OPTIMIZER_SLOT" in key
        or not key.endswith("/.ATTRIBUTES/VARIABLE_VALUE"))
  source.format = "tf2"
  result = _assign(model, source, lambda tf1: (names[tf1], False), new_heads)
  result.unused = [k for k in result.unused if k != "_CHECKPOINTABLE_OBJECT_GRAPH"]
  return result


def _object_graph_names(model, shapes, path):
  """({TF1 name: TF2 checkpoint key}, the encoder's key prefix), by locating our encoder's
  object paths in the keys."""
  anchor = "embeddings/word_embeddings/.ATTRIBUTES/VARIABLE_VALUE"
  found = sorted((k for k in shapes if k.endswith("/" + anchor) and "OPTIMIZER_SLOT" not in k),
                 key=len)
  if not found:
    raise CheckpointError("%s: a TF2 checkpoint without BERT embeddings (expected a key "
                          "ending in %s)" % (path, anchor))
  if tf is None:
    raise CheckpointError("%s: a checkpoint of tf.train.Checkpoint(model=...) is read by its "
                          "object graph, under the TensorFlow backend only (run_* outputs "
                          "and save_pretrained directories load on any backend)" % path)
  bert_prefix = found[0][:-len(anchor)]                 # e.g. "model/" or "model/bert/"
  bert = encoder_of(model)
  key_of = {id(v): k for k, v in _object_keys(bert, bert_prefix).items()}
  if model is not bert and bert_prefix.endswith("bert/"):
    heads_prefix = bert_prefix[:-len("bert/")]
    for key, variable in _object_keys(model, heads_prefix).items():
      key_of.setdefault(id(variable), key)
  return ({tf1: key_of.get(id(variable)) for tf1, variable in tf1_variable_map(model).items()},
          bert_prefix)


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
      if isinstance(child, keras.Variable) or (tf is not None
                                                and isinstance(child, tf.Variable)):
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
    file_io.gfile.makedirs(directory)
  tmp = file_io.temp_name(prefix)  # .<name>.tmp-<pid>: a dead run's is removed by the next
  tf = backend.require_tensorflow("writing a TF1 checkpoint")  # noqa: F811  (any backend)
  tf.raw_ops.SaveV2(prefix=tmp, tensor_names=list(names),
                    shape_and_slices=[""] * len(names),
                    tensors=[np.asarray(keras.ops.convert_to_numpy(v.value), np.float32)
                             for v in names.values()])
  for suffix in (".data-00000-of-00001", ".index"):
    file_io.gfile.rename(tmp + suffix, prefix + suffix, overwrite=True)
  return list(names)


# ----------------------------------------------------------------------------------------------
# 4. Checkpoint directories: load_model, save_pretrained
# ----------------------------------------------------------------------------------------------

# run_ner's tag set in its output_dir: one tag a line, in the order of the model's outputs.
LABELS_FILE = model_files.LABELS_FILE
read_labels = model_files.read_labels
# The files save_pretrained writes: what it may replace in an existing directory.
_PRETRAINED_FILES = ("bert_config.json", "bert_model.ckpt.index",
                     "bert_model.ckpt.data-00000-of-00001", "vocab.txt", "tokenizer_config.json")


def load_model(path, task="encoder", num_labels=None, bert_config_file=None, vocab_file=None,
               do_lower_case=None, text_input=False, max_seq_length=128, new_heads=True,
               **model_kwargs):
  """One call from a checkpoint directory to a ready model, its weights loaded.

  Problems (no checkpoint or config, unknown task, a config that does not fit the
  checkpoint's shapes: check_config_matches, a vocabulary with more ids than the config's
  vocab_size: model_files.check_vocab_fits) are ValueErrors naming the file, raised before
  the model is built (a wrong config must not first allocate gigabytes). Given a model
  directory (a run_* output_dir or its best/, with task.json), a bert_config_file, vocab_file
  or do_lower_case that disagrees with its own files is a ValueError naming both.

  Args:
    path: str or path-like: Google's TF1 directory (bert_config.json, bert_model.ckpt.*,
      vocab.txt), a HuggingFace directory (config.json, model.safetensors or
      pytorch_model.bin, vocab.txt), one of our run_* output directories (its newest
      model.ckpt-N; pass bert_config_file unless a bert_config.json lies beside it), what
      save_pretrained writes, a sentence-transformers directory (its Transformer module's
      weights: the top level, or 0_Transformer/ in older layouts), or a checkpoint
      prefix/file (its config is looked for in its directory).
    task: str, "encoder" (modeling.BertModel), "classifier" (BertClassifier; num_labels
      defaults to the rows of the checkpoint's classifier head), "tagger"
      (BertTokenClassifier; a run_ner output_dir's labels.txt gives its tags, else num_labels
      as for "classifier"), "squad" (BertSquad), "pretrainer" (BertPretrainer) or
      "embeddings" (BertSentenceEncoder: pooling="mean"|"cls"|"max" and normalize, each
      when not given the model directory's: a run_embeddings task.json, a
      sentence-transformers directory's Pooling and Normalize modules). A head wholly absent
      from the checkpoint keeps its initial values unless new_heads=False.
    num_labels: int or None, the outputs of a "classifier" or "tagger" head.
    bert_config_file: str or None, the config to build from (default: bert_config.json or
      config.json beside the checkpoint).
    vocab_file: str or None (default: the directory's vocab.txt, else None).
    do_lower_case: bool or None (default: tokenizer_config.json's "do_lower_case", else True
      unless the vocabulary has upper-case words; None without a vocabulary).
    text_input: bool; True returns a compiled preprocessing.TextModel over text instead
      (BertPreprocessor of the vocab and do_lower_case above with max_seq_length; the
      original's optimizer at 2e-5 and the task's loss: preprocessing.text_model); not for
      "pretrainer".
    max_seq_length: int, the TextModel's sequence length (text_input only).
    new_heads: bool; True (to fine-tune: an encoder's checkpoint, a new head) lets a head
      wholly absent from the checkpoint keep its initial values; False (a model to predict
      with or convert) refuses it (load_checkpoint's new_heads).
    **model_kwargs: go to the model's constructor (dtype, name, output_hidden_states of a
      BertModel).

  Returns:
    The keras model of `task` (or its TextModel), weights loaded, carrying:
      model.vocab_file      str or None, as above
      model.do_lower_case   bool or None, as above
      model.load_result     load_checkpoint's LoadResult
      model.labels          (tasks "classifier", "tagger") the label (str) of each output,
                            from labels.txt in the directory (or, for an output_dir/best,
                            its parent); else None (e.g. a regression)
    A BertModel maps int32 [B, S] input_ids (with input_mask, segment_ids) to a dict of
    sequence_output [B, S, H] and pooled_output [B, H]; a classifier gives float32 logits
    [B, num_labels], a tagger [B, S, num_labels], a BertSquad {"start_logits",
    "end_logits"} [B, S] each.
  """
  path = os.fspath(path)
  try:
    task_kind = task_registry.get(task)
  except ValueError:
    raise ValueError("task must be one of %s, got %r"
                     % (", ".join(task_registry.names()), task)) from None
  if text_input and tf is None:
    raise ValueError("text_input=True builds a TensorFlow graph model (the tokenizer inside); on "
                     "Keras's %s backend load the model without it and run "
                     "preprocessing.BertPreprocessor in tf.data: dataset.map(preprocessor)"
                     % backend.name())
  if text_input and not task_kind.text_input:
    raise ValueError("text_input=True takes task %s, not %r" % (
        ", ".join(task_registry.names(text_input=True)), task))
  if task_kind.family.pooled:  # the directory's pooling, unless given
    model_kwargs = {**_described_pooling(path), **model_kwargs}
  path = sentence_transformers_layout.transformer_dir(path)
  kind, resolved = _resolve_checkpoint(path)
  directory = path if file_io.gfile.isdir(path) else os.path.dirname(path)
  config_file = bert_config_file or model_files.config_file_in(directory, path)
  config = modeling.BertConfig.from_json_file(config_file)
  shapes = checkpoint_shapes(resolved)  # headers and pickles only: no tensor is read
  try:
    check_config_matches(config, shapes)
  except CheckpointError as e:
    raise CheckpointError("%s does not fit the checkpoint %s: %s"
                          % (config_file, resolved, e)) from None
  model_files.check_model_files(directory, bert_config_file, config, vocab_file,
                                do_lower_case, head=checkpoint_head(shapes))
  labels = model_files.read_labels(directory) if task_kind.labels else None
  if labels is not None:
    if num_labels is not None and num_labels != len(labels):
      raise ValueError("num_labels=%d, but %s lists %d labels" % (
          num_labels, os.path.join(directory, LABELS_FILE), len(labels)))
    num_labels = len(labels)
  if task_kind.labels and num_labels is None:
    num_labels = _classifier_rows(shapes, resolved)
  if vocab_file is None and file_io.gfile.exists(os.path.join(directory, "vocab.txt")):
    vocab_file = os.path.join(directory, "vocab.txt")
  if vocab_file is not None:   # (before the model is built)
    model_files.check_vocab_fits(
        config, tokenization.load_vocab(vocab_file, lenient_decoding=True), vocab_file,
        config_file)
  model = task_kind.build(config, num_labels, **model_kwargs)
  result = load_checkpoint(model, resolved, new_heads=new_heads)
  if task_kind.labels:
    model.labels = labels
  if do_lower_case is None:
    do_lower_case = model_files.read_do_lower_case(directory, vocab_file)
  model.vocab_file, model.do_lower_case, model.load_result = vocab_file, do_lower_case, result
  if text_input:
    if vocab_file is None or do_lower_case is None:
      raise ValueError("%s: text_input=True needs a vocab.txt there (or vocab_file) and "
                       "do_lower_case" % path)
    from bert_keras import preprocessing  # TensorFlow (the tokenizer in the graph)
    text = preprocessing.text_model(model, task, vocab_file, do_lower_case, max_seq_length)
    text.vocab_file, text.do_lower_case, text.load_result = vocab_file, do_lower_case, result
    text.labels = labels
    return text
  return model


def _described_pooling(path):
  """{"pooling", "normalize"} that the model directory of `path` says (a run_embeddings
  task.json, a sentence-transformers directory's Pooling and Normalize modules), else {}."""
  description = sentence_transformers_layout.read_model_files(path)
  if not description or description.get("task") not in task_registry.task_json_names() or (
      not task_registry.of_description(description).family.pooled):
    return {}
  return {key: description[key] for key in ("pooling", "normalize")
          if description.get(key) is not None}


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


def save_pretrained(model, directory, vocab_file=None, do_lower_case=None):
  """Writes `model` as a checkpoint directory in Google's layout: bert_config.json,
  bert_model.ckpt.{index,data-00000-of-00001} (the original TF1 names, heads included:
  save_tf1_checkpoint), vocab.txt and tokenizer_config.json ({"do_lower_case": ...}, left
  out when unknown). load_model reads it back; the original code reads bert_config.json and
  bert_model.ckpt (if hidden_act is one it knows: not HuggingFace's erf "gelu_exact").

  Atomic (file_io.replaced_directory): written into a temporary sibling directory, then
  renamed to `directory`. An existing `directory` is replaced only when it holds nothing but
  these files (a previous save_pretrained); otherwise ValueError.

  Args:
    model: a modeling.BertModel or a task model holding one (`bert`); its variables are
      written as float32.
    directory: str or path-like, the directory to write (gs:// works).
    vocab_file: str or None, copied as vocab.txt (default: model.vocab_file as load_model
      sets it; for a task model built around a loaded encoder, the encoder's). Required.
    do_lower_case: bool or None (default: model.do_lower_case, likewise).

  Returns:
    `directory` (str, without a trailing "/").
  """
  directory = os.fspath(directory).rstrip("/") or "/"
  vocab_file = vocab_file or loaded_attribute(model, "vocab_file")
  if do_lower_case is None:
    do_lower_case = loaded_attribute(model, "do_lower_case")
  if not vocab_file:
    raise ValueError("save_pretrained: vocab_file is needed (the model was not loaded with one)")
  if not file_io.gfile.exists(vocab_file):
    raise ValueError("%s: no such vocab file" % vocab_file)
  gfile = file_io.gfile
  check_replaceable(directory, _PRETRAINED_FILES)
  config = {k: v for k, v in encoder_of(model).config.to_dict().items()
            if k not in ("model_type", "architectures")}   # read back as our format
  with file_io.replaced_directory(directory) as tmp:  # (.<name>.tmp-<pid>)
    with gfile.GFile(os.path.join(tmp, model_files.CONFIG_FILE), "w") as f:
      f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_tf1_checkpoint(model, os.path.join(tmp, "bert_model.ckpt"))
    gfile.copy(vocab_file, os.path.join(tmp, model_files.VOCAB_FILE), overwrite=True)
    if do_lower_case is not None:
      model_files.write_tokenizer_config(tmp, do_lower_case)
  return directory


def loaded_attribute(model, name):
  """What load_model set on `model`, or on its encoder (a task model built around it)."""
  value = getattr(model, name, None)
  return getattr(encoder_of(model), name, None) if value is None else value


def check_replaceable(directory, files):
  """A ValueError unless `directory` is absent or a directory holding only `files`."""
  gfile = file_io.gfile
  if not gfile.exists(directory):
    return
  if not gfile.isdir(directory):
    raise ValueError("%s: exists and is not a directory" % directory)
  others = sorted(set(gfile.listdir(directory)) - set(files))
  if others:
    raise ValueError("%s: exists and holds other files (%s); save into a new directory"
                     % (directory, ", ".join(others[:5])))
