"""tasks/retrieval/metrics.py and evaluate_retrieval.py: every measure against pytrec_eval
(trec_eval's code) on random runs with ties, missing queries, graded relevance, empty rankings,
queries without relevant documents and cut-offs below and above the run length; the file
formats, their errors, and the script in process and as a command."""

import json
import random
import subprocess
import sys

import numpy as np
import pytest

from bert_keras import evaluate_retrieval
from bert_keras.tasks.retrieval import metrics as retrieval_metrics
from conftest import REPO

K_VALUES = (1, 2, 3, 5, 7, 10, 100)


def oracle_per_query(qrels, run, k_values):
  """{qid: {measure: value}} from pytrec_eval for the qrels' queries with a relevant document
  (0 for every measure of one it does not report: absent from the run, or ranking nothing).
  MRR@k is its recip_rank where the first relevant document's rank (1 / recip_rank) is within
  k; Accuracy@k its success at k."""
  pytrec_eval = pytest.importorskip("pytrec_eval")
  cuts = ",".join(str(k) for k in k_values)
  evaluator = pytrec_eval.RelevanceEvaluator(
      qrels, {f"ndcg_cut.{cuts}", f"map_cut.{cuts}", f"recall.{cuts}", f"P.{cuts}",
              f"success.{cuts}", "recip_rank", "num_rel"})
  reported = evaluator.evaluate(run)
  result = {}
  for qid, judged in qrels.items():
    if not any(r > 0 for r in judged.values()):
      continue
    values = reported.get(qid)
    if values is None:
      result[qid] = {f"{m}@{k}": 0.0 for m in retrieval_metrics.MEASURES for k in k_values}
      continue
    assert values["num_rel"] == sum(r > 0 for r in judged.values())
    first = round(1 / values["recip_rank"]) if values["recip_rank"] else None
    result[qid] = {}
    for k in k_values:
      result[qid].update({
          f"NDCG@{k}": values[f"ndcg_cut_{k}"], f"MAP@{k}": values[f"map_cut_{k}"],
          f"Recall@{k}": values[f"recall_{k}"], f"P@{k}": values[f"P_{k}"],
          f"MRR@{k}": values["recip_rank"] if first is not None and first <= k else 0.0,
          f"Accuracy@{k}": values[f"success_{k}"]})
  return result


def random_case(rng):
  """Random qrels and run over a few queries: graded relevance (-1, 0 and up to 3), scores from
  a small set (ties) or continuous, queries missing on either side, empty rankings, rankings
  shorter and longer than the cut-offs. (No relevance below -1: pytrec-eval-terrier 0.5.11
  crashes on a query judged -2 only beside others, -2 being one of trec_eval's internal
  codes.)"""
  qrels, run = {}, {}
  for q in range(rng.randint(1, 8)):
    qid = f"q{q}"
    docs = [f"d{rng.randint(0, 200)}" for _ in range(rng.randint(1, 40))]
    docs = list(dict.fromkeys(docs))
    if rng.random() < 0.85:
      judged = rng.sample(docs, rng.randint(1, len(docs)))
      qrels[qid] = {d: rng.choice([-1, 0, 0, 1, 1, 2, 3]) for d in judged}
      if rng.random() < 0.15:
        qrels[qid] = {d: rng.choice([-1, 0]) for d in judged}  # no relevant document
    if rng.random() < 0.85:
      ranked = rng.sample(docs, rng.randint(0, len(docs)))
      tied = rng.random() < 0.5
      run[qid] = {d: (rng.choice([0.25, 0.5, 1.0]) if tied else rng.uniform(-3, 3))
                  for d in ranked}
  return qrels, run


@pytest.mark.parametrize("seed", range(6))
def test_against_pytrec_eval(seed):
  rng = random.Random(seed)
  checked = 0
  for _ in range(60):
    qrels, run = random_case(rng)
    expected = oracle_per_query(qrels, run, K_VALUES)
    if not expected:
      with pytest.raises(ValueError, match="no query with a relevant document"):
        retrieval_metrics.evaluate(qrels, run, K_VALUES)
      continue
    per_query = retrieval_metrics.evaluate_per_query(qrels, run, K_VALUES)
    assert per_query.keys() == expected.keys()
    for qid, values in expected.items():
      assert per_query[qid].keys() == values.keys()
      for name, value in values.items():
        assert per_query[qid][name] == pytest.approx(value, abs=1e-9), (qid, name)
    means = retrieval_metrics.evaluate(qrels, run, K_VALUES)
    assert list(means) == retrieval_metrics.measure_names(K_VALUES)
    for name, value in means.items():
      assert value == pytest.approx(np.mean([v[name] for v in expected.values()]), abs=1e-9)
    checked += 1
  assert checked > 30


def test_ties_as_trec_eval():
  """Equal scores rank by docid descending; scores equal in float32 are equal (trec_eval keeps
  float32 scores); the oracle agrees on each."""
  assert retrieval_metrics.rank_documents({"a": 0.5, "c": 0.5, "b": 0.5, "z": 0.1}) == [
      "c", "b", "a", "z"]
  assert retrieval_metrics.rank_documents({"a": 0.1 + 1e-12, "b": 0.1}) == ["b", "a"]
  assert retrieval_metrics.rank_documents({"a": 0.1 + 1e-6, "b": 0.1}) == ["a", "b"]
  assert retrieval_metrics.rank_documents({"a": 1e300, "b": float("inf"), "c": -1e300}) == [
      "b", "a", "c"]
  qrels = {"q": {"a": 1}}
  for run in ({"q": {"a": 0.5, "b": 0.5}}, {"q": {"a": 0.1 + 1e-12, "b": 0.1}},
              {"q": {"a": 0.1 + 1e-6, "b": 0.1}}, {"q": {"a": -1e300, "c": float("-inf")}}):
    mrr = retrieval_metrics.evaluate(qrels, run, (10,))["MRR@10"]
    assert mrr == oracle_per_query(qrels, run, (10,))["q"]["MRR@10"]
  assert retrieval_metrics.evaluate(qrels, {"q": {"a": 0.5, "b": 0.5}}, (1,))["MRR@1"] == 0.0


def test_conventions_by_hand():
  qrels = {"q1": {"a": 2, "b": 0, "c": 1}, "q2": {"x": 0}, "q3": {"d": 1}}
  run = {"q1": {"a": 3.0, "z": 2.0, "c": 1.0}, "q2": {"x": 1.0}, "q4": {"d": 1.0}}
  measures = retrieval_metrics.evaluate(qrels, run, (1, 2, 5))
  # q1 ranks a (2), z (unjudged), c (1); q3 is missing (0); q2 and q4 are ignored.
  idcg = 2 + 1 / np.log2(3)
  assert measures["NDCG@1"] == pytest.approx((2 / 2) / 2)
  assert measures["NDCG@2"] == pytest.approx((2 / idcg) / 2)
  assert measures["NDCG@5"] == pytest.approx(((2 + 1 / np.log2(4)) / idcg) / 2)
  assert measures["MAP@5"] == pytest.approx((1 + 2 / 3) / 2 / 2)
  assert measures["P@5"] == pytest.approx(2 / 5 / 2)
  assert measures["Recall@2"] == pytest.approx(1 / 2 / 2)
  assert measures["MRR@1"] == measures["Accuracy@1"] == 0.5
  assert retrieval_metrics.query_counts(qrels, run) == {
      "scored": 2, "not_in_run": 1, "ignored": 2}


def test_bad_arguments():
  with pytest.raises(ValueError, match="k_values"):
    retrieval_metrics.evaluate({"q": {"a": 1}}, {}, (0, 10))
  with pytest.raises(ValueError, match="query 'q': document 'a' has the score NaN"):
    retrieval_metrics.evaluate({"q": {"a": 1}}, {"q": {"a": float("nan")}})
  with pytest.raises(ValueError, match="no query with a relevant document"):
    retrieval_metrics.evaluate({"q": {"a": 0}}, {"q": {"a": 1.0}})


def write_lines(path, lines):
  path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
  return str(path)


def test_files_round_trip_and_oracle_readers(tmp_path):
  """write_run -> read_run gives the run back exactly, ranked as trec_eval ranks it; the
  readers agree with pytrec_eval's parse_run / parse_qrel; a BEIR TSV reads as the TREC file
  with the same judgments."""
  pytrec_eval = pytest.importorskip("pytrec_eval")
  rng = random.Random(7)
  qrels, run = random_case(rng)
  run["q9"] = {"d1": 1 / 3, "d2": 1e-320, "d3": -0.0, "d4": float("-inf"), "d5": 1 / 3}
  path = str(tmp_path / "run.trec")
  retrieval_metrics.write_run(path, run, "bm25")
  assert retrieval_metrics.read_run(path) == {q: s for q, s in run.items() if s}
  with open(path) as f:
    assert retrieval_metrics.read_run(path) == pytrec_eval.parse_run(f)
  lines = open(path).read().splitlines()
  assert not [name for name in tmp_path.iterdir() if name.name.startswith(".")]
  q9 = [line.split() for line in lines if line.startswith("q9 ")]
  assert [f[2] for f in q9] == ["d5", "d1", "d3", "d2", "d4"]
  assert [f[3] for f in q9] == ["1", "2", "3", "4", "5"] and {f[5] for f in q9} == {"bm25"}

  trec = write_lines(tmp_path / "qrels.txt", [f"{q} 0 {d} {r}" for q, judged in qrels.items()
                                              for d, r in judged.items()])
  beir = write_lines(tmp_path / "qrels.tsv", ["query-id\tcorpus-id\tscore"] + [
      f"{q}\t{d}\t{r}" for q, judged in qrels.items() for d, r in judged.items()])
  with open(trec) as f:
    assert retrieval_metrics.read_qrels(trec) == pytrec_eval.parse_qrel(f) == qrels
  assert retrieval_metrics.read_qrels(beir) == qrels


def test_write_run_refuses_what_trec_cannot_hold(tmp_path):
  path = str(tmp_path / "run.trec")
  for run, tag, match in (({"q 1": {"d": 1.0}}, "t", "query id 'q 1'"),
                          ({"q": {"d\t2": 1.0}}, "t", "document id"),
                          ({"q": {"d": 1.0}}, "my run", "run tag"),
                          ({"q": {"d": float("nan")}}, "t", "query 'q': document 'd'")):
    with pytest.raises(ValueError, match=match):
      retrieval_metrics.write_run(path, run, tag)
  assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("reader, lines, message", [
    ("run", ["q1 Q0 d1 1 0.5 t", "q1 Q0 d2 2 0.4"], "line 2: 'q1 Q0 d2 2 0.4' is not `qid Q0"),
    ("run", ["q1 Q0 d1 1 high t"], "line 1: .*the score 'high' is not a number"),
    ("run", ["q1 Q0 d1 1 nan t"], "line 1: .*the score 'nan' is not a number"),
    ("run", ["q1 Q0 d1 first 0.5 t"], "line 1: .*the rank 'first' is not an integer"),
    ("run", ["q1 Q0 d1 1 0.5 t", "", "q1 Q0 d1 2 0.4 t"],
     "line 3: document 'd1' of query 'q1' is ranked a second time"),
    ("qrels", ["q1 0 d1 1", "q1 0 d2"], "line 2: 'q1 0 d2' is not `qid iteration docid"),
    ("qrels", ["q1 0 d1 1.5"], "line 1: .*the relevance '1.5' is not an integer"),
    ("qrels", ["q1 0 d1 1", "q1 0 d1 2"], "line 2: document 'd1' of query 'q1' is judged a "
     "second time"),
    ("qrels", ["query-id\tcorpus-id\tscore", "q1\td1\t1", "q1 d2 1"],
     "line 3: 'q1 d2 1' is not `query-id<TAB>corpus-id<TAB>score`"),
    ("qrels", ["q1\td1\t1"], "line 1: .* a BEIR qrels TSV starts with the header"),
])
def test_bad_lines(tmp_path, reader, lines, message):
  path = write_lines(tmp_path / "input", lines)
  read = retrieval_metrics.read_run if reader == "run" else retrieval_metrics.read_qrels
  with pytest.raises(ValueError, match=f"^{path} {message}"):
    read(path)


def test_not_utf8(tmp_path):
  path = tmp_path / "run.trec"
  path.write_bytes(b"q1 Q0 d1 1 0.5 t\nq1 Q0 \xff 2 0.4 t\n")
  with pytest.raises(ValueError, match="line 2: not UTF-8"):
    retrieval_metrics.read_run(str(path))


def test_a_byte_order_mark_before_the_qrels_header_is_skipped(tmp_path):
  """A BEIR qrels TSV saved by a spreadsheet starts with a UTF-8 byte order mark: its header
  is still the header (it was refused as a TREC line)."""
  path = tmp_path / "dev.tsv"
  path.write_bytes(b"\xef\xbb\xbfquery-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n")
  assert retrieval_metrics.read_qrels(str(path)) == {"q1": {"d1": 1}, "q2": {"d2": 2}}


def test_script_in_process(tmp_path, capsys):
  rng = random.Random(3)
  qrels, run = random_case(rng)
  qrels["q0"] = {"d1": 2, "d2": 1}
  run.setdefault("q0", {})["d1"] = 9.0
  qrels_path = write_lines(tmp_path / "qrels.tsv", ["query-id\tcorpus-id\tscore"] + [
      f"{q}\t{d}\t{r}" for q, judged in qrels.items() for d, r in judged.items()])
  run_path = str(tmp_path / "run.trec")
  retrieval_metrics.write_run(run_path, run, "test")
  output = str(tmp_path / "scores.json")
  measures = evaluate_retrieval.run(evaluate_retrieval.options(
      qrels=qrels_path, run=run_path, output_json=output))
  run_read = {q: s for q, s in run.items() if s}
  expected = oracle_per_query(qrels, run_read, retrieval_metrics.DEFAULT_K_VALUES)
  assert measures == retrieval_metrics.evaluate(qrels, run_read)
  for name, value in measures.items():
    assert value == pytest.approx(np.mean([v[name] for v in expected.values()]), abs=1e-9)
  assert json.loads(open(output).read()) == measures
  printed = capsys.readouterr().out.splitlines()
  assert printed[0].startswith(f"{len(expected):,} queries scored")
  assert printed[1].split() == ["@1", "@3", "@5", "@10", "@100"]
  assert printed[2].split() == ["NDCG"] + ["%.5f" % measures[f"NDCG@{k}"]
                                           for k in (1, 3, 5, 10, 100)]
  assert [line.split()[0] for line in printed[2:]] == list(retrieval_metrics.MEASURES)
  with pytest.raises(ValueError, match="--k_values=0,x"):
    evaluate_retrieval.run(evaluate_retrieval.options(
        qrels=qrels_path, run=run_path, k_values=["0", "x"]))
  measures = evaluate_retrieval.run(evaluate_retrieval.options(
      qrels=qrels_path, run=run_path, k_values=["2"]))
  assert list(measures) == [f"{m}@2" for m in retrieval_metrics.MEASURES]


def test_script_command_line(tmp_path):
  qrels = write_lines(tmp_path / "qrels.txt", ["q1 0 d1 1", "q2 0 d2 1"])
  run = write_lines(tmp_path / "run.trec", ["q1 Q0 d1 1 0.5 t", "q1 Q0 d3 2 x t"])
  output = tmp_path / "scores.json"
  args = [sys.executable, str(REPO / "evaluate_retrieval.py"), f"--qrels={qrels}",
          f"--run={run}", f"--output_json={output}"]
  result = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path)
  assert result.returncode != 0
  assert result.stderr.strip().splitlines() == [
      f"error: {run} line 2: 'q1 Q0 d3 2 x t': the score 'x' is not a number"]
  assert not output.exists()
  write_lines(tmp_path / "run.trec", ["q1 Q0 d1 1 0.5 t", "q1 Q0 d3 2 0.1 t"])
  result = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path)
  assert result.returncode == 0, result.stderr
  assert json.loads(output.read_text())["Recall@1"] == 0.5
  assert "1 not in the run" in result.stdout


def test_a_run_is_read_keeping_only_what_is_scored(tmp_path):
  """A run held whole took 4.7x its size in memory: the scored queries' top max(k) documents
  are kept (trec_eval's order, ties by docid), the other queries counted; a line over the
  bound is refused where it is read."""
  from bert_keras.tasks.retrieval import metrics
  rng = np.random.default_rng(3)
  lines = [f"q{q} Q0 d{d} {d} {float(s):.3f} t" for q in range(3) for d, s in
           enumerate(rng.integers(0, 5, 40) / 2)]  # (many ties)
  path = tmp_path / "run.trec"
  path.write_text("\n".join(lines) + "\n")
  whole = metrics.read_run(str(path))
  skipped = set()
  kept = metrics.read_run(str(path), queries={"q0", "q2"}, top_k=7, skipped=skipped)
  assert sorted(kept) == ["q0", "q2"] and skipped == {"q1"}
  for qid, scores in kept.items():
    assert len(scores) == 7
    assert metrics.rank_documents(scores) == metrics.rank_documents(whole[qid])[:7]
  path.write_text(lines[0] + "\n" + "q9 Q0 " + "x" * (metrics.MAX_LINE_BYTES + 10) + " 1 2 t\n")
  with pytest.raises(ValueError, match=r"run.trec, line 2: over 65,536 bytes"):
    metrics.read_run(str(path))
