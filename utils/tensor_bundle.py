"""TensorFlow's checkpoint files (the V2 tensor bundle: PREFIX.index and
PREFIX.data-SSSSS-of-NNNNN) read with NumPy alone, for Keras on JAX or PyTorch where TensorFlow
is not imported (or not installed). TensorFlow's own reader (tf.train.load_checkpoint) stays
the reader under the TensorFlow backend.

The .index file is a LevelDB table: data blocks of prefix-compressed (key, value) entries, an
index block of (last key, block handle), a 48-byte footer. The value of key "" is the bundle's
header; every other key is a tensor's name and its value a BundleEntryProto (dtype, shape,
shard, offset, size), whose bytes sit at that offset of that shard's data file, little-endian.
Only what checkpoints of BERT hold is read: numeric tensors and booleans, unpartitioned;
strings (the object graph) are listed with their shape but not read. Every length and offset
is checked against the file before use: a damaged or crafted file is a ValueError naming it.
"""

import os
import struct

import numpy as np

from bert_keras.utils import file_io

_MAGIC = 0xdb4775248b80fb57
_FOOTER = 48
_DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16, 6: np.int8,
           9: np.int64, 10: np.bool_, 17: np.uint16, 19: np.float16, 22: np.uint32,
           23: np.uint64}
_STRING, _BFLOAT16 = 7, 14
_DTYPE_NAMES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8",
                7: "string", 9: "int64", 10: "bool", 14: "bfloat16", 17: "uint16",
                19: "float16", 22: "uint32", 23: "uint64"}


class DType(str):
  """A stored dtype's name as TensorFlow spells it ("float32", "bfloat16", "string", ...),
  with `.name` as tf.DType has."""

  @property
  def name(self):
    return str(self)


def _varint(buf, pos, end, what):
  result = shift = 0
  while True:
    if pos >= end or shift > 63:
      raise ValueError(what)
    byte = buf[pos]
    pos += 1
    result |= (byte & 0x7F) << shift
    if not byte & 0x80:
      return result, pos
    shift += 7


def _proto_fields(buf, what):
  """(field number, wire type, value) of a protobuf message: ints for varints and fixed,
  bytes for length-delimited."""
  pos, end = 0, len(buf)
  while pos < end:
    key, pos = _varint(buf, pos, end, what)
    field, wire = key >> 3, key & 7
    if wire == 0:
      value, pos = _varint(buf, pos, end, what)
    elif wire == 1:
      value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
    elif wire == 5:
      value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
    elif wire == 2:
      size, pos = _varint(buf, pos, end, what)
      value, pos = bytes(buf[pos:pos + size]), pos + size
    else:
      raise ValueError(what)
    if pos > end:
      raise ValueError(what)
    yield field, wire, value


class _Entry(object):
  __slots__ = ("dtype", "shape", "shard", "offset", "size", "sliced")

  def __init__(self, value, what):
    self.dtype, self.shape, self.shard, self.offset, self.size = 0, [], 0, 0, 0
    self.sliced = False
    for field, wire, v in _proto_fields(value, what):
      if (wire == 2) != (field in (2, 7)):   # shape and slices are messages, the rest numbers
        raise ValueError(what)
      if field == 1:
        self.dtype = v
      elif field == 2:
        for f, wire, dim in _proto_fields(v, what):
          if f == 2 and wire == 2:
            size = next((s for g, w, s in _proto_fields(dim, what) if g == 1 and w == 0), 0)
            if size >= 1 << 40:   # a negative (or absurd) dimension
              raise ValueError(what)
            self.shape.append(size)
      elif field == 3:
        self.shard = v
      elif field == 4:
        self.offset = v
      elif field == 5:
        self.size = v
      elif field == 7:
        self.sliced = True


class Reader(object):
  """A checkpoint's tensors by name: get_variable_to_shape_map(), get_tensor(name), as
  tf.train.load_checkpoint's reader."""

  def __init__(self, prefix):
    self.prefix = os.fspath(prefix)
    self.index_file = self.prefix + ".index"
    with file_io.open_read(self.index_file) as f:
      data = f.read()
    self._entries, self._num_shards = {}, 1
    for key, value in self._table(data):
      if key == b"":
        for field, wire, v in _proto_fields(value, self._bad("header")):
          if field == 1 and wire == 0:
            self._num_shards = v
        continue
      self._entries[key.decode("utf-8", "replace")] = _Entry(value, self._bad("entry"))

  def _bad(self, what):
    return "%s: damaged checkpoint index (%s)" % (self.index_file, what)

  def _table(self, data):
    """(key, value) of every entry of the LevelDB table in `data`, in order."""
    if len(data) < _FOOTER or struct.unpack("<Q", data[-8:])[0] != _MAGIC:
      raise ValueError(self._bad("no table footer"))
    footer = data[-_FOOTER:]
    end = len(footer) - 8
    _, pos = _varint(footer, 0, end, self._bad("footer"))      # metaindex offset
    _, pos = _varint(footer, pos, end, self._bad("footer"))    # metaindex size
    index_offset, pos = _varint(footer, pos, end, self._bad("footer"))
    index_size, pos = _varint(footer, pos, end, self._bad("footer"))
    for _, handle in self._block(data, index_offset, index_size):
      offset, pos = _varint(handle, 0, len(handle), self._bad("block handle"))
      size, _ = _varint(handle, pos, len(handle), self._bad("block handle"))
      yield from self._block(data, offset, size)

  def _block(self, data, offset, size):
    limit = len(data) - _FOOTER
    if offset + size + 5 > limit + _FOOTER or size < 4:
      raise ValueError(self._bad("a block past the end of the file"))
    if data[offset + size] != 0:
      raise ValueError(self._bad("a compressed block: read it with TensorFlow installed"))
    block = memoryview(data)[offset:offset + size]
    restarts = struct.unpack("<I", block[-4:])[0]
    end = size - 4 - 4 * restarts
    if end < 0:
      raise ValueError(self._bad("block restarts"))
    pos, key = 0, b""
    while pos < end:
      shared, pos = _varint(block, pos, end, self._bad("block entry"))
      unshared, pos = _varint(block, pos, end, self._bad("block entry"))
      length, pos = _varint(block, pos, end, self._bad("block entry"))
      if shared > len(key) or pos + unshared + length > end:
        raise ValueError(self._bad("block entry"))
      key = key[:shared] + bytes(block[pos:pos + unshared])
      pos += unshared
      yield key, bytes(block[pos:pos + length])
      pos += length

  def get_variable_to_shape_map(self):
    return {name: list(entry.shape) for name, entry in self._entries.items()}

  def get_variable_to_dtype_map(self):
    return {name: DType(_DTYPE_NAMES.get(e.dtype, "dtype_%d" % e.dtype))
            for name, e in self._entries.items()}

  def has_tensor(self, name):
    return name in self._entries

  def get_tensor(self, name):
    """The tensor `name` as a NumPy array (bfloat16 as float32)."""
    entry = self._entries.get(name)
    if entry is None:
      raise KeyError("%s: no tensor %r in the checkpoint" % (self.prefix, name))
    if entry.sliced:
      raise ValueError("%s: %s is stored in slices (a partitioned variable): read it with "
                       "TensorFlow installed" % (self.prefix, name))
    if entry.dtype == _STRING:
      raise ValueError("%s: %s is a string tensor, not a weight" % (self.prefix, name))
    bfloat16 = entry.dtype == _BFLOAT16
    dtype = np.dtype(np.uint16 if bfloat16 else _DTYPES.get(entry.dtype, np.void))
    if dtype == np.void:
      raise ValueError("%s: %s has dtype number %d, not one a weight has"
                       % (self.prefix, name, entry.dtype))
    count = int(np.prod(entry.shape, dtype=np.int64)) if entry.shape else 1
    if entry.size != count * dtype.itemsize or not 0 <= entry.shard < self._num_shards:
      raise ValueError("%s: %s: its recorded size does not match its shape %s"
                       % (self.index_file, name, entry.shape))
    data_file = "%s.data-%05d-of-%05d" % (self.prefix, entry.shard, self._num_shards)
    if entry.offset + entry.size > file_io.file_size(data_file):
      raise ValueError("%s: %s lies past the end of the file (cut short?)" % (data_file, name))
    with file_io.open_read(data_file) as f:
      f.seek(entry.offset)
      raw = f.read(entry.size)
    array = np.frombuffer(raw, dtype.newbyteorder("<")).reshape(entry.shape)
    if bfloat16:
      return (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(dtype.newbyteorder("="), copy=True)
