"""The one validating reader of a model directory (model_files.read_model_files and
check_head): task.json against labels.txt, bert_config.json and the checkpoint's head; its
types and bounds (max_seq_length, thresholds, the window parameters, also run_options.json's
and predict's flags); a pair model given single texts; convert_checkpoint's --labels and a
head the source lacks. Each through the entry points a user runs: predict.py, load_model,
export_saved_model's resolve_options, convert_checkpoint."""

import contextlib
import json
import re
import shutil
import signal
import types

import numpy as np
import pytest

from bert_keras import checkpoints
from bert_keras import convert_checkpoint
from bert_keras import export_saved_model
from bert_keras import modeling
from bert_keras import predict
from bert_keras.runtime import model_dir
from bert_keras.runtime import outputs
from bert_keras.prediction import predictors

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "is", "hairy", ".", "who",
         "was", "jim", "henson", "?", "a", "puppet", "hello", "world"]
CLASSES = ["neg", "neu", "pos"]
MAX_SEQ_LENGTH = 16


@pytest.fixture(scope="module")
def base(tmp_path_factory):
  """Tiny model directories (random weights, TF1 checkpoints): a classifier, a squad model
  (run_* layout, model_dir.write_model_dir) and an encoder-only Google-style directory."""
  root = tmp_path_factory.mktemp("checks")
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(WORDS) + "\n")
  config = modeling.BertConfig(vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32,
                               max_position_embeddings=32)
  options = types.SimpleNamespace(vocab_file=str(vocab), do_lower_case=True,
                                  max_seq_length=MAX_SEQ_LENGTH)
  paths = {}
  for task, model, labels, extra in (
      ("classifier", modeling.BertClassifier(config, 3), CLASSES, {}),
      ("squad", modeling.BertSquad(config), None, dict(doc_stride=4, max_query_length=4)),
      ("encoder", modeling.BertModel(config), None, None)):
    directory = root / task
    directory.mkdir()
    checkpoints.save_tf1_checkpoint(model, str(directory / "model.ckpt"))
    if extra is None:
      (directory / "bert_config.json").write_text(config.to_json_string())
      shutil.copy(vocab, directory / "vocab.txt")
    else:
      model_dir.write_model_dir(str(directory), options, config, task, labels=labels, **extra)
    paths[task] = directory
  return dict(root=root, paths=paths, config=config, options=options)


def _copy(base, which, tmp_path, **task_json):
  """A copy of the fixture directory `which` with task.json's entries `task_json` replaced
  (a value None is written as null)."""
  directory = tmp_path / which
  shutil.copytree(base["paths"][which], directory)
  if task_json:
    path = directory / "task.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **task_json}))
  return directory


@contextlib.contextmanager
def _deadline(seconds):
  """Fails the test (an exception in the main thread) after `seconds`: a hang is a failure.
  The timer fires again every 0.1 s (an exception raised inside a finalizer is dropped)."""
  def expired(*_):
    raise TimeoutError(f"still running after {seconds} s")
  previous = signal.signal(signal.SIGALRM, expired)
  signal.setitimer(signal.ITIMER_REAL, seconds, 0.1)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def _predict(directory, tmp_path, text, name="in.csv", **flags):
  """predict.run on `text` (written to tmp_path/name) -> the output rows."""
  source = tmp_path / name
  source.write_text(text)
  out = tmp_path / (name + ".jsonl")
  predict.run(predict.options(model_dir=str(directory), input_file=str(source),
                              output_file=str(out), **flags))
  return [json.loads(line) for line in out.read_text().splitlines()]


def test_labels_txt_and_task_json_must_agree(base, tmp_path):
  directory = _copy(base, "classifier", tmp_path)
  (directory / "labels.txt").write_text("pos\nneu\nneg\n")  # the same names, another order
  match = r"task\.json: \"labels\" neg,neu,pos disagree with .*labels\.txt \(pos,neu,neg\)"
  with pytest.raises(ValueError, match=match):
    predictors.load(str(directory))
  with pytest.raises(ValueError, match=match):
    checkpoints.load_model(str(directory), task="classifier")
  with pytest.raises(ValueError, match=match):
    export_saved_model.resolve_options(export_saved_model.options(
        init_checkpoint=str(directory), export_dir=str(tmp_path / "export")))
  # Labels missing from both files.
  (directory / "labels.txt").unlink()
  _copy(base, "classifier", tmp_path / "missing", labels=None)
  (tmp_path / "missing" / "classifier" / "labels.txt").unlink()
  with pytest.raises(ValueError, match=r"task\.json: \"labels\" is missing and there is no "
                     r"labels\.txt"):
    predictors.load(str(tmp_path / "missing" / "classifier"))
  # A label count that is not the head's number of outputs (both files agree on two).
  directory = _copy(base, "classifier", tmp_path / "two", labels=["neg", "pos"])
  (directory / "labels.txt").write_text("neg\npos\n")
  with pytest.raises(ValueError, match=r"task\.json: 2 labels .*, but the head of its "
                     r"checkpoint has 3 outputs"):
    checkpoints.load_model(str(directory), task="classifier")


def test_task_on_the_wrong_head(base, tmp_path, caplog):
  # A tagger's task.json over run_classifier's model directory (its "task_name" entry): the
  # head variables of the two are named alike, task.json's classifier entries tell.
  directory = _copy(base, "classifier", tmp_path, task="tagger", task_name="custom")
  with pytest.raises(ValueError, match=r"task\.json: \"task_name\" is a classifier's entry "
                     r"\(run_classifier\), but \"task\" is tagger"):
    predictors.load(str(directory))
  # Without it, run_options.json's record of the kind whose head the run trained tells.
  directory = _copy(base, "classifier", tmp_path / "t", task="tagger")
  recorded = fr"{directory}/run_options\.json's \"_task_kind\" says its run trained a "
  with pytest.raises(ValueError, match=fr"^{directory}/task\.json: \"task\" says a tagger "
                     fr"model, but {recorded}classifier head"):
    predictors.load(str(directory))
  with pytest.raises(ValueError, match=recorded):
    checkpoints.load_model(str(directory), task="tagger")
  # An older directory without the record: run_classifier's own options tell.
  options = json.loads((directory / "run_options.json").read_text())
  del options["_task_kind"]
  (directory / "run_options.json").write_text(json.dumps({**options, "window_pooling": "mean"}))
  with pytest.raises(ValueError, match=r"task\.json: \"task\" says a tagger model, but "
                     r".*run_options\.json holds run_classifier's options \(window_pooling\)"):
    predictors.load(str(directory))
  # The other way: a classifier's task.json beside a tagger's run.
  other = _copy(base, "classifier", tmp_path / "o")
  (other / "run_options.json").write_text(json.dumps({**options, "_task_kind": "tagger"}))
  with pytest.raises(ValueError, match=r"\"task\" says a classifier model, but .*says its run "
                     r"trained a tagger head"):
    predictors.load(str(other))
  # A softmax classifier's run read as a multi-label one (sigmoid): refused alike.
  other = _copy(base, "classifier", tmp_path / "m", multi_label=True)
  with pytest.raises(ValueError, match=r"\"task\" says a multi_label model, but .*says its run "
                     r"trained a classifier head"):
    predictors.load(str(other))
  # A HuggingFace config.json beside task.json: its architectures tell.
  other = _copy(base, "classifier", tmp_path / "hf", task="tagger")
  (other / "run_options.json").unlink()
  (other / "config.json").write_text(json.dumps(
      {"architectures": ["BertForSequenceClassification"]}))
  with pytest.raises(ValueError, match=r"\"task\" says a tagger model "
                     r"\(BertForTokenClassification\), but .*config\.json's \"architectures\" "
                     r"are BertForSequenceClassification"):
    predictors.load(str(other))
  # Nothing that tells (no run_options.json, no config.json): tags that name no entity type
  # (none could ever be found) are a warning.
  (directory / "run_options.json").unlink()
  assert predictors.load(str(directory)).task == "tagger"
  assert any("name no entity type" in r.getMessage() for r in caplog.records)
  # squad over a classifier's head, a classifier over squad's: the head variables tell (also
  # without run_options.json's record, which tells first).
  directory = _copy(base, "classifier", tmp_path / "s", task="squad", labels=None)
  (directory / "labels.txt").unlink()
  with pytest.raises(ValueError, match=r"\"task\" says a squad model, but .*trained a "
                     r"classifier head"):
    predictors.load(str(directory))
  (directory / "run_options.json").unlink()
  with pytest.raises(ValueError, match=r"task\.json: \"task\" squad needs a squad head, but "
                     r"its checkpoint holds a classifier head"):
    predictors.load(str(directory))
  directory = _copy(base, "squad", tmp_path / "c", task="classifier", labels=CLASSES)
  (directory / "run_options.json").unlink()
  with pytest.raises(ValueError, match=r"\"task\" classifier needs a classifier head, but "
                     r"its checkpoint holds a squad head"):
    checkpoints.load_model(str(directory), task="classifier")


@pytest.mark.parametrize("value", [None, 0, 2, "16", True, 1e9])
def test_max_seq_length_must_be_a_length(base, tmp_path, value):
  directory = _copy(base, "classifier", tmp_path, max_seq_length=value)
  with pytest.raises(ValueError, match=r"task\.json: \"max_seq_length\" (is required|must be "
                     r"an integer|must be >= 3)"):
    model_dir.read_model_dir(str(directory))
  with pytest.raises(ValueError, match=r"task\.json: \"max_seq_length\""):
    predictors.load(str(directory))


def test_max_seq_length_within_the_config(base, tmp_path):
  directory = _copy(base, "classifier", tmp_path, max_seq_length=64)
  with pytest.raises(ValueError, match=r"task\.json: \"max_seq_length\" 64 is longer than "
                     r".*bert_config\.json's max_position_embeddings 32"):
    predictors.load(str(directory))


@pytest.mark.parametrize("thresholds", [[0.5, 1.5, 0.5], None, [0.5, None, 0.5], 0.5, [0.5] * 2,
                                        [float("nan")] * 3])
def test_thresholds_are_fractions(base, tmp_path, thresholds):
  directory = _copy(base, "classifier", tmp_path, multi_label=True, thresholds=thresholds)
  # (the fixture's classifier read as a multi-label one: its run's record says so too)
  (directory / "run_options.json").write_text(json.dumps({"_task_kind": "multi_label"}))
  if thresholds == 0.5:  # one threshold for every label: accepted
    assert predictors.load(str(directory)).thresholds == 0.5
    return
  with pytest.raises(ValueError, match=r"task\.json: \"thresholds\" must be (numbers between "
                     r"0 and 1|one threshold or one per label \(3\))"):
    predictors.load(str(directory))


_RECORD = {"labels": CLASSES, "thresholds": [0.5, 0.25, 0.5], "label_separator": ",",
           "tuned": True}


@pytest.mark.parametrize("content, message", [
    (dict(_RECORD, thresholds=["a", "b", "c"]), r"\"thresholds\" must be 3 numbers in \[0, 1\] "
                                                r"\(one a label\), not \"a\"$"),
    (dict(_RECORD, thresholds=None), r"\"thresholds\" must be 3 numbers .*, not null$"),
    (dict(_RECORD, thresholds=[0.5]), r"\"thresholds\" must be 3 numbers .*, not \[0\.5\]$"),
    (dict(_RECORD, thresholds=[0.5, 1.5, 0.5]), r"\"thresholds\" must be 3 numbers .*, not 1\.5$"),
    (dict(_RECORD, thresholds=[0.5, float("nan"), 0.5]), r"\"thresholds\" .*, not NaN$"),
    (dict(_RECORD, labels=None), r"\"labels\" must be a non-empty list of names, not null"),
    (dict(_RECORD, labels=[1, 2, 3]), r"\"labels\" must be names"),
    (dict(_RECORD, label_separator=3), r"\"label_separator\" must be a string, not 3"),
    (["a", "b", "c"], r"not a thresholds file \(a JSON object with \"labels\" and "
                      r"\"thresholds\"\): \[\"a\""),
    (None, r"not a thresholds file .*: null$"),
    ("{", r"not a thresholds file \(not JSON")])
def test_thresholds_json_is_checked_naming_the_file_and_field(base, tmp_path, content, message):
  from bert_keras.tasks.classifier import multi_label
  directory = _copy(base, "classifier", tmp_path, multi_label=True)
  (directory / "run_options.json").write_text(json.dumps({"_task_kind": "multi_label"}))
  path = directory / "thresholds.json"
  path.write_text(content if isinstance(content, str) else json.dumps(content))
  with pytest.raises(ValueError, match=r"^%s: %s" % (re.escape(str(path)), message)):
    multi_label.read_record(str(directory))
  if content is None:  # what predict.py reads
    with pytest.raises(ValueError, match=r"^%s: not a thresholds file" % re.escape(str(path))):
      predictors.load(str(directory))
  path.write_text(json.dumps(_RECORD))
  assert multi_label.read_thresholds(str(directory), CLASSES).tolist() == [0.5, 0.25, 0.5]


def test_types_of_the_other_fields(base, tmp_path):
  for field, value, problem in (("multi_label", "yes", "must be true or false"),
                                ("do_lower_case", 1, "must be true or false"),
                                ("labels", ["neg", "", "pos"], "has an empty name"),
                                ("labels", ["neg", "neg", "pos"], "repeats neg"),
                                ("labels", "neg,neu,pos", "must be a non-empty list"),
                                ("task", "taggr", "must be one of"),
                                ("do_lower_case", False, None)):
    directory = _copy(base, "classifier", tmp_path / f"{field}{len(str(value))}",
                      **{field: value})
    if problem is None:  # task.json's do_lower_case against tokenizer_config.json's
      problem = r"false disagrees with .*tokenizer_config\.json \(true\)"
    with pytest.raises(ValueError,
                       match=fr"task\.json: \"{field}\" {problem}"):
      model_dir.read_model_dir(str(directory))


def test_an_unknown_task_json_field_is_refused(base, tmp_path):
  """A misspelt entry ("treshold") would be ignored: refused, naming the file and the field,
  by the reader and by the writer."""
  directory = _copy(base, "classifier", tmp_path, multi_label=True, treshold=0.3)
  with pytest.raises(ValueError, match=fr"^{directory}/task\.json: unknown field 'treshold' "
                     r"\(known: task, multi_label, labels, .*thresholds"):
    model_dir.read_model_dir(str(directory))
  with pytest.raises(ValueError, match="unknown field 'treshold'"):
    predictors.load(str(directory))
  with pytest.raises(ValueError, match="unknown field 'treshold'"):
    model_dir.write_model_dir(str(tmp_path), base["options"], base["config"], "classifier",
                              labels=CLASSES, treshold=0.3)
  assert not (tmp_path / "task.json").exists()


@pytest.mark.parametrize("where", ["task.json", "run_options.json", "flag"])
def test_a_classifier_s_doc_stride_must_fit_its_window(base, tmp_path, where):
  """run_classifier's rule (model_files.stride_problem: a stride below max_seq_length - 2, or
  windows skip word pieces) on what predict reads: task.json, run_options.json, and task.json's
  stride against predict's --max_seq_length."""
  directory = _copy(base, "classifier", tmp_path, doc_stride=14 if where == "task.json" else 6)
  flags = {"max_seq_length": 8} if where == "flag" else {}
  if where == "run_options.json":
    options = json.loads((directory / "run_options.json").read_text())
    (directory / "run_options.json").write_text(json.dumps({**options, "doc_stride": 20}))
  match = {"task.json": r"task\.json: \"doc_stride\" must be smaller than \"max_seq_length\" "
                        r"minus the special tokens \(16 - 2 = 14\), or windows would skip word "
                        r"pieces, got 14",
           "run_options.json": r"run_options\.json: \"doc_stride\" must be smaller than "
                               r"\"max_seq_length\" minus the special tokens \(16 - 2 = 14\)",
           "flag": r"^--max_seq_length=8: .*task\.json \"doc_stride\" 6 must be smaller than "
                   r"--max_seq_length minus the special tokens \(8 - 2 = 6\)"}[where]
  with pytest.raises(ValueError, match=match):
    predictors.load(str(directory), **flags)
  if where == "flag":  # the same stride within task.json's own length: read
    assert predictors.load(str(directory)).task == "classifier"


def _long_context():
  return "question,context\nwho is jim ?," + "the dog is hairy . " * 20 + "\n"


@pytest.mark.parametrize("where", ["task.json", "run_options.json", "flag"])
def test_negative_doc_stride_is_refused_at_once(base, tmp_path, where):
  directory = _copy(base, "squad", tmp_path,
                    doc_stride=-2 if where == "task.json" else None)
  flags = {"doc_stride": -2} if where == "flag" else {}
  if where == "run_options.json":
    (directory / "run_options.json").write_text(json.dumps({"doc_stride": -2}))
  match = {"task.json": r"task\.json: \"doc_stride\" must be >= 1",
           "run_options.json": r"run_options\.json: \"doc_stride\" must be >= 1",
           "flag": r"--doc_stride=-2: must be >= 1"}[where]
  source = tmp_path / "in.csv"
  source.write_text(_long_context())
  options = predict.options(model_dir=str(directory), input_file=str(source),
                            output_file=str(tmp_path / "out.jsonl"), **flags)
  with pytest.raises(ValueError, match=match):
    predictor = predict.load_predictor(options)  # refused here, before any window is made
    # Before the check, a negative stride made windows forever (memory without bound): a
    # second at most, then the test fails instead of hanging.
    with _deadline(1):
      predict.predict_file(predictor, options)


def test_pair_model_refuses_single_texts(base, tmp_path):
  directory = _copy(base, "classifier", tmp_path, pair=True)
  with pytest.raises(ValueError, match=r"reads pairs of texts .* no second text \(looked for "
                     r"the field 'text_b' or 'sentence2' or 'context'\): name it with "
                     r"--text_b_column"):
    _predict(directory, tmp_path, "sentence,other\nthe dog is hairy .,x\n")
  rows = _predict(directory, tmp_path, "sentence,other\nthe dog is hairy .,who\n",
                  name="b.csv", text_b_column="other")
  assert list(rows[0]["probabilities"]) == CLASSES
  # Without "pair" (an older directory) single texts are read as before.
  rows = _predict(_copy(base, "classifier", tmp_path / "old"), tmp_path,
                  "sentence,other\nthe dog is hairy .,x\n", name="c.csv")
  assert list(rows[0]["probabilities"]) == CLASSES


def test_convert_labels_must_be_distinct_names(base, tmp_path):
  for labels, problem in (("a,a,b", "repeats a"), ("a,,b", "has an empty name"),
                          (" , ", "has an empty name")):
    with pytest.raises(ValueError, match=fr"^--labels={labels}: {problem}"):
      convert_checkpoint.run(convert_checkpoint.options(
          init_checkpoint=str(base["paths"]["classifier"]), labels=labels,
          output_dir=str(tmp_path / "out")))
  assert not (tmp_path / "out").exists()


def test_convert_refuses_an_untrained_head(base, tmp_path):
  source = str(base["paths"]["encoder"])
  for task in ("classifier", "squad", "pretrainer"):
    with pytest.raises(ValueError, match=fr"^--task={task}: --init_checkpoint .* holds no "
                       r"head \(an encoder\), not a \w+ head: .*--allow_untrained_head"):
      convert_checkpoint.run(convert_checkpoint.options(
          init_checkpoint=source, task=task, output_dir=str(tmp_path / "out")))
  assert not (tmp_path / "out").exists()
  with pytest.raises(ValueError, match=r"holds a classifier head, not a squad head"):
    convert_checkpoint.run(convert_checkpoint.options(
        init_checkpoint=str(base["paths"]["classifier"]), task="squad",
        output_dir=str(tmp_path / "out")))
  # On purpose: written with its head untrained.
  written = convert_checkpoint.run(convert_checkpoint.options(
      init_checkpoint=source, task="classifier", labels="a,b", allow_untrained_head=True,
      output_dir=str(tmp_path / "out")))
  assert "model.safetensors" in written
  config = json.loads((tmp_path / "out" / "config.json").read_text())
  assert config["architectures"] == ["BertForSequenceClassification"]
  assert np.array_equal(sorted(config["id2label"].values()), ["a", "b"])


def test_doc_spans_refuses_a_stride_that_never_ends():
  """The backstop behind every entry point's checks: a stride or window below 1 is an error,
  not a loop that never ends."""
  from bert_keras.tasks import windows
  assert [tuple(s) for s in windows.doc_spans(5, 4, 2)] == [(0, 4), (2, 3)]
  for stride, length in ((0, 4), (-3, 4), (2, 0)):
    with pytest.raises(ValueError, match="at least 1"):
      windows.doc_spans(10, length, stride)
  assert windows.doc_spans(0, 4, 0) == []


def _classifier_options(directory, **flags):
  """run_classifier's options for a run on the model directory `directory` (its --output_dir),
  resolved as run_classifier.run resolves them."""
  from bert_keras import run_classifier
  from bert_keras.tasks.classifier import options as classifier_options
  return model_dir.resolve_options(
      run_classifier.options(output_dir=str(directory), do_predict=True, **flags),
      run_classifier.DEFAULTS, pin=classifier_options.TASK_JSON_OPTIONS,
      writes=run_classifier.MODEL_KINDS)[0]


def test_a_run_takes_the_model_s_multi_label_and_windows(base, tmp_path):
  """task.json's multi_label, doc_stride and window_pooling are the run's when not given;
  given otherwise, refused naming the flag and the directory's task.json."""
  multi = _copy(base, "classifier", tmp_path / "m", multi_label=True,
                thresholds=[0.5, 0.5, 0.5], label_separator=";")
  (multi / "run_options.json").unlink()  # (its recorded kind is the single-label one)
  options = _classifier_options(multi)
  assert (options.multi_label, options.label_separator, options.doc_stride) == (True, ";", 0)
  with pytest.raises(ValueError, match=r"^--multi_label=False conflicts with the model "
                     r"directory .*: the model was trained with multi_label=True \(.*task\.json"):
    _classifier_options(multi, multi_label=False)
  single = _copy(base, "classifier", tmp_path / "s")
  with pytest.raises(ValueError, match=r"^--multi_label=True conflicts .* trained with "
                     r"multi_label=False"):
    _classifier_options(single, multi_label=True)
  with pytest.raises(ValueError, match=r"^--doc_stride=4 conflicts .* trained with no "
                     r"doc_stride \(.*task\.json\)"):
    _classifier_options(single, doc_stride=4)
  windowed = _copy(base, "classifier", tmp_path / "w", doc_stride=4, window_pooling="max")
  options = _classifier_options(windowed)
  assert (options.doc_stride, options.window_pooling, options.multi_label) == (4, "max", False)
  assert _classifier_options(windowed, doc_stride=4).window_pooling == "max"
  with pytest.raises(ValueError, match=r"^--window_pooling=mean conflicts .* trained with "
                     r"window_pooling=max"):
    _classifier_options(windowed, doc_stride=4, window_pooling="mean")
  # A warm start from a model directory trains a new head: nothing is taken.
  from bert_keras import run_classifier
  options, _ = model_dir.resolve_options(
      run_classifier.options(output_dir=str(tmp_path / "new"), do_train=True,
                             init_checkpoint=str(windowed), window_pooling="mean",
                             doc_stride=2),
      run_classifier.DEFAULTS, pin=("doc_stride", "window_pooling"))
  assert (options.doc_stride, options.window_pooling) == (2, "mean")


def test_export_multi_label_must_match_the_model(base, tmp_path):
  single = str(base["paths"]["classifier"])
  with pytest.raises(ValueError, match=r"^--multi_label=True conflicts with the model "
                     r"directory .*: the model was trained with multi_label=False"):
    export_saved_model.resolve_options(export_saved_model.options(
        init_checkpoint=single, export_dir=str(tmp_path / "x"), multi_label=True))
  multi = _copy(base, "classifier", tmp_path, multi_label=True, thresholds=[0.5, 0.5, 0.5])
  (multi / "run_options.json").unlink()
  assert export_saved_model.resolve_options(export_saved_model.options(
      init_checkpoint=str(multi), export_dir=str(tmp_path / "x"))).multi_label
  with pytest.raises(ValueError, match=r"^--multi_label=False conflicts"):
    export_saved_model.resolve_options(export_saved_model.options(
        init_checkpoint=str(multi), export_dir=str(tmp_path / "x"), multi_label=False))


def test_a_script_refuses_another_kind_s_model_directory(base, tmp_path):
  """A run_* script whose --output_dir holds another kind's model refuses it, naming the
  directory, its task.json's task and the script's kind, before reading anything."""
  from bert_keras import run_embeddings
  from bert_keras import run_ner
  from bert_keras import run_squad
  directory = _copy(base, "classifier", tmp_path)
  before = sorted(p.name for p in directory.iterdir())
  for script, flags, kind in (
      (run_embeddings, dict(do_eval=True, data_dir=str(tmp_path)), "embeddings"),
      (run_ner, dict(do_predict=True, data_dir=str(tmp_path)), "tagger"),
      (run_squad, dict(do_predict=True, predict_file=str(tmp_path / "dev.json")), "squad")):
    with pytest.raises(ValueError, match=fr"^--output_dir {directory} holds a classifier model "
                       fr"\(.*task\.json\), not an? {kind} model"):
      script.run(script.options(output_dir=str(directory), **flags))
  assert sorted(p.name for p in directory.iterdir()) == before
  model_dir.check_kind(types.SimpleNamespace(output_dir=str(directory)),
                       ("classifier", "regression"))


def test_outputs_over_the_model_s_files_are_refused(base, tmp_path):
  directory = _copy(base, "classifier", tmp_path)
  task_json = (directory / "task.json").read_text()
  source = tmp_path / "in.csv"
  source.write_text("sentence\nthe dog is hairy .\n")
  for name in ("task.json", "labels.txt", "model.ckpt.index", "best/x", "thresholds.json"):
    with pytest.raises(ValueError, match=fr"^--output_file .*/{name} is the model directory's "
                       fr"{name.split('/')[0]} of --model_dir"):
      predict.run(predict.options(model_dir=str(directory), input_file=str(source),
                                  output_file=str(directory / name)))
  assert (directory / "task.json").read_text() == task_json
  assert outputs.output_problem(directory / "out.jsonl", directory) is None
  assert outputs.output_problem(tmp_path, directory) == "holds the model directory"
  with pytest.raises(ValueError, match=r"^--export_dir .* is the model directory of "
                     r"--init_checkpoint"):
    export_saved_model.run(export_saved_model.options(init_checkpoint=str(directory),
                                                      export_dir=str(directory)))
  with pytest.raises(ValueError, match=r"^--output_dir .*best is the model directory's best"):
    convert_checkpoint.run(convert_checkpoint.options(init_checkpoint=str(directory),
                                                      output_dir=str(directory / "best")))
  assert (directory / "task.json").read_text() == task_json


def test_single_text_model_refuses_pair_and_squad_flags(base, tmp_path):
  """A classifier trained on single texts (task.json "pair": false) refuses --text_b_column;
  a model other than squad refuses squad's window flags (they would be ignored)."""
  directory = _copy(base, "classifier", tmp_path, pair=False)
  with pytest.raises(ValueError, match=r"^--text_b_column=other: the classifier model takes "
                     r"one text .*task\.json's \"pair\": false"):
    _predict(directory, tmp_path, "sentence,other\nthe dog is hairy .,who\n",
             text_b_column="other")
  for flag in ("doc_stride", "max_query_length", "max_answer_length"):
    with pytest.raises(ValueError, match=fr"^--{flag}=8 is for a squad model, not the "
                       "classifier model"):
      _predict(directory, tmp_path, "sentence\nthe dog is hairy .\n", name="b.csv",
               **{flag: 8})
  rows = _predict(directory, tmp_path, "sentence,text_b\nthe dog is hairy .,who\n", "c.csv")
  assert list(rows[0]["probabilities"]) == CLASSES
