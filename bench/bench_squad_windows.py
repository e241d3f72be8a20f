"""The max-context check of SQuAD windowing on a huge context: tasks/windows.py's
check_is_max_context (a bisect over the window starts) against the original's (every window
scored for every piece), on the same window layout, same answers required.

  python bench/bench_squad_windows.py                      # 200,000 pieces, 384/128 windows
  python bench/bench_squad_windows.py --pieces=50000 --samples=500

Times both on --samples random (piece, window) pairs and extrapolates to the whole context
(each piece is checked once per window that holds it). Prints a table, then a JSON object.
"""

import collections
import json
import os
import random
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import oracle  # noqa: E402

ORIGINAL = oracle.original("run_squad")  # defines the original's flags
flags.DEFINE_integer("pieces", 200000, "WordPieces in the context.")
flags.DEFINE_integer("window", 384 - 3 - 12, "Pieces per window (max_seq_length - query - 3).")
flags.DEFINE_integer("stride", 128, "--doc_stride.")
flags.DEFINE_integer("samples", 300, "Random (piece, window) pairs timed.")
FLAGS = flags.FLAGS


def _per_call(fn, pairs):
  start = time.perf_counter()
  answers = [fn(position, index) for position, index in pairs]
  return (time.perf_counter() - start) / len(pairs), answers


def main(_):
  from bert_keras.tasks import windows
  spans = windows.doc_spans(FLAGS.pieces, FLAGS.window, FLAGS.stride)
  DocSpan = collections.namedtuple("DocSpan", ["start", "length"])
  theirs = [DocSpan(*span) for span in spans]
  starts = windows.window_starts(spans)
  rng = random.Random(0)
  pairs = [(p, max(0, p // FLAGS.stride - rng.randint(0, 2)))
           for p in rng.sample(range(FLAGS.pieces), FLAGS.samples)]
  t_orig, want = _per_call(lambda p, i: ORIGINAL._check_is_max_context(theirs, i, p), pairs)
  ours = windows.check_is_max_context
  t_ours, got = _per_call(lambda p, i: ours(spans, i, p, starts), pairs)
  assert got == want, "different answers"
  calls = sum(span.length for span in spans)  # one check per piece of each window
  rows = {"original": t_orig, "ours": t_ours}
  print("%d pieces, %d windows of %d, stride %d; %d sampled checks, same answers"
        % (FLAGS.pieces, len(spans), FLAGS.window, FLAGS.stride, len(pairs)))
  print("%-10s %12s %18s" % ("", "us per call", "whole context, s"))
  for name, seconds in rows.items():
    print("%-10s %12.2f %18.1f" % (name, seconds * 1e6, seconds * calls))
  print(json.dumps({"pieces": FLAGS.pieces, "windows": len(spans), "calls": calls,
                    "us_per_call": {k: round(v * 1e6, 3) for k, v in rows.items()},
                    "whole_context_s": {k: round(v * calls, 2) for k, v in rows.items()},
                    "speedup": round(t_orig / t_ours, 1)}))


if __name__ == "__main__":
  app.run(main)
