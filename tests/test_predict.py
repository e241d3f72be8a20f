"""predict.py: a model directory (run_* layout, runtime/model_dir.py) or a SavedModel, rows
of text in (TSV, CSV, JSON Lines, stdin), JSON Lines out. Each task's fields against an
independent path (tokenization.FullTokenizer + preprocessing.pack_tokens + the Keras model,
NumPy after it); bad rows; the memory bound (a subprocess, slow)."""

import csv
import io
import json
import logging
import os
import pathlib
import subprocess
import sys
import types

import numpy as np
import pytest

from bert_keras import checkpoints
from bert_keras import huggingface_layout
from bert_keras import modeling
from bert_keras import predict
from bert_keras import preprocessing
from bert_keras.runtime import model_dir
from bert_keras.tasks.ner import tagging as ner
from bert_keras.prediction import row_io
from bert_keras import tokenization
from bert_keras.utils import conlleval
from conftest import tiny_vocab_and_config

REPO = pathlib.Path(__file__).resolve().parent.parent
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "is", "hairy", ".", "who",
         "was", "jim", "henson", "?", "a", "puppet", "##eer", "##s", "hello", "world", "b",
         "##ark", "##ed", "at", "you", "'", "t", "!", "你", "好", "cafe", "paris", "mary"]
MAX_SEQ_LENGTH = 24
CLASSES = ["neg", "neu", "pos"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
PAIRS = [("The dog is hairy.", "Hello world"), ("Who was Jim Henson?", ""),
         ("Café 你好, \"quoted\"", "the dog barked at you!"), ("hello world " * 9, "jim"),
         ("", "the dog")]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
  """Model directories of a tiny config with random weights: classifier, squad and tagger
  as run_* output_dirs (model_dir.write_model_dir), and a Google-style checkpoint directory
  without task.json (embeddings); the Keras models, for the oracles."""
  root = tmp_path_factory.mktemp("predict")
  vocab, config = tiny_vocab_and_config(root, WORDS, max_position_embeddings=64)
  rng = np.random.default_rng(0)
  models, paths = {}, {}
  for task, model, labels, extra in (
      ("classifier", modeling.BertClassifier(config, 3), CLASSES, {}),
      ("squad", modeling.BertSquad(config), None,
       dict(doc_stride=6, max_query_length=8, max_answer_length=5)),
      ("tagger", modeling.BertTokenClassifier(config, len(TAGS)), TAGS, {}),
      ("embeddings", modeling.BertModel(config), None, None)):
    for v in model.weights:
      v.assign(rng.normal(0, 0.3, v.shape).astype(np.float32))
    directory = root / task
    directory.mkdir()
    checkpoints.save_tf1_checkpoint(model, directory / "model.ckpt")
    if extra is None:
      (directory / "bert_config.json").write_text(config.to_json_string())
      (directory / "vocab.txt").write_text(vocab.read_text(encoding="utf-8"), encoding="utf-8")
    else:
      options = types.SimpleNamespace(vocab_file=str(vocab), do_lower_case=True,
                                      max_seq_length=MAX_SEQ_LENGTH)
      model_dir.write_model_dir(str(directory), options, config, task, labels=labels, **extra)
    models[task], paths[task] = model, str(directory)
  tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
  return dict(root=root, models=models, paths=paths, tokenizer=tokenizer, cache={})


def _features(tokenizer, pairs, max_seq_length=MAX_SEQ_LENGTH):
  rows = [preprocessing.pack_tokens(tokenizer.tokenize(a), tokenizer.tokenize(b) or None,
                                    max_seq_length, tokenizer)[1:] for a, b in pairs]
  return {name: np.array([r[i] for r in rows], np.int32)
          for i, name in enumerate(("input_ids", "input_mask", "segment_ids"))}


def _predictor(dirs, which, **model_options):
  """predict.load_predictor of a fixture directory, loaded once per module (a load and the
  first call's tracing take seconds)."""
  key = (which, tuple(sorted(model_options.items())))
  if key not in dirs["cache"]:
    dirs["cache"][key] = predict.load_predictor(predict.options(
        model_dir=dirs["paths"][which], **model_options))
  return dirs["cache"][key]


def _run(tmp_path, dirs, which, text, name, model_options=None, **overrides):
  """predict_file of `text` (written to tmp_path/name) -> the output rows."""
  path = tmp_path / name
  path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
  out = tmp_path / (name + ".out.jsonl")
  counts = predict.predict_file(
      _predictor(dirs, which, **(model_options or {})),
      predict.options(model_dir=dirs["paths"][which], input_file=str(path),
                      output_file=str(out), **overrides))
  lines = out.read_text(encoding="utf-8").splitlines()
  assert counts["written"] == len(lines)
  return [json.loads(line) for line in lines]


def _stdin(dirs, which, text, monkeypatch, capsys, model_options=None, **overrides):
  """predict_file from standard input (`text`) to standard output -> the output rows."""
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))
  capsys.readouterr()
  predict.predict_file(_predictor(dirs, which, **(model_options or {})),
                       predict.options(model_dir=dirs["paths"][which], input_file="-",
                                       **overrides))
  return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _tsv(header, rows):
  return "".join("\t".join(r) + "\n" for r in [header] + rows)


def _csv(header, rows):
  out = io.StringIO()
  csv.writer(out).writerows([header] + rows)
  return out.getvalue()


def test_reader_formats_agree(tmp_path, monkeypatch):
  """The same rows as TSV, CSV (quotes, a field over two lines), JSON Lines and sniffed stdin."""
  rows = [{"id": str(i), "sentence1": a, "sentence2": b} for i, (a, b) in enumerate(PAIRS)]
  header = ["id", "sentence1", "sentence2"]
  csv_text = "id,sentence1,sentence2\r\n" + "".join(
      ",".join('"%s"' % v.replace('"', '""') for v in r.values()) + "\r\n" for r in rows)
  csv_text = csv_text.replace("Hello world", "Hello\nworld")
  texts = {"a.tsv": _tsv(header, [list(r.values()) for r in rows]), "a.csv": csv_text,
           "a.jsonl": "".join(json.dumps(r) + "\n\n" for r in rows)}
  for name, text in texts.items():
    (tmp_path / name).write_text(text, encoding="utf-8", newline="")
    got = [r.fields for r in row_io.Reader(str(tmp_path / name))]
    want = [dict(r, sentence2="Hello\nworld") if name == "a.csv" and i == 0 else r
            for i, r in enumerate(rows)]
    assert got == want, name
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))
    reader = row_io.Reader("-")
    assert reader.format == name.split(".")[1] and [r.fields for r in reader] == want


def test_classifier_files_and_stdin_equal_the_model(dirs, tmp_path, monkeypatch, capsys):
  rows = [{"guid": str(i), "sentence1": a, "sentence2": b, "label": "gold"}
          for i, (a, b) in enumerate(PAIRS)]
  got = _run(tmp_path, dirs, "classifier", "".join(json.dumps(r) + "\n" for r in rows),
             "in.jsonl", batch_size=2)
  logits = dirs["models"]["classifier"](_features(dirs["tokenizer"], PAIRS), training=False)
  want = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
  assert [{k: r[k] for k in ("guid", "sentence1", "sentence2")} for r in got] == [
      {k: r[k] for k in ("guid", "sentence1", "sentence2")} for r in rows]
  assert [list(r["probabilities"]) for r in got] == [CLASSES] * len(PAIRS)
  probabilities = np.array([list(r["probabilities"].values()) for r in got])
  np.testing.assert_allclose(probabilities, want, atol=2e-6)
  assert [r["label"] for r in got] == [CLASSES[i] for i in np.argmax(want, axis=1)]
  # The same rows from standard input (TSV, sniffed) to standard output, by run().
  tsv = _tsv(["guid", "sentence1", "sentence2"], [[r["guid"], r["sentence1"], r["sentence2"]]
                                                  for r in rows])
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(tsv.encode("utf-8"))))
  capsys.readouterr()
  predict.run(predict.options(model_dir=dirs["paths"]["classifier"], input_file="-"))
  from_stdin = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert [r["label"] for r in from_stdin] == [r["label"] for r in got]
  np.testing.assert_allclose([list(r["probabilities"].values()) for r in from_stdin],
                             probabilities, atol=1e-6)
  # Single texts (--text_b_column=none) from CSV: text_b ignored.
  single = _run(tmp_path, dirs, "classifier", _csv(["sentence", "other"],
                                                   [[a, "x"] for a, _ in PAIRS]), "in.csv")
  logits = dirs["models"]["classifier"](_features(dirs["tokenizer"], [(a, "") for a, _ in PAIRS]),
                                        training=False)
  np.testing.assert_allclose([list(r["probabilities"].values()) for r in single],
                             np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True),
                             atol=2e-6)
  assert [r["sentence"] for r in single] == [a for a, _ in PAIRS]


def _chunks(tags):
  """conlleval's chunks of a tag sequence (tasks/conlleval rules): (type, first, last)."""
  found, start, previous = [], None, ("O", "")
  for i, tag in enumerate(tags + ["O"]):
    prefix, kind = conlleval.split_tag(tag)
    if start is not None and conlleval.chunk_ends(previous[0], prefix, previous[1], kind):
      found.append((previous[1], start, i - 1))
      start = None
    if conlleval.chunk_starts(previous[0], prefix, previous[1], kind):
      start = i
    previous = (prefix, kind)
  return found


def test_tagger_entities_have_character_offsets(dirs, tmp_path):
  word_lists = [["hello", "Jim", "Henson", "the", "café", "dog", "你", "好", "barked"],
                ["who", "was", "jim"], ["mary", "paris", "the", "puppeteers", "at", "you"]]
  texts = [" ".join(words) for words in word_lists]
  got = _run(tmp_path, dirs, "tagger", _tsv(["text"], [[t] for t in texts]), "t.tsv")
  tags = ner.tag_sentences(dirs["models"]["tagger"], dirs["tokenizer"], TAGS, word_lists,
                           MAX_SEQ_LENGTH)
  assert any(r["entities"] for r in got)
  for text, words, row_tags, row in zip(texts, word_lists, tags, got):
    starts = [sum(len(w) + 1 for w in words[:i]) for i in range(len(words))]
    want = [(kind, starts[a], starts[b] + len(words[b])) for kind, a, b in _chunks(row_tags)]
    assert [(e["type"], e["start"], e["end"]) for e in row["entities"]] == want
    assert all(e["text"] == text[e["start"]:e["end"]] for e in row["entities"])
    assert all(0 < e["score"] <= 1 for e in row["entities"])


def test_an_input_field_named_like_an_output_is_kept(dirs, tmp_path, caplog):
  """A dev file's gold `label` (and a `probabilities` column) stays beside the prediction, as
  input_label (input_probabilities), with a warning: never overwritten by the predicted one."""
  rows = [["the dog is hairy .", "gold-a", "p1"], ["who barked ?", "gold-b", "p2"]]
  with caplog.at_level(logging.WARNING):
    got = _run(tmp_path, dirs, "classifier", _tsv(["text", "label", "probabilities"], rows),
               "d.tsv")
  assert [(r["input_label"], r["input_probabilities"]) for r in got] == [
      ("gold-a", "p1"), ("gold-b", "p2")]
  assert all(r["label"] in CLASSES and len(r["probabilities"]) == len(CLASSES) for r in got)
  assert list(got[0])[:3] == ["text", "input_label", "input_probabilities"]
  said = [r.getMessage() for r in caplog.records if "written as" in r.getMessage()]
  assert len(said) == 2 and "'label' is written as 'input_label'" in said[0]


def _best_span(start_logits, end_logits, segment_ids, mask, max_answer_length):
  """The best (start, end) of the context positions: a plain double loop."""
  n = int(mask.sum())
  best = None
  for s in range(n - 1):
    for e in range(s, min(n - 1, s + max_answer_length)):
      if segment_ids[s] == 1 and segment_ids[e] == 1:
        score = start_logits[s] + end_logits[e]
        if best is None or score > best[0]:
          best = (score, s, e)
  return best[1:]


def test_squad_answers_are_the_best_spans(dirs, tmp_path, monkeypatch, capsys):
  examples = [("who was jim henson?", "Jim Henson was a puppeteer; the dog"),
              ("the dog", "café 你好 the  dog is hairy"),
              ("hello", "Mary barked at you, hello world!")]
  got = _run(tmp_path, dirs, "squad",
             "".join(json.dumps({"question": q, "context": c}) + "\n" for q, c in examples),
             "s.jsonl")
  tokenizer = dirs["tokenizer"]
  features = _features(tokenizer, examples)
  outputs = dirs["models"]["squad"](features, training=False)
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  for i, ((_, context), row) in enumerate(zip(examples, got)):
    answer = row["answer"]
    assert context[answer["start"]:answer["end"]] == answer["text"] != ""
    s, e = _best_span(np.asarray(outputs["start_logits"][i]), np.asarray(outputs["end_logits"][i]),
                      features["segment_ids"][i], features["input_mask"][i], 5)
    pieces = tokenizer.convert_ids_to_tokens(features["input_ids"][i][s:e + 1])
    want = " ".join(pieces).replace(" ##", "").replace("##", "")
    assert " ".join(basic.tokenize(answer["text"])).find(want.strip()) >= 0
  # A context longer than one window (doc_stride 6), from stdin as TSV.
  long_context = " ".join(["the dog is hairy . hello world", "jim henson was a puppeteer"] * 4)
  tsv = _tsv(["question", "context"], [["who was jim", long_context]])
  (row,) = _stdin(dirs, "squad", tsv, monkeypatch, capsys, input_format="tsv")
  answer = row["answer"]
  assert long_context[answer["start"]:answer["end"]] == answer["text"] != ""


def test_embeddings_of_a_checkpoint_directory(dirs, tmp_path, monkeypatch, capsys):
  texts = [a for a, _ in PAIRS]
  got = _run(tmp_path, dirs, "embeddings", _csv(["text"], [[t] for t in texts]),
             "e.csv", model_options=dict(task="embeddings"))
  features = _features(dirs["tokenizer"], [(t, "") for t in texts], 64)  # the positions
  sequence = np.asarray(dirs["models"]["embeddings"](features, training=False)["sequence_output"])
  mask = features["input_mask"][:, :, None]
  mean = (sequence * mask).sum(1) / mask.sum(1)
  np.testing.assert_allclose([r["embedding"] for r in got], mean, atol=2e-5)
  rows = _stdin(dirs, "embeddings", "".join(json.dumps({"text": t}) + "\n" for t in texts),
                monkeypatch, capsys,
                model_options=dict(task="embeddings", pooling="cls", normalize=True))
  cls = sequence[:, 0] / np.linalg.norm(sequence[:, 0], axis=1, keepdims=True)
  np.testing.assert_allclose([r["embedding"] for r in rows], cls, atol=2e-5)


def test_embeddings_of_a_huggingface_weight_file(dirs, tmp_path):
  """--model_dir a model.safetensors file, as --init_checkpoint takes it: its directory gives
  config.json and vocab.txt; the same vectors as the checkpoint directory's."""
  hf = tmp_path / "hf"
  huggingface_layout.save_huggingface(dirs["models"]["embeddings"], str(hf),
                                      vocab_file=str(dirs["root"] / "vocab.txt"),
                                      do_lower_case=True)
  path = tmp_path / "in.jsonl"
  texts = [a for a, _ in PAIRS]
  path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
  out = tmp_path / "out.jsonl"
  predict.run(predict.options(model_dir=str(hf / "model.safetensors"), task="embeddings",
                              input_file=str(path), output_file=str(out)))
  got = [json.loads(line)["embedding"] for line in out.read_text().splitlines()]
  want = _run(tmp_path, dirs, "embeddings", _csv(["text"], [[t] for t in texts]), "e.csv",
              model_options=dict(task="embeddings"))
  np.testing.assert_allclose(got, [r["embedding"] for r in want], atol=2e-5)


def test_bad_rows_stop_or_are_skipped(dirs, tmp_path, caplog):
  good = json.dumps({"sentence": "the dog"}) + "\n"
  bad = [(b'{"sentence": "the dog"\n', 2, "not valid JSON"),
         ('{"sentence": "caf\xe9"}\n'.encode("latin-1"), 3, "not UTF-8"),
         (b'{"other": "x"}\n', 4, "no field 'sentence'"),
         (b'{"sentence": 3}\n', 5, "field 'sentence' is not a string"),
         (b'[1, 2]\n', 6, "not a JSON object")]
  data = good.encode() + b"".join(line for line, _, _ in bad) + good.encode()
  for index, (line, number, message) in enumerate(bad):
    path = tmp_path / f"bad{index}.jsonl"
    path.write_bytes(good.encode() + b"\n" * (number - 2) + line + good.encode())
    out = tmp_path / f"bad{index}.out"
    with pytest.raises(ValueError, match=f"{path} line {number}: {message}"):
      predict.predict_file(_predictor(dirs, "classifier"), predict.options(
          input_file=str(path), output_file=str(out)))
    assert not out.exists() and not [n for n in os.listdir(tmp_path) if ".tmp-" in n]
  with caplog.at_level("INFO"):
    got = _run(tmp_path, dirs, "classifier", data, "mixed.jsonl", skip_bad_rows=True)
  assert len(got) == 2 and "skipped 5 bad rows" in caplog.text
  tsv = "sentence\tx\nthe dog\t1\nthe dog\n".encode()
  with pytest.raises(ValueError, match="t.tsv line 3: 1 fields, the header has 2"):
    _run(tmp_path, dirs, "classifier", tsv, "t.tsv")
  with pytest.raises(ValueError, match="no field 'nope' \\(--text_a_column\\)"):
    _run(tmp_path, dirs, "classifier", tsv, "t.tsv", text_a_column="nope")


def test_flag_errors(dirs, tmp_path):
  path = tmp_path / "in.jsonl"
  path.write_text('{"text": "x"}\n')
  run = lambda **kw: predict.run(predict.options(**dict(dict(  # noqa: E731
      model_dir=dirs["paths"]["classifier"], input_file=str(path)), **kw)))
  with pytest.raises(ValueError, match="--model_dir .*nowhere: no such directory"):
    run(model_dir=str(tmp_path / "nowhere"))
  with pytest.raises(ValueError, match="--input_file .*: no such file"):
    run(input_file=str(tmp_path / "none.tsv"))
  with pytest.raises(ValueError, match="no task.json .* --task=embeddings"):
    run(model_dir=dirs["paths"]["embeddings"])
  with pytest.raises(ValueError, match="--pooling / --normalize are for --task=embeddings"):
    run(pooling="max")
  with pytest.raises(ValueError, match="--output_file .* is the --input_file"):
    run(output_file=str(path))
  with pytest.raises(ValueError, match=r"^--threshold=0.7 is for a multi-label model \(one "
                     r"trained with --multi_label\), not the classifier model of --model_dir "):
    run(threshold=0.7)
  with pytest.raises(ValueError, match=r"^--threshold=0.5 is for a multi-label model"):
    run(threshold=0.5)  # (its default is None: a 0.5 is given, as any other value)


@pytest.mark.slow
def test_saved_model_gives_the_checkpoints_predictions(dirs, tmp_path):
  from bert_keras import export_saved_model
  export_dir = tmp_path / "exported"
  directory = dirs["paths"]["classifier"]
  export_saved_model.run(export_saved_model.options(
      bert_config_file=os.path.join(directory, "bert_config.json"), init_checkpoint=directory,
      vocab_file=os.path.join(directory, "vocab.txt"), max_seq_length=MAX_SEQ_LENGTH,
      task="classifier", num_labels=3, export_dir=str(export_dir)))
  text = "".join(json.dumps({"text_a": a, "text_b": b}) + "\n" for a, b in PAIRS)
  from_checkpoint = _run(tmp_path, dirs, "classifier", text, "c.jsonl")

  def run_saved_model():
    (tmp_path / "s.jsonl").write_text(text, encoding="utf-8")
    predict.run(predict.options(model_dir=str(export_dir), input_file=str(tmp_path / "s.jsonl"),
                                output_file=str(tmp_path / "s.out")))
    return [json.loads(line) for line in (tmp_path / "s.out").read_text().splitlines()]
  # Without labels.txt: the indices (or the names of a label_names output, where the export
  # writes one).
  assert list(run_saved_model()[0]["probabilities"]) in (["0", "1", "2"], CLASSES)
  (export_dir / "labels.txt").write_text("\n".join(CLASSES) + "\n")
  from_saved_model = run_saved_model()
  for a, b in zip(from_checkpoint, from_saved_model):
    assert a["label"] == b["label"] and list(a["probabilities"]) == list(b["probabilities"])
    np.testing.assert_allclose(list(a["probabilities"].values()),
                               list(b["probabilities"].values()), atol=1e-6)


_PEAK_RSS = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


@pytest.mark.slow
def test_memory_does_not_grow_with_the_input(dirs, tmp_path):
  """Peak RSS of predict.py (a subprocess each) on an input of 0.5 MB and one of 20 times
  that, 10 MB: the same within 6 MB (holding the rows as dicts and their output lines would
  add more than 20 MB). The bytes are in a field that is not a text (carried to the output,
  not tokenized), so that the test's time goes to neither."""
  row = json.dumps({"sentence1": "the dog is hairy .", "sentence2": "hello world",
                    "payload": "x" * 1000})
  peaks = {}
  for name, count in (("small", 500), ("large", 10000)):
    path = tmp_path / f"{name}.jsonl"
    with open(path, "w") as f:
      for i in range(count):
        f.write(row[:-1] + ', "id": %d}\n' % i)
    out = tmp_path / f"{name}.out"
    command = [sys.executable, str(REPO / "predict.py"),
               "--model_dir=" + dirs["paths"]["classifier"], "--input_file=" + str(path),
               "--output_file=" + str(out), "--max_seq_length=8", "--batch_size=64"]
    result = subprocess.run([sys.executable, "-c", _PEAK_RSS] + command, capture_output=True,
                            text=True, cwd=str(tmp_path),
                            env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    peaks[name] = int(result.stdout.split()[-1]) / 1024  # MB
    with open(out) as f:
      assert sum(1 for _ in f) == count
  assert os.path.getsize(tmp_path / "large.jsonl") > 1e7
  print("peak RSS (MB):", peaks)
  assert peaks["large"] - peaks["small"] < 6, peaks


def test_outputs_of_each_task_without_a_model():
  """GraphPredictor's reading of each task's outputs, on made-up outputs: multi-label
  thresholds, regression, a SavedModel's label_names and its squad answer placed in the
  context, a tagger's byte offsets turned into characters."""
  import tensorflow as tf
  from bert_keras.prediction import predictors
  logits = np.array([[2.0, -1.0, 0.1], [-3.0, 0.0, 3.0]], np.float32)
  fake = lambda outputs: lambda a, b: {k: tf.constant(v) for k, v in outputs.items()}  # noqa
  multi = predictors.GraphPredictor(fake({"probabilities": logits, "logits": logits}),
                                    "classifier", labels=CLASSES, multi_label=True,
                                    thresholds=[0.5, 0.5, 0.6])
  rows = multi.predict(["x", "y"], None)
  sigmoid = 1 / (1 + np.exp(-logits.astype(np.float64)))
  np.testing.assert_allclose([list(r["probabilities"].values()) for r in rows], sigmoid)
  assert [r["labels"] for r in rows] == [["neg"], ["neu", "pos"]]  # 0.525 < 0.6, 0.5 >= 0.5
  saved = predictors.GraphPredictor(fake({"probabilities": sigmoid, "logits": logits,
                                          "predicted": [[0, 1, 1], [0, 0, 0]]}),
                                    "classifier", labels=CLASSES)
  assert [r["labels"] for r in saved.predict(["x", "y"], None)] == [["neu", "pos"], []]
  saved.thresholds = [0.5, 0.5, 0.6]  # --threshold (or task.json's) instead of the model's
  assert [r["labels"] for r in saved.predict(["x", "y"], None)] == [["neg"], ["neu", "pos"]]
  regression = predictors.GraphPredictor(fake({"predictions": [0.25, 4.5]}), "regression")
  assert regression.predict(["x", "y"], None) == [{"score": 0.25}, {"score": 4.5}]
  softmax = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
  named = predictors.GraphPredictor(fake({"probabilities": softmax, "logits": logits,
                                          "label_names": [[b"a", b"b", b"c"]] * 2}),
                                    "classifier")
  assert [r["label"] for r in named.predict(["x", "y"], None)] == ["a", "c"]
  squad = predictors.GraphPredictor(fake({"answer": [b"jim henson", b""],
                                          "start_index": [3, -1]}), "squad")
  context = "Who? Jim Henson's dog"
  assert squad.predict(["q", "q"], [context, "x"]) == [
      {"answer": {"text": "Jim Henson", "start": 5, "end": 15}},
      {"answer": {"text": "", "start": None, "end": None}}]
  text = "café Jim"   # "Jim" is bytes 6-9, characters 5-8
  tagger = predictors.GraphPredictor(fake({
      "entity_types": [[b"PER", b""]], "entity_starts": [[6, -1]], "entity_ends": [[9, -1]],
      "entity_scores": [[0.75, 0.0]]}), "tagger")
  assert tagger.predict([text], None) == [
      {"entities": [{"type": "PER", "text": "Jim", "start": 5, "end": 8, "score": 0.75}]}]


def test_non_finite_outputs_are_refused_naming_the_row(tmp_path):
  """A model whose outputs are NaN or Inf (a SavedModel of diverged weights, which cannot be
  checked cheaply) is refused at the first such row, naming it: NaN is not JSON. An input row
  holding NaN is a bad row; json_line never writes one."""
  import tensorflow as tf
  from bert_keras.prediction import predictors
  good = np.array([[0.5, 0.25, 0.25]], np.float32)
  calls = []

  def serve(a, b):
    calls.append(1)
    value = good if len(calls) == 1 else np.array([[0.5, np.nan, np.inf]], np.float32)
    return {"probabilities": tf.constant(value), "logits": tf.constant(value)}
  predictor = predictors.GraphPredictor(serve, "classifier", labels=CLASSES)
  path = tmp_path / "in.jsonl"
  path.write_text('{"sentence": "a"}\n{"sentence": "b"}\n', encoding="utf-8")
  with pytest.raises(ValueError, match=r"in\.jsonl line 2: the model of --model_dir m outputs "
                     r"probabilities\.neu = nan for this row, not a number"):
    predict.predict_file(predictor, predict.options(
        model_dir="m", input_file=str(path), output_file=str(tmp_path / "out.jsonl"),
        batch_size=1))
  assert not (tmp_path / "out.jsonl").exists()
  assert row_io.non_finite({"a": [1, 2.5, {"b": [float("-inf")]}]}) == ("a.2.b.0", -np.inf)
  assert row_io.non_finite({"a": [1, np.float32(2.5)], "b": "nan"}) is None
  with pytest.raises(ValueError, match="Out of range float"):
    row_io.json_line({"x": float("nan")})
  path.write_text('{"sentence": "a", "n": NaN}\n', encoding="utf-8")
  rows = list(row_io.Reader(str(path), "jsonl"))
  assert rows[0].fields is None and "NaN is not a JSON value" in rows[0].error


def test_a_lone_carriage_return_in_a_field_is_a_bad_row(tmp_path):
  """A lone \\r inside a TSV field (or an unquoted CSV one) was the csv module's traceback: it is
  a bad row naming its line, and the rows after it are read; inside a quoted CSV field it is
  text; in the header, an error naming line 1."""
  path = tmp_path / "t.tsv"
  path.write_bytes(b"text\tother\nfine\tx\nbro\rken\ty\nlast\tz\n")
  rows = list(row_io.Reader(str(path), "tsv"))
  assert [(r.line, r.fields) for r in rows if r.error is None] == [
      (2, {"text": "fine", "other": "x"}), (4, {"text": "last", "other": "z"})]
  assert [(r.line, r.error) for r in rows if r.error is not None] == [
      (3, "has a carriage return (\\r) inside a field, not at a line's end")]
  path = tmp_path / "q.csv"
  path.write_bytes(b'text,other\n"in\rside",x\nun\rquoted,y\n')
  rows = list(row_io.Reader(str(path), "csv"))
  assert rows[0].fields == {"text": "in\rside", "other": "x"} and rows[1].error is not None
  path = tmp_path / "h.tsv"
  path.write_bytes(b"te\rxt\tother\na\tb\n")
  with pytest.raises(ValueError, match=r"h\.tsv line 1: the header has a carriage return"):
    list(row_io.Reader(str(path), "tsv"))


def test_row_edge_cases_name_the_line_or_are_skipped(dirs, tmp_path, caplog):
  """JSON nested 100,000 deep and a lone surrogate escape are bad rows naming the file and
  line (skipped with --skip_bad_rows); a UTF-8 byte order mark on JSON Lines is skipped as on
  TSV."""
  good = '{"sentence": "the dog"}\n'
  deep = "[" * 100000 + "]" * 100000
  bad = [('{"sentence": "x", "n": %s}\n' % deep, "JSON nested too deeply"),
         ('{"sentence": "a \\ud800 b"}\n', "lone surrogate"),
         ('{"sentence": "a", "other": "\\udc00"}\n', "lone surrogate")]
  for index, (line, message) in enumerate(bad):
    path = tmp_path / f"edge{index}.jsonl"
    path.write_text(good + line + good, encoding="utf-8")
    with pytest.raises(ValueError, match=f"{path} line 2: .*{message}"):
      predict.predict_file(_predictor(dirs, "classifier"), predict.options(
          input_file=str(path), output_file=str(tmp_path / "edge.out")))
  with caplog.at_level("INFO"):
    got = _run(tmp_path, dirs, "classifier", good + "".join(b for b, _ in bad) + good,
               "edges.jsonl", skip_bad_rows=True)
  assert len(got) == 2 and "skipped 3 bad rows" in caplog.text
  pair = '{"sentence": "\\ud83d\\ude00 the dog"}\n'  # a surrogate pair is one character
  got = _run(tmp_path, dirs, "classifier", pair, "pair.jsonl")
  assert got[0]["sentence"] == "\U0001f600 the dog"
  plain = _run(tmp_path, dirs, "classifier", good, "plain.jsonl")
  assert _run(tmp_path, dirs, "classifier", b"\xef\xbb\xbf" + good.encode(), "bom.jsonl") == plain


def test_rows_over_max_row_bytes_are_refused(dirs, tmp_path, caplog):
  """A row longer than --max_row_bytes (JSON Lines, TSV, a CSV row over two lines) is a bad
  row, not tokenized; the other rows' outputs are those of a run without the bound."""
  long_text = "the dog is hairy . " * 200
  rows = [{"sentence": "the dog"}, {"sentence": long_text}, {"sentence": "hello world"}]
  text = "".join(json.dumps(r) + "\n" for r in rows)
  limit = len(json.dumps(rows[1])) // 2
  with pytest.raises(ValueError, match=r"long.jsonl line 2: \d+ bytes, over "
                     f"--max_row_bytes={limit}"):
    _run(tmp_path, dirs, "classifier", text, "long.jsonl", max_row_bytes=limit)
  unbounded = _run(tmp_path, dirs, "classifier", text, "long.jsonl", max_row_bytes=0)
  with caplog.at_level("INFO"):
    got = _run(tmp_path, dirs, "classifier", text, "long.jsonl", max_row_bytes=limit,
               skip_bad_rows=True)
  assert got == [unbounded[0], unbounded[2]] and "skipped 1 bad rows" in caplog.text
  table = [[r["sentence"], str(i)] for i, r in enumerate(rows)]
  with pytest.raises(ValueError, match=r"long.tsv line 3: \d+ bytes, over"):
    _run(tmp_path, dirs, "classifier", _tsv(["sentence", "i"], table), "long.tsv",
         max_row_bytes=limit)
  table[1][0] = "two\nlines " + long_text
  with pytest.raises(ValueError, match=r"long.csv line 3: \d+ bytes, over"):
    _run(tmp_path, dirs, "classifier", _csv(["sentence", "i"], table), "long.csv",
         max_row_bytes=limit)
  assert _run(tmp_path, dirs, "classifier", _csv(["sentence", "i"], table), "long.csv",
              max_row_bytes=limit, skip_bad_rows=True) == [
      dict(unbounded[0], i="0"), dict(unbounded[2], i="2")]
  with pytest.raises(ValueError, match=r"--max_row_bytes=-1: must be >= 0 \(0: no bound\)"):
    predict.run(predict.options(model_dir=dirs["paths"]["classifier"],
                                input_file=str(tmp_path / "long.jsonl"), max_row_bytes=-1))


def test_output_temporaries_of_killed_runs_are_removed(dirs, tmp_path):
  """The temporary a killed run left beside --output_file (utils/file_io.temp_name, a dead
  pid) is removed by the next run; a live run's stays; --output_file naming a directory is
  refused before anything is written."""
  from bert_keras.utils import file_io
  dead = subprocess.Popen([sys.executable, "-c", ""])
  dead.wait()
  out = tmp_path / "in.jsonl.out.jsonl"
  stale = pathlib.Path(file_io.temp_name(str(out), tag=dead.pid))
  live = pathlib.Path(file_io.temp_name(str(out), tag=os.getppid()))
  stale.write_text("partial")
  live.write_text("another run's")
  _run(tmp_path, dirs, "classifier", '{"sentence": "the dog"}\n', "in.jsonl")
  assert not stale.exists() and live.exists() and out.exists()
  path = tmp_path / "in.jsonl"
  (tmp_path / "directory").mkdir()
  with pytest.raises(ValueError, match="--output_file .*directory is a directory: name a file"):
    predict.run(predict.options(model_dir=dirs["paths"]["classifier"], input_file=str(path),
                                output_file=str(tmp_path / "directory")))
  assert os.listdir(tmp_path / "directory") == [] and not [
      n for n in os.listdir(tmp_path) if ".tmp-" in n and n != live.name]
  with pytest.raises(OSError):  # a rename that fails leaves no temporary either
    with file_io.atomic_output(str(tmp_path / "directory")) as tmp:
      pathlib.Path(tmp).write_text("complete")
  assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n and n != live.name]
