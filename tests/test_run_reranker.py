"""run_reranker.py end to end with a tiny model (2 layers, hidden 32) on labelled pairs, a BEIR
set and candidate runs written here: every output file (checkpoints, the model files with
task.json's "reranker", eval_results.txt's after and before keys, dev_run.trec, best/ by
--metric), the metrics recomputed by the scorer from the written runs, the listwise loss
against a NumPy restatement, the one-line errors with nothing written, and predict.py scoring
rows and reranking a run with the trained model directory."""

import json
import os
import re

import numpy as np
import pytest

import conftest

from bert_keras import checkpoints
from bert_keras import huggingface_layout
from bert_keras import losses
from bert_keras import modeling
from bert_keras import predict
from bert_keras import run_reranker
from bert_keras import task_registry
from bert_keras import tokenization
from bert_keras.tasks.retrieval import reranking
from bert_keras.tasks.retrieval import metrics as retrieval_metrics

ENTITIES, VOCAB = conftest.ENTITIES, conftest.VOCAB


def _train_rows():
  """Each entity's query with its own story (1) and the next entity's (0): 32 rows, grouped
  by query for the listwise loss."""
  rows = ["query\tpassage\tlabel"]
  for i, entity in enumerate(ENTITIES):
    rows.append(f"what is {entity}\tthe story of {entity}\t1")
    rows.append(f"what is {entity}\tthe story of {ENTITIES[(i + 1) % 16]}\t0")
  return "\n".join(rows) + "\n"


def _candidates(queries, num_docs=6):
  """A TREC run: each query's num_docs candidates, its own document among them at a rank
  that varies (so the candidates' order has a score of its own), one unjudged query too."""
  lines = []
  for q in queries:
    docs = [f"d{(q + j) % 16}" for j in range(num_docs)]
    docs = docs[1:1 + q % num_docs] + docs[:1] + docs[1 + q % num_docs:]
    lines += [f"q{q} Q0 {d} {r} {10.0 - r} bm25" for r, d in enumerate(docs, 1)]
  return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  root = tmp_path_factory.mktemp("reranker")
  data = root / "data"
  data.mkdir()
  (data / "train.tsv").write_text(_train_rows())
  conftest.write_beir(data)
  (root / "dev.trec").write_text(_candidates(range(0, 8)) + _candidates([12], 2))
  (root / "test.trec").write_text(_candidates(range(8, 16)))
  conftest.write_tiny_model_files(root, VOCAB)
  return root


def base_options(files, out, data=None, **overrides):
  return run_reranker.options(**{**dict(
      data_dir=str(data or files / "data"), vocab_file=str(files / "vocab.txt"),
      bert_config_file=str(files / "bert_config.json"), output_dir=str(out),
      candidates_file=str(files / "dev.trec"), test_candidates_file=str(files / "test.trec"),
      max_seq_length=16, train_batch_size=8, eval_batch_size=8, predict_batch_size=8,
      learning_rate=1e-3, num_train_epochs=2.0, save_checkpoints_steps=4,
      log_every_steps=1, loss="pointwise"), **overrides})


def read_results(path):
  return dict(line.split(" = ") for line in path.read_text().splitlines())


def _scored(files, split, run, top_k=100):
  """The scorer's measures of a run {qid: {docid: score}} on the split's qrels, the run cut to
  its judged queries' first top_k documents."""
  qrels = retrieval_metrics.read_qrels(str(files / "data" / "qrels" / f"{split}.tsv"))
  cut = {q: {d: run[q][d] for d in retrieval_metrics.rank_documents(run[q])[:top_k]}
         for q in run if q in qrels}
  return retrieval_metrics.evaluate(qrels, cut)


@pytest.fixture(scope="module")
def trained(files, tmp_path_factory):
  out = tmp_path_factory.mktemp("trained") / "out"
  results = run_reranker.run(base_options(
      files, out, do_train=True, do_eval=True, do_predict=True, eval_every_steps=4,
      metric="MRR@10", rerank_top_k=5))
  return out, results


def test_train_eval_predict_writes_every_file(files, trained):
  out, results = trained
  names = set(os.listdir(out))
  for name in ("bert_config.json", "vocab.txt", "tokenizer_config.json", "task.json",
               "run_options.json", "eval_results.txt", "dev_run.trec", "test_results.txt",
               "test_run.trec", "best", "eval_history.jsonl", "checkpoint"):
    assert name in names, sorted(names)
  assert {"model.ckpt-4.index", "model.ckpt-8.index"} <= names  # 32 pairs / 8 x 2 epochs
  assert json.loads((out / "task.json").read_text())["task"] == "reranker"
  found = read_results(out / "eval_results.txt")
  for key in ("eval_NDCG@10", "eval_MAP@100", "eval_MRR@10", "eval_Recall@1",
              "eval_before_NDCG@10", "eval_before_MRR@10", "global_step"):
    assert key in found, sorted(found)
  # dev_run.trec: the 8 judged queries (not the unjudged q12), their first 5 candidates each.
  lines = (out / "dev_run.trec").read_text().splitlines()
  assert len(lines) == 8 * 5
  assert all(re.fullmatch(r"q[0-7] Q0 d\d+ [1-5] \S+ bert_keras_reranker", line)
             for line in lines)
  candidates = retrieval_metrics.read_run(str(files / "dev.trec"))
  reranked = retrieval_metrics.read_run(str(out / "dev_run.trec"))
  for q, docs in reranked.items():  # the same documents as the candidates' first 5
    assert set(docs) == set(retrieval_metrics.rank_documents(candidates[q])[:5])
  # After: the scorer on the written run; before: on the candidates' own first 5.
  after, before = _scored(files, "dev", reranked), _scored(files, "dev", candidates, 5)
  for name in ("NDCG@10", "MRR@10", "Recall@1", "MAP@100"):
    assert float(found[f"eval_{name}"]) == pytest.approx(after[name])
    assert float(found[f"eval_before_{name}"]) == pytest.approx(before[name])
  assert before["MRR@10"] < 1.0  # (the candidates' order is not already perfect)
  assert results["eval"]["eval_MRR@10"] == pytest.approx(float(found["eval_MRR@10"]))
  test = read_results(out / "test_results.txt")
  assert float(test["eval_NDCG@10"]) == pytest.approx(_scored(
      files, "test", retrieval_metrics.read_run(str(out / "test_run.trec")))["NDCG@10"])
  # best/: chosen by eval_MRR@10, a reranker model directory.
  history = [json.loads(line) for line in (out / "eval_history.jsonl").read_text().splitlines()]
  assert [entry["global_step"] for entry in history] == [4, 8]
  best = read_results(out / "best" / "eval_results.txt")
  assert float(best["eval_MRR@10"]) == max(entry["eval_MRR@10"] for entry in history)
  assert found["global_step"] == best["global_step"]
  model = checkpoints.load_model(str(out / "best"), task="reranker")
  assert isinstance(model, modeling.BertCrossEncoder)
  assert task_registry.of_model(model).name == "reranker"


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
def test_the_default_loss_is_listwise_with_queries_a_step(files, tmp_path):
  """The default recipe is the one that learns (docs/RESULTS.md): the listwise loss, 8 queries
  a step; the pointwise loss counts 32 pairs a step. A query without a positive names both."""
  options = run_reranker.options(**{k: v for k, v in vars(base_options(
      files, tmp_path / "out", do_train=True, num_train_epochs=1.0)).items()
      if k not in ("loss", "train_batch_size", "_given")})
  assert (options.loss, options.train_batch_size) == ("listwise", None)
  run_reranker.run(options)
  assert json.loads((tmp_path / "out" / "run_options.json").read_text())[
      "train_batch_size"] == 8
  assert {"model.ckpt-2.index"} <= set(os.listdir(tmp_path / "out"))  # 16 queries / 8
  pointwise = run_reranker.options(**dict(vars(options), loss="pointwise",
                                          output_dir=str(tmp_path / "p")))
  run_reranker.run(pointwise)
  assert json.loads((tmp_path / "p" / "run_options.json").read_text())[
      "train_batch_size"] == 32


def test_listwise_loss_matches_numpy():
  rng = np.random.default_rng(3)
  logits = rng.normal(size=(4, 5))
  labels = np.array([[1, 0, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 1, 0]])
  mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]])

  def restated(logits, labels, mask):
    losses = []
    for row, positive, real in zip(logits, labels, mask):
      if not positive.any():
        continue  # no positive: no signal
      kept = row[real > 0]
      log_softmax = row - (np.log(np.exp(kept - kept.max()).sum()) + kept.max())
      losses.append(-np.mean(log_softmax[positive > 0]))
    return np.mean(losses)

  found = float(losses.listwise_loss(logits, labels, mask))
  assert found == pytest.approx(restated(logits, labels, mask), rel=1e-10)
  # without a mask every candidate counts; one positive a row: the categorical cross-entropy
  one = np.eye(5)[[0, 2, 4, 1]]
  assert float(losses.listwise_loss(logits, one)) == pytest.approx(
      restated(logits, one, np.ones_like(one)), rel=1e-10)
  pointwise = float(losses.pointwise_loss(logits[0], labels[1]))
  p = 1 / (1 + np.exp(-logits[0]))
  assert pointwise == pytest.approx(-np.mean(labels[1] * np.log(p)
                                             + (1 - labels[1]) * np.log(1 - p)), rel=1e-10)


@pytest.mark.slow
def test_listwise_training_runs(files, tmp_path):
  out = tmp_path / "out"
  results = run_reranker.run(base_options(
      files, out, do_train=True, do_eval=True, loss="listwise", train_batch_size=4,
      num_train_epochs=1.0, rerank_top_k=3))
  assert {"model.ckpt-4.index"} <= set(os.listdir(out))  # 16 queries / 4
  assert 0.0 <= results["eval"]["eval_NDCG@10"] <= 1.0
  assert len((out / "dev_run.trec").read_text().splitlines()) == 8 * 3


def _bad_data(tmp_path, files, train=None, run=None):
  data = tmp_path / "data"
  data.mkdir()
  for name in ("corpus.jsonl", "queries.jsonl"):
    (data / name).write_text((files / "data" / name).read_text())
  (data / "qrels").mkdir()
  for split in ("dev", "test"):
    (data / "qrels" / f"{split}.tsv").write_text(
        (files / "data" / "qrels" / f"{split}.tsv").read_text())
  (data / "train.tsv").write_text(train or _train_rows())
  (tmp_path / "run.trec").write_text(run or _candidates(range(0, 8)))
  return data


@pytest.mark.parametrize("train, run, loss, message", [
    ("query\tpassage\tlabel\nwhat\t\t1\n", None, "pointwise",
     r"train.tsv line 2: the passage is missing or empty"),
    ("query\tpassage\tlabel\nwhat\tthe story\t2\n", None, "pointwise",
     r"train.tsv line 2: the label '2' is not 0 or 1"),
    ("query\tpassage\nwhat\tthe story\n", None, "pointwise",
     r"train.tsv line 1: the header .* names no `label` column"),
    ("query\tpassage\tlabel\nwhat\ta\t0\nwhat\tb\t0\n", None, "listwise",
     r"train.tsv line 2: the query 'what' has no positive"),
    (None, "q1 Q0 d1 1 2.0 x\nq99 Q0 d1 1 1.0 x\n", "pointwise",
     r"run.trec line 2: the query 'q99' is not in queries.jsonl"),
    (None, "q1 Q0 d1 1 2.0 x\nq1 Q0 nope 2 1.0 x\n", "pointwise",
     r"run.trec line 2: the document 'nope' is not in corpus.jsonl"),
    (None, "q1 Q0 d1 1 2.0 x\nq1 d2 2 1.0\n", "pointwise",
     r"run.trec line 2: .* is not `qid Q0 docid rank score tag`"),
])
def test_bad_input_is_one_line_error_before_anything_is_written(files, tmp_path, train, run,
                                                                loss, message):
  data = _bad_data(tmp_path, files, train, run)
  out = tmp_path / "out"
  with pytest.raises(ValueError, match=message) as raised:
    run_reranker.run(base_options(files, out, data=data, do_train=True, do_eval=True,
                                  loss=loss, candidates_file=str(tmp_path / "run.trec")))
  assert "\n" not in str(raised.value)
  assert not out.exists() or not os.listdir(out)


def test_option_errors(files, tmp_path):
  with pytest.raises(ValueError, match="--do_eval / --eval_every_steps need --candidates_file"):
    run_reranker.run(base_options(files, tmp_path / "o", do_eval=True, candidates_file=None))
  with pytest.raises(ValueError, match="--rerank_top_k=0: must be >= 1"):
    run_reranker.run(base_options(files, tmp_path / "o", do_eval=True, rerank_top_k=0))
  with pytest.raises(ValueError, match="--metric=NDCG@7"):
    run_reranker.run(base_options(files, tmp_path / "o", do_eval=True, metric="NDCG@7"))


def test_predict_scores_rows_and_reranks_a_run(files, trained, tmp_path):
  out = trained[0] / "best"  # the model the script's dev_run.trec was reranked with
  rows = tmp_path / "rows.jsonl"
  rows.write_text(json.dumps({"text_a": "what is apple", "text_b": "the story of apple"}) + "\n"
                  + json.dumps({"text_a": "what is apple", "text_b": "the story of tiger"})
                  + "\n")
  scored = tmp_path / "scored.jsonl"
  predict.run(predict.options(model_dir=str(out), input_file=str(rows),
                              output_file=str(scored)))
  found = [json.loads(line) for line in scored.read_text().splitlines()]
  assert [sorted(r) for r in found] == [["score", "text_a", "text_b"]] * 2
  # the scores are the model's logits of (query, passage) as segments 0 and 1
  model = checkpoints.load_model(str(out), task="reranker")
  tokenizer = tokenization.FullTokenizer(str(out / "vocab.txt"), True)
  arrays = reranking.encode_pairs(["what is apple"] * 2,
                                  ["the story of apple", "the story of tiger"], tokenizer, 16)
  logits = np.asarray(model(arrays, training=False))[:, 0]
  np.testing.assert_allclose([r["score"] for r in found], logits, atol=1e-4)
  # --rerank_run: the dev candidates reranked, the same run the script wrote
  reranked = tmp_path / "reranked.trec"
  predict.run(predict.options(model_dir=str(out), rerank_run=str(files / "dev.trec"),
                              corpus=str(files / "data" / "corpus.jsonl"),
                              queries=str(files / "data" / "queries.jsonl"),
                              output_file=str(reranked), rerank_top_k=5))
  mine = retrieval_metrics.read_run(str(reranked))
  assert len(mine) == 9  # every query of the run, the unjudged q12 too
  written = retrieval_metrics.read_run(str(out.parent / "dev_run.trec"))
  for q in written:
    assert mine[q] == pytest.approx(written[q], abs=1e-4)


def test_predict_rerank_run_errors(files, trained, tmp_path):
  out, _ = trained
  (tmp_path / "bad.trec").write_text("q1 Q0 d1 1 2.0 x\nq1 Q0 zz 2 1.0 x\n")
  with pytest.raises(ValueError, match=r"bad.trec line 2: the document 'zz' is not in"):
    predict.run(predict.options(model_dir=str(out), rerank_run=str(tmp_path / "bad.trec"),
                                corpus=str(files / "data" / "corpus.jsonl"),
                                queries=str(files / "data" / "queries.jsonl"),
                                output_file=str(tmp_path / "x.trec")))
  assert not (tmp_path / "x.trec").exists()
  with pytest.raises(ValueError, match="--rerank_run needs --corpus and --queries"):
    predict.run(predict.options(model_dir=str(out), rerank_run=str(files / "dev.trec"),
                                output_file=str(tmp_path / "x.trec")))


def test_huggingface_round_trip(files, tmp_path):
  """save_huggingface of a reranker (BertForSequenceClassification, one label) read back by
  load_model(task="reranker"): the same logits."""
  config = modeling.BertConfig.from_json_file(str(files / "bert_config.json"))
  model = task_registry.get("reranker").build(config)
  rng = np.random.default_rng(5)
  for v in model.weights:
    v.assign(rng.normal(0, 0.2, v.shape).astype(np.float32))
  huggingface_layout.save_huggingface(model, str(tmp_path / "hf"),
                                      vocab_file=str(files / "vocab.txt"), do_lower_case=True)
  hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
  assert hf_config["architectures"] == ["BertForSequenceClassification"]
  loaded = checkpoints.load_model(str(tmp_path / "hf"), task="reranker")
  assert isinstance(loaded, modeling.BertCrossEncoder)
  tokenizer = tokenization.FullTokenizer(str(files / "vocab.txt"), True)
  arrays = reranking.encode_pairs(["what is apple", "tell me"], ["the story of apple", "a"],
                                  tokenizer, 16)
  np.testing.assert_allclose(np.asarray(loaded(arrays)), np.asarray(model(arrays)), atol=1e-5)


def test_the_huggingface_export_keeps_the_trained_length(trained, tmp_path):
  """convert_checkpoint --format=huggingface of a reranker trained at --max_seq_length=16:
  tokenizer_config.json's model_max_length is 16 (where CrossEncoder truncates), not the
  position table's size."""
  from bert_keras import convert_checkpoint
  convert_checkpoint.run(convert_checkpoint.options(
      init_checkpoint=str(trained[0]), output_dir=str(tmp_path / "hf"), format="huggingface"))
  tokenizer = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
  positions = json.loads((tmp_path / "hf" / "config.json").read_text())[
      "max_position_embeddings"]
  assert (tokenizer["model_max_length"], positions > 16) == (16, True)


@pytest.mark.slow
def test_saved_model_of_the_model_directory(trained, files, tmp_path):
  """export_saved_model of the reranker's best/ (no other model flag): serving_default over raw
  text returns the logits predict.py gives, and predict.py reranks a run through it."""
  import tensorflow as tf
  from bert_keras import export_saved_model
  best = trained[0] / "best"
  export_saved_model.run(export_saved_model.options(init_checkpoint=str(best),
                                                    export_dir=str(tmp_path / "sm")))
  loaded = tf.saved_model.load(str(tmp_path / "sm"))
  out = loaded.signatures["serving_default"](
      text_a=tf.constant(["what is apple", "what is apple"]),
      text_b=tf.constant(["the story of apple", "the story of tiger"]))
  predictor = predict.load_predictor(predict.options(model_dir=str(best), input_file="-"))
  expected = [row["score"] for row in predictor.predict(
      ["what is apple"] * 2, ["the story of apple", "the story of tiger"])]
  np.testing.assert_allclose(out["predictions"].numpy(), expected, atol=1e-4)
  reranked = tmp_path / "reranked.trec"
  predict.run(predict.options(model_dir=str(tmp_path / "sm"), rerank_run=str(files / "dev.trec"),
                              corpus=str(files / "data" / "corpus.jsonl"),
                              queries=str(files / "data" / "queries.jsonl"),
                              output_file=str(reranked), rerank_top_k=5))
  written = retrieval_metrics.read_run(str(trained[0] / "dev_run.trec"))
  mine = retrieval_metrics.read_run(str(reranked))
  for q in written:
    assert mine[q] == pytest.approx(written[q], abs=1e-4)
