"""Text read as UTF-8 by one rule, with one wording for a byte that is not UTF-8:

  <where>, line <n>: not UTF-8 (byte <k>: <reason>)

<n> counts lines from 1; <k> counts bytes from 1 in that line. A reader that words its own
place (predict.py's rows, JSON Lines) ends its message with problem(error).

  numbered_lines(path, where)   (n, line) of a file, streamed; a byte order mark skipped
  decode(data, where, line)     bytes -> str, or the ValueError above
  check_utf8(path, where)       the ValueError above for the first bad byte of a file (for a
                                reader that only learns that a file is not UTF-8, not where)
"""

from bert_keras.utils import file_io

BYTE_ORDER_MARK = b"\xef\xbb\xbf"


def problem(error, start=None):
  """ "not UTF-8 (byte <k>: <reason>)" of a UnicodeDecodeError in one line; start: the
  offset in error.object where that line starts (0 by default)."""
  return f"not UTF-8 (byte {error.start - (start or 0) + 1}: {error.reason})"


def message(error, where, line=1):
  """The one wording of a UnicodeDecodeError of bytes that start at line `line` of `where`
  (a file's name, or a flag and its file): the line and the byte in it found from the error's
  own bytes."""
  data, newline = error.object, b"\n"
  start = data.rfind(newline, 0, error.start) + 1
  return f"{where}, line {line + data.count(newline, 0, error.start)}: {problem(error, start)}"


def decode(data, where, line=1):
  """`data` (bytes that start at line `line` of `where`) as text; a ValueError in the one
  wording (message) at its first byte that is not UTF-8."""
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ValueError(message(e, where, line)) from None


def numbered_lines(path, where=None, max_line_bytes=None):
  """(1-based line number, the line without its "\\n" or "\\r\\n") of each line of the UTF-8
  file `path` (local or with a scheme), streamed; a byte order mark at its start (as
  spreadsheet tools write) is skipped; a byte that is not UTF-8 is a ValueError in the one
  wording (`where`, default `path`). max_line_bytes: a longer line is a ValueError naming it,
  found before more of it is read."""
  with file_io.open_read(path) as f:
    number = 0
    while True:
      raw = f.readline(max_line_bytes + 1) if max_line_bytes else f.readline()
      if not raw:
        return
      number += 1
      if max_line_bytes and len(raw) > max_line_bytes and not (
          len(raw) == max_line_bytes + 1 and raw.endswith(b"\n")):
        raise ValueError(f"{where or path}, line {number}: over {max_line_bytes:,} bytes")
      if number == 1 and raw.startswith(BYTE_ORDER_MARK):
        raw = raw[len(BYTE_ORDER_MARK):]
      yield number, decode(raw, where or path, number).rstrip("\r\n")


def check_utf8(path, where=None):
  """A ValueError in the one wording at the first byte of `path` that is not UTF-8 (None when
  every byte is): for readers whose decoder does not say where."""
  with file_io.open_read(path) as f:
    decode(f.read(), where or path)
