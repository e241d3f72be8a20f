"""SQuAD fine-tuning of the real all-MiniLM-L6-v2 weights, ours against the original.

Both sides start from ONE TF1 checkpoint: our BertSquad with the MiniLM encoder loaded
(checkpoints.load_model, HuggingFace format) and our freshly initialised span head, written by
checkpoints.save_tf1_checkpoint. Both train on the same windows (run_squad's own reading,
pre-shuffle and features, written to train.tf_record), the same batches in the same order
(those of run_squad's seeded input pipeline), for --steps steps with the same schedule
(--learning_rate, linear warmup over --warmup_proportion of the steps, linear decay to 0 at
--steps), dropout as in the config (real fine-tuning, so the two differ by their dropout draws):
  ours      training.build_trainer + training.fine_tune with run_squad.SquadTask, as run_squad
  original  bert-tensorflow 1.0.4's run_squad.model_fn_builder train_op in a TF1 session
            (use_tpu=False, its gather embedding lookup), through tests/oracle.py; MiniLM's
            erf gelu given to its config as a function (its get_activation takes one)
Each trained model then predicts --predict_file through our prediction path (run_squad's
features, SpanPredictor and write_predictions, checked equal to the original's elsewhere), so
only the training differs, and evaluate_squad scores both (v1.1: EM, F1). The original's
global gradient norms at the reported steps are printed too: it clips by the norm of the
word-embedding gradient's IndexedSlices values (before repeated tokens are summed), ours by
that of the summed gradient.

Usage (xquad.en.json, the default file, has 40 articles and one answer per question):
  python results/squad_vs_original.py --train_articles=0:32 --predict_articles=32:40 \\
      --steps=150 --batch_size=16 --max_seq_length=256 --learning_rate=1e-4
      # 825 training questions (~2.6 epochs of windows), 174 to predict; on the 2-core CPU
      # machine 2.1 s/step ours, 2.3 s/step the original: about 12 minutes in all
  python results/squad_vs_original.py --train_articles=0:2 --predict_articles=2:3 --steps=3 \\
      --batch_size=4 --max_seq_length=128 --output_dir=/tmp/squad_vs_original_check
      # a quick check (~40 s)
Prints progress, a table and, last, a JSON object with every figure. --output_dir must not
exist (it gets the data files, the shared initial checkpoint, each side's checkpoint and
predictions).
"""

import argparse
import json
import os
import pathlib
import random
import shutil
import sys
import time
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import logging  # noqa: E402

from bert_keras import checkpoints  # noqa: E402
from bert_keras import modeling  # noqa: E402
from bert_keras import run_squad  # noqa: E402
from bert_keras import tokenization  # noqa: E402
from bert_keras.runtime import settings  # noqa: E402
from bert_keras.runtime import distribution  # noqa: E402
from bert_keras.runtime import input_pipeline  # noqa: E402
from bert_keras.runtime import training  # noqa: E402
from bert_keras.tasks.squad import data as squad_data  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from shared_data import check_at_least_1, minilm_dir, shared_data  # noqa: E402

XQUAD = shared_data("squad", "xquad.en.json")


def parse_articles(text, flag):
  """"START:END" (either may be empty) -> slice; an error naming the flag otherwise."""
  try:
    start, end = ((int(x) if x.strip() else None) for x in text.split(":"))
  except ValueError:
    sys.exit(f'error: --{flag}={text!r}: expected "START:END", e.g. 0:32')
  return slice(start, end)


def check_args(args):
  """One-line errors for bad flags, before anything is written."""
  check_at_least_1(args, "steps", "batch_size", "predict_batch_size", "max_seq_length",
                   "doc_stride", "max_query_length")
  if not 0 <= args.warmup_proportion < 1:
    sys.exit(f"error: --warmup_proportion={args.warmup_proportion}: must be in [0, 1)")
  for flag in ("train_file", "predict_file"):
    if not os.path.isfile(getattr(args, flag)):
      sys.exit(f"error: --{flag}={getattr(args, flag)}: no such file")
  if os.path.exists(args.output_dir):
    sys.exit(f"error: --output_dir={args.output_dir} exists: remove it or pass another")


def write_articles(source, articles, path, first_answer_only):
  """source's "data"[articles] (a slice) -> path (version 1.1); for training, each question
  keeps its first answer only (run_squad trains on exactly one). -> (articles, questions)."""
  with open(source, encoding="utf-8") as f:
    data = json.load(f)["data"][articles]
  if first_answer_only:
    for paragraph in (p for article in data for p in article["paragraphs"]):
      for qa in paragraph["qas"]:
        qa["answers"] = qa["answers"][:1]
  with open(path, "w", encoding="utf-8") as f:
    json.dump({"version": "1.1", "data": data}, f)
  return len(data), sum(len(p["qas"]) for a in data for p in a["paragraphs"])


def train_ours(options, config, records, decode, steps, warmup, report):
  """run_squad's training -> (trained BertSquad, per-step losses, seconds)."""
  run_settings = settings.RunSettings.from_flags(options)
  strategy = distribution.strategy_for(run_settings.placement)
  trainer = training.build_trainer(run_settings.training, strategy,
                                   lambda: modeling.BertSquad(config), run_squad.SquadTask(),
                                   steps, warmup)
  losses, start = [], time.perf_counter()

  def log(step, stats):
    losses.append(stats["loss"])
    if step in report:
      print(f"  ours      step {step:4d}/{steps}  loss {stats['loss']:.4f}  "
            f"{(time.perf_counter() - start) / step:.2f} s/step", flush=True)

  training.fine_tune(trainer, run_settings.training, records, decode, steps, log_fn=log)
  return trainer.model, losses, time.perf_counter() - start


def train_original(config, init_checkpoint, batches, learning_rate, steps, warmup, out, report,
                   seed):
  """The original model_fn's train_op, one step per batch -> (checkpoint prefix of the trained
  weights, per-step losses, seconds, {step: (norm as it clips, norm of the dense gradients)})."""
  sys.path.insert(0, str(REPO / "tests"))
  import oracle
  import tensorflow.compat.v1 as tf1
  original = oracle.original("run_squad")
  original_modeling = oracle.original("modeling")
  bert_config = original_modeling.BertConfig.from_dict(config.to_dict())
  if config.hidden_act in ("gelu_exact", "gelu_erf"):
    bert_config.hidden_act = lambda x: tf.nn.gelu(x, approximate=False)
  tf1.estimator = types.SimpleNamespace(   # tf.estimator is gone from TF 2.21
      ModeKeys=types.SimpleNamespace(TRAIN="train", PREDICT="infer"),
      tpu=types.SimpleNamespace(TPUEstimatorSpec=lambda **spec: spec))
  tf1.disable_v2_tensorshape()
  try:
    with tf.Graph().as_default():
      tf1.set_random_seed(seed)
      model_fn = original.model_fn_builder(bert_config, init_checkpoint, learning_rate, steps,
                                           warmup, False, False)
      features = {k: tf1.placeholder(tf.int32, [None] + list(v.shape[1:]))
                  for k, v in batches[0].items()}
      spec = model_fn(features, None, "train", {})
      grads = [g for g in tf1.gradients(spec["loss"], tf1.trainable_variables()) if g is not None]
      norms = (tf1.global_norm(grads), tf1.global_norm([tf1.convert_to_tensor(g) for g in grads]))
      saver = tf1.train.Saver(tf1.trainable_variables())
      losses, clip_norms = [], {}
      # One inter-op thread: the original's train_op reads global_step (the learning rate)
      # and increments it with no order between the two; more threads race them.
      with tf1.Session(config=tf1.ConfigProto(inter_op_parallelism_threads=1)) as sess:
        sess.run(tf1.global_variables_initializer())
        start = time.perf_counter()
        for step, batch in enumerate(batches, 1):
          fetches = [spec["loss"], spec["train_op"]] + ([norms] if step in report else [])
          result = sess.run(fetches, {features[k]: batch[k] for k in features})
          losses.append(float(result[0]))
          if step in report:
            clip_norms[step] = tuple(float(n) for n in result[2])
            print(f"  original  step {step:4d}/{steps}  loss {result[0]:.4f}  "
                  f"{(time.perf_counter() - start) / step:.2f} s/step", flush=True)
        seconds = time.perf_counter() - start
        prefix = saver.save(sess, os.path.join(out, "model.ckpt"), write_meta_graph=False)
  finally:
    tf1.enable_v2_tensorshape()
  return prefix, losses, seconds, clip_norms


def predict(options, model, tokenizer, examples, out):
  """Our prediction of `examples` with `model` into `out`, evaluated -> (EM, F1, seconds)."""
  os.makedirs(out, exist_ok=True)
  start = time.perf_counter()
  predictions, null_odds, best_non_null = run_squad._predict(
      run_squad.Squad.from_flags(options), model, tf.distribute.get_strategy(), False,
      tokenizer, examples, out)
  seconds = time.perf_counter() - start
  result = run_squad.evaluate_predictions(options.predict_file, predictions, null_odds,
                                          best_non_null, out)
  return result["exact_match"], result["f1"], seconds


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--train_file", default=XQUAD)
  parser.add_argument("--train_articles", default=":", help='"START:END" of its articles')
  parser.add_argument("--predict_file", default=XQUAD)
  parser.add_argument("--predict_articles", default=":", help='"START:END" of its articles')
  parser.add_argument("--steps", type=int, default=150)
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--learning_rate", type=float, default=1e-4)
  parser.add_argument("--max_seq_length", type=int, default=256)
  parser.add_argument("--doc_stride", type=int, default=128)
  parser.add_argument("--max_query_length", type=int, default=64)
  parser.add_argument("--warmup_proportion", type=float, default=0.1)
  parser.add_argument("--predict_batch_size", type=int, default=32)
  parser.add_argument("--output_dir", default="/tmp/bert_keras_squad_vs_original")
  parser.add_argument("--verbose", action="store_true", help="the scripts' INFO logging")
  args = parser.parse_args()
  logging.set_verbosity(logging.INFO if args.verbose else logging.WARNING)
  check_args(args)
  train_articles = parse_articles(args.train_articles, "train_articles")
  predict_articles = parse_articles(args.predict_articles, "predict_articles")
  out = pathlib.Path(args.output_dir)
  (out / "data").mkdir(parents=True)
  train_file, predict_file = str(out / "data" / "train.json"), str(out / "data" / "predict.json")
  train_counts = write_articles(args.train_file, train_articles, train_file, True)
  predict_counts = write_articles(args.predict_file, predict_articles, predict_file, False)
  for flag, (articles, questions) in (("train_articles", train_counts),
                                      ("predict_articles", predict_counts)):
    if not questions:
      shutil.rmtree(out)
      sys.exit(f"error: --{flag}={getattr(args, flag)}: selects {articles} articles, "
               "no question")

  # The shared initial weights: MiniLM's encoder, our freshly initialised span head.
  keras.utils.set_random_seed(run_squad.DEFAULTS["seed"])
  model = checkpoints.load_model(minilm_dir(), task="squad")
  assert not model.load_result.missing or all(
      n.startswith("cls/squad/") for n in model.load_result.missing), model.load_result
  config, vocab_file, do_lower_case = model.config, model.vocab_file, model.do_lower_case
  init_checkpoint = str(out / "init" / "model.ckpt")
  checkpoints.save_tf1_checkpoint(model, init_checkpoint)
  del model

  warmup = int(args.steps * args.warmup_proportion)
  options = run_squad.options(
      vocab_file=vocab_file, do_lower_case=do_lower_case, output_dir=str(out / "ours"),
      init_checkpoint=init_checkpoint, train_file=train_file, predict_file=predict_file,
      max_seq_length=args.max_seq_length, doc_stride=args.doc_stride,
      max_query_length=args.max_query_length, train_batch_size=args.batch_size,
      predict_batch_size=args.predict_batch_size, learning_rate=args.learning_rate,
      warmup_proportion=args.warmup_proportion, log_every_steps=1,
      save_checkpoints_steps=args.steps)
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)

  # run_squad's training windows: its reading, pre-shuffle and features.
  examples = squad_data.read_squad_examples(train_file, is_training=True)
  random.Random(12345).shuffle(examples)
  writer = run_squad.FeatureWriter(str(out / "train.tf_record"), is_training=True)
  squad_data.convert_examples_to_features(examples, tokenizer, args.max_seq_length,
                                          args.doc_stride, args.max_query_length, True,
                                          writer.process_feature)
  writer.close()
  decode = run_squad.decode_fn(args.max_seq_length, is_training=True)
  batches = list(input_pipeline.training_dataset(
      [writer.filename], decode, args.batch_size, seed=options.seed)
      .take(args.steps).as_numpy_iterator())   # the order fine_tune reads them in
  print(f"train: {train_counts[1]} questions ({train_counts[0]} articles), "
        f"{writer.num_features} windows; {args.steps} steps of {args.batch_size} "
        f"({args.steps * args.batch_size / writer.num_features:.1f} epochs of windows), "
        f"warmup {warmup}; predict: {predict_counts[1]} questions "
        f"({predict_counts[0]} articles)", flush=True)

  report = sorted({1, max(1, args.steps // 4), max(1, args.steps // 2),
                   max(1, 3 * args.steps // 4), args.steps})
  predict_examples = squad_data.read_squad_examples(predict_file, is_training=False)
  sides = {}
  keras.utils.set_random_seed(options.seed)
  ours, losses, seconds = train_ours(options, config, writer.filename, decode, args.steps,
                                     warmup, report)
  em, f1, predict_seconds = predict(options, ours, tokenizer, predict_examples,
                                    str(out / "ours" / "predict"))
  sides["ours"] = dict(losses=losses, train_seconds=seconds, exact_match=em, f1=f1,
                       predict_seconds=predict_seconds)
  del ours
  prefix, losses, seconds, clip_norms = train_original(
      config, init_checkpoint, batches, args.learning_rate, args.steps, warmup,
      str(out / "original"), report, options.seed)
  theirs = modeling.BertSquad(config)
  loaded = checkpoints.load_checkpoint(theirs, prefix)
  assert not loaded.missing, loaded
  em, f1, predict_seconds = predict(options, theirs, tokenizer, predict_examples,
                                    str(out / "original" / "predict"))
  sides["original"] = dict(losses=losses, train_seconds=seconds, exact_match=em, f1=f1,
                           predict_seconds=predict_seconds)

  last = max(1, args.steps // 10)
  for side in sides.values():
    side["final_loss"] = side["losses"][-1]
    side[f"mean_loss_last_{last}"] = float(np.mean(side["losses"][-last:]))
  rows = [(f"loss at step {s}", [v["losses"][s - 1] for v in sides.values()], "%.4f")
          for s in report]
  rows += [(f"mean loss, last {last} steps", [v[f"mean_loss_last_{last}"]
                                              for v in sides.values()], "%.4f"),
           ("EM", [v["exact_match"] for v in sides.values()], "%.2f"),
           ("F1", [v["f1"] for v in sides.values()], "%.2f"),
           ("train seconds", [v["train_seconds"] for v in sides.values()], "%.1f"),
           ("predict seconds", [v["predict_seconds"] for v in sides.values()], "%.1f")]
  print(f"\n{'':32s}{'ours':>12s}{'original':>12s}")
  for name, values, fmt in rows:
    print(f"{name:32s}" + "".join(f"{fmt % v:>12s}" for v in values))
  print("original's global gradient norm, as it clips / dense (ours clips by the dense one):")
  print("  " + ", ".join(f"step {s}: {a:.3f} / {b:.3f}" for s, (a, b) in clip_norms.items()))
  settings = {k: v for k, v in vars(args).items() if k != "verbose"}
  settings.update(train_questions=train_counts[1], train_windows=writer.num_features,
                  predict_questions=predict_counts[1], warmup_steps=warmup)
  print(json.dumps({"settings": settings, **sides, "original_clip_norms": {
      str(s): {"as_clipped": a, "dense": b} for s, (a, b) in clip_norms.items()}}))


if __name__ == "__main__":
  main()
