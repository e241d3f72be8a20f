"""predict.py against predict_beam.py (DirectRunner, 1 and N local workers) on the same file.

A classifier model directory of random weights (--model: tiny L2/H128 or small L4/H256, a
vocabulary of --vocab_size made-up words; runtime/model_dir.py's layout) and a TSV of --rows
short sentences (4 to 16 words) are written to a temporary directory; then each peer runs as
its own process with the same flags (--batch_size, --max_seq_length), end to end (imports,
model loads, worker start-up, reading, predicting, writing):
  predict.py        one process
  beam 1            predict_beam.py, DirectRunner in-process (in_memory)
  beam N            predict_beam.py, --direct_num_workers=N --direct_running_mode=multi_processing
Each peer runs --repeats times, rounds interleaved, and keeps its best wall time. The table
gives wall time, rows/s and the ratio to predict.py, and each peer's CPU time (user + system of
its processes) over its wall time: the cores it kept busy; predict.py's bounds what any runner
can gain on the same cores. The outputs are checked to hold the same labels for every row (the
probabilities within 1e-5).

  python bench/bench_predict_beam.py                    # tiny model, 30000 rows, 1 and 2 workers
  python bench/bench_predict_beam.py --model=small --rows=20000 --workers=1,2
Prints a table; the last line is a JSON object of the figures.
"""

import argparse
import glob
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys
import tempfile
import time
import types

REPO = pathlib.Path(__file__).resolve().parent.parent
MODELS = {"tiny": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=512),
          "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024)}


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
  parser.add_argument("--rows", type=int, default=30000)
  parser.add_argument("--vocab_size", type=int, default=2000)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--max_seq_length", type=int, default=32)
  parser.add_argument("--workers", default="1,2", help="Beam's worker counts, comma-separated.")
  parser.add_argument("--repeats", type=int, default=1)
  parser.add_argument("--seed", type=int, default=0)
  return parser.parse_args()


def make_inputs(directory, args):
  """The model directory and the TSV; returns their paths."""
  import numpy as np
  from bert_keras import checkpoints
  from bert_keras import modeling
  from bert_keras.runtime import model_dir
  rng = np.random.default_rng(args.seed)
  letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
  words = sorted({"".join(rng.choice(letters, rng.integers(2, 8)))
                  for _ in range(args.vocab_size * 2)})[:args.vocab_size]
  vocab = directory / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
  config = modeling.BertConfig(vocab_size=len(words) + 5, max_position_embeddings=128,
                               **MODELS[args.model])
  model = modeling.BertClassifier(config, 2)
  for v in model.weights:
    v.assign(rng.normal(0, 0.05, v.shape).astype(np.float32))
  output = directory / "model"
  output.mkdir()
  checkpoints.save_tf1_checkpoint(model, str(output / "model.ckpt"))
  model_dir.write_model_dir(str(output), types.SimpleNamespace(
      vocab_file=str(vocab), do_lower_case=True, max_seq_length=args.max_seq_length), config,
      "classifier", labels=["no", "yes"])
  table = directory / "rows.tsv"
  with open(table, "w") as f:
    f.write("id\tsentence\n")
    for i in range(args.rows):
      f.write("r%d\t%s\n" % (i, " ".join(rng.choice(words, rng.integers(4, 17)))))
  return str(output), str(table)


def run_peer(command, env):
  """(wall seconds, CPU seconds: user + system of the process and all it started)."""
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=str(REPO))
  seconds = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  if done.returncode != 0:
    raise SystemExit("failed: %s\n%s" % (" ".join(command), done.stderr[-3000:]))
  return seconds, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def read_rows(paths):
  rows = {}
  for path in paths:
    with open(path, encoding="utf-8") as f:
      for line in f:
        row = json.loads(line)
        rows[row["id"]] = row
  return rows


def check_same(reference, other, name):
  assert sorted(reference) == sorted(other), f"{name}: other rows than predict.py's"
  worst = 0.0
  for key, row in reference.items():
    theirs = other[key]
    assert theirs["label"] == row["label"], f"{name}: row {key} has another label"
    worst = max(worst, max(abs(theirs["probabilities"][k] - p)
                           for k, p in row["probabilities"].items()))
  assert worst <= 1e-5, f"{name}: probabilities differ by {worst}"
  return worst


def main():
  args = parse_args()
  workers = [int(w) for w in args.workers.split(",") if w]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  with tempfile.TemporaryDirectory(prefix="bench_predict_beam_") as tmp:
    tmp = pathlib.Path(tmp)
    model, table = make_inputs(tmp, args)
    common = [f"--model_dir={model}", f"--input_file={table}",
              f"--batch_size={args.batch_size}", f"--max_seq_length={args.max_seq_length}"]
    peers = {"predict.py": ([sys.executable, "predict.py", f"--output_file={tmp}/single.jsonl"]
                            + common, [f"{tmp}/single.jsonl"])}
    for n in workers:
      mode = "in_memory" if n == 1 else "multi_processing"
      peers[f"beam {n}"] = ([sys.executable, "predict_beam.py", f"--output_file={tmp}/beam{n}",
                             f"--direct_num_workers={n}", f"--direct_running_mode={mode}"]
                            + common, f"{tmp}/beam{n}-*-of-*.jsonl")
    best, cpu = {}, {}
    for _ in range(args.repeats):
      for name, (command, _) in peers.items():
        seconds, cpu_seconds = run_peer(command, env)
        if seconds < best.get(name, float("inf")):
          best[name], cpu[name] = seconds, cpu_seconds
        print(f"  {name}: {seconds:.1f} s, CPU {cpu_seconds:.1f} s", file=sys.stderr)
    reference = read_rows(peers["predict.py"][1])
    differences = {name: check_same(reference, read_rows(sorted(glob.glob(pattern))), name)
                   for name, (_, pattern) in peers.items() if name != "predict.py"}
  load = os.getloadavg()
  base = args.rows / best["predict.py"]
  print(f"{args.rows} rows, {args.model} classifier, batch {args.batch_size}, max_seq_length "
        f"{args.max_seq_length}, {os.cpu_count()} CPUs, load average {load[0]:.1f} "
        f"(after the runs), best of {args.repeats}, end to end (processes started, models "
        "loaded)")
  print(f"| {'peer':<12} | {'wall (s)':>8} | {'rows/s':>8} | {'vs predict.py':>13} | "
        f"{'CPU (s)':>7} | {'cores busy':>10} |")
  print(f"|{'-' * 14}|{'-' * 9}:|{'-' * 9}:|{'-' * 14}:|{'-' * 8}:|{'-' * 11}:|")
  figures = {}
  for name in peers:
    rate = args.rows / best[name]
    figures[name] = {"seconds": round(best[name], 2), "rows_per_s": round(rate, 1),
                     "ratio": round(rate / base, 3), "cpu_seconds": round(cpu[name], 2),
                     "cores_busy": round(cpu[name] / best[name], 2)}
    print(f"| {name:<12} | {best[name]:8.1f} | {rate:8.1f} | {rate / base:12.2f}x | "
          f"{cpu[name]:7.1f} | {cpu[name] / best[name]:10.2f} |")
  # Work conserved, no runner on this machine's cores can beat predict.py by more than the
  # cores it leaves idle: cpus / (predict.py's CPU seconds / its wall seconds).
  ceiling = os.cpu_count() * best["predict.py"] / cpu["predict.py"]
  print(f"\npredict.py kept {cpu['predict.py'] / best['predict.py']:.2f} of {os.cpu_count()} "
        f"cores busy: with the same CPU work, any runner on these cores is at most "
        f"{ceiling:.2f}x predict.py")
  print(json.dumps({"rows": args.rows, "model": args.model, "batch_size": args.batch_size,
                    "max_seq_length": args.max_seq_length, "cpus": os.cpu_count(),
                    "load_average_1m": round(load[0], 2), "python": platform.python_version(),
                    "max_probability_difference": max(differences.values(), default=0.0),
                    "ceiling_on_these_cores": round(ceiling, 3), "peers": figures}))


if __name__ == "__main__":
  main()
