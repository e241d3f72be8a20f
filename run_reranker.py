r"""BERT fine-tuning as a cross-encoder (reranker): a (query, passage) pair -> one relevance
logit, trained on labelled pairs and evaluated by reranking candidate lists (a TREC run, e.g.
run_embeddings' dev_run.trec) against BEIR qrels, the way run_classifier.py fine-tunes a
classifier.

  python run_reranker.py --do_train=true --do_eval=true \
    --data_dir=$DATA_DIR --candidates_file=$EMBEDDINGS_OUTPUT/dev_run.trec \
    --vocab_file=$BERT_BASE_DIR/vocab.txt --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=256 \
    --learning_rate=5e-5 --num_train_epochs=1.0 \
    --output_dir=/tmp/reranker_output/

--data_dir holds train.tsv (a header naming the columns `query`, `passage`, `label`) or
train.jsonl (objects with those keys), label 0 or 1, for --do_train; and a BEIR retrieval set
for --do_eval / --do_predict: corpus.jsonl (`_id`, `title`, `text`; a passage is (title + " " +
text).strip()), queries.jsonl (`_id`, `text`), qrels/dev.tsv and qrels/test.tsv.

--loss=listwise (default): the rows are grouped by query (all rows of a query text, in
first-appearance order; every query needs a positive); per query, logsumexp over its
candidates' logits minus the mean logit of its positives (the softmax cross-entropy against
the uniform distribution over the positives), the mean over the batch's queries
(--train_batch_size queries a step, default 8, each padded to the longest list with masked-out
candidates). --loss=pointwise: binary cross-entropy of each pair's logit against its label,
the mean over the batch's pairs (--train_batch_size pairs a step, default 32); on lists of one
positive and a few negatives it learns the label prior and reranks worse than the candidates'
own order (docs/RESULTS.md), so listwise is the default. tasks/retrieval/reranking.py,
losses.py.

Evaluation reranks the first --rerank_top_k candidates of each judged query of
--candidates_file (dev; --do_predict: --test_candidates_file, default --candidates_file) in
the run's own order. Outputs in --output_dir: checkpoints (model.ckpt-N, resumable), the model
files (bert_config.json, vocab.txt, tokenizer_config.json, task.json with "task":
"reranker"; run_options.json: runtime/model_dir.py), eval_results.txt (eval_NDCG@10,
eval_MAP@100, eval_Recall@k, eval_MRR@10, ... after reranking; eval_before_NDCG@10, ... of the
candidates' own order over the same documents; global_step) and dev_run.trec (the reranked
candidates, TREC run format); --do_predict writes test_results.txt and test_run.trec.
--eval_every_steps keeps the best model by --metric (after reranking) in output_dir/best.
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")
import dataclasses
import os

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from bert_keras import modeling
from bert_keras.runtime import common_flags
from bert_keras.runtime import job
from bert_keras.runtime import model_dir
from bert_keras.runtime import option_checks as checks
from bert_keras.runtime import run_checks
from bert_keras.runtime import settings
from bert_keras.runtime import training
from bert_keras.tasks.retrieval import embedding_data
from bert_keras.tasks.retrieval import embeddings
from bert_keras.tasks.retrieval import reranking
from bert_keras.tasks.retrieval import metrics as retrieval_metrics
from bert_keras.utils import errors

TRAIN_FILES = ("train.tsv", "train.jsonl")
SPLITS = {"dev": os.path.join("qrels", "dev.tsv"), "test": os.path.join("qrels", "test.tsv")}


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return common_flags.make_options(DEFAULTS, overrides)


def define_flags(fv=flags.FLAGS):
  """run_classifier's model and training flags plus the reranker's (loss, candidates)."""
  flags.DEFINE_string("data_dir", None,
                      "The input data dir: train.tsv or train.jsonl (query, passage, label), "
                      "and a BEIR retrieval set (corpus.jsonl, queries.jsonl, qrels/dev.tsv, "
                      "qrels/test.tsv).", flag_values=fv)
  flags.DEFINE_string("candidates_file", None,
                      "--do_eval: the TREC run whose candidates are reranked (e.g. "
                      "run_embeddings' dev_run.trec).", flag_values=fv)
  flags.DEFINE_string("test_candidates_file", None,
                      "--do_predict: the TREC run of the test queries (default: "
                      "--candidates_file).", flag_values=fv)
  common_flags.define_model_flags(max_seq_length=256, fv=fv)
  flags.DEFINE_bool("do_train", False, "Whether to run training.", flag_values=fv)
  flags.DEFINE_bool("do_eval", False, "Whether to rerank --candidates_file against "
                    "qrels/dev.tsv.", flag_values=fv)
  flags.DEFINE_bool("do_predict", False, "Whether to rerank the test candidates against "
                    "qrels/test.tsv.", flag_values=fv)
  flags.DEFINE_integer("train_batch_size", None, "Total batch size for training: queries with "
                       "--loss=listwise (default 8), pairs with --loss=pointwise (default 32).",
                       flag_values=fv)
  flags.DEFINE_integer("eval_batch_size", 64, "Pairs scored per step in eval.", flag_values=fv)
  flags.DEFINE_integer("predict_batch_size", 64, "Pairs scored per step in predict.",
                       flag_values=fv)
  flags.DEFINE_enum("loss", "listwise", reranking.LOSSES,
                    "listwise: softmax cross-entropy over each query's candidates (every query "
                    "needs a positive); pointwise: binary cross-entropy per pair (it learns "
                    "the label prior where each query has one positive among few).",
                    flag_values=fv)
  flags.DEFINE_integer("rerank_top_k", reranking.TOP_K,
                       "Candidates reranked per query (the first of the run's order).",
                       flag_values=fv)
  flags.DEFINE_string("metric", "NDCG@10",
                      "The measure that chooses output_dir/best (a name of eval_results.txt "
                      "without eval_, e.g. MRR@10, MAP@100).", flag_values=fv)
  common_flags.define_shared_flags(common_flags.FINE_TUNING, ("data_dir", "output_dir"), fv)
  flags.adopt_module_key_flags(common_flags, flag_values=fv)  # (--help lists them)


# The options of run() (options(), model_dir.resolve_options): the flags' names and defaults,
# read from define_flags without parsing or touching absl's FLAGS.
DEFAULTS = common_flags.flag_defaults(define_flags)


# ----------------------------------------------------------------------------
# Checks and data.

@dataclasses.dataclass(frozen=True)
class Reranking(settings.FromFlags):
  """run_reranker's own flags, typed (settings.FromFlags): the data and candidates files, the
  loss, how many candidates are reranked, and the metric."""
  data_dir: str
  loss: str
  candidates_file: str | None
  test_candidates_file: str | None
  rerank_top_k: int
  metric: str


# --train_batch_size's default per --loss: 8 queries a step (listwise) or 32 pairs (pointwise),
# the recipes of docs/RESULTS.md.
TRAIN_BATCH_SIZES = {"listwise": 8, "pointwise": 32}


def _validate(options):
  checks.check_start(options)
  if (options.do_eval or options.eval_every_steps) and not options.candidates_file:
    raise ValueError("--do_eval / --eval_every_steps need --candidates_file (a TREC run of "
                     "the dev queries)")
  if options.do_predict and not (options.test_candidates_file or options.candidates_file):
    raise ValueError("--do_predict needs --test_candidates_file (or --candidates_file)")
  checks.check(options, {
      checks.EXISTING_FILES: ("bert_config_file", "vocab_file", "candidates_file",
                              "test_candidates_file"),
      checks.POSITIVE: ("train_batch_size", "eval_batch_size", "predict_batch_size",
                        "iterations_per_loop", "gradient_accumulation_steps", "rerank_top_k"),
      checks.AT_LEAST: {"max_seq_length": (5, "[CLS] a query piece [SEP] a passage piece "
                                              "[SEP]")},
      checks.CHOICES: {"loss": reranking.LOSSES},
      checks.REQUIRES: checks.EVAL_EVERY_STEPS})
  retrieval_metrics.check_metric(options.metric, embeddings.K_VALUES)


def read_rerank_set(data_dir, split, candidates_file, top_k):
  """{"corpus", "queries", "qrels", "candidates" {query_id: [doc_id]} of the judged queries}
  of a BEIR set's split and its candidates file; missing files and bad lines are
  ValueErrors naming them."""
  corpus, queries, qrels = embedding_data.read_beir(data_dir, SPLITS[split])
  candidates = reranking.read_candidates(candidates_file, queries, corpus, top_k)
  judged = {q: docs for q, docs in candidates.items() if q in qrels}
  if not judged:
    raise ValueError(f"{candidates_file}: none of its queries is judged in "
                     f"{os.path.join(data_dir, SPLITS[split])}")
  return {"corpus": corpus, "queries": queries, "qrels": qrels, "candidates": judged}


def read_data(run, rerank):
  """The training rows ("train": a list of reranking.LabelledPair) and the rerank sets ("dev",
  "test"), each None where the flags do not ask for it; every file is read and checked here,
  before a model is built."""
  data = {"train": None, "dev": None, "test": None, "train_path": None}
  if run.training.do_train:
    data["train_path"] = embedding_data.train_file(rerank.data_dir, TRAIN_FILES)
    data["train"] = reranking.read_labelled_pairs(data["train_path"])
    if rerank.loss == "listwise":
      reranking.group_by_query(data["train"])  # (checks every query has a positive)
  if run.evaluation.do_eval or run.training.eval_every_steps:
    data["dev"] = read_rerank_set(rerank.data_dir, "dev", rerank.candidates_file,
                                  rerank.rerank_top_k)
  if run.evaluation.do_predict:
    data["test"] = read_rerank_set(rerank.data_dir, "test",
                                   rerank.test_candidates_file or rerank.candidates_file,
                                   rerank.rerank_top_k)
  return data


def _units(rerank):
  """What a training step counts: pairs, or queries for the listwise loss."""
  return "queries" if rerank.loss == "listwise" else "pairs"


def _num_units(rerank, pairs):
  """Training rows a step counts: pairs, or queries for the listwise loss."""
  if rerank.loss == "listwise":
    return len({pair.query for pair in pairs})
  return len(pairs)


# ----------------------------------------------------------------------------

def run(options, strategy=None):
  """Trains and/or evaluates as the flags say; returns {"eval": the dev results (a dict) or
  None, "predict": the test results or None}. options: a namespace from options(...), or the
  parsed FLAGS; strategy: a tf.distribute strategy (built from the options when None). With a
  model directory as --output_dir or --init_checkpoint, the model flags may be left out."""
  options, _ = model_dir.resolve_options(options, DEFAULTS, writes=("reranker",))
  if options.train_batch_size is None:  # (the loss's own unit: queries, or pairs)
    options.train_batch_size = TRAIN_BATCH_SIZES.get(options.loss)
  _validate(options)
  flags = settings.values_of(options)
  run_settings = settings.RunSettings(**settings.parts(flags))
  reranking = Reranking(**settings.fields(Reranking, flags))
  return _run(run_settings, reranking, strategy)


def _run(run, rerank, strategy):
  """run() on the typed settings: the config, vocab and data checked, then the output
  directory made and locked, and the work done."""
  config, tokenizer = run_checks.config_and_tokenizer(run)
  run_checks.check_segments(config, run.model, "a cross-encoder's inputs (query, passage)")
  data = read_data(run, rerank)
  steps = training.train_steps(
      run.training, _num_units(rerank, data["train"]) if data["train"] else 0, _units(rerank))
  with job.started(run, config, "reranker", strategy) as run_dir:
    return _train_eval_predict(run, rerank, run_dir, config, data, tokenizer, steps)


def _train_eval_predict(run, rerank, run_dir, config, data, tokenizer, steps):
  """_run() after the checks: train, eval and predict as the flags ask."""
  train = data["train"]
  num_train_steps, num_warmup_steps = steps
  max_seq_length = run.model.max_seq_length
  train_file = os.path.join(run_dir.record_dir, "train.tf_record")
  list_size = 1
  if train:
    _, list_size = reranking.write_records(train, tokenizer, max_seq_length, train_file,
                                           rerank.loss)
  task = reranking.RerankTask(max_seq_length, rerank.loss, list_size)
  trainer = training.build_trainer(run.training, run_dir.strategy,
                                   lambda: modeling.BertCrossEncoder(config), task,
                                   num_train_steps or 1, num_warmup_steps or 0)
  infer = reranking.score_fn(trainer.model, trainer.strategy, trainer.use_xla)
  trim = run.evaluation.trim_eval_batches and not isinstance(run_dir.strategy,
                                                              tf.distribute.TPUStrategy)

  def evaluate(split, batch_size, step):
    """(The results of a rerank set at `step`, the reranked run)."""
    dataset = data[split]
    score = lambda queries, passages: reranking.score_pairs(  # noqa: E731
        infer, reranking.encode_pairs(queries, passages, tokenizer, max_seq_length),
        batch_size, trim)
    run_ = reranking.rerank(dataset["candidates"], dataset["queries"], dataset["corpus"],
                            score)
    results = embeddings.retrieval_results(dataset["qrels"], run_)
    results.update(embeddings.retrieval_results(
        dataset["qrels"], reranking.candidate_run(dataset["candidates"]), "eval_before_"))
    results["global_step"] = int(step)
    return results, run_

  def train_():
    """--do_train: the records of train_file; with --eval_every_steps, evaluate on the dev
    candidates, the best model by eval_<--metric> in output_dir/best."""
    logging.info("***** Running training *****")
    logging.info("  Num pairs = %d (%s loss%s) from %s", len(train), rerank.loss,
                 f", lists of {list_size}" if rerank.loss == "listwise" else "",
                 train[0].path)
    logging.info("  Batch size = %d", run.training.train_batch_size)
    logging.info("  Num steps = %d", num_train_steps)
    training.fine_tune(trainer, run.training, train_file,
                       reranking.decode_fn(max_seq_length, rerank.loss, list_size),
                       num_train_steps, **job.eval_during_training(
                           run.training,
                           lambda step: evaluate("dev", run.evaluation.eval_batch_size,
                                                 step)[0],
                           "eval_" + rerank.metric, run_dir.chief, trainer.model))

  job.train_or_restore(run, trainer, train_)
  results = {"eval": None, "predict": None}
  step = int(trainer.global_step.numpy())
  for split, key, batch_size, wanted in (
      ("dev", "eval", run.evaluation.eval_batch_size, run.evaluation.do_eval),
      ("test", "predict", run.evaluation.predict_batch_size, run.evaluation.do_predict)):
    if not wanted:
      continue
    logging.info("***** Reranking %s: %d queries, %d pairs *****", split,
                 len(data[split]["candidates"]),
                 sum(len(d) for d in data[split]["candidates"].values()))
    results[key], run_ = evaluate(split, batch_size, step)
    embeddings.write_results(run.output.output_dir, split, results[key], run_,
                             reranking.RUN_TAG, run_dir.chief)
  return results


main = errors.script_main(run)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
