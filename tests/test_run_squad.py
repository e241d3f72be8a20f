"""run_squad.py against the original (bert-tensorflow 1.0.4's run_squad): a hand-made golden
example (two questions, windows, synthetic logits) with its expected numbers, reading and
features on real SQuAD 1.1 / 2.0 files of ../shared, the TFRecords, write_predictions' three
files with random logits, get_final_text, and the command line end to end and on bad input.
The span head, its loss and its training against the original's graph: test_squad_model.py.
"""

import collections
import contextlib
import json
import logging
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import oracle
from conftest import shared_path
from bert_keras import checkpoints
from bert_keras import modeling
from bert_keras import run_squad
from bert_keras import tokenization
from bert_keras.tasks.squad import data as squad_data
from bert_keras.tasks.squad import predictions as squad_predictions

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
  assert error(max_seq_length=256).startswith(  # the original's message, then the flag
      "Cannot use sequence length 256 because the BERT model was only trained up to sequence "
      "length 128 (--max_seq_length=256; max_position_embeddings of ")
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
