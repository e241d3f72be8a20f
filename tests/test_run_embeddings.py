"""run_embeddings.py end to end with a tiny model (2 layers, hidden 32) on pairs and a BEIR set
written here: every output file (checkpoints, the model files with task.json's pooling and
normalize, eval_results.txt's keys, dev_run.trec's lines, best/ by --metric), the loss going
down on a learnable set, the cached mode, and the one-line errors with nothing written."""

import json
import os
import re

import numpy as np
import pytest

import conftest

from bert_keras import checkpoints
from bert_keras import modeling
from bert_keras import run_embeddings
from bert_keras.tasks.retrieval import embedding_data
from bert_keras.tasks.retrieval import embeddings
from bert_keras.tasks.retrieval import metrics as retrieval_metrics

ENTITIES, VOCAB = conftest.ENTITIES, conftest.VOCAB


def _pairs(negatives=False):
  """32 rows: each entity twice (the same anchor text twice: duplicate masking at work)."""
  header = "anchor\tpositive" + ("\tnegative" if negatives else "")
  rows = [header]
  for i, entity in enumerate(ENTITIES * 2):
    row = f"what is {entity}\tthe {'old' if i < 16 else 'new'} story of {entity}"
    if negatives:
      row += f"\tthe story of {ENTITIES[(i + 1) % len(ENTITIES)]}"
    rows.append(row)
  return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  root = tmp_path_factory.mktemp("embeddings")
  data = root / "data"
  data.mkdir()
  (data / "train.tsv").write_text(_pairs())
  conftest.write_beir(data)
  conftest.write_tiny_model_files(root, VOCAB)
  return root


def base_options(files, out, data=None, **overrides):
  return run_embeddings.options(**{**dict(
      data_dir=str(data or files / "data"), vocab_file=str(files / "vocab.txt"),
      bert_config_file=str(files / "bert_config.json"), output_dir=str(out),
      max_seq_length=12, train_batch_size=8, eval_batch_size=8, predict_batch_size=8,
      learning_rate=1e-3, num_train_epochs=2.0, save_checkpoints_steps=4,
      log_every_steps=1), **overrides})


def read_results(path):
  return dict(line.split(" = ") for line in path.read_text().splitlines())


def test_train_eval_predict_writes_every_file(files, tmp_path):
  out = tmp_path / "out"
  results = run_embeddings.run(base_options(
      files, out, do_train=True, do_eval=True, do_predict=True, eval_every_steps=4,
      pooling="cls", normalize=True, metric="MRR@10"))
  names = set(os.listdir(out))
  for name in ("bert_config.json", "vocab.txt", "tokenizer_config.json", "task.json",
               "run_options.json", "eval_results.txt", "dev_run.trec", "test_results.txt",
               "test_run.trec", "best", "eval_history.jsonl", "checkpoint"):
    assert name in names, sorted(names)
  assert {"model.ckpt-4.index", "model.ckpt-8.index"} <= names
  task = json.loads((out / "task.json").read_text())
  assert (task["task"], task["pooling"], task["normalize"]) == ("embeddings", "cls", True)
  found = read_results(out / "eval_results.txt")
  for key in ("eval_NDCG@10", "eval_MAP@100", "eval_Recall@1", "eval_Recall@10",
              "eval_Recall@100", "eval_MRR@10", "eval_Accuracy@1", "global_step"):
    assert key in found, sorted(found)
  assert all(0.0 <= float(v) <= 1.0 for k, v in found.items() if k.startswith("eval_"))
  # dev_run.trec: `qid Q0 docid rank score tag`, the 8 judged queries, all 16 documents each,
  # and the scorer on it gives eval_results.txt's values.
  lines = (out / "dev_run.trec").read_text().splitlines()
  assert len(lines) == 8 * 16
  assert all(re.fullmatch(r"q\d+ Q0 d\d+ \d+ \S+ bert_keras", line) for line in lines)
  qrels = retrieval_metrics.read_qrels(str(files / "data" / "qrels" / "dev.tsv"))
  scored = retrieval_metrics.evaluate(qrels, retrieval_metrics.read_run(str(out / "dev_run.trec")))
  assert float(found["eval_NDCG@10"]) == pytest.approx(scored["NDCG@10"])
  assert results["eval"]["eval_MRR@10"] == pytest.approx(float(found["eval_MRR@10"]))
  assert read_results(out / "test_results.txt")["global_step"] == found["global_step"]
  # best/: a model directory chosen by eval_MRR@10, loadable as an embeddings model.
  history = [json.loads(line) for line in (out / "eval_history.jsonl").read_text().splitlines()]
  assert [entry["global_step"] for entry in history] == [4, 8]
  best = read_results(out / "best" / "eval_results.txt")
  assert float(best["eval_MRR@10"]) == max(entry["eval_MRR@10"] for entry in history)
  assert found["global_step"] == best["global_step"]
  model = checkpoints.load_model(str(out / "best"), task="embeddings", pooling="cls",
                                 normalize=True)
  inputs = embedding_data.encode_texts(["tell me about apple"], _tokenizer(files), 12)
  vector = np.asarray(model({**inputs, "segment_ids": np.zeros_like(inputs["input_ids"])}))
  assert vector.shape == (1, 32) and np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


def _tokenizer(files):
  from bert_keras import tokenization
  return tokenization.FullTokenizer(str(files / "vocab.txt"), do_lower_case=True)


def _losses(caplog):
  return [float(m.group(1)) for m in (re.search(r"step = \d+, loss = ([0-9.]+)", r.getMessage())
                                      for r in caplog.records) if m]


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
def test_loss_decreases_and_retrieval_improves(files, tmp_path, caplog):
  caplog.set_level("INFO")
  before = run_embeddings.run(base_options(files, tmp_path / "untrained", do_eval=True))
  after = run_embeddings.run(base_options(files, tmp_path / "trained", do_train=True,
                                          do_eval=True, num_train_epochs=6.0))
  losses = _losses(caplog)
  assert len(losses) == 24
  assert np.mean(losses[-4:]) < 0.5 * np.mean(losses[:4]), losses
  assert after["eval"]["eval_NDCG@10"] > before["eval"]["eval_NDCG@10"]


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
def test_cached_mode_and_hard_negatives(files, tmp_path, caplog):
  """--mini_batch_size gives the plain mode's losses (dropout off), the second one after a step
  on the cached gradients, with a negative column and the symmetric, Matryoshka loss."""
  data = tmp_path / "data"
  data.mkdir()
  (data / "train.tsv").write_text(_pairs(negatives=True))
  config = modeling.BertConfig.from_json_file(str(files / "bert_config.json"))
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
  (tmp_path / "config.json").write_text(config.to_json_string())
  caplog.set_level("INFO")
  losses = {}
  for mini in (0, 4):
    caplog.clear()
    run_embeddings.run(base_options(
        files, tmp_path / f"out{mini}", data=data, do_train=True, num_train_epochs=0.5,
        bert_config_file=str(tmp_path / "config.json"), mini_batch_size=mini,
        symmetric=True, matryoshka_dims="32,8"))
    losses[mini] = _losses(caplog)
  assert len(losses[0]) == 2 and losses[0][1] != losses[0][0]
  np.testing.assert_allclose(losses[4], losses[0], rtol=1e-4)


def test_task_loss_masks_duplicate_positives():
  """EmbeddingTask passes the text ids: two rows with the same positive text are not each
  other's negatives (the loss equals the loss without the duplicate row's column)."""
  import tensorflow as tf
  task = embeddings.EmbeddingTask(seq_length=4, num_negatives=0)
  rng = np.random.default_rng(0)
  anchors, positives = rng.normal(size=(3, 8)), rng.normal(size=(3, 8))
  positives[2] = positives[1]
  batch = {"anchor_input_ids": tf.zeros([3, 4], tf.int32),
           "anchor_text_id": tf.constant([0, 1, 2], tf.int64),
           "positive_text_id": tf.constant([3, 4, 4], tf.int64)}
  loss, _ = task.loss(tf.constant(np.concatenate([anchors, positives]), tf.float32), batch,
                      {"pairs": tf.constant(3.0)})
  logits = 20.0 * (anchors / np.linalg.norm(anchors, axis=1, keepdims=True)) @ (
      positives / np.linalg.norm(positives, axis=1, keepdims=True)).T
  logits[1, 2] = logits[2, 1] = -np.inf
  expected = np.mean([np.log(np.exp(row[np.isfinite(row)]).sum()) - row[i]
                      for i, row in enumerate(logits)])
  assert float(loss) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("num_negatives", [0, 2])
def test_trimmed_columns_give_the_stacked_loss_and_gradients(num_negatives):
  """ColumnTrainer with EmbeddingTask(trim=True) (each column cut to its own longest text, one
  encoder call per column) gives the loss and gradients of the untrimmed stacked call, dropout
  off; and it does cut: the columns come back at their longest real lengths."""
  import tensorflow as tf
  from bert_keras.runtime import settings, training
  seq, b = 16, 4
  config = modeling.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=seq, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)
  rng = np.random.default_rng(3)
  batch, lengths = {}, {"anchor": [3, 5, 2, 4], "positive": [9, 12, 7, 11],
                        "negative": [6, 10, 8, 5, 13, 4, 7, 9][:b * num_negatives]}
  for name, found in lengths.items():
    if not found:
      continue
    mask = (np.arange(seq)[None] < np.array(found)[:, None]).astype(np.int32)
    ids = rng.integers(4, len(VOCAB), size=mask.shape) * mask
    batch[f"{name}_input_ids"] = tf.constant(ids.reshape(b, -1), tf.int32)
    batch[f"{name}_input_mask"] = tf.constant(mask.reshape(b, -1), tf.int32)
    batch[f"{name}_text_id"] = tf.constant(
        rng.permutation(100)[:len(found)].reshape(b, -1).squeeze(-1) if name != "negative"
        else rng.permutation(100)[:len(found)].reshape(b, -1), tf.int64)
  options = run_embeddings.options(train_batch_size=b, max_seq_length=seq, use_xla=False)
  strategy = tf.distribute.get_strategy()
  found = {}
  for trim in (False, True):
    task = embeddings.EmbeddingTask(seq, num_negatives, symmetric=True, trim=trim)
    tf.keras.utils.set_random_seed(1)
    trainer = training.build_trainer(
        settings.RunSettings.from_flags(options).training, strategy,
        lambda: modeling.BertSentenceEncoder(config, pooling="mean"), task, 10, 1)
    if trim:
      trainer = embeddings.ColumnTrainer.of(trainer)
      assert [c["input_ids"].shape[1] for c in task.columns(batch)] == [
          max(v) for v in lengths.values() if v]
    grads, stats = trainer._grads_and_stats(batch, task.denominators(batch))
    found[trim] = (float(stats["loss"]), grads)
  assert found[True][0] == pytest.approx(found[False][0], abs=1e-5)
  assert found[False][0] > 0
  for trimmed, stacked in zip(found[True][1], found[False][1]):
    assert (trimmed is None) == (stacked is None)
    if stacked is not None:
      np.testing.assert_allclose(trimmed.numpy(), stacked.numpy(), atol=1e-5)


@pytest.mark.parametrize("where, text, message", [
    ("train.tsv", "anchor\tpositive\nwhat is apple\tthe story of apple\nwhat is tiger\t\n",
     r"train.tsv line 3: the positive is missing or empty"),
    ("train.jsonl", '{"anchor": "what is apple", "positive": "a"}\n{"positive": "b"}\n',
     r"train.jsonl line 2: the anchor is missing or empty"),
    ("corpus.jsonl", '{"_id": "d0", "text": "a"}\n{"_id": "d0", "text": "b"}\n',
     r"corpus.jsonl line 2: the id 'd0' is given a second time \(first on line 1\)"),
    ("corpus.jsonl", '{"_id": "d0", "text": "a"}\n{"_id": "d 1", "text": "b"}\n',
     r"corpus.jsonl line 2: the id 'd 1' holds whitespace: a TREC run .* cannot hold it"),
    ("qrels/dev.tsv", "query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\tnope\t1\n",
     r"dev.tsv line 3: the document 'nope' is not in corpus.jsonl"),
    ("qrels/dev.tsv", "query-id\tcorpus-id\tscore\nq99\td0\t1\n",
     r"dev.tsv line 2: the query 'q99' is not in queries.jsonl"),
])
def test_bad_input_is_one_line_error_before_any_output(files, tmp_path, where, text, message):
  data = tmp_path / "data"
  data.mkdir()
  conftest.write_beir(data)
  if not where.startswith("train"):
    (data / "train.tsv").write_text(_pairs())
  (data / where).write_text(text)
  out = tmp_path / "out"
  with pytest.raises(ValueError, match=message) as error:
    run_embeddings.run(base_options(files, out, data=data, do_train=True, do_eval=True))
  assert "\n" not in str(error.value)
  assert not out.exists()


@pytest.mark.parametrize("text, overrides, message", [
    (_pairs(), dict(train_batch_size=1), r"^--train_batch_size: a batch of 1 row .* no hard "
     r"negatives in .*train.tsv: each anchor's only candidate is its positive, so the loss is 0"),
    (_pairs(), dict(train_batch_size=4, gradient_accumulation_steps=4),
     r"^--train_batch_size: a batch of 1 row \(per --gradient_accumulation_steps"),
    ("anchor\tpositive\n" + "".join(f"what is {e}\tthe same story\n" for e in ENTITIES), {},
     r"train.tsv: every row's positive is the same text and there are no hard negatives")])
def test_training_without_any_negative_is_refused(files, tmp_path, text, overrides, message):
  """No anchor with a negative (a batch of one row, or one positive text for all) trains with
  loss 0 and learns nothing: refused before any output. With a hard negative, or distinct
  positives in a batch of two, it is not."""
  data = tmp_path / "data"
  data.mkdir()
  conftest.write_beir(data)
  (data / "train.tsv").write_text(text)
  out = tmp_path / "out"
  with pytest.raises(ValueError, match=message):
    run_embeddings.run(base_options(files, out, data=data, do_train=True, **overrides))
  assert not out.exists()
  same = {"num_negatives": 0, "path": "train.tsv", "text_ids": {"positive": np.zeros(4, int)}}
  embeddings.check_has_negatives(dict(same, num_negatives=1), 1)  # (a hard negative: learns)
  embeddings.check_has_negatives(dict(same, text_ids={"positive": np.arange(4)}), 2)


def test_flag_errors(files, tmp_path):
  for overrides, message in (
      (dict(matryoshka_dims="64"), r"--matryoshka_dims=64: sizes must be in 1..32"),
      (dict(metric="BLEU@10"), r"--metric=BLEU@10"),
      (dict(mini_batch_size=-1), r"--mini_batch_size=-1"),
      (dict(eval_every_steps=2), r"--eval_every_steps=2 needs --do_train and --do_eval")):
    with pytest.raises(ValueError, match=message):
      run_embeddings.run(base_options(files, tmp_path / "out", do_train=True, **overrides))
    assert not (tmp_path / "out").exists()


def test_sts_measures_against_scipy():
  """eval_pearson / eval_spearman against SciPy's pearsonr and spearmanr (ties in both the
  cosines and the gold scores: Spearman's average ranks)."""
  from scipy import stats
  rng = np.random.default_rng(3)
  a, b = rng.normal(size=(40, 8)), rng.normal(size=(40, 8))
  b[:6] = a[:6] * 2.0  # cosine exactly 1 six times: tied ranks
  gold = rng.integers(0, 5, size=40).astype(float)  # tied gold scores
  found = embeddings.sts_results(a, b, gold)
  cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
  assert found["eval_pearson"] == pytest.approx(stats.pearsonr(cosine, gold)[0], abs=1e-12)
  assert found["eval_spearman"] == pytest.approx(stats.spearmanr(cosine, gold)[0], abs=1e-12)


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
def test_sts_evaluation_alone_and_its_bad_rows(files, tmp_path):
  data = tmp_path / "data"
  data.mkdir()
  (data / "train.tsv").write_text(_pairs())
  rows = ["sentence1\tsentence2\tscore"] + [
      f"what is {e}\tthe story of {f}\t{5.0 if e == f else 0.5 * i}"
      for i, (e, f) in enumerate(zip(ENTITIES, ENTITIES[:8] + ENTITIES[:8]))]
  (data / "sts_dev.tsv").write_text("\n".join(rows) + "\n")
  out = tmp_path / "out"
  results = run_embeddings.run(base_options(files, out, data=data, do_train=True, do_eval=True,
                                            eval_every_steps=4, metric="spearman"))
  found = read_results(out / "eval_results.txt")
  assert set(found) == {"eval_pearson", "eval_spearman", "global_step"}
  assert -1.0 <= results["eval"]["eval_spearman"] <= 1.0
  assert not (out / "dev_run.trec").exists()
  assert (out / "best" / "eval_results.txt").exists()
  (data / "sts_dev.tsv").write_text("sentence1\tsentence2\tscore\na\tb\tmuch\n")
  with pytest.raises(ValueError, match=r"sts_dev.tsv line 2: the score 'much' is not a number"):
    run_embeddings.run(base_options(files, tmp_path / "out2", data=data, do_eval=True))
  (data / "sts_dev.tsv").unlink()
  with pytest.raises(ValueError, match=r"no .*qrels/dev.tsv .* and no .*sts_dev.tsv"):
    run_embeddings.run(base_options(files, tmp_path / "out3", data=data, do_eval=True))
  assert not (tmp_path / "out2").exists() and not (tmp_path / "out3").exists()


def test_a_corpus_larger_than_memory_is_refused_before_training(files, tmp_path, monkeypatch):
  """16 documents + 8 queries at --max_seq_length=12, hidden 32: 24 x (96 + 128) bytes; with
  5 KB available the run stops before a model is built, naming the set and the flag (the
  weights' own check, which 5 KB would fail first, is set aside here)."""
  from bert_keras.runtime import run_checks
  from bert_keras.utils import memory
  monkeypatch.setattr(memory, "available_bytes", lambda: 5000)
  monkeypatch.setattr(run_checks, "check_memory", lambda *args: None)
  out = tmp_path / "out"
  with pytest.raises(ValueError, match=r"--do_eval: the dev set of --data_dir .* \(24 texts\) "
                                       r"needs 5.38e-06 GB .*--max_seq_length=12"):
    run_embeddings.run(base_options(files, out, do_train=True, do_eval=True))
  assert not out.exists()
