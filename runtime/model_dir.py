"""A run's output directory is the model: the files written beside its checkpoints
(model_files.py: bert_config.json, vocab.txt, tokenizer_config.json, labels.txt, task.json,
run_options.json) so that export, predict and checkpoints.load_model need nothing else.

This module holds what a run_* script does with them: the task names, the options filled in
from a model directory (resolve_options), conflicts and reruns refused, the earlier run moved
aside (--overwrite_output_dir), and prepare (the files of a run, written by its chief).
"""

import os
import re
import time
import types

from absl import logging
import tensorflow as tf

from bert_keras import model_files
from bert_keras import modeling
from bert_keras import sentence_transformers_layout
from bert_keras import task_registry
from bert_keras.runtime import option_checks
from bert_keras.runtime import settings
from bert_keras.utils import file_io

# The file format lives in model_files.py; these names stay for existing callers.
LABELS_FILE = model_files.LABELS_FILE
TASK_FILE = model_files.TASK_FILE
OPTIONS_FILE = model_files.OPTIONS_FILE
MODEL_FILES = model_files.MODEL_FILES
options_dict = model_files.options_dict
model_dir_of = model_files.model_dir_of
copy_model_files = model_files.copy_model_files
TASKS = task_registry.task_json_names()  # task.json's "task" values


def write_model_dir(directory, options, config, task, labels=None, write_options=True,
                    **task_options):
  """model_files.write_model_files (bert_config.json, vocab.txt, tokenizer_config.json,
  labels.txt, task.json, run_options.json) for `task`, one of TASKS."""
  if task not in TASKS:
    raise ValueError("task must be one of %s, got %r" % (", ".join(TASKS), task))
  model_files.write_model_files(directory, options, config, task, labels,
                                write_options=write_options, **task_options)


def read_model_dir(path):
  """sentence_transformers_layout.read_model_files(path): task.json, checked field by field
  and against the directory's other files (its "task" one of TASKS), with "directory",
  "bert_config_file", "vocab_file" and "options" added (a sentence-transformers directory
  described as a run_embeddings one); None without either. A wrong field is a one-line
  ValueError naming the file and the field."""
  return sentence_transformers_layout.read_model_files(path)


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
  line; in a namespace, those it records as given (option_checks.GIVEN: make_options'
  overrides) and a value other than the default). The copy records the set too
  (option_checks.GIVEN), so that the checks judge a flag given at its default as given."""
  recorded = option_checks.given_flags(options) or frozenset()
  if _is_flag_values(options):
    values = {name: value for name, value in settings.values_of(options).items()
              if name in defaults}
    given = {name for name in values if name in recorded}
  else:
    values = {name: value for name, value in vars(options).items()
              if name != option_checks.GIVEN}
    given = set(recorded) | {name for name, value in values.items() if not name.startswith("_")
                             and (name not in defaults or value != defaults[name])}
  namespace = types.SimpleNamespace(**{**defaults, **values})
  setattr(namespace, option_checks.GIVEN, frozenset(given))
  return namespace, given


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
  values = settings.values_of(options)  # (a script without --output_dir or --do_train: None)
  output_dir = values.get("output_dir")
  if output_dir and tf.io.gfile.isdir(output_dir):
    description = read_model_dir(output_dir)
    if (description is not None and _has_checkpoint(output_dir)
        and (description["options"] or not values.get("do_train"))):
      return dict(description, source="output_dir")
  init_checkpoint = values.get("init_checkpoint")
  if init_checkpoint and tf.io.gfile.exists(model_dir_of(init_checkpoint)):
    description = read_model_dir(init_checkpoint)
    return None if description is None else dict(description, source="init_checkpoint")
  return None


def check_kind(options, writes):
  """A one-line ValueError when --output_dir holds a model directory (its task.json) of a
  kind other than `writes` (the task.json "task" values the script writes: its models), named
  with the directory's kind and the script's: the script would evaluate, predict or write its
  files into another task's model. Not with --overwrite_output_dir (moved aside)."""
  values = settings.values_of(options)
  output_dir = values.get("output_dir")
  if not (writes and output_dir) or values.get("overwrite_output_dir"):
    return
  task = _readable(model_files.read_task, output_dir)
  if task is None:
    return
  try:
    task_json = task_registry.get(task).task_json or task
  except ValueError:
    task_json = task
  if task_json not in writes:
    article = lambda word: ("an " if word[0] in "aeiou" else "a ") + word  # noqa: E731
    raise ValueError(
        f"--output_dir {output_dir} holds {article(task)} model ("
        f"{os.path.join(output_dir, TASK_FILE)}), not {article(' or '.join(writes))} model as "
        "this script trains and reads: give another --output_dir")


def pin_options(namespace, description, defaults, names):
  """The task.json entries `names` that shape what a trained model computes (a classifier's
  multi_label, doc_stride, window_pooling, label_separator), taken from the model directory
  `description`: not given, the directory's (absent from task.json: the flag's default, e.g.
  no windows); given and different, a one-line ValueError naming the flag, the directory and
  its task.json (conflict_error). Only where the directory is the model the run uses (its
  --output_dir, or --init_checkpoint without --do_train: a warm start trains a new head)."""
  if description["source"] != "output_dir" and settings.values_of(namespace).get("do_train"):
    return
  taken = []
  for name in names:
    if name not in defaults:
      continue
    own = description.get(name)
    trained = f"{name}={own}" if own is not None else f"no {name}"
    own = defaults[name] if own is None else own
    if name not in description["given"]:
      setattr(namespace, name, own)
      taken.append(f"{name}={own}")
    elif getattr(namespace, name) != own:
      raise conflict_error(name, getattr(namespace, name), description, (
          f"the model was trained with {trained} "
          f"({os.path.join(description['directory'], TASK_FILE)})"))
  if taken:
    logging.info("From %s: %s", os.path.join(description["directory"], TASK_FILE),
                 ", ".join(taken))


def resolve_options(options, defaults, fill=(), pin=(), writes=()):
  """A run_* script's options completed from a model directory (source_model_dir), checked
  against it and against the run that made --output_dir (check_rerun).

  options: parsed absl FLAGS or a namespace over `defaults` (the script's DEFAULTS). Returns
  (namespace, description): a copy of the options where MODEL_OPTIONS and the task.json
  entries named in `fill` (e.g. doc_stride) that were not given are the directory's, those
  named in `pin` are the directory's and may not be given otherwise (pin_options), and
  read_model_dir's dict of that directory (or None; its "given" entry is the set of options
  given explicitly). An option given and in conflict with the directory is a one-line
  ValueError naming the flag and the directory (conflicts). writes: the task.json kinds the
  script writes; an --output_dir holding another kind's model is refused (check_kind).
  Without a model directory the options are the script's defaults, as before.
  """
  namespace, given = options_namespace(options, defaults)
  check_kind(namespace, writes)
  _readable(check_rerun, namespace, given)
  description = None
  if not settings.values_of(namespace).get(settings.MOVE_ASIDE):
    description = source_model_dir(namespace)
  elif settings.values_of(namespace).get("init_checkpoint"):
    description = _readable(read_model_dir, namespace.init_checkpoint)
    description = description and dict(description, source="init_checkpoint")
  if description is None:
    _fill_from_checkpoint_dir(namespace, given)
    return namespace, None
  description["given"] = given
  raise_conflicts({name: getattr(namespace, name) for name in given
                   if name in ("bert_config_file", "vocab_file", "do_lower_case")},
                  description)
  for name in MODEL_OPTIONS + tuple(fill):
    value = description.get(name)
    if name not in given and value is not None and name in defaults:
      setattr(namespace, name, value)
  pin_options(namespace, description, defaults, pin)
  logging.info("Model files from %s (%s)", description["directory"], ", ".join(
      f"{name}={getattr(namespace, name)}" for name in MODEL_OPTIONS + tuple(fill)
      if name in defaults and name not in given and description.get(name) is not None))
  return namespace, description


# The options that a checkpoint directory without task.json (a HuggingFace directory, Google's
# released model) supplies when they are not given.
CHECKPOINT_DIR_OPTIONS = ("bert_config_file", "vocab_file", "do_lower_case")


def checkpoint_dir_files(path):
  """{"directory", "bert_config_file", "vocab_file", "do_lower_case"} of the directory of the
  checkpoint `path` (model_files.model_dir_of) when it holds a config (bert_config.json or
  HuggingFace's config.json) and a vocab.txt but no task.json: a HuggingFace directory
  (config.json, vocab.txt, model.safetensors) or Google's released model (bert_config.json,
  vocab.txt, bert_model.ckpt), as checkpoints.load_model reads them; else None.
  do_lower_case: tokenizer_config.json's, else what the vocabulary suggests (None: unknown)."""
  directory = model_dir_of(path)
  vocab_file = os.path.join(directory, model_files.VOCAB_FILE)
  if not (tf.io.gfile.isdir(directory) and tf.io.gfile.exists(vocab_file)):
    return None
  try:
    config_file = model_files.config_file_in(directory, path)
  except ValueError:
    return None
  return {"directory": directory, "bert_config_file": config_file, "vocab_file": vocab_file,
          "do_lower_case": model_files.read_do_lower_case(directory, vocab_file)}


def _fill_from_checkpoint_dir(namespace, given):
  """The options of CHECKPOINT_DIR_OPTIONS not given, from --init_checkpoint's directory when
  it is a checkpoint directory without task.json (checkpoint_dir_files), with a log line.
  Given ones are kept (a config that does not fit the checkpoint is refused by
  run_checks)."""
  init_checkpoint = settings.values_of(namespace).get("init_checkpoint")
  found = init_checkpoint and _readable(checkpoint_dir_files, init_checkpoint)
  if not found:
    return
  filled = []
  for name in CHECKPOINT_DIR_OPTIONS:
    if name not in given and found[name] is not None and hasattr(namespace, name):
      setattr(namespace, name, found[name])
      filled.append(f"{name}={found[name]}")
  if filled:
    logging.info("Model files from %s (%s)", found["directory"], ", ".join(filled))


def check_labels(labels, description, flag):
  """A ValueError naming `flag` when the run's `labels` (a list; None: regression) differ
  from the model directory's (description; nothing to check when None, or when the
  directory describes no labelled task: a kind with labels or a classifier's variant)."""
  if description is None:
    return
  kind = task_registry.of_description(description)
  if not (kind.labels or kind.variant_of):  # (a classifier, its variants, a tagger)
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
  values = settings.values_of(options)
  output_dir = values.get("output_dir")
  if not (values.get("do_train") and output_dir):
    return
  path = os.path.join(output_dir, OPTIONS_FILE)
  if values.get("overwrite_output_dir"):
    if tf.io.gfile.isdir(output_dir) and [
        name for name in tf.io.gfile.listdir(output_dir) if not name.startswith(".")]:
      check_holds_no_inputs(options)
      setattr(options, settings.MOVE_ASIDE, True)
    return
  if not tf.io.gfile.exists(path) or not _has_checkpoint(output_dir):
    return  # (a run that failed before its first checkpoint trained nothing to resume)
  old = model_files.read_json_object(path)
  changes = _changed_options(old, options_dict(options), given, output_dir)
  if changes:
    raise ValueError(
        f"--output_dir {output_dir} holds a training run with other options ("
        + "; ".join(changes) + "): give --overwrite_output_dir to move it aside and start "
        "over, or another --output_dir")


# The options that name a run's input files or directories (a comma-separated list or a glob
# for --input_file): --overwrite_output_dir must not move them aside (check_holds_no_inputs).
INPUT_OPTIONS = ("data_dir", "init_checkpoint", "vocab_file", "bert_config_file", "train_file",
                 "predict_file", "input_file", "tfds_data_dir", "candidates_file",
                 "test_candidates_file")


def _comparable_path(path):
  """`path` made absolute with its links resolved (local), or without trailing slashes."""
  path = path.strip()
  if re.search(r"[*?\[]", path):  # a glob: the directory its files are in
    path = os.path.dirname(re.split(r"[*?\[]", path, maxsplit=1)[0]) or "."
  return path.rstrip("/") if file_io.is_remote(path) else os.path.realpath(path)


def check_holds_no_inputs(options):
  """A one-line ValueError naming both flags when --output_dir is, or holds, one of the run's
  inputs (INPUT_OPTIONS: --data_dir, --init_checkpoint, --vocab_file, ...):
  --overwrite_output_dir would move it aside and train on without it (or on nothing)."""
  values = settings.values_of(options)
  output_dir = _comparable_path(options.output_dir)
  for name in INPUT_OPTIONS:
    value = values.get(name)
    for path in (value.split(",") if isinstance(value, str) and value else ()):
      if not path.strip():
        continue
      input_path = _comparable_path(path)
      if input_path == output_dir or input_path.startswith(output_dir.rstrip("/") + "/"):
        raise ValueError(
            f"--output_dir {options.output_dir} holds --{name} {path.strip()}: "
            "--overwrite_output_dir would move the run's input aside; choose another "
            "--output_dir")


def move_aside(output):
  """--overwrite_output_dir (a settings.OutputDir's move_aside, as check_rerun decided): moves
  everything in --output_dir (but its lock) into <output_dir>.old-<YYYYmmdd-HHMMSS>, with a
  log line; run by the chief holding the directory's lock."""
  if not output.move_aside:
    return
  output_dir = output.output_dir.rstrip("/")
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


def prepare(run, chief, config, task, labels=None, **task_options):
  """The model files of a run_* script, in its locked --output_dir (chief only): the earlier
  run moved aside first (move_aside), then write_model_dir; run_options.json only by a
  --do_train run into a directory without one (a resumed run keeps the options it started
  with; an eval- or predict-only run never writes it). Called before the first checkpoint.
  run: the script's settings.RunSettings (its recorded options go to run_options.json)."""
  if not chief:
    return
  move_aside(run.output)
  output_dir = run.output.output_dir
  write_options = bool(run.training.do_train) and not (
      tf.io.gfile.exists(os.path.join(output_dir, OPTIONS_FILE))
      and _has_checkpoint(output_dir))
  if not write_options and tf.io.gfile.exists(os.path.join(output_dir, TASK_FILE)):
    return  # a finished model directory: its files stay as training wrote them
  write_model_dir(output_dir, run.recorded, config, task, labels,
                  write_options=write_options, **task_options)
