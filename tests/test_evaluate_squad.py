"""evaluate_squad.py: the official SQuAD v1.1 / v2.0 figures, against values worked out by hand
from the published definitions (normalisation, token-bag F1, maximum over gold answers,
no-answer threshold and its search)."""

import json
import os
import subprocess
import sys

import pytest

from bert_keras import evaluate_squad as ev
from conftest import REPO
from test_run_pretraining import ENV


@pytest.mark.parametrize("text, normalized", [
    ("The Cat", "cat"),                       # lower case, article
    ("a cat, an owl & the dog!", "cat owl dog"),  # every article, punctuation
    ("  spaced\t\nout  ", "spaced out"),      # whitespace collapsed
    ("theatre anthem", "theatre anthem"),     # articles only as whole words
    ("U.S.A.", "usa"),                         # punctuation inside a word
    ("Ça 'va'", "ça va"),                      # non-ASCII letters stay
    ("", ""),
])
def test_normalize_answer(text, normalized):
  assert ev.normalize_answer(text) == normalized


def test_exact_and_f1():
  assert ev.exact_match("The Eiffel Tower.", "eiffel tower") == 1
  assert ev.exact_match("Eiffel", "eiffel tower") == 0
  # "big red dog" vs "red dog barks": 2 shared tokens, precision = recall = 2/3.
  assert ev.f1("big red dog", "red dog barks") == pytest.approx(2 / 3)
  # Repeated tokens count as a bag: "the the" normalises away; "go go go" vs "go": shared 1,
  # precision 1/3, recall 1 -> 2 * (1/3) / (4/3) = 0.5.
  assert ev.f1("go go go", "go") == pytest.approx(0.5)
  assert ev.f1("completely different", "nothing shared") == 0
  # Empty sides: v2.0 scores a correct "no answer" 1, v1.1 never scores an empty side.
  assert ev.f1("", "") == 1
  assert ev.f1("the", "") == 1                 # normalises to empty
  assert ev.f1("cat", "") == 0
  assert ev.f1("", "", empty_matches_empty=False) == 0


def _dataset(qas):
  return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


def _qa(qid, *answers):
  answer_list = [{"text": a, "answer_start": 0} for a in answers]
  return {"id": qid, "question": "?", "answers": answer_list}


def test_v1_maximum_over_gold_answers_and_unanswered_questions():
  data = _dataset([_qa("q1", "Denver Broncos", "Broncos"),
                   _qa("q2", "Santa Clara, California", "Levi's Stadium"),
                   _qa("q3", "gold")])
  predictions = {"q1": "the Broncos", "q2": "Stadium in Santa Clara"}  # q3 unanswered
  result = ev.evaluate(data, predictions, version="1.1")
  # q1: exact against "Broncos" -> 1, F1 1. q2: vs "santa clara california": shared 2,
  # p = 2/4, r = 2/3 -> 4/7; vs "levis stadium": shared 1, p 1/4, r 1/2 -> 1/3: max 4/7.
  assert list(result) == ["exact_match", "f1"]
  assert result["exact_match"] == pytest.approx(100 * 1 / 3)
  assert result["f1"] == pytest.approx(100 * (1 + 4 / 7 + 0) / 3)


def _v2_data():
  return _dataset([_qa("a1", "blue whale"), _qa("a2", "1990"), _qa("a3", "Paris"),
                   _qa("n1"), _qa("n2"), _qa("n3")])


def test_v2_without_na_probs():
  predictions = {"a1": "the blue whale", "a2": "in 1990 maybe", "a3": "", "n1": "",
                 "n2": "something", "n3": ""}
  result = ev.evaluate(_v2_data(), predictions, version="2.0")
  # a1 exact 1; a2 F1: shared 1, p 1/3, r 1 -> 0.5; a3 empty vs "paris" -> 0;
  # n1, n3 empty vs empty -> 1; n2 -> 0.
  assert result["exact"] == pytest.approx(100 * 3 / 6)
  assert result["f1"] == pytest.approx(100 * (1 + 0.5 + 0 + 1 + 0 + 1) / 6)
  assert result["total"] == 6
  assert result["HasAns_exact"] == pytest.approx(100 / 3)
  assert result["HasAns_f1"] == pytest.approx(100 * 1.5 / 3)
  assert result["NoAns_exact"] == pytest.approx(100 * 2 / 3)
  assert result["HasAns_total"] == result["NoAns_total"] == 3
  assert "best_f1" not in result


def test_v2_threshold_and_best_threshold_search_with_ties():
  predictions = {"a1": "blue whale", "a2": "1990", "a3": "London", "n1": "x", "n2": "y",
                 "n3": "z"}
  # Probabilities with ties: a3 and n1 share 0.5.
  na_probs = {"a1": 0.1, "a2": 0.9, "a3": 0.5, "n1": 0.5, "n2": 0.3, "n3": 0.95}
  result = ev.evaluate(_v2_data(), predictions, na_probs, na_prob_thresh=0.4, version="2.0")
  # Threshold 0.4: a2, a3, n1, n3 answered "no answer": a2 -> 0, a3 -> 0, n1 -> 1, n3 -> 1;
  # a1 -> 1 (exact), n2 -> 0 (answered "y").
  assert result["exact"] == pytest.approx(100 * 3 / 6)
  # Search: start with every question "no answer": 3 (the unanswerable ones). In increasing
  # probability: a1 (+1) = 4 @0.1, n2 (-1) = 3 @0.3, a3 (+0) = 3, n1 (-1) = 2 @0.5,
  # a2 (+1) = 3 @0.9, n3 (-1) = 2. Best 4 at threshold 0.1.
  assert result["best_exact"] == pytest.approx(100 * 4 / 6)
  assert result["best_exact_thresh"] == pytest.approx(0.1)
  assert result["best_f1"] == pytest.approx(100 * 4 / 6)
  # Ties: the first best total wins (a later equal total does not move the threshold).
  tie = {"a1": 0.2, "a2": 0.4, "a3": 0.99, "n1": 0.3, "n2": 0.1, "n3": 0.8}
  preds = dict(predictions, n2="")  # n2 answered empty: no penalty
  got = ev.best_threshold(preds, ev.raw_scores(_v2_data(), preds)[0], tie,
                          {q: q.startswith("a") for q in tie})
  # n2 (0) = 3 @0.1, a1 (+1) = 4 @0.2, n1 (-1) = 3, a2 (+1) = 4 @0.4 (not > 4), ...
  assert got == (pytest.approx(100 * 4 / 6), 0.2)


def test_command_line(tmp_path):
  data = tmp_path / "data.json"
  data.write_text(json.dumps({"version": "v2.0", "data": _v2_data()}))
  preds = tmp_path / "pred.json"
  preds.write_text(json.dumps({"a1": "blue whale", "a2": "1990", "a3": "London", "n1": "",
                               "n2": "", "n3": ""}))
  na = tmp_path / "na.json"
  na.write_text(json.dumps({q: 0.2 for q in ("a1", "a2", "a3", "n1", "n2", "n3")}))
  out = tmp_path / "eval.json"
  run = subprocess.run([sys.executable, str(REPO / "evaluate_squad.py"), str(data), str(preds),
                        "-n", str(na), "-o", str(out)], capture_output=True, text=True)
  assert run.returncode == 0, run.stderr
  result = json.loads(out.read_text())
  assert list(result)[:3] == ["exact", "f1", "total"]
  assert result["exact"] == pytest.approx(100 * 5 / 6)
  assert {"best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"} <= set(result)
  # v1.1 from the data file's version: one line {"exact_match": .., "f1": ..} on stdout.
  data.write_text(json.dumps({"version": "1.1", "data": _dataset([_qa("a1", "blue whale")])}))
  run = subprocess.run([sys.executable, str(REPO / "evaluate_squad.py"), str(data),
                        str(preds)], capture_output=True, text=True)
  assert run.returncode == 0, run.stderr
  assert json.loads(run.stdout) == {"exact_match": 100.0, "f1": 100.0}
  # A malformed predictions file: a one-line error naming it.
  preds.write_text("{not json")
  run = subprocess.run([sys.executable, str(REPO / "evaluate_squad.py"), str(data),
                        str(preds)], capture_output=True, text=True)
  assert run.returncode != 0
  assert run.stderr.strip().startswith("error: predictions file %s" % preds)
  assert len(run.stderr.strip().splitlines()) == 1


_SQUAD_QA = {"id": "q1", "question": "?", "answers": [{"text": "blue", "answer_start": 0}]}


def _squad_data(qas=None, paragraphs=None, articles=None):
  if articles is None:
    if paragraphs is None:
      paragraphs = [{"context": "blue", "qas": [_SQUAD_QA] if qas is None else qas}]
    articles = [{"title": "t", "paragraphs": paragraphs}]
  return {"version": "1.1", "data": articles}


@pytest.mark.parametrize("dataset, predictions, na, out, expected", [
    (_squad_data(), {"q1": 3}, None, None,
     "predictions file {pred}: the prediction of question q1 is int, not a string"),
    (_squad_data(), {"q1": None}, None, None, "the prediction of question q1 is NoneType"),
    (_squad_data([{"id": "q1", "question": "?"}]), {"q1": "a"}, None, None,
     "data file {data}: question q1 (data[0].paragraphs[0].qas[0]) has no \"answers\" list"),
    (_squad_data([{"id": "q1", "answers": [{"answer_start": 0}]}]), {"q1": "a"}, None, None,
     "has no \"answers\" list of {{\"text\": string}}"),
    (_squad_data([{"question": "?", "answers": []}]), {"q1": "a"}, None, None,
     "data file {data}: data[0].paragraphs[0].qas[0] has no string \"id\""),
    (_squad_data(paragraphs=[{"context": "c"}]), {}, None, None,
     "data file {data}: data[0].paragraphs[0] has no \"qas\" list"),
    (_squad_data(articles=[{"title": "t"}]), {}, None, None,
     "data file {data}: data[0] has no \"paragraphs\" list"),
    (_squad_data(articles=[]), {}, None, None, "data file {data} has no questions"),
    (_squad_data([_SQUAD_QA, {"id": "q2", "question": "?", "answers": []}]), {"q1": "a"},
     None, None, "data file {data}: question q2 has no answers (\"answers\": [])"),
    (dict(_squad_data(), version="3.0"), {"q1": "blue"}, None, None,
     "data file {data}: \"version\" \"3.0\" is not a SQuAD version this evaluation scores"),
    (dict(_squad_data(), version=2), {"q1": "blue"}, None, None,
     "data file {data}: \"version\" 2 is not a SQuAD version"),
    (dict(_squad_data(), version="v2.0"), {"other": "x"}, None, None,
     "predictions file {pred} answers none of the questions of data file {data}"),
    (dict(_squad_data(), version="v2.0"), {"q1": "a"}, {"q1": "high"}, None,
     "no-answer file {na}: the probability of question q1 is \"high\", not a number"),
    (dict(_squad_data(), version="v2.0"), {"q1": "a"}, [0.5], None,
     "no-answer file {na} is not a JSON object"),
    (_squad_data(), {"q1": "blue"}, None, "dir", "{out}: Is a directory"),
    (_squad_data(), {"q1": "blue"}, None, "missing/eval.json", "No such file or directory"),
])
def test_evaluate_squad_bad_input_is_one_line(tmp_path, dataset, predictions, na, out,
                                              expected):
  from bert_keras import evaluate_squad
  paths = {"data": tmp_path / "data.json", "pred": tmp_path / "pred.json",
           "na": tmp_path / "na.json"}
  paths["data"].write_text(json.dumps(dataset))
  paths["pred"].write_text(json.dumps(predictions))
  argv = [str(paths["data"]), str(paths["pred"])]
  if na is not None:
    paths["na"].write_text(json.dumps(na))
    argv += ["-n", str(paths["na"])]
  if out is not None:
    paths["out"] = tmp_path / out
    if out == "dir":
      paths["out"].mkdir()
    argv += ["-o", str(paths["out"])]
  with pytest.raises(SystemExit) as info:
    evaluate_squad.main(argv)
  message = str(info.value.code)
  assert message.startswith("error: ") and "\n" not in message
  assert expected.format(**paths) in message
  assert sorted(os.listdir(tmp_path)) == sorted(
      p.name for p in tmp_path.iterdir() if not p.name.startswith("."))   # no temporary left


@pytest.mark.slow
def test_command_line_evaluate_squad_bad_prediction(tmp_path):
  dataset = tmp_path / "data.json"
  dataset.write_text(json.dumps(_squad_data()))
  predictions = tmp_path / "pred.json"
  predictions.write_text(json.dumps({"q1": ["blue"]}))
  proc = subprocess.run([sys.executable, str(REPO / "evaluate_squad.py"), str(dataset),
                         str(predictions)], env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  assert proc.stderr.strip() == (f"error: predictions file {predictions}: the prediction of "
                                 "question q1 is list, not a string")
