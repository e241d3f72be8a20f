"""The checks before any model is built (runtime/run_checks.py, checkpoints.load_model): the
config against the init checkpoint (every checkpoint format) and against the memory, absurd
sizes, a truncated init checkpoint, a vocab longer than the config, --warmup_proportion.

The run_pretraining runs reuse test_run_pretraining's tiny setup (2 layers, hidden 32)."""

import json
import logging
import os
import time
import types

import numpy as np
import pytest

from conftest import config_file
from test_checkpoint_files import _Storage, _Tensor, write_bin  # noqa: F401  (a fixture)
from test_run_pretraining import _options
from test_run_pretraining import data  # noqa: F401  (a fixture)
from bert_keras import checkpoints
from bert_keras import model_files
from bert_keras import modeling
from bert_keras import task_registry
from bert_keras import run_classifier
from bert_keras import run_pretraining
from bert_keras.runtime import settings
from bert_keras.runtime import run_checks
from bert_keras.runtime import training_checkpoints
from bert_keras.utils import memory


@pytest.mark.parametrize("overrides, expected", [
    (dict(hidden_size=16384, num_attention_heads=16),
     "hidden_size 16384 in the config, 32 in the checkpoint"),
    (dict(num_hidden_layers=4), "num_hidden_layers 4 in the config, 2 in the checkpoint"),
    (dict(vocab_size=30522, intermediate_size=128),
     "vocab_size 30522 in the config, 100 in the checkpoint; intermediate_size 128 in the "
     "config, 64 in the checkpoint"),
])
def test_config_that_does_not_fit_the_init_checkpoint(data, tmp_path, monkeypatch,  # noqa: F811
                                                      overrides, expected):
  monkeypatch.setattr(modeling, "BertPretrainer", None)   # any model built would fail
  config = config_file(tmp_path, **overrides)
  init = data / "init" / "bert_model.ckpt"
  started = time.monotonic()
  with pytest.raises(ValueError) as info:
    run_pretraining.run(_options(data, tmp_path / "out", bert_config_file=str(config)))
  assert str(info.value) == (f"--bert_config_file {config} does not fit --init_checkpoint "
                             f"{init}: {expected}")
  assert time.monotonic() - started < 10
  assert not (tmp_path / "out").exists()


def test_config_sizes_of_every_checkpoint_format(data, tmp_path, write_bin):  # noqa: F811
  """The sizes read from a TF1 checkpoint, our TF2 training checkpoint, a safetensors header
  and a pytorch_model.bin pickle (no tensor read) are the config's."""
  config = modeling.BertConfig.from_json_file(str(data / "config.json"))
  expected = {name: getattr(config, name) for name in (
      "vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
      "max_position_embeddings", "type_vocab_size")}
  assert checkpoints.config_sizes(checkpoints.checkpoint_shapes(
      str(data / "init" / "bert_model.ckpt"))) == expected
  out = tmp_path / "out"
  run_pretraining.run(_options(data, out, num_train_steps=3))
  assert checkpoints.config_sizes(checkpoints.checkpoint_shapes(str(out / "model.ckpt-3"))) == (
      expected)
  # HuggingFace names and [out, in] Linear weights.
  model = modeling.BertPretrainer(config)
  state = {}
  for tf1, variable in checkpoints.tf1_variable_map(model).items():
    name, transpose = checkpoints.hf_name(tf1)
    value = np.asarray(variable.numpy(), np.float32)
    state[name] = value.T if transpose else value
  header, body = {}, b""
  for name, value in state.items():
    header[name] = {"dtype": "F32", "shape": list(value.shape),
                    "data_offsets": [len(body), len(body) + value.nbytes]}
    body += np.ascontiguousarray(value).tobytes()
  raw = json.dumps(header).encode()
  st = tmp_path / "hf" / "model.safetensors"
  st.parent.mkdir()
  st.write_bytes(len(raw).to_bytes(8, "little") + raw + body)
  assert checkpoints.config_sizes(checkpoints.checkpoint_shapes(str(st.parent))) == expected
  tensors = {name: _Tensor(_Storage(str(i), np.zeros(value.size, np.float32)), 0,
                           list(value.shape), [value.shape[1], 1] if value.ndim == 2 else [1])
             for i, (name, value) in enumerate(state.items())}
  assert checkpoints.config_sizes(checkpoints.checkpoint_shapes(write_bin(tensors))) == expected
  # A config changed between two runs into one --output_dir: refused before the model, as
  # a rerun with other options (runtime/model_dir.py) and, for a directory without
  # run_options.json, as a config that does not fit its checkpoint.
  wide = config_file(tmp_path, "wide.json", hidden_size=64, intermediate_size=128)
  with pytest.raises(ValueError, match=r"holds a training run with other options \("
                     r"bert_config_file: .* -> .*wide.json \(another content\)"):
    run_pretraining.run(_options(data, out, bert_config_file=str(wide), init_checkpoint=None))
  (out / "run_options.json").unlink()
  with pytest.raises(ValueError) as info:
    run_pretraining.run(_options(data, out, bert_config_file=str(wide), init_checkpoint=None))
  assert str(info.value) == (
      f"--bert_config_file {wide} does not fit --output_dir {out}/model.ckpt-3: hidden_size 64 "
      "in the config, 32 in the checkpoint; intermediate_size 128 in the config, 64 in the "
      "checkpoint")
  big = modeling.BertConfig.from_dict(dict(config.to_dict(), hidden_size=16384))
  with pytest.raises(checkpoints.CheckpointError, match="hidden_size 16384 in the config, 32"):
    checkpoints.check_config_matches(big, str(st.parent))


def test_load_model_checks_the_config_before_building(data, tmp_path, monkeypatch):  # noqa: F811
  def build(*args, **kwargs):
    raise AssertionError("a model was built")
  monkeypatch.setattr(task_registry.TaskKind, "build", build)
  config = config_file(tmp_path, hidden_size=16384, num_attention_heads=16)
  prefix = str(data / "init" / "bert_model.ckpt")
  for task in ("encoder", "classifier"):
    with pytest.raises(checkpoints.CheckpointError) as info:
      checkpoints.load_model(prefix, task=task, bert_config_file=str(config))
    assert str(info.value) == (f"{config} does not fit the checkpoint {prefix}: hidden_size "
                               "16384 in the config, 32 in the checkpoint")


@pytest.mark.parametrize("field, value, expected", [
    ("num_hidden_layers", 1000000, "parameters"),
    ("num_hidden_layers", 1e6, "num_hidden_layers must be a positive integer, got 1000000.0"),
    ("hidden_size", 1000000000, "parameters"),
])
def test_absurd_sizes_fail_fast(data, tmp_path, field, value, expected):  # noqa: F811
  overrides = {field: value}
  if field == "hidden_size":
    overrides["num_attention_heads"] = 1
  config = config_file(tmp_path, **overrides)
  started = time.monotonic()
  with pytest.raises(ValueError) as info:
    run_pretraining.run(_options(data, tmp_path / "out", bert_config_file=str(config)))
  assert str(info.value).startswith(f"--bert_config_file {config}: ")
  assert expected in str(info.value)
  assert time.monotonic() - started < 10


def test_training_that_cannot_fit_in_memory_is_refused_before_the_model(
    data, tmp_path, monkeypatch):  # noqa: F811
  config = config_file(tmp_path, vocab_size=1000, hidden_size=256, num_attention_heads=4,
                        intermediate_size=1024)
  params = modeling.BertConfig.from_json_file(str(config)).num_parameters()
  # Memory for the weights (inference) but not for weights, gradients and two Adam slots.
  monkeypatch.setattr(memory, "available_bytes", lambda: params * 4 * 2)
  monkeypatch.setattr(run_checks, "_uses_accelerator", lambda options: False)
  monkeypatch.setattr(modeling, "BertPretrainer", None)   # any model built would fail
  with pytest.raises(ValueError) as info:
    run_pretraining.run(_options(data, tmp_path / "out", bert_config_file=str(config),
                                 init_checkpoint=None))
  assert str(info.value) == (
      f"--bert_config_file {config}: a model of {params:.3g} parameters needs "
      f"{params * 16 / 1e9:.3g} GB for its float32 weights, gradients and optimizer slots, "
      f"more than the {params * 8 / 1e9:.3g} GB of memory available")
  options = _options(data, tmp_path / "out", bert_config_file=str(config), do_train=False,
                     do_eval=True)
  run_checks.check_memory(modeling.BertConfig.from_json_file(str(config)),  # eval fits
                          settings.ModelSource.from_flags(options), options.do_train)


def _truncate(path, keep):
  path.write_bytes(path.read_bytes()[:keep])


def test_truncated_init_checkpoint_is_one_line_before_the_model(data, tmp_path,  # noqa: F811
                                                                 monkeypatch):
  init = tmp_path / "init"
  init.mkdir()
  for name in os.listdir(data / "init"):
    (init / name).write_bytes((data / "init" / name).read_bytes())
  data_file = init / "bert_model.ckpt.data-00000-of-00001"
  whole = data_file.read_bytes()
  _truncate(data_file, len(whole) // 3)
  prefix = str(init / "bert_model.ckpt")
  for path in (prefix, str(init)):                         # the prefix, or its directory
    with pytest.raises(checkpoints.CheckpointError, match=r"bert_model\.ckpt: unreadable "
                       r"checkpoint \(its \.data files hold \d+ bytes, its tensors \d+: trunc"):
      training_checkpoints.init_checkpoint_prefix(path)
  # Found by the scripts' config check, before any model is built.
  monkeypatch.setattr(modeling, "BertPretrainer", None)
  with pytest.raises(ValueError, match=f"^--init_checkpoint {prefix}: unreadable checkpoint"):
    run_pretraining.run(_options(data, tmp_path / "out", init_checkpoint=prefix))
  assert not (tmp_path / "out").exists()
  monkeypatch.undo()
  # Read past its end directly (load_checkpoint): a CheckpointError naming the tensor, not
  # TensorFlow's IndexError; a damaged byte: TensorFlow's CRC error, as a CheckpointError.
  model = modeling.BertModel(modeling.BertConfig.from_json_file(str(data / "config.json")))
  with pytest.raises(checkpoints.CheckpointError, match=r"bert_model\.ckpt: tensor bert/.* "
                     r"cannot be read \(the checkpoint is truncated or damaged\)"):
    checkpoints.load_checkpoint(model, prefix)
  damaged = bytearray(whole)
  damaged[len(whole) // 2] ^= 0xFF
  data_file.write_bytes(bytes(damaged))
  assert training_checkpoints.init_checkpoint_prefix(prefix) == prefix  # sizes are right
  with pytest.raises(checkpoints.CheckpointError, match="cannot be read .*Checksum"):
    checkpoints.load_checkpoint(model, prefix)


@pytest.mark.parametrize("script", ["run_classifier", "run_squad", "extract_features"])
def test_vocab_longer_than_the_config_before_the_model(data, tmp_path, monkeypatch,  # noqa: F811
                                                       script):
  import importlib
  module = importlib.import_module(f"bert_keras.{script}")
  for name in ("BertModel", "BertClassifier", "BertSquad"):
    monkeypatch.setattr(modeling, name, None)             # any model built would fail
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                           + [f"w{i}" for i in range(200)]))
  config = data / "config.json"                           # vocab_size 100
  text = tmp_path / "in.txt"
  text.write_text("w1 w2\n")
  cola = tmp_path / "cola"
  cola.mkdir()
  (cola / "train.tsv").write_text("src\t1\t\tw1 w2\nsrc\t0\t\tw2 w1\n")
  squad = tmp_path / "train.json"
  squad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "w1 w2", "qas": [
      {"id": "q1", "question": "w1", "answers": [{"text": "w2", "answer_start": 3}]}]}]}]}))
  common = dict(vocab_file=str(vocab), bert_config_file=str(config))
  options = {
      "run_classifier": lambda: module.options(
          data_dir=str(cola), task_name="CoLA", do_train=True, output_dir=str(tmp_path / "o"),
          max_seq_length=16, **common),
      "run_squad": lambda: module.options(
          train_file=str(squad), do_train=True, max_seq_length=32, max_query_length=8,
          doc_stride=8, output_dir=str(tmp_path / "o"), train_batch_size=1, **common),
      "extract_features": lambda: module.options(
          input_file=str(text), output_file=str(tmp_path / "f.jsonl"), max_seq_length=16,
          layers="-1", init_checkpoint=str(data / "init" / "bert_model.ckpt"), **common),
  }[script]()
  with pytest.raises(ValueError) as info:
    module.run(options)
  assert str(info.value) == (f"--vocab_file {vocab} has ids up to 204, beyond the vocab_size 100 "
                             f"of --bert_config_file {config} (does the vocab belong to this "
                             "model?)")
  assert not (tmp_path / "o").exists()


def test_model_directory_vocab_longer_than_its_config(data, tmp_path, monkeypatch):  # noqa: F811
  """The same rule for a model directory's vocab.txt (checkpoints.load_model, predict.py's
  --model_dir): refused naming both files before the model is built."""
  import shutil
  directory = tmp_path / "model"
  shutil.copytree(data / "init", directory)
  shutil.copy(data / "config.json", directory / "bert_config.json")   # vocab_size 100
  vocab = directory / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
                           + [f"w{i}" for i in range(96)]))
  assert checkpoints.load_model(str(directory)).vocab_file == str(vocab)   # 100 ids: fits
  vocab.write_text(vocab.read_text() + "w96\n")

  def build(*args, **kwargs):
    raise AssertionError("a model was built")
  monkeypatch.setattr(task_registry.TaskKind, "build", build)
  with pytest.raises(ValueError) as info:
    checkpoints.load_model(str(directory))
  assert str(info.value) == (f"{vocab} has ids up to 100, beyond the vocab_size 100 of "
                             f"{directory / 'bert_config.json'} (does the vocab belong to this "
                             "model?)")


@pytest.mark.parametrize("script", ["run_classifier", "run_squad"])
def test_one_token_type_with_text_pairs_before_the_model(tmp_path, monkeypatch, script):
  """type_vocab_size=1 has no segment id 1: a pair task (MRPC, SQuAD) is refused naming the
  config, before any model is built (it was a GatherV2 traceback in the first step)."""
  import importlib
  module = importlib.import_module(f"bert_keras.{script}")
  for name in ("BertClassifier", "BertSquad"):
    monkeypatch.setattr(modeling, name, None)             # any model built would fail
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "w1", "w2"]))
  config = config_file(tmp_path, type_vocab_size=1)
  mrpc = tmp_path / "mrpc"
  mrpc.mkdir()
  (mrpc / "train.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                                  "1\t1\t2\tw1 w2\tw2 w1\n0\t3\t4\tw2\tw1\n")
  squad = tmp_path / "train.json"
  squad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "w1 w2", "qas": [
      {"id": "q1", "question": "w1", "answers": [{"text": "w2", "answer_start": 3}]}]}]}]}))
  common = dict(vocab_file=str(vocab), bert_config_file=str(config), do_train=True,
                output_dir=str(tmp_path / "o"), train_batch_size=1)
  options, pairs = {
      "run_classifier": lambda: (module.options(
          data_dir=str(mrpc), task_name="MRPC", max_seq_length=16, **common),
          "the train examples of --task_name=MRPC"),
      "run_squad": lambda: (module.options(
          train_file=str(squad), max_seq_length=32, max_query_length=8, doc_stride=8, **common),
          "SQuAD's inputs (question, context)"),
  }[script]()
  with pytest.raises(ValueError) as info:
    module.run(options)
  assert str(info.value) == (f"--bert_config_file {config} has type_vocab_size=1: {pairs} are "
                             "text pairs (segment id 1), which need type_vocab_size >= 2")
  assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_warmup_proportion_outside_zero_one(value):
  from bert_keras import run_squad
  from bert_keras.runtime import training
  for script in (run_classifier, run_squad):
    with pytest.raises(ValueError, match=f"^--warmup_proportion={value}: must be in \\[0, 1\\]"):
      training.check_training_numbers(
          settings.RunSettings.from_flags(script.options(warmup_proportion=value)).training)
  training.check_training_numbers(
      settings.RunSettings.from_flags(run_classifier.options(warmup_proportion=1.0)).training)


def test_a_vocab_far_shorter_than_the_table_is_said(caplog):
  """A vocabulary with far fewer ids than the embedding table (most words would read as [UNK])
  is warned about, naming both files; a table padded by a few rows is not."""
  config = modeling.BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=64)
  with caplog.at_level(logging.WARNING):
    model_files.check_vocab_fits(config, 998, "x/vocab.txt", "x/config.json")
  assert not [r for r in caplog.records if "never read" in r.getMessage()]
  with caplog.at_level(logging.WARNING):
    model_files.check_vocab_fits(config, {"[UNK]": 0, "a": 4}, "x/vocab.txt", "x/config.json")
  said = [r.getMessage() for r in caplog.records if "never read" in r.getMessage()]
  assert said and "x/vocab.txt has 5 ids" in said[0] and "x/config.json is 1000" in said[0]


def test_max_seq_length_beyond_the_positions_names_the_flag_and_config():
  """The original's message, then --max_seq_length and the config file named."""
  config = modeling.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=16)
  options = types.SimpleNamespace(max_seq_length=32, bert_config_file="cfg/bert_config.json")
  with pytest.raises(ValueError, match=r"^Cannot use sequence length 32 because the BERT model "
                     r"was only trained up to sequence length 16 \(--max_seq_length=32; "
                     r"max_position_embeddings of cfg/bert_config\.json\)$"):
    run_checks.check_max_seq_length(config, options)


@pytest.mark.parametrize("script, own", [
    ("run_classifier", "task_name"), ("run_squad", "doc_stride"), ("run_ner", "labels"),
    ("run_embeddings", "pooling"), ("run_reranker", "loss"),
    ("run_pretraining", "max_predictions_per_seq")])
def test_a_run_script_s_help_lists_the_shared_flags_beside_its_own(script, own):
  # --help shows a module's key flags: the script's own and the shared groups it adopts.
  from absl import flags
  import importlib
  module = importlib.import_module(f"bert_keras.{script}")
  fv = flags.FlagValues()
  module.define_flags(fv=fv)
  keys = {flag.name for flag in fv.get_key_flags_for_module(module.__name__)}
  assert {own, "use_xla", "seed", "output_dir", "use_tpu"} <= keys, sorted(keys)
  assert all(fv[name].name in keys for name in ("learning_rate", "save_checkpoints_steps"))
