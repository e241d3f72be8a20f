r"""The CoNLL chunk evaluation (conlleval, version 2004-01-26) in one drop-in script.

  python evaluate_ner.py [FILE] [--delimiter=TEXT] [--delimiter_is_regex] [--output_json=F]

FILE (or standard input without one, or "-") holds one token a line, `token ... gold
predicted`: its last two fields are the gold and the predicted tag; an empty line or a first
field "-X-" is a sentence boundary. Fields are split at each occurrence of --delimiter, a
literal text (default: one space, as conlleval's -d; "\t", a backslash and a t, is a tab);
with --delimiter_is_regex at each match of it as a regular expression, as conlleval's -d is
("[ \t]+": any run of blanks; a pattern that backtracks can take minutes on one line, which
is why that is not the default, and why a line it splits for over 2 s is an error naming the
line). Every non-empty line has as many fields as the first. It
prints conlleval's report, figure for figure:

  processed 8 tokens with 3 phrases; found: 3 phrases; correct: 2.
  accuracy:  87.50%; precision:  66.67%; recall:  66.67%; FB1:  66.67
                LOC: precision: 100.00%; recall: 100.00%; FB1: 100.00  1
                PER: precision:  50.00%; recall:  50.00%; FB1:  50.00  2

Chunks follow conlleval's rules (utils/conlleval.py): IOB2 (BIO), IOB1 (an I- after O or
after another type starts a chunk) and IOE; a type change ends a chunk. --output_json writes
the same figures as JSON (percentages; per type also the counts). run_ner.py scores its
dev_predictions.txt with the same code. Differences from conlleval.pl: a file argument as
well as standard input, the input is UTF-8, a "\r" before a newline is dropped (conlleval
keeps it in the predicted tag), and no -l (LaTeX) or -r (raw) option.
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import errors  # (first: it imports absl)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")

import argparse
import contextlib
import re
import signal
import sys
import threading

from bert_keras.utils import conlleval
from bert_keras.utils import file_io


def parse_args(argv=None):
  parser = argparse.ArgumentParser(
      description="conlleval's chunk precision, recall and FB1 of a `token gold predicted` "
                  "file (CoNLL shared tasks).")
  parser.add_argument("file", nargs="?", default="-",
                      help="the input (default or -: standard input)")
  parser.add_argument("--delimiter", "-d", default=" ",
                      help="the text between fields (default: one space; \\t: a tab)")
  parser.add_argument("--delimiter_is_regex", action="store_true",
                      help="--delimiter is a regular expression (as conlleval's -d)")
  parser.add_argument("--output_json", default=None, help="also write the figures as JSON")
  return parser.parse_args(argv)


# The characters that mean something in a regular expression (re.escape also escapes blanks,
# which would show in the error messages' delimiter).
_SPECIAL = re.compile(r"([.^$*+?{}\[\]\\|()])")


def literal_pattern(text):
  """The regular expression that matches `text` and nothing else."""
  return _SPECIAL.sub(r"\\\1", text)


# The longest a --delimiter_is_regex pattern may take to split one line (seconds): a
# pattern that backtracks catastrophically ("(a+)+$") takes minutes or hours on a line of a few
# dozen characters; a usable one microseconds.
REGEX_LINE_SECONDS = 2


class _LineTimeout(Exception):
  pass


def evaluate(path, delimiter=" ", delimiter_is_regex=False, line_seconds=REGEX_LINE_SECONDS):
  """Finished conlleval.ConllCounts of a file ("-": standard input), its fields split at
  each occurrence of the text `delimiter` (delimiter_is_regex: at each match of it, each line
  in at most `line_seconds`, else a ValueError naming the file and line; in the main thread,
  where a signal can interrupt the regular expression)."""
  if not delimiter_is_regex:
    delimiter = literal_pattern(delimiter)
    if path == "-":
      return conlleval.score_lines(sys.stdin, delimiter, "<stdin>")
    return conlleval.score_file(path, delimiter)
  name = "<stdin>" if path == "-" else path
  line = [0]  # the number of the line being scored
  with _line_time_limit(line_seconds):
    try:
      if path == "-":
        lines = sys.stdin
      else:
        with open(path, "rb") as f:
          lines = conlleval.decoded_lines(f.read(), path)
      return conlleval.score_lines(_timed(lines, line_seconds, line), delimiter, name)
    except _LineTimeout:
      raise ValueError(
          "%s line %d: --delimiter %r took over %g s on this line (a regular expression that "
          "backtracks; a simpler one, e.g. '[ \\t]+', or a literal --delimiter without "
          "--delimiter_is_regex)" % (name, line[0], delimiter, line_seconds)) from None


@contextlib.contextmanager
def _line_time_limit(seconds):
  """SIGALRM raises _LineTimeout while the block runs (the timer itself armed per line by
  _timed); the previous handler restored after. Nothing without `seconds` or outside the main
  thread (signals reach only the main thread)."""
  if not seconds or threading.current_thread() is not threading.main_thread():
    yield
    return

  def expired(signum, frame):
    raise _LineTimeout()

  previous = signal.signal(signal.SIGALRM, expired)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def _timed(lines, seconds, number):
  """The lines, the timer armed for `seconds` while the consumer scores each (not while the
  next is read: standard input may wait), number[0] the line's number."""
  armed = bool(seconds) and threading.current_thread() is threading.main_thread()
  for number[0], text in enumerate(lines, 1):
    if armed:
      signal.setitimer(signal.ITIMER_REAL, seconds)
    yield text
    if armed:
      signal.setitimer(signal.ITIMER_REAL, 0)


def main(argv=None):
  args = parse_args(argv)
  with errors.one_line_errors():
    if not args.delimiter:
      raise ValueError("--delimiter is empty")
    delimiter = args.delimiter
    if args.delimiter_is_regex:
      try:
        re.compile(delimiter)
      except re.error as e:
        raise ValueError("--delimiter %r is not a regular expression: %s" % (delimiter, e))
    else:
      delimiter = delimiter.replace("\\t", "\t")
    counts = evaluate(args.file, delimiter, args.delimiter_is_regex)
    sys.stdout.write(conlleval.report(counts))
    if args.output_json:
      file_io.write_text_atomic(args.output_json, conlleval.metrics_json(counts))
  return counts


if __name__ == "__main__":
  main()
