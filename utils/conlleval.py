"""The CoNLL chunk score of conlleval (the CoNLL shared tasks' official script, version
2004-01-26), in Python: chunk counts of gold against predicted tags, precision, recall and
FB1 per type and overall, and conlleval's report.

A tag is split at its first hyphen into a prefix and a type ("B-PER" -> "B", "PER";
"I-MISC-X" -> "I", "MISC-X"; "O" -> "O", ""; a type "0" counts as no type, as Perl's
truth test makes it). Chunks follow conlleval's rules, from the previous tag (prefix and type)
to the current one:
  * a chunk starts at B after anything; at I after O (an I- with no B before it starts a
    chunk: IOB1 and sloppy IOB2 alike); at E after O or E, at I after E (IOE); at "[" or
    "]"; and at any tag other than O and "." whose type differs from the previous tag's;
  * a chunk ends before B or O after B or I; before E, I or O after E; after "[" or "]"; and
    before any tag whose type differs from the previous tag's, when the previous tag is not O
    or ".".
A sentence boundary (an empty line, or a line whose first field is "-X-") is an O in both
columns and is not counted as a token. A found chunk is correct when the gold and the
predicted chunk start at the same token with the same type and end at the same token.
Accuracy is over tokens whose gold and predicted tags are equal (prefix and type).

ConllCounts accumulates the counts token by token; report(counts) is conlleval's text;
metrics(counts) the same figures as a dict (percentages, as conlleval prints them).
"""

import collections
import json
import re

from bert_keras.utils import text_lines

BOUNDARY = "-X-"

# (previous prefix, prefix) pairs that end the chunk of the previous tag / start a chunk.
_END_PAIRS = frozenset([("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"),
                        ("E", "E"), ("E", "I"), ("E", "O")])
_START_PAIRS = frozenset([("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"),
                          ("E", "E"), ("E", "I"), ("O", "E")])
_UNTYPED = ("O", ".")
_SINGLE = ("[", "]")


def split_tag(tag):
  """(prefix, type) of a tag: split at its first hyphen; the type "0" counts as ""."""
  prefix, hyphen, kind = tag.partition("-")
  if not hyphen:
    return tag, ""
  return prefix, "" if kind == "0" else kind


def chunk_ends(prev_prefix, prefix, prev_type, kind):
  """Whether the chunk of the previous tag ends before the current tag."""
  return ((prev_prefix, prefix) in _END_PAIRS or prev_prefix in _SINGLE
          or (prev_prefix not in _UNTYPED and prev_type != kind))


def chunk_starts(prev_prefix, prefix, prev_type, kind):
  """Whether a chunk starts at the current tag."""
  return ((prev_prefix, prefix) in _START_PAIRS or prefix in _SINGLE
          or (prefix not in _UNTYPED and prev_type != kind))


class ConllCounts:
  """conlleval's counts, fed one token at a time (add), then finish().

  tokens: tokens seen (boundaries excluded); correct_tags: tokens with equal tags;
  gold_chunks / found_chunks / correct_chunks: totals, and per type in the *_by_type
  Counters (types in first-seen order).
  """

  def __init__(self):
    self.tokens = 0
    self.correct_tags = 0
    self.gold_chunks = 0
    self.found_chunks = 0
    self.correct_chunks = 0
    self.gold_by_type = collections.Counter()
    self.found_by_type = collections.Counter()
    self.correct_by_type = collections.Counter()
    self._last_gold = ("O", "")
    self._last_found = ("O", "")
    self._matching = False  # a gold and a predicted chunk started together and agree so far
    self._finished = False

  def add(self, gold_tag, predicted_tag, boundary=False):
    """One token: its gold and predicted tag (strings); boundary=True for a sentence break
    (both tags are then taken as O and the token is not counted)."""
    gold = ("O", "") if boundary else split_tag(gold_tag)
    found = ("O", "") if boundary else split_tag(predicted_tag)
    (last_g, last_gt), (last_f, last_ft) = self._last_gold, self._last_found
    gold_ends = chunk_ends(last_g, gold[0], last_gt, gold[1])
    found_ends = chunk_ends(last_f, found[0], last_ft, found[1])
    gold_starts = chunk_starts(last_g, gold[0], last_gt, gold[1])
    found_starts = chunk_starts(last_f, found[0], last_ft, found[1])
    if self._matching:
      if gold_ends and found_ends and last_gt == last_ft:
        self._count_correct(last_gt)
      elif gold_ends != found_ends or gold[1] != found[1]:
        self._matching = False
    if gold_starts and found_starts and gold[1] == found[1]:
      self._matching = True
    if gold_starts:
      self.gold_chunks += 1
      self.gold_by_type[gold[1]] += 1
    if found_starts:
      self.found_chunks += 1
      self.found_by_type[found[1]] += 1
    if not boundary:
      self.tokens += 1
      self.correct_tags += gold == found
    self._last_gold, self._last_found = gold, found

  def _count_correct(self, kind):
    self._matching = False
    self.correct_chunks += 1
    self.correct_by_type[kind] += 1

  def add_sentence(self, gold_tags, predicted_tags):
    """A sentence's tags (two equal-length lists), then a boundary."""
    if len(gold_tags) != len(predicted_tags):
      raise ValueError("a sentence has %d gold and %d predicted tags"
                       % (len(gold_tags), len(predicted_tags)))
    for gold, predicted in zip(gold_tags, predicted_tags):
      self.add(gold, predicted)
    self.add("O", "O", boundary=True)

  def finish(self):
    """Closes a chunk still open at the end of the input; returns self."""
    if self._matching and not self._finished:
      self._count_correct(self._last_gold[1])
    self._finished = True
    return self

  def types(self):
    """The chunk types of either column in conlleval's order: sorted, with its duplicate
    rule (a type equal to the previous one is skipped unless that one is "" )."""
    listed, last = [], None
    for kind in sorted(list(self.gold_by_type) + list(self.found_by_type)):
      if not last or last != kind:
        listed.append(kind)
      last = kind
    return listed


def score_sentences(gold_sentences, predicted_sentences):
  """ConllCounts (finished) of two lists of sentences, each a list of tags."""
  if len(gold_sentences) != len(predicted_sentences):
    raise ValueError("%d gold and %d predicted sentences"
                     % (len(gold_sentences), len(predicted_sentences)))
  counts = ConllCounts()
  for gold, predicted in zip(gold_sentences, predicted_sentences):
    counts.add_sentence(gold, predicted)
  return counts.finish()


def _prf(correct, found, gold):
  """conlleval's precision, recall and FB1 in percent (0.0 where undefined)."""
  precision = 100 * correct / found if found > 0 else 0.0
  recall = 100 * correct / gold if gold > 0 else 0.0
  fb1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
  return precision, recall, fb1


def metrics(counts):
  """conlleval's figures of finished counts: {"tokens", "phrases", "found", "correct",
  "accuracy", "precision", "recall", "FB1" (percent; accuracy None without tokens),
  "types": {type: {"precision", "recall", "FB1", "found", "phrases", "correct"}}}."""
  precision, recall, fb1 = _prf(counts.correct_chunks, counts.found_chunks, counts.gold_chunks)
  result = {
      "tokens": counts.tokens, "phrases": counts.gold_chunks, "found": counts.found_chunks,
      "correct": counts.correct_chunks,
      "accuracy": 100 * counts.correct_tags / counts.tokens if counts.tokens else None,
      "precision": precision, "recall": recall, "FB1": fb1, "types": {}}
  for kind in counts.types():
    p, r, f = _prf(counts.correct_by_type[kind], counts.found_by_type[kind],
                   counts.gold_by_type[kind])
    result["types"][kind] = {"precision": p, "recall": r, "FB1": f,
                             "found": counts.found_by_type[kind],
                             "phrases": counts.gold_by_type[kind],
                             "correct": counts.correct_by_type[kind]}
  return result


def report(counts):
  """conlleval's text report of finished counts (lines ending in newlines)."""
  m = metrics(counts)
  lines = ["processed %d tokens with %d phrases; found: %d phrases; correct: %d.\n"
           % (m["tokens"], m["phrases"], m["found"], m["correct"])]
  if m["tokens"] > 0:
    lines.append("accuracy: %6.2f%%; precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f\n"
                 % (m["accuracy"], m["precision"], m["recall"], m["FB1"]))
  for kind in counts.types():  # listed with conlleval's duplicates
    t = m["types"][kind]
    lines.append("%17s: precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f  %d\n"
                 % (kind, t["precision"], t["recall"], t["FB1"], t["found"]))
  return "".join(lines)


def perl_split(delimiter, line):
  """Perl's split(/delimiter/, line): fields between matches of the regular expression,
  trailing empty fields dropped."""
  fields = re.split(delimiter, line)
  while fields and fields[-1] == "":
    fields.pop()
  return fields


def score_lines(lines, delimiter=" ", path="<input>"):
  """ConllCounts (finished) of conlleval's input: lines (str, newline at the end or not)
  of fields split by the regular expression `delimiter` (a "\r" before the newline is
  dropped, where conlleval would keep it in the last tag), the gold tag second to last and
  the predicted tag last; an empty line or a first field "-X-" is a sentence boundary.
  Every non-empty line has as many fields as the first; a ValueError names path and line."""
  counts = ConllCounts()
  width = None
  for number, line in enumerate(lines, 1):
    fields = perl_split(delimiter, line.rstrip("\n").removesuffix("\r"))
    if fields:
      if width is None:
        width = len(fields)
      elif len(fields) != width:
        raise ValueError("%s line %d: %d fields where line 1 of the file has %d: %r"
                         % (path, number, len(fields), width, line.rstrip("\n")))
    if not fields or fields[0] == BOUNDARY:
      counts.add("O", "O", boundary=True)
      continue
    if len(fields) < 2:
      raise ValueError("%s line %d: %r has no gold and predicted tag (fields are split at %r)"
                       % (path, number, line.rstrip("\n"), delimiter))
    counts.add(fields[-2], fields[-1])
  return counts.finish()


def score_file(path, delimiter=" "):
  """ConllCounts (finished) of a file in conlleval's input format (UTF-8); a ValueError
  names the file and line of a byte that is not UTF-8 and of a malformed line."""
  with open(path, "rb") as f:
    data = f.read()
  return score_lines(decoded_lines(data, path), delimiter, path)


def decoded_lines(data, path):
  """The lines (str, without their newline) of a file's bytes `data`, decoded as UTF-8 one at
  a time; a ValueError names `path` and the line of a byte that is not UTF-8."""
  lines = data.split(b"\n")
  if lines[-1] == b"":
    lines.pop()
  for number, raw in enumerate(lines, 1):
    yield text_lines.decode(raw, path, number)


def metrics_json(counts):
  """metrics(counts) as JSON text."""
  return json.dumps(metrics(counts), indent=2, sort_keys=True) + "\n"
