"""JSON Lines read by one rule: each non-blank line a JSON object, strict JSON (no NaN or
Infinity: Python's extension), UTF-8, not nested past Python's recursion limit, no lone
surrogate escape (a string that is not Unicode text).

  parse_object(raw)    one line (bytes) -> (dict, None), or (None, why it is refused)
  read_objects(path)   (line number, dict) of a file; the first bad line a ValueError naming it
"""

import json
import re

from bert_keras.utils import file_io
from bert_keras.utils import text_lines

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _not_json(constant):
  """json.loads's parse_constant: NaN, Infinity and -Infinity are not JSON."""
  raise ValueError(f"{constant} is not a JSON value")


def _is_unicode(value):
  """Whether every string in the JSON value `value` (keys too) is encodable as UTF-8 (holds
  no lone surrogate)."""
  try:
    json.dumps(value, ensure_ascii=False).encode("utf-8")
  except UnicodeEncodeError:
    return False
  return True


def parse_object(raw):
  """One JSON Lines line (bytes, its line end allowed) -> (dict, None), or (None, why): not
  UTF-8, not valid JSON, nested too deeply, not an object, or a lone surrogate escape."""
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    return None, text_lines.problem(e)
  try:
    value = json.loads(text, parse_constant=_not_json)
  except ValueError as e:
    return None, f"not valid JSON ({e})"
  except RecursionError:
    return None, "JSON nested too deeply"
  if not isinstance(value, dict):
    return None, "not a JSON object"
  if _SURROGATE_ESCAPE.search(raw) and not _is_unicode(value):
    return None, ("a string holds a lone surrogate (a \\ud800-\\udfff escape that is not half "
                  "of a pair): not Unicode text")
  return value, None


def read_objects(path):
  """(1-based line number, dict) of each non-blank line of the JSON Lines file `path` (local
  or with a scheme), streamed; the first line parse_object refuses is a ValueError
  "<path> line <n>: <why>"."""
  with file_io.open_read(path) as f:
    for number, raw in enumerate(f, 1):
      if not raw.strip():
        continue
      value, why = parse_object(raw)
      if why is not None:
        raise ValueError(f"{path} line {number}: {why}")
      yield number, value
