"""Computes every model, head, loss and optimizer step of modeling.py / optimization.py on the
Keras backend named by KERAS_BACKEND, from the weights and inputs that tests/test_backends.py
wrote under TensorFlow, and saves the results for it to compare.

  KERAS_BACKEND=jax python tests/backend_worker.py CASE.npz RESULTS.npz

CASE.npz holds "config" (JSON), "weights/<model>/<i>" (each model's weights in its
`weights` order), "inputs/<name>" and "losses/<name>/<i>" (loss arguments). RESULTS.npz gets
one array per output (compute's names), "backend" and "tensorflow_imported_before_saving".
"""

import json
import os
import sys

import numpy as np


def main(case_path, results_path, tiny_fit=True):
  import keras
  from bert_keras import modeling, optimization
  case = dict(np.load(case_path))
  config = modeling.BertConfig.from_dict(json.loads(str(case["config"])))
  results = compute(keras, modeling, optimization, config, case)
  results["backend"] = np.array(keras.backend.backend())
  np.savez(results_path, **results)


def numpy(keras, x):
  return np.asarray(keras.ops.convert_to_numpy(x))


def build_models(modeling, config):
  """Every model of modeling.py on one shared encoder, by name."""
  encoder = modeling.BertModel(config, output_hidden_states=True)
  return {
      "encoder": encoder,
      "pretrainer": modeling.BertPretrainer(encoder),
      "classifier": modeling.BertClassifier(encoder, num_labels=3),
      "multi_label": modeling.BertClassifier(encoder, num_labels=4, multi_label=True),
      "regression": modeling.BertClassifier(encoder, num_labels=1),
      "tagger": modeling.BertTokenClassifier(encoder, num_labels=5),
      "squad": modeling.BertSquad(encoder),
  }


def set_weights(models, case):
  for name, model in models.items():
    prefix = "weights/%s/" % name
    count = sum(1 for key in case if key.startswith(prefix))
    model.set_weights([case[prefix + str(i)] for i in range(count)])


def compute(keras, modeling, optimization, config, case):
  """name -> NumPy array, for every output the test compares."""
  models = build_models(modeling, config)
  set_weights(models, case)
  inputs = {k[len("inputs/"):]: case[k] for k in case if k.startswith("inputs/")}
  features = {k: inputs[k] for k in ("input_ids", "input_mask", "segment_ids")}
  out = {}
  encoded = models["encoder"](features)
  out["encoder/sequence_output"] = numpy(keras, encoded["sequence_output"])
  out["encoder/pooled_output"] = numpy(keras, encoded["pooled_output"])
  out["encoder/embedding_output"] = numpy(keras, encoded["embedding_output"])
  for i, layer in enumerate(encoded["encoder_outputs"]):
    out["encoder/layer_%d" % i] = numpy(keras, layer)
  models["encoder"].skip_padding = True
  skipped = models["encoder"](features)["sequence_output"]
  models["encoder"].skip_padding = False
  out["encoder/skip_padding"] = numpy(keras, skipped)
  pretrained = models["pretrainer"]({**features,
                                     "masked_lm_positions": inputs["masked_lm_positions"]})
  for key, value in pretrained.items():
    out["pretrainer/" + key] = numpy(keras, value)
  for name in ("classifier", "multi_label", "regression", "tagger"):
    out[name] = numpy(keras, models[name](features))
  out["probabilities/classifier"] = numpy(
      keras, models["classifier"].probabilities(models["classifier"](features)))
  out["probabilities/multi_label"] = numpy(
      keras, models["multi_label"].probabilities(models["multi_label"](features)))
  spans = models["squad"](features)
  out["squad/start_logits"] = numpy(keras, spans["start_logits"])
  out["squad/end_logits"] = numpy(keras, spans["end_logits"])
  for pooling in modeling.POOLINGS:
    for normalize in (False, True):
      sentence = modeling.BertSentenceEncoder(models["encoder"], pooling=pooling,
                                              normalize=normalize)
      out["embeddings/%s/%s" % (pooling, normalize)] = numpy(keras, sentence(features))
  out.update(losses(keras, modeling, case))
  out.update(schedule(keras, optimization))
  for optimizer_type in ("adamw", "lamb"):
    out.update(training_step(keras, modeling, optimization, config, case, inputs,
                             optimizer_type))
  # Keras's own .keras saving imports TensorFlow where it is installed; ours must not before.
  out["tensorflow_imported_before_saving"] = np.array("tensorflow" in sys.modules)
  out.update(round_trip(keras, models, features))
  return out


def _loss_args(case, name):
  prefix = "losses/%s/" % name
  count = sum(1 for key in case if key.startswith(prefix))
  return [case[prefix + str(i)] for i in range(count)]


LOSSES = ("masked_lm_per_position_loss", "next_sentence_per_example_loss", "masked_lm_loss",
          "next_sentence_loss", "classifier_loss", "multi_label_loss", "token_classifier_loss",
          "squad_loss")


def losses(keras, modeling, case):
  from bert_keras import losses as losses_lib  # (keras only: any backend)
  out = {"loss/" + name: numpy(keras, getattr(losses_lib, name)(*_loss_args(case, name)))
         for name in LOSSES}
  out["loss/multi_label_loss_weighted"] = numpy(
      keras, losses_lib.multi_label_loss(*_loss_args(case, "multi_label_loss_weighted")))
  return out


def schedule(keras, optimization):
  rate = optimization.WarmupLinearDecay(2e-5, num_train_steps=100, num_warmup_steps=10)
  return {"schedule": np.array([float(numpy(keras, rate(step)))
                                for step in (0, 1, 5, 9, 10, 11, 50, 99, 100, 150)])}


def _gradients(keras, model, loss_fn):
  """(loss, gradients of the trainable variables) on the current backend."""
  backend = keras.backend.backend()
  variables = model.trainable_variables
  if backend == "tensorflow":
    import tensorflow as tf
    with tf.GradientTape() as tape:
      loss = loss_fn(model)
    return loss, tape.gradient(loss, variables)
  if backend == "jax":
    import jax

    def stateless_loss(values):
      with keras.StatelessScope(state_mapping=list(zip(variables, values))):
        return loss_fn(model)
    return jax.value_and_grad(stateless_loss)([v.value for v in variables])
  if backend == "torch":
    for v in variables:
      v.value.grad = None
    loss = loss_fn(model)
    loss.backward()
    return loss, [v.value.grad for v in variables]
  raise ValueError("unknown backend %s" % backend)


def training_step(keras, modeling, optimization, config, case, inputs, optimizer_type):
  """Two steps of pretraining (dropout off) with create_optimizer's optimizer: the loss and
  every updated weight."""
  quiet = modeling.BertConfig.from_dict({**config.to_dict(), "hidden_dropout_prob": 0.0,
                                         "attention_probs_dropout_prob": 0.0})
  model = modeling.BertPretrainer(quiet)
  model.set_weights(_loss_args(case, "pretrainer_weights"))
  # clip_norm 0.5: small enough that clipping acts on these gradients
  optimizer = optimization.create_optimizer(1e-2, 10, 0, optimizer_type=optimizer_type,
                                            clip_norm=0.5)
  optimizer.build(model.trainable_variables)

  from bert_keras import losses as losses_lib  # (keras only: any backend)

  def loss_fn(model):
    outputs = model(inputs, training=True)
    return losses_lib.pretraining_loss(outputs, inputs)

  out = {}
  for step in range(2):
    loss, grads = _gradients(keras, model, loss_fn)
    optimizer.apply(grads, model.trainable_variables)
    out["train/%s/loss_%d" % (optimizer_type, step)] = numpy(keras, loss)
  for i, weight in enumerate(model.get_weights()):
    out["train/%s/weight_%d" % (optimizer_type, i)] = weight
  return out


def round_trip(keras, models, features):
  """Each task model through get_config/from_config and a .keras file: outputs after."""
  import tempfile
  out = {}
  for name in ("classifier", "tagger", "squad", "pretrainer"):
    model = models[name]
    call_inputs = dict(features)
    if name == "pretrainer":
      call_inputs["masked_lm_positions"] = np.array([[1, 2]] * len(features["input_ids"]),
                                                    "int32")
    rebuilt = type(model).from_config(model.get_config())
    rebuilt.set_weights(model.get_weights())
    with tempfile.TemporaryDirectory() as tmp:
      path = os.path.join(tmp, "%s.keras" % name)
      model.save(path)
      reloaded = keras.saving.load_model(path)
    for label, other in (("from_config", rebuilt), ("keras_file", reloaded)):
      first = keras.tree.flatten(model(call_inputs))
      second = keras.tree.flatten(other(call_inputs))
      out["round_trip/%s/%s" % (name, label)] = np.array(max(
          float(np.max(np.abs(numpy(keras, a) - numpy(keras, b)))) for a, b in
          zip(first, second)))
  return out


def load(directories_json, inputs_path, results_path):
  """checkpoints.load_model on each of {name: [directory, task]} (a HuggingFace directory,
  Google's layout, a run's output_dir with its TF2 checkpoint): the logits on the inputs, and
  whether TensorFlow was imported."""
  import keras
  from bert_keras import checkpoints
  inputs = dict(np.load(inputs_path))
  results = {}
  for name, (directory, task) in json.loads(directories_json).items():
    model = checkpoints.load_model(directory, task=task)
    results[name] = numpy(keras, model(inputs))
    results[name + "/format"] = np.array(model.load_result.format)
  results["tensorflow_imported"] = np.array("tensorflow" in sys.modules)
  np.savez(results_path, **results)


if __name__ == "__main__":
  if sys.argv[1] == "load":
    load(*sys.argv[2:5])
  else:
    main(sys.argv[1], sys.argv[2])
