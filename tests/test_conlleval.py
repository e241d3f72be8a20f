"""utils/conlleval.py and evaluate_ner.py: conlleval's (2004-01-26) chunk rules and report,
on cases worked out by hand from its documented rules, and against seqeval's default
(conlleval-compatible) mode on random tag sequences."""

import json
import random
import re
import subprocess
import sys
import time

import pytest

from bert_keras import evaluate_ner
from bert_keras.utils import conlleval
from conftest import REPO


def chunks(tags):
  """The positions where chunks start in one sentence (scored against itself)."""
  found = []
  counts = conlleval.ConllCounts()
  for i, tag in enumerate(tags):
    before = counts.found_chunks
    counts.add(tag, tag)
    if counts.found_chunks > before:
      found.append(i)
  return found


def score(gold, predicted):
  return conlleval.score_sentences(gold, predicted)


def test_split_tag():
  assert conlleval.split_tag("B-PER") == ("B", "PER")
  assert conlleval.split_tag("I-MISC-X") == ("I", "MISC-X")   # types may hold hyphens
  assert conlleval.split_tag("O") == ("O", "")
  assert conlleval.split_tag("B-0") == ("B", "")              # Perl's false "0"


@pytest.mark.parametrize("tags, starts", [
    (["B-PER", "I-PER", "O", "B-LOC"], [0, 3]),                 # IOB2
    (["I-PER", "I-PER", "O", "I-LOC"], [0, 3]),                 # I- after O starts (IOB1)
    (["I-PER", "B-PER", "I-PER"], [0, 1]),                      # IOB1: B- splits same type
    (["B-PER", "I-LOC", "I-LOC"], [0, 1]),                      # a type change starts one
    (["B-PER", "B-PER"], [0, 1]),
    (["O", "I-PER", "E-PER", "E-PER", "I-PER"], [1, 3, 4]),      # IOE: E then E / I
    (["[", "]", "O"], [0, 1]),                                  # one-token chunks
])
def test_chunk_starts(tags, starts):
  assert chunks(tags) == starts


def test_exact_match_needs_same_start_end_and_type():
  # Gold PER 0-1, LOC 3; predicted PER 0 (too short), LOC 3.
  counts = score([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "O", "O", "B-LOC"]])
  assert (counts.gold_chunks, counts.found_chunks, counts.correct_chunks) == (2, 2, 1)
  assert counts.correct_by_type == {"LOC": 1}
  assert (counts.tokens, counts.correct_tags) == (4, 3)
  # An I- start equals a B- start: both are the chunk PER 0-1.
  counts = score([["I-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]])
  assert counts.correct_chunks == 1 and counts.correct_tags == 2
  # Same span, other type: found but not correct.
  counts = score([["B-PER", "I-PER"]], [["B-ORG", "I-ORG"]])
  assert (counts.gold_chunks, counts.found_chunks, counts.correct_chunks) == (1, 1, 0)
  # The prediction continues past the gold chunk's end (type change in gold only).
  counts = score([["B-PER", "I-LOC"]], [["B-PER", "I-PER"]])
  assert (counts.gold_chunks, counts.found_chunks, counts.correct_chunks) == (2, 1, 0)
  # A chunk open at the very end of the input is closed and counted.
  counts = conlleval.ConllCounts()
  counts.add("B-PER", "B-PER")
  assert counts.finish().correct_chunks == 1


def test_boundaries_end_chunks_and_are_not_tokens():
  # Without a boundary I-PER continues the chunk; with one (empty line or -X-) it starts one.
  lines = ["a B-PER B-PER\n", "b I-PER I-PER\n"]
  assert conlleval.score_lines(lines).gold_chunks == 1
  for boundary in ["\n", "-X- O O\n"]:
    counts = conlleval.score_lines([lines[0], boundary, lines[1]])
    assert (counts.tokens, counts.gold_chunks, counts.correct_chunks) == (2, 2, 2)
  # The boundary closes a correct chunk even if the tags after it differ.
  counts = conlleval.score_lines(["a B-PER B-PER\n", "\n", "b O B-PER\n"])
  assert (counts.gold_chunks, counts.found_chunks, counts.correct_chunks) == (1, 2, 1)


EXAMPLE = """John B-PER B-PER
Smith I-PER I-PER
lives O O
in O O
Paris B-LOC B-LOC

Mary B-PER B-PER
Ann I-PER O
ran O O
"""

EXAMPLE_REPORT = """processed 8 tokens with 3 phrases; found: 3 phrases; correct: 2.
accuracy:  87.50%; precision:  66.67%; recall:  66.67%; FB1:  66.67
              LOC: precision: 100.00%; recall: 100.00%; FB1: 100.00  1
              PER: precision:  50.00%; recall:  50.00%; FB1:  50.00  2
"""


def test_report_format():
  counts = conlleval.score_lines(EXAMPLE.splitlines(keepends=True))
  assert conlleval.report(counts) == EXAMPLE_REPORT
  assert EXAMPLE_REPORT in evaluate_ner.__doc__.replace("\n  ", "\n")
  # A type only predicted: recall 0; one only in gold: precision 0 and found 0.
  counts = score([["B-PER", "O"]], [["O", "B-ORG"]])
  assert conlleval.report(counts).splitlines()[1:] == [
      "accuracy:   0.00%; precision:   0.00%; recall:   0.00%; FB1:   0.00",
      "              ORG: precision:   0.00%; recall:   0.00%; FB1:   0.00  1",
      "              PER: precision:   0.00%; recall:   0.00%; FB1:   0.00  0"]
  # No token: the first line only.
  assert conlleval.report(score([], [])) == (
      "processed 0 tokens with 0 phrases; found: 0 phrases; correct: 0.\n")
  # Untyped chunk tags (B, I) share the type "", listed twice as conlleval does.
  report = conlleval.report(score([["B", "I"]], [["B", "O"]])).splitlines()
  assert report[2:] == [" " * 17 + ": precision:   0.00%; recall:   0.00%; FB1:   0.00  1"] * 2


def test_delimiter_and_field_count(tmp_path):
  path = tmp_path / "tab.txt"
  path.write_text(EXAMPLE.replace(" ", "\t"), encoding="utf-8")
  counts = evaluate_ner.evaluate(str(path), "\t")
  assert conlleval.report(counts) == EXAMPLE_REPORT
  with pytest.raises(ValueError, match=r"tab.txt line 1: .*no gold and predicted tag"):
    evaluate_ner.evaluate(str(path))   # one field per line with the default " "
  # Middle columns are ignored; every line has the first line's field count.
  wide = "".join(line.replace(" ", " NNP ", 1) if line.strip() else line
                 for line in EXAMPLE.splitlines(keepends=True))
  assert conlleval.report(conlleval.score_lines(wide.splitlines())) == EXAMPLE_REPORT
  bad = tmp_path / "bad.txt"
  bad.write_text("a B-PER B-PER\n\nb O\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"bad.txt line 3: 2 fields where line 1 .* has 3"):
    evaluate_ner.evaluate(str(bad))
  bad.write_bytes(b"a O O\n\xff O O\n")
  with pytest.raises(ValueError, match=r"bad.txt, line 2: not UTF-8 \(byte 1"):
    evaluate_ner.evaluate(str(bad))
  crlf = tmp_path / "crlf.txt"
  crlf.write_bytes(EXAMPLE.replace("\n", "\r\n").encode())
  assert conlleval.report(evaluate_ner.evaluate(str(crlf))) == EXAMPLE_REPORT


def test_script(tmp_path):
  path = tmp_path / "pred.txt"
  path.write_text(EXAMPLE, encoding="utf-8")
  out = tmp_path / "m.json"
  run = subprocess.run([sys.executable, str(REPO / "evaluate_ner.py"), str(path),
                        "--output_json", str(out)], capture_output=True, text=True,
                       cwd=tmp_path)
  assert run.returncode == 0, run.stderr
  assert run.stdout == EXAMPLE_REPORT
  result = json.loads(out.read_text())
  assert result["FB1"] == pytest.approx(200 / 3) and result["types"]["PER"]["found"] == 2
  assert result["accuracy"] == 87.5 and result["correct"] == 2
  run = subprocess.run([sys.executable, str(REPO / "evaluate_ner.py")], input=EXAMPLE,
                       capture_output=True, text=True, cwd=tmp_path)
  assert run.stdout == EXAMPLE_REPORT
  run = subprocess.run([sys.executable, str(REPO / "evaluate_ner.py"), str(path), "-d", "\t"],
                       capture_output=True, text=True, cwd=tmp_path)
  assert run.returncode == 1
  assert run.stderr.strip().splitlines() == [
      f"error: {path} line 1: 'John B-PER B-PER' has no gold and predicted tag "
      "(fields are split at '\\t')"]


def test_delimiter_is_literal_unless_asked(tmp_path):
  """--delimiter is a literal text (a backtracking pattern costs nothing; "|" and "." are
  themselves; "\t" typed as a backslash and a t is a tab); --delimiter_is_regex reads it as
  conlleval's -d does."""
  path = tmp_path / "pipes.txt"
  path.write_text(EXAMPLE.replace(" ", "|"), encoding="utf-8")
  assert conlleval.report(evaluate_ner.evaluate(str(path), "|")) == EXAMPLE_REPORT
  evil = tmp_path / "evil.txt"
  evil.write_text("a" * 27 + "b O O\n", encoding="utf-8")
  start = time.perf_counter()
  with pytest.raises(ValueError, match="no gold and predicted tag"):
    evaluate_ner.evaluate(str(evil), "(a+)+$")   # as a regex: 2^27 steps, seconds
  assert time.perf_counter() - start < 2
  tabs = tmp_path / "tabs.txt"
  tabs.write_text(EXAMPLE.replace(" ", "\t"), encoding="utf-8")
  blanks = tmp_path / "blanks.txt"
  blanks.write_text(EXAMPLE.replace(" ", " \t "), encoding="utf-8")
  for argv in ([str(tabs), "-d", "\\t"], [str(blanks), "--delimiter_is_regex", "-d", "[ \t]+"],
               [str(path), "--delimiter=|"]):
    run = subprocess.run([sys.executable, str(REPO / "evaluate_ner.py")] + argv,
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0 and run.stdout == EXAMPLE_REPORT, (argv, run.stderr)
  run = subprocess.run([sys.executable, str(REPO / "evaluate_ner.py"), str(path), "-d", "(",
                        "--delimiter_is_regex"], capture_output=True, text=True, cwd=tmp_path)
  assert run.returncode == 1 and "is not a regular expression" in run.stderr


def test_a_backtracking_regex_delimiter_is_stopped_naming_the_line(tmp_path):
  """--delimiter_is_regex: a pattern that backtracks catastrophically (hours on this line) is
  stopped after line_seconds on a line, the error naming the file, the line and the pattern;
  SIGALRM's handler is the caller's again after, and a usable pattern is not stopped."""
  import signal
  evil = tmp_path / "evil.txt"
  evil.write_text("\n" + "a" * 40 + "b O O\n", encoding="utf-8")
  before = signal.getsignal(signal.SIGALRM)
  start = time.perf_counter()
  with pytest.raises(ValueError, match=r"^%s line 2: --delimiter '\(a\+\)\+\$' took over 0\.2 s "
                     r"on this line \(a regular expression that backtracks" % re.escape(str(evil))):
    evaluate_ner.evaluate(str(evil), "(a+)+$", delimiter_is_regex=True, line_seconds=0.2)
  assert time.perf_counter() - start < 10
  assert signal.getsignal(signal.SIGALRM) is before
  assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
  blanks = tmp_path / "blanks.txt"
  blanks.write_text(EXAMPLE.replace(" ", " \t "), encoding="utf-8")
  assert conlleval.report(evaluate_ner.evaluate(str(blanks), "[ \t]+", True, 0.2)) == \
      EXAMPLE_REPORT


def random_sentences(rng, count, types=("PER", "LOC", "ORG")):
  tags = ["O"] * 4 + [f"{p}-{t}" for p in "BI" for t in types]
  return [[rng.choice(tags) for _ in range(rng.randint(1, 12))] for _ in range(count)]


@pytest.mark.parametrize("seed", range(20))
def test_against_seqeval(seed):
  seqeval_metrics = pytest.importorskip("seqeval.metrics")
  rng = random.Random(seed)
  gold = random_sentences(rng, 30)
  predicted = [[t if rng.random() < 0.7 else rng.choice(["O", "B-PER", "I-LOC", "I-ORG"])
                for t in sentence] for sentence in gold]
  m = conlleval.metrics(score(gold, predicted))
  assert m["precision"] / 100 == pytest.approx(seqeval_metrics.precision_score(gold, predicted))
  assert m["recall"] / 100 == pytest.approx(seqeval_metrics.recall_score(gold, predicted))
  assert m["FB1"] / 100 == pytest.approx(seqeval_metrics.f1_score(gold, predicted))
  assert m["accuracy"] / 100 == pytest.approx(seqeval_metrics.accuracy_score(gold, predicted))
  per_type = seqeval_metrics.classification_report(gold, predicted, output_dict=True,
                                                   zero_division=0)
  assert sorted(m["types"]) == sorted(k for k in per_type if not k.endswith(" avg"))
  for kind, ours in m["types"].items():
    theirs = per_type[kind]
    assert ours["precision"] / 100 == pytest.approx(theirs["precision"])
    assert ours["recall"] / 100 == pytest.approx(theirs["recall"])
    assert ours["FB1"] / 100 == pytest.approx(theirs["f1-score"])
    assert ours["phrases"] == theirs["support"]
