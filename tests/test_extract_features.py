"""extract_features.py against the original: examples and features on awkward input lines,
the original main() end to end (its Estimator replaced by a stand-in: tf.estimator is gone
from TF 2.21) against ours on the same TF1 checkpoint, the flags, the command line and
its one-line errors.
"""

import json
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
from test_run_pretraining import data  # noqa: F401  (a fixture)
from bert_keras import checkpoints
from bert_keras import extract_features
from bert_keras import modeling
from bert_keras import tokenization

REPO = pathlib.Path(__file__).resolve().parent.parent
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "is", "hairy", ".", "who",
         "was", "jim", "henson", "?", "a", "puppet", "##eer", "##s", "|", "hello", "world",
         "long", "line", "b", "c", "x", "y", "you", "don", "'", "t", "!", "你", "好"]
LONG = "who was jim henson ? the dog is hairy . hello world long line b c x y you don ' t"
# Pairs, blank and whitespace-only lines, several " ||| " (split at the last), separators
# without spaces, "\r" (dropped, even inside a line), characters that str.splitlines()
# but not GFile would break lines at, a text b that tokenizes to nothing, lines that need
# truncation (single, pair with a or b longer), Unicode, no newline at the end.
INPUT = (
    "Who was Jim Henson ? ||| Jim Henson was a puppeteer\n"
    "\n"
    "   \t \n"
    "the dog is hairy .\r\n"
    "a ||| b ||| c\n"
    "a ||| ||| b\n"
    "||| leading\n"
    "trailing |||\n"
    "x |||  y\n"
    "x|||y\n"
    "the\rdog\n"
    "you\x0bdon\x0ct\x1cthe\x85dog\u2028is\n"
    "hello ||| \x00\x00\n"
    "HÉLLO wörld 你好 !\n" +
    LONG + "\n" +
    LONG + " ||| the dog\n" +
    "the dog ||| " + LONG + "\n" +
    "hello world ||| hello world\n"
    "puppeteers ||| dogs").encode("utf-8")
NUM_LINES = 19
CONFIG = dict(vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
              initializer_range=0.2)  # larger than 0.02: attention far from uniform


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """Vocab, config, a random BertModel saved as a TF1 checkpoint, the input file."""
  root = tmp_path_factory.mktemp("extract")
  (root / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
  config = modeling.BertConfig(**CONFIG)
  (root / "bert_config.json").write_text(config.to_json_string())
  keras.utils.set_random_seed(1)
  checkpoints.save_tf1_checkpoint(modeling.BertModel(config),
                                  str(root / "ckpt" / "bert_model.ckpt"))
  (root / "input.txt").write_bytes(INPUT)
  return types.SimpleNamespace(root=root, vocab=str(root / "vocab.txt"),
                               config=str(root / "bert_config.json"),
                               ckpt=str(root / "ckpt" / "bert_model.ckpt"),
                               input=str(root / "input.txt"))


def _options(tiny, **overrides):
  base = dict(input_file=tiny.input, output_file=str(tiny.root / "ours.jsonl"),
              vocab_file=tiny.vocab, bert_config_file=tiny.config, init_checkpoint=tiny.ckpt,
              layers="-1,0,-2", max_seq_length=24, batch_size=4)
  return extract_features.options(**{**base, **overrides})


# ----------------------------------------------------------------------------
# Examples and features.

@pytest.mark.parametrize("vocab_name", ["tiny", "bert-base-uncased"])
def test_examples_and_features_match_the_original(tiny, vocab_name):
  orig = oracle.original("extract_features")
  vocab = tiny.vocab if vocab_name == "tiny" else str(
      shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  for ending in (b"\n", b"\n\n"):   # a last line with a newline, a blank last line
    path = tiny.root / "ending.txt"
    path.write_bytes(INPUT + ending)
    got = extract_features.read_examples(str(path))
    assert len(got) == NUM_LINES + len(ending) - 1
    assert [(e.unique_id, e.text_a, e.text_b) for e in got] == \
        [(e.unique_id, e.text_a, e.text_b) for e in orig.read_examples(str(path))]
  got = extract_features.read_examples(tiny.input)
  want = orig.read_examples(tiny.input)
  assert len(got) == NUM_LINES
  assert [(e.unique_id, e.text_a, e.text_b) for e in got] == \
      [(e.unique_id, e.text_a, e.text_b) for e in want]
  assert (got[4].text_a, got[4].text_b) == ("a ||| b", "c")   # the last separator
  ours = tokenization.FullTokenizer(vocab, do_lower_case=True)
  theirs = oracle.original("tokenization").FullTokenizer(vocab, do_lower_case=True)
  for length in (64, 12):
    got_f = extract_features.convert_examples_to_features(got, length, ours)
    want_f = orig.convert_examples_to_features(want, length, theirs)
    fields = ("unique_id", "tokens", "input_ids", "input_mask", "input_type_ids")
    assert [[getattr(f, k) for k in fields] for f in got_f] == \
        [[getattr(f, k) for k in fields] for f in want_f]
  # Not vacuous: at 12, single texts and pairs were truncated, and pairs were packed.
  assert sum(f.input_mask[-1] == 1 for f in got_f) >= 4
  assert sum(1 in f.input_type_ids for f in got_f) >= 8


def test_parse_layers():
  assert extract_features.parse_layers("-1,0,-2, 1", 2) == [-1, 0, -2, 1]
  for bad in ("", "-1,,-2", "last", None):
    with pytest.raises(ValueError, match="--layers"):
      extract_features.parse_layers(bad, 2)
  for bad in ("-3", "2", "-1,-2,-3,-4"):
    with pytest.raises(ValueError, match="out of range.*num_hidden_layers=2"):
      extract_features.parse_layers(bad, 2)


def test_round6_is_round_of_float():
  """round6 gives the original's round(float(x), 6) for float32 x, also on exact ties
  (dyadic values with a 5 in the 7th decimal), tiny, huge, negative (-0.0), inf and nan."""
  rng = np.random.RandomState(0)
  x = np.concatenate([
      rng.randn(50000), rng.randn(20000) * 1e-6, rng.randn(20000) * 1e9,
      rng.randint(-2**20, 2**20, 20000) / 2.0 ** rng.randint(0, 30, 20000),
      [0.0078125, -0.0078125, 2.5e-6, 5e-7, -4e-7, 0.0, -0.0, 3.4e38, 1e-45, np.inf, np.nan]
  ]).astype(np.float32)
  ties = np.abs(np.modf(x.astype(np.float64) * 1e6)[0]) == 0.5
  assert ties.sum() > 500
  want = [round(float(v), 6) for v in x]
  assert json.dumps(extract_features.round6(x)) == json.dumps(want)
  assert json.dumps(extract_features.round6(x.reshape(-1, 11))) == json.dumps(
      np.array(want, dtype=object).reshape(-1, 11).tolist())


# ----------------------------------------------------------------------------
# The original main() end to end on the same checkpoint.

class _Estimator:
  """Stands in for tf.estimator.tpu.TPUEstimator (absent from TF 2.21): predict() builds
  the input_fn's dataset and the model_fn's predictions in a TF1 graph, initialises the
  variables (the model_fn's init_from_checkpoint sets their initial values from the
  checkpoint) and yields one dict of numpy values per example. The raw predictions are
  kept in `_Estimator.results`."""

  results = []

  def __init__(self, use_tpu, model_fn, config, predict_batch_size):
    assert not use_tpu
    self.model_fn, self.batch_size = model_fn, predict_batch_size

  def predict(self, input_fn, yield_single_examples=True):
    tf1 = tf.compat.v1
    params = {"batch_size": self.batch_size}
    with tf.Graph().as_default():
      batch = tf1.data.make_one_shot_iterator(input_fn(params)).get_next()
      spec = self.model_fn(batch, None, tf1.estimator.ModeKeys.PREDICT, params)
      with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        batches = []
        while True:
          try:
            batches.append(sess.run(spec.predictions))
          except tf.errors.OutOfRangeError:
            break
    assert [len(b["unique_id"]) for b in batches] == [4, 4, 4, 4, 3]
    for b in batches:
      for i in range(len(b["unique_id"])):
        _Estimator.results.append({k: v[i] for k, v in b.items()})
        yield _Estimator.results[-1]


def _estimator_stand_in():
  tpu = types.SimpleNamespace(
      InputPipelineConfig=types.SimpleNamespace(PER_HOST_V2=3),
      RunConfig=lambda **kwargs: kwargs, TPUConfig=lambda **kwargs: kwargs,
      TPUEstimatorSpec=lambda mode, predictions, scaffold_fn=None: types.SimpleNamespace(
          predictions=predictions),
      TPUEstimator=_Estimator)
  return types.SimpleNamespace(ModeKeys=types.SimpleNamespace(PREDICT="infer"), tpu=tpu)


def _run_original_main(orig, tiny, output_file, monkeypatch):
  from absl import flags
  from absl.testing import flagsaver
  monkeypatch.setattr(tf.compat.v1, "estimator", _estimator_stand_in(), raising=False)
  _Estimator.results = []
  with flagsaver.flagsaver():
    values = dict(input_file=tiny.input, output_file=output_file, vocab_file=tiny.vocab,
                  bert_config_file=tiny.config, init_checkpoint=tiny.ckpt, layers="-1,0,-2",
                  max_seq_length=24, batch_size=4, do_lower_case=True, use_tpu=False,
                  use_one_hot_embeddings=False)
    for name, value in values.items():
      flags.FLAGS[name].value = value
    orig.main(None)
  return _Estimator.results


def test_output_matches_the_original_main(tiny, monkeypatch):
  orig = oracle.original("extract_features")
  theirs_file = str(tiny.root / "theirs.jsonl")
  raw = _run_original_main(orig, tiny, theirs_file, monkeypatch)
  o = _options(tiny)
  assert extract_features.run(o) == NUM_LINES
  assert not [n for n in os.listdir(os.path.dirname(o.output_file)) if ".tmp" in n]
  with open(theirs_file, "rb") as f:
    theirs = f.read().decode("ascii").splitlines(keepends=True)
  with open(o.output_file, "rb") as f:
    ours = f.read().decode("ascii").splitlines(keepends=True)
  assert len(ours) == len(theirs) == NUM_LINES

  # Line for line: same keys in the same order, tokens, layer indexes; values to 1e-5.
  def skeleton(line):
    obj = json.loads(line)
    return [list(obj), obj["linex_index"],
            [(list(f), f["token"],
              [(list(layer), layer["index"], len(layer["values"])) for layer in f["layers"]])
             for f in obj["features"]]]

  def values(line):
    return np.array([[layer["values"] for layer in f["layers"]]
                     for f in json.loads(line)["features"]])

  for i, (a, b) in enumerate(zip(ours, theirs)):
    assert skeleton(a) == skeleton(b), i
    assert skeleton(a)[1] == i and a.endswith("}\n")
    np.testing.assert_allclose(values(a), values(b), atol=1e-5, rtol=0)
    assert json.dumps(json.loads(a)) + "\n" == a            # default separators, ASCII
  assert '"token": "\\u4f60"' in ours[13] and ours[1].count('"token"') == 2

  # Our formatting of the original's own float32 values gives its lines byte for byte.
  tokenizer = tokenization.FullTokenizer(tiny.vocab)
  features = extract_features.convert_examples_to_features(
      extract_features.read_examples(tiny.input), 24, tokenizer)
  assert [int(r["unique_id"]) for r in raw] == list(range(NUM_LINES))
  for r, feature, line in zip(raw, features, theirs):
    layers = [r["layer_output_%d" % j] for j in range(3)]
    assert extract_features.json_line(feature, layers, [-1, 0, -2]) == line

  # Every layer value, padding positions included, before rounding: ours vs theirs.
  model = modeling.BertModel(modeling.BertConfig(**CONFIG))
  checkpoints.load_checkpoint(model, tiny.ckpt)
  extract = extract_features.make_extract_fn(model, [-1, 0, -2],
                                             tf.distribute.OneDeviceStrategy("/cpu:0"))
  batch = extract_features._batch_arrays(features[:3], 4, 24)
  unique_ids, layers = extract(batch)
  assert unique_ids.tolist() == [0, 1, 2, -1] and layers[0].shape == (4, 24, 32)
  for row in range(3):
    for j in range(3):
      np.testing.assert_allclose(layers[j][row], raw[row]["layer_output_%d" % j], atol=1e-5)
  assert not np.allclose(layers[0], layers[1], atol=1e-3)   # different layers differ


def test_gfile_paths(tiny):
  """Input and output through tf.io.gfile (ram://, as gs:// would be)."""
  tf.io.gfile.copy(tiny.input, "ram://extract/input.txt", overwrite=True)
  o = _options(tiny, input_file="ram://extract/input.txt",
               output_file="ram://extract/out/features.jsonl", layers="-2", batch_size=8)
  assert extract_features.run(o) == NUM_LINES
  assert tf.io.gfile.glob("ram://extract/out/*") == ["ram://extract/out/features.jsonl"]
  with tf.io.gfile.GFile(o.output_file) as f:
    lines = f.read().splitlines()
  assert len(lines) == NUM_LINES and json.loads(lines[2])["features"][0]["token"] == "[CLS]"


# ----------------------------------------------------------------------------
# Flags and the command line.

@pytest.mark.slow
def test_flags_match_the_original():
  want, got = oracle.original_and_our_flags("extract_features", env=ENV)
  assert len(want) == 13 and got == want
  assert {n: extract_features.DEFAULTS[n] for n in want} == {n: v[0] for n, v in want.items()}


def _command(tiny, out, *extra):
  return [sys.executable, str(REPO / "extract_features.py"), f"--input_file={tiny.input}",
          f"--output_file={out}", f"--vocab_file={tiny.vocab}",
          f"--bert_config_file={tiny.config}", f"--init_checkpoint={tiny.ckpt}",
          "--max_seq_length=24", *extra]


@pytest.mark.slow
def test_command_line_and_bad_input(tiny, tmp_path):
  """The README's command (its flags; --layers=-1,-2 for a 2-layer model) and two bad
  command lines, run side by side: one-line errors, no traceback, no output file."""
  good = tmp_path / "out" / "output.jsonl"
  runs = {
      "good": _command(tiny, good, "--layers=-1,-2", "--batch_size=8", "--use_tpu=false",
                       "--use_one_hot_embeddings"),
      "no_input": _command(tiny, tmp_path / "a.jsonl", f"--input_file={tmp_path}/none.txt",
                           "--layers=-1"),
      "layers": _command(tiny, tmp_path / "b.jsonl"),   # default -1,-2,-3,-4: 2 layers only
  }
  procs = {k: subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for k, cmd in runs.items()}
  results = {k: p.communicate(timeout=120) for k, p in procs.items()}
  assert procs["good"].returncode == 0, results["good"][1][-3000:]
  log = results["good"][1]
  assert log.count("*** Example ***") == 5 and "input_type_ids: 0 0" in log
  lines = good.read_text(encoding="ascii").splitlines()
  assert len(lines) == NUM_LINES and os.listdir(good.parent) == ["output.jsonl"]
  first = json.loads(lines[0])
  assert list(first) == ["linex_index", "features"] and first["linex_index"] == 0
  assert [f["token"] for f in first["features"]] == (
      "[CLS] who was jim henson ? [SEP] jim henson was a puppet ##eer [SEP]".split())
  assert [layer["index"] for layer in first["features"][0]["layers"]] == [-1, -2]
  assert all(len(layer["values"]) == 32 for f in first["features"] for layer in f["layers"])

  for name, message in (
      ("no_input", f"error: --input_file {tmp_path}/none.txt: no such file"),
      ("layers", "error: --layers=-1,-2,-3,-4: layer -3 out of range: --bert_config_file "
                 "has num_hidden_layers=2")):
    stderr = results[name][1]
    assert procs[name].returncode != 0 and "Traceback" not in stderr, stderr[-3000:]
    assert message in stderr and stderr.strip().splitlines()[-1].startswith("error: ")
  assert sorted(os.listdir(tmp_path)) == ["out"]


def test_bad_input_raises_one_line_errors(tiny, tmp_path):
  out = tmp_path / "out.jsonl"

  def error(**overrides):
    with pytest.raises(ValueError) as info:
      extract_features.run(_options(tiny, output_file=str(out), **overrides))
    assert not out.exists() and not list(tmp_path.glob("*.tmp"))
    return str(info.value)

  assert error(layers="") == "--layers='': expected comma-separated integers, e.g. -1,-2,-3,-4"
  assert error(layers="2").startswith("--layers=2: layer 2 out of range")
  assert error(max_seq_length=128).startswith(
      "--max_seq_length=128: cannot use sequence length 128 because the BERT model was only "
      "trained up to sequence length 64")
  assert error(batch_size=0) == "--batch_size=0: must be >= 1"
  assert error(vocab_file=str(tmp_path / "v.txt")) == f"--vocab_file {tmp_path}/v.txt: no such file"
  assert error(bert_config_file=str(tmp_path / "c.json")) == \
      f"--bert_config_file {tmp_path}/c.json: no such file"
  (tmp_path / "bad.json").write_text("{vocab_size")
  assert error(bert_config_file=str(tmp_path / "bad.json")).startswith(
      f"--bert_config_file {tmp_path}/bad.json: not valid JSON")
  assert error(init_checkpoint=str(tmp_path / "none.ckpt")).startswith(
      f"--init_checkpoint: {tmp_path}/none.ckpt: not a checkpoint")
  (tmp_path / "corrupt.ckpt.index").write_bytes(b"not a checkpoint index")
  assert error(init_checkpoint=str(tmp_path / "corrupt.ckpt")).startswith(
      f"--init_checkpoint {tmp_path}/corrupt.ckpt: ")
  wider = modeling.BertConfig(**{**CONFIG, "hidden_size": 64, "intermediate_size": 128})
  (tmp_path / "wider.json").write_text(wider.to_json_string())
  assert "does not fit --init_checkpoint" in error(bert_config_file=str(tmp_path / "wider.json"))
  (tmp_path / "latin1.txt").write_bytes(b"the dog\nis \xe9 hairy\n")
  assert error(input_file=str(tmp_path / "latin1.txt")) == \
      f"--input_file {tmp_path}/latin1.txt, line 2: not UTF-8 (byte 4: invalid continuation byte)"
  # A vocab longer than the config's vocab_size: refused before the model, not
  # while writing at the first id past the table.
  fewer_words = modeling.BertConfig(**{**CONFIG, "vocab_size": 24})
  (tmp_path / "fewer.json").write_text(fewer_words.to_json_string())
  checkpoints.save_tf1_checkpoint(modeling.BertModel(fewer_words), str(tmp_path / "fewer.ckpt"))
  assert error(bert_config_file=str(tmp_path / "fewer.json"),
               init_checkpoint=str(tmp_path / "fewer.ckpt")).startswith(
      f"--vocab_file {tiny.vocab} has ids up to ")
  # An existing output file survives a failed run untouched.
  out.write_text("previous\n")
  with pytest.raises(ValueError):
    extract_features.run(_options(tiny, output_file=str(out), layers="9"))
  assert out.read_text() == "previous\n"


def test_extract_features_output_below_a_file_before_the_model(data, tmp_path,  # noqa: F811
                                                               monkeypatch):
  from bert_keras import extract_features
  monkeypatch.setattr(modeling, "BertModel", None)          # any model built would fail
  text = tmp_path / "in.txt"
  text.write_text("a b\n")
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"]))
  output = text / "sub" / "out.jsonl"
  with pytest.raises(ValueError) as info:
    extract_features.run(extract_features.options(
        input_file=str(text), output_file=str(output), vocab_file=str(vocab),
        bert_config_file=str(data / "config.json"), max_seq_length=16, layers="-1",
        init_checkpoint=str(data / "init" / "bert_model.ckpt")))
  assert str(info.value) == (f"--output_file {output}: its directory {text}/sub is, or is "
                             "below, a file")
