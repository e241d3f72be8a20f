# coding=utf-8
"""A run's output directory is the model: the files written beside its checkpoints so that
export, predict and checkpoints.load_model need nothing else.

  bert_config.json       the model's BertConfig
  vocab.txt              the WordPiece vocabulary (a copy of --vocab_file)
  tokenizer_config.json  {"do_lower_case": bool} (HuggingFace's name for it)
  labels.txt             one label a line, in the order of the model's outputs (classifiers,
                         multi-label classifiers and taggers; absent otherwise)
  task.json              {"task": "classifier"|"regression"|"tagger"|"squad"|"embeddings",
                         "multi_label", "labels", "max_seq_length", "do_lower_case", and the
                         task's options (an embeddings model's "pooling" and "normalize")}
  run_options.json       the run's options (its flags) as JSON

Each is written atomically; read_model_dir reads them back.
"""

import json
import os
import time
import types

from absl import logging
import tensorflow as tf

from bert_keras import modeling
from bert_keras.utils import file_io

LABELS_FILE = "labels.txt"
TASK_FILE = "task.json"
OPTIONS_FILE = "run_options.json"
TASKS = ("classifier", "regression", "tagger", "squad", "pretraining", "embeddings")


def _json_value(value):
  """`value` if JSON can hold it, else its str (a path object, an enum)."""
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  if isinstance(value, (list, tuple)):
    return [_json_value(v) for v in value]
  if isinstance(value, dict):
    return {str(k): _json_value(v) for k, v in value.items()}
  return str(value)


def options_dict(options):
  """The run's options (a namespace of run() options) as a JSON-ready dict, sorted."""
  return {key: _json_value(value) for key, value in sorted(vars(options).items())
          if not key.startswith("_")}


def write_model_dir(directory, options, config, task, labels=None, write_options=True,
                    **task_options):
  """Writes the model files into `directory` (which exists): bert_config.json, vocab.txt
  (copied from options.vocab_file unless it is that file), tokenizer_config.json (when the
  options have do_lower_case), labels.txt (when `labels`), task.json and (when
  write_options) run_options.json.

  options: the run's options namespace (vocab_file, do_lower_case, max_seq_length are read).
  config: the modeling.BertConfig. task: one of TASKS. labels: the output labels in order, or
  None. task_options: further task.json entries (multi_label, thresholds, doc_stride, ...).
  """
  if task not in TASKS:
    raise ValueError("task must be one of %s, got %r" % (", ".join(TASKS), task))
  join = lambda name: os.path.join(directory, name)  # noqa: E731
  do_lower_case = getattr(options, "do_lower_case", None)
  do_lower_case = None if do_lower_case is None else bool(do_lower_case)
  if labels is not None:
    file_io.write_text_atomic(join(LABELS_FILE), "".join("%s\n" % label for label in labels))
  file_io.write_text_atomic(join("bert_config.json"), config.to_json_string())
  if do_lower_case is not None:
    file_io.write_text_atomic(join("tokenizer_config.json"),
                              json.dumps({"do_lower_case": do_lower_case}) + "\n")
  description = {"task": task, "multi_label": False,
                 "labels": list(labels) if labels is not None else None,
                 "max_seq_length": getattr(options, "max_seq_length", None),
                 "do_lower_case": do_lower_case}
  description.update(task_options)
  file_io.write_text_atomic(join(TASK_FILE),
                            json.dumps(_json_value(description), indent=2) + "\n")
  if write_options:
    file_io.write_text_atomic(join(OPTIONS_FILE),
                              json.dumps(options_dict(options), indent=2) + "\n")
  vocab_file = getattr(options, "vocab_file", None)
  if vocab_file and os.path.abspath(vocab_file) != os.path.abspath(join("vocab.txt")):
    tmp = file_io.temp_name(join("vocab.txt"))
    tf.io.gfile.copy(vocab_file, tmp, overwrite=True)
    tf.io.gfile.rename(tmp, join("vocab.txt"), overwrite=True)


def _read_json(path):
  with tf.io.gfile.GFile(path) as f:
    text = f.read()
  try:
    value = json.loads(text)
  except ValueError as e:
    raise ValueError("%s: not valid JSON (%s)" % (path, e)) from None
  if not isinstance(value, dict):
    raise ValueError("%s: expected a JSON object" % path)
  return value


def model_dir_of(path):
  """The directory whose files describe the checkpoint at `path` (a directory, its best/,
  or a checkpoint prefix): `path` or its directory, or the parent of a best/ without a
  task.json of its own."""
  directory = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
  if (not tf.io.gfile.exists(os.path.join(directory, TASK_FILE))
      and os.path.basename(directory.rstrip("/")) == "best"):
    parent = os.path.dirname(directory.rstrip("/"))
    if tf.io.gfile.exists(os.path.join(parent, TASK_FILE)):
      return parent
  return directory


def read_model_dir(path):
  """task.json of the model directory of `path` (model_dir_of), with "directory" (where it
  was found), "bert_config_file", "vocab_file" (None when absent) and "options" (the dict of
  run_options.json, {} when absent) added; None when there is no task.json. A task.json that
  is not a JSON object with a known "task" is a ValueError naming it."""
  directory = model_dir_of(os.fspath(path))
  task_file = os.path.join(directory, TASK_FILE)
  if not tf.io.gfile.exists(task_file):
    return None
  description = _read_json(task_file)
  if description.get("task") not in TASKS:
    raise ValueError("%s: \"task\" must be one of %s, got %r"
                     % (task_file, ", ".join(TASKS), description.get("task")))
  labels = description.get("labels")
  if labels is not None and (not isinstance(labels, list) or len(set(map(str, labels)))
                             != len(labels) or "" in labels):
    raise ValueError("%s: \"labels\" must be a list of distinct non-empty names" % task_file)
  existing = lambda name: (os.path.join(directory, name)  # noqa: E731
                           if tf.io.gfile.exists(os.path.join(directory, name)) else None)
  options_file = existing(OPTIONS_FILE)
  description.update(directory=directory, bert_config_file=existing("bert_config.json"),
                     vocab_file=existing("vocab.txt"),
                     options=_read_json(options_file) if options_file else {})
  return description


# ----------------------------------------------------------------------------
# Options resolved from a model directory, conflicts, reruns.

# The options a model directory supplies when they are not given: option -> where the
# directory holds it ("bert_config_file" and "vocab_file" are its files; the others its
# task.json entries). Given and different, each is a one-line error.
MODEL_OPTIONS = ("bert_config_file", "vocab_file", "do_lower_case", "max_seq_length")

# Options that do not change what a --do_train run computes (its checkpoints and best/):
# ignored when a --do_train run into an existing output_dir is compared with the run that
# made it (check_rerun). Every other option counts: a difference is refused unless
# --overwrite_output_dir. Where the output goes, how often it is saved or logged, the
# device and its parallelism, evaluation and prediction after training and their batch
# sizes, SQuAD's answer post-processing.
RESULT_NEUTRAL_OPTIONS = frozenset((
    "output_dir", "overwrite_output_dir", "do_train", "do_eval", "do_predict",
    "eval_batch_size", "predict_batch_size", "save_checkpoints_steps", "iterations_per_loop",
    "keep_checkpoint_max", "log_every_steps", "use_tpu", "tpu_name", "tpu_zone",
    "gcp_project", "master", "num_tpu_cores", "tpu_job_name", "distribution_strategy",
    "use_xla", "trim_eval_batches", "trim_predict_batches", "predict_file", "n_best_size",
    "max_answer_length", "verbose_logging", "null_score_diff_threshold", "max_eval_steps"))


def _is_flag_values(options):
  return hasattr(options, "flag_values_dict") and hasattr(options, "__getitem__")


def options_namespace(options, defaults):
  """(a SimpleNamespace copy of `options` (parsed absl FLAGS or a namespace) over the keys of
  `defaults` and its own, the set of names given explicitly: a flag present on the command
  line; in a namespace, a value other than the default)."""
  if _is_flag_values(options):
    values = {name: getattr(options, name) for name in defaults if name in options}
    given = {name for name in values if options[name].present}
  else:
    values = dict(vars(options))
    given = {name for name, value in values.items()
             if name not in defaults or value != defaults[name]}
  return types.SimpleNamespace(**{**defaults, **values}), given


def _same_config(path_a, path_b):
  """Whether two config files describe the same model (as modeling.BertConfig reads them:
  Google's file and the one written from it compare equal whatever keys they spell out)."""
  try:
    return (modeling.BertConfig.from_json_file(path_a).to_dict()
            == modeling.BertConfig.from_json_file(path_b).to_dict())
  except (ValueError, tf.errors.OpError):
    return False


def _vocab_tokens(path):
  with tf.io.gfile.GFile(path, "rb") as f:
    lines = f.read().decode("utf-8", "replace").replace("\r", "").split("\n")
  return [line.strip() for line in lines if line.strip()]


def _same_vocab(path_a, path_b):
  try:
    return _vocab_tokens(path_a) == _vocab_tokens(path_b)
  except tf.errors.OpError:
    return False


def conflicts(values, description):
  """[(option, why)] where `values` ({option: value} given explicitly: bert_config_file,
  vocab_file, do_lower_case, labels, num_labels) disagree with the model directory
  `description` (read_model_dir's dict): another config or vocabulary content, another
  do_lower_case, other labels or another number of them."""
  found = []
  directory = description["directory"]
  for name, own in (("bert_config_file", description.get("bert_config_file")),
                    ("vocab_file", description.get("vocab_file"))):
    path = values.get(name)
    if path and own and not tf.io.gfile.exists(path):
      continue  # the script reports the missing file
    if path and own and not (_same_config if name == "bert_config_file" else _same_vocab)(
        path, own):
      found.append((name, f"its content differs from {own}"))
  lower = values.get("do_lower_case")
  if (lower is not None and description.get("do_lower_case") is not None
      and bool(lower) != bool(description["do_lower_case"])):
    found.append(("do_lower_case", f"the model was trained with do_lower_case="
                  f"{description['do_lower_case']} ({os.path.join(directory, TASK_FILE)})"))
  own_labels = description.get("labels")
  labels = values.get("labels")
  if labels is not None and own_labels is not None and list(labels) != list(own_labels):
    found.append(("labels", f"the model's labels are {','.join(map(str, own_labels))} "
                  f"({os.path.join(directory, LABELS_FILE)})"))
  num_labels = values.get("num_labels")
  if num_labels is not None and own_labels is not None and num_labels != len(own_labels):
    found.append(("num_labels", f"the model has {len(own_labels)} labels "
                  f"({os.path.join(directory, LABELS_FILE)})"))
  return found


def conflict_error(flag, value, description, why):
  """The one-line ValueError of a flag given in conflict with a model directory."""
  if isinstance(value, (list, tuple)):
    value = ",".join(map(str, value))
  return ValueError(f"--{flag}={value} conflicts with the model directory "
                    f"{description['directory']}: {why} (leave --{flag} out to use the "
                    "directory's)")


def raise_conflicts(values, description):
  """conflicts(values, description)'s first, as conflict_error; nothing when none."""
  for flag, why in conflicts(values, description):
    raise conflict_error(flag, values[flag], description, why)


def _has_checkpoint(directory):
  return bool(tf.io.gfile.glob(os.path.join(directory, "model.ckpt*.index")))


def _readable(function, *args):
  """function(*args), or None where the file system cannot be reached (an unknown scheme, an
  unreachable bucket): the scripts report those where they open the path, in their words."""
  try:
    return function(*args)
  except tf.errors.OpError:
    return None


def source_model_dir(options):
  """The model directory a run's model files come from (read_model_dir's dict with
  "source": "output_dir" or "init_checkpoint"), or None (also where a path cannot be
  reached): its --output_dir when it holds a model (task.json and a checkpoint; for
  --do_train, a training run's run_options.json too), else the directory of
  --init_checkpoint when that is one."""
  return _readable(_source_model_dir, options)


def _source_model_dir(options):
  output_dir = getattr(options, "output_dir", None)
  if output_dir and tf.io.gfile.isdir(output_dir):
    description = read_model_dir(output_dir)
    if (description is not None and _has_checkpoint(output_dir)
        and (description["options"] or not getattr(options, "do_train", False))):
      return dict(description, source="output_dir")
  init_checkpoint = getattr(options, "init_checkpoint", None)
  if init_checkpoint and tf.io.gfile.exists(model_dir_of(init_checkpoint)):
    description = read_model_dir(init_checkpoint)
    return None if description is None else dict(description, source="init_checkpoint")
  return None


def resolve_options(options, defaults, fill=()):
  """A run_* script's options completed from a model directory (source_model_dir), checked
  against it and against the run that made --output_dir (check_rerun).

  options: parsed absl FLAGS or a namespace over `defaults` (the script's DEFAULTS). Returns
  (namespace, description): a copy of the options where MODEL_OPTIONS and the task.json
  entries named in `fill` (e.g. doc_stride) that were not given are the directory's, and
  read_model_dir's dict of that directory (or None; its "given" entry is the set of options
  given explicitly). An option given and in conflict with the directory is a one-line
  ValueError naming the flag and the directory (conflicts). Without a model directory the
  options are the script's defaults, as before.
  """
  namespace, given = options_namespace(options, defaults)
  _readable(check_rerun, namespace, given)
  description = None
  if not getattr(namespace, "_move_aside", False):
    description = source_model_dir(namespace)
  elif getattr(namespace, "init_checkpoint", None):
    description = _readable(read_model_dir, namespace.init_checkpoint)
    description = description and dict(description, source="init_checkpoint")
  if description is None:
    return namespace, None
  description["given"] = given
  raise_conflicts({name: getattr(namespace, name) for name in given
                   if name in ("bert_config_file", "vocab_file", "do_lower_case")},
                  description)
  for name in MODEL_OPTIONS + tuple(fill):
    value = description.get(name)
    if name not in given and value is not None and name in defaults:
      setattr(namespace, name, value)
  logging.info("Model files from %s (%s)", description["directory"], ", ".join(
      f"{name}={getattr(namespace, name)}" for name in MODEL_OPTIONS + tuple(fill)
      if name in defaults and name not in given and description.get(name) is not None))
  return namespace, description


def check_labels(labels, description, flag):
  """A ValueError naming `flag` when the run's `labels` (a list; None: regression) differ
  from the model directory's (description; nothing to check when None, or when the
  directory describes no labelled task)."""
  if description is None or description.get("task") not in ("classifier", "regression",
                                                             "tagger"):
    return
  own = description.get("labels")
  if labels is None and own is None:
    return
  if labels is None or own is None or list(labels) != list(own):
    raise ValueError(
        f"{flag}: the labels {','.join(labels) if labels is not None else '(regression)'} "
        f"differ from those of the model directory {description['directory']} "
        f"({','.join(own) if own is not None else 'a regression model'})")


def _changed_options(old, new, given, output_dir):
  """["name: old -> new"] for the result-changing options that differ."""
  changes = []
  for name in sorted(set(old) & set(new)):
    if name in RESULT_NEUTRAL_OPTIONS or name.startswith("_") or name == "labels":
      continue  # (labels: checked against the directory's labels.txt by the scripts)
    if name in ("bert_config_file", "vocab_file"):
      if name not in given:
        continue  # the directory's own copy is used
      own = os.path.join(output_dir, "bert_config.json" if name == "bert_config_file"
                         else "vocab.txt")
      same = _same_config if name == "bert_config_file" else _same_vocab
      if (tf.io.gfile.exists(own) and tf.io.gfile.exists(new[name])
          and not same(own, new[name])):
        changes.append(f"{name}: {old[name]} -> {new[name]} (another content)")
      continue
    if name in MODEL_OPTIONS + ("init_checkpoint", "doc_stride",
                                "max_query_length") and name not in given:
      continue  # not given: the directory's (or the earlier run's) is used
    if old[name] != new[name]:
      changes.append(f"{name}: {old[name]} -> {new[name]}")
  return changes


def check_rerun(options, given):
  """A --do_train run into an --output_dir that holds a training run (its run_options.json
  and a checkpoint):
  with the same result-changing options (all but RESULT_NEUTRAL_OPTIONS; options not given
  that the directory supplies are not compared) it resumes; with others it is a one-line
  ValueError listing each change (old -> new), unless options.overwrite_output_dir, which
  marks the namespace (options._move_aside) for move_aside. Runs without --do_train are
  never reruns."""
  output_dir = getattr(options, "output_dir", None)
  if not (getattr(options, "do_train", False) and output_dir):
    return
  path = os.path.join(output_dir, OPTIONS_FILE)
  if getattr(options, "overwrite_output_dir", False):
    if tf.io.gfile.isdir(output_dir) and [
        name for name in tf.io.gfile.listdir(output_dir) if not name.startswith(".")]:
      options._move_aside = True
    return
  if not tf.io.gfile.exists(path) or not _has_checkpoint(output_dir):
    return  # (a run that failed before its first checkpoint trained nothing to resume)
  old = _read_json(path)
  changes = _changed_options(old, options_dict(options), given, output_dir)
  if changes:
    raise ValueError(
        f"--output_dir {output_dir} holds a training run with other options ("
        + "; ".join(changes) + "): give --overwrite_output_dir to move it aside and start "
        "over, or another --output_dir")


def move_aside(options):
  """--overwrite_output_dir (options._move_aside, set by check_rerun): moves everything in
  --output_dir (but its lock) into <output_dir>.old-<YYYYmmdd-HHMMSS>, with a log line; run
  by the chief holding the directory's lock."""
  if not getattr(options, "_move_aside", False):
    return
  output_dir = options.output_dir.rstrip("/")
  target = "%s.old-%s" % (output_dir, time.strftime("%Y%m%d-%H%M%S"))
  suffix = 1
  while tf.io.gfile.exists(target):
    target, suffix = "%s.old-%s-%d" % (output_dir, time.strftime("%Y%m%d-%H%M%S"), suffix), \
        suffix + 1
  tf.io.gfile.makedirs(target)
  for name in tf.io.gfile.listdir(output_dir):
    name = name.rstrip("/")
    if name == ".bert_keras.lock":
      continue
    tf.io.gfile.rename(os.path.join(output_dir, name), os.path.join(target, name))
  logging.warning("--overwrite_output_dir: moved the earlier run in %s aside to %s",
                  output_dir, target)
  options._move_aside = False


def prepare(options, chief, config, task, labels=None, **task_options):
  """The model files of a run_* script, in its locked --output_dir (chief only): the earlier
  run moved aside first (move_aside), then write_model_dir; run_options.json only by a
  --do_train run into a directory without one (a resumed run keeps the options it started
  with; an eval- or predict-only run never writes it). Called before the first checkpoint."""
  if not chief:
    return
  move_aside(options)
  write_options = bool(getattr(options, "do_train", False)) and not (
      tf.io.gfile.exists(os.path.join(options.output_dir, OPTIONS_FILE))
      and _has_checkpoint(options.output_dir))
  if not write_options and tf.io.gfile.exists(os.path.join(options.output_dir, TASK_FILE)):
    return  # a finished model directory: its files stay as training wrote them
  write_model_dir(options.output_dir, options, config, task, labels,
                  write_options=write_options, **task_options)


MODEL_FILES = ("bert_config.json", "vocab.txt", "tokenizer_config.json", LABELS_FILE,
               TASK_FILE, OPTIONS_FILE)


def copy_model_files(source, target):
  """The model files (MODEL_FILES) present in `source` copied into `target` (best/)."""
  for name in MODEL_FILES:
    path = os.path.join(source, name)
    if tf.io.gfile.exists(path):
      tmp = file_io.temp_name(os.path.join(target, name))
      tf.io.gfile.copy(path, tmp, overwrite=True)
      tf.io.gfile.rename(tmp, os.path.join(target, name), overwrite=True)
