"""Dynamic batching: requests from many clients queued and run together, within a token budget
and a wait time, by one worker thread that owns the model.

A request is a list of items (texts); submit() returns a future of its rows, in its items'
order. The worker takes the oldest request, then more while the batch's tokens stay within
max_batch_tokens and max_wait_ms has not passed since the first, runs them as one batch
(the predictor cuts it to its longest row) and hands each request its own rows. The queue is
bounded (max_queue texts): submit() refuses at once when it is full (QueueFull), never a
backlog without end.
"""

import collections
import concurrent.futures
import threading
import time


class QueueFull(Exception):
  """The queue holds max_queue texts already: the request is refused (HTTP 429)."""


class _Request:
  __slots__ = ("items", "tokens", "future", "queued")

  def __init__(self, items, tokens):
    self.items, self.tokens = items, tokens
    self.future = concurrent.futures.Future()
    self.queued = time.perf_counter()


class Batcher:
  """run_batch(items) -> rows (one per item) runs in the worker thread only.
  max_batch_tokens: the most tokens (summed over the batch's texts) a batch takes, except
  that one request larger than that still runs alone. max_wait_ms: how long the first request
  of a batch waits for others. max_queue: the most texts queued. observe(batch_size,
  tokens, seconds): called after each batch (metrics)."""

  def __init__(self, run_batch, max_batch_tokens, max_wait_ms, max_queue, observe=None):
    self._run_batch = run_batch
    self._max_tokens, self._wait = max_batch_tokens, max_wait_ms / 1000.0
    self._max_queue = max_queue
    self._observe = observe or (lambda *args: None)
    self._queue = collections.deque()
    self._queued_texts = 0
    self._lock = threading.Condition()
    self._stopping = False
    self._thread = threading.Thread(target=self._work, name="batcher", daemon=True)
    self._thread.start()

  @property
  def queued_texts(self):
    return self._queued_texts

  def submit(self, items, tokens):
    """Queues a request (items: a list; tokens: their token counts) and returns the future of
    its rows; QueueFull when the queue cannot take its texts."""
    request = _Request(items, tokens)
    with self._lock:
      if self._stopping:
        raise QueueFull("the server is stopping")
      if self._queued_texts + len(items) > self._max_queue:
        raise QueueFull(f"the queue holds {self._queued_texts} texts (--max_queue="
                        f"{self._max_queue})")
      self._queue.append(request)
      self._queued_texts += len(items)
      self._lock.notify()
    return request.future

  def stop(self):
    """Lets the queued requests finish, then ends the worker."""
    with self._lock:
      self._stopping = True
      self._lock.notify()
    self._thread.join()

  def _take(self):
    """The next batch (a list of requests), or None when stopping with nothing queued."""
    with self._lock:
      while not self._queue and not self._stopping:
        self._lock.wait()
      if not self._queue:
        return None
      batch = [self._queue.popleft()]
      tokens = sum(batch[0].tokens)
      deadline = batch[0].queued + self._wait
      while True:
        while self._queue:
          following = sum(self._queue[0].tokens)
          if tokens + following > self._max_tokens:
            break
          batch.append(self._queue.popleft())
          tokens += following
        left = deadline - time.perf_counter()
        if (self._queue or left <= 0 or self._stopping):
          break
        self._lock.wait(left)
      self._queued_texts -= sum(len(request.items) for request in batch)
      return batch

  def _work(self):
    while True:
      batch = self._take()
      if batch is None:
        return
      batch = [r for r in batch if r.future.set_running_or_notify_cancel()]
      if not batch:
        continue
      items = [item for request in batch for item in request.items]
      start = time.perf_counter()
      try:
        rows = self._run_batch(items)
      except Exception as e:  # each request of the batch gets the error
        for request in batch:
          request.future.set_exception(e)
        continue
      self._observe(len(items), sum(sum(r.tokens) for r in batch),
                    time.perf_counter() - start)
      offset = 0
      for request in batch:
        request.future.set_result(rows[offset:offset + len(request.items)])
        offset += len(request.items)
