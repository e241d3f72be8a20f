"""The one progress line of every long job: work done of a total, the rate, the ETA; on a
terminal rewritten in place, otherwise an INFO log line at most every `interval` seconds."""

import contextlib
import datetime
import sys
import threading
import time

from absl import logging


def format_eta(seconds):
  """"0:01:23" for 83 seconds; "?" when unknown (None, negative, infinite or NaN)."""
  if seconds is None or not 0 <= seconds < 1e9:
    return "?"
  return str(datetime.timedelta(seconds=round(seconds)))


class Progress(object):
  """Work done of `total`, its rate and ETA, shown as one line.

  rate(done) and eta(done) measure from the start, or from the last restart(done) (e.g. after
  a first step that included tracing and compilation). show(text) prints the line: with
  `live` (default: when stderr is a terminal) rewritten in place at most every 0.5 s, else
  logged at INFO at most every `interval` seconds (LOG_INTERVAL_S); `force` shows it now.
  """

  LOG_INTERVAL_S = 30.0  # between INFO lines when the line is not live

  def __init__(self, total, interval=None, live=None, enabled=True):
    self.total = total
    self.live = sys.stderr.isatty() if live is None else live
    self.interval = interval if interval is not None else (
        0.5 if self.live else self.LOG_INTERVAL_S)
    self.enabled = enabled
    self.start = self._last = time.perf_counter()
    self._since_done = 0
    self._printed = False

  def restart(self, done):
    """Measures the rate from now and `done` on."""
    self.start, self._since_done = time.perf_counter(), done

  def elapsed(self):
    return max(time.perf_counter() - self.start, 1e-9)

  def rate(self, done):
    """Work per second since the start (or the last restart)."""
    return (done - self._since_done) / self.elapsed()

  def eta_seconds(self, done, fraction=None):
    """Seconds left: (total - done) at the measured rate, or, given the `fraction` of the
    whole job done, elapsed * (1 - fraction) / fraction (None below 1%)."""
    if fraction is not None:
      return self.elapsed() * (1 - fraction) / fraction if fraction > 0.01 else None
    rate = self.rate(done)
    return (self.total - done) / rate if rate > 0 else None

  def eta(self, done, fraction=None):
    return format_eta(self.eta_seconds(done, fraction))

  def due(self, force=False):
    """Whether a line is to be shown now (and, if so, its time is taken)."""
    if not self.enabled:
      return False
    now = time.perf_counter()
    if not force and now - self._last < self.interval:
      return False
    self._last = now
    return True

  def show(self, text, force=False):
    """Shows `text` if due (see due)."""
    if not self.due(force):
      return
    if self.live:
      sys.stderr.write("\r\033[K" + text)
      sys.stderr.flush()
      self._printed = True
    else:
      logging.info("%s", text)

  def finish(self, text=None):
    """Shows the last line (`text`, if given) and ends a live one with a newline."""
    if text is not None:
      self.show(text, force=True)
    if self.enabled and self.live and self._printed:
      sys.stderr.write("\n")
      sys.stderr.flush()
      self._printed = False


@contextlib.contextmanager
def heartbeat(text, every=Progress.LOG_INTERVAL_S):
  """Logs text(seconds so far) every `every` seconds while the block runs: a long call that
  cannot report its own progress (a compiled training loop) still shows it is alive."""
  stop, start = threading.Event(), time.perf_counter()

  def beat():
    while not stop.wait(every):
      logging.info("%s", text(time.perf_counter() - start))

  thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
  thread.start()
  try:
    yield
  finally:
    stop.set()
    thread.join()
