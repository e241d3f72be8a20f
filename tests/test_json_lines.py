"""utils/json_lines: the one JSON Lines rule that predict.py's rows and the retrieval readers
share, its refusals each naming the file and line."""

import pytest

from bert_keras.utils import json_lines


@pytest.mark.parametrize("line, why", [
    (b'{"a": 1', "not valid JSON"),
    (b'{"a": NaN}', "NaN is not a JSON value"),
    (b'[1, 2]', "not a JSON object"),
    (b'{"a": "\xff"}', "not UTF-8 (byte 8: invalid start byte)"),
    (b'{"a": "x \\ud800 y"}', "lone surrogate"),
    (b'[' * 100000 + b']' * 100000, "nested too deeply"),
])
def test_a_bad_line_says_why(line, why):
  value, got = json_lines.parse_object(line + b"\n")
  assert value is None and why in got


def test_read_objects_skips_blank_lines_and_names_the_first_bad_one(tmp_path):
  path = tmp_path / "rows.jsonl"
  path.write_bytes(b'{"a": 1}\n\n  \n{"b": "\\ud83d\\ude00"}\n[3]\n{"c": 1}\n')
  rows = json_lines.read_objects(str(path))
  assert next(rows) == (1, {"a": 1})
  assert next(rows) == (4, {"b": "\U0001F600"})  # (a surrogate pair is one character)
  with pytest.raises(ValueError, match=rf"^{path} line 5: not a JSON object$"):
    next(rows)
