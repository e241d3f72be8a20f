# coding=utf-8
"""A run's output directory is the model: the files written beside its checkpoints so that
export, predict and checkpoints.load_model need nothing else.

  bert_config.json       the model's BertConfig
  vocab.txt              the WordPiece vocabulary (a copy of --vocab_file)
  tokenizer_config.json  {"do_lower_case": bool} (HuggingFace's name for it)
  labels.txt             one label a line, in the order of the model's outputs (classifiers,
                         multi-label classifiers and taggers; absent otherwise)
  task.json              {"task": "classifier"|"regression"|"tagger"|"squad", "multi_label",
                         "labels", "max_seq_length", "do_lower_case", and the task's options}
  run_options.json       the run's options (its flags) as JSON

Each is written atomically; read_model_dir reads them back.
"""

import json
import os

import tensorflow as tf

from bert_keras.utils import file_io

LABELS_FILE = "labels.txt"
TASK_FILE = "task.json"
OPTIONS_FILE = "run_options.json"
TASKS = ("classifier", "regression", "tagger", "squad", "pretraining")


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
  return {key: _json_value(value) for key, value in sorted(vars(options).items())}


def write_model_dir(directory, options, config, task, labels=None, **task_options):
  """Writes the model files into `directory` (which exists): bert_config.json, vocab.txt
  (copied from options.vocab_file unless it is that file), tokenizer_config.json,
  labels.txt (when `labels`), task.json and run_options.json.

  options: the run's options namespace (vocab_file, do_lower_case, max_seq_length are read).
  config: the modeling.BertConfig. task: one of TASKS. labels: the output labels in order, or
  None. task_options: further task.json entries (multi_label, thresholds, doc_stride, ...).
  """
  if task not in TASKS:
    raise ValueError("task must be one of %s, got %r" % (", ".join(TASKS), task))
  join = lambda name: os.path.join(directory, name)  # noqa: E731
  do_lower_case = bool(getattr(options, "do_lower_case", True))
  if labels is not None:
    file_io.write_text_atomic(join(LABELS_FILE), "".join("%s\n" % label for label in labels))
  file_io.write_text_atomic(join("bert_config.json"), config.to_json_string())
  file_io.write_text_atomic(join("tokenizer_config.json"),
                            json.dumps({"do_lower_case": do_lower_case}) + "\n")
  description = {"task": task, "multi_label": False,
                 "labels": list(labels) if labels is not None else None,
                 "max_seq_length": getattr(options, "max_seq_length", None),
                 "do_lower_case": do_lower_case}
  description.update(task_options)
  file_io.write_text_atomic(join(TASK_FILE),
                            json.dumps(_json_value(description), indent=2) + "\n")
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
