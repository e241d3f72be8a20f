# coding=utf-8
"""The files of a model directory, written and read in one place: what a run_* script writes
beside its checkpoints (runtime/model_dir.py resolves flags from them) and what
checkpoints.load_model / save_pretrained read and write.

  bert_config.json       the model's BertConfig (HuggingFace's directories: config.json)
  vocab.txt              the WordPiece vocabulary (a copy of --vocab_file)
  tokenizer_config.json  {"do_lower_case": bool} (HuggingFace's name for it)
  labels.txt             one label a line, in the order of the model's outputs (classifiers,
                         multi-label classifiers and taggers; absent otherwise)
  task.json              {"task": "classifier"|"regression"|"tagger"|"squad", "multi_label",
                         "labels", "max_seq_length", "do_lower_case", and the task's options}
  run_options.json       the run's options (its flags) as JSON

Each is written atomically (file_io.write_text_atomic, a copy under a temporary name).
"""

import json
import os

import tensorflow as tf

from bert_keras import modeling
from bert_keras.utils import file_io

CONFIG_FILE = "bert_config.json"
HF_CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
LABELS_FILE = "labels.txt"
TASK_FILE = "task.json"
OPTIONS_FILE = "run_options.json"
MODEL_FILES = (CONFIG_FILE, VOCAB_FILE, TOKENIZER_CONFIG_FILE, LABELS_FILE, TASK_FILE,
               OPTIONS_FILE)


# ----------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------

def json_value(value):
  """`value` if JSON can hold it, else its str (a path object, an enum)."""
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  if isinstance(value, (list, tuple)):
    return [json_value(v) for v in value]
  if isinstance(value, dict):
    return {str(k): json_value(v) for k, v in value.items()}
  return str(value)


def options_dict(options):
  """The run's options (a namespace of run() options) as a JSON-ready dict, sorted."""
  return {key: json_value(value) for key, value in sorted(vars(options).items())
          if not key.startswith("_")}


def write_labels(directory, labels):
  """labels.txt in `directory`: the labels (strs) one a line, in order."""
  file_io.write_text_atomic(os.path.join(directory, LABELS_FILE),
                            "".join("%s\n" % label for label in labels))


def write_tokenizer_config(directory, do_lower_case):
  """tokenizer_config.json in `directory`: {"do_lower_case": bool}."""
  file_io.write_text_atomic(os.path.join(directory, TOKENIZER_CONFIG_FILE),
                            json.dumps({"do_lower_case": bool(do_lower_case)}) + "\n")


def copy_file(source, target):
  """`source` copied to `target` under a temporary name, then renamed."""
  tmp = file_io.temp_name(target)
  tf.io.gfile.copy(source, tmp, overwrite=True)
  tf.io.gfile.rename(tmp, target, overwrite=True)


def write_model_files(directory, options, config, task, labels=None, write_options=True,
                      **task_options):
  """Writes the model files into `directory` (which exists): bert_config.json, vocab.txt
  (copied from options.vocab_file unless it is that file), tokenizer_config.json (when the
  options have do_lower_case), labels.txt (when `labels`), task.json and (when
  write_options) run_options.json.

  options: the run's options namespace (vocab_file, do_lower_case, max_seq_length are read).
  config: the modeling.BertConfig. task: the task.json "task" (runtime/model_dir.TASKS).
  labels: the output labels in order, or None. task_options: further task.json entries
  (multi_label, thresholds, doc_stride, ...).
  """
  join = lambda name: os.path.join(directory, name)  # noqa: E731
  do_lower_case = getattr(options, "do_lower_case", None)
  do_lower_case = None if do_lower_case is None else bool(do_lower_case)
  if labels is not None:
    write_labels(directory, labels)
  file_io.write_text_atomic(join(CONFIG_FILE), config.to_json_string())
  if do_lower_case is not None:
    write_tokenizer_config(directory, do_lower_case)
  description = {"task": task, "multi_label": False,
                 "labels": list(labels) if labels is not None else None,
                 "max_seq_length": getattr(options, "max_seq_length", None),
                 "do_lower_case": do_lower_case}
  description.update(task_options)
  file_io.write_text_atomic(join(TASK_FILE),
                            json.dumps(json_value(description), indent=2) + "\n")
  if write_options:
    file_io.write_text_atomic(join(OPTIONS_FILE),
                              json.dumps(options_dict(options), indent=2) + "\n")
  vocab_file = getattr(options, "vocab_file", None)
  if vocab_file and os.path.abspath(vocab_file) != os.path.abspath(join(VOCAB_FILE)):
    copy_file(vocab_file, join(VOCAB_FILE))


def copy_model_files(source, target):
  """The model files (MODEL_FILES) present in `source` copied into `target` (best/)."""
  for name in MODEL_FILES:
    path = os.path.join(source, name)
    if tf.io.gfile.exists(path):
      copy_file(path, os.path.join(target, name))


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------

def read_json_object(path):
  """The JSON object (a dict) in `path`; a ValueError naming it otherwise."""
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


def read_model_files(path):
  """task.json of the model directory of `path` (model_dir_of), with "directory" (where it
  was found), "bert_config_file", "vocab_file" (None when absent) and "options" (the dict of
  run_options.json, {} when absent) added; None when there is no task.json. A task.json that
  is not a JSON object, or whose "labels" are not distinct non-empty names, is a ValueError
  naming it (its "task" is checked by runtime/model_dir.read_model_dir)."""
  directory = model_dir_of(os.fspath(path))
  task_file = os.path.join(directory, TASK_FILE)
  if not tf.io.gfile.exists(task_file):
    return None
  description = read_json_object(task_file)
  labels = description.get("labels")
  if labels is not None and (not isinstance(labels, list) or len(set(map(str, labels)))
                             != len(labels) or "" in labels):
    raise ValueError("%s: \"labels\" must be a list of distinct non-empty names" % task_file)
  existing = lambda name: (os.path.join(directory, name)  # noqa: E731
                           if tf.io.gfile.exists(os.path.join(directory, name)) else None)
  options_file = existing(OPTIONS_FILE)
  description.update(directory=directory, bert_config_file=existing(CONFIG_FILE),
                     vocab_file=existing(VOCAB_FILE),
                     options=read_json_object(options_file) if options_file else {})
  return description


def read_task(directory):
  """The "task" of task.json in `directory`, or None (none there, or unreadable)."""
  path = os.path.join(directory, TASK_FILE)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    try:
      return json.loads(f.read()).get("task")
    except (ValueError, AttributeError):
      return None


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


def config_file_in(directory, path):
  """bert_config.json or (HuggingFace's) config.json in `directory`; a ValueError naming the
  checkpoint `path` without either."""
  for name in (CONFIG_FILE, HF_CONFIG_FILE):
    candidate = os.path.join(directory, name)
    if tf.io.gfile.exists(candidate):
      return candidate
  raise ValueError("%s: no bert_config.json or config.json beside the checkpoint; pass "
                   "bert_config_file" % path)


def read_do_lower_case(directory, vocab_file):
  """tokenizer_config.json's do_lower_case, else what the vocabulary suggests (a cased
  vocabulary has upper-case words besides the [CLS]-style special tokens), else None."""
  tokenizer_config = os.path.join(directory, TOKENIZER_CONFIG_FILE)
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


def check_model_files(directory, bert_config_file, config, vocab_file, do_lower_case):
  """load_model's arguments against a model directory's own files (only where `directory`
  holds a run_* script's task.json): a ValueError naming the argument and the file."""
  if not tf.io.gfile.exists(os.path.join(directory, TASK_FILE)):
    return
  own = os.path.join(directory, CONFIG_FILE)
  if bert_config_file and tf.io.gfile.exists(own) and (
      modeling.BertConfig.from_json_file(own).to_dict() != config.to_dict()):
    raise ValueError("bert_config_file=%s conflicts with the model directory's %s"
                     % (bert_config_file, own))
  own = os.path.join(directory, VOCAB_FILE)
  if vocab_file and tf.io.gfile.exists(own):
    with tf.io.gfile.GFile(own) as a, tf.io.gfile.GFile(vocab_file) as b:
      if a.read().split() != b.read().split():
        raise ValueError("vocab_file=%s conflicts with the model directory's %s"
                         % (vocab_file, own))
  lower = read_do_lower_case(directory, None)
  if do_lower_case is not None and lower is not None and bool(do_lower_case) != lower:
    raise ValueError("do_lower_case=%s conflicts with the model directory %s (trained with "
                     "do_lower_case=%s)" % (do_lower_case, directory, lower))
