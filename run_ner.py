r"""BERT fine-tuning on token classification: named entity recognition (NER) and any other
tagging task in CoNLL files, the way run_classifier.py fine-tunes on sentences.

  python run_ner.py --do_train=true --do_eval=true --do_predict=true \
    --data_dir=$NER_DIR --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --do_lower_case=false \
    --max_seq_length=128 --train_batch_size=32 --learning_rate=5e-5 \
    --num_train_epochs=3.0 --output_dir=/tmp/ner_output/

--data_dir holds train.txt, dev.txt and test.txt (or train.conll, dev.conll and test.conll)
in CoNLL format: one token a line, its tag in the LAST column (tab- or space-separated), blank
lines between sentences, -DOCSTART- lines skipped; tags in BIO (IOB2), IOB1 or IOE
(tasks/ner/tagging.py). test.txt may be untagged (one column). The tag set is --labels, else the
tags of train.txt (sorted, "O" first); it is saved in output_dir/labels.txt and reused by
--do_eval / --do_predict (also with another output_dir and --init_checkpoint=<that
output_dir>) and checkpoints.load_model(output_dir, task="tagger"). --init_checkpoint may
also be a HuggingFace directory (config.json, vocab.txt, model.safetensors) alone.

A word's tag is learned and predicted on its first WordPiece (the BERT paper, section 4.3).
A sentence longer than max_seq_length - 2 pieces is split into windows --doc_stride pieces
apart, each word predicted from the window where it has the most context (run_squad's rule);
every input token gets exactly one output line.

Outputs in --output_dir: checkpoints (model.ckpt-N, resumable), the model files (labels.txt,
bert_config.json, vocab.txt, tokenizer_config.json, task.json, run_options.json:
runtime/model_dir.py; load_model reads them), eval_results.txt (conlleval's
entity precision, recall, F1 as fractions, its token accuracy, each type's F1, the loss),
dev_predictions.txt and test_predictions.txt (`token gold predicted` lines, conlleval's
input: evaluate_ner.py dev_predictions.txt prints the same F1). --eval_every_steps keeps the
best model by entity F1 in output_dir/best.
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")
import dataclasses
import os

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import losses
from bert_keras import modeling
from bert_keras.runtime import common_flags
from bert_keras.runtime import job
from bert_keras.runtime import model_dir
from bert_keras.runtime import option_checks as checks
from bert_keras.runtime import outputs
from bert_keras.runtime import run_checks
from bert_keras.runtime import settings
from bert_keras.runtime import training
from bert_keras.tasks.ner import tagging as ner
from bert_keras.utils import conlleval
from bert_keras.utils import errors
from bert_keras.utils import file_io

SPLITS = {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}
# The other names a split's file may have in --data_dir (WNUT-17's layout), after SPLITS'.
OTHER_EXTENSIONS = (".conll",)


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return common_flags.make_options(DEFAULTS, overrides)


def define_flags(fv=flags.FLAGS):
  """run_classifier's flags (same names and defaults) plus --doc_stride and --labels."""
  flags.DEFINE_string("data_dir", None,
                      "The input data dir, with train.txt, dev.txt and test.txt (CoNLL; or "
                      "train.conll, dev.conll and test.conll).",
                      flag_values=fv)
  common_flags.define_model_flags(max_seq_length=128, max_seq_length_help=(
      " Here: longer sentences are split into windows (--doc_stride); no word is dropped."), fv=fv)
  flags.DEFINE_integer("doc_stride", 64,
                       "When a sentence has more WordPieces than fit, how far apart (in "
                       "pieces) its windows start.", flag_values=fv)
  flags.DEFINE_string("labels", None,
                      "Comma-separated tags in the order of the model's outputs (default: "
                      "output_dir/labels.txt, else the tags of train.txt, sorted, O first).",
                      flag_values=fv)
  common_flags.define_shared_flags(("jobs",) + common_flags.FINE_TUNING + ("trim_train_batches",),
                                   ("data_dir", "output_dir"), fv)
  flags.adopt_module_key_flags(common_flags, flag_values=fv)  # (--help lists them)


# The options of run() (options(), model_dir.resolve_options): the flags' names and defaults,
# read from define_flags without parsing or touching absl's FLAGS.
DEFAULTS = common_flags.flag_defaults(define_flags)


@dataclasses.dataclass(frozen=True)
class Tagging(settings.FromFlags):
  """run_ner's own flags, typed (settings.FromFlags): the CoNLL files' directory, the tag set
  given (comma-separated, or None) and how far apart a long sentence's windows start."""
  data_dir: str
  labels: str | None
  doc_stride: int


# ----------------------------------------------------------------------------
# The data and the tag set.

def split_file(data_dir, split):
  """The file of `split` ("train", "dev", "test") in data_dir: SPLITS[split] (train.txt), else
  the same name with one of OTHER_EXTENSIONS (train.conll); a ValueError naming the files
  looked for and those data_dir holds when none is there."""
  stem = os.path.splitext(SPLITS[split])[0]
  names = [SPLITS[split]] + [stem + extension for extension in OTHER_EXTENSIONS]
  for name in names:
    path = os.path.join(data_dir, name)
    if tf.io.gfile.exists(path):
      return path
  found = sorted(tf.io.gfile.listdir(data_dir)) if tf.io.gfile.isdir(data_dir) else None
  held = ("it does not exist" if found is None else "it holds " + errors.error_line(
      ", ".join(found), 300) if found else "it is empty")
  raise ValueError(f"--data_dir {data_dir}: no {' or '.join(names)} ({held})")


def read_data(run, tagging):
  """{"train", "dev", "test": list of ner.Sentence, or None where the flags do not ask for
  it}, each read from split_file's file; test.txt may be untagged. Errors name the file and
  line. run: the settings.RunSettings; tagging: the Tagging."""
  wanted = {"train": run.training.do_train, "dev": run.evaluation.do_eval,
            "test": run.evaluation.do_predict}
  data = {}
  for split, asked in wanted.items():
    data[split] = ner.read_conll(split_file(tagging.data_dir, split),
                                 tags_required=split != "test") if asked else None
  return data


def resolve_labels(run, tagging, data):
  """The tag set: --labels, else output_dir/labels.txt (a run's saved set), else the
  labels.txt beside --init_checkpoint (a run_ner output_dir), else the tags of train.txt;
  every tag of the data must be in it (a ValueError naming file and line)."""
  output_dir = run.output.output_dir
  # (--overwrite_output_dir: not the labels of the run moved aside)
  saved = None if run.output.move_aside else checkpoints.read_labels(output_dir)
  given = ner.parse_labels(tagging.labels) if tagging.labels else None
  saved_file = os.path.join(output_dir, checkpoints.LABELS_FILE)
  if saved is None and run.model.init_checkpoint:
    path = run.model.init_checkpoint.rstrip("/")
    directory = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
    saved = checkpoints.read_labels(directory)
    saved_file = os.path.join(directory, checkpoints.LABELS_FILE)
  if given and saved and given != saved:
    raise ValueError(f"--labels={tagging.labels} differs from the tag set the model was "
                     f"trained with ({saved_file}: {','.join(saved)})")
  if given or saved:
    labels, source = given or saved, "--labels" if given else saved_file
  elif data["train"]:
    labels = ner.tag_list(data["train"])
    source = os.path.basename(split_file(tagging.data_dir, "train"))
  else:
    raise ValueError(f"no tag set: give --labels, or --do_train (train.txt's tags), or an "
                     f"--output_dir or --init_checkpoint with a {checkpoints.LABELS_FILE}")
  if len(labels) < 2:  # a one-class softmax: loss 0 at every step, a useless model
    raise ValueError(f"{source}: the tag set has {len(labels)} tag"
                     f"{'' if len(labels) == 1 else 's'} ({', '.join(labels)}); a tagger "
                     "needs at least two (give --labels to name the others)")
  for sentences in data.values():
    ner.check_tags(sentences or (), labels, source)
  logging.info("Tags (%d): %s", len(labels), errors.error_line(", ".join(labels)))
  return labels


# ----------------------------------------------------------------------------
# The model.

def create_model(bert_config, is_training, input_ids, input_mask, segment_ids, tag_ids,
                 num_labels, model=None):
  """run_classifier's create_model for tagging: (loss [], per_token_loss [B, S], logits
  [B, S, num_labels], predictions int32 [B, S]). The model is a
  modeling.BertTokenClassifier(bert_config, num_labels) (`model` when given, else a new one,
  freshly initialised). input_ids, input_mask, segment_ids int [B, S]; tag_ids int [B, S],
  -1 where no tag is learned; loss = the mean of per_token_loss over the tagged pieces."""
  if model is None:
    model = modeling.BertTokenClassifier(bert_config, num_labels)
  logits = model({"input_ids": input_ids, "input_mask": input_mask,
                  "segment_ids": segment_ids}, training=is_training)
  per_token_loss = losses.token_classifier_loss(logits, tag_ids)
  tagged = tf.reduce_sum(tf.cast(tf.cast(tag_ids, tf.int32) >= 0, tf.float32))
  loss = tf.reduce_sum(per_token_loss) / tf.maximum(tagged, 1.0)
  return loss, per_token_loss, logits, tf.argmax(logits, axis=-1, output_type=tf.int32)


# ----------------------------------------------------------------------------

def _validate(options):
  checks.check_start(options)
  checks.check(options, {
      checks.EXISTING_FILES: ("bert_config_file", "vocab_file"),
      checks.POSITIVE: ("train_batch_size", "eval_batch_size", "predict_batch_size",
                        "iterations_per_loop", "gradient_accumulation_steps", "doc_stride"),
      checks.AT_LEAST: {"max_seq_length": (3, "[CLS] a piece [SEP]")},
      checks.REQUIRES: checks.EVAL_EVERY_STEPS})


def run(options, strategy=None):
  """Trains, evaluates and/or predicts as the flags say; returns {"eval": the eval results
  (a dict) or None, "predict": the predicted tags of test.txt (per sentence a list) or
  None}. options: a namespace from options(...), or the parsed FLAGS; strategy: a
  tf.distribute strategy (built from the options when None). With a model directory as
  --output_dir or --init_checkpoint (runtime/model_dir.py), the model flags may be left out."""
  options, _ = model_dir.resolve_options(options, DEFAULTS, fill=("doc_stride",),
                                         writes=("tagger",))
  _validate(options)
  flags = settings.values_of(options)
  run_settings = settings.RunSettings(**settings.parts(flags))
  tagging = Tagging(**settings.fields(Tagging, flags))
  return _run(run_settings, tagging, strategy)


def _run(run, tagging, strategy):
  """run() on the typed settings: the config, vocab, data and tag set checked, then the output
  directory made and locked, and the work done."""
  config, tokenizer = run_checks.config_and_tokenizer(run)
  data = read_data(run, tagging)
  labels = resolve_labels(run, tagging, data)
  windows = {split: None if sentences is None else ner.convert_sentences(
      sentences, tokenizer, labels, run.model.max_seq_length, tagging.doc_stride)
      for split, sentences in data.items()}
  steps = training.train_steps(run.training, len(windows["train"] or ()), "windows")
  with job.started(run, config, "tagger", strategy, labels,
                           doc_stride=tagging.doc_stride) as run_dir:
    return _train_eval_predict(run, run_dir, config, data, windows, labels, steps)


def _train_eval_predict(run, run_dir, config, data, windows, labels, steps):
  """_run() after the checks: train, eval and predict as the flags ask. steps:
  (num_train_steps, num_warmup_steps), None each without --do_train."""
  num_train_steps, num_warmup_steps = steps
  trainer = training.build_trainer(
      run.training, run_dir.strategy, lambda: modeling.BertTokenClassifier(config, len(labels)),
      ner.TaggerTask(), num_train_steps or 1, num_warmup_steps or 0)
  infer = ner.tagger_inference_fn(trainer.model, trainer.strategy, trainer.use_xla)
  trim = run.evaluation.trim_eval_batches and not isinstance(run_dir.strategy,
                                                              tf.distribute.TPUStrategy)
  max_seq_length = run.model.max_seq_length

  def tag(split, batch_size):
    """The predicted tags of a split's sentences, and (loss sum, tagged pieces)."""
    arrays = ner.window_arrays(windows[split], max_seq_length)
    predictions, loss_sum, tagged, _ = ner.predict(infer, arrays, batch_size, trim)
    return ner.assemble_tags(data[split], windows[split], predictions, labels), loss_sum, tagged

  def evaluate(step):
    """(The eval results of the dev set at `step`, its predicted tags)."""
    predicted, loss_sum, tagged = tag("dev", run.evaluation.eval_batch_size)
    return ner.eval_results(data["dev"], predicted, loss_sum, tagged, step), predicted

  def train():
    """--do_train: the windows of train.txt through train.tf_record; with --eval_every_steps,
    evaluate on the dev set, the best model by eval_f1 in output_dir/best."""
    train_file = os.path.join(run_dir.record_dir, "train.tf_record")
    ner.write_records(ner.window_arrays(windows["train"], max_seq_length), train_file)
    logging.info("***** Running training *****")
    logging.info("  Num sentences = %d (%d windows)", len(data["train"]),
                 len(windows["train"]))
    logging.info("  Batch size = %d", run.training.train_batch_size)
    logging.info("  Num steps = %d", num_train_steps)
    training.fine_tune(trainer, run.training, train_file, ner.decode_fn(max_seq_length),
                       num_train_steps, **job.eval_during_training(
                           run.training, lambda step: evaluate(step)[0], "eval_f1",
                           run_dir.chief, trainer.model))

  job.train_or_restore(run, trainer, train)
  results = {"eval": None, "predict": None}
  output_dir = run.output.output_dir
  if run.evaluation.do_eval:
    logging.info("***** Running evaluation *****")
    logging.info("  Num sentences = %d (%d windows)", len(data["dev"]), len(windows["dev"]))
    results["eval"], predicted = evaluate(int(trainer.global_step.numpy()))
    _write_eval(output_dir, data["dev"], predicted, results["eval"], run_dir.chief)
  if run.evaluation.do_predict:
    logging.info("***** Running prediction*****")
    logging.info("  Num sentences = %d (%d windows)", len(data["test"]), len(windows["test"]))
    results["predict"] = tag("test", run.evaluation.predict_batch_size)[0]
    _write_predictions(output_dir, data["test"], results["predict"], run_dir.chief)
  return results


def _write_eval(output_dir, sentences, predicted, results, chief):
  """Logs the eval results and conlleval's report; writes eval_results.txt and
  dev_predictions.txt (chief)."""
  logging.info("***** Eval results *****")
  for key in sorted(results):
    logging.info("  %s = %s", key, str(results[key]))
  counts = conlleval.score_sentences([s.tags for s in sentences], predicted)
  for line in conlleval.report(counts).splitlines():
    logging.info("%s", line)
  if chief:
    file_io.write_text_atomic(os.path.join(output_dir, "eval_results.txt"),
                              outputs.format_results(results))
    file_io.write_text_atomic(os.path.join(output_dir, "dev_predictions.txt"),
                              ner.prediction_text(sentences, predicted))


def _write_predictions(output_dir, sentences, predicted, chief):
  """Writes test_predictions.txt (chief); logs conlleval's report when test.txt is tagged."""
  logging.info("***** Predict results *****")
  if sentences[0].tags is not None:
    counts = conlleval.score_sentences([s.tags for s in sentences], predicted)
    for line in conlleval.report(counts).splitlines():
      logging.info("test: %s", line)
  if chief:
    file_io.write_text_atomic(os.path.join(output_dir, "test_predictions.txt"),
                              ner.prediction_text(sentences, predicted))


main = errors.script_main(run)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
