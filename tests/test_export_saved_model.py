"""export_saved_model.py: the classifier, squad and embeddings SavedModels, loaded in a fresh
process that imports only TensorFlow, against the Python path (tokenization.FullTokenizer +
preprocessing.pack_tokens + the Keras model loaded from the same checkpoint); the squad span
against the same argmax written in Python; atomic writing, flag errors, saved_model_cli.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import dead_pid
from conftest import tiny_vocab_and_config
from test_run_pretraining import data  # noqa: F401  (a fixture)
from bert_keras import checkpoints
from bert_keras import export_saved_model
from bert_keras import modeling
from bert_keras import output_families
from bert_keras import preprocessing
from bert_keras import serving
from bert_keras import tokenization
from bert_keras.runtime import training_checkpoints

REPO = pathlib.Path(__file__).resolve().parent.parent
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "is", "hairy", ".", "who",
         "was", "jim", "henson", "?", "a", "puppet", "##eer", "##s", "hello", "world", "b",
         "##ark", "##ed", "at", "you", "'", "t", "!", "你", "好", "cafe"]
MAX_SEQ_LENGTH = 16
MAX_ANSWER_LENGTH = 3
# (text_a, text_b): pairs, empty texts b (a single segment), truncation of either side,
# accents and CJK, a word that is one [UNK], an empty text a.
PAIRS = [
    ("Who was Jim Henson?", "Jim Henson was a puppeteer; the dog barked at you!"),
    ("The dog is hairy.", ""),
    ("hello world " * 6, "the dog"),
    ("who?", "the dog barked at Jim Henson's puppets, hello world, the hairy dog barked"),
    ("Café 你好", "zzz hello"),
    ("", "jim henson"),
]
# A batch whose longest row is shorter than MAX_SEQ_LENGTH (the SavedModel trims the padding).
SHORT = [PAIRS[1], PAIRS[5], ("hello", "")]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  """Vocab, config and one checkpoint per task (random weights, biases included), written as
  the original's TF1 checkpoints: a classifier as a run_classifier-style directory, squad as
  a prefix, embeddings as a pre-training checkpoint (MLM/NSP heads unused)."""
  root = tmp_path_factory.mktemp("export")
  vocab, config = tiny_vocab_and_config(root, WORDS, max_position_embeddings=32)
  (root / "bert_config.json").write_text(config.to_json_string())
  rng = np.random.default_rng(0)
  paths = {}
  for task, model in (("classifier", modeling.BertClassifier(config, 3)),
                      ("squad", modeling.BertSquad(config)),
                      ("embeddings", modeling.BertPretrainer(config)),
                      ("reranker", modeling.BertCrossEncoder(config))):
    for v in model.weights:
      v.assign(rng.normal(0, 0.2, v.shape).astype(np.float32))
    prefix = root / task / "model.ckpt"
    checkpoints.save_tf1_checkpoint(model, prefix)
    paths[task] = str(root / task) if task == "classifier" else str(prefix)
  return dict(root=root, vocab=str(vocab), config=config, checkpoints=paths,
              config_file=str(root / "bert_config.json"))


def _options(setup, task, export_dir, **overrides):
  base = dict(bert_config_file=setup["config_file"], init_checkpoint=setup["checkpoints"][task],
              vocab_file=setup["vocab"], do_lower_case=True, max_seq_length=MAX_SEQ_LENGTH,
              task=task, export_dir=str(export_dir), max_answer_length=MAX_ANSWER_LENGTH)
  if task == "classifier":
    base["num_labels"] = 3
  base.update(overrides)
  return export_saved_model.options(**base)


_LOAD_SCRIPT = """
import json, sys
import tensorflow as tf
results = {}
for task, path in json.loads(sys.argv[2]).items():
  loaded = tf.saved_model.load(path)
  for batch, pairs in json.loads(sys.argv[1]).items():
    text_a = tf.constant([a for a, _ in pairs])
    text_b = tf.constant([b for _, b in pairs])
    out = dict(loaded.signatures["serving_default"](text_a=text_a, text_b=text_b))
    out.update(loaded.signatures["preprocess"](text_a=text_a, text_b=text_b))
    results[task + batch] = {k: (v.numpy().astype(str).tolist() if v.dtype == tf.string
                                 else v.numpy().tolist()) for k, v in out.items()}
  refused = []  # text_a and text_b of different batch sizes: an error, no broadcast
  for name in ("serving_default", "preprocess"):
    for rows_a, rows_b in ((2, 1), (3, 2), (0, 1)):
      try:
        loaded.signatures[name](text_a=tf.constant(["the dog"] * rows_a, tf.string),
                                text_b=tf.constant(["hello"] * rows_b, tf.string))
      except tf.errors.InvalidArgumentError as e:
        refused.append("same number of rows" in e.message)
  results[task + "_refused"] = {"refused": refused}
assert not [m for m in sys.modules if m.startswith(("bert_keras", "tensorflow_text"))]
print("RESULT " + json.dumps(results))
"""


@pytest.fixture(scope="module")
def exported(setup):
  """The three SavedModels exported, then run in one fresh process: {task: outputs}."""
  dirs = {}
  for task in serving.TASKS:
    dirs[task] = str(setup["root"] / f"saved_{task}")
    export_saved_model.run(_options(setup, task, dirs[task]))
  batches = json.dumps({"": PAIRS, "_short": SHORT})
  proc = subprocess.run([sys.executable, "-c", _LOAD_SCRIPT, batches, json.dumps(dirs)],
                        capture_output=True, text=True, timeout=600, env=ENV,
                        cwd=str(setup["root"]))
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads(proc.stdout.split("RESULT ", 1)[1])
  return dirs, {task: {k: np.array(v) for k, v in out.items()} for task, out in results.items()}


def _python_path(setup, task, pairs=PAIRS):
  """The Python path: FullTokenizer + pack_tokens rows, and the Keras model's outputs."""
  tokenizer = tokenization.FullTokenizer(setup["vocab"], do_lower_case=True)
  rows = []
  for a, b in pairs:
    tokens_a, tokens_b = tokenizer.tokenize(a), tokenizer.tokenize(b)
    rows.append(preprocessing.pack_tokens(tokens_a, tokens_b or None, MAX_SEQ_LENGTH,
                                          tokenizer))
  tokens = [r[0] for r in rows]
  features = {name: tf.constant([r[i + 1] for r in rows], tf.int32)
              for i, name in enumerate(("input_ids", "input_mask", "segment_ids"))}
  model = export_saved_model.build_model(task, setup["config"], 3)
  training_checkpoints.warm_start(model, setup["checkpoints"][task])
  return tokens, features, model(features, training=False)


BATCHES = [("", PAIRS), ("_short", SHORT)]


@pytest.mark.slow
def test_preprocess_signature_is_pack_tokens(setup, exported):
  _, results = exported
  for batch, pairs in BATCHES:
    _, features, _ = _python_path(setup, "embeddings", pairs)
    for task in serving.TASKS:
      for name, value in features.items():
        np.testing.assert_array_equal(results[task + batch][name], value.numpy(), err_msg=name)
  assert results["classifier_short"]["input_mask"].sum(1).max() < MAX_SEQ_LENGTH


@pytest.mark.slow
def test_mismatched_batches_are_refused_by_every_exported_task(exported):
  _, results = exported
  for task in serving.TASKS:
    assert results[task + "_refused"]["refused"].tolist() == [True] * 6, task


@pytest.mark.slow
@pytest.mark.parametrize("batch, pairs", BATCHES)
def test_classifier_and_embeddings_match_keras(setup, exported, batch, pairs):
  _, results = exported
  got = results["classifier" + batch]
  _, _, outputs = _python_path(setup, "classifier", pairs)
  logits = output_families.logits_of(outputs).numpy()
  np.testing.assert_allclose(got["logits"], logits, atol=1e-5)
  probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  np.testing.assert_allclose(got["probabilities"], probabilities, atol=1e-5)
  assert np.ptp(got["probabilities"], axis=0).max() > 1e-3  # (not constant)
  # No label names given: the output numbers as names, the argmax's as `label`.
  assert got["label_names"].tolist() == [["0", "1", "2"]] * len(pairs)
  assert got["label"].tolist() == [str(i) for i in probabilities.argmax(-1)]
  got = results["embeddings" + batch]
  _, _, outputs = _python_path(setup, "embeddings", pairs)
  np.testing.assert_allclose(got["pooled_output"], outputs["pooled_output"].numpy(), atol=1e-5)
  _assert_per_position(got["sequence_output"], outputs["sequence_output"].numpy(),
                       got["input_mask"])


def _assert_per_position(got, expected, mask):
  """got == expected where mask is 1 (to 1e-5), 0 where it is 0 (the SavedModel's padding)."""
  mask = mask.astype(bool)
  assert (~mask).any()
  np.testing.assert_allclose(got[mask], expected[mask], atol=1e-5)
  assert not got[~mask].any()


def _best_span_in_python(start_logits, end_logits, tokens):
  """The best (start, end) over the context tokens (after the first [SEP], before the last),
  end - start < MAX_ANSWER_LENGTH, by start + end logit (the first one on ties); (-1, -1)
  when there is no context."""
  first_sep = tokens.index("[SEP]")
  context = range(first_sep + 1, len(tokens) - 1) if len(tokens) > first_sep + 1 else []
  best, span = None, (-1, -1)
  for i in context:
    for j in context:
      if i <= j < i + MAX_ANSWER_LENGTH and (best is None
                                             or start_logits[i] + end_logits[j] > best):
        best, span = start_logits[i] + end_logits[j], (i, j)
  return span


@pytest.mark.slow
@pytest.mark.parametrize("batch, pairs", BATCHES)
def test_squad_matches_keras_and_the_python_span(setup, exported, batch, pairs):
  _, results = exported
  squad = results["squad" + batch]
  tokens, _, outputs = _python_path(setup, "squad", pairs)
  for name in ("start_logits", "end_logits"):
    _assert_per_position(squad[name], outputs[name].numpy(), squad["input_mask"])
  answers = []
  for row, row_tokens in enumerate(tokens):
    start, end = _best_span_in_python(squad["start_logits"][row], squad["end_logits"][row],
                                      row_tokens)
    assert (squad["start_index"][row], squad["end_index"][row]) == (start, end), row
    text = " ".join(row_tokens[start:end + 1]) if start >= 0 else ""
    answers.append(text.replace(" ##", "").replace("##", ""))
  assert squad["answer"].tolist() == answers
  assert [bool(a) for a in answers] == [bool(b) for _, b in pairs]  # (no context: no answer)


@pytest.mark.slow
def test_saved_model_cli_lists_both_signatures(exported):
  dirs, _ = exported
  proc = subprocess.run([sys.executable, "-m", "tensorflow.python.tools.saved_model_cli", "show",
                         "--dir", dirs["classifier"], "--all"],
                        capture_output=True, text=True, timeout=300, env=ENV)
  assert proc.returncode == 0, proc.stderr[-3000:]
  for line in ("signature_def['serving_default']", "signature_def['preprocess']",
               "inputs['text_a']", "inputs['text_b']", "outputs['probabilities']",
               "outputs['input_ids']"):
    assert line in proc.stdout


@pytest.mark.slow
def test_saved_model_cli_run(setup, exported):
  """The TF1-style loader of saved_model_cli run (as TF Serving's) restores the variables.
  (Its --input_exprs are split at ";": PAIRS[2] has none.)"""
  dirs, results = exported
  proc = subprocess.run([sys.executable, "-m", "tensorflow.python.tools.saved_model_cli", "run",
                         "--dir", dirs["classifier"], "--tag_set", "serve", "--signature_def",
                         "serving_default", "--input_exprs",
                         f"text_a={[PAIRS[2][0]]!r};text_b={[PAIRS[2][1]]!r}"],
                        capture_output=True, text=True, timeout=300, env=ENV)
  assert proc.returncode == 0, proc.stderr[-3000:]
  printed = proc.stdout.split("Result for output key probabilities:", 1)[1].split("Result")[0]
  values = [float(x) for x in printed.replace("[", " ").replace("]", " ").split()]
  np.testing.assert_allclose(values, results["classifier"]["probabilities"][2], atol=1e-5)


def test_bad_checkpoint_leaves_no_directory(setup, tmp_path):
  """A checkpoint of another hidden size: a one-line error (the config checked against the
  checkpoint's shapes before any model is built), and neither export_dir nor a temporary
  beside it."""
  other = modeling.BertConfig(vocab_size=len(WORDS), hidden_size=48, num_hidden_layers=2,
                              num_attention_heads=2, intermediate_size=64,
                              max_position_embeddings=32)
  checkpoints.save_tf1_checkpoint(modeling.BertModel(other), tmp_path / "other" / "model.ckpt")
  with pytest.raises(ValueError, match="does not fit --init_checkpoint .*: hidden_size 32 in "
                     "the config, 48 in the checkpoint"):
    export_saved_model.run(_options(setup, "embeddings", tmp_path / "out",
                                    init_checkpoint=str(tmp_path / "other" / "model.ckpt")))
  assert sorted(os.listdir(tmp_path)) == ["other"]


@pytest.mark.slow
def test_failed_save_leaves_no_directory(setup, tmp_path, monkeypatch):
  """A save that fails after writing its files (e.g. a full disk at the end)."""
  real_export_archive = serving.ServingModule.export_archive

  class FailingArchive:
    def __init__(self, archive):
      self.archive = archive

    def write_out(self, path, **kwargs):
      self.archive.write_out(path, **kwargs)
      assert os.listdir(path)  # (it did write)
      raise OSError("disk full")
  monkeypatch.setattr(serving.ServingModule, "export_archive",
                      lambda self: FailingArchive(real_export_archive(self)))
  with pytest.raises(OSError, match="disk full"):
    export_saved_model.run(_options(setup, "embeddings", tmp_path / "out"))
  assert os.listdir(tmp_path) == []
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "previous.txt").write_text("x")
  with pytest.raises(OSError, match="disk full"):  # (--overwrite: the previous one stays)
    export_saved_model.run(_options(setup, "embeddings", tmp_path / "out", overwrite=True))
  assert os.listdir(tmp_path) == ["out"] and os.listdir(tmp_path / "out") == ["previous.txt"]


@pytest.mark.slow
def test_existing_export_dir(setup, tmp_path):
  """An empty export_dir is replaced; a non-empty one is an error unless --overwrite, which
  replaces it and leaves nothing beside it."""
  out = tmp_path / "out"
  out.mkdir()
  export_saved_model.run(_options(setup, "embeddings", out))
  assert (out / "saved_model.pb").exists()
  with pytest.raises(ValueError, match="--export_dir .* not empty"):
    export_saved_model.run(_options(setup, "embeddings", out))
  (out / "stale.txt").write_text("x")
  export_saved_model.run(_options(setup, "embeddings", out, overwrite=True))
  assert not (out / "stale.txt").exists() and (out / "saved_model.pb").exists()
  assert os.listdir(tmp_path) == ["out"]


@pytest.mark.parametrize("overrides, message", [
    (dict(num_labels=None), "needs --num_labels or --task_name"),
    (dict(num_labels=None, task_name="nope"), "--task_name nope: not a known task"),
    (dict(num_labels=2, task_name="MNLI"), "--num_labels 2 disagrees with --task_name MNLI"),
    (dict(max_seq_length=64), "--max_seq_length 64 is longer than the model's"),
    (dict(init_checkpoint="/nonexistent/model.ckpt"), "--init_checkpoint /nonexistent"),
    (dict(vocab_file="/nonexistent/vocab.txt"), "--vocab_file /nonexistent"),
    (dict(task="squad", num_labels=3), "--num_labels / --task_name are for --task=classifier"),
])
def test_flag_errors(setup, tmp_path, overrides, message):
  overrides = dict(overrides)
  task = overrides.pop("task", "classifier")
  with pytest.raises(ValueError, match=message):
    export_saved_model.run(_options(setup, task, tmp_path / "out", **overrides))
  assert os.listdir(tmp_path) == []


def test_task_name_gives_num_labels(setup):
  options = _options(setup, "classifier", "unused", num_labels=None, task_name="MNLI")
  assert export_saved_model.num_labels(options) == 3


@pytest.mark.slow
def test_command_line_error_is_one_line(setup, tmp_path):
  proc = subprocess.run(
      [sys.executable, str(REPO / "export_saved_model.py"), "--task=classifier",
       f"--bert_config_file={setup['config_file']}", f"--vocab_file={setup['vocab']}",
       f"--init_checkpoint={setup['checkpoints']['classifier']}",
       f"--export_dir={tmp_path / 'out'}"],
      capture_output=True, text=True, timeout=300, env=ENV, cwd=str(tmp_path))
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1] == (
      "error: --task=classifier needs --num_labels or --task_name")
  assert os.listdir(tmp_path) == []


def test_span_text_glues_word_pieces():
  """The original's joining: " ".join(pieces), " ##" and "##" removed; -1: empty."""
  vocabulary = tf.constant(WORDS)
  ids = [[WORDS.index(t) for t in ("[CLS]", "who", "[SEP]", "jim", "puppet", "##eer", "##s",
                                   "b", "##ark", "##ed", "[SEP]")]] * 5
  start = tf.constant([4, 3, 5, 8, -1])
  end = tf.constant([6, 5, 6, 10, -1])
  got = output_families.span_text(tf.constant(ids), start, end, vocabulary).numpy().astype(str)
  assert got.tolist() == ["puppeteers", "jim puppeteer", "eers", "arked [SEP]", ""]


@pytest.mark.slow
def test_checkpoint_without_the_head_warns(setup, tmp_path, caplog):
  """A classifier exported from a pre-training checkpoint: its head stays random, said in a
  warning (the export still happens: the encoder is the checkpoint's)."""
  export_saved_model.run(_options(setup, "classifier", tmp_path / "out",
                                  init_checkpoint=setup["checkpoints"]["embeddings"]))
  assert "has no classifier head" in caplog.text
  assert (tmp_path / "out" / "saved_model.pb").exists()
  caplog.clear()
  export_saved_model.run(_options(setup, "classifier", tmp_path / "out2"))
  assert "has no classifier head" not in caplog.text


def test_export_dir_below_a_file_or_on_an_unknown_scheme(data, tmp_path, monkeypatch):  # noqa: F811
  from bert_keras import export_saved_model
  monkeypatch.setattr(export_saved_model, "build_model", None)  # any model built would fail
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"w{i}\n" for i in range(100)))
  for export_dir, expected in (
      ("/etc/passwd/x", "--export_dir /etc/passwd/x: is below the file /etc/passwd"),
      ("foo://x/y", "--export_dir foo://x/y: File system scheme 'foo' not implemented")):
    with pytest.raises(ValueError) as info:
      export_saved_model.run(export_saved_model.options(
          bert_config_file=str(data / "config.json"), vocab_file=str(vocab), task="embeddings",
          init_checkpoint=str(data / "init" / "bert_model.ckpt"), max_seq_length=16,
          export_dir=export_dir))
    assert str(info.value).startswith(expected)


def test_export_lock_and_dead_exports_temporaries(data, tmp_path, monkeypatch,  # noqa: F811
                                                  caplog):
  from bert_keras import export_saved_model
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                           + [f"w{i}" for i in range(5, 100)]))
  out = tmp_path / "exports" / "model"
  out.parent.mkdir()
  dead = dead_pid()
  stale = [f".model.tmp-{dead}", f".model.old.tmp-{dead}"]
  kept = [f".model.tmp-{os.getpid()}", f".other.tmp-{dead}"]   # a live one's, another's
  for name in stale + kept:
    (out.parent / name).mkdir()
    (out.parent / name / "saved_model.pb").write_text("x")

  def export_options(**overrides):
    return export_saved_model.options(
        bert_config_file=str(data / "config.json"), vocab_file=str(vocab), task="embeddings",
        init_checkpoint=str(data / "init" / "bert_model.ckpt"), max_seq_length=16,
        export_dir=str(out), **overrides)
  seen = []

  def fake_export(options, config, labels, tags, preprocessor, *unused):
    seen.append(sorted(os.listdir(out.parent)))
    with pytest.raises(ValueError) as info:                # a second export meanwhile
      export_saved_model.run(export_options(overwrite=True))
    assert str(info.value).startswith(f"--export_dir {out}: another run (pid {os.getpid()}")
    out.mkdir()
    (out / "saved_model.pb").write_text("x")
  monkeypatch.setattr(export_saved_model, "_export", fake_export)
  export_saved_model.run(export_options())
  assert seen == [sorted(kept + [".model.lock"])]
  assert sorted(os.listdir(out.parent)) == sorted(kept + ["model"])   # the lock released
  assert sum("a temporary left by" in r.getMessage() for r in caplog.records) == 2
  with pytest.raises(ValueError, match="exists and is not empty .*--overwrite"):
    export_saved_model.run(export_options())


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
def test_serving_signatures_refuse_mismatched_batches(tmp_path):
  from bert_keras import export_saved_model
  from bert_keras import preprocessing
  from bert_keras import serving
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                              "the", "dog", "runs"]))
  config = modeling.BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32)
  preprocessor = preprocessing.BertPreprocessor(str(vocab), True, 16)
  cases = [(["the dog", "runs"], ["runs"]), (["the", "dog", "runs"], ["a", "b"]),
           ([], ["runs"])]
  for text_a, text_b in cases:                            # the Keras layer, eagerly
    with pytest.raises(tf.errors.InvalidArgumentError, match="text_a and text_b must have the "
                       "same number of rows"):
      preprocessor({"text_a": tf.constant(text_a, tf.string),
                    "text_b": tf.constant(text_b, tf.string)})
  for task in serving.TASKS:
    module = serving.ServingModule(export_saved_model.build_model(task, config, 2),
                                   preprocessor, task)
    for function in (module.serve, module.preprocess)[:2 if task == "classifier" else 1]:
      for text_a, text_b in cases:
        with pytest.raises(tf.errors.InvalidArgumentError, match="text_a and text_b must "
                           "have the same number of rows"):
          function(tf.constant(text_a, tf.string), tf.constant(text_b, tf.string))
    assert module.serve(tf.constant(["the dog", "runs"]), tf.constant(["runs", ""]))


def test_saved_model_takes_a_scalar_text_as_a_batch_of_one(tmp_path):
  """A scalar string fed to the SavedModel's signatures is a batch of one (the outputs of
  [text]); a higher rank is refused with a message naming the input."""
  from bert_keras import export_saved_model
  from bert_keras import preprocessing
  from bert_keras import serving
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                              "the", "dog", "runs"]))
  config = modeling.BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32)
  preprocessor = preprocessing.BertPreprocessor(str(vocab), True, 16)
  module = serving.ServingModule(export_saved_model.build_model("classifier", config, 2),
                                 preprocessor, "classifier")
  serving.save_atomic(module, str(tmp_path / "export"))
  loaded = tf.saved_model.load(str(tmp_path / "export"))
  for name in serving.SIGNATURES:
    signature = loaded.signatures[name]
    one = signature(text_a=tf.constant("the dog"), text_b=tf.constant("runs"))
    batch = signature(text_a=tf.constant(["the dog"]), text_b=tf.constant(["runs"]))
    assert set(one) == set(batch)
    for key in batch:
      assert one[key].shape == batch[key].shape and batch[key].shape[0] == 1, key
      np.testing.assert_array_equal(one[key].numpy(), batch[key].numpy())
  with pytest.raises(tf.errors.InvalidArgumentError, match="text_a must be a string or a "
                     "vector"):
    loaded.signatures["serving_default"](text_a=tf.constant([["the dog"]]),
                                         text_b=tf.constant([[""]]))


def test_tampered_thresholds_file_names_the_file_and_field(tmp_path):
  """--multi_label reads thresholds.json beside --init_checkpoint: a threshold that is not a
  number in [0, 1], or a separator that is not a string, is an error naming the file and the
  field (not NumPy's "could not convert")."""
  from bert_keras import export_saved_model
  path = tmp_path / "thresholds.json"
  for record, message in (
      ({"labels": ["a", "b"], "thresholds": [0.5, "x"]}, r"\"thresholds\" must be 2 numbers "
       r"in \[0, 1\] \(one a label\), not \"x\""),
      ({"labels": ["a", "b"], "thresholds": [0.5, 7]}, "not 7"),
      ({"labels": ["a", "b"], "thresholds": [0.5, True]}, "not true"),
      ({"labels": ["a"], "thresholds": [0.5], "label_separator": 3},
       "\"label_separator\" must be a string, not 3")):
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=f"{path}: .*{message}"):
      export_saved_model.multi_label_head(export_saved_model.options(
          init_checkpoint=str(tmp_path), multi_label=True))
  path.write_text(json.dumps({"labels": ["a", "b"], "thresholds": [0.25, 1]}))
  names, thresholds, separator = export_saved_model.multi_label_head(
      export_saved_model.options(init_checkpoint=str(tmp_path), multi_label=True))
  assert names == ["a", "b"] and thresholds.tolist() == [0.25, 1.0] and separator == ","
