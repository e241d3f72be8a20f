"""tf.train.Example wire format and TFRecord framing (CRC32C), vectorized with numpy.

`encode_records` serializes many Examples of the pre-training features at once
(protobuf wire format, map entries in sorted key order as
`SerializeToString(deterministic=True)` writes them) and frames them as
TFRecords (length, masked CRC32C of the length, data, masked CRC32C of the
data), without importing TensorFlow.
"""

import numpy as np

# The pre-training features, (name, kind) in the original's insertion (and logging) order.
FEATURES = (("input_ids", "int"), ("input_mask", "int"), ("segment_ids", "int"),
            ("masked_lm_positions", "int"), ("masked_lm_ids", "int"),
            ("masked_lm_weights", "float"), ("next_sentence_labels", "int"))
# What each feature's length is: a token sequence, the masked positions, or one value.
_LENGTHS = {"input_ids": "seq", "input_mask": "seq", "segment_ids": "seq",
            "masked_lm_positions": "preds", "masked_lm_ids": "preds",
            "masked_lm_weights": "preds", "next_sentence_labels": "one"}


def feature_lengths(max_seq_length, max_predictions_per_seq):
  """{name: values per record} of the pretraining record schema, in FEATURES' order."""
  sizes = {"seq": max_seq_length, "preds": max_predictions_per_seq, "one": 1}
  return {name: sizes[_LENGTHS[name]] for name, _ in FEATURES}


def parsing_features(max_seq_length, max_predictions_per_seq):
  """{name: tf.io.FixedLenFeature} that parse a pretraining record, as the original
  run_pretraining's input_fn (int64 and float32; TensorFlow imported here, on first use)."""
  import tensorflow as tf  # not for writing records
  lengths = feature_lengths(max_seq_length, max_predictions_per_seq)
  return {name: tf.io.FixedLenFeature([lengths[name]], tf.float32 if kind == "float" else tf.int64)
          for name, kind in FEATURES}


class Crc32c(object):
  """Masked CRC32C of many byte strings at once (TFRecord framing).

  CRC is linear: crc(m) = R(0, m) ^ R(~0, zeros(len m)) ^ ~0, where R(0, m)
  is the XOR over the bytes of T[d][byte], d = the number of bytes after it.
  """

  def __init__(self, max_len):
    t0 = np.arange(256, dtype=np.uint32)
    for _ in range(8):
      t0 = np.where(t0 & 1, (t0 >> 1) ^ np.uint32(0x82F63B78), t0 >> 1).astype(np.uint32)
    self.t0 = t0
    self.tables = np.zeros(0, dtype=np.uint32)
    self.zeros = np.array([0xFFFFFFFF], dtype=np.uint32)
    self._prefix = {}
    self._grow(max_len)

  def _grow(self, max_len):
    t0 = self.t0
    rows = [self.tables.reshape(-1, 256)] if len(self.tables) else []
    current = rows[0][-1] if rows else t0
    have = rows[0].shape[0] if rows else 0
    new = []
    if not have:
      new.append(t0)
      have = 1
    for _ in range(have, max_len):
      current = t0[current & 0xFF] ^ (current >> 8)
      new.append(current)
    self.tables = np.concatenate(rows + [np.stack(new)] if new else rows).reshape(-1)
    z = self.zeros.tolist()
    while len(z) <= max_len:
      c = z[-1]
      z.append(int(t0[c & 0xFF]) ^ (c >> 8))
    self.zeros = np.array(z, dtype=np.uint32)

  def ensure(self, max_len):
    if max_len > len(self.tables) // 256:
      self._grow(max_len)
      self._prefix = {}

  def _table(self, key):
    """Prefix-XOR tables (over the distance d to the end of the record) for runs of bytes."""
    table = self._prefix.get(key)
    if table is not None:
      return table
    t = self.tables.reshape(-1, 256)
    n = t.shape[0]
    if key == "one":  # P[d] = XOR of T[x][1] for x < d
      table = np.zeros(n + 1, dtype=np.uint32)
      table[1:] = np.bitwise_xor.accumulate(t[:, 1])
    elif key == "float_one":  # R[d] = U[d] ^ R[d - 4], U[d]: the bytes of 1.0f ending at d
      unit = np.zeros(n, dtype=np.uint32)
      unit[:n - 1] = t[:n - 1, 0x3F] ^ t[1:, 0x80]
      table = unit.copy()
      for r in range(4):
        table[r::4] = np.bitwise_xor.accumulate(unit[r::4])
    else:  # a constant string ending at distance d
      data = np.frombuffer(key, dtype=np.uint8)
      table = np.zeros(n, dtype=np.uint32)
      for i, byte in enumerate(data):
        shift = len(data) - 1 - i
        table[:n - shift] ^= t[shift:, byte]
    self._prefix[key] = table
    return table

  def contribution(self, part, after, lengths=None, features=None):
    """XOR over part's bytes of T[distance to the record end][byte], per row: [B] uint32."""
    t = self.tables
    if part.crc == "const":
      return self._table(part.const)[after]
    width = part.data.shape[1]
    if part.crc == "input_mask":  # ones at bytes 0 .. length-1 of the part
      p = self._table("one")
      return p[after + width] ^ p[after + width - lengths]
    if part.crc == "segment_ids":  # ones at bytes len_a+2 .. length-1
      p = self._table("one")
      first = np.asarray(features["segment_ids"].argmax(axis=1), dtype=np.int64)
      return p[after + width - first] ^ p[after + width - lengths]
    if part.crc == "masked_lm_weights":  # 1.0f in the first n of width/4 floats
      r = self._table("float_one")
      n = features["masked_lm_weights"].sum(axis=1).astype(np.int64)
      hi = after + width - 4
      lo = hi - 4 * n
      return np.where(n > 0, r[hi] ^ np.where(lo >= 0, r[np.maximum(lo, 0)], 0), 0).astype(
          np.uint32)
    if part.valid is None:
      dist = after.astype(np.int32)[:, None] + np.arange(width - 1, -1, -1, dtype=np.int32)
    else:
      dist = (after + part.size).astype(np.int32)[:, None] - np.cumsum(
          part.valid, axis=1, dtype=np.int32)
    dist <<= 8
    dist |= part.data
    return np.bitwise_xor.reduce(t[dist], axis=1)

  def finish(self, raw, lengths):
    """Masked CRC32C from the XOR of contributions and the lengths."""
    crc = (raw ^ self.zeros[lengths] ^ np.uint32(0xFFFFFFFF)).astype(np.uint32)
    rotated = (crc >> np.uint32(15)) | (crc << np.uint32(17))
    return rotated + np.uint32(0xA282EAD8)


def varint(values, nbytes):
  """values: [B, n] ints in [0, 2**(7*nbytes)) -> (bytes [B, n*nbytes] uint8, valid
  [B, n*nbytes] bool, or None when every byte is valid)."""
  v = np.asarray(values)
  b, n = v.shape
  if nbytes == 1:
    return v.astype(np.uint8), None
  v = v.astype(np.uint32 if nbytes <= 4 else np.uint64)
  out = np.empty((b, n, nbytes), dtype=np.uint8)
  valid = np.empty((b, n, nbytes), dtype=bool)
  valid[:, :, 0] = True
  out[:, :, 0] = v & 0x7F
  for k in range(1, nbytes):
    group = v >> (7 * k)
    valid[:, :, k] = group != 0
    out[:, :, k] = group & 0x7F
    out[:, :, k - 1] |= valid[:, :, k].view(np.uint8) << 7
  return out.reshape(b, n * nbytes), valid.reshape(b, n * nbytes)


def varint_size(v):
  """The varint length in bytes of each value of v (ints >= 0): int64, v's shape."""
  v = np.asarray(v, dtype=np.int64)
  size = np.ones(v.shape, dtype=np.int64)
  top = int(v.max()) if v.size else 0
  k = 1
  while k < 10 and (1 << (7 * k)) <= top:
    size += v >= (1 << (7 * k))
    k += 1
  return size


def varint_bytes_for(max_value):
  """Varint bytes enough for every value in [0, max_value]."""
  return max(1, (int(max_value).bit_length() + 6) // 7)


class _Part(object):
  """A run of bytes of every record: data [B, w] uint8 (invalid bytes are 0), valid [B, w]
  or None (all valid), size [B] (valid bytes), and how its CRC contribution is computed."""

  def __init__(self, data, valid, size, crc="gather", const=None):
    self.data, self.valid, self.size, self.crc, self.const = data, valid, size, crc, const


def encode_records(features, value_bytes, crc, lengths=None):
  """Serializes tf.train.Examples of the pre-training features and frames them as TFRecords.

  Args:
    features: dict name -> [B, n] array (ints >= 0, float32 for masked_lm_weights).
    value_bytes: dict name -> varint bytes enough for every value of that int feature.
    crc: a Crc32c.
    lengths: [B] real lengths of the instances (input_mask ones), when features come
      from create_pretraining_data.instance_features: input_mask, segment_ids and
      masked_lm_weights then get their CRC from prefix tables instead of byte by byte.
  Returns:
    uint8 [total]: the B records, TFRecord-framed, concatenated. Map entries are
    in sorted key order, as SerializeToString(deterministic=True) writes them.
  """
  return _frame_records(_example_parts(features, value_bytes, lengths), crc, lengths,
                        features)


def _example_parts(features, value_bytes, lengths):
  """The bytes of B serialized Examples, as a list of _Part (runs of bytes of every record)."""
  batch = len(features["input_ids"])
  parts = []

  def const(data):
    arr = np.frombuffer(bytes(data), dtype=np.uint8)
    parts.append(_Part(np.broadcast_to(arr, (batch, len(arr))), None,
                       np.full(batch, len(arr), dtype=np.int64), "const", bytes(data)))

  def var(values):
    values = np.asarray(values).reshape(batch, 1)
    data, valid = varint(values, varint_bytes_for(values.max()))
    size = valid.sum(axis=1, dtype=np.int64) if valid is not None else np.ones(batch, np.int64)
    parts.append(_Part(data, valid, size))

  sized = []
  total = 0
  for name, kind in sorted(FEATURES):
    values = features[name]
    if kind == "int":
      data, valid = varint(values, value_bytes[name])
      payload = (valid.sum(axis=1, dtype=np.int64) if valid is not None
                 else np.full(batch, data.shape[1], dtype=np.int64))
      tag = 0x1A
    else:
      data = np.ascontiguousarray(values, dtype="<f4").view(np.uint8).reshape(batch, -1)
      valid = None
      payload = np.full(batch, data.shape[1], dtype=np.int64)
      tag = 0x12
    l1 = 1 + varint_size(payload) + payload
    l2 = 1 + varint_size(l1) + l1
    key = name.encode("ascii")
    l3 = 3 + len(key) + varint_size(l2) + l2
    total = total + 1 + varint_size(l3) + l3
    how = "gather"
    if lengths is not None and name in ("input_mask", "segment_ids", "masked_lm_weights"):
      how = name
    sized.append((key, tag, _Part(data, valid, payload, how), l1, l2, l3))
  const(b"\x0a")
  var(total)
  for key, tag, part, l1, l2, l3 in sized:
    const(b"\x0a")
    var(l3)
    const(b"\x0a" + bytes([len(key)]) + key + b"\x12")
    var(l2)
    const(bytes([tag]))
    var(l1)
    const(b"\x0a")
    var(part.size)
    parts.append(part)
  return parts


def _frame_records(parts, crc, lengths, features):
  """TFRecord framing of the records in `parts`: uint8 [total], the records concatenated."""
  batch = len(parts[0].size)
  record_len = np.sum([part.size for part in parts], axis=0)
  crc.ensure(int(sum(part.data.shape[1] for part in parts)) + 16)
  raw = np.zeros(batch, dtype=np.uint32)
  after = record_len.copy()  # bytes after the current part
  for part in parts:
    after -= part.size
    raw ^= crc.contribution(part, after, lengths, features)
  data_crc = crc.finish(raw, record_len)
  len_bytes = record_len.astype("<u8").view(np.uint8).reshape(batch, 8)
  header = _Part(len_bytes, None, np.full(batch, 8, dtype=np.int64))
  len_crc = crc.finish(crc.contribution(header, np.zeros(batch, dtype=np.int64)),
                       header.size)
  framed = np.concatenate(
      [len_bytes, len_crc.astype("<u4").view(np.uint8).reshape(batch, 4)] +
      [part.data for part in parts] +
      [data_crc.astype("<u4").view(np.uint8).reshape(batch, 4)], axis=1)
  ones = np.ones((batch, 12), dtype=bool)
  framed_valid = np.concatenate(
      [ones] + [part.valid if part.valid is not None else
                np.ones(part.data.shape, dtype=bool) for part in parts] + [ones[:, :4]], axis=1)
  return framed[framed_valid]
