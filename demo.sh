#!/usr/bin/env bash
# The main job on built-in defaults, end to end:
#   learn a WordPiece vocab -> create pretraining data -> pretrain a tiny BERT -> evaluate.
#
#   bash demo.sh                                   # sample_text.txt, a few minutes on 2 cores
#   INPUT="../shared/data/text/gutenberg_sentence_per_line/*.txt" VOCAB_SIZE=8000 \
#     STEPS=2000 bash demo.sh                      # real books
#
# Every step is one of the scripts, called with the original's flags; OUT (default
# /tmp/bert_keras_demo) receives vocab.txt, bert_config.json, the TFRecords and the model.
set -euo pipefail
cd "$(dirname "$0")"
unset TF_USE_LEGACY_KERAS
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
PY=.venv/bin/python

INPUT=${INPUT:-sample_text.txt}
OUT=${OUT:-/tmp/bert_keras_demo}
VOCAB_SIZE=${VOCAB_SIZE:-1000}
STEPS=${STEPS:-300}
SEQ=${SEQ:-64}
PREDS=${PREDS:-10}
mkdir -p "$OUT"

echo "== 1. vocab: create_vocab.py on $INPUT"
$PY create_vocab.py --input_file="$INPUT" --output_file="$OUT/vocab.txt" \
  --vocab_size="$VOCAB_SIZE" --num_unused=0 --do_lower_case=True
$PY - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
from bert_keras import tokenization
tok = tokenization.FullTokenizer(f"{out}/vocab.txt", do_lower_case=True)
print("tokens of a new sentence:", tok.tokenize("The keeper's daughter baked sourdough bread."))
config = {"vocab_size": len(tok.vocab), "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 256, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
          "max_position_embeddings": 128, "type_vocab_size": 2, "initializer_range": 0.02}
with open(f"{out}/bert_config.json", "w") as f:
  json.dump(config, f, indent=2)
PY

echo "== 2. pretraining data: create_pretraining_data.py"
$PY create_pretraining_data.py --input_file="$INPUT" --output_file="$OUT/tf_examples.tfrecord" \
  --vocab_file="$OUT/vocab.txt" --do_lower_case=True --max_seq_length="$SEQ" \
  --max_predictions_per_seq="$PREDS" --masked_lm_prob=0.15 --random_seed=12345 --dupe_factor=20

echo "== 3. pretraining and evaluation: run_pretraining.py"
rm -rf "$OUT/pretraining_output"
$PY run_pretraining.py --input_file="$OUT/tf_examples.tfrecord" \
  --output_dir="$OUT/pretraining_output" --do_train=True --do_eval=True \
  --bert_config_file="$OUT/bert_config.json" --train_batch_size=16 --eval_batch_size=16 \
  --max_seq_length="$SEQ" --max_predictions_per_seq="$PREDS" --num_train_steps="$STEPS" \
  --num_warmup_steps=$((STEPS / 10)) --learning_rate=1e-3 --save_checkpoints_steps=100 \
  --iterations_per_loop=50 --max_eval_steps=20

echo "== eval_results.txt"
cat "$OUT/pretraining_output/eval_results.txt"
