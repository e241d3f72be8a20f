"""create_pretraining_data on Apache Beam: the same records, at corpus scale, on any runner.

The same flags and TFRecord features as create_pretraining_data.py, run as a Beam pipeline:
locally with the DirectRunner, or on Dataflow, Flink or Spark (an argument that is not one of
our flags goes to Beam's PipelineOptions). It is the same job on another runner, so it imports
create_pretraining_data and calls its public functions (and random_replay, tfrecord_encoding
and file_io) instead of rewriting them. How the pipeline reads documents, buckets them, makes,
shuffles and writes instances, why its bytes are deterministic, how it keeps the original's
statistics and where bad input is caught: docs/DESIGN.md, "Pretraining data on Apache Beam"
(docs/DESIGN.md#pretraining-data-on-apache-beam).
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import errors  # (first: it imports absl)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")

import hashlib
import math
import os
import re
import tempfile
import time
import uuid

import numpy as np
from absl import logging

from bert_keras import create_pretraining_data as cpd
from bert_keras import tokenization
from bert_keras.pretraining_data import random_replay
from bert_keras.pretraining_data import tfrecord_encoding
from bert_keras.runtime import beam_runner
from bert_keras.runtime import option_checks as checks
from bert_keras.utils import file_io


beam = beam_runner.import_beam()
if beam is not None:
  from apache_beam.io.filesystem import CompressionTypes
  from apache_beam.io.filesystems import FileSystems

FLAGS = None
NAMESPACE = "create_pretraining_data"
UsageError = cpd.UsageError
_DoFn = beam.DoFn if beam is not None else object
_MB = 1 << 20


# --------------------------------------------------------------------------
# Keys, seeds and hashes
# --------------------------------------------------------------------------

def _key_bytes(rel_path, offset):
  return rel_path.encode("utf-8", "surrogateescape") + b"\0" + b"%d" % offset


def document_digest(random_seed, pass_index, rel_path, offset):
  """SHA-256 of (random_seed, pass, document key): seeds the document's RNG, keys its instances."""
  return hashlib.sha256(b"bert_keras.create_pretraining_data_beam/doc/%d/%d/" % (
      random_seed, pass_index) + _key_bytes(rel_path, offset)).digest()


def bucket_of(random_seed, pass_index, rel_path, offset, num_buckets):
  """The bucket of a document in a pass: a stable hash (not Python's hash()) mod num_buckets."""
  digest = hashlib.blake2b(b"bucket/%d/%d/" % (random_seed, pass_index) +
                           _key_bytes(rel_path, offset), digest_size=8).digest()
  return int.from_bytes(digest, "big") % num_buckets


def instance_keys(doc_digest, count):
  """[count, 2] uint64: the 128-bit keys of a document's instances 0..count-1 in one pass."""
  out = bytearray()
  for i in range(count):
    out += hashlib.blake2b(doc_digest + i.to_bytes(4, "little"), digest_size=16).digest()
  return np.frombuffer(bytes(out), dtype=">u8").reshape(count, 2)


class DocumentWords(random_replay.WordStream):
  """The WordStream of one (pass, document): the 32-bit words of a PCG64 whose 128-bit
  state and increment are the document's SHA-256 digest.

  Draws (random(), randint, shuffle) are replayed on these words exactly as
  create_pretraining_data replays them on random.Random's words. The bit
  generator is shared by the documents of a bucket (setting its state is
  cheaper than making one): documents are made one after the other, and a
  document's words are only drawn while it is being made.
  """

  def __init__(self, digest, bitgen, chunk):
    super().__init__(chunk)
    self._bitgen = bitgen
    bitgen.state = {"bit_generator": "PCG64", "has_uint32": 0, "uinteger": 0,
                    "state": {"state": int.from_bytes(digest[:16], "little"),
                              "inc": int.from_bytes(digest[16:], "little") | 1}}
    self.reserve(chunk)

  def next_words(self, count):
    return self._bitgen.random_raw((count + 1) // 2).view("<u4")


# --------------------------------------------------------------------------
# Reading: byte ranges of the input files -> documents
# --------------------------------------------------------------------------

def common_root(paths):
  """The longest common directory of `paths` (with its trailing "/"), "" if none."""
  dirs = [p.rsplit("/", 1)[0].split("/") if "/" in p else [] for p in paths]
  common = dirs[0] if dirs else []
  for d in dirs[1:]:
    n = 0
    while n < min(len(common), len(d)) and common[n] == d[n]:
      n += 1
    common = common[:n]
  return "/".join(common) + "/" if common else ""


def plan_ranges(files, chunk_bytes):
  """[(path, rel_path, start, end)]: every file cut into ranges of about chunk_bytes.

  files: [(path, size)]. rel_path is the path relative to the files' common directory.
  """
  root = common_root([path for path, _ in files])
  ranges = []
  for path, size in files:
    rel = path[len(root):]
    count = max(1, -(-size // max(1, chunk_bytes)))
    cuts = [size * k // count for k in range(count + 1)]
    for k in range(count):
      if cuts[k + 1] > cuts[k] or (size == 0 and k == 0):
        ranges.append((path, rel, cuts[k], cuts[k + 1]))
  return ranges


def _open_input(path):
  return FileSystems.open(path, mime_type="application/octet-stream",
                          compression_type=CompressionTypes.UNCOMPRESSED)


def _first_line_start(reader, start, block_bytes=1 << 16):
  """The offset of the first line that starts at or after `start` (a line starts after "\\n")."""
  if start == 0:
    return 0
  reader.seek(start - 1)
  offset = start - 1
  while True:
    data = reader.read(block_bytes)
    if not data:
      return offset
    newline = data.find(b"\n")
    if newline >= 0:
      return offset + newline + 1
    offset += len(data)


def _line_blocks(reader, offset, block_bytes):
  """Yields (offset of the first line, raw lines without "\\n") from `offset` to the end."""
  reader.seek(offset)
  carry = b""
  while True:
    data = reader.read(block_bytes)
    if not data:
      if carry:
        yield offset, [carry]
      return
    data = carry + data
    cut = data.rfind(b"\n")
    if cut < 0:
      carry = data
      continue
    lines = data[:cut].split(b"\n")
    yield offset, lines
    offset += cut + 1
    carry = data[cut + 1:]


def iter_documents(reader, path, start, end, block_bytes=1 << 20):
  """Yields (offset, lines) of the documents a byte range [start, end) of a file owns.

  A document is a run of lines between lines that are empty after strip()
  (blank lines); it starts at the start of the file or after a blank line,
  and its offset is the byte offset of its first line. The range owns the
  documents of the file start (if start == 0) and of the blank lines that
  start in [start, end), and reads past `end` to finish its last document.
  Lines are str, decoded as create_pretraining_data reads them ("\\r" dropped,
  strict UTF-8; an invalid byte is a UsageError naming the file and line).
  Documents without a non-blank line are not yielded.
  """
  first = _first_line_start(reader, start)
  doc_offset = 0 if start == 0 else None  # None: before the first document the range owns
  doc_lines = []
  line_no = 0
  for offset, raw_lines in _line_blocks(reader, first, block_bytes):
    lines = cpd.decode_lines(raw_lines, path, line_no, first)
    line_no += len(raw_lines)
    for raw, line in zip(raw_lines, lines):
      if doc_offset is None and offset >= end:
        return
      if not line.strip():
        if doc_lines:
          yield doc_offset, doc_lines
          doc_lines = []
        if offset >= end:
          return
        doc_offset = offset + len(raw) + 1
      elif doc_offset is not None:
        doc_lines.append(line)
      offset += len(raw) + 1
  if doc_lines:
    yield doc_offset, doc_lines


def _token_dtype(vocab):
  return np.uint16 if vocab and max(vocab.values()) < 65536 else np.int32


def _make_tokenizer(vocab_bytes, do_lower_case):
  """A FullTokenizer of the vocab file's bytes (shipped with the pipeline to the workers)."""
  handle, path = tempfile.mkstemp(suffix=".vocab.txt")
  try:
    with os.fdopen(handle, "wb") as f:
      f.write(vocab_bytes)
    return tokenization.FullTokenizer(vocab_file=path, do_lower_case=do_lower_case)
  finally:
    os.remove(path)


class ReadDocuments(_DoFn):
  """(path, rel_path, start, end) -> ((pass, bucket), (rel_path, offset, token ids, segment
  lengths)) for each document of the range and each pass."""

  def __init__(self, vocab_bytes, do_lower_case, random_seed, dupe_factor, num_buckets,
               batch_lines=4096):
    self.vocab_bytes = vocab_bytes
    self.do_lower_case = do_lower_case
    self.random_seed = random_seed
    self.dupe_factor = dupe_factor
    self.num_buckets = num_buckets
    self.batch_lines = batch_lines

  def setup(self):
    self.tokenizer = _make_tokenizer(self.vocab_bytes, self.do_lower_case)
    self.encode = cpd.line_encoder(self.tokenizer)
    self.dtype = _token_dtype(self.tokenizer.vocab)
    self.documents = beam.metrics.Metrics.counter(NAMESPACE, "documents")
    self.lines = beam.metrics.Metrics.counter(NAMESPACE, "document_lines")
    self.tokens = beam.metrics.Metrics.counter(NAMESPACE, "tokens")
    self.errors = beam.metrics.Metrics.string_set(NAMESPACE, "errors")

  def process(self, element):
    """Bad input (invalid UTF-8, a token missing from the vocab) is not raised, which would
    make runners retry the bundle and log tracebacks: the message goes to the "errors"
    output and the run writes nothing (see _finalize)."""
    try:
      yield from self._documents(element)
    except UsageError as e:
      self.errors.add(str(e))
      yield beam.pvalue.TaggedOutput("errors", str(e))

  def _documents(self, element):
    path, rel, start, end = element
    pending, count = [], 0
    with _open_input(path) as reader:
      for doc in iter_documents(reader, path, start, end):
        pending.append(doc)
        count += len(doc[1])
        if count >= self.batch_lines:
          yield from self._emit(path, rel, pending)
          pending, count = [], 0
    yield from self._emit(path, rel, pending)

  def _emit(self, path, rel, docs):
    if not docs:
      return
    texts = [line.strip() for _, lines in docs for line in lines]
    try:
      ids, splits = self.encode(texts)
    except KeyError as e:
      raise UsageError("--vocab_file has no token %s, which the tokenizer produced from "
                       "--input_file %s" % (e, path)) from None
    ids = np.asarray(ids).astype(self.dtype)
    lengths = np.diff(splits)
    line = 0
    for offset, lines in docs:
      n = len(lines)
      seg = lengths[line:line + n]
      tokens = ids[splits[line]:splits[line + n]]
      line += n
      seg = seg[seg > 0].astype(np.int32)
      if not len(seg):
        continue
      self.documents.inc()
      self.lines.inc(len(seg))
      self.tokens.inc(len(tokens))
      value = (rel, offset, tokens.tobytes(), seg.tobytes())
      for p in range(self.dupe_factor):
        yield (p, bucket_of(self.random_seed, p, rel, offset, self.num_buckets)), value


# --------------------------------------------------------------------------
# Instances of a bucket -> encoded records, by shard
# --------------------------------------------------------------------------

def _record_ends(framed):
  """End offsets of the TFRecords framed back to back in `framed` (bytes)."""
  ends = []
  offset = 0
  total = len(framed)
  while offset < total:
    offset += 16 + int.from_bytes(framed[offset:offset + 8], "little")
    ends.append(offset)
  return ends


class MakeInstances(_DoFn):
  """((pass, bucket), documents) -> (shard, (keys, record lengths, records)) batches."""

  def __init__(self, vocab_bytes, do_lower_case, options, total_shards, log_examples=20,
               batch_size=4096):
    self.vocab_bytes = vocab_bytes
    self.do_lower_case = do_lower_case
    self.options = dict(options)
    self.total_shards = total_shards
    self.log_examples = log_examples
    self.batch_size = batch_size

  def setup(self):
    o = self.options
    self.tokenizer = _make_tokenizer(self.vocab_bytes, self.do_lower_case)
    self.dtype = _token_dtype(self.tokenizer.vocab)
    self.params = cpd.InstanceParams(
        self.tokenizer, o["max_seq_length"], o["short_seq_prob"], o["masked_lm_prob"],
        o["max_predictions_per_seq"], o["do_whole_word_mask"])
    self.value_bytes = cpd.record_value_bytes(self.params)
    self.crc = tfrecord_encoding.Crc32c(1024)
    # Words one document may need ahead (generate_instances reserves this per instance).
    self.chunk = 16 * o["max_seq_length"] + 4096 + 4096
    self.bitgen = np.random.PCG64(0)
    counter = beam.metrics.Metrics.counter
    self.c_docs = counter(NAMESPACE, "document_passes")
    self.c_instances = counter(NAMESPACE, "instances")
    self.c_random = counter(NAMESPACE, "random_next_instances")
    self.c_masked = counter(NAMESPACE, "masked_lm_positions")
    self.c_tokens = counter(NAMESPACE, "instance_tokens")
    self.c_buckets = counter(NAMESPACE, "buckets")
    self.d_bucket = beam.metrics.Metrics.distribution(NAMESPACE, "documents_per_bucket")

  def process(self, element):
    (pass_index, bucket), docs = element
    docs = sorted(docs, key=lambda d: (d[0], d[1]))
    seed = self.options["random_seed"]
    tokens = np.concatenate([np.frombuffer(d[2], dtype=self.dtype) for d in docs])
    seg_lengths = [np.frombuffer(d[3], dtype=np.int32) for d in docs]
    seg_start = np.zeros(sum(len(s) for s in seg_lengths) + 1, dtype=np.int64)
    np.cumsum(np.concatenate(seg_lengths), out=seg_start[1:])
    doc_start = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seg_lengths], out=doc_start[1:])
    corpus = cpd.Corpus(tokens, seg_start, doc_start)
    digests = [document_digest(seed, pass_index, d[0], d[1]) for d in docs]
    store = cpd.InstanceStore()
    firsts = []

    def words_for(_, document_index):
      firsts.append(len(store))
      return DocumentWords(digests[document_index], self.bitgen, self.chunk)

    cpd.generate_instances(corpus, np.arange(len(docs), dtype=np.int64), self.params, None, 1,
                           store, words_for=words_for)
    n = len(store)
    firsts.append(n)
    keys = np.concatenate([instance_keys(digests[d], firsts[d + 1] - firsts[d])
                           for d in range(len(docs))] + [np.zeros((0, 2), dtype=">u8")])
    views = store.views()
    meta = views[0]
    self.c_buckets.inc()
    self.d_bucket.update(len(docs))
    self.c_docs.inc(len(docs))
    self.c_instances.inc(n)
    self.c_random.inc(int(meta[:, 4].sum()))
    self.c_masked.inc(int(meta[:, 5].sum()))
    self.c_tokens.inc(int((meta[:, 1] + meta[:, 3] + 3).sum()))
    shard_of = (keys[:, 0] % np.uint64(self.total_shards)).astype(np.int64)
    log_examples = self.log_examples if (pass_index, bucket) == (0, 0) else 0
    for b0 in range(0, n, self.batch_size):
      idx = np.arange(b0, min(n, b0 + self.batch_size), dtype=np.int64)
      features, lengths = cpd.instance_features(views, corpus.tokens, idx, self.params)
      for row in range(min(log_examples - b0, len(idx))):
        cpd.log_example(features, row, int(lengths[row]), self.tokenizer.inv_vocab)
      framed = tfrecord_encoding.encode_records(features, self.value_bytes, self.crc,
                                                lengths).tobytes()
      ends = _record_ends(framed)
      starts = [0] + ends[:-1]
      batch_shards = shard_of[idx]
      for shard in np.unique(batch_shards).tolist():
        rows = np.flatnonzero(batch_shards == shard)
        data = b"".join([framed[starts[r]:ends[r]] for r in rows.tolist()])
        sizes = np.asarray([ends[r] - starts[r] for r in rows.tolist()], dtype="<u8")
        yield shard, (keys[idx[rows]].tobytes(), sizes.tobytes(), data)


# --------------------------------------------------------------------------
# Writing: one shard per GroupByKey key, then rename all at once
# --------------------------------------------------------------------------

def shard_names(output_files, num_shards):
  """The final name of every shard: output prefix k has shards k*num_shards ...
  (k+1)*num_shards-1."""
  return ["%s-%05d-of-%05d" % (path, s, num_shards)
          for path in output_files for s in range(num_shards)]


def _write_bytes(path, chunks):
  with FileSystems.create(path, mime_type="application/octet-stream",
                          compression_type=CompressionTypes.UNCOMPRESSED) as writer:
    for chunk in chunks:
      writer.write(chunk)


class WriteShard(_DoFn):
  """(shard, batches) -> (shard, temporary name, final name, records): the shard's records in
  the order of their keys, written to the temporary name."""

  def __init__(self, names, run_tag):
    self.names = names
    self.run_tag = run_tag

  def setup(self):
    self.c_written = beam.metrics.Metrics.counter(NAMESPACE, "records_written")
    self.c_bytes = beam.metrics.Metrics.counter(NAMESPACE, "bytes_written")

  def process(self, element):
    shard, batches = element
    keys, sizes, data = [], [], []
    for k, s, d in batches:
      keys.append(k)
      sizes.append(s)
      data.append(d)
    keys = np.frombuffer(b"".join(keys), dtype=">u8").reshape(-1, 2)
    sizes = np.frombuffer(b"".join(sizes), dtype="<u8").astype(np.int64)
    data = memoryview(b"".join(data))
    ends = np.cumsum(sizes)
    starts = (ends - sizes).tolist()
    ends = ends.tolist()
    order = np.lexsort((keys[:, 1], keys[:, 0])).tolist()
    final = self.names[shard]
    temp = file_io.temp_name(final, self.run_tag)
    _write_bytes(temp, [b"".join([data[starts[i]:ends[i]] for i in order])])
    self.c_written.inc(len(order))
    self.c_bytes.inc(len(data))
    yield shard, temp, final, len(order)


def _finalize(results, errors, names, run_tag, input_description):
  """Renames every written shard to its final name (empty shards for shard numbers that got no
  record). If the input had errors, or gave no instance, deletes them instead and reports the
  error in the "errors" metric (the launcher raises it)."""
  results = sorted(results)
  if errors or not sum(r[3] for r in results):
    if results:
      FileSystems.delete([r[1] for r in results])
    if not errors:
      beam.metrics.Metrics.string_set(NAMESPACE, "errors").add(
          "--input_file %s: the corpus is empty (no line tokenizes to anything)"
          % input_description)
    return 0
  done = {r[0] for r in results}
  temps = [r[1] for r in results]
  finals = [r[2] for r in results]
  for shard, final in enumerate(names):
    if shard not in done:
      temp = file_io.temp_name(final, run_tag)
      _write_bytes(temp, [])
      temps.append(temp)
      finals.append(final)
  todo = [(t, f) for t, f in zip(temps, finals) if FileSystems.exists(t) or
          not FileSystems.exists(f)]  # a retried step: already renamed
  if todo:
    FileSystems.rename([t for t, _ in todo], [f for _, f in todo])
  return sum(r[3] for r in results)


def _remove_temporaries(output_files, run_tag):
  patterns = []
  for path in output_files:
    head, tail = path.rsplit("/", 1) if "/" in path else ("", path)
    name = ".%s-*-of-*.tmp-%s" % (tail, run_tag)
    patterns.append(head + "/" + name if head else name)
  try:
    found = [m.path for result in FileSystems.match(patterns) for m in result.metadata_list]
    if found:
      FileSystems.delete(found)
  except Exception:
    pass


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------

class Config(cpd.Config):
  """create_pretraining_data's checked options plus the pipeline's own."""

  def __init__(self, input_files, output_files, vocab_file, num_shards=0, bucket_size_mb=64.0,
               read_chunk_mb=64.0, input_sizes=None, **kwargs):
    kwargs.setdefault("progress", False)
    super().__init__(input_files, output_files, vocab_file, **kwargs)
    cpd.check_bounds({checks.AT_LEAST: {"num_shards": (0, "0: automatic")},
                      checks.ABOVE_ZERO: ("bucket_size_mb", "read_chunk_mb")},
                     num_shards=num_shards, bucket_size_mb=bucket_size_mb,
                     read_chunk_mb=read_chunk_mb)
    self.num_shards = num_shards
    self.bucket_size_mb = bucket_size_mb
    self.read_chunk_mb = read_chunk_mb
    sizes = list(input_sizes) if input_sizes is not None else [None] * len(self.input_files)
    self.input_sizes = [
        size if size is not None else
        file_io.file_size(path)
        for path, size in zip(self.input_files, sizes)]

  @property
  def total_bytes(self):
    return sum(self.input_sizes)

  def resolved_num_shards(self):
    """--num_shards, or 0: one shard per 64 MB of input text per pass (at least 1)."""
    if self.num_shards:
      return self.num_shards
    return max(1, -(-self.total_bytes * self.dupe_factor // (64 * _MB)))

  def num_buckets(self):
    return max(1, math.ceil(self.total_bytes / (self.bucket_size_mb * _MB)))


def expand_inputs(input_file):
  """Comma-separated globs -> [(path, size or None)]: local ones as create_pretraining_data
  globs them, others with Beam's FileSystems (gs://, ...)."""
  out = []
  for pattern in input_file.split(","):
    if not pattern:
      continue
    if file_io.is_remote(pattern):
      for result in FileSystems.match([pattern]):
        out.extend((m.path, m.size_in_bytes) for m in result.metadata_list)
    else:
      out.extend((p, None) for p in file_io.expand_input_patterns(pattern))
  return out


def build_pipeline(pipeline, config, vocab_bytes, run_tag):
  """Adds the transforms to `pipeline`; returns the PCollection of the instance count."""
  ranges = plan_ranges(list(zip(config.input_files, config.input_sizes)),
                       int(config.read_chunk_mb * _MB))
  total_shards = config.resolved_num_shards() * len(config.output_files)
  names = shard_names(config.output_files, config.resolved_num_shards())
  options = dict(max_seq_length=config.max_seq_length, short_seq_prob=config.short_seq_prob,
                 masked_lm_prob=config.masked_lm_prob,
                 max_predictions_per_seq=config.max_predictions_per_seq,
                 do_whole_word_mask=config.do_whole_word_mask, random_seed=config.random_seed)
  read = (
      pipeline
      | "Ranges" >> beam.Create(ranges)
      | "SpreadRanges" >> beam.Reshuffle()
      | "ReadDocuments" >> beam.ParDo(ReadDocuments(
          vocab_bytes, config.do_lower_case, config.random_seed, config.dupe_factor,
          config.num_buckets())).with_outputs("errors", main="documents"))
  return (
      read.documents
      | "GroupByPassAndBucket" >> beam.GroupByKey()
      | "MakeInstances" >> beam.ParDo(MakeInstances(
          vocab_bytes, config.do_lower_case, options, total_shards))
      | "GroupByShard" >> beam.GroupByKey()
      | "WriteShards" >> beam.ParDo(WriteShard(names, run_tag))
      | "AllShards" >> beam.combiners.ToList()
      | "Rename" >> beam.Map(_finalize, beam.pvalue.AsList(read.errors), names, run_tag,
                             ",".join(config.input_files)))


def _read_vocab_bytes(path):
  with (FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
        if file_io.is_remote(path) else open(path, "rb")) as f:
    return f.read()


def usage_error_message(exc):
  """The message of a UsageError raised in the pipeline (Beam wraps worker errors), or None."""
  seen = set()
  e = exc
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if isinstance(e, UsageError):
      return re.sub(r" \[while running '[^\]]*'\]$", "", str(e).strip().splitlines()[0])
    e = e.__cause__ or e.__context__
  found = re.findall(r"UsageError: (.+?)(?: \[while running '[^\]]*'\])?$", str(exc), re.M)
  return found[-1].strip() if found else None


# The runner options and their checks: runtime/beam_runner.py (shared with predict_beam.py).
DIRECT_RUNNERS = beam_runner.DIRECT_RUNNERS
pipeline_options = beam_runner.pipeline_options
unknown_beam_args = beam_runner.unknown_beam_args
parse_flags = beam_runner.parse_flags


def run(config, options=None):
  """Runs the pipeline; returns (instances written, {counter name: value})."""
  if beam is None:
    raise UsageError("apache-beam is not installed (pip install 'bert-keras[beam]')")
  random_replay.self_check()
  cpd.make_tokenizer(config)  # the vocab's errors, before anything starts
  vocab_bytes = _read_vocab_bytes(config.vocab_file)
  options = options if options is not None else pipeline_options()
  run_tag = "%s-%s" % (time.strftime("%Y%m%d%H%M%S"), uuid.uuid4().hex[:8])
  logging.info("*** Reading from input files ***")
  for path in config.input_files:
    logging.info("  %s", path)
  num_shards = config.resolved_num_shards()
  logging.info("%d input files, %.1f MB: %d buckets per pass of about %.0f MB, %d passes",
               len(config.input_files), config.total_bytes / 1e6, config.num_buckets(),
               config.total_bytes / config.num_buckets() / 1e6, config.dupe_factor)
  logging.info("*** Writing to output files ***")
  for path in config.output_files:
    logging.info("  %s-?????-of-%05d", path, num_shards)
  start = time.time()
  runner = beam_runner.runner_for(options)
  if runner is not None:  # the DirectRunner's INFO lines (servers, workers) are noise here
    import logging as std_logging
    std_logging.getLogger("apache_beam").setLevel(std_logging.WARNING)
  pipeline = beam.Pipeline(runner=runner, options=options)
  build_pipeline(pipeline, config, vocab_bytes, run_tag)
  try:
    result = pipeline.run()
    result.wait_until_finish()
  except BaseException as e:
    _remove_temporaries(config.output_files, run_tag)
    message = usage_error_message(e)
    if message is not None:
      raise UsageError(message) from None
    raise
  counters, errors = beam_runner.metrics(result, NAMESPACE)
  if errors:
    _remove_temporaries(config.output_files, run_tag)
    raise UsageError(sorted(errors)[0])
  elapsed = time.time() - start
  for name in sorted(counters):
    logging.info("counter %s: %s", name, format(counters[name], ","))
  if counters.get("instance_tokens"):
    logging.info("masked per token %.4f, random-next rate %.4f, tokens per instance %.1f",
                 counters["masked_lm_positions"] / counters["instance_tokens"],
                 counters["random_next_instances"] / max(counters["instances"], 1),
                 counters["instance_tokens"] / max(counters["instances"], 1))
  count = counters.get("records_written", counters.get("instances", 0))
  logging.info("Wrote %d total instances in %d shards (%.1f s)", count,
               num_shards * len(config.output_files), elapsed)
  return count, counters


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def define_flags():
  """create_pretraining_data.py's flags (the original's) plus the pipeline's."""
  from absl import flags
  global FLAGS
  cpd.define_original_flags()
  flags.DEFINE_string("runner", "DirectRunner",
                      "Beam runner: DirectRunner (local), DataflowRunner, FlinkRunner, "
                      "SparkRunner, ... Other Beam pipeline options (--project, --region, "
                      "--temp_location, --setup_file, ...) are passed on to Beam as given.")
  flags.DEFINE_integer("direct_num_workers", 1,
                       "DirectRunner: parallel workers (0: one per CPU).")
  flags.DEFINE_enum("direct_running_mode", "in_memory",
                    ["in_memory", "multi_threading", "multi_processing"],
                    "DirectRunner: how workers run (multi_processing for real parallelism).")
  flags.DEFINE_integer("num_shards", 0,
                       "Output shards per --output_file: <output_file>-SSSSS-of-NNNNN. 0: one "
                       "per 64 MB of input text per pass (--dupe_factor).")
  flags.DEFINE_float("bucket_size_mb", 64,
                     "Text per bucket (MB): a worker makes the instances of one bucket at a "
                     "time, and random next sentences come from the same bucket.")
  flags.DEFINE_float("read_chunk_mb", 64,
                     "Input files are read in byte ranges of about this size (MB), in "
                     "parallel; the output does not depend on it.")
  FLAGS = flags.FLAGS
  flags.adopt_module_key_flags(cpd)  # --help lists them too, not only --helpfull


def main(argv):
  logging.set_verbosity(logging.INFO)
  with errors.one_line_errors():
    if beam is None:
      raise UsageError("apache-beam is not installed (pip install 'bert-keras[beam]')")
    beam_args = list(argv[1:])
    unknown = unknown_beam_args(beam_args)
    if unknown:
      raise UsageError("%s: neither a flag of create_pretraining_data_beam.py nor a Beam "
                       "pipeline option" % " ".join(unknown))
    files = expand_inputs(FLAGS.input_file)
    if not files:
      raise UsageError("--input_file %s: no files match" % FLAGS.input_file)
    config = Config(
        [p for p, _ in files], FLAGS.output_file.split(","), FLAGS.vocab_file,
        input_sizes=[s for _, s in files], num_shards=FLAGS.num_shards,
        bucket_size_mb=FLAGS.bucket_size_mb, read_chunk_mb=FLAGS.read_chunk_mb,
        do_lower_case=FLAGS.do_lower_case, do_whole_word_mask=FLAGS.do_whole_word_mask,
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        random_seed=FLAGS.random_seed, dupe_factor=FLAGS.dupe_factor,
        masked_lm_prob=FLAGS.masked_lm_prob, short_seq_prob=FLAGS.short_seq_prob)
    if FLAGS.runner not in DIRECT_RUNNERS and not __name__.startswith("bert_keras."):
      logging.warning("this module runs as %r, not from the installed package bert_keras: "
                      "remote workers may not import it (pip install '.[beam]' and pass "
                      "--setup_file=./setup.py)", __name__)
    options = pipeline_options(FLAGS.runner, FLAGS.direct_num_workers,
                               FLAGS.direct_running_mode, beam_args)
    run(config, options)


if __name__ == "__main__":
  from absl import app as _app
  define_flags()
  _app.run(main, flags_parser=parse_flags)
