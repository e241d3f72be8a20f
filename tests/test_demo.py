"""demo.sh, the main job: its summary lists every step with a figure, and each step's files exist;
the demo's summary quoted in docs/RESULTS.md and the README's table of steps stay those of today's
demo.sh.

When BERT_KERAS_DEMO_OUT names the OUT of a finished demo.sh run (.ci/run sets it after running
the README's first command), that run is checked; otherwise demo.sh runs here on the built-in
data with a shorter schedule (fewer pretraining steps and one fine-tuning epoch). The checks of
the documents read no run and are not `slow`.
"""

import glob
import json
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = ("vocab", "pretraining_data", "pretraining", "classifier", "squad", "tagger", "embeddings",
         "rerank", "features", "export", "query", "huggingface", "tflite", "serve")
# What each step's figure must show (a number after the name of the measure).
FIGURES = {
    "vocab": r"\d+ tokens",
    "pretraining_data": r"\d+ instances",
    "pretraining": r"MLM accuracy 0\.\d{3}, NSP accuracy [01]\.\d{3}",
    "classifier": r"dev accuracy [01]\.\d{3}",
    "squad": r"exact \d+\.\d, F1 \d+\.\d",
    "tagger": r"dev entity F1 \d+\.\d, token accuracy \d+\.\d \(conlleval\)",
    "embeddings": r"dev NDCG@10 [01]\.\d{3}, MRR@10 [01]\.\d{3}, Recall@10 [01]\.\d{3}",
    "rerank": r"NDCG@10 [01]\.\d{3} -> [01]\.\d{3}, MRR@10 [01]\.\d{3} -> [01]\.\d{3} "
              r"\(before -> after reranking\)",
    "features": r"\d+ tokens x 2 layers x 64",
    "export": r"signatures preprocess, serving_default",
    "query": r"probabilities other_topic [01]\.\d{3}, same_topic [01]\.\d{3}",
    "huggingface": r"model\.safetensors \d+\.\d\d MB, BertForSequenceClassification, "
                   r"labels other_topic, same_topic",
    "tflite": r"int8 model\.tflite \d+\.\d\d MB",
    "serve": r"POST /predict: (other_topic|same_topic) [01]\.\d{3}; exit 0 on SIGTERM",
}


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory):
  given = os.environ.get("BERT_KERAS_DEMO_OUT")
  if given and os.path.exists(os.path.join(given, "summary.md")):
    return given
  out = str(tmp_path_factory.mktemp("demo"))
  env = dict(os.environ, OUT=out, STEPS="40", EPOCHS="1", TF_CPP_MIN_LOG_LEVEL="2")
  run = subprocess.run(["bash", os.path.join(ROOT, "demo.sh")], env=env, capture_output=True,
                       text=True, timeout=900)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  assert "== summary" in run.stdout
  return out


def _table_rows(lines):
  """{step: [step, figure, time, files]}: the rows of a summary table, in order."""
  rows = {}
  for line in lines:
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 4 and cells[0] in STEPS:
      rows[cells[0]] = cells
  return rows


def _summary_rows(out):
  with open(os.path.join(out, "summary.md"), encoding="utf-8") as f:
    return _table_rows(f)


TOTAL = re.compile(r"^(\d+) s in all, the install excepted\.", re.M)


def _check_summary(rows, text):
  """Every step in order, each figure in its form and a time; the total is the times' sum."""
  assert list(rows) == list(STEPS)
  for step, (_, figure, seconds, _) in rows.items():
    assert re.search(FIGURES[step], figure), (step, figure)
    assert re.fullmatch(r"\d+ s", seconds), (step, seconds)
  total = TOTAL.search(text)
  assert total, "no total line"
  assert int(total.group(1)) == sum(int(row[2].split()[0]) for row in rows.values())


@pytest.mark.slow  # it runs demo.sh (or reads a CI run's output)
def test_summary_lists_every_step_with_its_figure_time_and_files(demo_out):
  rows = _summary_rows(demo_out)
  with open(os.path.join(demo_out, "summary.md"), encoding="utf-8") as f:
    text = f.read()
  _check_summary(rows, text)
  for step, (_, _, _, path) in rows.items():
    assert path.startswith(demo_out) and glob.glob(path), (step, path)  # REAL=1: a glob
  assert "not meaningful accuracies" in text


def _demo_blocks():
  """The code blocks of docs/RESULTS.md's "## The demo" section, in order."""
  with open(os.path.join(ROOT, "docs", "RESULTS.md"), encoding="utf-8") as f:
    section = f.read().split("\n## The demo\n", 1)[1].split("\n## ", 1)[0]
  return re.findall(r"^```[^\n]*\n(.*?)^```", section, re.M | re.S)


def test_results_md_quotes_the_summary_of_todays_demo():
  """docs/RESULTS.md's first demo block is a summary of today's demo.sh on the built-in data:
  every step, in order, figures in the form the summary prints, times adding up to its total,
  files under the default OUT. Later blocks (older REAL=1 runs) name only steps that still
  exist, in the demo's order. A step added to or renamed in demo.sh fails here until RESULTS.md
  quotes a new run."""
  blocks = _demo_blocks()
  assert blocks, "no summary block under '## The demo' in docs/RESULTS.md"
  rows = _table_rows(blocks[0].splitlines())
  _check_summary(rows, blocks[0])
  assert all(row[3].startswith("/tmp/bert_keras_demo/") for row in rows.values())
  assert "not meaningful accuracies" in blocks[0]
  for block in blocks[1:]:
    names = [line.strip("| ").split(" |")[0] for line in block.splitlines()
             if line.startswith("| ") and not line.startswith("| step ")]
    assert names == [step for step in STEPS if step in names], names


def test_readme_lists_the_demo_steps():
  """The README's table of demo.sh's steps has one numbered row per step of the summary, as
  demo.sh's own header comment does."""
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    readme = f.read()
  section = readme.split("\n## Install and the two commands\n", 1)[1].split("\n## ", 1)[0]
  numbers = [int(n) for n in re.findall(r"^\| (\d+) \| ", section, re.M)]
  assert numbers == list(range(1, len(STEPS) + 1))
  with open(os.path.join(ROOT, "demo.sh"), encoding="utf-8") as f:
    header = f.read().split("\nset -euo pipefail", 1)[0]
  numbers = [int(n) for n in re.findall(r"^#\s+(\d+)\. ", header, re.M)]
  assert numbers == list(range(1, len(STEPS) + 1))


@pytest.mark.slow
def test_each_step_wrote_its_files_in_out(demo_out):
  expected = [
      "vocab.txt", "bert_config.json", "tf_examples.tfrecord",
      "pretraining_output/bert_model.ckpt.index", "pretraining_output/eval_results.txt",
      "classifier_output/eval_results.txt", "classifier_output/test_results.tsv",
      "classifier_output/eval_history.jsonl", "classifier_output/best/eval_results.txt",
      "squad_output/predictions.json", "squad_output/nbest_predictions.json",
      "squad_output/official_eval.json", "ner_output/eval_results.txt",
      "ner_output/dev_predictions.txt", "ner_output/test_predictions.txt",
      "ner_output/dev_conlleval.txt", "ner_output/labels.txt",
      "embeddings_output/eval_results.txt", "embeddings_output/dev_run.trec",
      "embeddings_output/task.json", "reranker_output/eval_results.txt",
      "reranker_output/dev_run.trec", "reranker_output/dev_scores.json",
      "reranker_output/task.json", "features.jsonl",
      "saved_model/saved_model.pb", "query.json", "classifier_hf/config.json",
      "classifier_hf/model.safetensors", "classifier_hf/vocab.txt",
      "classifier_tflite/model.tflite", "classifier_tflite/labels.txt", "served.json",
      "serve.log", "summary.md"]
  missing = [p for p in expected if not os.path.exists(os.path.join(demo_out, p))]
  assert not missing
  with open(os.path.join(demo_out, "classifier_output/test_results.tsv")) as f:
    assert len(f.read().splitlines()) == 8  # sample_tasks/pairs/test.tsv's 8 pairs


@pytest.mark.slow
def test_tagger_eval_f1_is_conllevals(demo_out):
  """run_ner's eval_f1 (a fraction) is evaluate_ner.py's FB1 of dev_predictions.txt."""
  out = os.path.join(demo_out, "ner_output")
  with open(os.path.join(out, "eval_results.txt")) as f:
    results = dict(line.rstrip("\n").split(" = ") for line in f)
  with open(os.path.join(out, "dev_conlleval.json")) as f:
    scored = json.load(f)
  assert float(results["eval_f1"]) * 100 == pytest.approx(scored["FB1"], abs=1e-9)
  assert float(results["eval_accuracy"]) * 100 == pytest.approx(scored["accuracy"], abs=1e-9)


def _results(path):
  with open(path) as f:
    return dict(line.rstrip("\n").split(" = ") for line in f)


def _run_queries(path):
  """{query id: [doc ids in rank order]} of a TREC run."""
  ranked = {}
  with open(path) as f:
    for line in f:
      qid, _, doc, rank, _, _ = line.split()
      ranked.setdefault(qid, []).append((int(rank), doc))
  return {qid: [doc for _, doc in sorted(docs)] for qid, docs in ranked.items()}


@pytest.mark.slow
def test_reranker_reranks_the_bi_encoders_run_as_the_summary_says(demo_out):
  """The reranker's candidates are the bi-encoder's dev run (its first 20 documents per query,
  the same set in another order), its "before" figures are the bi-encoder's, its "after" ones
  are evaluate_retrieval.py's of the reranked run, and the summary quotes them."""
  retrieval = os.path.join(ROOT, "sample_tasks", "retrieval")
  with open(os.path.join(retrieval, "qrels", "dev.tsv")) as f:
    judged = {line.split("\t")[0] for line in f.read().splitlines()[1:]}
  first = _run_queries(os.path.join(demo_out, "embeddings_output", "dev_run.trec"))
  reranked = _run_queries(os.path.join(demo_out, "reranker_output", "dev_run.trec"))
  assert set(first) == set(reranked) == judged
  for qid, docs in reranked.items():
    assert len(docs) == 20 and sorted(docs) == sorted(first[qid][:20]), qid
  embedded = _results(os.path.join(demo_out, "embeddings_output", "eval_results.txt"))
  results = _results(os.path.join(demo_out, "reranker_output", "eval_results.txt"))
  with open(os.path.join(demo_out, "reranker_output", "dev_scores.json")) as f:
    scored = json.load(f)
  for measure in ("NDCG@10", "MRR@10"):
    assert float(results["eval_before_" + measure]) == pytest.approx(
        float(embedded["eval_" + measure]), abs=1e-9)
    assert float(results["eval_" + measure]) == pytest.approx(scored[measure], abs=1e-9)
  figure = _summary_rows(demo_out)["rerank"][1]
  assert figure.startswith("NDCG@10 %.3f -> %.3f, MRR@10 %.3f -> %.3f " % (
      float(results["eval_before_NDCG@10"]), float(results["eval_NDCG@10"]),
      float(results["eval_before_MRR@10"]), float(results["eval_MRR@10"]))), figure
