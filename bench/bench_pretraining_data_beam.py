"""create_pretraining_data on Apache Beam (DirectRunner) against the single-process script.

Makes documents from the ../shared books (a blank line after every --lines_per_doc
sentences; the books have none), writes them to a temporary directory, and runs on them,
one after the other, each as its own process with the same flags:
  single        create_pretraining_data.py (one process; the original's algorithm)
  single -w N   create_pretraining_data.py --num_workers=N (for reference)
  beam 1        create_pretraining_data_beam.py, DirectRunner in-process (in_memory)
  beam N        create_pretraining_data_beam.py, DirectRunner with N worker processes
                (--direct_running_mode=multi_processing)
and reports wall time, input MB/s, instances, instances/s, the ratio to the single-process
script, peak RSS (sampled over the process tree), and the statistics of the records
written (parsed with the original run_pretraining features): random-next rate,
masked tokens per token, tokens per instance.

Usage:
  python bench/bench_pretraining_data_beam.py                # the books, dupe_factor 5
  python bench/bench_pretraining_data_beam.py --quick        # two books, dupe_factor 2
Prints a table; the last line is a JSON object with every figure.
"""

import argparse
import glob
import json
import os
import pathlib
import platform
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from shared_data import shared_data  # noqa: E402
from bench_pretraining_data import read_records, run_measured, statistics  # noqa: E402

BOOKS = pathlib.Path(shared_data("text", "gutenberg_sentence_per_line"))
VOCAB = pathlib.Path(shared_data("vocab", "bert-base-uncased-vocab.txt"))


def make_documents(books, directory, lines_per_doc):
  """Copies of the books with a blank line after every `lines_per_doc` lines (and at the end)."""
  paths = []
  for book in books:
    with open(book, encoding="utf-8") as f:
      lines = f.read().split("\n")
    while lines and not lines[-1]:
      lines.pop()
    out = []
    for i, line in enumerate(lines):
      out.append(line)
      if i % lines_per_doc == lines_per_doc - 1:
        out.append("")
    if out and out[-1]:
      out.append("")
    path = os.path.join(directory, os.path.basename(book))
    with open(path, "w", encoding="utf-8") as f:
      f.write("\n".join(out) + "\n")
    paths.append(path)
  return paths


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--books", default=str(BOOKS / "*.txt"))
  parser.add_argument("--vocab_file", default=str(VOCAB))
  parser.add_argument("--lines_per_doc", type=int, default=40)
  parser.add_argument("--dupe_factor", type=int, default=5)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--max_predictions_per_seq", type=int, default=20)
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--num_shards", type=int, default=0,
                      help="--num_shards of the pipeline (0: its default)")
  parser.add_argument("--bucket_size_mb", type=float, default=64)
  parser.add_argument("--quick", action="store_true", help="two books, dupe_factor 2")
  parser.add_argument("--keep", help="directory to keep the corpus and outputs in")
  args = parser.parse_args()
  books = sorted(glob.glob(args.books))
  if args.quick:
    books = books[:2]
    args.dupe_factor = 2
  if not books:
    raise SystemExit("no books match %s" % args.books)
  workdir = args.keep or tempfile.mkdtemp(prefix="bench_cpd_beam_")
  corpus_dir = os.path.join(workdir, "corpus")
  os.makedirs(corpus_dir, exist_ok=True)
  files = make_documents(books, corpus_dir, args.lines_per_doc)
  input_mb = sum(os.path.getsize(p) for p in files) / 1e6
  common = ["--input_file=" + os.path.join(corpus_dir, "*.txt"),
            "--vocab_file=" + args.vocab_file, "--dupe_factor=%d" % args.dupe_factor,
            "--max_seq_length=%d" % args.max_seq_length,
            "--max_predictions_per_seq=%d" % args.max_predictions_per_seq]
  python = sys.executable
  single = str(REPO / "create_pretraining_data.py")
  beam = str(REPO / "create_pretraining_data_beam.py")
  beam_flags = ["--bucket_size_mb=%g" % args.bucket_size_mb]
  if args.num_shards:
    beam_flags.append("--num_shards=%d" % args.num_shards)
  w = args.workers
  runs = [
      ("single", [python, single, "--noprogress"], False),
      ("single -w %d" % w, [python, single, "--noprogress", "--num_workers=%d" % w], True),
      ("beam 1", [python, beam] + beam_flags, True),
      ("beam %d" % w, [python, beam, "--direct_num_workers=%d" % w,
                       "--direct_running_mode=multi_processing"] + beam_flags, True),
  ]
  load_before = os.getloadavg()
  rows = []
  for name, cmd, sharded in runs:
    tag = name.replace(" ", "").replace("-", "_")
    out = os.path.join(workdir, tag + ".tfrecord")
    wall, rss, tree = run_measured(cmd + common + ["--output_file=" + out],
                                   os.path.join(workdir, tag + ".log"))
    outputs = sorted(glob.glob(out + "-*-of-*")) if sharded else [out]
    stats = statistics(read_records(outputs, args.max_seq_length, args.max_predictions_per_seq))
    rows.append(dict(name=name, wall_s=wall, peak_rss=rss, peak_tree_rss=tree, files=len(outputs),
                     output_mb=sum(os.path.getsize(p) for p in outputs) / 1e6, stats=stats))
  base = rows[0]["wall_s"]
  print("create_pretraining_data on Beam: %d books (%.2f MB, a blank line every %d lines), "
        "dupe_factor %d, max_seq_length %d, Python %s, %d CPUs, load average %.2f before the "
        "runs (1 min; anything else running skews the ratios)" % (
            len(files), input_mb, args.lines_per_doc, args.dupe_factor, args.max_seq_length,
            platform.python_version(), os.cpu_count(), load_before[0]))
  header = "%-12s %8s %7s %10s %11s %8s %9s %6s %9s %9s %8s" % (
      "run", "wall s", "MB/s", "instances", "instances/s", "vs single", "peak RSS", "files",
      "rnd next", "masked/t", "tok/inst")
  print(header)
  print("-" * len(header))
  for row in rows:
    s = row["stats"]
    row["mb_per_s"] = input_mb / row["wall_s"]
    row["instances_per_s"] = s["instances"] / row["wall_s"]
    row["speed_vs_single"] = base / row["wall_s"]
    rss = row["peak_tree_rss"] or row["peak_rss"]
    print("%-12s %8.2f %7.2f %10d %11.0f %7.2fx %6.0f MB %6d %9.4f %9.4f %8.1f" % (
        row["name"], row["wall_s"], row["mb_per_s"], s["instances"], row["instances_per_s"],
        row["speed_vs_single"], rss / 1e6, row["files"], s["random_next_rate"],
        s["masked_per_token"], s["tokens_per_instance"]))
  summary = {
      "books": len(files), "input_mb": round(input_mb, 3), "lines_per_doc": args.lines_per_doc,
      "dupe_factor": args.dupe_factor, "max_seq_length": args.max_seq_length,
      "workers": w, "cpus": os.cpu_count(), "workdir": workdir,
      "load_average_before": round(load_before[0], 2),
      "runs": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
               for row in rows],
  }
  print(json.dumps(summary))


if __name__ == "__main__":
  main()
