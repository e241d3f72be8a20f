# coding=utf-8
"""Progress of create_pretraining_data: bytes read, documents, instances created and
written, rate and ETA, as one line rewritten on a terminal or an INFO log line."""

import math
import sys
import time

from absl import logging


class Progress(object):
  """Documents read, instances created and written, rate and ETA, on stderr or the log.

  On a terminal, one line rewritten in place every half second; otherwise an
  INFO log line every `interval` seconds (default 30), so logs stay readable.
  Counters may live in shared memory (--num_workers), then `parts` > 1.
  """

  # Fraction of a part's work in each phase (measured: reading, creating, writing).
  WEIGHTS = (0.2, 0.6, 0.2)
  LOG_INTERVAL_S = 30.0  # between INFO lines when stderr is not a terminal

  def __init__(self, total_bytes, parts=1, counters=None, fractions=None, interval=None,
               enabled=True):
    self.total_bytes = max(total_bytes, 1)
    self.parts = parts
    # bytes read, lines, documents processed (x passes), instances created, written
    self.counters = counters if counters is not None else [0] * 5
    self.fractions = fractions if fractions is not None else [0.0] * parts
    self.tty = sys.stderr.isatty()
    self.interval = interval if interval is not None else (
        0.5 if self.tty else self.LOG_INTERVAL_S)
    self.enabled = enabled
    self.start = time.time()
    self.last = self.start
    self.part = 0
    self.part_bytes = 1
    self.doc_steps = 1
    self.instances = 1
    self._done = [0, 0, 0]
    self._printed = False

  def begin_part(self, part, part_bytes):
    self.part = part
    self.part_bytes = max(part_bytes, 1)
    self._done = [0, 0, 0]

  def set_totals(self, doc_steps=None, instances=None):
    if doc_steps is not None:
      self.doc_steps = max(doc_steps, 1)
    if instances is not None:
      self.instances = max(instances, 1)

  def _add(self, index, amount):
    counters = self.counters
    if hasattr(counters, "get_lock"):
      with counters.get_lock():
        counters[index] += amount
    else:
      counters[index] += amount

  def _update_fraction(self):
    w = self.WEIGHTS
    f = (w[0] * min(1.0, self._done[0] / self.part_bytes) +
         w[1] * min(1.0, self._done[1] / self.doc_steps) +
         w[2] * min(1.0, self._done[2] / self.instances))
    self.fractions[self.part] = f
    if self.parts == 1:
      self.maybe_report()

  def add_read(self, nbytes, lines):
    self._add(0, nbytes)
    self._add(1, lines)
    self._done[0] += nbytes
    self._update_fraction()

  def add_documents(self, count, instances_so_far):
    self._done[1] += count
    self._add(2, count)
    if self.parts == 1:
      self.counters[3] = instances_so_far
    self._update_fraction()

  def add_instances(self, count):
    """Adds instances created (--num_workers: a part's count, when the part is done)."""
    self._add(3, count)

  def add_written(self, count):
    self._add(4, count)
    self._done[2] += count
    self._update_fraction()

  def line(self):
    c = list(self.counters)
    elapsed = max(time.time() - self.start, 1e-9)
    fraction = sum(self.fractions) / self.parts
    eta = elapsed * (1 - fraction) / fraction if fraction > 0.01 else float("nan")
    mb = c[0] / 1e6
    return ("read %.1f/%.1f MB (%s lines, %.2f MB/s), %s document passes, %s instances created, "
            "%s written, %3.0f%%, ETA %s" % (
                mb, self.total_bytes / 1e6, format(c[1], ","), mb / elapsed, format(c[2], ","),
                format(c[3], ","), format(c[4], ","), 100 * fraction,
                "?" if math.isnan(eta) else time.strftime("%H:%M:%S", time.gmtime(eta))))

  def maybe_report(self, force=False):
    if not self.enabled:
      return
    now = time.time()
    if not force and now - self.last < self.interval:
      return
    self.last = now
    if self.tty:
      sys.stderr.write("\r\033[K" + self.line())
      sys.stderr.flush()
      self._printed = True
    else:
      logging.info("progress: %s", self.line())

  def finish(self):
    if self.enabled and self.tty and self._printed:
      sys.stderr.write("\r\033[K" + self.line() + "\n")
      sys.stderr.flush()
