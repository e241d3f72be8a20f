"""run_squad's reading of SQuAD files: a file that is not UTF-8 names the file, a
whitespace-only context trains on nothing and a failure while writing the training records
leaves no temporary."""

import json

import pytest

from conftest import config_file


def test_squad_file_not_utf8_names_the_file(tmp_path):
  from bert_keras import run_squad
  path = tmp_path / "train.json"
  path.write_bytes(b'{"data": [{"paragraphs": [{"context": "caf\xe9", "qas": []}]}]}')
  with pytest.raises(ValueError, match=f"^{path}, line 1: not UTF-8 \\(byte 43: invalid"):
    run_squad.read_squad_examples(str(path), is_training=True)


def test_squad_training_on_a_whitespace_only_context(tmp_path, caplog):
  from bert_keras import run_squad
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                              "the", "dog", "runs", "who"]))
  squad = tmp_path / "train.json"
  squad.write_text(json.dumps({"data": [{"paragraphs": [
      {"context": "   ", "qas": [{"id": "q1", "question": "who runs",
                                  "answers": [{"text": " ", "answer_start": 1}]}]},
      {"context": "  the dog runs", "qas": [{"id": "q2", "question": "who runs",
                                             "answers": [{"text": " the", "answer_start": 1}]}]},
  ]}]}))
  examples = run_squad.read_squad_examples(str(squad), is_training=True)
  assert examples == []
  assert "question 'q1': its answer (answer_start 1) is not on a word of the context" in (
      caplog.text)
  # A failure while writing the training records leaves no temporary (and no --output_dir).
  config = config_file(tmp_path, "config.json")
  squad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "the dog runs", "qas": [
      {"id": "q1", "question": "who runs", "answers": [{"text": "dog", "answer_start": 4}]}]}]}]}))
  out = tmp_path / "out"

  def fail(*args, **kwargs):
    raise ValueError("no windows today")
  original = run_squad.convert_examples_to_features
  run_squad.convert_examples_to_features = fail
  try:
    with pytest.raises(ValueError, match="no windows today"):
      run_squad.run(run_squad.options(
          train_file=str(squad), vocab_file=str(vocab), do_train=True, max_seq_length=32,
          max_query_length=8, doc_stride=8, bert_config_file=str(config), output_dir=str(out),
          train_batch_size=1))
  finally:
    run_squad.convert_examples_to_features = original
  assert not out.exists()
