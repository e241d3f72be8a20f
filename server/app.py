"""serve.py's ASGI application (Starlette): the routes of server/apis.py over one Batcher, and
GET /health, /info and /metrics (Prometheus text).

Every request is read with a bound (max_request_bytes), parsed and checked before it is
queued; a full queue is a 429 at once; a client that goes away while its request waits has it
dropped from the queue; an error is a 4xx (or 500) with {"error": one line, "error_type"}.
Nothing a request says names a file.
"""

import asyncio
import contextlib
import json
import threading
import time

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from bert_keras.server import apis
from bert_keras.server import batcher as batcher_lib

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Histogram:
  """A Prometheus histogram: cumulative bucket counts, sum and count."""

  def __init__(self, buckets):
    self.buckets, self.counts = buckets, [0] * (len(buckets) + 1)
    self.sum, self.count = 0.0, 0

  def observe(self, value):
    index = next((i for i, b in enumerate(self.buckets) if value <= b), len(self.buckets))
    self.counts[index] += 1
    self.sum += value
    self.count += 1

  def lines(self, name, labels=""):
    total, out = 0, []
    for bound, count in zip(list(self.buckets) + ["+Inf"], self.counts):
      total += count
      out.append(f'{name}_bucket{{{labels}{"," if labels else ""}le="{bound}"}} {total}')
    out.append(f"{name}_sum{{{labels}}} {self.sum}")
    out.append(f"{name}_count{{{labels}}} {self.count}")
    return out


class Metrics:
  """Requests by route and status, latency by route, batch sizes, tokens, queue depth."""

  def __init__(self):
    self._lock = threading.Lock()
    self.requests = {}
    self.latency = {}
    self.batch_size = Histogram(BATCH_BUCKETS)
    self.batch_seconds = Histogram(LATENCY_BUCKETS)
    self.tokens = 0

  def request(self, route, status, seconds):
    with self._lock:
      self.requests[(route, status)] = self.requests.get((route, status), 0) + 1
      self.latency.setdefault(route, Histogram(LATENCY_BUCKETS)).observe(seconds)

  def batch(self, size, tokens, seconds):
    with self._lock:
      self.batch_size.observe(size)
      self.batch_seconds.observe(seconds)
      self.tokens += tokens

  def text(self, queued):
    with self._lock:
      lines = ["# TYPE bert_requests_total counter"]
      lines += [f'bert_requests_total{{route="{r}",status="{s}"}} {n}'
                for (r, s), n in sorted(self.requests.items())]
      lines.append("# TYPE bert_request_seconds histogram")
      for route, histogram in sorted(self.latency.items()):
        lines += histogram.lines("bert_request_seconds", f'route="{route}"')
      lines.append("# TYPE bert_batch_size histogram")
      lines += self.batch_size.lines("bert_batch_size")
      lines.append("# TYPE bert_batch_seconds histogram")
      lines += self.batch_seconds.lines("bert_batch_seconds")
      lines += ["# TYPE bert_tokens_total counter", f"bert_tokens_total {self.tokens}",
                "# TYPE bert_queue_texts gauge", f"bert_queue_texts {queued}"]
    return "\n".join(lines) + "\n"


def _error(status, message):
  kind = {413: "validation", 422: "validation", 429: "overloaded", 503: "unhealthy"}.get(
      status, "validation" if status < 500 else "backend")
  return JSONResponse({"error": message, "error_type": kind}, status_code=status)


async def _body(request, limit):
  """The request's JSON body, read with a bound; an ApiError when too large or not JSON."""
  declared = request.headers.get("content-length")
  if declared is not None and declared.isdigit() and int(declared) > limit:
    raise apis.ApiError(413, f"the body has {declared} bytes, over the server's {limit}")
  chunks, size = [], 0
  async for chunk in request.stream():
    size += len(chunk)
    if size > limit:
      raise apis.ApiError(413, f"the body is over the server's {limit} bytes")
    chunks.append(chunk)
  try:
    return json.loads(b"".join(chunks))
  except (ValueError, RecursionError) as e:
    raise apis.ApiError(400, f"the body is not JSON ({str(e).splitlines()[0][:120]})") from None


def create_app(model, run_batch, info, max_batch_tokens=16384, max_wait_ms=5, max_queue=1024,
               max_request_bytes=16 << 20):
  """The application serving `model` (apis.Model) with run_batch(items) -> rows run by one
  Batcher; info: GET /info's fields beside the limits. app.state.batcher stops with the
  application (its shutdown: the queued requests finish first)."""
  metrics = Metrics()
  batcher = batcher_lib.Batcher(run_batch, max_batch_tokens, max_wait_ms, max_queue,
                                observe=metrics.batch)

  async def handle(request):
    route, start = request.url.path, time.perf_counter()
    response = await _answer(request, route)
    metrics.request(route, response.status_code, time.perf_counter() - start)
    return response

  async def _answer(request, route):
    try:
      work = apis.parse(route, await _body(request, max_request_bytes), model)
      if len(work.items) > max_queue:
        raise apis.ApiError(413, f"{len(work.items)} inputs, more than the server's queue "
                            f"holds ({max_queue})")
      try:
        future = batcher.submit(work.items, work.tokens)
      except batcher_lib.QueueFull as e:
        return _error(429, f"overloaded: {e}; retry later")
      waiting = asyncio.wrap_future(future)
      while True:
        done, _ = await asyncio.wait({waiting}, timeout=0.25)
        if done:
          break
        if await request.is_disconnected():  # (still queued: dropped; running: discarded)
          future.cancel()
          return _error(499, "the client went away")
      return JSONResponse(work.answer(waiting.result()))
    except apis.ApiError as e:
      return _error(e.status, e.message)
    except ClientDisconnect:
      return _error(499, "the client went away")
    except ValueError as e:  # a predictor's check of the texts (one line)
      return _error(422, str(e).splitlines()[0])

  async def health(request):
    return JSONResponse({"status": "ok"})

  async def info_route(request):
    return JSONResponse(dict(info, model_id=model.name, task=model.kind.name,
                             api=model.kind.served_api, max_input_length=model.max_input_length,
                             max_batch_tokens=max_batch_tokens, max_wait_ms=max_wait_ms,
                             max_queue=max_queue))

  async def metrics_route(request):
    return PlainTextResponse(metrics.text(batcher.queued_texts),
                             media_type="text/plain; version=0.0.4")

  routes = [Route(path, handle, methods=["POST"]) for path in apis.ROUTES]
  routes += [Route("/health", health, methods=["GET"]),
             Route("/info", info_route, methods=["GET"]),
             Route("/metrics", metrics_route, methods=["GET"])]

  @contextlib.asynccontextmanager
  async def lifespan(app):
    yield
    await asyncio.to_thread(batcher.stop)

  app = Starlette(routes=routes, lifespan=lifespan)
  app.state.batcher, app.state.metrics = batcher, metrics
  return app
