"""serve.py: each task kind's API answers as predict.py predicts (the same model directory,
tiny models of tests/test_task_registry.py), bad requests are one-line 4xx answers, a full
queue is a 429 at once, concurrent clients get their own answers; and a live server talks to
the real clients (openai, huggingface_hub) and stops on SIGTERM with exit 0."""

import base64
import concurrent.futures
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from bert_keras import output_families  # noqa: E402
from bert_keras import serve  # noqa: E402
from bert_keras import task_registry  # noqa: E402
from bert_keras.prediction import predictors  # noqa: E402
from bert_keras.server import batcher as batcher_lib  # noqa: E402
from conftest import REPO  # noqa: E402
from test_task_registry import S, TEXTS, model_directory, setup  # noqa: E402,F401


@contextlib.contextmanager
def served(setup, name, **overrides):  # noqa: F811
  """(a TestClient of serve.py's app on the model directory of kind `name`, the predictor
  predict.py loads from it)."""
  directory = model_directory(task_registry.get(name), setup)
  application = serve.build(serve.options(model_dir=directory, **overrides))
  with TestClient(application) as client:
    yield client, predictors.load(directory, max_seq_length=S)


@pytest.fixture(scope="module")
def embeddings(setup):  # noqa: F811
  """One embeddings server for the tests that only ask it (a model load each is seconds)."""
  with served(setup, "embeddings", max_wait_ms=20) as pair:
    yield pair


def _close(got, want, tol=1e-5):
  np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                             rtol=tol, atol=tol)


def test_embeddings_tei_openai_and_root_give_predict_s_vectors(embeddings):
  client, predictor = embeddings
  want = [r["embedding"] for r in predictor.predict(TEXTS[0], None)]
  unit = [np.asarray(v) / np.linalg.norm(v) for v in want]
  got = client.post("/embed", json={"inputs": TEXTS[0]}).json()
  _close(got, unit)
  _close(client.post("/embed", json={"inputs": TEXTS[0][1], "normalize": False}).json(),
         [want[1]])
  _close(client.post("/", json={"inputs": TEXTS[0][0]}).json(), [unit[0]])
  answer = client.post("/v1/embeddings", json={"input": TEXTS[0], "model": "m"}).json()
  assert [d["index"] for d in answer["data"]] == [0, 1] and answer["model"] == "m"
  _close([d["embedding"] for d in answer["data"]], want)
  # "the dog is hairy": 4 pieces, "who was jim": 3; [CLS] and [SEP] each
  assert answer["usage"] == {"prompt_tokens": 6 + 5, "total_tokens": 11}
  encoded = client.post("/v1/embeddings", json={"input": TEXTS[0][0],
                                                 "encoding_format": "base64"}).json()
  _close(np.frombuffer(base64.b64decode(encoded["data"][0]["embedding"]), "<f4"), want[0])
  short = client.post("/v1/embeddings", json={"input": "the dog", "dimensions": 8}).json()
  vector = np.asarray(short["data"][0]["embedding"])
  full = predictor.predict(["the dog"], None)[0]["embedding"]
  _close(vector, np.asarray(full[:8]) / np.linalg.norm(full[:8]))


def test_classifier_predict_sorted_labels_raw_scores_and_root(setup):  # noqa: F811
  with served(setup, "classifier") as (client, predictor):
    rows = predictor.predict(TEXTS[0], TEXTS[1])
    got = client.post("/predict", json={"inputs": [[a, b] for a, b in zip(*TEXTS)]}).json()
    for answer, row in zip(got, rows):
      assert answer[0]["label"] == row["label"]
      assert [a["score"] for a in answer] == sorted((a["score"] for a in answer), reverse=True)
      _close({a["label"]: a["score"] for a in answer}[row["label"]],
             row["probabilities"][row["label"]])
    one = client.post("/predict", json={"inputs": [TEXTS[0][0], TEXTS[1][0]]}).json()
    assert [a["label"] for a in one] == [a["label"] for a in got[0]]
    _close([a["score"] for a in one], [a["score"] for a in got[0]])
    raw = client.post("/predict", json={"inputs": [TEXTS[0][0], TEXTS[1][0]],
                                        "raw_scores": True}).json()
    logits = {a["label"]: a["score"] for a in raw}
    names = list(rows[0]["probabilities"])
    _close(output_families.softmax(np.array([logits[n] for n in names])),
           [rows[0]["probabilities"][n] for n in names])
    root = client.post("/", json={"inputs": [TEXTS[0][0], TEXTS[1][0]],
                                  "parameters": {"top_k": 2}}).json()
    assert len(root) == 1 and [a["label"] for a in root[0]] == [a["label"] for a in one[:2]]
    # (HuggingFace's shape: one input's labels in a list; top_k of them)


def test_reranker_sorts_by_the_sigmoid_of_predict_s_score(setup):  # noqa: F811
  with served(setup, "reranker") as (client, predictor):
    query, texts = "who was jim", ["the dog is hairy", "jim henson", "hello world"]
    scores = [r["score"] for r in predictor.predict([query] * 3, texts)]
    got = client.post("/rerank", json={"query": query, "texts": texts,
                                       "return_text": True}).json()
    assert [g["index"] for g in got] == list(np.argsort(scores)[::-1])
    for g in got:
      _close(g["score"], output_families.sigmoid(np.float64(scores[g["index"]])))
      assert g["text"] == texts[g["index"]]
    raw = client.post("/rerank", json={"query": query, "texts": texts, "raw_scores": True})
    _close(sorted(g["score"] for g in raw.json()), sorted(scores))
    assert client.post("/predict", json={"inputs": "x"}).status_code == 404


def test_a_cross_encoder_directory_serves_as_a_reranker(setup):  # noqa: F811
  from bert_keras import huggingface_layout
  from test_task_registry import _model
  model = _model(task_registry.get("reranker"), setup)
  directory = str(setup.root / "cross_encoder")
  huggingface_layout.save_huggingface(model, directory, vocab_file=setup.vocab,
                                      do_lower_case=True, max_seq_length=S)
  with TestClient(serve.build(serve.options(model_dir=directory))) as client:
    assert client.get("/info").json()["task"] == "reranker"
    query, texts = "who was jim", ["jim henson", "the dog is hairy"]
    got = client.post("/rerank", json={"query": query, "texts": texts,
                                       "raw_scores": True}).json()
  rows = predictors.load(model_directory(task_registry.get("reranker"), setup),
                         max_seq_length=S).predict([query] * 2, texts)
  _close(sorted(g["score"] for g in got), sorted(r["score"] for r in rows))


@pytest.mark.slow  # (every kind is served in test_task_registry's slow tier too)
def test_tagger_and_squad_answer_in_huggingface_s_formats(setup):  # noqa: F811
  with served(setup, "tagger") as (client, predictor):
    row = predictor.predict([TEXTS[0][0]], None)[0]
    got = client.post("/predict", json={"inputs": TEXTS[0][0]}).json()
    assert got == [{"entity_group": e["type"], "score": pytest.approx(e["score"], abs=1e-5),
                    "word": e["text"], "start": e["start"], "end": e["end"]}
                   for e in row["entities"]]
  with served(setup, "squad") as (client, predictor):
    question, context = "who was jim", "jim henson was a puppet"
    row = predictor.predict([question], [context])[0]["answer"]
    got = client.post("/predict", json={"inputs": {"question": question,
                                                   "context": context}}).json()
    assert (got["answer"], got["start"], got["end"]) == (row["text"], row["start"], row["end"])
    assert got["score"] is None or isinstance(got["score"], float)


@pytest.mark.parametrize("route, body, status, words", [
    ("/embed", b"{not json", 400, "not JSON"),
    ("/embed", b"[1, 2]", 422, "JSON object"),
    ("/embed", {"inputs": []}, 422, "\"inputs\""),
    ("/embed", {"inputs": ["ok", 3]}, 422, "\"inputs[1]\" must be a string"),
    ("/embed", {"inputs": "ok", "normalize": "yes"}, 422, "\"normalize\""),
    ("/v1/embeddings", {"input": [[1, 2, 3]]}, 422, "token arrays"),
    ("/v1/embeddings", {"input": "a", "encoding_format": "hex"}, 422, "encoding_format"),
    ("/v1/embeddings", {"input": "a", "dimensions": 0}, 422, "dimensions"),
    ("/v1/embeddings", {"input": "a", "dimensions": 999}, 422, "more than the model's"),
    ("/embed", {"inputs": "the dog " * 20}, 413, "tokens, more than the model's 12"),
    ("/rerank", {"query": "q", "texts": ["a"]}, 404, "POST /embed"),
])
def test_a_bad_request_is_one_line_4xx_and_the_server_keeps_serving(embeddings, route, body,
                                                                     status, words):
  client, _ = embeddings
  sent = (client.post(route, content=body) if isinstance(body, bytes)
          else client.post(route, json=body))
  assert sent.status_code == status, sent.text
  error = sent.json()["error"]
  assert words in error and "\n" not in error
  assert client.post("/embed", json={"inputs": "the dog", "truncate": True}).status_code == 200
  assert client.post("/embed", json={"inputs": "the dog " * 20,
                                     "truncate": True}).status_code == 200


def test_health_info_and_metrics(setup):  # noqa: F811
  with served(setup, "classifier", model_id="tiny") as (client, _):
    assert client.get("/health").json() == {"status": "ok"}
    info = client.get("/info").json()
    assert (info["task"], info["api"], info["model_id"], info["runtime"],
            info["max_input_length"], info["labels"]) == (
        "classifier", "predict", "tiny", "keras", S, ["x", "y", "z"])
    client.post("/predict", json={"inputs": ["the dog", "hello"]})
    client.post("/predict", json={"inputs": 5})
    text = client.get("/metrics").text
    assert 'bert_requests_total{route="/predict",status="200"} 1' in text
    assert 'bert_requests_total{route="/predict",status="422"} 1' in text
    assert "bert_batch_size_count{} 1" in text and "bert_queue_texts 0" in text


def test_concurrent_clients_each_get_their_own_answers(embeddings):
  words = ["the", "dog", "is", "hairy", "who", "was", "jim", "henson", "a", "puppet"]
  texts = [" ".join((words[i % 10:] + words)[:1 + i % 9]) for i in range(40)]
  client, predictor = embeddings
  alone = {t: np.asarray(predictor.predict([t], None)[0]["embedding"]) for t in set(texts)}

  def ask(i):
    mine = texts[i:i + 1 + i % 3]
    got = client.post("/embed", json={"inputs": mine, "normalize": False}).json()
    return mine, got

  with concurrent.futures.ThreadPoolExecutor(8) as pool:
    for mine, got in pool.map(ask, range(len(texts))):
      assert len(got) == len(mine)
      for text, vector in zip(mine, got):
        _close(vector, alone[text])
  sizes = client.get("/metrics").text
  assert "bert_batch_size_count" in sizes


def test_a_full_queue_refuses_at_once_and_queued_work_finishes():
  gate, seen = threading.Event(), []

  def run_batch(items):
    gate.wait(10)
    seen.append(list(items))
    return [item.upper() for item in items]

  batcher = batcher_lib.Batcher(run_batch, max_batch_tokens=100, max_wait_ms=0, max_queue=3)
  first = batcher.submit(["a"], [1])  # (taken by the worker, which waits at the gate)
  time.sleep(0.2)
  queued = batcher.submit(["b", "c"], [1, 1])
  start = time.perf_counter()
  with pytest.raises(batcher_lib.QueueFull, match="max_queue=3"):
    batcher.submit(["d", "e"], [1, 1])
  assert time.perf_counter() - start < 0.5
  gate.set()
  assert first.result(5) == ["A"] and queued.result(5) == ["B", "C"]
  batcher.stop()
  assert seen == [["a"], ["b", "c"]]


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.slow  # (the clients are also tested against a server in a thread, below)
def test_live_server_with_real_clients_stops_on_sigterm(setup):  # noqa: F811
  openai = pytest.importorskip("openai")
  hub = pytest.importorskip("huggingface_hub")
  directory = model_directory(task_registry.get("embeddings"), setup)
  port = _free_port()
  server = subprocess.Popen(
      [sys.executable, str(REPO / "serve.py"), f"--model_dir={directory}", f"--port={port}"],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      env=dict(os.environ, HF_HUB_OFFLINE="1", NO_PROXY="127.0.0.1"))
  url = f"http://127.0.0.1:{port}"
  try:
    import httpx
    for _ in range(120):
      try:
        if httpx.get(url + "/health", timeout=1).status_code == 200:
          break
      except httpx.HTTPError:
        time.sleep(0.5)
    else:
      pytest.fail("the server did not start: " + server.stdout.read())
    predictor = predictors.load(directory, max_seq_length=S)
    want = [r["embedding"] for r in predictor.predict(TEXTS[0], None)]
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    answer = client.embeddings.create(input=TEXTS[0], model="tiny")
    _close([d.embedding for d in answer.data], want)
    assert answer.usage.prompt_tokens == 11
    hub_client = hub.InferenceClient(base_url=url)
    vectors = hub_client.feature_extraction(TEXTS[0][0])
    _close(np.reshape(vectors, -1), np.asarray(want[0]) / np.linalg.norm(want[0]), 1e-4)
  finally:
    server.send_signal(signal.SIGTERM)
    try:
      code = server.wait(60)
    except subprocess.TimeoutExpired:
      server.kill()
      raise
  assert code == 0, server.stdout.read()


@contextlib.contextmanager
def listening(setup, name):  # noqa: F811
  """(the URL of serve.py's app on kind `name`'s model directory, served by uvicorn in a
  thread on a free port, the model directory); stopped after."""
  import uvicorn
  directory = model_directory(task_registry.get(name), setup)
  server = uvicorn.Server(uvicorn.Config(serve.build(serve.options(model_dir=directory)),
                                         host="127.0.0.1", port=_free_port(),
                                         log_level="warning"))
  thread = threading.Thread(target=server.run, daemon=True)
  thread.start()
  try:
    while not server.started:
      assert thread.is_alive(), "the server did not start"
      time.sleep(0.05)
    yield f"http://127.0.0.1:{server.config.port}", directory
  finally:
    server.should_exit = True
    thread.join(30)


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
def test_the_real_clients_against_a_live_server(setup):  # noqa: F811
  openai = pytest.importorskip("openai")
  hub = pytest.importorskip("huggingface_hub")
  with listening(setup, "classifier") as (url, directory):
    got = hub.InferenceClient(base_url=url).text_classification(TEXTS[0][0])
    row = predictors.load(directory, max_seq_length=S).predict([TEXTS[0][0]], None)[0]
    assert [e.label for e in got] == sorted(row["probabilities"],
                                            key=lambda n: -row["probabilities"][n])
    _close([e.score for e in got], sorted(row["probabilities"].values(), reverse=True))
  with listening(setup, "embeddings") as (url, directory):
    want = [r["embedding"] for r in predictors.load(directory, max_seq_length=S).predict(
        TEXTS[0], None)]
    answer = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0
                           ).embeddings.create(input=TEXTS[0], model="tiny")
    _close([d.embedding for d in answer.data], want)
    assert answer.usage.prompt_tokens == 11 and answer.model == "tiny"
    vectors = hub.InferenceClient(base_url=url).feature_extraction(TEXTS[0][0])
    _close(np.reshape(vectors, -1), np.asarray(want[0]) / np.linalg.norm(want[0]), 1e-4)


def test_a_port_in_use_is_one_line_before_the_model_loads():
  with socket.socket() as busy:
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    with pytest.raises(ValueError, match=f"--host 127.0.0.1 --port {port}: cannot listen there"):
      serve.check_address("127.0.0.1", port)
  serve.check_address("127.0.0.1", port)  # (free again)
