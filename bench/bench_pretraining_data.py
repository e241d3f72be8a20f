"""create_pretraining_data benchmark: the original (bert-tensorflow) against ours, side by side.

Runs, one after the other on the same corpus and flags, each as its own process:
  original         bert/create_pretraining_data.py of bert-tensorflow 1.0.4 (the oracle)
  ours             create_pretraining_data.py, --num_workers=1 (the original's records)
  ours -w N        create_pretraining_data.py --num_workers=N, for each N of --workers
and reports wall time, input MB/s, speed ratio to the original, peak RSS (the largest
single process, and the sampled sum over the process tree for --num_workers), peak RSS
above the process's import cost (TensorFlow for the original: measured by a process
that only imports it; Python + numpy + our modules for ours, which never import
TensorFlow for local files), and whether the records are identical to the original's
(every feature of every record of every output file, parsed with the original
run_pretraining's FixedLenFeature names, lengths and dtypes). For --num_workers the
check is the statistics (instances, random-next rate, masking rate, tokens per
instance) instead: end to end for --noise_seeds other seeds of ours (= the original's
records), and, without writing, the mean and spread over --stat_seeds seeds of one
process (the original's algorithm) and of each --num_workers split.

Usage (the full run for the README: the ../shared books, dupe_factor 5):
  python bench/bench_pretraining_data.py
  python bench/bench_pretraining_data.py --quick        # one book, dupe 2 (~1 min)
  python bench/bench_pretraining_data.py --input_file='/data/*.txt' --vocab_file=vocab.txt
Prints a table; the last line is a JSON object with every figure.
"""

import argparse
import glob
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from shared_data import shared_data  # noqa: E402
BOOKS = pathlib.Path(shared_data("text", "gutenberg_sentence_per_line"))
VOCAB = pathlib.Path(shared_data("vocab", "bert-base-uncased-vocab.txt"))


def _original_script():
  import importlib.util
  found = importlib.util.find_spec("bert")
  if found is None or not found.submodule_search_locations:
    return None
  path = pathlib.Path(list(found.submodule_search_locations)[0]) / "create_pretraining_data.py"
  return str(path) if path.exists() else None


def _tree_rss(proc):
  try:
    import psutil
  except ImportError:
    return None
  try:
    p = psutil.Process(proc.pid)
    procs = [p] + p.children(recursive=True)
  except psutil.Error:
    return None
  total = 0
  for q in procs:
    try:
      total += q.memory_info().rss
    except psutil.Error:
      pass
  return total


def run_measured(cmd, log_path):
  """Runs cmd; returns (wall seconds, peak RSS of the process (bytes), sampled peak tree RSS)."""
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  with open(log_path, "w") as log:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    peak_tree = [0]
    done = threading.Event()

    def sample():
      while not done.wait(0.05):
        rss = _tree_rss(proc)
        if rss:
          peak_tree[0] = max(peak_tree[0], rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join()
  if proc.returncode != 0:
    tail = pathlib.Path(log_path).read_text(errors="replace")[-3000:]
    raise SystemExit("command failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), tail))
  return wall, usage.ru_maxrss * 1024, peak_tree[0] or None


FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "next_sentence_labels")


def read_records(paths, max_seq_length, max_predictions_per_seq):
  """Per file, the 7 features of every record as [N, length] arrays, parsed with the features
  of the original run_pretraining (names, dtypes and lengths must match exactly)."""
  import tensorflow as tf
  from bert_keras.pretraining_data import tfrecord_encoding
  parsing = tfrecord_encoding.parsing_features(max_seq_length, max_predictions_per_seq)
  out = []
  for path in paths:
    parts = {name: [] for name in FEATURES}
    for batch in tf.data.TFRecordDataset(path).batch(8192):
      parsed = tf.io.parse_example(batch, parsing)
      for name in FEATURES:
        parts[name].append(parsed[name].numpy())
    out.append({name: (np.concatenate(v) if v else np.zeros((0, 1))) for name, v in parts.items()})
  return out


def same_records(a, b):
  return len(a) == len(b) and all(
      x[name].shape == y[name].shape and np.array_equal(x[name], y[name])
      for x, y in zip(a, b) for name in FEATURES)


def statistics(per_file):
  n = sum(len(f["input_ids"]) for f in per_file)
  if not n:
    return {"instances": 0}
  cat = {name: np.concatenate([f[name] for f in per_file]) for name in FEATURES}
  tokens = cat["input_mask"].sum()
  return {
      "instances": int(n),
      "random_next_rate": round(float(cat["next_sentence_labels"].mean()), 4),
      "masked_per_token": round(float(cat["masked_lm_weights"].sum() / tokens), 4),
      "tokens_per_instance": round(float(tokens / n), 2),
  }


def seed_statistics(input_files, vocab_file, lower, dupe, max_seq, preds, workers, seeds):
  """Statistics of the instances (not written) over `seeds`: one process (the original's
  records) if workers == 1, else the --num_workers parts, each with its derived seed."""
  import random
  from bert_keras import create_pretraining_data as cpd
  from bert_keras.pretraining_data import parallel_parts
  from bert_keras.pretraining_data import random_replay
  from bert_keras import tokenization
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=lower)
  params = cpd.InstanceParams(tokenizer, max_seq, 0.1, 0.15, preds, False)
  if workers == 1:
    parts = [input_files]
  else:
    total = sum(os.path.getsize(p) for p in input_files)
    part_bytes = 64 << 20
    num_parts = workers * max(1, -(-total // (workers * part_bytes)))
    parts = parallel_parts.plan_parts(input_files, num_parts)
  corpora = [cpd.read_corpus(part, tokenizer) for part in parts]
  out = []
  for seed in seeds:
    n = rnd = tokens = masked = 0
    for p, corpus in enumerate(corpora):
      words = random_replay.RandomWords(random.Random(
          seed if workers == 1 else parallel_parts.part_seed(seed, p)))
      order = cpd.document_order(corpus, words)
      store = cpd.InstanceStore()
      cpd.generate_instances(corpus, order, params, words, dupe, store)
      meta = store.views()[0]
      n += len(meta)
      rnd += int(meta[:, 4].sum())
      tokens += int((meta[:, 1] + meta[:, 3] + 3).sum())
      masked += int(meta[:, 5].sum())
    out.append({"instances": n, "random_next_rate": rnd / n, "masked_per_token": masked / tokens,
                "tokens_per_instance": tokens / n})
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--input_file", default=str(BOOKS / "*.txt"))
  parser.add_argument("--vocab_file", default=str(VOCAB))
  parser.add_argument("--dupe_factor", type=int, default=5)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--max_predictions_per_seq", type=int, default=20)
  parser.add_argument("--do_lower_case", default="true")
  parser.add_argument("--output_files", type=int, default=1, help="output files per run")
  parser.add_argument("--workers", default="2", help="comma-separated --num_workers to run too")
  parser.add_argument("--noise_seeds", type=int, default=2,
                      help="also run ours (= the original's records) end to end with this many "
                      "other --random_seed values")
  parser.add_argument("--stat_seeds", type=int, default=8,
                      help="statistics (no files written) of the original's algorithm "
                      "(= ours, one process) and of each --num_workers split over this many "
                      "seeds: mean and spread, to judge the --num_workers statistics")
  parser.add_argument("--skip_original", action="store_true")
  parser.add_argument("--quick", action="store_true", help="one book, dupe_factor 2")
  parser.add_argument("--keep", help="directory to keep the outputs in")
  args = parser.parse_args()
  if args.quick:
    args.input_file = str(BOOKS / "carroll-alice.txt")
    args.dupe_factor = 2
  inputs = [p for pattern in args.input_file.split(",") for p in glob.glob(pattern)]
  if not inputs:
    raise SystemExit("no input files match %s" % args.input_file)
  input_mb = sum(os.path.getsize(p) for p in inputs) / 1e6
  workdir = args.keep or tempfile.mkdtemp(prefix="bench_cpd_")
  os.makedirs(workdir, exist_ok=True)
  common = ["--input_file=" + args.input_file, "--vocab_file=" + args.vocab_file,
            "--dupe_factor=%d" % args.dupe_factor, "--max_seq_length=%d" % args.max_seq_length,
            "--max_predictions_per_seq=%d" % args.max_predictions_per_seq,
            "--do_lower_case=" + args.do_lower_case]

  def outputs(tag):
    return [os.path.join(workdir, "%s_%d.tfrecord" % (tag, k)) for k in range(args.output_files)]

  rows = []
  python = sys.executable
  # Import costs (peak RSS of a process that only imports).
  tf_import = run_measured([python, "-c", "import tensorflow"], os.path.join(workdir, "tf.log"))
  ours_import = run_measured(
      [python, "-c", "from bert_keras import create_pretraining_data, "
       "tokenization; tokenization.FullTokenizer(%r).tokenize_batch(['warm up'])"
       % args.vocab_file], os.path.join(workdir, "ours_import.log"))

  original = _original_script()
  if not args.skip_original and original:
    outs = outputs("original")
    wall, rss, tree = run_measured([python, original] + common +
                                   ["--output_file=" + ",".join(outs)],
                                   os.path.join(workdir, "original.log"))
    rows.append(dict(name="original", wall_s=wall, peak_rss=rss, peak_tree_rss=tree,
                     import_rss=tf_import[1], outputs=outs))
  ours_script = str(REPO / "create_pretraining_data.py")
  runs = [("ours", 1, None)] + [("ours -w %s" % n, int(n), None)
                                for n in args.workers.split(",") if n]
  runs += [("seed %d" % (12346 + k), 1, 12346 + k) for k in range(args.noise_seeds)]
  for name, workers, seed in runs:
    outs = outputs(name.replace(" ", "").replace("-", "_"))
    extra = ["--random_seed=%d" % seed] if seed is not None else []
    wall, rss, tree = run_measured(
        [python, ours_script] + common + extra + ["--output_file=" + ",".join(outs),
                                                  "--num_workers=%d" % workers, "--noprogress"],
        os.path.join(workdir, name.replace(" ", "") + ".log"))
    if workers > 1:
      outs = sorted(p for o in outs for p in glob.glob(o + "-*-of-*"))
    rows.append(dict(name=name, wall_s=wall, peak_rss=rss, peak_tree_rss=tree,
                     import_rss=ours_import[1], outputs=outs, workers=workers, seed=seed))

  reference = None
  read = lambda row: read_records(row["outputs"], args.max_seq_length,
                                  args.max_predictions_per_seq)
  if rows and rows[0]["name"] == "original":
    reference = read(rows[0])
  for row in rows:
    records = reference if row["name"] == "original" else read(row)
    row["stats"] = statistics(records)
    if reference is not None and row["name"] != "original":
      if row.get("workers", 1) == 1 and row.get("seed") is None:
        row["identical_records"] = same_records(records, reference)
      else:
        row["identical_records"] = None
    row["mb_per_s"] = input_mb / row["wall_s"]
    row["data_rss"] = row["peak_rss"] - row["import_rss"]
  base = rows[0] if rows and rows[0]["name"] == "original" else None
  print("create_pretraining_data: %s (%.2f MB, %d files), dupe_factor %d, max_seq_length %d, "
        "%s, %d CPUs" % (args.input_file, input_mb, len(inputs), args.dupe_factor,
                         args.max_seq_length, platform.python_version(), os.cpu_count()))
  header = ("%-12s %8s %7s %7s %10s %10s %11s %8s %10s %9s" % (
      "run", "wall s", "MB/s", "speed", "peak RSS", "tree RSS", "above imp.", "vs orig",
      "instances", "identical"))
  print(header)
  print("-" * len(header))
  for row in rows:
    speed = base["wall_s"] / row["wall_s"] if base else float("nan")
    mem_ratio = row["data_rss"] / base["data_rss"] if base else float("nan")
    row["speedup"] = speed
    row["data_rss_vs_original"] = mem_ratio
    ident = row.get("identical_records")
    print("%-12s %8.2f %7.2f %6.1fx %8.0f MB %8s MB %8.0f MB %7.2fx %10d %9s" % (
        row["name"], row["wall_s"], row["mb_per_s"], speed, row["peak_rss"] / 1e6,
        "%.0f" % (row["peak_tree_rss"] / 1e6) if row["peak_tree_rss"] else "-",
        row["data_rss"] / 1e6, mem_ratio, row["stats"]["instances"],
        "-" if row["name"] == "original" else
        {True: "yes", False: "NO", None: "stats"}.get(ident, "-")))
  print("import cost (peak RSS of a process that only imports): TensorFlow %.0f MB, ours "
        "(python+numpy+our modules+vocab) %.0f MB" % (tf_import[1] / 1e6, ours_import[1] / 1e6))
  for row in rows:
    print("  %-12s %s" % (row["name"], row["stats"]))
  band = [r["stats"] for r in rows if r["name"] == "original" or r.get("seed") is not None]
  if len(band) > 1:
    print("the original's records over %d seeds, spread:" % len(band))
    for key in ("instances", "random_next_rate", "masked_per_token", "tokens_per_instance"):
      values = [b[key] for b in band]
      print("  %-20s min %-10s max %s" % (key, min(values), max(values)))
  summary = {
      "input_file": args.input_file, "input_mb": round(input_mb, 3), "files": len(inputs),
      "dupe_factor": args.dupe_factor, "max_seq_length": args.max_seq_length,
      "cpus": os.cpu_count(), "tf_import_rss_mb": round(tf_import[1] / 1e6, 1),
      "ours_import_rss_mb": round(ours_import[1] / 1e6, 1),
      "runs": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()
                if k not in ("outputs",)} for row in rows],
  }
  if args.stat_seeds:
    seeds = [12345 + k for k in range(args.stat_seeds)]
    print("statistics over seeds %d..%d (instances created, not written), mean [min, max]:" % (
        seeds[0], seeds[-1]))
    summary["seed_statistics"] = {}
    for workers in [1] + [int(n) for n in args.workers.split(",") if n]:
      stats = seed_statistics(inputs, args.vocab_file, args.do_lower_case.lower() in ("true", "1"),
                              args.dupe_factor, args.max_seq_length,
                              args.max_predictions_per_seq, workers, seeds)
      label = "original's algorithm" if workers == 1 else "--num_workers=%d" % workers
      cells = []
      for key in ("instances", "random_next_rate", "masked_per_token", "tokens_per_instance"):
        values = [s[key] for s in stats]
        cells.append("%s %.4g [%.4g, %.4g]" % (key, np.mean(values), min(values), max(values)))
      print("  %-22s %s" % (label, ", ".join(cells)))
      summary["seed_statistics"][str(workers)] = stats
  print(json.dumps(summary))


if __name__ == "__main__":
  main()
