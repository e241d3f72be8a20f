"""run_squad.py against the original (bert-tensorflow 1.0.4's run_squad): a hand-made golden
example (two questions, windows, synthetic logits) with its expected numbers, reading and
features on real SQuAD 1.1 / 2.0 files of ../shared, the TFRecords, write_predictions' three
files with random logits, get_final_text, the span head in the original's create_model graph,
its loss and its training (train_op, step by step and free-running) in the original's
model_fn, and the command line end to end and on bad input.
"""

import collections
import contextlib
import functools
import json
import logging
import os
import pathlib
import subprocess
import sys
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import oracle
from conftest import shared_path
from bert_keras import checkpoints
from bert_keras import modeling
from bert_keras import run_squad
from bert_keras import tokenization
from bert_keras.runtime import distribution
from bert_keras.runtime import input_pipeline
from bert_keras.runtime import training
from bert_keras.tasks import squad_data
from bert_keras.tasks import squad_predictions

REPO = pathlib.Path(__file__).resolve().parent.parent
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=128, type_vocab_size=2)


@pytest.fixture(scope="module")
def orig():
  return oracle.original("run_squad")


@contextlib.contextmanager
def original_flags(**values):
  """The original's write_predictions / read_squad_examples read these absl flags."""
  from absl import flags
  saved = {name: getattr(flags.FLAGS, name) for name in values}
  for name, value in values.items():
    setattr(flags.FLAGS, name, value)
  try:
    yield
  finally:
    for name, value in saved.items():
      setattr(flags.FLAGS, name, value)


class _MemoTokenizer:
  """The original FullTokenizer with tokenize() memoised (paragraph words repeat)."""

  def __init__(self, tokenizer):
    self._tokenizer, self._memo = tokenizer, {}

  def tokenize(self, text):
    if text not in self._memo:
      self._memo[text] = self._tokenizer.tokenize(text)
    return list(self._memo[text])

  def convert_tokens_to_ids(self, tokens):
    return self._tokenizer.convert_tokens_to_ids(tokens)


@pytest.fixture(scope="module")
def vocab():
  return str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))


@pytest.fixture(scope="module")
def tokenizers(vocab):
  """(ours, the original's), uncased."""
  theirs = oracle.original("tokenization").FullTokenizer(vocab, do_lower_case=True)
  return tokenization.FullTokenizer(vocab, do_lower_case=True), _MemoTokenizer(theirs)


@pytest.fixture(scope="module")
def squad2_train(tmp_path_factory):
  """squad2_part_a.json (a v2 dev subset) as a training file: the first answer only."""
  data = json.loads(shared_path("data", "squad", "squad2_part_a.json").read_text("utf-8"))
  for article in data["data"]:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        qa["answers"] = qa["answers"][:1]
  path = tmp_path_factory.mktemp("squad") / "train-v2.json"
  path.write_text(json.dumps(data), encoding="utf-8")
  return str(path)


def _example_tuple(e):
  return (e.qas_id, e.question_text, e.doc_tokens, e.orig_answer_text, e.start_position,
          e.end_position, e.is_impossible, repr(e))


def _feature_tuple(f):
  return (f.unique_id, f.example_index, f.doc_span_index, f.tokens,
          list(f.token_to_orig_map.items()), list(f.token_is_max_context.items()),
          f.input_ids, f.input_mask, f.segment_ids, f.start_position, f.end_position,
          f.is_impossible)


def _features(module, examples, tokenizer, max_seq_length, doc_stride, max_query_length,
              is_training):
  features = []
  module.convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                      max_query_length, is_training, features.append)
  return features


# ----------------------------------------------------------------------------
# The golden example: two questions on one paragraph, worked out by hand.

GOLDEN_CONTEXT = ("The leader was John Smith (1895-1943). He lived in Japan's capital, Tokyo, "
                  "for many years.")


@pytest.fixture(scope="module")
def golden(tmp_path_factory, orig):
  """The golden example's two questions as a SQuAD file, and its vocab (built with the original
  BasicTokenizer): [PAD] [UNK] [CLS] [SEP] [MASK], the sorted basic tokens but "tokyo",
  then "to", "##ky", "##o"."""
  root = tmp_path_factory.mktemp("golden")
  qas = [{"id": "q1", "question": "What year was John Smith born?", "is_impossible": False,
          "answers": [{"text": "1895", "answer_start": 27}]},
         {"id": "q2", "question": "Where did he live?", "is_impossible": False,
          "answers": [{"text": "Tokyo", "answer_start": 69}]}]
  # The golden answer offsets (69 is inside "Tokyo,", one past its "T": the same word either way).
  assert GOLDEN_CONTEXT[27:31] == "1895" and GOLDEN_CONTEXT[68:74] == "Tokyo,"
  data = {"version": "1.1", "data": [{"title": "golden", "paragraphs": [
      {"context": GOLDEN_CONTEXT, "qas": qas}]}]}
  (root / "golden.json").write_text(json.dumps(data), encoding="utf-8")
  basic = oracle.original("tokenization").BasicTokenizer(do_lower_case=True)
  words = set()
  for text in [GOLDEN_CONTEXT] + [qa["question"] for qa in qas]:
    words.update(basic.tokenize(text))
  words.discard("tokyo")
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(words) + ["to", "##ky", "##o"]
  (root / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
  return root


def _golden_logits(feature):
  """The golden example's synthetic logits: +5 start/end at "1895", +4 start at "to" and +4 end at
  "##o" (document positions), +1 at index 0."""
  start, end = [0.0] * len(feature.input_ids), [0.0] * len(feature.input_ids)
  start[0] = end[0] = 1.0
  for position in feature.token_to_orig_map:
    token = feature.tokens[position]
    if token == "1895":
      start[position] = end[position] = 5.0
    if token == "to":
      start[position] = 4.0
    if token == "##o":
      end[position] = 4.0
  return start, end


def test_golden_example(orig, golden, tmp_path):
  vocab = str(golden / "vocab.txt")
  path = str(golden / "golden.json")
  ours_tok = tokenization.FullTokenizer(vocab, do_lower_case=True)
  theirs_tok = oracle.original("tokenization").FullTokenizer(vocab, do_lower_case=True)
  with original_flags(version_2_with_negative=False):
    want_examples = orig.read_squad_examples(path, True)
  examples = squad_data.read_squad_examples(path, True)
  assert [_example_tuple(e) for e in examples] == [_example_tuple(e) for e in want_examples]
  assert [(e.start_position, e.end_position) for e in examples] == [(5, 5), (11, 11)]
  assert examples[0].doc_tokens[5] == "(1895-1943)." and examples[1].doc_tokens[11] == "Tokyo,"

  features = _features(squad_data, examples, ours_tok, 24, 8, 6, True)
  want = _features(orig, want_examples, theirs_tok, 24, 8, 6, True)
  assert [_feature_tuple(f) for f in features] == [_feature_tuple(f) for f in want]
  # The facts worked out by hand for the golden example.
  assert [f.unique_id for f in features] == list(range(1000000000, 1000000006))
  assert [(f.start_position, f.end_position) for f in features] == [
      (14, 14), (0, 0), (0, 0), (0, 0), (18, 20), (10, 12)]
  assert [sum(f.input_mask) for f in features[:3]] == [24, 24, 20]
  assert features[0].tokens[14] == "1895"
  assert features[4].tokens[18:21] == ["to", "##ky", "##o"]
  flags_window_1 = [features[1].token_is_max_context[p] for p in range(8, 23)]
  assert flags_window_1 == [False] * 4 + [True] * 8 + [False] * 3

  # write_predictions with the golden logits, v1 then v2: the original's files, byte for byte,
  # and the numbers worked out by hand.
  predict_examples = squad_data.read_squad_examples(path, False)
  predict_features = _features(squad_data, predict_examples, ours_tok, 24, 8, 6, False)
  results = [run_squad.RawResult(f.unique_id, *_golden_logits(f)) for f in predict_features]
  for v2 in (False, True):
    got = _write_both(orig, predict_examples, predict_features, results, tmp_path / str(v2),
                      n_best_size=3, max_answer_length=30, v2=v2)
    predictions, nbest, null_odds = (json.loads(got[name]) if name in got else None
                                     for name in ("predictions.json", "nbest_predictions.json",
                                                  "null_odds.json"))
    assert predictions == {"q1": "1895", "q2": "1895"}
    entries = [{"text": "1895", "probability": 0.8807970779778823, "start_logit": 5.0,
                "end_logit": 5.0},
               {"text": "Tokyo", "probability": 0.11920292202211755, "start_logit": 4.0,
                "end_logit": 4.0}]
    if v2:
      entries[0]["probability"] = 0.8805369017749616
      entries[1]["probability"] = 0.11916771100200385
      entries.append({"text": "", "probability": 0.00029538722303456454, "start_logit": 1.0,
                      "end_logit": 1.0})
      assert null_odds == {"q1": -8.0, "q2": -8.0}
    else:
      assert null_odds is None
    assert nbest == {"q1": entries, "q2": entries}


# ----------------------------------------------------------------------------
# Reading, features and records on real data.

@pytest.mark.parametrize("name,v2", [("xquad.en.json", False), ("squad2_part_a.json", True),
                                     ("hf_tiny_squad2_fixture.json", True)])
def test_read_squad_examples_matches_the_original(orig, squad2_train, name, v2):
  path = str(shared_path("data", "squad", name))
  modes = [(path, False, v2), (path, False, False)]
  modes.append((squad2_train, True, True) if name == "squad2_part_a.json" else (path, True, v2))
  for input_file, is_training, version_2 in modes:
    with original_flags(version_2_with_negative=version_2):
      want = orig.read_squad_examples(input_file, is_training)
    got = squad_data.read_squad_examples(input_file, is_training, version_2)
    assert len(got) > 10
    assert [_example_tuple(e) for e in got] == [_example_tuple(e) for e in want]
    if is_training and version_2:
      assert sum(e.is_impossible for e in got) > 5


def test_squad_whitespace_and_skipped_answers(orig, tmp_path):
  """Context whitespace is SQuAD's (U+202F yes, U+00A0 no); an answer whose text is not in
  its words is skipped (even "Lead<U+00A0>word": the answer is split on Python's whitespace,
  the context is not); start_position 0 hides the positions from repr, as the original."""
  context = " Lead\u00a0word\u202fnext\tone\r\nlast\u3000word  "
  qas = [{"id": "a", "question": "q?", "answers": [{"text": "Lead\u00a0word", "answer_start": 1}]},
         {"id": "z", "question": "q?", "answers": [{"text": "Lead", "answer_start": 1}]},
         {"id": "b", "question": "q?", "answers": [{"text": "next one", "answer_start": 11}]},
         {"id": "c", "question": "q?", "answers": [{"text": "xyz", "answer_start": 11}]},
         {"id": "d", "question": "q?", "answers": [{"text": "word", "answer_start": 25}]}]
  path = tmp_path / "ws.json"
  path.write_text(json.dumps({"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}))
  with original_flags(version_2_with_negative=False):
    want = orig.read_squad_examples(str(path), True)
  got = squad_data.read_squad_examples(str(path), True)
  assert [_example_tuple(e) for e in got] == [_example_tuple(e) for e in want]
  assert [e.qas_id for e in got] == ["z", "b", "d"]
  assert [(e.start_position, e.end_position) for e in got] == [(0, 0), (1, 2), (3, 3)]
  assert "start_position" not in repr(got[0]) and "start_position: 1" in repr(got[1])
  assert got[0].doc_tokens == ["Lead\u00a0word", "next", "one", "last\u3000word"]
  assert squad_data.split_context(" a b")[1] == [-1, 0, 0, 1]


@pytest.mark.parametrize("max_seq_length,doc_stride,max_query_length",
                         [(384, 128, 64), (64, 16, 12), (40, 7, 30)])
def test_training_features_match_the_original(orig, tokenizers, squad2_train, caplog,
                                              max_seq_length, doc_stride, max_query_length):
  """Every field of every window of 150 SQuAD 2.0 training questions (impossible ones,
  answers outside windows, truncated questions), and the log lines of the first 20."""
  ours, theirs = tokenizers
  with original_flags(version_2_with_negative=True):
    want_examples = orig.read_squad_examples(squad2_train, True)[:150]
  examples = squad_data.read_squad_examples(squad2_train, True, True)[:150]
  logs = {}
  for name, module, tokenizer, exs in (("theirs", orig, theirs, want_examples),
                                       ("ours", run_squad, ours, examples)):
    caplog.clear()
    with caplog.at_level(logging.INFO):
      logs[name + "_features"] = _features(module, exs, tokenizer, max_seq_length, doc_stride,
                                           max_query_length, True)
    logs[name] = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
  got, want = logs["ours_features"], logs["theirs_features"]
  assert [_feature_tuple(f) for f in got] == [_feature_tuple(f) for f in want]
  assert logs["ours"] == logs["theirs"]
  assert logs["ours"].count("*** Example ***") == sum(f.example_index < 20 for f in got)
  assert "impossible example" in logs["ours"]
  assert any(f.is_impossible for f in got)
  if max_seq_length < 100:
    assert any(not f.is_impossible and f.start_position == 0 for f in got)  # outside
    assert any(f.start_position > 0 for f in got)
    assert max(f.doc_span_index for f in got) > 3


@pytest.mark.parametrize("max_seq_length,doc_stride,max_query_length", [(384, 128, 64),
                                                                        (48, 10, 8)])
def test_predict_features_match_the_original(orig, tokenizers, max_seq_length, doc_stride,
                                             max_query_length):
  ours, theirs = tokenizers
  path = str(shared_path("data", "squad", "xquad.en.json"))
  with original_flags(version_2_with_negative=False):
    want_examples = orig.read_squad_examples(path, False)[:120]
  examples = squad_data.read_squad_examples(path, False)[:120]
  want = _features(orig, want_examples, theirs, max_seq_length, doc_stride, max_query_length,
                   False)
  got = _features(squad_data, examples, ours, max_seq_length, doc_stride, max_query_length,
                  False)
  assert [_feature_tuple(f) for f in got] == [_feature_tuple(f) for f in want]


def test_check_is_max_context_and_windows(orig):
  spans = squad_data.doc_spans_of(11, 5, 3)
  assert spans == [(0, 5), (3, 5), (6, 5)]
  owner = [[run_squad._check_is_max_context(spans, i, p) for i in range(3)].index(True)
           for p in range(11)]
  assert owner == [0] * 4 + [1] * 3 + [2] * 4
  rng = np.random.RandomState(0)
  DocSpan = collections.namedtuple("DocSpan", ["start", "length"])
  for _ in range(100):
    n, width, stride = rng.randint(1, 40), rng.randint(1, 12), rng.randint(1, 12)
    spans = squad_data.doc_spans_of(n, width, stride)
    theirs = [DocSpan(*s) for s in spans]
    for p in range(n):
      for i in range(len(spans)):
        assert (run_squad._check_is_max_context(spans, i, p) ==
                orig._check_is_max_context(theirs, i, p))


def test_tfrecords_match_the_original(orig, tokenizers, squad2_train, tmp_path):
  ours_tok, theirs_tok = tokenizers
  for is_training in (True, False):
    with original_flags(version_2_with_negative=True):
      want_examples = orig.read_squad_examples(squad2_train, is_training)[:40]
    examples = squad_data.read_squad_examples(squad2_train, is_training, True)[:40]
    theirs = orig.FeatureWriter(str(tmp_path / f"theirs{is_training}"), is_training)
    orig.convert_examples_to_features(want_examples, theirs_tok, 64, 16, 12, is_training,
                                      theirs.process_feature)
    theirs.close()
    ours = run_squad.FeatureWriter(str(tmp_path / f"ours{is_training}"), is_training)
    squad_data.convert_examples_to_features(examples, ours_tok, 64, 16, 12, is_training,
                                            ours.process_feature)
    assert not os.path.exists(ours.filename)   # written under a temporary name until closed
    ours.close()
    assert ours.num_features == theirs.num_features > 40
    got = [r.numpy() for r in tf.data.TFRecordDataset(ours.filename)]
    want = [r.numpy() for r in tf.data.TFRecordDataset(theirs.filename)]
    assert got == want  # byte for byte
    names = set(tf.train.Example.FromString(got[0]).features.feature)
    assert names == ({"unique_ids", "input_ids", "input_mask", "segment_ids"} |
                     ({"start_positions", "end_positions", "is_impossible"} if is_training
                      else set()))
    decoded = run_squad.decode_fn(64, is_training)(got[1])
    assert decoded["unique_ids"].numpy() == 1000000001 and decoded["input_ids"].shape == [64]
    assert ("start_positions" in decoded) == is_training
    assert all(v.dtype == tf.int32 for v in decoded.values())
  assert not list(tmp_path.glob("*.tmp"))


# ----------------------------------------------------------------------------
# write_predictions and get_final_text.

_OUTPUTS = ("predictions.json", "nbest_predictions.json", "null_odds.json")


def _write_both(orig, examples, features, results, out, n_best_size, max_answer_length, v2,
                threshold=0.0, do_lower_case=True):
  """Runs ours and the original's write_predictions; asserts their files are identical;
  returns ours {file name: text}."""
  texts = {}
  for side in ("ours", "theirs"):
    directory = out / side
    directory.mkdir(parents=True)
    paths = [str(directory / name) for name in _OUTPUTS]
    if side == "ours":
      run_squad.write_predictions(examples, features, results, n_best_size, max_answer_length,
                                  do_lower_case, *paths, version_2_with_negative=v2,
                                  null_score_diff_threshold=threshold)
    else:
      raw = [orig.RawResult(*r) for r in results]
      with original_flags(version_2_with_negative=v2, null_score_diff_threshold=threshold,
                          verbose_logging=False):
        orig.write_predictions(examples, features, raw, n_best_size, max_answer_length,
                               do_lower_case, *paths)
    texts[side] = {p.name: p.read_text(encoding="utf-8") for p in directory.iterdir()}
  assert texts["ours"] == texts["theirs"]
  assert sorted(texts["ours"]) == sorted(_OUTPUTS[:3 if v2 else 2])
  return texts["ours"]


def _random_results(features, seed):
  """Logits in steps of 0.5 (many ties), as Python floats of float32 values; every third
  example has a high null score (logits at [CLS] + 6 in all its windows)."""
  rng = np.random.RandomState(seed)
  results = []
  for f in features:
    logits = (np.round(rng.normal(0, 2, (2, len(f.input_ids))) * 2) / 2).astype(np.float32)
    logits[:, 0] += 6.0 * (f.example_index % 3 == 0)
    results.append(run_squad.RawResult(f.unique_id, [float(x) for x in logits[0]],
                                       [float(x) for x in logits[1]]))
  return results


@pytest.mark.parametrize("name,v2,n_best_size,max_answer_length,threshold", [
    ("xquad.en.json", False, 20, 30, 0.0),
    ("xquad.en.json", False, 3, 4, 0.0),
    ("squad2_part_a.json", True, 20, 30, 0.0),
    ("squad2_part_a.json", True, 8, 10, -2.5),
    ("hf_tiny_squad2_fixture.json", True, 7, 3, 1.0),
])
def test_write_predictions_matches_the_original(orig, tokenizers, tmp_path, name, v2,
                                                n_best_size, max_answer_length, threshold):
  """Windows of 64 tokens (several per question), random logits with ties: the three files
  are the original's, byte for byte."""
  ours_tok, _ = tokenizers
  path = str(shared_path("data", "squad", name))
  examples = squad_data.read_squad_examples(path, False)[:80]
  features = _features(squad_data, examples, ours_tok, 64, 24, 16, False)
  results = _random_results(features, seed=n_best_size)
  got = _write_both(orig, examples, features, results, tmp_path, n_best_size,
                    max_answer_length, v2, threshold)
  predictions = json.loads(got["predictions.json"])
  assert list(predictions) == [e.qas_id for e in examples]
  if v2:
    assert "" in predictions.values() and set(predictions.values()) != {""}


def test_v2_without_any_valid_span(orig, golden, tmp_path):
  """v2, every top start in the question: the original crashes (best_non_null_entry is
  None); ours puts the nonce ("empty", 0, 0) first, as the original's v1 does with no span,
  and predicts "" when the null score beats it."""
  vocab = str(golden / "vocab.txt")
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  examples = squad_data.read_squad_examples(str(golden / "golden.json"), False)[:1]
  features = _features(squad_data, examples, tokenizer, 24, 8, 6, False)
  results = []
  for f in features:
    start = [0.0] * 24
    start[1] = 9.0  # a question token
    results.append(run_squad.RawResult(f.unique_id, start, [0.5] + [0.0] * 23))
  paths = [str(tmp_path / name) for name in _OUTPUTS]
  with original_flags(version_2_with_negative=True, null_score_diff_threshold=0.0):
    with pytest.raises(AttributeError):
      orig.write_predictions(examples, features, [orig.RawResult(*r) for r in results], 1, 30,
                             True, *paths)
  predictions, nbest, null_odds = run_squad.write_predictions(
      examples, features, results, 1, 30, True, *paths, version_2_with_negative=True)
  assert predictions == {"q1": ""} and null_odds == {"q1": 0.5}
  assert [(e["text"], e["start_logit"], e["end_logit"]) for e in nbest["q1"]] == [
      ("empty", 0.0, 0.0), ("", 0.0, 0.5)]


FINAL_TEXT_CASES = [
    ("steve smith", "Steve Smith's", True), ("1895", "(1895-1943).", True),
    ("japan", "Japanese", True), ("cafe", "Café", True), ("café", "Café,", False),
    ("john johanson", "John Johanson's,", True),
]
ORIG_TEXTS = ["Steve Smith's", "(1895-1943).", "Café au lait, naïve résumé!", "İstanbul's İzmir",
              "ﬁnance ﬂow Straße", "U.S.-based A.B.C. (Ltd.)", "北京大学 in Beijing",
              "Ｆｕｌｌ　width", "tab\tand\u00a0nbsp", "e\u0301clair ÉCLAIR", "«quoted» — dash…"]


def test_get_final_text_matches_the_original(orig):
  for pred, text, lower in FINAL_TEXT_CASES:
    with original_flags(verbose_logging=True):
      want = orig.get_final_text(pred, text, lower)
    assert run_squad.get_final_text(pred, text, lower, verbose_logging=True) == want
  assert [run_squad.get_final_text(*case) for case in FINAL_TEXT_CASES] == [
      "Steve Smith", "1895", "Japan", "Café", "Café,", "John Johanson"]
  # Every contiguous run of basic tokens of tricky texts, plus a few absent ones.
  basic = {lower: oracle.original("tokenization").BasicTokenizer(do_lower_case=lower)
           for lower in (True, False)}
  checked = 0
  for text in ORIG_TEXTS:
    for lower in (True, False):
      tokens = basic[lower].tokenize(text)
      preds = [" ".join(tokens[i:j]) for i in range(len(tokens))
               for j in range(i + 1, len(tokens) + 1)] + ["absent", ""]
      for pred in preds:
        with original_flags(verbose_logging=False):
          want = orig.get_final_text(pred, text, lower)
        assert run_squad.get_final_text(pred, text, lower) == want, (pred, text, lower)
        checked += 1
  assert checked > 300


def test_get_best_indexes_and_softmax_match_the_original(orig):
  assert squad_predictions._get_best_indexes([0.1, 0.5, 0.5, -1.0, 0.3], 3) == [1, 2, 4]
  rng = np.random.RandomState(1)
  for _ in range(50):
    logits = [float(x) for x in np.round(rng.normal(size=rng.randint(1, 60)), 1)]
    n = rng.randint(1, 25)
    assert squad_predictions._get_best_indexes(logits, n) == orig._get_best_indexes(logits, n)
    assert squad_predictions._compute_softmax(logits) == orig._compute_softmax(logits)
  assert squad_predictions._compute_softmax([]) == []


# ----------------------------------------------------------------------------
# The span head and the loss.

def _tiny_config(**overrides):
  return modeling.BertConfig(**{**TINY, "vocab_size": 100, "max_position_embeddings": 32,
                                **overrides})


def _inputs(batch=3, seq=12, seed=0):
  rng = np.random.RandomState(seed)
  ids = rng.randint(1, 100, (batch, seq)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 8:] = 0
  segments = np.zeros_like(ids)
  segments[:, 5:] = 1
  return ids, mask, segments


def _original_graph(config, ids, mask, segments, body):
  """Builds the original create_model(is_training=False) in a TF1 graph and calls
  body(session-less graph, start_logits, end_logits)."""
  import tensorflow.compat.v1 as tf1
  orig = oracle.original("run_squad")
  original_modeling = oracle.original("modeling")
  tf1.disable_v2_tensorshape()
  try:
    with tf.Graph().as_default():
      start, end = orig.create_model(
          original_modeling.BertConfig.from_dict(config.to_dict()), False, tf1.constant(ids),
          tf1.constant(mask), tf1.constant(segments), False)
      return body(start, end)
  finally:
    tf1.enable_v2_tensorshape()


def test_span_head_against_the_original_graph(tmp_path):
  """Our TF1 checkpoint restores in the original's create_model graph (same names and
  shapes, nothing extra) with the same start/end logits; the original graph's checkpoint
  loads into ours with the same logits."""
  import tensorflow.compat.v1 as tf1
  config = _tiny_config(initializer_range=0.2)
  ids, mask, segments = _inputs()
  model = modeling.BertSquad(config)
  with tf.init_scope():
    model.squad.output_bias.assign([0.3, -0.2])
  ours_prefix = str(tmp_path / "ours" / "model.ckpt")
  written = checkpoints.save_tf1_checkpoint(model, ours_prefix)
  assert written[-2:] == ["cls/squad/output_weights", "cls/squad/output_bias"]
  outputs = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
  ours = (outputs["start_logits"].numpy(), outputs["end_logits"].numpy())
  assert ours[0].shape == (3, 12) and outputs["start_logits"].dtype == tf.float32
  theirs_prefix = str(tmp_path / "theirs" / "model.ckpt")

  def body(start, end):
    graph_vars = {v.op.name: v.shape.as_list() for v in tf1.global_variables()}
    assert graph_vars == {n: list(s) for n, s in tf.train.list_variables(ours_prefix)}
    assert graph_vars["cls/squad/output_weights"] == [2, 32]
    with tf1.Session() as sess:
      saver = tf1.train.Saver()
      saver.restore(sess, ours_prefix)
      restored = sess.run([start, end])
      sess.run(tf1.global_variables_initializer())   # fresh (original) weights
      fresh = sess.run([start, end])
      saver.save(sess, theirs_prefix)
    return restored, fresh

  restored, fresh = _original_graph(config, ids, mask, segments, body)
  np.testing.assert_allclose(restored[0], ours[0], atol=1e-5)
  np.testing.assert_allclose(restored[1], ours[1], atol=1e-5)
  assert np.abs(ours[0] - ours[1]).max() > 1e-2   # two different rows of output_weights
  other = modeling.BertSquad(config)
  result = checkpoints.load_checkpoint(other, theirs_prefix)
  assert not result.missing and "cls/squad/output_bias" in result.loaded
  outputs = other({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
  np.testing.assert_allclose(outputs["start_logits"].numpy(), fresh[0], atol=1e-5)
  np.testing.assert_allclose(outputs["end_logits"].numpy(), fresh[1], atol=1e-5)


def _stand_in_estimator(monkeypatch):
  """tf.estimator is gone from TF 2.21: a stand-in for what the original's model_fn reads of it
  (the mode keys) and builds (a TPUEstimatorSpec, here the dict of its fields)."""
  import tensorflow.compat.v1 as tf1
  monkeypatch.setattr(tf1, "estimator", types.SimpleNamespace(
      ModeKeys=types.SimpleNamespace(TRAIN="train", PREDICT="infer"),
      tpu=types.SimpleNamespace(TPUEstimatorSpec=lambda **spec: spec)), raising=False)


@pytest.mark.slow
def test_loss_matches_the_original_model_fn(tmp_path, monkeypatch):
  """The original model_fn in TRAIN mode (dropout 0, warm-started from our checkpoint):
  its total_loss equals the batch mean of modeling.squad_loss. tf.estimator is gone from
  TF 2.21, so a stand-in carries the mode key and the returned TPUEstimatorSpec's fields."""
  import tensorflow.compat.v1 as tf1
  orig = oracle.original("run_squad")
  original_modeling = oracle.original("modeling")
  config = _tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        initializer_range=0.2)
  model = modeling.BertSquad(config)
  prefix = str(tmp_path / "model.ckpt")
  checkpoints.save_tf1_checkpoint(model, prefix)
  ids, mask, segments = _inputs()
  starts, ends = np.array([3, 0, 11], np.int32), np.array([4, 0, 7], np.int32)
  outputs = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments},
                  training=True)
  per_example = modeling.squad_loss(outputs["start_logits"], outputs["end_logits"], starts,
                                    ends).numpy()
  assert per_example.shape == (3,)
  _stand_in_estimator(monkeypatch)
  tf1.disable_v2_tensorshape()
  try:
    with tf.Graph().as_default():
      model_fn = orig.model_fn_builder(original_modeling.BertConfig.from_dict(config.to_dict()),
                                       prefix, 1e-3, 10, 1, False, False)
      features = {"unique_ids": tf1.constant([1, 2, 3]), "input_ids": tf1.constant(ids),
                  "input_mask": tf1.constant(mask), "segment_ids": tf1.constant(segments),
                  "start_positions": tf1.constant(starts), "end_positions": tf1.constant(ends)}
      spec = model_fn(features, None, "train", {})
      with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        theirs = sess.run(spec["loss"])
  finally:
    tf1.enable_v2_tensorshape()
  np.testing.assert_allclose(per_example.mean(), theirs, rtol=1e-5)
  assert theirs > 1.0


def _training_records(path, num_records, seq, seed):
  """num_records random training windows (ids 1..40 of a vocabulary of 100, masks of 4..seq
  tokens, segments, start <= end inside the tokens, some at [CLS]) written by
  run_squad.FeatureWriter to `path`."""
  rng = np.random.RandomState(seed)
  writer = run_squad.FeatureWriter(path, is_training=True)
  for i in range(num_records):
    length = rng.randint(4, seq + 1)
    ids = np.zeros(seq, np.int32)
    ids[:length] = rng.randint(1, 41, length)
    mask = (np.arange(seq) < length).astype(np.int32)
    segments = ((np.arange(seq) >= length // 3) & (mask == 1)).astype(np.int32)
    start = 0 if i % 5 == 0 else rng.randint(1, length)
    end = 0 if start == 0 else rng.randint(start, min(start + 4, length))
    writer.process_feature(squad_data.InputFeatures(
        unique_id=squad_data.FIRST_UNIQUE_ID + i, example_index=i, doc_span_index=0,
        tokens=None, token_to_orig_map={}, token_is_max_context={}, input_ids=list(ids),
        input_mask=list(mask), segment_ids=list(segments), start_position=int(start),
        end_position=int(end), is_impossible=False))
  writer.close()


def _train_the_original(config, init_checkpoint, batches, learning_rate, num_train_steps,
                        num_warmup_steps, monkeypatch, one_hot=False, restarts=()):
  """The original model_fn's train_op (its create_optimizer: warmup, linear decay, global-norm
  clip 1.0, AdamWeightDecayOptimizer) in a TF1 session, warm-started from init_checkpoint,
  one step per batch. A state is {name: value} of every variable of the graph: the weights,
  their <name>/adam_m and <name>/adam_v slots, global_step.

  -> (losses, states, restarted, norms): the loss of each step; the state before the first
  step and after each; for each (step, state) of `restarts`, the state after one step on
  batches[step] from `state` (loaded into the graph's variables); for each step, the global
  norm of the gradients as tf.clip_by_global_norm takes it (of an IndexedSlices gradient,
  its values), and that of the dense gradients.
  """
  import tensorflow.compat.v1 as tf1
  orig = oracle.original("run_squad")
  original_modeling = oracle.original("modeling")
  _stand_in_estimator(monkeypatch)
  tf1.disable_v2_tensorshape()
  try:
    with tf.Graph().as_default():
      model_fn = orig.model_fn_builder(
          original_modeling.BertConfig.from_dict(config.to_dict()), init_checkpoint,
          learning_rate, num_train_steps, num_warmup_steps, False, one_hot)
      seq = batches[0]["input_ids"].shape[1]
      features = {"unique_ids": tf1.placeholder(tf.int32, [None]),
                  "start_positions": tf1.placeholder(tf.int32, [None]),
                  "end_positions": tf1.placeholder(tf.int32, [None])}
      for name in ("input_ids", "input_mask", "segment_ids"):
        features[name] = tf1.placeholder(tf.int32, [None, seq])
      spec = model_fn(features, None, "train", {})
      variables = {v.op.name: v for v in tf1.global_variables()}
      grads = [g for g in tf1.gradients(spec["loss"], tf1.trainable_variables())
               if g is not None]
      norms = (tf1.global_norm(grads), tf1.global_norm([tf1.convert_to_tensor(g)
                                                        for g in grads]))
      with tf1.Session() as sess:

        def step(batch):
          feed = {features[k]: batch[k] for k in features}
          norm = sess.run(norms, feed)
          loss, _ = sess.run([spec["loss"], spec["train_op"]], feed)
          return float(loss), norm

        sess.run(tf1.global_variables_initializer())
        states = [sess.run(variables)]
        losses, global_norms = [], []
        for batch in batches:
          loss, norm = step(batch)
          losses.append(loss)
          global_norms.append(norm)
          states.append(sess.run(variables))
        restarted = []
        for index, state in restarts:
          for name, variable in variables.items():
            variable.load(state[name], sess)
          step(batches[index])
          restarted.append(sess.run(variables))
        return losses, states, restarted, global_norms
  finally:
    tf1.enable_v2_tensorshape()


def _our_state(trainer, names):
  """Our trainer's state under the original's names (see _train_the_original)."""
  optimizer = trainer.optimizer
  state = {"global_step": trainer.global_step.numpy()}
  for name, variable in names.items():
    index = optimizer._get_variable_index(variable)
    state[name] = variable.numpy()
    state[name + "/adam_m"] = optimizer._adam_m[index].numpy()
    state[name + "/adam_v"] = optimizer._adam_v[index].numpy()
  return state


@pytest.mark.slow
def test_training_matches_the_original_model_fn(tmp_path, monkeypatch):
  """Differential training: run_squad's own path (training.build_trainer with SquadTask and
  optimization.create_optimizer, training.fine_tune over run_squad's TFRecords, warm-started
  from --init_checkpoint) against the original model_fn's train_op in a TF1 session, from
  the same checkpoint on the same batches in the same order (dropout 0), 6 steps of which 2
  warmup (the first at learning rate 0), learning rate 1e-3.

  * Step by step: the original restarted from our state after step s-1 gives our state
    after step s (weights, Adam's m and v) to float rounding, with the original's one-hot
    embedding lookup (its TPU path).
  * Its default gather lookup (CPU/GPU) clips differently: tf.clip_by_global_norm takes the
    norm of the word-embedding gradient's IndexedSlices values, one row per token, before
    repeated tokens are summed; ours (and its one-hot path) the norm of the summed gradient.
    So the clipped gradients differ by a factor, visible in m after the first step.
  * Free-running from the same checkpoint (the gather lookup): the same per-step losses
    (rtol 1e-4) and learning rates; final weights within 0.5% of how far each tensor moved
    (Frobenius norm; seen: up to 0.09%) and 1e-3 element-wise (seen: up to 2e-4, a ~1e-2
    move). Not to rounding: the trajectories drift apart because Adam divides by
    sqrt(v) + 1e-6, so an element whose gradient is near 1e-6 moves in proportion to it, and
    the ~1e-7 gradient differences that rounding leaves after a step or two become ~1e-5
    weight differences there (more with higher learning rates or more steps).
  * Word-embedding rows that no batch uses move by weight decay alone, on both sides.
  * The pooler has no gradient: both leave it alone (no weight decay).
  """
  keras.utils.set_random_seed(1)
  config = _tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        initializer_range=0.2, max_position_embeddings=16)
  batch_size, seq, num_train_steps, learning_rate = 4, 16, 6, 1e-3
  init_checkpoint = str(tmp_path / "init" / "model.ckpt")
  checkpoints.save_tf1_checkpoint(modeling.BertSquad(config), init_checkpoint)
  records = str(tmp_path / "train.tf_record")
  _training_records(records, 4 * batch_size, seq, seed=3)
  options = run_squad.options(
      output_dir=str(tmp_path / "ours"), init_checkpoint=init_checkpoint,
      learning_rate=learning_rate, train_batch_size=batch_size, log_every_steps=1,
      warmup_proportion=0.4)
  num_warmup_steps = int(num_train_steps * options.warmup_proportion)   # as run_squad
  assert num_warmup_steps == 2

  # Ours, as run_squad._train_predict builds and trains it; its state after every step.
  trainer = training.build_trainer(options, distribution.strategy_for(options),
                                   lambda: modeling.BertSquad(config), run_squad.SquadTask(),
                                   num_train_steps, num_warmup_steps)
  names = checkpoints.tf1_variable_map(trainer.model)
  logged, ours = [], [None]

  def log(step, stats):
    logged.append((step, stats))
    ours.append(_our_state(trainer, names))

  decode = run_squad.decode_fn(seq, is_training=True)
  training.fine_tune(trainer, options, records, decode, num_train_steps, log_fn=log)
  assert [step for step, _ in logged] == list(range(1, num_train_steps + 1))

  # The batches fine_tune read, in its order (its input pipeline is seeded): the original's.
  dataset = input_pipeline.training_dataset([records], decode, batch_size, seed=options.seed)
  batches = list(dataset.take(num_train_steps).as_numpy_iterator())
  assert len({u for b in batches for u in b["unique_ids"]}) > batch_size
  original = functools.partial(_train_the_original, config, init_checkpoint, batches,
                               learning_rate, num_train_steps, num_warmup_steps, monkeypatch)
  losses, theirs, _, norms = original()
  one_hot_losses, one_hot, restarted, _ = original(
      one_hot=True, restarts=[(step, ours[step]) for step in range(1, num_train_steps)])
  initial = theirs[0]
  pooler = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")
  assert set(theirs[0]) == set(ours[1]) - {n + slot for n in pooler
                                           for slot in ("/adam_m", "/adam_v")}

  ours_losses = [stats["loss"] for _, stats in logged]
  np.testing.assert_allclose(ours_losses, losses, rtol=1e-4)
  np.testing.assert_allclose(ours_losses, one_hot_losses, rtol=1e-4)
  assert min(losses) > 1.0
  # The learning rate of update t (t = 0..5): warmup, then linear decay to 0 at step 6.
  rates = [learning_rate * t / num_warmup_steps if t < num_warmup_steps else
           learning_rate * (1.0 - t / num_train_steps) for t in range(num_train_steps)]
  np.testing.assert_allclose([stats["learning_rate"] for _, stats in logged[:-1]], rates[1:],
                             rtol=1e-6)   # logged after step s: the rate of update s

  # Step by step from the same state (the original's one-hot lookup). Gradients that are 0
  # mathematically (a softmax over positions ignores a shift) are rounding noise of ~1e-8,
  # below Adam's epsilon: m / (sqrt(v) + 1e-6) turns their differences into updates of up to
  # ~lr * 1e-2 (elsewhere the weights agree to a few ulps).
  no_gradient = ("bert/encoder/layer_0/attention/self/key/bias",
                 "bert/encoder/layer_1/attention/self/key/bias",
                 "bert/encoder/layer_1/output/LayerNorm/beta", "cls/squad/output_bias")
  for step in range(1, num_train_steps + 1):
    want = one_hot[1] if step == 1 else restarted[step - 2]
    assert want["global_step"] == ours[step]["global_step"] == step
    for name in sorted(set(want) - {"global_step"} - set(pooler)):
      if name.endswith(("/adam_m", "/adam_v")):
        rtol, atol = 1e-5, 1e-7 if name.endswith("/adam_m") else 1e-9
      else:   # a weight decay of lr * 0.01 * w per step shows: no rtol
        rtol, atol = 0.0, 1e-5 if name in no_gradient else 2e-6
      np.testing.assert_allclose(ours[step][name], want[name], rtol=rtol, atol=atol,
                                 err_msg=f"step {step}: {name}")

  # The original's gather lookup clips by another norm (the padding and the repeated ids of
  # every batch make it differ): after step 1 (learning rate 0, the same weights) its m is
  # ours times the ratio of the two clipping factors, for every variable.
  clipped_norm, dense_norm = norms[0]
  ratio = max(dense_norm, 1.0) / max(clipped_norm, 1.0)
  assert clipped_norm > 1.0 and abs(ratio - 1.0) > 1e-4   # clipped, by another factor
  for name in [name for name in theirs[1] if name.endswith("/adam_m")]:
    np.testing.assert_allclose(theirs[1][name], ratio * ours[1][name], rtol=1e-5, atol=1e-7,
                               err_msg=name)

  # Free-running: the final weights (the original's default, gather lookup).
  for name in sorted(set(names) - set(pooler)):
    np.testing.assert_allclose(ours[-1][name], theirs[-1][name], rtol=0, atol=1e-3,
                               err_msg=name)
    moved = theirs[-1][name] - initial[name]
    if name in no_gradient:
      assert np.abs(moved).max() < 5e-5, name
    else:
      assert np.abs(moved).max() > 3e-3, name
      assert (np.linalg.norm(ours[-1][name] - theirs[-1][name]) <
              5e-3 * np.linalg.norm(moved)), name

  # Rows of word_embeddings no batch uses: weight decay alone, exactly.
  decayed = np.prod([1.0 - 0.01 * rate for rate in rates])
  unused = sorted(set(range(config.vocab_size)) - {int(i) for b in batches
                                                   for i in b["input_ids"].ravel()})
  assert len(unused) >= 50
  rows = initial["bert/embeddings/word_embeddings"][unused]
  for side in (ours[-1], theirs[-1]):
    np.testing.assert_allclose(side["bert/embeddings/word_embeddings"][unused],
                               rows * decayed, rtol=0, atol=2e-7)
  assert np.abs(rows * decayed - rows).max() > 3e-6

  # The pooler (unread by the span head) has no gradient: both optimizers leave it alone
  # (no weight decay either), and ours makes no update of its Adam slots.
  for name in pooler:
    np.testing.assert_array_equal(theirs[-1][name], initial[name])
    np.testing.assert_array_equal(ours[-1][name], initial[name])
    assert not ours[-1][name + "/adam_m"].any() and not ours[-1][name + "/adam_v"].any()


def test_squad_model_config_round_trip_and_head():
  model = modeling.BertSquad(_tiny_config())
  clone = modeling.BertSquad.from_config(model.get_config())
  assert clone.config == model.config
  assert [v.shape for v in clone.weights] == [v.shape for v in model.weights]
  w = model.squad.output_weights.numpy()
  assert w.shape == (2, 32) and np.abs(w).max() <= 0.04 + 1e-6 and 0.005 < w.std() < 0.03
  assert not model.squad.output_bias.numpy().any()
  names = list(checkpoints.tf1_variable_map(model))
  assert names[-2:] == ["cls/squad/output_weights", "cls/squad/output_bias"]
  assert not any(n.startswith("output_") for n in names)
  # No dropout in the head: with the encoder's dropout off, training changes nothing.
  quiet = modeling.BertSquad(_tiny_config(hidden_dropout_prob=0.0,
                                          attention_probs_dropout_prob=0.0))
  ids = np.ones((2, 8), np.int32)
  np.testing.assert_array_equal(quiet(ids, training=True)["start_logits"].numpy(),
                                quiet(ids, training=False)["start_logits"].numpy())


# ----------------------------------------------------------------------------
# The command line.

@pytest.mark.slow
def test_flags_match_the_original():
  """Every flag of the original run_squad exists with the same type and default."""
  want, got = oracle.original_and_our_flags("run_squad", env=ENV)
  assert len(want) == 30 and got == want
  assert {n: run_squad.DEFAULTS[n] for n in want} == {n: v[0] for n, v in want.items()}


@pytest.fixture(scope="module")
def squad_run(tmp_path_factory, vocab, squad2_train):
  """A tiny config, a pretraining checkpoint, 24 training questions (SQuAD 2.0) and the
  14-question SQuAD 2.0 fixture to predict."""
  root = tmp_path_factory.mktemp("squad_run")
  config = modeling.BertConfig(**TINY)
  (root / "bert_config.json").write_text(config.to_json_string())
  checkpoints.save_tf1_checkpoint(modeling.BertPretrainer(config),
                                  str(root / "pretrained" / "bert_model.ckpt"))
  data = json.loads(pathlib.Path(squad2_train).read_text("utf-8"))
  paragraphs = data["data"][0]["paragraphs"][:3]
  qas = [qa for p in paragraphs for qa in p["qas"]]
  keep = {qa["id"] for qa in qas[:24]}
  for p in paragraphs:
    p["qas"] = [qa for qa in p["qas"] if qa["id"] in keep]
  data["data"] = [{"title": "t", "paragraphs": paragraphs}]
  (root / "train.json").write_text(json.dumps(data), encoding="utf-8")
  return root


def _command(root, vocab, out, *extra):
  return [sys.executable, str(REPO / "run_squad.py"), f"--vocab_file={vocab}",
          f"--bert_config_file={root / 'bert_config.json'}", f"--output_dir={out}",
          "--max_seq_length=64", "--doc_stride=32", "--max_query_length=16", *extra]


def _ids(path):
  data = json.loads(pathlib.Path(path).read_text("utf-8"))
  return [qa["id"] for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]]


@pytest.mark.slow
def test_train_and_predict_end_to_end(orig, tokenizers, squad_run, vocab, tmp_path):
  """The README's SQuAD 2.0 command with a tiny model, then SQuAD 1.1 prediction from that
  checkpoint (--init_checkpoint = the first output_dir)."""
  fixture = shared_path("data", "squad", "hf_tiny_squad2_fixture.json")
  with original_flags(version_2_with_negative=True):
    num_examples = len(orig.read_squad_examples(str(squad_run / "train.json"), True))
  num_steps = int(num_examples / 8 * 1.0)
  assert num_steps >= 2
  out = tmp_path / "squad2"
  cmd = _command(squad_run, vocab, out, "--do_train=True", "--do_predict=True",
                 f"--train_file={squad_run / 'train.json'}", f"--predict_file={fixture}",
                 f"--init_checkpoint={squad_run / 'pretrained' / 'bert_model.ckpt'}",
                 "--train_batch_size=8", "--learning_rate=3e-5", "--num_train_epochs=1.0",
                 "--version_2_with_negative=True", "--save_checkpoints_steps=2",
                 "--predict_batch_size=5")
  proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  for line in ("*** Example ***", "unique_id: 1000000000", "impossible example",
               "***** Running training *****", f"  Num orig examples = {num_examples}",
               f"  Num steps = {num_steps}", "***** Running predictions *****",
               "  Num orig examples = 14", "  Batch size = 5", "Processing example: 0",
               "from tf1 checkpoint"):
    assert line in proc.stderr, line
  assert (out / "model.ckpt-2.index").exists()
  assert (out / f"model.ckpt-{num_steps}.index").exists()
  assert sorted(p.name for p in out.glob("*.tf_record")) == ["eval.tf_record",
                                                             "train.tf_record"]
  assert not [p for p in out.iterdir() if ".tmp" in p.name or p.name.endswith(".lock")]
  ids = _ids(fixture)
  predictions = json.loads((out / "predictions.json").read_text())
  nbest = json.loads((out / "nbest_predictions.json").read_text())
  null_odds = json.loads((out / "null_odds.json").read_text())
  assert list(predictions) == list(nbest) == list(null_odds) == ids
  for qid in ids:
    assert abs(sum(e["probability"] for e in nbest[qid]) - 1.0) < 1e-9
    assert any(e["text"] == "" for e in nbest[qid])
    best = next(e for e in nbest[qid] if e["text"])
    assert predictions[qid] == ("" if null_odds[qid] > 0.0 else best["text"])
  # The same files from the original's features and write_predictions, on the logits of the
  # trained checkpoint.
  model = modeling.BertSquad(modeling.BertConfig(**TINY))
  checkpoints.load_checkpoint(model, str(out))
  results = run_squad.predict_results(model, str(out / "eval.tf_record"), 64, 5)
  with original_flags(version_2_with_negative=True):
    examples = orig.read_squad_examples(str(fixture), False)
  features = _features(orig, examples, tokenizers[1], 64, 32, 16, False)
  assert [r.unique_id for r in results] == [f.unique_id for f in features]
  with original_flags(version_2_with_negative=True, null_score_diff_threshold=0.0):
    orig.write_predictions(examples, features, [orig.RawResult(*r) for r in results], 20, 30,
                           True, *[str(tmp_path / name) for name in _OUTPUTS])
  assert json.loads((tmp_path / "predictions.json").read_text()) == predictions
  want_nbest = json.loads((tmp_path / "nbest_predictions.json").read_text())
  assert [[e["text"] for e in want_nbest[q]] for q in ids] == [
      [e["text"] for e in nbest[q]] for q in ids]
  np.testing.assert_allclose(
      [json.loads((tmp_path / "null_odds.json").read_text())[q] for q in ids],
      [null_odds[q] for q in ids], atol=1e-4)
  # The records read back: unique ids from 1000000000, one per window.
  records = list(tf.data.TFRecordDataset(str(out / "eval.tf_record")))
  decode = run_squad.decode_fn(64, False)
  assert [int(decode(r)["unique_ids"]) for r in records] == list(
      range(1000000000, 1000000000 + len(records)))

  xquad = json.loads(shared_path("data", "squad", "xquad.en.json").read_text("utf-8"))
  xquad["data"] = [{"title": "x", "paragraphs": xquad["data"][0]["paragraphs"][:2]}]
  (tmp_path / "dev-v1.1.json").write_text(json.dumps(xquad), encoding="utf-8")
  out1 = tmp_path / "squad1"
  proc = subprocess.run(_command(squad_run, vocab, out1, "--do_predict=True",
                                 f"--predict_file={tmp_path / 'dev-v1.1.json'}",
                                 f"--init_checkpoint={out}", "--n_best_size=4"),
                        env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "init_checkpoint: restored" in proc.stderr
  ids = _ids(tmp_path / "dev-v1.1.json")
  predictions = json.loads((out1 / "predictions.json").read_text())
  nbest = json.loads((out1 / "nbest_predictions.json").read_text())
  assert list(predictions) == list(nbest) == ids and len(ids) > 5
  assert not (out1 / "null_odds.json").exists()
  assert all(predictions[q] == nbest[q][0]["text"] and 1 <= len(nbest[q]) <= 4 for q in ids)
  assert all(predictions[q] for q in ids)
  assert not list(out1.glob("model.ckpt*"))


@pytest.mark.slow
def test_bad_input_on_the_command_line(squad_run, vocab, tmp_path):
  """One line "error: ...", a non-zero exit, no traceback and no output written."""
  good = squad_run / "train.json"
  (tmp_path / "broken.json").write_text('{"data": [{"paragraphs": [', encoding="utf-8")
  two = json.loads(good.read_text("utf-8"))
  qa = two["data"][0]["paragraphs"][0]["qas"][0]
  qa["answers"] = qa["answers"] + qa["answers"]
  qa["is_impossible"] = False
  (tmp_path / "two.json").write_text(json.dumps(two), encoding="utf-8")
  cases = {
      "neither": ([], "error: At least one of `do_train` or `do_predict` must be True."),
      "no_train_file": (["--do_train"],
                        "error: If `do_train` is True, then `train_file` must be specified."),
      "query": (["--do_predict", f"--predict_file={good}", "--max_query_length=61"],
                "error: The max_seq_length (64) must be greater than max_query_length (61) "
                "+ 3"),
      "broken": (["--do_train", f"--train_file={tmp_path / 'broken.json'}"],
                 f"error: --train_file {tmp_path / 'broken.json'}: not valid JSON"),
      "two": (["--do_train", f"--train_file={tmp_path / 'two.json'}",
               "--version_2_with_negative"],
              f"error: --train_file {tmp_path / 'two.json'}: question '{qa['id']}' has 2 "
              "answers. For training, each question should have exactly 1 answer."),
  }
  procs = {name: subprocess.Popen(_command(squad_run, vocab, tmp_path / name, *extra),
                                  env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
           for name, (extra, _) in cases.items()}
  for name, proc in procs.items():
    _, stderr = proc.communicate(timeout=120)
    message = cases[name][1]
    assert proc.returncode != 0, name
    assert "Traceback" not in stderr, stderr[-2000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(message), (name, stderr[-2000:])
    assert not (tmp_path / name).exists(), name


def test_bad_options_raise_one_line_errors(squad_run, vocab, tmp_path):
  base = dict(vocab_file=vocab, bert_config_file=str(squad_run / "bert_config.json"),
              output_dir=str(tmp_path / "out"), do_train=True,
              train_file=str(squad_run / "train.json"), version_2_with_negative=True,
              max_seq_length=64,
              max_query_length=16)

  def error(**overrides):
    with pytest.raises(ValueError) as info:
      run_squad.run(run_squad.options(**{**base, **overrides}))
    assert "\n" not in str(info.value)
    return str(info.value)

  assert error(do_train=False, do_predict=True) == (
      "If `do_predict` is True, then `predict_file` must be specified.")
  assert error(max_seq_length=256) == ("Cannot use sequence length 256 because the BERT "
                                       "model was only trained up to sequence length 128")
  assert error(train_file=str(tmp_path / "none.json")) == (
      f"--train_file {tmp_path / 'none.json'}: no such file")
  assert error(doc_stride=0) == "--doc_stride=0: must be >= 1"
  assert "do_lower_case" in error(
      do_lower_case=False, init_checkpoint="/x/uncased_L-12_H-768_A-12/bert_model.ckpt")
  bad = tmp_path / "bad.json"
  question = {"id": "k", "question": "?", "answers": [{"text": "y", "answer_start": 9}]}
  bad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "x y", "qas": [question]}]}]}))
  assert error(train_file=str(bad)) == (
      f"--train_file {bad}: question 'k': not in the SQuAD format (no key 'is_impossible')")
  assert error(train_file=str(bad), version_2_with_negative=False) == (
      f"--train_file {bad}: question 'k': answer_start 9 and the answer's 1 characters are "
      "beyond the context (3 characters)")
  bad.write_text(json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}))
  assert error(train_file=str(bad)) == (
      f"--train_file {bad}: data[0].paragraphs[0]: not in the SQuAD format (no key 'context')")
  with original_flags(version_2_with_negative=True):
    n = len(oracle.original("run_squad").read_squad_examples(base["train_file"], True))
  assert 10 < n <= 24   # the original skips the questions whose answer text is not found
  assert error(num_train_epochs=0.1) == (
      f"--num_train_epochs=0.1: {n} training examples / --train_batch_size=32 x epochs gives 0 "
      "training steps")
  assert not (tmp_path / "out").exists()
