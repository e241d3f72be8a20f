"""utils/text_lines: one rule for UTF-8 text files and one wording for a byte that is not
UTF-8, whichever reader finds it."""

import pytest

from bert_keras.utils import text_lines


def test_numbered_lines_strip_line_ends_and_a_byte_order_mark(tmp_path):
  path = tmp_path / "a.txt"
  path.write_bytes(b"\xef\xbb\xbfone\r\ntwo \xc3\xa9\n\nlast")
  assert list(text_lines.numbered_lines(str(path))) == [
      (1, "one"), (2, "two \u00e9"), (3, ""), (4, "last")]


@pytest.mark.parametrize("data, first, expected", [
    (b"ok\nbad \xff\n", 1, "f.txt, line 2: not UTF-8 (byte 5: invalid start byte)"),
    (b"\xc3", 7, "f.txt, line 7: not UTF-8 (byte 1: unexpected end of data)"),
    (b"a\nb\nc\xe9d", 10, "f.txt, line 12: not UTF-8 (byte 2: invalid continuation byte)"),
])
def test_the_one_wording_names_the_line_and_the_byte_in_it(data, first, expected):
  with pytest.raises(ValueError) as info:
    text_lines.decode(data, "f.txt", first)
  assert str(info.value) == expected


def test_a_file_s_first_bad_byte_is_named_and_a_good_file_passes(tmp_path):
  bad, good = tmp_path / "bad.json", tmp_path / "good.json"
  bad.write_bytes(b'{"a":\n "\xe9"}')
  good.write_text('{"a": "\u00e9"}', encoding="utf-8")
  with pytest.raises(ValueError, match=r"--x bad.json, line 2: not UTF-8 \(byte 3: "):
    text_lines.check_utf8(str(bad), "--x bad.json")
  text_lines.check_utf8(str(good))


def test_every_reader_words_a_bad_byte_alike(tmp_path):
  # A CoNLL file, a qrels file, a vocab and a BERT config: the same byte, one wording.
  from bert_keras import modeling
  from bert_keras import tokenization
  from bert_keras.tasks.ner import tagging
  from bert_keras.tasks.retrieval import metrics
  path = tmp_path / "f.txt"
  path.write_bytes(b"b\xff\n")
  for read in (tagging.read_conll, metrics.read_qrels, tokenization.load_vocab,
               modeling.BertConfig.from_json_file):
    with pytest.raises(ValueError, match=r"f.txt, line 1: not UTF-8 \(byte 2: invalid start"):
      read(str(path))
