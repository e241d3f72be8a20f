"""predict.py's input and output: rows of text streamed from TSV, CSV or JSON Lines (a file
or standard input), JSON Lines written out.

read_rows(path, input_format) yields Row(fields, line, error): `fields` a dict of the row's
fields (a TSV/CSV row: its header's names -> the row's values), `line` its first line number
(1-based), `error` None or why the row cannot be used (not UTF-8, not a JSON object, JSON
nested too deeply, a string holding a lone surrogate (a "\\ud800" escape: not Unicode), a
TSV/CSV row with more or fewer fields than the header, a row over max_row_bytes). It reads
one line at a time: memory does not grow with the input. Reader.bytes_read counts the bytes
consumed (progress). A UTF-8 byte order mark before the first line is skipped, whatever the
format.

Formats: "tsv" (tab-separated, no quoting: the GLUE files' convention), "csv" (RFC 4180
quoting, a field may span lines), "jsonl" (one JSON object a line; empty lines skipped).
format_of(path, flag) picks it: the flag, else the file's extension (.tsv, .csv, .jsonl,
.json, .ndjson), else None; for standard input ("-") without the flag, the first non-empty
line decides (sniff_format): "{" -> jsonl, a tab -> tsv, else csv.
"""

import csv
import json
import math
import numbers
import sys

from bert_keras.utils import file_io
from bert_keras.utils import json_lines
from bert_keras.utils import text_lines

FORMATS = ("tsv", "csv", "jsonl")
_EXTENSIONS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl",
               ".ndjson": "jsonl"}
_BOM = b"\xef\xbb\xbf"
# A JSON escape of a UTF-16 surrogate (U+D800..U+DFFF): a line holding one is checked for a
# lone surrogate (a pair decodes to one character).


class Row(object):
  """One input row: fields (dict str -> value), line (its first line, 1-based), error (None,
  or why the row is unusable)."""
  __slots__ = ("fields", "line", "error")

  def __init__(self, fields, line, error=None):
    self.fields, self.line, self.error = fields, line, error


def format_of(path, flag=None):
  """The input format: `flag` (one of FORMATS), else the extension of `path`'s name, else
  None (standard input, or an unknown extension: sniff_format decides)."""
  if flag:
    if flag not in FORMATS:
      raise ValueError(f"--input_format={flag}: one of {', '.join(FORMATS)}")
    return flag
  if path == "-":
    return None
  for extension, kind in _EXTENSIONS.items():
    if path.lower().endswith(extension):
      return kind
  return None


def sniff_format(first_line):
  """The format of an input whose first non-empty line (str) is `first_line`."""
  text = first_line.lstrip("\ufeff \t")
  if text.startswith("{"):
    return "jsonl"
  return "tsv" if "\t" in first_line else "csv"


class Reader(object):
  """The rows of `path` ("-": standard input) in `input_format` (None: sniffed). Iterate it
  for Row objects; `name` is how errors name the input; bytes_read and size (None for
  standard input) measure the progress. max_row_bytes: a row longer (its lines' bytes) is
  a bad row, not parsed (None or 0: no bound)."""

  def __init__(self, path, input_format=None, max_row_bytes=None):
    self.path = path
    self.max_row_bytes = max_row_bytes or None
    self.name = "<stdin>" if path == "-" else path
    self.format = input_format
    self.size = None if path == "-" else file_io.file_size(path)
    self.bytes_read = 0
    self._lines = self._numbered_lines()
    self._pending = None
    if self.format is None:  # sniff: the first non-empty line, kept for the reader
      for number, raw in self._lines:
        if raw.strip():
          self._pending = (number, raw)
          self.format = sniff_format(raw.decode("utf-8", "replace"))
          break
      else:
        self.format = "jsonl"  # an empty input: no rows whatever the format

  def _numbered_lines(self):
    """(line number, bytes) of each line of the input, its line ending kept."""
    if self.path == "-":
      stream, close = sys.stdin.buffer, False
    else:
      stream, close = file_io.open_read(self.path), True
    try:
      for number, raw in enumerate(stream, 1):
        if isinstance(raw, str):
          raw = raw.encode("utf-8")
        self.bytes_read += len(raw)
        if number == 1 and raw.startswith(_BOM):
          raw = raw[len(_BOM):]
        yield number, raw
    finally:
      if close:
        stream.close()

  def _lines_with_pending(self):
    if self._pending is not None:
      pending, self._pending = self._pending, None
      yield pending
    yield from self._lines

  def __iter__(self):
    lines = self._lines_with_pending()
    if self.format == "jsonl":
      return self._jsonl_rows(lines)
    return self._table_rows(lines)

  def where(self, line):
    return f"{self.name} line {line}"

  def _too_long(self, size):
    """Why a row of `size` bytes is refused, or None."""
    if self.max_row_bytes is not None and size > self.max_row_bytes:
      return f"{size} bytes, over --max_row_bytes={self.max_row_bytes}"
    return None

  def _jsonl_rows(self, lines):
    for number, raw in lines:
      if not raw.strip():
        continue
      error = self._too_long(len(raw))
      if error is not None:
        yield Row(None, number, error)
        continue
      value, why = json_lines.parse_object(raw)
      if why is not None:
        yield Row(None, number, why)
        continue
      yield Row(value, number)

  def _table_rows(self, lines):
    """TSV / CSV rows: the first line is the header. Lines that are not UTF-8 are decoded
    with surrogate escapes and the row holding them is marked bad."""
    bad_lines = {}  # {line: why it is not UTF-8}
    state = {"last": 0, "bytes": 0}

    def decoded():
      for number, raw in lines:
        state["last"] = number
        state["bytes"] += len(raw)
        try:
          yield raw.decode("utf-8")
        except UnicodeDecodeError as e:
          bad_lines[number] = text_lines.problem(e)
          yield raw.decode("utf-8", "surrogateescape")

    file_io.allow_long_csv_fields()
    if self.format == "tsv":
      reader = csv.reader(decoded(), delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
      reader = csv.reader(decoded())
    try:
      header = next(reader, None)
    except csv.Error as e:
      raise ValueError(f"{self.where(state['last'])}: the header {_csv_problem(e)}") from None
    if header is None:
      return
    if state["last"] in bad_lines:
      raise ValueError(f"{self.where(state['last'])}: the header is "
                       f"{bad_lines[state['last']]}")
    if header and header[0].startswith("\ufeff"):
      header[0] = header[0][1:]
    if len(set(header)) != len(header):
      raise ValueError(f"{self.where(1)}: the header repeats a column name: {header}")
    first = state["last"] + 1
    state["bytes"] = 0
    while True:
      try:
        values = next(reader)
      except StopIteration:
        return
      except csv.Error as e:  # (the reader goes on with the next line)
        values = e
      line, first = first, state["last"] + 1
      size, state["bytes"] = state["bytes"], 0
      if isinstance(values, csv.Error):
        yield Row(None, line, _csv_problem(values))
        continue
      if not values:  # an empty line
        continue
      too_long = self._too_long(size)
      if too_long is not None:
        yield Row(None, line, too_long)
      elif any(number in bad_lines for number in range(line, state["last"] + 1)):
        yield Row(None, line, next(bad_lines[number] for number in range(line, state["last"] + 1)
                                   if number in bad_lines))
      elif len(values) != len(header):
        yield Row(None, line, f"{len(values)} fields, the header has {len(header)}")
      else:
        yield Row(dict(zip(header, values)), line)


def _csv_problem(error):
  """The csv module's error about a row, in the row's words."""
  if "new-line character" in str(error):
    return "has a carriage return (\\r) inside a field, not at a line's end"
  return f"cannot be read ({error})"


def non_finite(value, where=""):
  """(path, number) of the first NaN or Inf in the JSON-like `value` (dicts, lists, numbers;
  the path "probabilities.1", "embedding.7"), or None when every number is finite."""
  if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
    return None if math.isfinite(value) else (where, float(value))
  items = (value.items() if isinstance(value, dict)
           else enumerate(value) if isinstance(value, (list, tuple)) else ())
  for key, item in items:
    found = non_finite(item, f"{where}.{key}" if where else str(key))
    if found is not None:
      return found
  return None


# The prefix an input field takes in the output row when an output has its name (a dev file's
# gold "label" is written as "input_label" beside the predicted "label"): never overwritten.
INPUT_PREFIX = "input_"


def merged_row(fields, prediction):
  """The output row of an input row's `fields` and its `prediction` (dicts): the input's fields
  in their order, then the prediction's; an input field that an output also names is kept as
  input_<name> (input_input_<name> if that is taken too)."""
  row = {}
  for name, value in fields.items():
    if name in prediction:
      kept = INPUT_PREFIX + name
      while kept in fields or kept in prediction:
        kept = INPUT_PREFIX + kept
      row[kept] = value
    else:
      row[name] = value
  row.update(prediction)
  return row


def renamed_fields(fields, prediction):
  """The input fields merged_row renames: {name: its name in the output row}."""
  row = merged_row(fields, prediction)
  return {name: kept for name, kept in zip(fields, row) if kept != name}


def json_line(fields):
  """One output line: `fields` as compact JSON (UTF-8 text, not escaped) and a newline. A NaN
  or Inf is a ValueError: it is not JSON."""
  return json.dumps(fields, ensure_ascii=False, separators=(", ", ": "), allow_nan=False) + "\n"
