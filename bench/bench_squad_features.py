"""run_squad's data preparation, the original against ours, side by side in one process.

Times read_squad_examples + convert_examples_to_features (the doc_stride windows, the
answer spans, token_is_max_context) of the original run_squad (PyPI bert-tensorflow, with
its FullTokenizer) and of ours (tasks/squad/data.py with tokenization.py), on the same SQuAD
file and settings, in interleaved rounds (best of --repeats each); checks that both give the
same features (every field of every window). Records are collected in memory, not written.
Training mode reads a copy of the file that keeps each question's first answer (dev files
have several; training wants exactly one).

  python bench/bench_squad_features.py                              # ../shared data
  python bench/bench_squad_features.py --file=dev-v2.0.json --v2 --train

Prints a table; the last line is a JSON object of the figures.
"""

import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from shared_data import shared_data  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import oracle  # noqa: E402

ORIGINAL = oracle.original("run_squad")  # defines the original's flags
FLAGS = flags.FLAGS
flags.DEFINE_string("file", shared_data("squad", "squad2_part_a.json"), "SQuAD JSON.")
flags.DEFINE_string("vocab", shared_data("vocab", "bert-base-uncased-vocab.txt"),
                    "WordPiece vocab.")
flags.DEFINE_bool("v2", True, "SQuAD 2.0 (is_impossible).")
flags.DEFINE_bool("train", True, "Training mode (answer spans) rather than prediction.")
flags.DEFINE_integer("repeats", 2, "Interleaved rounds (best of each).")


def _fields(feature):
  return (feature.unique_id, feature.example_index, feature.doc_span_index, feature.tokens,
          feature.token_to_orig_map, feature.token_is_max_context, feature.input_ids,
          feature.input_mask, feature.segment_ids, feature.start_position,
          feature.end_position, bool(feature.is_impossible) if FLAGS.train else None)


def main(_):
  from bert_keras.tasks.squad import data as squad_data
  from bert_keras import tokenization
  logging.set_verbosity(logging.WARNING)  # both log their first 20 examples at INFO
  FLAGS.version_2_with_negative = FLAGS.v2
  path = FLAGS.file
  if FLAGS.train:  # keep the first answer of each question
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
    for article in data["data"]:
      for paragraph in article["paragraphs"]:
        for qa in paragraph["qas"]:
          qa["answers"] = qa["answers"][:1]
    path = os.path.join(tempfile.mkdtemp(), "train.json")
    with open(path, "w", encoding="utf-8") as f:
      json.dump(data, f)
  settings = (FLAGS.max_seq_length, FLAGS.doc_stride, FLAGS.max_query_length)

  def original():
    tokenizer = ORIGINAL.tokenization.FullTokenizer(FLAGS.vocab, do_lower_case=True)
    examples = ORIGINAL.read_squad_examples(path, is_training=FLAGS.train)
    features = []
    ORIGINAL.convert_examples_to_features(examples, tokenizer, *settings, FLAGS.train,
                                          features.append)
    return examples, features

  def ours():
    tokenizer = tokenization.FullTokenizer(FLAGS.vocab, do_lower_case=True)
    examples = squad_data.read_squad_examples(path, FLAGS.train, FLAGS.v2)
    features = []
    squad_data.convert_examples_to_features(examples, tokenizer, *settings, FLAGS.train,
                                            features.append)
    return examples, features

  best, outputs = {"original": float("inf"), "ours": float("inf")}, {}
  for _ in range(FLAGS.repeats):
    for name, fn in (("original", original), ("ours", ours)):
      start = time.perf_counter()
      outputs[name] = fn()
      best[name] = min(best[name], time.perf_counter() - start)
  (examples, theirs), (_, mine) = outputs["original"], outputs["ours"]
  same = len(theirs) == len(mine) and all(_fields(a) == _fields(b)
                                          for a, b in zip(theirs, mine))
  megabytes = os.path.getsize(FLAGS.file) / 1e6
  print(f"\n{os.path.basename(FLAGS.file)} ({megabytes:.2f} MB), "
        f"{'train' if FLAGS.train else 'predict'} mode, v2={FLAGS.v2}, "
        f"max_seq_length/doc_stride/max_query_length = {settings}: "
        f"{len(examples)} questions, {len(mine)} windows; identical features: {same}\n")
  print("| run_squad data preparation | seconds | questions/s | x original |")
  print("|---|---:|---:|---:|")
  for name in ("original", "ours"):
    print(f"| {name} | {best[name]:.2f} | {len(examples) / best[name]:,.0f} | "
          f"{best['original'] / best[name]:.1f} |")
  print(json.dumps({"file": os.path.basename(FLAGS.file), "questions": len(examples),
                    "windows": len(mine), "identical": same,
                    "seconds": {k: round(v, 3) for k, v in best.items()},
                    "speedup": round(best["original"] / best["ours"], 2)}))
  if not same:
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
