r"""BERT fine-tuning as a bi-encoder: sentence embeddings trained with in-batch negatives
(sentence-transformers' MultipleNegativesRankingLoss) and evaluated by retrieval, the way
run_classifier.py fine-tunes a classifier.

  python run_embeddings.py --do_train=true --do_eval=true \
    --data_dir=$DATA_DIR --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=128 \
    --train_batch_size=64 --learning_rate=2e-5 --num_train_epochs=1.0 \
    --pooling=mean --output_dir=/tmp/embeddings_output/

--data_dir holds train.tsv (a header naming the columns `anchor`, `positive` and optional
`negative...` ones) or train.jsonl (objects with those keys) for --do_train, and a BEIR retrieval
set for --do_eval / --do_predict: corpus.jsonl (`_id`, `title`, `text`; a document is embedded
as (title + " " + text).strip(), as BEIR's SentenceBERT does), queries.jsonl (`_id`, `text`),
qrels/dev.tsv and qrels/test.tsv (`query-id corpus-id score`). Only the queries the qrels judge
are searched (as BEIR's loader keeps them). Beside or instead of it, sts_dev.tsv / sts_test.tsv
(a header naming sentence1, sentence2, score): Pearson and Spearman of the pairs' cosine
similarities (eval_pearson, eval_spearman).

Each anchor must pick its positive among all positives and negatives of its batch (scale x
cosine, cross-entropy; tasks/retrieval/embeddings.py, retrieval.py); a text that occurs twice
in a batch is not counted as a negative of itself (duplicate masking by text). --symmetric adds the
positive -> anchor direction, --matryoshka_dims trains truncated embeddings too,
--mini_batch_size > 0 computes the same loss with the encoder on that many texts at a time
(the gradient cache: the batch's memory is that of a mini-batch).

Outputs in --output_dir: checkpoints (model.ckpt-N, resumable), the model files (bert_config.json,
vocab.txt, tokenizer_config.json, task.json with "task": "embeddings", "pooling",
"normalize"; run_options.json: runtime/model_dir.py), eval_results.txt (eval_NDCG@10,
eval_MAP@100, eval_Recall@k, eval_MRR@10, eval_Accuracy@k, eval_P@k at k in 1, 3, 5, 10, 100;
global_step) and dev_run.trec (the top 100 of each query, TREC run format); --do_predict
writes test_results.txt and test_run.trec. --eval_every_steps keeps the best model by --metric
in output_dir/best.
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
from bert_keras.tasks.retrieval import metrics as retrieval_metrics
from bert_keras.utils import errors
from bert_keras.utils import memory

TRAIN_FILES = ("train.tsv", "train.jsonl")
SPLITS = {"dev": os.path.join("qrels", "dev.tsv"), "test": os.path.join("qrels", "test.tsv")}
# STS pairs with a gold score (sentence1, sentence2, score), evaluated beside or instead of
# retrieval.
STS_FILES = {"dev": "sts_dev.tsv", "test": "sts_test.tsv"}
STS_MEASURES = ("pearson", "spearman")
POOLINGS = modeling.POOLINGS


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return common_flags.make_options(DEFAULTS, overrides)


def define_flags(fv=flags.FLAGS):
  """run_classifier's model and training flags plus the bi-encoder's (pooling, loss, cache)."""
  flags.DEFINE_string("data_dir", None,
                      "The input data dir: train.tsv or train.jsonl, and a BEIR retrieval set "
                      "(corpus.jsonl, queries.jsonl, qrels/dev.tsv, qrels/test.tsv) and/or "
                      "STS pairs (sts_dev.tsv, sts_test.tsv).",
                      flag_values=fv)
  common_flags.define_model_flags(max_seq_length=128, fv=fv)
  flags.DEFINE_bool("do_train", False, "Whether to run training.", flag_values=fv)
  flags.DEFINE_bool("do_eval", False, "Whether to evaluate on the dev set (qrels/dev.tsv, "
                    "sts_dev.tsv).", flag_values=fv)
  flags.DEFINE_bool("do_predict", False, "Whether to evaluate on the test set (qrels/test.tsv, "
                    "sts_test.tsv).", flag_values=fv)
  flags.DEFINE_integer("train_batch_size", 32,
                       "Total batch size for training (rows: the in-batch negatives).",
                       flag_values=fv)
  flags.DEFINE_integer("eval_batch_size", 64, "Texts embedded per step in eval.", flag_values=fv)
  flags.DEFINE_integer("predict_batch_size", 64, "Texts embedded per step in predict.",
                       flag_values=fv)
  flags.DEFINE_enum("pooling", "mean", POOLINGS,
                    "One vector per text: the mean of the real tokens, [CLS], or the maximum."
                    + common_flags.MODEL_DIR_HELP % "task.json", flag_values=fv)
  flags.DEFINE_bool("normalize", False, "L2-normalise the embeddings (the model's outputs)."
                    + common_flags.MODEL_DIR_HELP % "task.json", flag_values=fv)
  flags.DEFINE_float("scale", 20.0, "The loss's logits: scale x cosine similarity.", flag_values=fv)
  flags.DEFINE_bool("symmetric", False,
                    "Also the positive -> anchor direction (each positive picks its anchor).",
                    flag_values=fv)
  flags.DEFINE_string("matryoshka_dims", None,
                      "Comma-separated embedding sizes (e.g. 768,256,64): the loss is the sum "
                      "over these truncations (MatryoshkaLoss); list the full size to keep it.",
                      flag_values=fv)
  flags.DEFINE_integer("mini_batch_size", 0,
                       "The gradient cache: texts embedded at a time in training (the loss "
                       "still over the whole batch); 0: the whole batch at once.", flag_values=fv)
  flags.DEFINE_string("metric", "NDCG@10",
                      "The measure that chooses output_dir/best (a name of eval_results.txt "
                      "without eval_, e.g. MRR@10, Recall@100).", flag_values=fv)
  common_flags.define_shared_flags(common_flags.FINE_TUNING, ("data_dir", "output_dir"), fv)
  flags.adopt_module_key_flags(common_flags, flag_values=fv)  # (--help lists them)


# The options of run() (options(), model_dir.resolve_options): the flags' names and defaults,
# read from define_flags without parsing or touching absl's FLAGS.
DEFAULTS = common_flags.flag_defaults(define_flags)


# ----------------------------------------------------------------------------
# Checks and data.

def parse_matryoshka_dims(text, hidden_size=None):
  """--matryoshka_dims "768,256" -> [768, 256] (None for none); each in 1..hidden_size."""
  if not text:
    return None
  try:
    dims = [int(part) for part in str(text).split(",") if part.strip()]
  except ValueError:
    raise ValueError(f"--matryoshka_dims={text}: not a comma-separated list of integers") \
        from None
  bad = [d for d in dims if d < 1 or (hidden_size is not None and d > hidden_size)]
  if not dims or bad:
    raise ValueError(f"--matryoshka_dims={text}: sizes must be in 1..{hidden_size} (the "
                     "model's hidden_size)")
  return dims


@dataclasses.dataclass(frozen=True)
class Embedding(settings.FromFlags):
  """run_embeddings' own flags, typed (settings.FromFlags): the data, the loss (--scale,
  --symmetric, --matryoshka_dims, --mini_batch_size), the model's pooling and the metric."""
  data_dir: str
  pooling: str
  normalize: bool
  scale: float
  symmetric: bool
  matryoshka_dims: str | None
  mini_batch_size: int
  metric: str


def _validate(options):
  checks.check_start(options)
  checks.check(options, {
      checks.EXISTING_FILES: ("bert_config_file", "vocab_file"),
      checks.POSITIVE: ("train_batch_size", "eval_batch_size", "predict_batch_size",
                        "iterations_per_loop", "gradient_accumulation_steps"),
      checks.NON_NEGATIVE: ("mini_batch_size",),
      checks.AT_LEAST: {"max_seq_length": (3, "[CLS] a piece [SEP]")},
      checks.ABOVE_ZERO: ("scale",),
      checks.CHOICES: {"pooling": POOLINGS},
      checks.REQUIRES: checks.EVAL_EVERY_STEPS})
  retrieval_metrics.check_metric(options.metric, embeddings.K_VALUES, also=STS_MEASURES)


def read_eval_set(data_dir, split):
  """What a split ("dev" or "test") is evaluated on: the BEIR retrieval set when its qrels
  file is there (read_retrieval_set), and/or the STS pairs of sts_<split>.tsv ("sts":
  (texts_a, texts_b, scores)); neither there is a ValueError naming both."""
  qrels, sts = os.path.join(data_dir, SPLITS[split]), os.path.join(data_dir, STS_FILES[split])
  has_qrels, has_sts = tf.io.gfile.exists(qrels), tf.io.gfile.exists(sts)
  if not has_qrels and not has_sts:
    raise ValueError(f"--data_dir: no {qrels} (with corpus.jsonl and queries.jsonl) and no "
                     f"{sts} to evaluate {split} on")
  found = read_retrieval_set(data_dir, split) if has_qrels else {}
  if has_sts:
    found["sts"] = embedding_data.read_sts(sts)
  return found


def read_retrieval_set(data_dir, split):
  """{"corpus": {doc_id: text}, "queries": {query_id: text} of the judged queries, "qrels"} of
  a BEIR set's split ("dev" or "test"); missing files and bad lines are ValueErrors."""
  corpus, queries, qrels = embedding_data.read_beir(data_dir, SPLITS[split])
  return {"corpus": corpus, "queries": {q: queries[q] for q in queries if q in qrels},
          "qrels": qrels}


def read_data(run, data_dir, tokenizer):
  """The training rows ("train": {"pairs", "columns", "text_ids", "num_negatives"}) and the
  retrieval sets ("dev", "test"), each None where the flags do not ask for it; every file is
  read and checked here, before a model is built."""
  data = {"train": None, "dev": None, "test": None}
  if run.training.do_train:
    path = embedding_data.train_file(data_dir, TRAIN_FILES)
    pairs = embedding_data.read_pairs(path)
    text_ids = embedding_data.TextIds()
    ids = {"anchor": text_ids.ids([p.anchor for p in pairs]),
           "positive": text_ids.ids([p.positive for p in pairs])}
    negatives = [n for p in pairs for n in p.negatives]
    ids["negative"] = text_ids.ids(negatives) if negatives else None
    encoded = embedding_data.encode_texts(text_ids.texts, tokenizer, run.model.max_seq_length)
    columns = {name: None if value is None else {k: v[value] for k, v in encoded.items()}
               for name, value in ids.items()}
    data["train"] = dict(pairs=pairs, columns=columns, text_ids=ids, path=path,
                         num_negatives=len(pairs[0].negatives))
  if run.evaluation.do_eval:
    data["dev"] = read_eval_set(data_dir, "dev")
  if run.evaluation.do_predict:
    data["test"] = read_eval_set(data_dir, "test")
  return data


def check_eval_memory(data_dir, max_seq_length, config, data):
  """A ValueError, before any training, when a split's texts encoded at once (input_ids and
  input_mask int32 [N, --max_seq_length]) and embedded (float32 [N, hidden_size]) need more
  than the memory available now: it names the corpus and the flags that size it."""
  available = memory.available_bytes()
  per_text = 2 * 4 * max_seq_length + 4 * config.hidden_size
  for split, flag in (("dev", "--do_eval"), ("test", "--do_predict")):
    found = data[split]
    if found is None:
      continue
    count = len(found.get("corpus", ())) + len(found.get("queries", ())) + 2 * len(
        found.get("sts", [()])[0])
    need = count * per_text
    if need > available:
      raise ValueError(
          f"{flag}: the {split} set of --data_dir {data_dir} ({count:,} texts) "
          f"needs {need / 1e9:.3g} GB to encode and embed at --max_seq_length="
          f"{max_seq_length}, more than the {available / 1e9:.3g} GB of memory "
          "available")


# ----------------------------------------------------------------------------

def run(options, strategy=None):
  """Trains and/or evaluates as the flags say; returns {"eval": the dev results (a dict) or
  None, "predict": the test results or None}. options: a namespace from options(...), or the
  parsed FLAGS; strategy: a tf.distribute strategy (built from the options when None). With a
  model directory as --output_dir or --init_checkpoint, the model flags and --pooling /
  --normalize may be left out."""
  options, _ = model_dir.resolve_options(options, DEFAULTS, fill=("pooling", "normalize"),
                                         writes=("embeddings",))
  _validate(options)
  flags = settings.values_of(options)
  run_settings = settings.RunSettings(**settings.parts(flags))
  embedding = Embedding(**settings.fields(Embedding, flags))
  return _run(run_settings, embedding, strategy)


def _run(run, embedding, strategy):
  """run() on the typed settings: the config, vocab and data checked, then the output
  directory made and locked, and the work done."""
  config, tokenizer = run_checks.config_and_tokenizer(run)
  dims = parse_matryoshka_dims(embedding.matryoshka_dims, config.hidden_size)
  data = read_data(run, embedding.data_dir, tokenizer)
  check_eval_memory(embedding.data_dir, run.model.max_seq_length, config, data)
  embeddings.check_has_negatives(data["train"], run.training.train_batch_size
                                 // run.training.gradient_accumulation_steps)
  steps = training.train_steps(run.training,
                               len(data["train"]["pairs"]) if data["train"] else 0)
  with job.started(run, config, "embeddings", strategy, pooling=embedding.pooling,
                           normalize=bool(embedding.normalize)) as run_dir:
    return _train_eval_predict(run, embedding, run_dir, config, data, tokenizer, dims, steps)


def _train_eval_predict(run, embedding, run_dir, config, data, tokenizer, dims, steps):
  """_run() after the checks: train, eval and predict as the flags ask."""
  train = data["train"]
  num_train_steps, num_warmup_steps = steps
  max_seq_length = run.model.max_seq_length
  task = embeddings.EmbeddingTask(max_seq_length, train["num_negatives"] if train else 0,
                                  scale=embedding.scale, symmetric=embedding.symmetric,
                                  matryoshka_dims=dims)
  trainer = training.build_trainer(
      run.training, run_dir.strategy, lambda: modeling.BertSentenceEncoder(
          config, pooling=embedding.pooling, normalize=embedding.normalize),
      task, num_train_steps or 1, num_warmup_steps or 0)
  # Each column cut to its own longest text, the encoder called per column, where shapes may
  # change from step to step (not under XLA or on TPUs, as for BertModel.skip_padding).
  task.trim = not trainer.use_xla and not isinstance(trainer.strategy, tf.distribute.TPUStrategy)
  if task.trim or embedding.mini_batch_size:
    trainer = embeddings.ColumnTrainer.of(trainer, embedding.mini_batch_size)
  infer = embeddings.embedding_fn(trainer.model, trainer.strategy, trainer.use_xla)
  trim = run.evaluation.trim_eval_batches and not isinstance(run_dir.strategy,
                                                              tf.distribute.TPUStrategy)

  def evaluate(split, batch_size, step):
    """(The results of a split at `step`: retrieval's and/or STS's, the retrieval run or
    None)."""
    dataset, results, run_ = data[split], {}, None
    embed = lambda texts: embeddings.embed(  # noqa: E731
        infer, embedding_data.encode_texts(texts, tokenizer, max_seq_length), batch_size, trim)
    if "qrels" in dataset:
      doc_ids, query_ids = list(dataset["corpus"]), list(dataset["queries"])
      docs = embed([dataset["corpus"][d] for d in doc_ids])
      queries = embed([dataset["queries"][q] for q in query_ids])
      run_ = embeddings.retrieval_run(query_ids, queries, doc_ids, docs)
      results.update(embeddings.retrieval_results(dataset["qrels"], run_))
    if "sts" in dataset:
      texts_a, texts_b, gold = dataset["sts"]
      results.update(embeddings.sts_results(embed(texts_a), embed(texts_b), gold))
    results["global_step"] = int(step)
    return results, run_

  def train_():
    """--do_train: the training rows through train.tf_record; with --eval_every_steps,
    evaluate on the dev set, the best model by eval_<--metric> in output_dir/best."""
    train_file = os.path.join(run_dir.record_dir, "train.tf_record")
    embeddings.write_records(train["columns"], train["text_ids"], train_file)
    logging.info("***** Running training *****")
    logging.info("  Num rows = %d (%d negatives each) from %s", len(train["pairs"]),
                 train["num_negatives"], train["path"])
    logging.info("  Batch size = %d%s", run.training.train_batch_size,
                 f" (mini-batches of {embedding.mini_batch_size})"
                 if embedding.mini_batch_size else "")
    logging.info("  Num steps = %d", num_train_steps)
    training.fine_tune(trainer, run.training, train_file,
                       embeddings.decode_fn(max_seq_length, train["num_negatives"]),
                       num_train_steps, **job.eval_during_training(
                           run.training,
                           lambda step: evaluate("dev", run.evaluation.eval_batch_size,
                                                 step)[0],
                           "eval_" + embedding.metric, run_dir.chief, trainer.model))

  job.train_or_restore(run, trainer, train_)
  results = {"eval": None, "predict": None}
  step = int(trainer.global_step.numpy())
  for split, key, batch_size in (("dev", "eval", run.evaluation.eval_batch_size),
                                 ("test", "predict", run.evaluation.predict_batch_size)):
    if data[split] is None:
      continue
    logging.info("***** Running evaluation on %s: %d queries, %d documents, %d STS pairs "
                 "*****", split, len(data[split].get("queries", ())),
                 len(data[split].get("corpus", ())), len(data[split].get("sts", [()])[0]))
    results[key], run_ = evaluate(split, batch_size, step)
    embeddings.write_results(run.output.output_dir, split, results[key], run_, "bert_keras",
                             run_dir.chief)
  return results


main = errors.script_main(run)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
