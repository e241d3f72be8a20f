"""predict.py against KerasHub's BertTextClassifier.predict, file in to file out.

One model, two frameworks: a MiniLM-size BERT classifier (6 layers, hidden 384, 12 heads,
intermediate 1536, bert-base-uncased's vocabulary, 2 labels; random weights drawn once with a
seed) is saved as a run_classifier output_dir (runtime/model_dir.py) for ours, and the same
weights are set, tensor by tensor, into keras_hub.models.BertBackbone + BertTextClassifier
(gelu approximate and LayerNorm epsilon 1e-12 on both sides) for the peer, which runs in a
Python of its own (--peer_python; keras-hub is not a dependency of this repository).
Both read MRPC dev (../shared, 408 pairs, "#1 String" and "#2 String"), predict in batches of
--batch_size at --max_seq_length and write JSON Lines (the row, label, probabilities):
  * ours: predict.py's load_predictor + predict_file (tokenization in the graph, padding
    trimmed per batch);
  * KerasHub: BertTextClassifierPreprocessor + BertTextClassifier.predict((a, b),
    batch_size), csv and json around it.
Each side runs in a fresh process per round (imports not timed): "cold" is the model built
and loaded, then the file predicted (tracing included); "warm" the file predicted again with
the loaded model. Rounds alternate the two sides (--repeats; each keeps its best). The table
also gives the largest and the median difference of the probabilities and how many labels
agree (KerasHub's tokenizer does not strip accents and truncates pairs round-robin; ours, as
the original, strips them and truncates the longer text first).

  python bench/bench_predict.py --peer_python=/tmp/khvenv/bin/python
Prints a table; the last line is a JSON object of the figures.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from shared_data import shared_data  # noqa: E402

PEER = r"""
import csv, json, sys, time
t0 = time.perf_counter()
import numpy as np, keras, keras_hub
weights_file, vocab, tsv, out, config_json, batch, seq, rounds = sys.argv[1:9]
c = json.loads(config_json)
w = dict(np.load(weights_file))
start = time.perf_counter()
tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocab, lowercase=True)
pre = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=int(seq))
backbone = keras_hub.models.BertBackbone(
    vocabulary_size=c["vocab_size"], num_layers=c["num_hidden_layers"],
    num_heads=c["num_attention_heads"], hidden_dim=c["hidden_size"],
    intermediate_dim=c["intermediate_size"], max_sequence_length=c["max_position_embeddings"],
    num_segments=c["type_vocab_size"])
model = keras_hub.models.BertTextClassifier(backbone, num_classes=int(c["num_labels"]),
                                            preprocessor=pre, activation="softmax")
H, A = c["hidden_size"], c["num_attention_heads"]
def dense(layer, name, heads=None):
  kernel, bias = w[name + "/kernel"], w[name + "/bias"]
  if heads == "in":   # query/key/value: [H, A, H/A]
    kernel, bias = kernel.reshape(H, A, H // A), bias.reshape(A, H // A)
  elif heads == "out":  # attention output: [A, H/A, H]
    kernel = kernel.reshape(A, H // A, H)
  layer.kernel.assign(kernel)
  layer.bias.assign(bias)
def norm(layer, name):
  layer.gamma.assign(w[name + "/gamma"])
  layer.beta.assign(w[name + "/beta"])
backbone.token_embedding.embeddings.assign(w["bert/embeddings/word_embeddings"])
backbone.segment_embedding.embeddings.assign(w["bert/embeddings/token_type_embeddings"])
backbone.position_embedding.position_embeddings.assign(w["bert/embeddings/position_embeddings"])
norm(backbone.embeddings_layer_norm, "bert/embeddings/LayerNorm")
for i in range(c["num_hidden_layers"]):
  layer, p = backbone.transformer_layers[i], "bert/encoder/layer_%d/" % i
  attention = layer._self_attention_layer
  dense(attention._query_dense, p + "attention/self/query", "in")
  dense(attention._key_dense, p + "attention/self/key", "in")
  dense(attention._value_dense, p + "attention/self/value", "in")
  dense(attention._output_dense, p + "attention/output/dense", "out")
  norm(layer._self_attention_layer_norm, p + "attention/output/LayerNorm")
  dense(layer._feedforward_intermediate_dense, p + "intermediate/dense")
  dense(layer._feedforward_output_dense, p + "output/dense")
  norm(layer._feedforward_layer_norm, p + "output/LayerNorm")
dense(backbone.pooled_dense, "bert/pooler/dense")
model.output_dense.kernel.assign(w["output_weights"].T)
model.output_dense.bias.assign(w["output_bias"])
built = time.perf_counter() - start
labels = [str(i) for i in range(int(c["num_labels"]))]

def run_file():
  with open(tsv, encoding="utf-8-sig", newline="") as f:
    rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
  header, rows = rows[0], rows[1:]
  a = [r[3] for r in rows]
  b = [r[4] for r in rows]
  probabilities = model.predict((a, b), batch_size=int(batch), verbose=0)
  with open(out, "w", encoding="utf-8") as f:
    for row, p in zip(rows, probabilities):
      fields = dict(zip(header, row))
      fields.update(label=labels[int(np.argmax(p))],
                    probabilities=dict(zip(labels, map(float, p))))
      f.write(json.dumps(fields, ensure_ascii=False) + "\n")
  return len(rows)

start = time.perf_counter()
n = run_file()
cold = time.perf_counter() - start + built
warm = []
for _ in range(int(rounds)):
  start = time.perf_counter()
  run_file()
  warm.append(time.perf_counter() - start)
print(json.dumps({"rows": n, "cold_s": cold, "warm_s": min(warm),
                  "keras_hub": keras_hub.__version__, "keras": keras.__version__}))
"""


def _build_model_dir(directory, vocab, args):
  """Our classifier's run_* output_dir and the weights (npz, TF1 names) for the peer."""
  import keras
  from bert_keras import checkpoints
  from bert_keras import modeling
  from bert_keras.runtime import model_dir
  with open(vocab, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  config = modeling.BertConfig(vocab_size=vocab_size, hidden_size=args.hidden,
                               num_hidden_layers=args.layers, num_attention_heads=args.heads,
                               intermediate_size=args.hidden * 4, max_position_embeddings=512,
                               type_vocab_size=2)
  keras.utils.set_random_seed(args.seed)
  model = modeling.BertClassifier(config, 2)
  rng = np.random.default_rng(args.seed)
  for v in model.weights:  # biases and LayerNorm too, so that every tensor's mapping counts
    v.assign(rng.normal(0, 0.05, v.shape).astype(np.float32) + (
        1.0 if v.path.endswith("gamma") else 0.0))
  checkpoints.save_tf1_checkpoint(model, os.path.join(directory, "model.ckpt"))
  options = types.SimpleNamespace(vocab_file=vocab, do_lower_case=True,
                                  max_seq_length=args.max_seq_length,
                                  text_a_column="#1 String", text_b_column="#2 String")
  model_dir.write_model_dir(directory, options, config, "classifier", labels=["0", "1"])
  weights = {name: v.numpy() for name, v in checkpoints.tf1_variable_map(model).items()}
  np.savez(os.path.join(directory, "weights.npz"), **weights)
  return dict(config.to_dict(), num_labels=2)


OURS = r"""
import json, sys, time
from bert_keras.utils import quiet_tensorflow
from absl import logging
from bert_keras import predict
logging.set_verbosity(logging.WARNING)
model_dir, tsv, out, batch, rounds = sys.argv[1:6]
options = predict.options(model_dir=model_dir, input_file=tsv, output_file=out,
                          batch_size=int(batch))
start = time.perf_counter()
predictor = predict.load_predictor(options)
counts = predict.predict_file(predictor, options)
cold = time.perf_counter() - start
warm = []
for _ in range(int(rounds)):
  start = time.perf_counter()
  predict.predict_file(predictor, options)
  warm.append(time.perf_counter() - start)
print(json.dumps({"rows": counts["written"], "cold_s": cold, "warm_s": min(warm)}))
"""


def _side(command):
  """Runs one side's script (a fresh process); its last stdout line as JSON."""
  done = subprocess.run(command, capture_output=True, text=True,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES=""))
  if done.returncode != 0:
    sys.exit(f"{command[0]} failed:\n" + done.stderr[-3000:])
  return json.loads(done.stdout.strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--peer_python", required=True,
                      help="a Python with keras-hub (and tensorflow-text) installed")
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--layers", type=int, default=6)
  parser.add_argument("--hidden", type=int, default=384)
  parser.add_argument("--heads", type=int, default=12)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  tsv = shared_data("glue", "MRPC", "dev.tsv")
  vocab = shared_data("vocab", "bert-base-uncased-vocab.txt")
  with tempfile.TemporaryDirectory() as scratch:
    config = _build_model_dir(scratch, vocab, args)
    ours_out, peer_out = os.path.join(scratch, "ours.jsonl"), os.path.join(scratch, "peer.jsonl")
    best = {key: float("inf") for key in ("ours_cold", "ours_warm", "peer_cold", "peer_warm")}
    info = {}
    for _ in range(args.repeats):  # the two sides in turn, each in a fresh process
      ours = _side([sys.executable, "-c", OURS, scratch, tsv, ours_out, str(args.batch_size),
                    "1"])
      info = _side([args.peer_python, "-c", PEER, os.path.join(scratch, "weights.npz"), vocab,
                    tsv, peer_out, json.dumps(config), str(args.batch_size),
                    str(args.max_seq_length), "1"])
      for key, side in (("ours", ours), ("peer", info)):
        best[key + "_cold"] = min(best[key + "_cold"], side["cold_s"])
        best[key + "_warm"] = min(best[key + "_warm"], side["warm_s"])
    rows = ours["rows"]
    with open(ours_out, encoding="utf-8") as f:
      ours = [json.loads(line) for line in f]
    with open(peer_out, encoding="utf-8") as f:
      peer = [json.loads(line) for line in f]
  diffs = [max(abs(a["probabilities"][k] - b["probabilities"][k]) for k in a["probabilities"])
           for a, b in zip(ours, peer)]
  diff, median = max(diffs), float(np.median(diffs))
  agree = sum(a["label"] == b["label"] for a, b in zip(ours, peer))
  rate = {k: rows / v for k, v in best.items()}
  print(f"MiniLM-size classifier ({args.layers} layers, hidden {args.hidden}, {args.heads} "
        f"heads, random weights mapped into both), MRPC dev {rows} pairs, batch "
        f"{args.batch_size}, max_seq_length {args.max_seq_length}; best of {args.repeats} "
        f"rounds; {os.cpu_count()} CPUs; keras-hub {info['keras_hub']}, keras {info['keras']}\n")
  print("| peer | cold: load + file (s) | cold pairs/s | warm: file (s) | warm pairs/s |")
  print("|---|---:|---:|---:|---:|")
  for key, name in (("ours", "ours: predict.py (load_predictor + predict_file)"),
                    ("peer", "KerasHub BertTextClassifier.predict")):
    print(f"| {name} | {best[key + '_cold']:.2f} | {rate[key + '_cold']:.1f} | "
          f"{best[key + '_warm']:.2f} | {rate[key + '_warm']:.1f} |")
  cold, warm = rate["ours_cold"] / rate["peer_cold"], rate["ours_warm"] / rate["peer_warm"]
  print(f"\nours vs KerasHub: {cold:.2f}x cold, {warm:.2f}x warm; probabilities: largest "
        f"difference {diff:.2e} (median {median:.1e}; rows tokenized differently), labels "
        f"agree on {agree} of {rows}")
  print(json.dumps(dict(rows=rows, batch_size=args.batch_size,
                        max_seq_length=args.max_seq_length, layers=args.layers,
                        hidden=args.hidden, **{k + "_s": v for k, v in best.items()},
                        **{k + "_per_s": v for k, v in rate.items()}, speedup_cold=cold,
                        speedup_warm=warm, max_abs_diff=diff, median_abs_diff=median,
                        labels_agree=agree,
                        keras_hub=info["keras_hub"], cpus=os.cpu_count())))


if __name__ == "__main__":
  main()
