"""run_squad's prediction path: create_model against the original's, trimmed batches (the same
logits), the self-evaluation (eval_results.json, predictions_best_threshold.json equal to a
second run's predictions), progress lines, bad input and the log of a huge context.
"""

import json
import logging
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import oracle
from conftest import shared_path
from bert_keras import checkpoints
from bert_keras import evaluate_squad
from bert_keras import modeling
from bert_keras import run_squad
from bert_keras import tokenization

REPO = pathlib.Path(__file__).resolve().parent.parent
TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=128, type_vocab_size=2)


@pytest.fixture(scope="module")
def vocab():
  return str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """A tiny config and a BertSquad checkpoint with random weights (a random span head, so
  that the null odds spread around 0)."""
  root = tmp_path_factory.mktemp("tiny")
  config = modeling.BertConfig(**TINY, initializer_range=0.5)
  (root / "bert_config.json").write_text(config.to_json_string())
  tf.keras.utils.set_random_seed(3)
  model = modeling.BertSquad(config)
  checkpoints.save_tf1_checkpoint(model, str(root / "squad" / "model.ckpt"))
  return root


def _options(tiny, vocab, out, **overrides):
  return run_squad.options(**{
      "vocab_file": vocab, "bert_config_file": str(tiny / "bert_config.json"),
      "output_dir": str(out), "init_checkpoint": str(tiny / "squad" / "model.ckpt"),
      "do_predict": True, "max_seq_length": 64, "doc_stride": 32, "max_query_length": 16,
      "predict_batch_size": 3, **overrides})


# ----------------------------------------------------------------------------
# create_model and the trimmed batches.

def test_create_model_matches_the_original(tmp_path):
  """The original create_model's graph restored from our checkpoint gives our create_model's
  logits (is_training=False); is_training=True turns dropout on."""
  import tensorflow.compat.v1 as tf1
  config = modeling.BertConfig(**{**TINY, "vocab_size": 100, "max_position_embeddings": 32})
  rng = np.random.RandomState(0)
  ids = rng.randint(1, 100, (3, 12)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 7:] = 0
  segments = np.zeros_like(ids)
  segments[:, 5:] = 1
  model = modeling.BertSquad(config)
  with tf.init_scope():
    model.squad.output_bias.assign([0.3, -0.2])
  prefix = str(tmp_path / "model.ckpt")
  checkpoints.save_tf1_checkpoint(model, prefix)
  start, end = run_squad.create_model(config, False, ids, mask, segments, model=model)
  assert start.shape == end.shape == (3, 12) and start.dtype == tf.float32
  orig, original_modeling = oracle.original("run_squad"), oracle.original("modeling")
  tf1.disable_v2_tensorshape()
  try:
    with tf.Graph().as_default():
      graph = orig.create_model(original_modeling.BertConfig.from_dict(config.to_dict()),
                                False, tf1.constant(ids), tf1.constant(mask),
                                tf1.constant(segments), False)
      with tf1.Session() as sess:
        tf1.train.Saver().restore(sess, prefix)
        want = sess.run(graph)
  finally:
    tf1.enable_v2_tensorshape()
  np.testing.assert_allclose(start.numpy(), want[0], atol=1e-5)
  np.testing.assert_allclose(end.numpy(), want[1], atol=1e-5)
  assert np.abs(want[0] - want[1]).max() > 1e-2
  dropped, _ = run_squad.create_model(config, True, ids, mask, segments, model=model)
  assert np.abs(dropped.numpy() - start.numpy()).max() > 1e-3
  fresh, _ = run_squad.create_model(config, False, ids, mask, segments)  # a new model
  assert fresh.shape == (3, 12)


def test_trim_batch():
  mask = np.zeros((3, 128), np.int32)
  mask[0, :40] = mask[1, :7] = 1
  arrays = {"input_mask": mask, "input_ids": np.arange(3 * 128).reshape(3, 128)}
  trimmed = run_squad.trim_batch(arrays)
  assert trimmed["input_mask"].shape == (3, 64) and trimmed["input_ids"].shape == (3, 64)
  np.testing.assert_array_equal(trimmed["input_ids"], arrays["input_ids"][:, :64])
  assert run_squad.trim_batch(arrays, multiple=1)["input_ids"].shape == (3, 40)
  assert run_squad.trim_batch(arrays, multiple=100)["input_ids"].shape == (3, 100)
  assert run_squad.trim_batch(arrays, multiple=1000)["input_ids"].shape == (3, 128)
  assert run_squad.trim_batch({"input_mask": mask[2:]}, 1)["input_mask"].shape == (1, 1)


def test_trimmed_batches_give_the_untrimmed_logits(tiny, vocab, monkeypatch):
  """SpanPredictor (batches of 1, 3 and 8 windows, each trimmed to a multiple of 8 or 32):
  the logits of the whole max_seq_length model call at every window's tokens, to 1e-5."""
  model = modeling.BertSquad(modeling.BertConfig(**TINY, initializer_range=0.5))
  checkpoints.load_checkpoint(model, str(tiny / "squad" / "model.ckpt"))
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  path = str(shared_path("data", "squad", "hf_tiny_squad2_fixture.json"))
  examples = run_squad.read_squad_examples(path, False)
  for i in range(4):  # short windows, alone in their batch or not
    examples.insert(3 * i, run_squad.SquadExample(f"s{i}", "who?", ["a", "short", "one"] * i))
  examples += [run_squad.SquadExample(f"t{i}", "who?", ["short"] * i) for i in range(1, 18)]
  windows = []
  run_squad.convert_examples_to_features(examples, tokenizer, 128, 32, 16, False,
                                         windows.append)
  lengths = [sum(w.input_mask) for w in windows]
  assert min(lengths) <= 8 and max(lengths) == 128   # some batches are trimmed
  full = [np.array([getattr(w, k) for w in windows], np.int32)
          for k in ("input_ids", "input_mask", "segment_ids")]
  want = [x.numpy() for x in run_squad.create_model(None, False, *full, model=model)]
  widths = []
  trim = run_squad.trim_batch

  def trim_and_note(arrays):
    widths.append(trim(arrays)["input_ids"].shape)
    return trim(arrays)

  monkeypatch.setattr(run_squad, "trim_batch", trim_and_note)
  for batch_size, multiple in ((1, 32), (3, 8), (8, 64)):
    got = []
    widths.clear()
    monkeypatch.setattr(run_squad, "TRIM_MULTIPLE", multiple)
    predictor = run_squad.SpanPredictor(model, batch_size, lambda w, r: got.append((w, r)),
                                        trim=True)
    for window in windows:
      predictor.add(window)
    predictor.flush()
    assert {rows for rows, _ in widths} == {batch_size}
    assert all(width % multiple == 0 or width == 128 for _, width in widths)
    assert min(width for _, width in widths) < 128
    assert [w.unique_id for w, _ in got] == [w.unique_id for w in windows]
    for i, (window, result) in enumerate(got):
      assert result.unique_id == window.unique_id and len(result.start_logits) == lengths[i]
      assert all(type(x) is float for x in result.start_logits)
      np.testing.assert_allclose(result.start_logits, want[0][i, :lengths[i]], atol=1e-5)
      np.testing.assert_allclose(result.end_logits, want[1][i, :lengths[i]], atol=1e-5)


# ----------------------------------------------------------------------------
# Self-evaluation.

def _official(data_file, predictions_file, *args):
  """evaluate_squad's command line (the official scripts' figures) on files."""
  return dict(evaluate_squad.main([str(data_file), str(predictions_file), *map(str, args)]))


def _crafted_gold(fixture, out, path):
  """The fixture's questions with answers made for the predictions in `out`: in increasing
  order of null odds, questions 1-5, 7 and 8 answered by their best non-null prediction, the
  others unanswerable. Returns the odds of question 8: the threshold of the best F1
  (answering 1-8 scores 7 of 8, 1-5 only 5, answering none of 9-14 gets all 6 right)."""
  odds = json.loads((out / "null_odds.json").read_text())
  nbest = json.loads((out / "nbest_predictions.json").read_text())
  order = sorted(odds, key=odds.get)
  assert len(set(odds.values())) == len(odds) == 14
  answered = set(order[:5] + order[6:8])
  data = json.loads(pathlib.Path(fixture).read_text("utf-8"))
  for article in data["data"]:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        text = next(e["text"] for e in nbest[qa["id"]] if e["text"])
        assert qa["id"] not in answered or evaluate_squad.normalize_answer(text)
        qa["is_impossible"] = qa["id"] not in answered
        qa["answers"] = ([{"text": text, "answer_start": 0}] if qa["id"] in answered else [])
  path.write_text(json.dumps(data), encoding="utf-8")
  return odds[order[7]]


def test_v2_self_evaluation_and_the_best_threshold(tiny, vocab, tmp_path, caplog):
  """eval_results.json: the official figures of predictions.json (with null_odds.json and
  the threshold used), best_* over the best non-null answers; predictions_best_threshold.json
  is what a second run with --null_score_diff_threshold=best_f1_thresh writes."""
  fixture = shared_path("data", "squad", "hf_tiny_squad2_fixture.json")
  first = tmp_path / "first"
  with caplog.at_level(logging.INFO):
    results = run_squad.run(_options(tiny, vocab, first, predict_file=str(fixture),
                                     version_2_with_negative=True))
  log = "\n".join(r.getMessage() for r in caplog.records)
  assert "Predicting: 14 of 14 questions" in log and "Eval results" in log
  figures = json.loads((first / "eval_results.json").read_text())
  assert figures == results["eval_results"]
  official = _official(fixture, first / "predictions.json", "-n", first / "null_odds.json",
                       "-t", 0.0)
  for key in ("exact", "f1", "total", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"):
    assert figures[key] == official[key], key
  assert figures["total"] == 14

  # Gold answers made for these predictions: the best threshold is known.
  gold = tmp_path / "gold.json"
  want_threshold = _crafted_gold(fixture, first, gold)
  second = tmp_path / "second"
  with caplog.at_level(logging.INFO):
    figures = run_squad.run(_options(tiny, vocab, second, predict_file=str(gold),
                                     version_2_with_negative=True))["eval_results"]
  assert figures["best_f1_thresh"] == figures["best_exact_thresh"] == want_threshold
  assert figures["best_f1"] == figures["best_exact"] == pytest.approx(100.0 * 13 / 14)
  log = "\n".join(r.getMessage() for r in caplog.records)
  assert f"--null_score_diff_threshold={want_threshold!r}" in log
  best = json.loads((second / "predictions_best_threshold.json").read_text())
  assert best != json.loads((second / "predictions.json").read_text())
  assert sum(1 for text in best.values() if text) == 8
  (tmp_path / "best.json").write_text(json.dumps(best))
  rescored = _official(gold, tmp_path / "best.json", "-n", second / "null_odds.json", "-t",
                       want_threshold)
  assert rescored["f1"] == pytest.approx(figures["best_f1"])

  third = tmp_path / "third"
  run_squad.run(_options(tiny, vocab, third, predict_file=str(gold),
                         version_2_with_negative=True, null_score_diff_threshold=want_threshold,
                         predict_batch_size=5))
  assert (third / "predictions.json").read_text() == (
      second / "predictions_best_threshold.json").read_text()
  assert not list(second.glob("*.tmp")) and not list(third.glob("*.tmp"))


def test_best_threshold_answering_nothing(tmp_path, monkeypatch):
  """When answering no question is best, the official search keeps its start, 0.0; on the
  null odds' scale (all negative here: 0.0 would answer everything) that is a threshold
  below every odds."""
  data = [{"paragraphs": [{"context": "a b", "qas": [
      {"id": "1", "answers": []}, {"id": "2", "answers": []},
      {"id": "3", "answers": [{"text": "right", "answer_start": 0}]}]}]}]
  monkeypatch.setattr(run_squad, "_gold_dataset", lambda path, dataset=None: data)
  odds = {"1": -2.5, "2": -0.5, "3": -1.0}
  non_null = {"1": "x", "2": "y", "3": "wrong"}
  figures = run_squad.evaluate_predictions("gold.json", dict(non_null), odds, non_null,
                                           str(tmp_path), True, 0.0)
  assert figures["best_f1"] == pytest.approx(200.0 / 3)
  assert figures["best_f1_thresh"] == figures["best_exact_thresh"] == -4.0
  best = json.loads((tmp_path / "predictions_best_threshold.json").read_text())
  assert best == {"1": "", "2": "", "3": ""}


def test_v1_self_evaluation_and_no_answers(tiny, vocab, tmp_path):
  xquad = json.loads(shared_path("data", "squad", "xquad.en.json").read_text("utf-8"))
  xquad["data"] = [{"title": "x", "paragraphs": xquad["data"][0]["paragraphs"][:2]}]
  dev = tmp_path / "dev-v1.1.json"
  dev.write_text(json.dumps(xquad), encoding="utf-8")
  out = tmp_path / "v1"
  results = run_squad.run(_options(tiny, vocab, out, predict_file=str(dev)))
  figures = json.loads((out / "eval_results.json").read_text())
  assert figures == results["eval_results"] == _official(dev, out / "predictions.json")
  assert list(figures) == ["exact_match", "f1"]
  assert not (out / "predictions_best_threshold.json").exists()
  for article in xquad["data"]:   # a test file: no answers, no evaluation
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        del qa["answers"]
  dev.write_text(json.dumps(xquad), encoding="utf-8")
  results = run_squad.run(_options(tiny, vocab, tmp_path / "test", predict_file=str(dev)))
  assert results["eval_results"] is None and results["predictions"]
  assert not (tmp_path / "test" / "eval_results.json").exists()


# ----------------------------------------------------------------------------
# Bad input and huge contexts.

def _squad(qas, context="x y z"):
  return json.dumps({"data": [{"paragraphs": [{"context": context, "qas": qas}]}]})


def test_bad_input_raises_one_line_errors(tiny, vocab, tmp_path):
  def error(text=None, **overrides):
    path = tmp_path / "input.json"
    if text is not None:
      path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as info:
      run_squad.run(_options(tiny, vocab, tmp_path / "out",
                             **{"predict_file": str(path), **overrides}))
    assert "\n" not in str(info.value)
    return str(info.value)

  path = tmp_path / "input.json"
  assert error('{"data": [\n  {"paragraphs": [}\n]}') == (
      f"--predict_file {path}: not valid JSON at line 2, column 19: Expecting value")
  question = {"id": "q1", "question": "?", "answers": [{"text": "y", "answer_start": 2}]}
  no_id = {"question": "?", "answers": []}
  assert error(_squad([question, no_id])) == (
      f"--predict_file {path}: data[0].paragraphs[0].qas[1]: a question without \"id\"")
  assert error(_squad([question, dict(question)])) == (
      f"--predict_file {path}: question id 'q1' appears twice")
  assert error(_squad([question]), max_query_length=61) == (
      "The max_seq_length (64) must be greater than max_query_length (61) + 3 "
      "(--max_seq_length, --max_query_length)")
  two = dict(question, answers=question["answers"] * 2)
  assert error(_squad([question, two]), do_predict=False, do_train=True,
               train_file=str(path)) == (
      f"--train_file {path}: question 'q1' has 2 answers. For training, each question "
      "should have exactly 1 answer. Keep only one of its answers.")
  assert error(_squad([dict(question, answers=[], is_impossible=False)]), do_predict=False,
               do_train=True, train_file=str(path), version_2_with_negative=True) == (
      f"--train_file {path}: question 'q1' has 0 answers. For training, each question "
      "should have exactly 1 answer. Give it one or mark it is_impossible.")
  assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_bad_input_on_the_command_line(tiny, vocab, tmp_path):
  bad = tmp_path / "bad.json"
  bad.write_text(_squad([{"question": "?", "answers": []}]), encoding="utf-8")
  proc = subprocess.run(
      [sys.executable, str(REPO / "run_squad.py"), f"--vocab_file={vocab}",
       f"--bert_config_file={tiny / 'bert_config.json'}", f"--output_dir={tmp_path / 'out'}",
       "--do_predict", f"--predict_file={bad}", "--max_seq_length=64", "--max_query_length=16"],
      capture_output=True, text=True, timeout=120,
      env={"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
  assert errors == [f"error: --predict_file {bad}: data[0].paragraphs[0].qas[0]: a question "
                    "without \"id\""]
  assert not (tmp_path / "out").exists()


def test_huge_context_log_stays_short(vocab, caplog):
  """A 6,000-word context in 24-token windows: ~750 windows, of which the first 64 are logged
  in full (as the original) and one line counts the rest."""
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  words = " ".join(["word", "piece", "tokens", "of", "a", "long", "text"] * 860)
  example = run_squad.SquadExample("q", "what is it?", words.split())
  windows = []
  with caplog.at_level(logging.INFO):
    run_squad.convert_examples_to_features([example], tokenizer, 24, 8, 8, False,
                                           windows.append)
  log = [r.getMessage() for r in caplog.records]
  assert len(windows) > 700
  assert log.count("*** Example ***") == run_squad.MAX_LOGGED_WINDOWS == 64
  more = len(windows) - 64
  assert f"... ({more} more windows of example_index 0 not logged)" in log
  assert sum(len(line) for line in log) < 64 * 2000


def test_prediction_writer_failures_leave_no_temporary(tmp_path):
  example = run_squad.SquadExample("q", "?", ["a"])
  window = run_squad.InputFeatures(7, 0, 0, ["[CLS]", "?", "[SEP]", "a", "[SEP]"], {3: 0},
                                   {3: True}, [1] * 5, [1] * 5, [0] * 5)
  paths = [str(tmp_path / name) for name in ("p.json", "n.json", "o.json")]
  with pytest.raises(KeyError):   # no result for window 7
    run_squad.write_predictions([example], [window], [], 20, 30, True, *paths)
  assert not list(tmp_path.iterdir())
  writer = run_squad.PredictionWriter([example, example], 20, 30, True, *paths)
  result = run_squad.RawResult(7, [0.0, 0, 0, 1.0, 0], [0.0, 0, 0, 1.0, 0])
  writer.add(run_squad.InputFeatures(8, 1, 0, *[None] * 6), result)
  with pytest.raises(ValueError, match="windows must come in order"):
    writer.add(window, result)
  writer.abort()
  assert not list(tmp_path.iterdir())
  assert run_squad.write_predictions([example], [window], [result], 20, 30, True, *paths)[0] == {
      "q": "a"}
  assert sorted(p.name for p in tmp_path.iterdir()) == ["n.json", "p.json"]
