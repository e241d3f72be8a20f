"""convert_checkpoint.py: Google's TF1 layout to HuggingFace's and back, each head with it.

The written model.safetensors is read with the safetensors library and run by an independent
NumPy forward pass (tests/numpy_bert.py, no torch); its outputs must equal the source Keras
model's within 1e-5."""

import json
import os
import re

import numpy as np
import pytest

from bert_keras import checkpoints
from bert_keras import convert_checkpoint
from bert_keras import modeling
from conftest import dead_pid, randomize
from test_run_pretraining import data  # noqa: F401  (a fixture)
from bert_keras.runtime import outputs

import numpy_bert

safetensors_numpy = pytest.importorskip("safetensors.numpy")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(27)]


def _config(hidden_act="gelu"):
  return modeling.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, intermediate_size=48,
                             max_position_embeddings=16, type_vocab_size=2,
                             hidden_act=hidden_act)


def _model(task, config):
  encoder = modeling.BertModel(config)
  model = {"encoder": lambda: encoder,
           "pretrainer": lambda: modeling.BertPretrainer(encoder),
           "classifier": lambda: modeling.BertClassifier(encoder, 3),
           "tagger": lambda: modeling.BertTokenClassifier(encoder, 5),
           "squad": lambda: modeling.BertSquad(encoder)}[task]()
  model(dict(_features(), masked_lm_positions=np.zeros((2, 2), np.int32)))  # builds it
  return randomize(model, seed=7)


def _features():
  ids = np.array([[2, 7, 9, 11, 3, 20, 3, 0], [2, 5, 30, 3, 0, 0, 0, 0]], np.int32)
  return {"input_ids": ids, "input_mask": (ids != 0).astype(np.int32),
          "segment_ids": np.array([[0, 0, 0, 0, 0, 1, 1, 0], [0] * 8], np.int32)}


def _keras_outputs(task, model):
  f = _features()
  positions = np.array([[1, 3, 5], [2, 1, 0]], np.int32)
  out = model(dict(f, masked_lm_positions=positions))
  if task == "encoder":
    return {"sequence_output": out["sequence_output"], "pooled_output": out["pooled_output"]}
  if task == "pretrainer":
    return {"mlm_at_positions": out["masked_lm_logits"], "nsp": out["next_sentence_logits"],
            "positions": positions}
  if task == "classifier":
    return {"classifier": out}
  if task == "tagger":
    return {"tagger": out}
  return {"start": out["start_logits"], "end": out["end_logits"]}


def _numpy_outputs(directory):
  with open(os.path.join(directory, "config.json")) as f:
    config = json.load(f)
  state = safetensors_numpy.load_file(os.path.join(directory, "model.safetensors"))
  f = _features()
  return numpy_bert.forward(state, config, f["input_ids"], f["input_mask"],
                            f["segment_ids"]), config, state


def _assert_same(task, keras_out, numpy_out):
  mask = _features()["input_mask"].astype(bool)
  for name, value in keras_out.items():
    if name == "positions":
      continue
    value = np.asarray(value)
    if name == "mlm_at_positions":
      positions = keras_out["positions"]
      want = np.take_along_axis(numpy_out["mlm"], positions[..., None], axis=1)
    else:
      want = numpy_out[name]
    if name in ("start", "end", "tagger"):  # compare the real tokens (the heads mask padding)
      value, want = value[mask], want[mask]
    np.testing.assert_allclose(value, want, atol=1e-5, rtol=1e-5, err_msg=f"{task} {name}")


def _google_dir(tmp_path, model, name="google"):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(VOCAB) + "\n")
  return checkpoints.save_pretrained(model, str(tmp_path / name), vocab_file=str(vocab),
                                     do_lower_case=True)


@pytest.mark.parametrize("task", ["encoder", "pretrainer", "classifier", "squad"])
@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_exact"])
def test_google_tf1_to_huggingface_gives_the_same_outputs(tmp_path, task, hidden_act):
  model = _model(task, _config(hidden_act))
  source = _google_dir(tmp_path, model)
  out = str(tmp_path / "hf")
  labels = "neg,neutral,pos" if task == "classifier" else None
  written = convert_checkpoint.run(convert_checkpoint.options(
      init_checkpoint=source, output_dir=out, labels=labels))
  assert sorted(written) == ["config.json", "model.safetensors", "tokenizer.json",
                             "tokenizer_config.json", "vocab.txt"]
  numpy_out, config, state = _numpy_outputs(out)
  _assert_same(task, _keras_outputs(task, model), numpy_out)
  architecture = {"encoder": "BertModel", "pretrainer": "BertForPreTraining",
                  "classifier": "BertForSequenceClassification",
                  "squad": "BertForQuestionAnswering"}[task]
  assert config["architectures"] == [architecture] and config["model_type"] == "bert"
  assert config["hidden_act"] == {"gelu": "gelu_new", "gelu_exact": "gelu"}[hidden_act]
  assert config["layer_norm_eps"] == 1e-12
  assert all(v.dtype == np.float32 for v in state.values())
  assert any(k.startswith("bert.") for k in state) == (task != "encoder")
  if task == "classifier":
    assert config["id2label"] == {"0": "neg", "1": "neutral", "2": "pos"}
    assert config["label2id"] == {"neg": 0, "neutral": 1, "pos": 2}
  with open(os.path.join(out, "tokenizer_config.json")) as f:
    assert json.load(f)["do_lower_case"] is True
  with open(os.path.join(out, "vocab.txt")) as f:
    assert f.read().split("\n")[:len(VOCAB)] == VOCAB


@pytest.mark.slow
@pytest.mark.parametrize("task", ["pretrainer", "classifier", "squad"])
def test_huggingface_to_tf1_to_huggingface_keeps_every_tensor(tmp_path, task):
  model = _model(task, _config())
  first = str(tmp_path / "hf1")
  convert_checkpoint.run(convert_checkpoint.options(
      init_checkpoint=_google_dir(tmp_path, model), output_dir=first))
  tf1 = str(tmp_path / "tf1")
  convert_checkpoint.run(convert_checkpoint.options(init_checkpoint=first, output_dir=tf1,
                                                    format="tf1"))
  assert checkpoints.checkpoint_task(tf1) == task
  second = str(tmp_path / "hf2")
  convert_checkpoint.run(convert_checkpoint.options(init_checkpoint=tf1, output_dir=second))
  a = safetensors_numpy.load_file(os.path.join(first, "model.safetensors"))
  b = safetensors_numpy.load_file(os.path.join(second, "model.safetensors"))
  assert sorted(a) == sorted(b)
  for name in a:
    np.testing.assert_array_equal(a[name], b[name], err_msg=name)
  _assert_same(task, _keras_outputs(task, model), _numpy_outputs(second)[0])


def test_write_safetensors_is_read_by_the_safetensors_library(tmp_path):
  tensors = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.array([7], np.int32),
             "scalar": np.float32(2.5) * np.ones((), np.float32)}
  path = str(tmp_path / "x.safetensors")
  checkpoints.write_safetensors(path, tensors)
  back = safetensors_numpy.load_file(path)
  assert sorted(back) == sorted(tensors)
  for name, value in tensors.items():
    assert back[name].dtype == value.dtype
    np.testing.assert_array_equal(back[name], value)
  assert checkpoints.read_safetensors(path).keys() == tensors.keys()


def test_bad_input_is_a_one_line_error(tmp_path):
  model = _model("encoder", _config())
  source = _google_dir(tmp_path, model)
  with pytest.raises(ValueError, match="--init_checkpoint .*no checkpoint found"):
    convert_checkpoint.run(convert_checkpoint.options(init_checkpoint=str(tmp_path),
                                                      output_dir=str(tmp_path / "o")))
  with pytest.raises(ValueError, match="--labels is for a classifier"):
    convert_checkpoint.run(convert_checkpoint.options(init_checkpoint=source, labels="a,b",
                                                      output_dir=str(tmp_path / "o")))
  with pytest.raises(ValueError, match="--vocab_file .*no such file"):
    convert_checkpoint.run(convert_checkpoint.options(init_checkpoint=source,
                                                      vocab_file=str(tmp_path / "none.txt"),
                                                      output_dir=str(tmp_path / "o")))
  busy = tmp_path / "busy"
  busy.mkdir()
  (busy / "notes.txt").write_text("mine")
  with pytest.raises(ValueError, match="holds other files"):
    convert_checkpoint.run(convert_checkpoint.options(init_checkpoint=source,
                                                      output_dir=str(busy)))
  assert sorted(os.listdir(busy)) == ["notes.txt"]
  assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_labels_of_another_number_than_the_head_name_both_and_the_file(tmp_path):
  source = _google_dir(tmp_path, _model("classifier", _config()))
  with pytest.raises(ValueError, match=r"^--labels names 2 labels, the checkpoint's head has 3 "
                     r"\(%s\)$" % re.escape(os.path.join(source, "bert_model.ckpt"))):
    convert_checkpoint.run(convert_checkpoint.options(init_checkpoint=source, labels="a,b",
                                                      output_dir=str(tmp_path / "o")))
  assert not os.path.exists(tmp_path / "o")


def test_a_run_ner_tagger_becomes_bert_for_token_classification(tmp_path):
  model = _model("tagger", _config())
  source = _google_dir(tmp_path, model)
  tags = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
  with open(os.path.join(source, checkpoints.LABELS_FILE), "w") as f:
    f.write("\n".join(tags) + "\n")
  assert checkpoints.checkpoint_task(source) == "tagger"
  out = str(tmp_path / "hf")
  convert_checkpoint.run(convert_checkpoint.options(init_checkpoint=source, output_dir=out))
  numpy_out, config, _ = _numpy_outputs(out)
  assert config["architectures"] == ["BertForTokenClassification"]
  assert config["id2label"] == {str(i): tag for i, tag in enumerate(tags)}
  _assert_same("tagger", _keras_outputs("tagger", model), numpy_out)


def test_convert_checkpoint_lock_and_dead_temporaries(data, tmp_path, caplog):  # noqa: F811
  """convert_checkpoint's --output_dir as export_saved_model's --export_dir: one run at a
  time (a lock) and the temporaries of killed runs removed."""
  from bert_keras import convert_checkpoint
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                           + [f"w{i}" for i in range(5, 100)]))
  out = tmp_path / "converted"
  dead = dead_pid()
  (tmp_path / f".converted.tmp-{dead}").mkdir()
  (tmp_path / f".converted.tmp-{dead}" / "bert_model.ckpt.index").write_text("x")

  def convert():
    return convert_checkpoint.run(convert_checkpoint.options(
        init_checkpoint=str(data / "init" / "bert_model.ckpt"),
        bert_config_file=str(data / "config.json"), vocab_file=str(vocab),
        output_dir=str(out), format="tf1"))
  with outputs.locked_output(str(out), "--output_dir"):
    with pytest.raises(ValueError, match=f"^--output_dir {out}: another run \\(pid "):
      convert()
  assert not out.exists()
  assert "bert_model.ckpt.index" in convert()
  assert sorted(os.listdir(tmp_path)) == ["converted", "vocab.txt"]
  assert any(f".converted.tmp-{dead}, a temporary left by" in r.getMessage()
             for r in caplog.records)
