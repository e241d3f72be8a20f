"""GLUE and SQuAD read through TensorFlow Datasets (--tfds_name) instead of the TSV / JSON files.

run_classifier: `--tfds_name=glue/<config>` (cola, sst2, mrpc, qqp, stsb, mnli, mnli_matched,
mnli_mismatched, qnli, rte, wnli, ax). Each TFDS example is turned back into the row the GLUE
distribution's TSV file has for it (the columns the processors read; columns TFDS does not keep
are empty) and the task's own processor (`_create_examples(lines, set_type)`) makes the
InputExamples, so labels, guids and texts are the processor's, in file order (TFDS's `idx`,
the example's row in the source file). Known differences, which no reading can undo:
  * a column TFDS drops is empty: MNLI's genre/parses, QQP's train/dev `id` (the row number
    stands in for it: a processor that makes guids from that id gets the row number);
  * rows TFDS dropped as corrupt (a missing field) are not there, and the later guids of a
    processor that numbers lines shift by that count;
  * glue/mnli_mismatched read by the MNLI processor (no mismatched processor registered) names
    its dev examples "dev_mismatched-<index>" (not the processor's "dev_matched").
STS-B's float32 scores are written back as their shortest decimal ("3.8" for "3.800").

run_squad: `--tfds_name=squad/v1.1` or `squad/v2.0` reads the train split for training and the
validation split for prediction. squad_data() rebuilds the SQuAD JSON "data" list (articles by
title, paragraphs by context, in TFDS's order: TFDS does not keep the file order) and
read_squad_examples() runs tasks/squad/data.py's reader over it, so the SquadExamples are the
JSON reader's for the same questions (in TFDS's order). v1.1 questions with several answers
keep them all (TFDS merges duplicated ids' answers, as the official dev file has none).

Nothing here downloads: a name not prepared under --tfds_data_dir is a ValueError saying how
to prepare it. tensorflow_datasets is imported on first use (it is slow to import).
"""

import numpy as np

_PREPARE_HINT = ("run `tfds build {name} --data_dir={data_dir}` on a machine with internet "
                 "access and copy the directory here (this run never downloads){alternative}")


def _tfds():
  import tensorflow_datasets as tfds  # (slow: only when --tfds_name is used)
  return tfds


def builder(name, data_dir=None, alternative=""):
  """The prepared tfds builder of `name` (e.g. "glue/mrpc") under data_dir (None: TFDS's
  default, ~/tensorflow_datasets). ValueError (one line) for an unknown name or data that is
  not prepared there; never downloads."""
  tfds = _tfds()
  try:
    result = tfds.builder(name, data_dir=data_dir)
  except ValueError as e:  # DatasetNotFoundError is a ValueError; so is an unknown config
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise ValueError(f"--tfds_name {name}: not a TensorFlow Datasets name ({first})") from None
  if not result.is_prepared():
    root = data_dir or result.data_dir_root
    raise ValueError(f"--tfds_name {name}: not prepared in {root} (no {result.data_dir}); "
                     + _PREPARE_HINT.format(name=name, data_dir=root, alternative=alternative))
  return result


def load_split(name, split, data_dir=None, alternative="", tfds_builder=None):
  """The examples of one split as a list of dicts of NumPy values (text as str, bytes
  decoded as UTF-8; sequences as arrays / lists of str), in TFDS's stored order.
  tfds_builder: builder(name, data_dir) when the caller has it already."""
  tfds_builder = tfds_builder or builder(name, data_dir, alternative)
  known = list(tfds_builder.info.splits)
  if known and split not in known:
    raise ValueError(f"--tfds_name {name}: no split {split!r} (it has {', '.join(known)})")
  dataset = tfds_builder.as_dataset(split=split, shuffle_files=False)
  return [_decoded(example) for example in _tfds().as_numpy(dataset)]


def _decoded(value):
  if isinstance(value, dict):
    return {key: _decoded(item) for key, item in value.items()}
  if isinstance(value, bytes):
    return value.decode("utf-8")
  if isinstance(value, np.ndarray) and value.dtype.kind in "OSU":
    return [_decoded(item) for item in value.tolist()]
  return value


# ----------------------------------------------------------------------------
# GLUE.

# Column specs of a TSV row: a TFDS feature name, "@idx" (TFDS's row index), "@label" (the
# label as the TSV writes it) or "" (a column TFDS does not keep).
_MNLI_LEAD = ["@idx", "", "", "", "", "", "", "", "premise", "hypothesis"]
_MNLI_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
                "sentence2"]
_PAIR_TEST = (["index", "sentence1", "sentence2"], ["@idx", "sentence1", "sentence2"])
_PAIR = (["index", "sentence1", "sentence2", "label"], ["@idx", "sentence1", "sentence2", "@label"])
_STSB_HEADER = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
                "sentence1", "sentence2"]
_STSB_LEAD = ["@idx", "", "", "", "", "", "", "sentence1", "sentence2"]

# layout -> (how the TSV writes labels: "int" = the class index, "name" = the class name,
# "float" = the score; {split: (header row or None, column specs)}).
_LAYOUTS = {
    "cola": ("int", {"train": (None, ["", "@label", "", "sentence"]),
                     "test": (["index", "sentence"], ["@idx", "sentence"])}),
    "sst2": ("int", {"train": (["sentence", "label"], ["sentence", "@label"]),
                     "test": (["index", "sentence"], ["@idx", "sentence"])}),
    "mrpc": ("int", {"train": (["\ufeffQuality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                               ["@label", "", "", "sentence1", "sentence2"]),
                     "test": (["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                              ["@idx", "", "", "sentence1", "sentence2"])}),
    "qqp": ("int", {"train": (["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                              ["@idx", "", "", "question1", "question2", "@label"]),
                    "test": (["id", "question1", "question2"],
                             ["@idx", "question1", "question2"])}),
    "stsb": ("float", {"train": (_STSB_HEADER + ["score"], _STSB_LEAD + ["@label"]),
                       "test": (_STSB_HEADER, _STSB_LEAD)}),
    "mnli": ("name", {"train": (_MNLI_HEADER + ["label1", "gold_label"],
                                _MNLI_LEAD + ["@label", "@label"]),
                      "dev": (_MNLI_HEADER + ["label%d" % i for i in range(1, 6)] + ["gold_label"],
                              _MNLI_LEAD + ["@label", "", "", "", "", "@label"]),
                      "test": (_MNLI_HEADER, _MNLI_LEAD)}),
    "qnli": ("name", {"train": (["index", "question", "sentence", "label"],
                                ["@idx", "question", "sentence", "@label"]),
                      "test": (["index", "question", "sentence"],
                               ["@idx", "question", "sentence"])}),
    "rte": ("name", {"train": _PAIR, "test": _PAIR_TEST}),
    "wnli": ("int", {"train": _PAIR, "test": _PAIR_TEST}),
    "ax": ("name", {"test": (["index", "sentence1", "sentence2"],
                             ["@idx", "premise", "hypothesis"])}),
}

_STANDARD_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
_MNLI_NAMES = ("mnli", "mnli-m", "mnli_matched")
_MNLI_MM_NAMES = ("mnli-mm", "mnli_mismatched", "mnli-mismatched", "mnlimm")

# tfds glue config -> (the run_classifier task names that read it, first = preferred; the
# TSV layout; {processor split: tfds split, or (other config, split)}).
GLUE_CONFIGS = {
    "cola": (("cola",), "cola", _STANDARD_SPLITS),
    "sst2": (("sst-2", "sst2", "sst"), "sst2", _STANDARD_SPLITS),
    "mrpc": (("mrpc",), "mrpc", _STANDARD_SPLITS),
    "qqp": (("qqp",), "qqp", _STANDARD_SPLITS),
    "stsb": (("sts-b", "stsb", "sts"), "stsb", _STANDARD_SPLITS),
    "mnli": (_MNLI_NAMES, "mnli",
             {"train": "train", "dev": "validation_matched", "test": "test_matched"}),
    "mnli_matched": (_MNLI_NAMES, "mnli",
                     {"train": ("mnli", "train"), "dev": "validation", "test": "test"}),
    "mnli_mismatched": (_MNLI_MM_NAMES + ("mnli",), "mnli",
                        {"train": ("mnli", "train"), "dev": "validation", "test": "test"}),
    "qnli": (("qnli",), "qnli", _STANDARD_SPLITS),
    "rte": (("rte",), "rte", _STANDARD_SPLITS),
    "wnli": (("wnli",), "wnli", _STANDARD_SPLITS),
    "ax": (("ax", "diagnostic") + _MNLI_NAMES, "ax", {"test": "test"}),
}


def _glue_config(tfds_name):
  family, _, config = tfds_name.partition("/")
  config = config.split(":")[0]  # (a version, "glue/mrpc:2.0.0", is kept for loading)
  if family != "glue" or config not in GLUE_CONFIGS:
    raise ValueError(f"--tfds_name {tfds_name}: run_classifier reads glue/<config>, config one "
                     f"of {', '.join(GLUE_CONFIGS)}")
  return config


def glue_task_name(tfds_name, task_name, processors):
  """The run_classifier task (a key of `processors`) that reads glue/<config>: --task_name
  when given (it must be one that reads this config), else the first registered one.
  ValueError when they disagree or no processor reads the config."""
  names = GLUE_CONFIGS[_glue_config(tfds_name)][0]
  if task_name:
    if task_name.lower() not in names:
      raise ValueError(f"--task_name={task_name} does not read --tfds_name {tfds_name} "
                       f"(leave --task_name out, or use one of {', '.join(names)})")
    return task_name.lower()
  for name in names:
    if name in processors:
      return name
  raise ValueError(f"--tfds_name {tfds_name}: run_classifier has no processor for it (none of "
                   f"{', '.join(names)}; it has {', '.join(sorted(processors))})")


class GlueReader(object):
  """A processor's get_train/dev/test_examples over glue/<config> from TFDS (the data_dir
  argument is ignored): the task's processor turns the rebuilt TSV rows into InputExamples.

  tfds_name: e.g. "glue/mrpc"; data_dir: --tfds_data_dir (None: TFDS's default); processor:
  the task's DataProcessor (it must have the original's _create_examples(lines, set_type));
  task_name: the processor's key in run_classifier.PROCESSORS (picks the row layout for
  glue/ax, which the MNLI processor reads in MNLI's test layout).
  """

  def __init__(self, tfds_name, data_dir, processor, task_name):
    self.tfds_name, self.data_dir, self.processor = tfds_name, data_dir, processor
    self.config = _glue_config(tfds_name)
    self.task_name = task_name
    _, self.layout, self.splits = GLUE_CONFIGS[self.config]
    if self.layout == "ax" and task_name in _MNLI_NAMES:
      self.layout = "mnli"
    if not hasattr(processor, "_create_examples"):
      raise ValueError(f"--tfds_name {tfds_name}: the {task_name} processor cannot read rows")

  def get_train_examples(self, data_dir=None):
    return self.examples("train")

  def get_dev_examples(self, data_dir=None):
    return self.examples("dev")

  def get_test_examples(self, data_dir=None):
    return self.examples("test")

  def set_type(self, split):
    """The guid prefix of a split: the processor's (FILES) or the original's train/dev/test."""
    files = getattr(self.processor, "FILES", {})
    set_type = files[split][1] if split in files else split
    if self.config == "mnli_mismatched" and self.task_name not in _MNLI_MM_NAMES:
      set_type = set_type.replace("_matched", "_mismatched")
    return set_type

  def rows(self, split):
    """The TSV rows (lists of str, header first where the file has one) of a processor split
    ("train", "dev" or "test"), in file order."""
    if split not in self.splits:
      raise ValueError(f"--tfds_name {self.tfds_name} has no {split} split (it has "
                       f"{', '.join(self.splits)})")
    where = self.splits[split]
    config, tfds_split = (where if isinstance(where, tuple) else (self.config, where))
    name = self.tfds_name if config == self.config else "glue/" + config  # (keeps a version)
    alternative = ", or pass --data_dir with the task's TSV files instead of --tfds_name"
    tfds_builder = builder(name, self.data_dir, alternative)
    label_feature = tfds_builder.info.features["label"]
    examples = load_split(name, tfds_split, tfds_builder=tfds_builder)
    examples.sort(key=lambda example: int(example["idx"]))
    style, layouts = _LAYOUTS[self.layout]
    header, columns = layouts.get(split, layouts.get("train"))
    rows = [list(header)] if header is not None else []
    for example in examples:
      rows.append([_field(example, column, style, label_feature) for column in columns])
    return rows

  def examples(self, split):
    """The processor's InputExamples of a split, from the rebuilt rows."""
    return self.processor._create_examples(self.rows(split), self.set_type(split))


def _field(example, column, style, label_feature):
  if not column:
    return ""
  if column == "@idx":
    return str(int(example["idx"]))
  if column != "@label":
    return example[column]
  label = example["label"]
  if style == "float":
    return str(np.float32(label))  # the shortest decimal of the float32: "3.8", "5.0"
  if style == "name":
    return label_feature.int2str(int(label))
  return str(int(label))


# ----------------------------------------------------------------------------
# SQuAD.

SQUAD_SPLITS = {True: "train", False: "validation"}  # is_training -> tfds split


def squad_name(tfds_name, version_2_with_negative):
  family, _, config = tfds_name.partition("/")
  config = config.split(":")[0] or "v1.1"
  if family != "squad" or config not in ("v1.1", "v2.0"):
    raise ValueError(f"--tfds_name {tfds_name}: run_squad reads squad/v1.1 or squad/v2.0")
  if (config == "v2.0") != bool(version_2_with_negative):
    raise ValueError(f"--tfds_name {tfds_name} needs --version_2_with_negative="
                     f"{str(config == 'v2.0').lower()}")
  return tfds_name if "/" in tfds_name else tfds_name + "/" + config


def squad_data(tfds_name, split, data_dir=None):
  """The SQuAD JSON "data" list of one tfds split (the structure evaluate_squad.evaluate
  and run_squad read): [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
  "answers": [{"text", "answer_start"}], and for v2.0 "is_impossible",
  "plausible_answers"}]}]}]. Articles are grouped by title and paragraphs by context in
  TFDS's order (TFDS keeps no file order)."""
  alternative = ", or pass the SQuAD JSON files (--train_file / --predict_file)"
  articles = {}
  for example in load_split(tfds_name, split, data_dir, alternative):
    paragraphs = articles.setdefault(example["title"], {})
    qa = {"id": example["id"], "question": example["question"],
          "answers": _answers(example["answers"])}
    if "is_impossible" in example:
      qa["is_impossible"] = bool(example["is_impossible"])
      qa["plausible_answers"] = _answers(example["plausible_answers"])
    paragraphs.setdefault(example["context"], []).append(qa)
  return [{"title": title, "paragraphs": [{"context": context, "qas": qas}
                                          for context, qas in paragraphs.items()]}
          for title, paragraphs in articles.items()]


def _answers(answers):
  return [{"text": text, "answer_start": int(start)}
          for text, start in zip(answers["text"], np.asarray(answers["answer_start"]).tolist())]


def squad_eval_dataset(tfds_name, version_2_with_negative=False, data_dir=None):
  """The evaluate_squad "dataset" (the JSON "data" list) of the split that run_squad
  predicts (validation), for evaluate_squad.evaluate(dataset, predictions, ...)."""
  return squad_data(squad_name(tfds_name, version_2_with_negative), SQUAD_SPLITS[False],
                    data_dir)
