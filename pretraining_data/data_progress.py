"""Progress of create_pretraining_data: bytes read, documents, instances created and
written, rate and ETA, as the one progress line (utils.progress)."""

from bert_keras.utils import progress


class Progress(progress.Progress):
  """Documents read, instances created and written, rate and ETA, on stderr or the log
  (utils.progress.Progress: live on a terminal, else an INFO line every 30 s, "progress: ...").
  Counters may live in shared memory (--num_workers), then `parts` > 1.
  """

  # Fraction of a part's work in each phase (measured: reading, creating, writing).
  WEIGHTS = (0.2, 0.6, 0.2)

  def __init__(self, total_bytes, parts=1, counters=None, fractions=None, interval=None,
               enabled=True):
    super().__init__(max(total_bytes, 1), interval=interval, enabled=enabled)
    self.total_bytes = self.total
    self.parts = parts
    # bytes read, lines, documents processed (x passes), instances created, written
    self.counters = counters if counters is not None else [0] * 5
    self.fractions = fractions if fractions is not None else [0.0] * parts
    self.part = 0
    self.part_bytes = 1
    self.doc_steps = 1
    self.instances = 1
    self._done = [0, 0, 0]

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
    fraction = sum(self.fractions) / self.parts
    mb = c[0] / 1e6
    return ("read %.1f/%.1f MB (%s lines, %.2f MB/s), %s document passes, %s instances created, "
            "%s written, %3.0f%%, ETA %s" % (
                mb, self.total_bytes / 1e6, format(c[1], ","), mb / self.elapsed(),
                format(c[2], ","), format(c[3], ","), format(c[4], ","), 100 * fraction,
                self.eta(None, fraction)))

  def maybe_report(self, force=False):
    if self.due(force):
      line = self.line()
      self.show(line if self.live else "progress: " + line, force=True)

  def finish(self):
    if self.live and self._printed:
      self.show(self.line(), force=True)
    super().finish()
