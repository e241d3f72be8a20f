"""Raw text to class probabilities, served: latency at batch 1 and throughput at batch 32.

Three ways to turn MRPC sentence pairs (text_a, text_b) into probabilities with a BERT
classifier of the same size and the same bert-base-uncased vocab (random weights: speed only):
  * ours, SavedModel: serving.ServingModule (preprocessing.BertPreprocessor + BertClassifier)
    saved with tf.saved_model.save and loaded with tf.saved_model.load, called through its
    serving_default signature (TensorFlow's own ops, export_saved_model.py's default; also
    with --tensorflow_text_ops, and without the padding trim, to show what each brings);
  * KerasHub (keras-hub 0.32): BertTextClassifier(BertBackbone(...), activation="softmax")
    with its BertTextClassifierPreprocessor, a tf.function taking the two string tensors,
    saved and loaded the same way;
  * ours, Python: tokenization.FullTokenizer + preprocessing.pack_tokens in Python, then the
    Keras model in a tf.function;
  * ours, TFLite (export_saved_model.py --format=tflite): float32 and dynamic-range int8, in
    TensorFlow's Python interpreter, after the same Python tokenizer (TFLite takes token ids:
    the tokenizer's string ops do not convert), and ONNX (--format=onnx, onnxruntime) when
    the [onnx] extra is installed.
Rows marked "token ids in" time the model alone on ids packed beforehand.
Every peer is built and warmed up first, then timed in --repeats interleaved rounds (a slow
phase of the shared machine falls on every peer alike); each keeps its best round.

  python bench/bench_serving.py                                # L4/H256, max_seq_length 128
  python bench/bench_serving.py --num_layers=12 --hidden_size=768   # BERT-Base size

Prints a table, then a JSON object of the figures as its last line.
"""

import csv
import json
import os
import sys
import statistics
import tempfile
import time

from absl import app
from absl import flags

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from shared_data import shared_data  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("vocab_file", shared_data("vocab", "bert-base-uncased-vocab.txt"),
                    "WordPiece vocab (uncased).")
flags.DEFINE_string("input_file", shared_data("glue", "MRPC", "dev.tsv"),
                    "GLUE MRPC TSV: the sentence pairs (columns 4 and 5).")
flags.DEFINE_integer("num_layers", 4, "Encoder layers.")
flags.DEFINE_integer("hidden_size", 256, "Hidden size (heads: hidden_size / 64; "
                     "intermediate: 4 x hidden_size).")
flags.DEFINE_integer("max_seq_length", 128, "Length of the packed rows.")
flags.DEFINE_integer("batch_size", 32, "Batch of the throughput test.")
flags.DEFINE_integer("latency_requests", 40, "Single-pair requests per round (batch 1).")
flags.DEFINE_integer("throughput_batches", 8, "Batches per round (throughput).")
flags.DEFINE_integer("repeats", 3, "Interleaved timed rounds (each peer keeps its best).")


def _read_pairs(path):
  with open(path, encoding="utf-8") as f:
    rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
  return [(row[3], row[4]) for row in rows]


def _ours(config, vocab_file, max_seq_length, directory):
  """[(name, fn(text_a list, text_b list) -> probabilities numpy [B, 2])] of our two
  SavedModels and our Python path, and the Keras model."""
  import numpy as np
  import tensorflow as tf
  from bert_keras import modeling
  from bert_keras import preprocessing
  from bert_keras import serving
  from bert_keras import tokenization
  model = modeling.BertClassifier(config, 2)
  core = preprocessing.BertPreprocessor(vocab_file, True, max_seq_length, core_ops_only=True)
  fast = preprocessing.BertPreprocessor(vocab_file, True, max_seq_length)
  peers = []
  for trim, preprocessor, name in (
      (True, core, "ours: SavedModel (export_saved_model.py)"),
      (True, fast, "ours: SavedModel, --tensorflow_text_ops"),
      (False, core, "ours: SavedModel, padding not trimmed")):
    path = os.path.join(directory, f"ours_{trim}_{preprocessor is core}")
    serving.save_atomic(serving.ServingModule(model, preprocessor, "classifier",
                                              trim_padding=trim), path)
    peers.append((name, _signature(tf.saved_model.load(path), "probabilities")))
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  spec = tf.TensorSpec([None, max_seq_length], tf.int32)

  @tf.function(input_signature=[{k: spec for k in ("input_ids", "input_mask", "segment_ids")}])
  def forward(features):
    return tf.nn.softmax(serving._logits(model(features, training=False)), axis=-1)

  def python_path(texts_a, texts_b):
    rows = [preprocessing.pack_tokens(tokenizer.tokenize(a), tokenizer.tokenize(b) or None,
                                      max_seq_length, tokenizer)[1:]
            for a, b in zip(texts_a, texts_b)]
    arrays = np.array(rows, np.int32)  # [B, 3, S]
    return forward({k: arrays[:, i] for i, k in
                    enumerate(("input_ids", "input_mask", "segment_ids"))}).numpy()
  peers.append(("ours: Python FullTokenizer + Keras model", python_path))

  def pack(texts_a, texts_b):
    rows = [preprocessing.pack_tokens(tokenizer.tokenize(a), tokenizer.tokenize(b) or None,
                                      max_seq_length, tokenizer)[1:]
            for a, b in zip(texts_a, texts_b)]
    arrays = np.array(rows, np.int32)
    return {k: arrays[:, i] for i, k in enumerate(("input_ids", "input_mask", "segment_ids"))}
  id_peers = [("ours: Keras model (token ids in)", lambda f: forward(f).numpy())]
  module = serving.ServingModule(model, core, "classifier")
  for quantize, name in (("none", "TFLite float32"), ("dynamic", "TFLite int8 (dynamic)")):
    runner = _tflite_runner(serving.tflite_model(module, max_seq_length, quantize))
    id_peers.append((f"ours: {name} (token ids in)", runner))
    peers.append((f"ours: Python FullTokenizer + {name}",
                  lambda a, b, run=runner: run(pack(a, b))))
  try:
    import onnxruntime
    session = onnxruntime.InferenceSession(serving.onnx_model(module, max_seq_length))
    names = [o.name for o in session.get_outputs()]

    def onnx_run(features):
      return dict(zip(names, session.run(None, features)))["probabilities"]
    id_peers.append(("ours: ONNX, onnxruntime (token ids in)", onnx_run))
    peers.append(("ours: Python FullTokenizer + ONNX, onnxruntime",
                  lambda a, b: onnx_run(pack(a, b))))
  except (ImportError, ValueError) as e:
    print(f"ONNX left out: {e}")
  return peers, id_peers, pack


def _tflite_runner(data):
  """fn(features dict of int32 [B, S]) -> probabilities, TensorFlow's TFLite interpreter."""
  import warnings
  import tensorflow as tf
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the interpreter's deprecation notice
    interpreter = tf.lite.Interpreter(model_content=data, num_threads=os.cpu_count())
  runner = interpreter.get_signature_runner("serving_default")

  def run(features):
    return runner(**features)["probabilities"]
  run.size_bytes = len(data)
  return run


def _signature(loaded, output):
  fn = loaded.signatures["serving_default"]

  def call(texts_a, texts_b):
    import tensorflow as tf
    return fn(text_a=tf.constant(texts_a), text_b=tf.constant(texts_b))[output].numpy()
  call.loaded = loaded  # (keeps the loaded object alive)
  return call


def _keras_hub(config, vocab_file, max_seq_length, directory):
  """(name, fn) of KerasHub's BertTextClassifier saved as a string-taking SavedModel."""
  import keras_hub
  import tensorflow as tf
  backbone = keras_hub.models.BertBackbone(
      vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
      num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
      intermediate_dim=config.intermediate_size,
      max_sequence_length=config.max_position_embeddings)
  tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocab_file, lowercase=True)
  preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
      tokenizer, sequence_length=max_seq_length)
  classifier = keras_hub.models.BertTextClassifier(backbone, 2, preprocessor=preprocessor,
                                                   activation="softmax")
  module = tf.Module()
  module.classifier = classifier
  spec = tf.TensorSpec([None], tf.string)

  @tf.function(input_signature=[spec, spec])
  def serve(text_a, text_b):
    return {"probabilities": classifier(preprocessor(x=(text_a, text_b)), training=False)}
  path = os.path.join(directory, "keras_hub")
  tf.saved_model.save(module, path, signatures={"serving_default": serve})
  return ("KerasHub: BertTextClassifier + its preprocessor, SavedModel",
          _signature(tf.saved_model.load(path), "probabilities"))


def main(_):
  from bert_keras.utils import quiet_tensorflow  # noqa: F401
  import numpy as np
  from bert_keras import modeling
  from bert_keras import tokenization
  pairs = _read_pairs(FLAGS.input_file)
  hidden = FLAGS.hidden_size
  vocab_size = len(tokenization.load_vocab(FLAGS.vocab_file))
  config = modeling.BertConfig(vocab_size=vocab_size, hidden_size=hidden,
                               num_hidden_layers=FLAGS.num_layers,
                               num_attention_heads=max(1, hidden // 64),
                               intermediate_size=4 * hidden, max_position_embeddings=512)
  length, batch_size = FLAGS.max_seq_length, FLAGS.batch_size
  print(f"model L{FLAGS.num_layers}/H{hidden} (random weights), vocab {FLAGS.vocab_file} "
        f"({vocab_size}), max_seq_length {length}; {len(pairs)} MRPC dev pairs; batch 1 "
        f"latency over {FLAGS.latency_requests} requests, batch {batch_size} throughput over "
        f"{FLAGS.throughput_batches} batches; best of {FLAGS.repeats} interleaved rounds; "
        f"{os.cpu_count()} CPUs")
  with tempfile.TemporaryDirectory() as directory:
    peers, id_peers, pack = _ours(config, FLAGS.vocab_file, length, directory)
    try:
      peers.append(_keras_hub(config, FLAGS.vocab_file, length, directory))
    except ImportError:
      print("keras_hub is not installed: KerasHub left out")
    batches = [pairs[i * batch_size:(i + 1) * batch_size]
               for i in range(FLAGS.throughput_batches)]
    requests = pairs[:FLAGS.latency_requests]

    def texts(batch):
      return [a for a, _ in batch], [b for _, b in batch]
    ours_sm, python_path = peers[0][1], peers[3][1]
    parity = float(np.abs(ours_sm(*texts(batches[0])) - python_path(*texts(batches[0]))).max())
    packed_requests = [pack(*texts([pair])) for pair in requests]
    packed_batches = [pack(*texts(batch)) for batch in batches]
    int8_parity = float(np.abs(id_peers[0][1](packed_batches[0])
                               - id_peers[2][1](packed_batches[0])).max())
    as_text = [(name, lambda r, fn=fn: fn(*texts(r))) for name, fn in peers]
    as_ids = [(name, lambda r, fn=fn: fn(r)) for name, fn in id_peers]
    timed = [(name, fn, [[pair] for pair in requests], batches) for name, fn in as_text] + [
        (name, fn, packed_requests, packed_batches) for name, fn in as_ids]
    for _, fn, reqs, bats in timed:  # warm-up
      fn(reqs[0])
      fn(bats[0])
    latency, throughput = {}, {}
    for _ in range(FLAGS.repeats):
      for name, fn, reqs, bats in timed:
        times = []
        for request in reqs:
          start = time.perf_counter()
          fn(request)
          times.append(time.perf_counter() - start)
        latency[name] = min(latency.get(name, float("inf")), statistics.median(times) * 1e3)
        start = time.perf_counter()
        for batch in bats:
          fn(batch)
        rate = sum(len(b) for b in batches) / (time.perf_counter() - start)
        throughput[name] = max(throughput.get(name, 0.0), rate)
  sizes = {name: fn.size_bytes for name, fn in id_peers if hasattr(fn, "size_bytes")}
  _report([(name, None) for name, *_ in timed], latency, throughput, parity, dict(
      int8_max_abs_probability_difference=int8_parity, tflite_bytes=sizes,
      num_layers=FLAGS.num_layers, hidden_size=hidden, max_seq_length=length,
      batch_size=batch_size, repeats=FLAGS.repeats, cpus=os.cpu_count()))


def _report(peers, latency, throughput, parity, settings):
  print(f"\nours SavedModel vs ours Python path: max |probability difference| {parity:.2e}; "
        f"TFLite int8 vs the Keras model: "
        f"{settings['int8_max_abs_probability_difference']:.2e}")
  print("TFLite files: " + ", ".join(f"{k} {v / 1e6:.1f} MB"
                                      for k, v in settings["tflite_bytes"].items()))
  print(f"\n| peer | batch 1: median latency (ms) | batch {settings['batch_size']}: "
        "examples/s |")
  print("|---|---:|---:|")
  figures = dict(**settings, parity_max_abs=parity, results={})
  for name, _ in peers:
    print(f"| {name} | {latency[name]:.2f} | {throughput[name]:,.1f} |")
    figures["results"][name] = {"latency_ms_batch1": round(latency[name], 3),
                                "examples_per_s": round(throughput[name], 2)}
  saved_model = latency.get("ours: SavedModel (export_saved_model.py)")
  int8 = latency.get("ours: Python FullTokenizer + TFLite int8 (dynamic)")
  if saved_model and int8:
    figures["int8_tflite_vs_saved_model_batch1_speedup"] = round(saved_model / int8, 3)
    print(f"\nbatch-1 latency, TFLite int8 (from text) vs the float SavedModel: "
          f"{saved_model / int8:.2f}x")
  print(json.dumps(figures))


if __name__ == "__main__":
  app.run(main)
