"""Raw text -> BERT inputs inside tf.data, side by side in one run.

Each peer turns the same lines into input_ids, input_mask and segment_ids [32, 128] (single
texts, batch 32, max_seq_length 128) in a tf.data pipeline (from_tensor_slices -> batch ->
map): ours (preprocessing.BertPreprocessor), tensorflow-text's FastBertTokenizer with the
same packing in TF ops (tf_text.combine_segments, pad_model_inputs), and, if installed,
KerasHub's BertTokenizer + MultiSegmentPacker. The peers are built first, then timed in
--repeats interleaved rounds (a slow phase of the shared machine falls on every peer alike);
each keeps its best round. Parity = share of lines whose three rows equal the original's
(run_classifier.convert_single_example with its FullTokenizer, bert-tensorflow).

  python bench/bench_preprocessing.py                       # ../shared books
  python bench/bench_preprocessing.py --input_file=a.txt --vocab_file=vocab.txt --max_lines=5000

Prints a table, then a JSON object of the figures as its last line.
"""

import json
import os
import sys
import time

from absl import app
from absl import flags

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from shared_data import define_corpus_flags, read_lines  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

FLAGS = flags.FLAGS
define_corpus_flags()
flags.DEFINE_integer("batch_size", 32, "Lines per batch.")
flags.DEFINE_integer("max_seq_length", 128, "Length of the packed rows.")
flags.DEFINE_integer("repeats", 2, "Interleaved timed rounds (each peer keeps its best).")
flags.DEFINE_integer("max_lines", 0, "Use only the first N lines (0: all).")

FEATURES = ("input_ids", "input_mask", "segment_ids")


def _peers(vocab_file, lower, max_seq_length):
  """[(name, batch of strings [B] -> dict of the three int32 [B, max_seq_length])]."""
  import tensorflow as tf
  from bert_keras import preprocessing
  from bert_keras import tokenization
  peers = [("ours: preprocessing.BertPreprocessor",
            preprocessing.BertPreprocessor(vocab_file, lower, max_seq_length))]
  vocab = tokenization.load_vocab(vocab_file)
  cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
  try:
    import tensorflow_text as tf_text
  except ImportError:
    tf_text = None
  if tf_text is not None:
    with open(vocab_file, encoding="utf-8") as f:
      vocab_list = [line.rstrip("\n") for line in f]
    fast = tf_text.FastBertTokenizer(vocab=vocab_list, lower_case_nfd_strip_accents=lower,
                                     token_out_type=tf.int32, support_detokenization=False)

    def fast_bert(texts):
      ids = fast.tokenize(texts)[:, :max_seq_length - 2]
      ids, segments = tf_text.combine_segments([ids], cls_id, sep_id)
      input_ids, input_mask = tf_text.pad_model_inputs(ids, max_seq_length)
      segment_ids, _ = tf_text.pad_model_inputs(segments, max_seq_length)
      return dict(input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids)
    peers.append(("tf-text FastBertTokenizer + combine_segments/pad_model_inputs", fast_bert))
  try:
    import keras_hub
  except ImportError:
    keras_hub = None
  if keras_hub is not None:
    hub_tokenizer = keras_hub.tokenizers.BertTokenizer(vocabulary=vocab_file, lowercase=lower)
    packer = keras_hub.layers.MultiSegmentPacker(max_seq_length, cls_id, sep_id)

    def hub(texts):
      token_ids, segment_ids = packer(hub_tokenizer(texts))
      return dict(input_ids=tf.cast(token_ids, tf.int32),
                  input_mask=tf.cast(tf.not_equal(token_ids, 0), tf.int32),
                  segment_ids=tf.cast(segment_ids, tf.int32))
    peers.append(("KerasHub BertTokenizer + MultiSegmentPacker", hub))
  return peers


def _expected(lines, vocab_file, lower, max_seq_length):
  """The original convert_single_example's three rows of every line: numpy [lines, 3, L]."""
  import numpy as np
  import oracle
  run_classifier = oracle.original("run_classifier")
  tokenizer = oracle.original("tokenization").FullTokenizer(vocab_file, do_lower_case=lower)
  rows = np.zeros([len(lines), 3, max_seq_length], np.int32)
  for i, line in enumerate(lines):
    example = run_classifier.InputExample(guid=str(i), text_a=line, label="0")
    f = run_classifier.convert_single_example(10, example, ["0"], max_seq_length, tokenizer)
    rows[i] = [f.input_ids, f.input_mask, f.segment_ids]
  return rows


def main(_):
  from bert_keras.utils import quiet_tensorflow  # noqa: F401
  import numpy as np
  import tensorflow as tf
  # (read every flag now: importing the original run_classifier redefines vocab_file,
  # do_lower_case and max_seq_length with its own defaults)
  vocab_file, lower, length = FLAGS.vocab_file, FLAGS.do_lower_case, FLAGS.max_seq_length
  batch_size, repeats = FLAGS.batch_size, FLAGS.repeats
  files, lines, megabytes = read_lines(FLAGS.input_file, FLAGS.max_lines)
  print(f"corpus: {len(files)} files, {len(lines)} lines, {megabytes:.2f} MB; vocab "
        f"{vocab_file}; do_lower_case={lower}; batch {batch_size}, "
        f"max_seq_length {length}; tf.data map, one call at a time")
  import oracle
  oracle.original("run_classifier")  # (imported before the clock starts)
  start = time.perf_counter()
  expected = _expected(lines, vocab_file, lower, length)
  original_seconds = time.perf_counter() - start
  peers = _peers(vocab_file, lower, length)

  def run(fn):
    dataset = tf.data.Dataset.from_tensor_slices(lines).batch(batch_size).map(fn)
    start = time.perf_counter()
    outputs = [{k: v.numpy() for k, v in batch.items()} for batch in dataset]
    seconds = time.perf_counter() - start
    got = np.stack([np.concatenate([o[k] for o in outputs]) for k in FEATURES], axis=1)
    return seconds, float(np.mean(np.all(got == expected, axis=(1, 2))))

  for _, fn in peers:  # warm-up: traces each pipeline's function once
    list(tf.data.Dataset.from_tensor_slices(lines[:64]).batch(batch_size).map(fn))
  best, parity = {}, {}
  for _ in range(repeats):
    for name, fn in peers:
      seconds, parity[name] = run(fn)
      best[name] = min(best.get(name, float("inf")), seconds)

  results = [("original FullTokenizer + convert_single_example (Python, per line)",
              original_seconds, 1.0)] + [(name, best[name], parity[name]) for name, _ in peers]
  _report(results, megabytes, len(lines), dict(batch_size=batch_size, max_seq_length=length))


def _report(results, megabytes, lines, settings):
  """Prints the table of (name, seconds, parity) and the JSON line."""
  print("\n| peer | MB/s | lines/s | parity with original |")
  print("|---|---:|---:|---:|")
  figures = dict(corpus_mb=round(megabytes, 3), lines=lines, **settings, results={})
  for name, seconds, par in results:
    print(f"| {name} | {megabytes / seconds:.2f} | {lines / seconds:,.0f} | "
          f"{100 * par:.2f}% |")
    figures["results"][name] = {"mb_per_s": round(megabytes / seconds, 3),
                                "lines_per_s": round(lines / seconds),
                                "parity": round(par, 5)}
  print(json.dumps(figures))


if __name__ == "__main__":
  app.run(main)
