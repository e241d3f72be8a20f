"""The files of a model directory, written and read in one place: what a run_* script writes
beside its checkpoints (runtime/model_dir.py resolves flags from them) and what
checkpoints.load_model / save_pretrained read and write.

  bert_config.json       the model's BertConfig (HuggingFace's directories: config.json)
  vocab.txt              the WordPiece vocabulary (a copy of --vocab_file)
  tokenizer_config.json  {"do_lower_case": bool} (HuggingFace's name for it)
  labels.txt             one label a line, in the order of the model's outputs (classifiers,
                         multi-label classifiers and taggers; absent otherwise)
  task.json              {"task": "classifier"|"regression"|"tagger"|"squad", "multi_label",
                         "labels", "max_seq_length", "do_lower_case", and the task's options
                         (thresholds, doc_stride, ...; "pair": true for a classifier trained
                         on pairs of texts)}
  run_options.json       the run's options (its flags) as JSON, and "_task_kind": the task
                         kind (task_registry) of the head the run trained, which task.json's
                         "task" must agree with (RECORDED_KIND)

One reader, read_model_files, checks every field of task.json and run_options.json against
its type and bounds and against the other files (labels.txt, bert_config.json,
tokenizer_config.json: check_description) and, inside checkpoints.load_model, against the
checkpoint's head (check_head); every entry point (predict.py, load_model, export_saved_model,
convert_checkpoint, the run_* scripts through runtime/model_dir.py) reads a directory through
it. A wrong field is a one-line ValueError naming the file and the field.

A sentence-transformers directory (modules.json, 1_Pooling/, ...) is read and written by
sentence_transformers_layout.py, as a run_embeddings model directory.

Each is written atomically (file_io.write_text_atomic, a copy under a temporary name).
"""

import collections.abc
import json
import math
import os

from absl import logging

from bert_keras import modeling
from bert_keras import task_registry
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
  """The run's options (a namespace of run() options, or a {name: value} mapping:
  settings.RunSettings.recorded) as a JSON-ready dict, sorted."""
  values = options if isinstance(options, collections.abc.Mapping) else vars(options)
  return {key: json_value(value) for key, value in sorted(values.items())
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
  file_io.copy_atomic(source, target)


def write_model_files(directory, options, config, task, labels=None, write_options=True,
                      **task_options):
  """Writes the model files into `directory` (which exists): bert_config.json, vocab.txt
  (copied from options.vocab_file unless it is that file), tokenizer_config.json (when the
  options have do_lower_case), labels.txt (when `labels`), task.json and (when
  write_options) run_options.json.

  options: the run's options, a namespace or a {name: value} mapping (options_dict; its
  vocab_file, do_lower_case and max_seq_length are read).
  config: the modeling.BertConfig. task: the task.json "task" (runtime/model_dir.TASKS).
  labels: the output labels in order, or None. task_options: further task.json entries
  (multi_label, thresholds, doc_stride, ...).
  """
  join = lambda name: os.path.join(directory, name)  # noqa: E731
  values = options_dict(options)
  do_lower_case = values.get("do_lower_case")
  do_lower_case = None if do_lower_case is None else bool(do_lower_case)
  if labels is not None:
    write_labels(directory, labels)
  file_io.write_text_atomic(join(CONFIG_FILE), config.to_json_string())
  if do_lower_case is not None:
    write_tokenizer_config(directory, do_lower_case)
  unknown = sorted(set(task_options) - set(TASK_FIELDS))
  if unknown:
    raise ValueError("task.json: unknown field %s (known: %s)" % (
        ", ".join(repr(name) for name in unknown), ", ".join(TASK_FIELDS)))
  description = {"task": task, "multi_label": False,
                 "labels": list(labels) if labels is not None else None,
                 "max_seq_length": values.get("max_seq_length"),
                 "do_lower_case": do_lower_case}
  description.update(task_options)
  file_io.write_text_atomic(join(TASK_FILE),
                            json.dumps(json_value(description), indent=2) + "\n")
  if write_options:
    recorded = dict(values)
    recorded[RECORDED_KIND] = task_registry.of_description(description).name
    file_io.write_text_atomic(join(OPTIONS_FILE), json.dumps(recorded, indent=2) + "\n")
  vocab_file = values.get("vocab_file")
  if vocab_file and os.path.abspath(vocab_file) != os.path.abspath(join(VOCAB_FILE)):
    copy_file(vocab_file, join(VOCAB_FILE))


def copy_model_files(source, target):
  """The model files (MODEL_FILES) present in `source` copied into `target` (best/)."""
  for name in MODEL_FILES:
    path = os.path.join(source, name)
    if file_io.gfile.exists(path):
      copy_file(path, os.path.join(target, name))


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------

def read_json(path):
  """The JSON value in `path`; a ValueError naming it when it is not JSON."""
  with file_io.gfile.GFile(path) as f:
    text = f.read()
  try:
    return json.loads(text)
  except ValueError as e:
    raise ValueError("%s: not valid JSON (%s)" % (path, e)) from None


def read_json_object(path):
  """The JSON object (a dict) in `path`; a ValueError naming it otherwise."""
  value = read_json(path)
  if not isinstance(value, dict):
    raise ValueError("%s: expected a JSON object" % path)
  return value


def model_dir_of(path):
  """The directory whose files describe the checkpoint at `path` (a directory, its best/,
  or a checkpoint prefix): `path` or its directory, or the parent of a best/ without a
  task.json of its own."""
  directory = path if file_io.gfile.isdir(path) else os.path.dirname(path)
  if (not file_io.gfile.exists(os.path.join(directory, TASK_FILE))
      and os.path.basename(directory.rstrip("/")) == "best"):
    parent = os.path.dirname(directory.rstrip("/"))
    if file_io.gfile.exists(os.path.join(parent, TASK_FILE)):
      return parent
  return directory


def read_model_files(path):
  """task.json of the model directory of `path` (model_dir_of), checked (check_description),
  with "directory" (where it was found), "bert_config_file", "vocab_file" (None when absent)
  and "options" (the dict of run_options.json, {} when absent) added, and "labels" those of
  labels.txt where task.json has none; None when there is no task.json (a
  sentence-transformers directory: sentence_transformers_layout.read_model_files reads it
  too). A file or field that is wrong, or that disagrees with another, is a one-line
  ValueError naming the file and the field."""
  directory = model_dir_of(os.fspath(path))
  task_file = os.path.join(directory, TASK_FILE)
  if not file_io.gfile.exists(task_file):
    return None
  description = read_json_object(task_file)
  existing = lambda name: (os.path.join(directory, name)  # noqa: E731
                           if file_io.gfile.exists(os.path.join(directory, name)) else None)
  options_file = existing(OPTIONS_FILE)
  options = read_json_object(options_file) if options_file else {}
  description = check_description(description, directory, options)
  description.update(directory=directory, bert_config_file=existing(CONFIG_FILE),
                     vocab_file=existing(VOCAB_FILE), options=options)
  return description


def read_task(directory):
  """The "task" of task.json in `directory`, or None (none there, or unreadable)."""
  path = os.path.join(directory, TASK_FILE)
  if not file_io.gfile.exists(path):
    return None
  with file_io.gfile.GFile(path) as f:
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
    if path and file_io.gfile.exists(path):
      return _read_labels_file(path)
  return None


def _read_labels_file(path):
  with file_io.gfile.GFile(path) as f:
    labels = [line.strip() for line in f.read().splitlines()]
  while labels and not labels[-1]:
    labels.pop()
  if not labels or "" in labels or len(set(labels)) != len(labels):
    raise ValueError("%s: expected distinct non-empty tags, one a line" % path)
  return labels


def config_file_in(directory, path):
  """bert_config.json or (HuggingFace's) config.json in `directory`; a ValueError naming the
  checkpoint `path` without either."""
  for name in (CONFIG_FILE, HF_CONFIG_FILE):
    candidate = os.path.join(directory, name)
    if file_io.gfile.exists(candidate):
      return candidate
  raise ValueError("%s: no bert_config.json or config.json beside the checkpoint; pass "
                   "bert_config_file" % path)


def read_do_lower_case(directory, vocab_file):
  """tokenizer_config.json's do_lower_case, else what the vocabulary suggests (a cased
  vocabulary has upper-case words besides the [CLS]-style special tokens), else None."""
  tokenizer_config = os.path.join(directory, TOKENIZER_CONFIG_FILE)
  if file_io.gfile.exists(tokenizer_config):
    with file_io.gfile.GFile(tokenizer_config) as f:
      try:
        value = json.loads(f.read()).get("do_lower_case")
      except (ValueError, AttributeError):
        value = None
    if isinstance(value, bool):
      return value
  if vocab_file is None:
    return None
  with file_io.gfile.GFile(vocab_file) as f:
    words = [line.strip() for line in f]
  return not any(w != w.lower() for w in words if not (w.startswith("[") and w.endswith("]")))


def check_vocab_fits(config, vocab, vocab_name, config_name):
  """A ValueError naming the vocabulary and the config when the vocabulary `vocab` (a token ->
  id mapping, or its number of ids) has ids the model's embedding table lacks (vocab_size): on
  a CPU a GatherV2 traceback once the model runs, on a GPU zeros read silently. The one rule,
  for --vocab_file (runtime/run_checks.py) and a model directory's vocab.txt
  (checkpoints.load_model); vocab_name and config_name say which ("--vocab_file x", a path)."""
  largest = (vocab - 1 if isinstance(vocab, int) else max(vocab.values(), default=-1))
  if largest >= config.vocab_size:
    raise ValueError(f"{vocab_name} has ids up to {largest}, beyond the vocab_size "
                     f"{config.vocab_size} of {config_name} (does the vocab belong to this "
                     "model?)")
  # Fewer ids than rows is legal (a table padded to a round size), but far fewer means most
  # words read as [UNK]: said, not refused.
  if largest + 1 < 0.9 * config.vocab_size:
    logging.warning("%s has %d ids where the vocab_size of %s is %d: most of the embedding "
                    "table is never read (does the vocab belong to this model?)", vocab_name,
                    largest + 1, config_name, config.vocab_size)


def check_model_files(directory, bert_config_file, config, vocab_file, do_lower_case,
                      head=None):
  """load_model's arguments against a model directory's own files (only where `directory`
  holds a run_* script's task.json): a ValueError naming the argument and the file. The
  directory's files are read as read_model_files reads them (checked against each other) and,
  given `head` (checkpoints.checkpoint_head of the checkpoint: (its head, the head's outputs
  or None)), against the checkpoint (check_head)."""
  description = read_model_files(directory)
  if head is not None and description is not None and description.get("layout") is None:
    check_head(description, *head)
  if not file_io.gfile.exists(os.path.join(directory, TASK_FILE)):
    return
  own = os.path.join(directory, CONFIG_FILE)
  if bert_config_file and file_io.gfile.exists(own) and (
      modeling.BertConfig.from_json_file(own).to_dict() != config.to_dict()):
    raise ValueError("bert_config_file=%s conflicts with the model directory's %s"
                     % (bert_config_file, own))
  own = os.path.join(directory, VOCAB_FILE)
  if vocab_file and file_io.gfile.exists(own):
    with file_io.gfile.GFile(own) as a, file_io.gfile.GFile(vocab_file) as b:
      if a.read().split() != b.read().split():
        raise ValueError("vocab_file=%s conflicts with the model directory's %s"
                         % (vocab_file, own))
  lower = read_do_lower_case(directory, None)
  if do_lower_case is not None and lower is not None and bool(do_lower_case) != lower:
    raise ValueError("do_lower_case=%s conflicts with the model directory %s (trained with "
                     "do_lower_case=%s)" % (do_lower_case, directory, lower))


# ----------------------------------------------------------------------------------------------
# Checking a model directory: every field of task.json and run_options.json, against each
# other, labels.txt, bert_config.json, tokenizer_config.json and the checkpoint's head
# ----------------------------------------------------------------------------------------------

# The window parameters (the sliding windows over long texts: tasks/windows.py): the least
# value of each, in option_checks.AT_LEAST's form {name: (minimum, why)}. The one table of
# their bounds: task.json, run_options.json (check_description) and predict's flags
# (prediction/predictors.py, through option_checks) are checked against it.
WINDOW_LIMITS = {
    "max_seq_length": (3, "[CLS], a word piece and [SEP]"),
    "doc_stride": (1, "each window starts after the one before"),
    "max_query_length": (0, None),
    "max_answer_length": (1, None),
}

# Every entry a task.json may hold: write_model_files' own, and the task options the run_*
# scripts write (runtime/model_dir.prepare). Another key (a misspelt "treshold") is refused
# by the reader (check_description) and by the writer.
TASK_FIELDS = ("task", "multi_label", "labels", "max_seq_length", "do_lower_case", "pair",
               "task_name", "thresholds", "label_separator", "doc_stride", "window_pooling",
               "max_query_length", "max_answer_length", "version_2_with_negative", "pooling",
               "normalize", "max_predictions_per_seq")

# run_options.json's record of the task kind (task_registry: "tagger", "multi_label", ...)
# whose head the run trained, written beside the run's options by write_model_files (the
# leading underscore: no option, check_rerun skips it). Older directories have none; there
# an option that only run_classifier has (_CLASSIFIER_OPTIONS) tells a classifier's run.
RECORDED_KIND = "_task_kind"
_CLASSIFIER_OPTIONS = ("window_pooling", "label_separator")

# task.json's true-or-false entries, and its entries that are a string when given.
_BOOL_FIELDS = ("multi_label", "do_lower_case", "normalize", "pair")
_STR_FIELDS = ("window_pooling", "label_separator", "task_name")
_COLUMN_OPTIONS = ("text_a_column", "text_b_column")
# The entries run_classifier alone writes (tasks/classifier/options.py.model_description): in the
# task.json of another kind, the directory is a classifier's with its "task" changed.
_CLASSIFIER_ENTRIES = ("task_name", "thresholds", "label_separator", "window_pooling")


def _is_int(value):
  return isinstance(value, int) and not isinstance(value, bool)


def names_problem(names):
  """Why `names` (a JSON value) is not a non-empty list of distinct non-empty names (strs), in
  words; None when it is one."""
  if not isinstance(names, list) or not names:
    return "must be a non-empty list of names"
  if not all(isinstance(name, str) for name in names):
    return "must be names (strings)"
  if any(not name.strip() for name in names):
    return "has an empty name"
  repeated = sorted({name for name in names if names.count(name) > 1})
  if repeated:
    return "repeats %s" % ", ".join(repeated)
  return None


def window_problem(name, value):
  """Why `value` is not a window parameter `name` (WINDOW_LIMITS: an int, not a bool, at
  least its minimum), in words; None when it is one."""
  minimum, why = WINDOW_LIMITS[name]
  if not _is_int(value):
    return "must be an integer"
  if value < minimum:
    return "must be >= %d%s" % (minimum, " (%s)" % why if why else "")
  return None


def stride_problem(doc_stride, max_seq_length, length="--max_seq_length"):
  """Why `doc_stride` cannot step run_classifier's windows (tasks/classifier/doc_windows.py)
  over a text at `max_seq_length` (named `length` in the words): a stride not smaller than a
  window's room, max_seq_length - 2 ([CLS] and [SEP]), would skip word pieces. None when it can, or
  when doc_stride is 0 or None (no windows). The one home of the rule: run_classifier's flags,
  task.json, run_options.json and predict's --max_seq_length are checked with it."""
  if doc_stride and max_seq_length is not None and doc_stride >= max_seq_length - 2:
    return ("must be smaller than %s minus the special tokens (%d - 2 = %d), or windows would "
            "skip word pieces" % (length, max_seq_length, max_seq_length - 2))
  return None


def thresholds_problem(thresholds, count):
  """Why `thresholds` is not a multi-label classifier's thresholds (one number in [0, 1], or
  `count` of them; count None: any number), in words; None when it is."""
  values = thresholds if isinstance(thresholds, list) else [thresholds]
  if not values or not all(isinstance(t, (int, float)) and not isinstance(t, bool)
                           and math.isfinite(t) and 0 <= t <= 1 for t in values):
    return "must be numbers between 0 and 1"
  if isinstance(thresholds, list) and count is not None and len(values) not in (1, count):
    return "must be one threshold or one per label (%d)" % count
  return None


def _fail(path, field, problem, value):
  raise ValueError("%s: \"%s\" %s, got %s" % (path, field, problem, json.dumps(value)[:80]))


def check_description(description, directory, options):
  """task.json's dict `description` of the model directory `directory` checked, field by field
  and against the directory's other files; returns it with "labels" those of labels.txt where
  it has none. options: run_options.json's dict ({} when absent). A one-line ValueError
  names the file and the field at fault:
    "task"            one of task_registry.task_json_names()
    "labels"          a labelled kind's (classifier, tagger) distinct non-empty names, equal to
                      labels.txt's when both are there; null for the other kinds
    "max_seq_length"  an int >= 3 (WINDOW_LIMITS), at most bert_config.json's
                      max_position_embeddings
    doc_stride, max_query_length, max_answer_length: null or as WINDOW_LIMITS says
    thresholds        null, or numbers in [0, 1] (one, or one per label)
    multi_label, do_lower_case (equal to tokenizer_config.json's), normalize, pair: booleans
    pooling (modeling.POOLINGS), window_pooling, label_separator, task_name: strings
  and run_options.json's window parameters (WINDOW_LIMITS; a doc_stride of 0 is
  run_classifier's "no windows") and text columns (strings). A key not in TASK_FIELDS is
  refused; so are a classifier's doc_stride not below max_seq_length - 2 (stride_problem, in
  either file) and a "task" that disagrees with the run that trained the head
  (run_options.json's RECORDED_KIND or run_classifier's options; a HuggingFace config.json's
  architectures)."""
  path = os.path.join(directory, TASK_FILE)
  unknown = [name for name in description if name not in TASK_FIELDS]
  if unknown:
    raise ValueError("%s: unknown field %r (known: %s)" % (path, unknown[0],
                                                           ", ".join(TASK_FIELDS)))
  task = description.get("task")
  if task not in task_registry.task_json_names():
    _fail(path, "task", "must be one of %s" % ", ".join(task_registry.task_json_names()), task)
  for field in _BOOL_FIELDS:
    if description.get(field) is not None and not isinstance(description[field], bool):
      _fail(path, field, "must be true or false", description[field])
  for field in _STR_FIELDS:
    if description.get(field) is not None and not isinstance(description[field], str):
      _fail(path, field, "must be a string", description[field])
  kind = task_registry.of_description(description)
  if "classifier" not in (kind.name, kind.variant_of):
    for field in _CLASSIFIER_ENTRIES:
      if description.get(field) is not None:
        _fail(path, field, "is a classifier's entry (run_classifier), but \"task\" is %s: is "
              "it a classifier's model directory?" % task, description[field])
  labels = _check_labels(description, directory, kind)
  if description.get("pooling") is not None and description["pooling"] not in modeling.POOLINGS:
    _fail(path, "pooling", "must be one of %s" % ", ".join(modeling.POOLINGS),
          description["pooling"])
  if description.get("thresholds") is not None or (  # (a multi-label's null: not thresholds)
      "thresholds" in description and kind.family.thresholds):
    problem = thresholds_problem(description["thresholds"], len(labels) if labels else None)
    if problem:
      _fail(path, "thresholds", problem, description["thresholds"])
  _check_windows(description, directory)
  _check_lower_case(description, directory)
  options_path = os.path.join(directory, OPTIONS_FILE)
  for name in WINDOW_LIMITS:
    value = options.get(name)
    if value is not None and not (name == "doc_stride" and value == 0):
      problem = window_problem(name, value)
      if problem:
        _fail(options_path, name, problem, value)
  for name in _COLUMN_OPTIONS:
    if options.get(name) is not None and not isinstance(options[name], str):
      _fail(options_path, name, "must be a string", options[name])
  if kind.doc_windows:  # run_classifier's windows (tasks/classifier/doc_windows)
    for where, values in ((path, description), (options_path, options)):
      problem = stride_problem(values.get("doc_stride"), values.get("max_seq_length"),
                               '"max_seq_length"')
      if problem:
        _fail(where, "doc_stride", problem, values["doc_stride"])
  _check_recorded_kind(path, kind, options_path, options)
  _check_architectures(path, kind, directory)
  return dict(description, labels=labels)


def _check_recorded_kind(path, kind, options_path, options):
  """task.json's kind against what run_options.json says of the run that trained the head:
  its RECORDED_KIND, else (older directories) whether it has run_classifier's own options. A
  tagger's and a classifier's head variables are named and shaped alike (check_head cannot
  tell them apart); a disagreement is a ValueError naming both files."""
  recorded = options.get(RECORDED_KIND)
  if recorded is not None:
    if recorded != kind.name:
      raise ValueError("%s: \"task\" says a %s model, but %s's \"%s\" says its run trained "
                       "a %s head: is task.json from another model directory?" % (
                           path, kind.name, options_path, RECORDED_KIND, recorded))
    return
  classifier_run = [name for name in _CLASSIFIER_OPTIONS if name in options]
  if classifier_run and "classifier" not in (kind.name, kind.variant_of):
    raise ValueError("%s: \"task\" says a %s model, but %s holds run_classifier's options "
                     "(%s): its run trained a classifier head: is task.json from another "
                     "model directory?" % (path, kind.name, options_path,
                                            ", ".join(classifier_run)))


def _check_architectures(path, kind, directory):
  """task.json's kind against a HuggingFace config.json beside it, where its "architectures"
  name a model class (BertForTokenClassification is a tagger's, ...)."""
  config_file = os.path.join(directory, HF_CONFIG_FILE)
  if not file_io.gfile.exists(config_file):
    return
  architectures = read_json_object(config_file).get("architectures")
  if isinstance(architectures, list) and architectures and all(
      isinstance(a, str) for a in architectures) and kind.hf_architecture not in architectures:
    if kind.hf_architecture is None:
      raise ValueError("%s: \"task\" says a %s model, which has no HuggingFace form, but %s "
                       "names %s" % (path, kind.name, config_file, ", ".join(architectures)))
    raise ValueError("%s: \"task\" says a %s model (%s), but %s's \"architectures\" are %s" % (
        path, kind.name, kind.hf_architecture, config_file, ", ".join(architectures)))


def _check_labels(description, directory, kind):
  """task.json's labels checked against `kind` and labels.txt; returns them (labels.txt's
  when task.json has none)."""
  path = os.path.join(directory, TASK_FILE)
  labels = description.get("labels")
  if labels is not None:
    problem = names_problem(labels)
    if problem:
      _fail(path, "labels", problem, labels)
  if not kind.labels:
    if labels is not None:
      _fail(path, "labels", "must be null: a %s model has no named outputs" % kind.name, labels)
    return None
  labels_file = os.path.join(directory, LABELS_FILE)
  own = _read_labels_file(labels_file) if file_io.gfile.exists(labels_file) else None
  if labels is None and own is None:
    raise ValueError("%s: \"labels\" is missing and there is no %s: a %s model needs the "
                     "names of its outputs" % (path, LABELS_FILE, kind.name))
  if labels is not None and own is not None and labels != own:
    raise ValueError("%s: \"labels\" %s disagree with %s (%s): the two must list the same "
                     "labels in the same order" % (path, ",".join(labels), labels_file,
                                                   ",".join(own)))
  return labels if labels is not None else own


def _check_windows(description, directory):
  """task.json's window parameters (WINDOW_LIMITS); max_seq_length required, and no longer
  than bert_config.json's max_position_embeddings."""
  path = os.path.join(directory, TASK_FILE)
  for name in WINDOW_LIMITS:
    value = description.get(name)
    if value is None and name != "max_seq_length":
      continue
    problem = ("is required (the length the model was trained with)" if value is None
               else window_problem(name, value))
    if problem:
      _fail(path, name, problem, value)
  config_file = os.path.join(directory, CONFIG_FILE)
  if file_io.gfile.exists(config_file):
    positions = read_json_object(config_file).get("max_position_embeddings")
    if _is_int(positions) and description["max_seq_length"] > positions:
      raise ValueError("%s: \"max_seq_length\" %d is longer than %s's "
                       "max_position_embeddings %d" % (path, description["max_seq_length"],
                                                       config_file, positions))


def _check_lower_case(description, directory):
  """task.json's do_lower_case against tokenizer_config.json's, where both say."""
  lower = description.get("do_lower_case")
  tokenizer_config = os.path.join(directory, TOKENIZER_CONFIG_FILE)
  if lower is None or not file_io.gfile.exists(tokenizer_config):
    return
  own = read_json_object(tokenizer_config).get("do_lower_case")
  if isinstance(own, bool) and own != lower:
    raise ValueError("%s: \"do_lower_case\" %s disagrees with %s (%s)" % (
        os.path.join(directory, TASK_FILE), json.dumps(lower), tokenizer_config,
        json.dumps(own)))


def check_head(description, head, outputs):
  """A model directory's task.json (read_model_files' dict) against its checkpoint's head:
  `head` the task whose head variables the checkpoint holds (checkpoints.checkpoint_head:
  "classifier", "squad", "pretrainer" or "encoder"), `outputs` that head's number of outputs
  (None when unknown). A task whose head the checkpoint lacks (a squad task.json over a
  classifier's checkpoint), or labels that are not one per output, is a ValueError naming
  task.json."""
  kind = task_registry.of_description(description)
  wanted = kind.checkpoint_head
  if wanted is None:
    return
  path = os.path.join(description["directory"], TASK_FILE)
  where = "its checkpoint"
  if head != wanted:
    raise ValueError("%s: \"task\" %s needs a %s head, but %s holds %s" % (
        path, description["task"], wanted, where,
        "no head (an encoder)" if head == "encoder" else "a %s head" % head))
  count = len(description["labels"]) if kind.labels else kind.num_labels
  if outputs is not None and count is not None and outputs != count:
    raise ValueError("%s: %d %s, but the head of %s has %d outputs" % (
        path, count, "labels (\"labels\")" if kind.labels else "output(s) (a %s)" % kind.name,
        where, outputs))
