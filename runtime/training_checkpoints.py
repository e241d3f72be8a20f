"""The training loop's checkpoints <output_dir>/model.ckpt-N (model, optimizer, step and
every model variable under a stable name): making, saving, finding the newest, restoring,
and warm-starting a model from --init_checkpoint. The checkpoint FILE FORMATS that
--init_checkpoint also accepts (Google's TF1 checkpoints, exports, HuggingFace weights) are
checkpoints.load_checkpoint's."""

import math
import os

from absl import logging
import numpy as np
import tensorflow as tf

from bert_keras import checkpoint_rules
from bert_keras import checkpoints


def named_model_variables(model, names=None):
  """{stable unique name: variable} for EVERY variable of `model`.

  names: optional {name: variable} for (some of) them, e.g. checkpoints.tf1_variable_map
  (the original TF1 names); the rest (e.g. dropout seed-generator states) are named
  "other_<i>" in model.variables order. Keras paths are not used as keys: they are not
  unique (two Dense layers named "dense" in one block) and auto-numbered names
  ("seed_generator_7") depend on what the process built before.
  """
  named = dict(names or {})
  seen = {id(v) for v in named.values()}
  others = [v for v in model.variables if id(v) not in seen]
  for i, v in enumerate(others):
    named[f"other_{i}"] = v
  return named


def make_checkpoint(model, optimizer, step, names=None):
  """Our checkpoint: tf.train.Checkpoint(model=..., optimizer=..., step=...,
  model_variables={name: variable}).

  `model_variables` (see named_model_variables) holds every model variable under a
  stable name, so the checkpoint is complete and restorable whatever Keras 3 exposes as
  tf.train.Checkpoint children (it does not expose layers held in Python lists, nor
  seed generators). Being the shortest object path, it is also where the tensors are
  stored: key "model_variables/<name with '/' written '.S'>/.ATTRIBUTES/VARIABLE_VALUE",
  e.g. model_variables/bert.Sembeddings.Sword_embeddings/.ATTRIBUTES/VARIABLE_VALUE.
  """
  return tf.train.Checkpoint(model=model, optimizer=optimizer, step=step,
                             model_variables=named_model_variables(model, names))


def restore_model_variables(path, names):
  """Warm-starts from one of OUR checkpoints: restores the variables of `names`
  ({name: variable}, e.g. checkpoints.tf1_variable_map(model)) from the checkpoint's
  `model_variables` entry; optimizer slots and step are ignored. Returns the number
  of variables restored, or None when `path` is not such a checkpoint."""
  try:
    keys = {name for name, _ in tf.train.list_variables(path)}
  except (tf.errors.NotFoundError, ValueError, tf.errors.InvalidArgumentError):
    return None

  def key(name):
    return "model_variables/%s/.ATTRIBUTES/VARIABLE_VALUE" % (
        name.replace(".", "..").replace("/", ".S"))
  present = {n: v for n, v in names.items() if key(n) in keys}
  if not present:
    return None
  tf.train.Checkpoint(model_variables=present).restore(path).expect_partial()
  return len(present)


def check_finite_weights(model, path):
  """A CheckpointError naming checkpoint `path` and the first floating-point variable of
  `model` (just restored from it) holding a NaN or Inf (checkpoint_rules.checked_value): the
  weights of a diverged model are refused before anything is evaluated, predicted, exported
  or trained from them. Reads the variables, one at a time; checkpoints.load_checkpoint
  checks each tensor as it reads it, so only a direct tf.train.Checkpoint restore needs this."""
  for name, variable in named_model_variables(model, checkpoints.tf1_variable_map(model)).items():
    if not checkpoint_rules.is_floating(variable.dtype):
      continue
    value = np.asarray(variable.numpy())
    if not np.issubdtype(value.dtype, np.floating):  # bfloat16 (an ml_dtypes type)
      value = value.astype(np.float32)
    checkpoint_rules.checked_value(
        path, variable.path if name.startswith("other_") else name, value)


def warm_start(model, init_checkpoint):
  """--init_checkpoint: loads the model's variables from `init_checkpoint` (a file prefix or
  a directory, whose newest model.ckpt-N is used). One of our training checkpoints
  (model.ckpt-N) gives every variable of checkpoints.tf1_variable_map(model) it holds;
  anything else (Google's TF1 checkpoints, our exports, HuggingFace weights) goes through
  checkpoints.load_checkpoint. Variables absent from the checkpoint (e.g. a new task head)
  keep their initial values. Raises checkpoints.CheckpointError (a ValueError) on a mismatch."""
  if not init_checkpoint:
    return
  path = init_checkpoint_prefix(init_checkpoint)
  if checkpoints.is_weight_file(path):  # model.safetensors, pytorch_model.bin: no TF reader
    restored = None
  else:
    restored = _restore_ours(path, model)
  if restored:
    check_finite_weights(model, path)
    logging.info("init_checkpoint: restored %d variables from %s", restored, path)
  else:
    result = checkpoints.load_checkpoint(model, init_checkpoint)
    logging.info("init_checkpoint: %s", result)


def _restore_ours(path, model):
  """restore_model_variables of checkpoints.tf1_variable_map(model), a damaged file a
  CheckpointError naming it."""
  try:
    return restore_model_variables(path, checkpoints.tf1_variable_map(model))
  except tf.errors.OpError as e:  # e.g. a CRC mismatch: the file is damaged
    raise checkpoints.CheckpointError(
        "%s: unreadable checkpoint: %s" % (path, " ".join(str(e.message).split())[:300])) from None


def init_checkpoint_prefix(init_checkpoint):
  """What warm_start reads for `init_checkpoint`: a directory's newest readable model.ckpt-N
  (latest_checkpoint), else the path itself. A TF checkpoint there (or a directory's
  bert_model.ckpt) whose files are incomplete (checkpoint_problem: a .data file cut short, a
  missing shard) is a CheckpointError naming it, found from the index and the file sizes
  before any tensor is read (reading one past the end is an IndexError deep in TensorFlow)."""
  path = init_checkpoint
  if tf.io.gfile.isdir(path):
    checkpoints.checkpoint_source(path)   # two sources of weights there: an error naming both
    path = latest_checkpoint(path) or path
  prefix = path
  if tf.io.gfile.isdir(prefix):
    prefix = os.path.join(prefix, "bert_model.ckpt")
  elif prefix.endswith(".index"):
    prefix = prefix[:-len(".index")]
  if tf.io.gfile.exists(prefix + ".index"):
    problem = checkpoint_problem(prefix)
    if problem is not None:
      raise checkpoints.CheckpointError(f"{prefix}: unreadable checkpoint ({problem})")
  return path


def make_checkpoint_manager(checkpoint, directory, max_to_keep=5):
  """Files <directory>/model.ckpt-<step>.{index,data-*} plus the "checkpoint"
  state file. A checkpoint becomes visible to latest_checkpoint only once the
  state file is rewritten (atomically, after the data and index are complete),
  so a run killed while saving resumes from the previous checkpoint."""
  return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep,
                                    checkpoint_name="model.ckpt")


def latest_checkpoint(directory, warn=True):
  """The newest READABLE model.ckpt-N prefix that the "checkpoint" state file of `directory`
  names, or None (no such directory or no checkpoint yet).

  A checkpoint whose files are incomplete (checkpoint_problem: a truncated .data file, a
  missing or damaged .index) is skipped for the previous one the state file lists, with a
  warning naming it (when `warn`); if none of them is readable, a ValueError naming the
  directory and each checkpoint's problem."""
  try:
    state = tf.train.get_checkpoint_state(directory)
  except (tf.errors.OpError, ValueError):
    return None
  if state is None or not state.model_checkpoint_path:
    return None
  # get_checkpoint_state has already joined relative entries with `directory` (joining them
  # again made a relative --output_dir unresumable).
  paths = [p for p in state.all_model_checkpoint_paths if p != state.model_checkpoint_path]
  paths.append(state.model_checkpoint_path)
  problems = []
  for path in reversed(paths):
    problem = checkpoint_problem(path)
    if problem is None:
      return path
    problems.append(f"{os.path.basename(path)} ({problem})")
    if warn:
      logging.warning("Checkpoint %s is unreadable (%s): using the previous one", path, problem)
  raise ValueError(f"{directory}: none of the checkpoints its \"checkpoint\" file names is "
                   f"readable: {'; '.join(problems)}")


def checkpoint_problem(prefix):
  """None when the checkpoint `prefix` is complete, else what is wrong with it: no .index,
  an .index TensorFlow cannot read, a missing .data shard, or .data files shorter than the
  tensors the index lists (a save cut short). Reads the index and the files' sizes only."""
  if not tf.io.gfile.exists(prefix + ".index"):
    return "no .index file"
  try:
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
  except (tf.errors.OpError, ValueError) as e:
    return "unreadable .index: " + " ".join(str(getattr(e, "message", e)).split())[:200]
  need = sum(math.prod(shapes[name]) * dtypes[name].size for name in shapes
             if dtypes[name] != tf.string)
  shards = tf.io.gfile.glob(prefix + ".data-?????-of-?????")
  expected = int(shards[0][-5:]) if shards else 1
  if len(shards) < expected:
    return "%d of its %d .data files missing" % (expected - len(shards), expected)
  have = sum(tf.io.gfile.stat(path).length for path in shards)
  if have < need:
    return "its .data files hold %d bytes, its tensors %d: truncated" % (have, need)
  return None


def restore_for_inference(trainer, output_dir, init_checkpoint):
  """Without training: restores `trainer` (a training.Trainer) from the newest checkpoint in
  output_dir, else warm-starts its model from init_checkpoint; a warning when there is
  neither (the weights stay freshly initialised)."""
  if trainer.restore_latest(output_dir):  # (its weights checked finite there)
    return
  if init_checkpoint:
    warm_start(trainer.model, init_checkpoint)
  else:
    logging.warning("No checkpoint in --output_dir %s and no --init_checkpoint: using freshly "
                    "initialised weights", output_dir)
