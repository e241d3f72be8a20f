r"""Serve a model over HTTP: one command puts any model directory or export behind the APIs
that clients already speak, with dynamic batching.

  python serve.py --model_dir=/tmp/minilm_st --port=8080
  curl 127.0.0.1:8080/embed -H 'Content-Type: application/json' -d '{"inputs": "Hello"}'

--model_dir: whatever predict.py reads (a run_* output_dir or its best/, a SavedModel, a
TFLite / ONNX export, a sentence-transformers directory), with no model flags: its task kind
chooses the API (server/apis.py):
  embeddings          POST /embed (TEI) and POST /v1/embeddings (OpenAI)
  reranker            POST /rerank (TEI)
  classifier, multi-label, regression, tagger, squad
                      POST /predict (TEI's; HuggingFace's token-classification and
                      question-answering answers)
and POST / by the kind (huggingface_hub's InferenceClient given the server's URL);
GET /health, GET /info, GET /metrics (Prometheus text).
--runtime: auto (what --model_dir holds), keras (a model directory), saved_model, onnx or
tflite (an export_saved_model.py export holding model.onnx / model.tflite).
Requests are queued and run in batches of at most --max_batch_tokens tokens, the first
waiting at most --max_wait_ms for others; at most --max_queue texts wait (a full queue:
429 at once). An input longer than --max_input_length tokens (default: the model's
max_seq_length) is a 413 unless the request asks to "truncate". SIGTERM or Ctrl-C: the server
stops accepting, answers what it holds, and exits 0.
The [serve] extra installs Starlette and uvicorn: a small, well-kept ASGI stack (uvicorn
handles the connections, keep-alive and graceful shutdown).
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")
import os
import socket

from absl import app
from absl import flags
from absl import logging

from bert_keras import model_files
from bert_keras import sentence_transformers_layout
from bert_keras import task_registry
from bert_keras import tokenization
from bert_keras.prediction import predictors
from bert_keras.prediction import tflite_onnx
from bert_keras.runtime import common_flags
from bert_keras.runtime import option_checks as checks
from bert_keras.utils import errors

RUNTIMES = ("auto", "keras", "saved_model", "onnx", "tflite")


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return common_flags.make_options(DEFAULTS, overrides)


def define_flags(fv=flags.FLAGS):
  flags.DEFINE_string("model_dir", None, "What predict.py reads: a run_* output_dir (or its "
                      "best/), a SavedModel, a TFLite / ONNX export or a sentence-transformers "
                      "directory.", flag_values=fv)
  flags.DEFINE_string("host", "127.0.0.1", "The address to listen on (0.0.0.0: every "
                      "interface).", flag_values=fv)
  flags.DEFINE_integer("port", 8080, "The port to listen on.", flag_values=fv)
  flags.DEFINE_enum("runtime", "auto", RUNTIMES, "What runs the model: auto (what --model_dir "
                    "holds), keras, saved_model, onnx or tflite.", flag_values=fv)
  flags.DEFINE_integer("max_batch_tokens", 16384, "The most tokens of one batch (the texts of "
                       "several requests).", flag_values=fv)
  flags.DEFINE_integer("max_wait_ms", 5, "How long a batch's first request waits for others.",
                       flag_values=fv)
  flags.DEFINE_integer("max_queue", 1024, "The most texts waiting; more: 429 at once.",
                       flag_values=fv)
  flags.DEFINE_integer("max_input_length", None, "The most tokens of one input ([CLS] and "
                       "[SEP] counted; default: the model's max_seq_length); longer: 413 unless "
                       "the request asks to truncate.", flag_values=fv)
  flags.DEFINE_integer("max_request_bytes", 16 << 20, "The largest request body.",
                       flag_values=fv)
  flags.DEFINE_string("model_id", None, "The model's name in answers (default: --model_dir's "
                      "last part).", flag_values=fv)
  flags.mark_flag_as_required("model_dir", flag_values=fv)


DEFAULTS = common_flags.flag_defaults(define_flags)


def check_options(options):
  checks.check(options, {checks.REQUIRED: {"model_dir": None},
                         checks.POSITIVE: ("max_batch_tokens", "max_queue", "max_request_bytes",
                                           "port"),
                         checks.NON_NEGATIVE: ("max_wait_ms",),
                         checks.AT_LEAST: {"max_input_length": (3, "[CLS] a piece [SEP]")}})
  if not os.path.exists(options.model_dir):
    raise ValueError(f"--model_dir {options.model_dir}: no such file or directory")


def check_address(host, port):
  """A ValueError naming --host / --port when the server could not listen there (a port in
  use, an address not of this machine): found before the model is loaded."""
  try:
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
      probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      probe.bind((host, port))
  except OSError as e:
    raise ValueError(f"--host {host} --port {port}: cannot listen there "
                     f"({e.strerror or e})") from None


def load(model_dir, runtime="auto"):
  """(the predictor of `model_dir` on `runtime`, the runtime's name)."""
  token_id_model = tflite_onnx.is_token_id_model(model_dir)
  if runtime in ("onnx", "tflite"):
    path = os.path.join(model_dir, f"model.{runtime}") if os.path.isdir(model_dir) else model_dir
    if not path.endswith(f".{runtime}") or not os.path.isfile(path):
      raise ValueError(f"--runtime={runtime}: --model_dir {model_dir} holds no model.{runtime} "
                       "(export_saved_model.py --format=" + runtime + " writes one)")
    return tflite_onnx.load(path), runtime
  if runtime == "auto" and token_id_model:
    path = tflite_onnx.model_file(model_dir)
    return tflite_onnx.load(path), os.path.splitext(path)[1][1:]
  saved_model = predictors.is_saved_model(model_dir)
  if runtime == "saved_model" and not saved_model:
    raise ValueError(f"--runtime=saved_model: --model_dir {model_dir} holds no saved_model.pb")
  if runtime == "keras" and saved_model:
    raise ValueError(f"--runtime=keras: --model_dir {model_dir} is a SavedModel (use "
                     "--runtime=saved_model)")
  # The task: the directory's own; a pre-training run's what it is served as (embeddings); a
  # CrossEncoder directory's a reranker; any other checkpoint directory's the encoder's
  # embeddings.
  description = None if saved_model else sentence_transformers_layout.read_model_files(model_dir)
  if saved_model or sentence_transformers_layout.cross_encoder_description(model_dir):
    task = None
  elif description:
    task = task_registry.of_description(description).served_as
  else:
    task = task_registry.get("encoder").served_as
  return predictors.load(model_dir, task=task), "saved_model" if saved_model else "keras"


def token_counter(model_dir):
  """count((text_a, text_b)) -> the word pieces of the pair with [CLS] and [SEP]s, by the
  model's own vocabulary (found beside the model, or in a SavedModel's assets/)."""
  description = sentence_transformers_layout.read_model_files(model_dir) or {}
  where = model_dir if os.path.isdir(model_dir) else os.path.dirname(model_dir)
  vocab = next((path for path in (description.get("vocab_file"),
                                  os.path.join(where, model_files.VOCAB_FILE),
                                  os.path.join(where, "assets", model_files.VOCAB_FILE))
                if path and os.path.isfile(path)), None)
  if vocab is None:
    raise ValueError(f"--model_dir {model_dir}: no {model_files.VOCAB_FILE} to count tokens by")
  lower = description.get("do_lower_case")
  if lower is None:
    lower = model_files.read_do_lower_case(where, vocab)
  tokenizer = tokenization.FullTokenizer(vocab, True if lower is None else bool(lower))

  def count(item):
    text_a, text_b = item
    pieces = len(tokenizer.tokenize(text_a)) + 2
    return pieces + (len(tokenizer.tokenize(text_b)) + 1 if text_b is not None else 0)
  return count


def build(options):
  """The ASGI application of the options (checked), the model loaded."""
  from bert_keras.server import apis
  from bert_keras.server import app as app_lib
  check_options(options)
  predictor, runtime = load(options.model_dir, options.runtime)
  if predictor.kind.served_api is None:
    raise ValueError(f"--model_dir {options.model_dir}: a {predictor.kind.name} model is not "
                     "served over HTTP")
  predictor.keep_scores = True
  max_input = options.max_input_length or predictor.max_seq_length or 512
  model = apis.Model(predictor, options.model_id or os.path.basename(
      os.path.normpath(options.model_dir)), max_input, token_counter(options.model_dir))

  def run_batch(items):
    texts_b = [b for _, b in items]
    return predictor.predict([a for a, _ in items],
                             None if all(b is None for b in texts_b)
                             else [b if b is not None else "" for b in texts_b])
  info = {"runtime": runtime, "dtype": getattr(predictor, "dtype", "float32"),
          "labels": predictor.labels}
  logging.info("serve: %s model %s on %s (max input %d tokens), API %s", predictor.kind.name,
               options.model_dir, runtime, max_input, predictor.kind.served_api)
  return app_lib.create_app(model, run_batch, info, options.max_batch_tokens,
                            options.max_wait_ms, options.max_queue, options.max_request_bytes)


def run(options):
  """Serves until SIGTERM or Ctrl-C (then answers what it holds and returns)."""
  try:
    import uvicorn
  except ImportError:
    raise ValueError("serve.py needs the [serve] extra: pip install -e \".[serve]\"") from None
  check_address(options.host, options.port)

  class Server(uvicorn.Server):
    def handle_exit(self, sig, frame):
      # SIGTERM / Ctrl-C: stop accepting, answer what is in flight, exit 0 (uvicorn would
      # raise the signal again once stopped, ending the process with it)
      super().handle_exit(sig, frame)
      self._captured_signals.clear()

  application = build(options)
  logging.info("serve: listening on http://%s:%d", options.host, options.port)
  Server(uvicorn.Config(application, host=options.host, port=options.port,
                        log_level="warning", timeout_graceful_shutdown=30)).run()
  logging.info("serve: stopped")


main = errors.script_main(run)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
