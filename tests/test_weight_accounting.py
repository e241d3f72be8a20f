"""Loading accounts for every tensor, both ways, and refuses what we do not implement: fewer
layers than the checkpoint, missing or partial heads, non-float and non-finite weights, two
sources of weights in one directory, HuggingFace config keys of other models; a crafted sparse
model.safetensors costs no more memory than the tensors the model takes."""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from conftest import pair_features, randomize
from bert_keras import checkpoints
from bert_keras import huggingface_layout
from bert_keras import modeling
from bert_keras.utils import weight_files

CONFIG = dict(vocab_size=40, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=12, max_position_embeddings=10, type_vocab_size=2)


def _config(**changes):
  return modeling.BertConfig.from_dict(dict(CONFIG, **changes))


def _hf_dir(directory, state, **config_changes):
  """A HuggingFace directory: config.json and model.safetensors of the {name: array} state."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(dict(CONFIG, model_type="bert", **config_changes), f)
  weight_files.write_safetensors(os.path.join(directory, "model.safetensors"), state)
  return str(directory)


def test_fewer_layers_than_the_checkpoint_are_refused_naming_the_unused(tmp_path):
  source = randomize(modeling.BertModel(_config()))
  prefix = str(tmp_path / "tf1" / "bert_model.ckpt")
  checkpoints.save_tf1_checkpoint(source, prefix)
  hf = _hf_dir(tmp_path / "hf", huggingface_layout.hf_state_dict(source))
  for path in (prefix, hf):
    with pytest.raises(checkpoints.CheckpointError,
                       match=r"holds 16 tensors the model does not take: .*layer[._]1[./].* and "
                             r"11 more.*num_hidden_layers \(1\)"):
      checkpoints.load_checkpoint(modeling.BertModel(_config(num_hidden_layers=1)), path)
  with open(tmp_path / "tf1" / "bert_config.json", "w") as f:
    json.dump(dict(CONFIG, num_hidden_layers=1), f)
  with pytest.raises(checkpoints.CheckpointError, match="num_hidden_layers 1 in the config, 2"):
    checkpoints.load_model(str(tmp_path / "tf1"))


def test_known_extras_may_go_unused(tmp_path):
  """An encoder from a fine-tuned TF1 checkpoint with its optimizer slots and head, and from a
  HuggingFace BertForPreTraining file (heads, tied decoder, position_ids)."""
  source = randomize(modeling.BertClassifier(_config(), num_labels=3))
  names = checkpoints.tf1_variable_map(source)
  values = {name: v.numpy() for name, v in names.items()}
  values.update({name + "/adam_m": v for name, v in values.items()})
  values["global_step"] = np.int64(7)
  prefix = str(tmp_path / "model.ckpt")
  tf.raw_ops.SaveV2(prefix=prefix, tensor_names=list(values), shape_and_slices=[""] * len(values),
                    tensors=[tf.constant(v) for v in values.values()])
  encoder = modeling.BertModel(_config())
  result = checkpoints.load_checkpoint(encoder, prefix)
  assert "output_weights" in result.unused and "global_step" in result.unused
  features = pair_features()
  np.testing.assert_allclose(encoder(features)["pooled_output"],
                             source.bert(features)["pooled_output"], atol=1e-6)
  pretrainer = randomize(modeling.BertPretrainer(_config()))
  state = huggingface_layout.hf_state_dict(pretrainer)
  state["bert.embeddings.position_ids"] = np.arange(10, dtype=np.int64)[None]
  state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]
  result = checkpoints.load_checkpoint(modeling.BertModel(_config()),
                                       _hf_dir(tmp_path / "hf", state))
  assert "bert.embeddings.position_ids" in result.unused
  assert "cls.predictions.decoder.weight" in result.unused


def test_missing_heads_and_encoder_weights_are_refused_naming_them(tmp_path):
  source = randomize(modeling.BertClassifier(_config(), num_labels=2))
  state = huggingface_layout.hf_state_dict(source)
  del state["classifier.bias"]                       # half a head
  path = _hf_dir(tmp_path / "partial", state)
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"classifier\.bias \(model shape \[2\]\) is missing .*rest of the "
                           r"classifier"):
    checkpoints.load_checkpoint(modeling.BertClassifier(_config(), num_labels=2), path)
  encoder_only = _hf_dir(tmp_path / "encoder",
                         huggingface_layout.hf_state_dict(randomize(modeling.BertModel(_config()))))
  squad = modeling.BertSquad(_config())
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"qa_outputs\.weight .* is missing .*cls/squad head"):
    checkpoints.load_checkpoint(squad, encoder_only, new_heads=False)
  with pytest.raises(checkpoints.CheckpointError, match=r"qa_outputs\.weight .* is missing"):
    checkpoints.load_model(encoder_only, task="squad", new_heads=False)
  assert checkpoints.load_checkpoint(squad, encoder_only).missing == [
      "cls/squad/output_weights", "cls/squad/output_bias"]   # a warm start: a new head
  state = huggingface_layout.hf_state_dict(randomize(modeling.BertModel(_config())))
  del state["encoder.layer.0.attention.self.key.weight"]
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"encoder\.layer\.0\.attention\.self\.key\.weight .* is missing"):
    checkpoints.load_checkpoint(modeling.BertModel(_config()), _hf_dir(tmp_path / "enc", state))


@pytest.mark.parametrize("dtype", [np.int32, np.bool_, np.int64])
def test_integer_and_boolean_weights_are_refused(tmp_path, dtype):
  state = huggingface_layout.hf_state_dict(randomize(modeling.BertModel(_config())))
  name = "encoder.layer.1.output.LayerNorm.weight"
  state[name] = np.ones_like(state[name]).astype(dtype)
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"tensor encoder\.layer\.1\.output\.LayerNorm\.weight is stored as "
                           r"(I32|BOOL|I64), not floating point"):
    checkpoints.load_checkpoint(modeling.BertModel(_config()), _hf_dir(tmp_path, state))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights_are_refused_naming_them(tmp_path, bad):
  source = randomize(modeling.BertModel(_config()))
  state = huggingface_layout.hf_state_dict(source)
  state["encoder.layer.0.intermediate.dense.bias"][3] = bad
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"tensor encoder\.layer\.0\.intermediate\.dense\.bias holds 1 values "
                           r"that are not finite"):
    checkpoints.load_model(_hf_dir(tmp_path / "hf", state))
  source.encoder_layers[1].feed_forward.output_dense.kernel.assign(
      np.full([12, 8], bad, np.float32))
  prefix = str(tmp_path / "tf1" / "bert_model.ckpt")
  checkpoints.save_tf1_checkpoint(source, prefix)
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"layer_1/output/dense/kernel holds 96 values that are not finite"):
    checkpoints.load_checkpoint(modeling.BertModel(_config()), prefix)


def test_a_stray_safetensors_beside_a_run_checkpoint_is_refused_naming_both(tmp_path):
  """The documented rule: one source of weights per directory; both kinds are an error."""
  run = tmp_path / "run"
  classifier = randomize(modeling.BertClassifier(_config(), num_labels=2))
  checkpoints.save_tf1_checkpoint(classifier, str(run / "bert_model.ckpt"))
  with open(run / "bert_config.json", "w") as f:
    json.dump(CONFIG, f)
  assert checkpoints.load_model(str(run), task="classifier").load_result.missing == []
  weight_files.write_safetensors(   # an encoder's weights, dropped in by someone else
      str(run / "model.safetensors"),
      huggingface_layout.hf_state_dict(randomize(modeling.BertModel(_config()), seed=1)))
  from bert_keras.runtime import training_checkpoints
  for load in (lambda: checkpoints.load_model(str(run), task="classifier"),
               lambda: checkpoints.load_checkpoint(modeling.BertModel(_config()), str(run)),
               lambda: checkpoints.checkpoint_shapes(str(run)),
               # a run_* script's --init_checkpoint
               lambda: training_checkpoints.warm_start(classifier, str(run))):
    with pytest.raises(checkpoints.CheckpointError,
                       match=r"two sources of weights, .*model\.safetensors and the TensorFlow "
                             r"checkpoint .*bert_model\.ckpt\.index"):
      load()
  # Each still loads when named, also as a run_* script's --init_checkpoint (the remedy the
  # message gives): the file's weights, not the TensorFlow checkpoint's.
  checkpoints.load_checkpoint(modeling.BertModel(_config()), str(run / "model.safetensors"))
  checkpoints.load_checkpoint(classifier, str(run / "bert_model.ckpt"))
  warm = randomize(modeling.BertClassifier(_config(), num_labels=2), seed=2)
  training_checkpoints.warm_start(warm, str(run / "model.safetensors"))
  stray = weight_files.read_safetensors(str(run / "model.safetensors"))
  np.testing.assert_array_equal(warm.bert.embeddings.word_embeddings.numpy(),
                                stray["embeddings.word_embeddings.weight"])


def test_a_shape_mismatch_names_the_file_and_a_head_its_labels(tmp_path):
  """A head of another number of labels is said so (not "a bert_config.json that does not
  match"); every shape mismatch names the checkpoint's file."""
  hf = _hf_dir(tmp_path / "hf", huggingface_layout.hf_state_dict(
      randomize(modeling.BertClassifier(_config(), num_labels=2))))
  weights = re.escape(os.path.join(hf, "model.safetensors"))
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"^%s: the checkpoint's head has 2 labels \(classifier\.weight "
                           r"\[2, 8\]\), the model 3: a label list or num_labels of another size$"
                           % weights):
    checkpoints.load_checkpoint(modeling.BertClassifier(_config(), num_labels=3), hf)
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"^%s: bert\.embeddings\.position_embeddings\.weight: checkpoint "
                           r"shape \[10, 8\] != model shape \[12, 8\]" % weights):
    checkpoints.load_checkpoint(
        modeling.BertClassifier(_config(max_position_embeddings=12), num_labels=2), hf)


@pytest.mark.parametrize("key, value", [
    ("position_embedding_type", "relative_key"), ("position_embedding_type", "relative_key_query"),
    ("model_type", "roberta"), ("is_decoder", True), ("add_cross_attention", True)])
def test_hf_config_keys_we_do_not_implement_are_refused(tmp_path, key, value):
  path = tmp_path / "config.json"
  path.write_text(json.dumps(dict(CONFIG, **{"model_type": "bert", key: value})))
  with pytest.raises(ValueError, match=r"config\.json: %s %s is not implemented"
                     % (key, json.dumps(value))):
    modeling.BertConfig.from_json_file(str(path))
  path.write_text(json.dumps(dict(CONFIG, architectures=["RobertaModel"])))
  with pytest.raises(ValueError, match=r'architectures "RobertaModel": not a BERT model'):
    modeling.BertConfig.from_json_file(str(path))
  path.write_text(json.dumps(dict(CONFIG, model_type="bert", position_embedding_type="absolute",
                                  is_decoder=False, architectures=["BertForPreTraining"])))
  assert modeling.BertConfig.from_json_file(str(path)).num_hidden_layers == 2


_SPARSE_SCRIPT = textwrap.dedent("""
    import resource, sys
    from bert_keras import checkpoints, modeling
    model = modeling.BertModel(modeling.BertConfig.from_json_file(sys.argv[1] + "/config.json"))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
      if sys.argv[2] == "load_model":
        checkpoints.load_model(sys.argv[1])
      else:
        checkpoints.load_checkpoint(model, sys.argv[1])
      outcome = "loaded"
    except checkpoints.CheckpointError as e:
      outcome = "refused: %s" % e
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print("GROWN_KB %d" % grown)
    print(outcome)
""")


@pytest.mark.parametrize("big_name, how", [("cls.predictions.decoder.weight", "load_model"),
                                           ("cls.predictions.decoder.weight", "load_checkpoint"),
                                           ("unknown.big", "load_model")])
def test_a_sparse_huge_safetensors_costs_only_the_tensors_taken(tmp_path, big_name, how):
  """A 4.3 GB file (a few MB on disk) whose first tensor, unused, spans 4.3 GB: the memory a load
  adds is bounded by the model's tensors, whether the tensor is of an excepted kind (loaded)
  or not (refused)."""
  state = huggingface_layout.hf_state_dict(randomize(modeling.BertModel(_config())))
  big = 1_075_000_000                                  # float32 elements: 4.3 GB
  header = {big_name: {"dtype": "F32", "shape": [big], "data_offsets": [0, 4 * big]}}
  offset = 4 * big
  for name in sorted(state):
    header[name] = {"dtype": "F32", "shape": list(state[name].shape),
                    "data_offsets": [offset, offset + state[name].nbytes]}
    offset += state[name].nbytes
  raw = json.dumps(header).encode()
  raw += b" " * (-len(raw) % 8)
  directory = tmp_path / "hf"
  directory.mkdir()
  (directory / "config.json").write_text(json.dumps(dict(CONFIG, model_type="bert")))
  with open(directory / "model.safetensors", "wb") as f:
    f.write(len(raw).to_bytes(8, "little") + raw)
    f.truncate(8 + len(raw) + 4 * big)                 # a hole: no disk, no memory
    f.seek(8 + len(raw) + 4 * big)
    for name in sorted(state):
      f.write(np.ascontiguousarray(state[name], np.float32).tobytes())
  assert os.path.getsize(directory / "model.safetensors") > 4.2e9
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  done = subprocess.run([sys.executable, "-c", _SPARSE_SCRIPT, str(directory), how], env=env,
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  lines = done.stdout.splitlines()
  grown = int(lines[-2].split()[1]) * 1024
  assert grown < 256 << 20, (grown, lines[-1])
  if big_name == "unknown.big":
    assert lines[-1].startswith("refused") and "unknown.big" in lines[-1]
  else:
    assert lines[-1] == "loaded"


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_run_checkpoint_of_non_finite_weights_is_refused_when_restored(tmp_path, bad):
  """A run's own model.ckpt-N is restored with tf.train.Checkpoint, not read tensor by tensor:
  warm_start (--init_checkpoint, export_saved_model) and restore_for_inference (--do_eval,
  --do_predict) check the restored weights, naming the checkpoint and the variable."""
  from bert_keras.runtime import training_checkpoints
  source = randomize(modeling.BertClassifier(_config(), num_labels=2))
  kernel = source.bert.encoder_layers[1].attention.value.kernel
  kernel.assign(np.where(np.arange(kernel.shape[1]) == 2, bad, kernel.numpy()).astype(np.float32))
  checkpoint = tf.train.Checkpoint(model_variables=training_checkpoints.named_model_variables(
      source, checkpoints.tf1_variable_map(source)))
  run = str(tmp_path / "run")
  prefix = training_checkpoints.make_checkpoint_manager(checkpoint, run).save()
  message = (r"^%s: tensor bert/encoder/layer_1/attention/self/value/kernel holds 8 values that "
             r"are not finite" % prefix)
  model = modeling.BertClassifier(_config(), num_labels=2)
  with pytest.raises(checkpoints.CheckpointError, match=message):
    training_checkpoints.warm_start(model, run)

  # A Trainer's own checkpoint (model, optimizer, step): restore_latest checks what it
  # restored, for --do_eval / --do_predict (restore_for_inference) as for a resumed run.
  from bert_keras import optimization
  from bert_keras.runtime import training

  def trainer(model):
    return training.Trainer(tf.distribute.get_strategy(), model,
                            optimization.create_optimizer(1e-3, 10, 1), task=None,
                            variable_names=checkpoints.tf1_variable_map(model))
  resumed = str(tmp_path / "resumed")
  saved = training_checkpoints.make_checkpoint_manager(trainer(source)._checkpoint(),
                                                       resumed).save(checkpoint_number=3)
  message = message.replace(prefix, saved)
  with pytest.raises(checkpoints.CheckpointError, match=message):
    training_checkpoints.restore_for_inference(
        trainer(modeling.BertClassifier(_config(), num_labels=2)), resumed, None)
  with pytest.raises(checkpoints.CheckpointError, match=message):
    trainer(modeling.BertClassifier(_config(), num_labels=2)).restore_latest(resumed)
