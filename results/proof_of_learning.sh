#!/usr/bin/env bash
# Proof of learning: pretrain a small BERT (L=4, H=256, A=4) from scratch on 16 of the
# ../shared books and evaluate masked-LM accuracy on a held-out book at every checkpoint,
# against the unigram baseline (always predicting the most frequent masked token).
#   bash results/proof_of_learning.sh            # ~25 minutes on 2 cores
# Env: OUT (default /tmp/bert_keras_books), STEPS (1500), DTYPE (bfloat16),
# BERT_SHARED_DIR (../shared).
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
PY=${PY:-.venv/bin/python}
SHARED=${BERT_SHARED_DIR:-../shared}
BOOKS=$SHARED/data/text/gutenberg_sentence_per_line
VOCAB=$SHARED/data/vocab/bert-base-uncased-vocab.txt
HELDOUT=$BOOKS/chesterton-thursday.txt
OUT=${OUT:-/tmp/bert_keras_books}
STEPS=${STEPS:-1500}
DTYPE=${DTYPE:-bfloat16}
mkdir -p "$OUT"
TRAIN=$(ls "$BOOKS"/*.txt | grep -v chesterton-thursday | paste -sd, -)

if [ ! -s "$OUT/heldout.tfrecord" ]; then
  $PY create_pretraining_data.py --input_file="$TRAIN" --output_file="$OUT/train.tfrecord" \
    --vocab_file="$VOCAB" --do_lower_case=True --max_seq_length=128 --max_predictions_per_seq=20 \
    --dupe_factor=3 --num_workers=2 --noprogress
  $PY create_pretraining_data.py --input_file="$HELDOUT" --output_file="$OUT/heldout.tfrecord" \
    --vocab_file="$VOCAB" --do_lower_case=True --max_seq_length=128 --max_predictions_per_seq=20 \
    --dupe_factor=1 --random_seed=7 --noprogress
fi
cat > "$OUT/bert_config.json" <<JSON
{"vocab_size": 30522, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
 "intermediate_size": 1024, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
 "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2,
 "initializer_range": 0.02}
JSON

$PY run_pretraining.py --input_file="$OUT/train.tfrecord-*" --output_dir="$OUT/model" \
  --do_train=True --bert_config_file="$OUT/bert_config.json" --train_batch_size=32 \
  --max_seq_length=128 --max_predictions_per_seq=20 --num_train_steps="$STEPS" \
  --num_warmup_steps=$((STEPS / 10)) --learning_rate=5e-4 --save_checkpoints_steps=250 \
  --iterations_per_loop=50 --keep_checkpoint_max=20 --dtype="$DTYPE"

echo "step masked_lm_accuracy masked_lm_loss (held-out book, 50 batches of 32)"
for ckpt in $(ls "$OUT"/model/model.ckpt-*.index | sed 's/.index$//' | sort -t- -k2 -n); do
  step=${ckpt##*-}
  rm -rf "$OUT/eval-$step"
  $PY run_pretraining.py --input_file="$OUT/heldout.tfrecord" --output_dir="$OUT/eval-$step" \
    --do_eval=True --bert_config_file="$OUT/bert_config.json" --init_checkpoint="$ckpt" \
    --eval_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 --max_eval_steps=50 \
    > "$OUT/eval-$step.log" 2>&1
  echo "$step $(grep masked_lm_accuracy "$OUT/eval-$step/eval_results.txt" | cut -d' ' -f3)" \
       "$(grep masked_lm_loss "$OUT/eval-$step/eval_results.txt" | cut -d' ' -f3)"
done
$PY - "$OUT/heldout.tfrecord" <<'PY'
import collections, sys
import tensorflow as tf
counts = collections.Counter()
for record in tf.data.TFRecordDataset(sys.argv[1]):
  f = tf.train.Example.FromString(record.numpy()).features.feature
  ids, w = f["masked_lm_ids"].int64_list.value, f["masked_lm_weights"].float_list.value
  counts.update(i for i, x in zip(ids, w) if x > 0)
token, n = counts.most_common(1)[0]
print(f"unigram baseline (always predict id {token}): accuracy {n / sum(counts.values()):.4f}")
PY
