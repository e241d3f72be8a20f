"""create_pretraining_data --num_workers N > 1 (not in the original): the input split into
parts at line boundaries, one worker process per part at a time, every part's output files
written under temporary names and renamed once all parts are done."""

import hashlib
import multiprocessing
import os
import sys
import threading

import numpy as np
from absl import logging

from bert_keras.pretraining_data import data_progress as progress_lib
from bert_keras.utils import file_io


def part_output_files(output_files, part, num_parts):
  """--num_workers output names: <output_file>-<part:05d>-of-<num_parts:05d>."""
  return ["%s-%05d-of-%05d" % (path, part, num_parts) for path in output_files]


def part_seed(random_seed, part):
  """The seed of part `part` in --num_workers mode, derived from --random_seed."""
  digest = hashlib.sha256(b"bert_keras.create_pretraining_data/%d/%d" % (random_seed, part))
  return int.from_bytes(digest.digest()[:8], "little")


def _next_line_start(path, offset, size):
  """The offset of the first line of `path` that starts at or after `offset` (0 < offset)."""
  with file_io.open_read(path) as reader:
    reader.seek(offset - 1)
    while True:
      data = reader.read(1 << 16)
      if not data:
        return size
      newline = data.find(b"\n")
      if newline >= 0:
        return offset + newline
      offset += len(data)


def plan_parts(input_files, num_parts):
  """Splits the input files into `num_parts` byte ranges of about equal size at line starts.

  Returns a list (one per part) of lists of (path, start, end).
  """
  sizes = [file_io.file_size(path) for path in input_files]
  total = sum(sizes)
  cuts = []  # global offsets where a part starts (line starts)
  starts = np.cumsum([0] + sizes)
  for k in range(1, num_parts):
    target = (total * k) // num_parts
    index = int(np.searchsorted(starts, target, side="right") - 1)
    index = min(index, len(sizes) - 1)
    local = target - int(starts[index])
    if local > 0:
      local = _next_line_start(input_files[index], local, sizes[index])
    cuts.append(max(int(starts[index]) + local, cuts[-1] if cuts else 0))
  bounds = [0] + cuts + [total]
  parts = []
  for k in range(num_parts):
    lo, hi = bounds[k], bounds[k + 1]
    pieces = []
    for index, path in enumerate(input_files):
      f0, f1 = int(starts[index]), int(starts[index + 1])
      s, e = max(lo, f0), min(hi, f1)
      if s < e:
        pieces.append((path, s - f0, e - f0))
    parts.append(pieces)
  return parts


_WORKER = {}


def _worker_init(config, counters, fractions, tokenizer, make_part, make_tokenizer):
  logging.set_verbosity(logging.INFO)
  _WORKER.update(config=config, counters=counters, fractions=fractions, make_part=make_part,
                 tokenizer=tokenizer if tokenizer is not None else make_tokenizer(config))


def _worker_run(task):
  part, num_parts, pieces, tag = task
  config = _WORKER["config"]
  progress = progress_lib.Progress(1, parts=num_parts, counters=_WORKER["counters"],
                                   fractions=_WORKER["fractions"], enabled=False)
  progress.part = part
  count = _WORKER["make_part"](
      config, _WORKER["tokenizer"], pieces, part_seed(config.random_seed, part),
      part_output_files(config.output_files, part, num_parts), progress,
      log_examples=20 if part == 0 else 0, commit=False,
      total_bytes=sum(e - s for _, s, e in pieces), temp_tag=tag)
  progress.add_instances(count)
  return part, count


def _run_tasks(ctx, num_workers, initargs, tasks, progress):
  """Runs _worker_run on every task in a pool of num_workers; returns [(part, count)]."""
  done = threading.Event()

  def report():
    while not done.wait(max(progress.interval, 0.05)):
      progress.maybe_report(force=True)

  results = []
  try:
    # The workers are forked when the pool starts; the reporter thread only after that
    # (forking while another thread holds the logging lock would deadlock the child).
    with ctx.Pool(num_workers, initializer=_worker_init, initargs=initargs) as pool:
      reporter = threading.Thread(target=report, daemon=True)
      reporter.start()
      for part, count in pool.imap_unordered(_worker_run, tasks):
        results.append((part, count))
  finally:
    done.set()
  return results


def run_parallel(config, tokenizer, total_bytes, make_part, make_tokenizer):
  """Runs the parts of the input in config.num_workers processes; returns the instance count.

  make_part(config, tokenizer, files, seed, output_files, progress, log_examples=,
  commit=False, total_bytes=, temp_tag=) creates and writes one part (files: its
  (path, start, end) pieces) under temporary names and returns its instance count;
  make_tokenizer(config) makes the tokenizer in workers that are not forked. If all
  parts are done and hold instances, every temporary file is renamed; otherwise (an
  error, or 0 instances: then 0 is returned) none is left behind.
  """
  part_bytes = int(config.part_size_mb * (1 << 20))
  n = config.num_workers
  num_parts = n * max(1, -(-total_bytes // (n * part_bytes)))
  parts = plan_parts(config.input_files, num_parts)
  use_fork = ("fork" in multiprocessing.get_all_start_methods() and
              "tensorflow" not in sys.modules)
  ctx = multiprocessing.get_context("fork" if use_fork else "spawn")
  counters = ctx.Array("q", 5)
  fractions = ctx.Array("d", num_parts, lock=False)
  progress = progress_lib.Progress(total_bytes, parts=num_parts, counters=counters,
                                   fractions=fractions, enabled=config.progress)
  logging.info("*** Writing to output files (%d parts over %d workers) ***", num_parts, n)
  for path in config.output_files:
    logging.info("  %s", part_output_files([path], 0, num_parts)[0].replace(
        "-00000-of-", "-?????-of-"))
  outputs = [part_output_files(config.output_files, p, num_parts) for p in range(num_parts)]
  tag = "%d" % os.getpid()
  temps = [(file_io.temp_name(path, tag), path) for names in outputs for path in names]
  committed = False
  try:
    initargs = (config, counters, fractions, tokenizer if use_fork else None, make_part,
                make_tokenizer)
    tasks = [(p, num_parts, parts[p], tag) for p in range(num_parts)]
    results = _run_tasks(ctx, n, initargs, tasks, progress)
    total = sum(count for _, count in results)
    if total == 0:
      return 0
    for temp, path in temps:
      file_io.rename(temp, path)
    committed = True
  finally:
    if not committed:
      for temp, _ in temps:
        file_io.remove_quietly(temp)
  progress.finish()
  for part, count in sorted(results):
    logging.info("part %d: %d instances", part, count)
  logging.info("Wrote %d total instances", total)
  return total
