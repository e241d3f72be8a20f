"""create_vocab.py: a WordPiece vocab in the released layout that tokenizes its corpus."""

import collections
import os
import subprocess
import sys

import pytest

from conftest import REPO
from bert_keras import create_vocab, tokenization
from bert_keras.utils import file_io


@pytest.fixture(scope="module")
def sample_counts():
  lines = (REPO / "sample_text.txt").read_text(encoding="utf-8").split("\n")
  return collections.Counter(
      w for ws in tokenization.BasicTokenizer().tokenize_batch(lines) for w in ws), lines


def test_layout_and_coverage(sample_counts, tmp_path):
  counts, lines = sample_counts
  vocab = create_vocab.learn_vocab(counts, vocab_size=400, num_unused=5,
                                   extra_reserved_tokens=["[BOS]"])
  assert vocab[:11] == ["[PAD]", "[unused0]", "[unused1]", "[unused2]", "[unused3]", "[unused4]",
                        "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]"]
  assert len(vocab) <= 400 and len(set(vocab)) == len(vocab)
  assert any(t.startswith("##") for t in vocab)
  path = tmp_path / "vocab.txt"
  create_vocab.write_vocab(vocab, str(path))
  tok = tokenization.FullTokenizer(str(path))
  assert list(tok.vocab) == vocab
  # Every character of the corpus is a piece, so its text never becomes [UNK],
  # and the pieces of each word join back into the word.
  basic = tokenization.BasicTokenizer()
  for line in lines:
    for word in basic.tokenize(line):
      pieces = tok.wordpiece_tokenizer.tokenize(word)
      assert "[UNK]" not in pieces
      assert "".join(p[2:] if p.startswith("##") else p for p in pieces) == word
  # Frequent words are whole pieces, rare ones are split.
  assert tok.tokenize("the harbour") == ["the", "harbour"]


def test_vocab_too_small_is_an_error(sample_counts):
  with pytest.raises(ValueError, match="--vocab_size=50 leaves no room"):
    create_vocab.learn_vocab(sample_counts[0], vocab_size=50, num_unused=99)


def _run(*args):
  return subprocess.run([sys.executable, str(REPO / "create_vocab.py"), *args],
                        capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_command_line(tmp_path):
  out = tmp_path / "vocab.txt"
  result = _run(f"--input_file={REPO / 'sample_text.txt'}", f"--output_file={out}",
                "--vocab_size=500", "--num_unused=10")
  assert result.returncode == 0, result.stderr[-2000:]
  tokens = out.read_text(encoding="utf-8").split("\n")[:-1]
  assert tokens[0] == "[PAD]" and tokens[11:15] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert not (tmp_path / "vocab.txt.tmp").exists()
  bad = _run(f"--input_file={tmp_path / 'nothing*.txt'}", f"--output_file={tmp_path / 'v2.txt'}")
  assert bad.returncode != 0
  assert bad.stderr.strip().splitlines()[-1] == (
      f"error: --input_file={tmp_path / 'nothing*.txt'} matches no files")
  assert not (tmp_path / "v2.txt").exists()


@pytest.mark.slow
def test_invalid_utf8_is_an_error_naming_the_file_and_line(tmp_path):
  corpus = tmp_path / "corpus.txt"
  corpus.write_bytes(b"good line\nanother good one\nbad \xff byte here\n")
  out = tmp_path / "vocab.txt"
  command = [sys.executable, str(REPO / "create_vocab.py"), f"--input_file={corpus}",
             f"--output_file={out}", "--vocab_size=120", "--num_unused=0"]
  bad = subprocess.run(command, capture_output=True, text=True)
  assert bad.returncode != 0 and not out.exists()
  assert bad.stderr.strip().splitlines()[-1] == (
      f"error: --input_file {corpus}, line 3: not UTF-8 (byte 5: invalid start byte); pass "
      "--lenient_decoding to drop such bytes")
  lenient = subprocess.run(command + ["--lenient_decoding"], capture_output=True, text=True)
  assert lenient.returncode == 0, lenient.stderr
  assert "byte" in out.read_text().split("\n")


def test_create_vocab_with_a_directory_as_input_or_output(tmp_path):
  import types
  from bert_keras import create_vocab
  text = tmp_path / "in.txt"
  text.write_text("the dog runs\n")
  folder = tmp_path / "folder"
  folder.mkdir()

  def flags(**overrides):
    base = dict(input_file=str(text), output_file=str(tmp_path / "vocab.txt"),
                do_lower_case=True, lenient_decoding=False, vocab_size=200, num_unused=2,
                extra_reserved_tokens=[], max_unique_chars=1000, max_token_length=50)
    return types.SimpleNamespace(**dict(base, **overrides))
  with pytest.raises(ValueError, match=f"^--input_file={folder}: a directory, not a text file"):
    create_vocab.run(flags(input_file=str(folder)))
  with pytest.raises(ValueError, match=f"^--output_file={folder}: is a directory"):
    create_vocab.run(flags(output_file=str(folder)))
  assert sorted(os.listdir(tmp_path)) == ["folder", "in.txt"] and not os.listdir(folder)
  # The shared atomic writer refuses a directory by name too, leaving no temporary.
  with pytest.raises(IsADirectoryError, match="Is a directory") as info:
    file_io.write_text_atomic(str(folder), "x\n")
  assert info.value.filename == str(folder)
  assert sorted(os.listdir(tmp_path)) == ["folder", "in.txt"] and not os.listdir(folder)
