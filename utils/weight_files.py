"""Weight files of any model, read without running their code: safetensors (read and written)
and torch.save's pytorch_model.bin (a zip of a pickle and raw storages).

  read_safetensors(path, names)    {name: np.ndarray}; the header checked before any data is read
  write_safetensors(path, tensors) {name: np.ndarray} -> a .safetensors file
  read_pytorch_bin(path, names)    {name: np.ndarray}; a restricted unpickler (only tensors),
                                   each archive member read with a limit set before inflating
  weight_file_shapes(path)         {name: shape} from the header or the pickle alone
  read_weight_file(path, names)    either format, by the file's extension

bfloat16 tensors are read as float32. A file that is not what it claims is a CheckpointError
(a ValueError); one that asks for more than tensors an UnsafeCheckpointError. Knows nothing of
BERT (checkpoints.py maps the names).
"""

import collections
import io
import json
import math
import pickle
import struct
import zipfile

import numpy as np
import tensorflow as tf

from bert_keras.utils import file_io


class CheckpointError(ValueError):
  """A checkpoint does not fit the model, or a weight file cannot be read (names the file or
  variable, the shapes and the likely cause)."""


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
  """A pytorch_model.bin that asks for something other than tensors, or whose storages are
  not what they claim."""


def read_weight_file(path, names=None):
  """{name: np.ndarray} of a .safetensors or (any other name) torch.save file; names: only
  these tensors (None: all)."""
  if path.endswith(".safetensors"):
    return read_safetensors(path, names)
  return read_pytorch_bin(path, names)


def weight_file_shapes(path):
  """{name: shape tuple} of a .safetensors or torch.save file, from its header or pickle alone:
  no tensor is read."""
  if path.endswith(".safetensors"):
    return _safetensors_shapes(path)
  return _read_pytorch_state(path, read_storages=False)


# ----------------------------------------------------------------------------------------------
# safetensors
# ----------------------------------------------------------------------------------------------

_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
                       "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
                       "U8": np.uint8, "BOOL": np.bool_}


def _bf16_to_f32(raw):
  return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)


_MAX_HEADER_BYTES = 100 << 20  # the safetensors format's own limit on the JSON header


def read_safetensors(path, names=None):
  """{name: np.ndarray} from a .safetensors file (8-byte header length, JSON header, data).

  The header is read first (at most the format's 100 MB) and checked before any tensor data
  is read: every tensor's byte range lies inside the file's data and holds exactly its
  shape's elements of its dtype; CheckpointError otherwise. Then only the data bytes the
  declared tensors span are read. names: only these tensors (None: all).
  """
  with tf.io.gfile.GFile(path, "rb") as f:
    header = _safetensors_header(path, f)
    body_size = tf.io.gfile.stat(path).length - 8 - header["__length__"]
    entries = {name: info for name, info in header.items()
               if name not in _HEADER_KEYS and (names is None or name in names)}
    spans = [_safetensors_span(path, name, info, body_size) for name, info in entries.items()]
    end = max((stop for _, stop in spans), default=0)
    data = f.read(end)
  if len(data) != end:
    raise CheckpointError("%s: the file ends before its tensors' data (%d of %d bytes)"
                          % (path, len(data), end))
  body = memoryview(data)
  return {name: _safetensors_array(path, name, info, body) for name, info in entries.items()}


_HEADER_KEYS = ("__metadata__", "__length__")


def _safetensors_header(path, f):
  """The JSON header of an open .safetensors file (with "__length__": its byte length); the
  file is left at the start of the data."""
  head = f.read(8)
  if len(head) < 8:
    raise CheckpointError("%s: not a safetensors file (%d bytes)" % (path, len(head)))
  (header_len,) = struct.unpack("<Q", head)
  if header_len > _MAX_HEADER_BYTES:
    raise CheckpointError("%s: header length %d exceeds the file or the format's limit of "
                          "%d bytes" % (path, header_len, _MAX_HEADER_BYTES))
  raw = f.read(header_len)
  if len(raw) != header_len:
    raise CheckpointError("%s: header length %d exceeds the file" % (path, header_len))
  try:
    header = json.loads(raw)
  except ValueError as e:
    raise CheckpointError("%s: unreadable safetensors header: %s"
                          % (path, str(e)[:200])) from None
  if not isinstance(header, dict):
    raise CheckpointError("%s: the safetensors header is not a JSON object" % path)
  header["__length__"] = header_len
  return header


def _safetensors_shapes(path):
  """{name: shape} from a .safetensors file's header alone."""
  with tf.io.gfile.GFile(path, "rb") as f:
    header = _safetensors_header(path, f)
  shapes = {}
  for name, info in header.items():
    shape = info.get("shape") if isinstance(info, dict) else None
    if name not in _HEADER_KEYS and isinstance(shape, list) and all(map(_is_count, shape)):
      shapes[name] = tuple(shape)
  return shapes


def _safetensors_span(path, name, info, body_size):
  """(start, stop) of a header entry's data, checked against its dtype and shape and the
  file's `body_size` data bytes."""
  def bad(what):
    return CheckpointError("%s: tensor %s: %s" % (path, name, what))
  if not isinstance(info, dict):
    raise bad("its header entry is not an object")
  dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
  if dtype != "BF16" and dtype not in _SAFETENSORS_DTYPES:
    raise bad("unsupported dtype %r" % (dtype,))
  if not (isinstance(shape, list) and all(_is_count(d) for d in shape)):
    raise bad("shape %r is not a list of non-negative integers" % (shape,))
  if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))
          and offsets[0] <= offsets[1] <= body_size):
    raise bad("data_offsets %r are not a range inside the file's %d data bytes"
              % (offsets, body_size))
  itemsize = 2 if dtype == "BF16" else np.dtype(_SAFETENSORS_DTYPES[dtype]).itemsize
  if offsets[1] - offsets[0] != math.prod(shape) * itemsize:
    raise bad("shape %s of %s needs %d bytes, its data_offsets span %d"
              % (shape, dtype, math.prod(shape) * itemsize, offsets[1] - offsets[0]))
  return offsets[0], offsets[1]


def _safetensors_array(path, name, info, body):
  """The array of a header entry that _safetensors_span checked."""
  dtype, shape = info["dtype"], info["shape"]
  start, stop = info["data_offsets"]
  raw = body[start:stop]
  if dtype == "BF16":
    return _bf16_to_f32(raw).reshape(shape)
  return np.frombuffer(raw, _SAFETENSORS_DTYPES[dtype]).reshape(shape)


def _is_count(value):
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def write_safetensors(path, tensors):
  """Writes {name: array} (float32, int32, ...) as a .safetensors file: the little-endian
  header length, the JSON header (dtype, shape, data_offsets; padded with spaces to a multiple
  of 8 bytes), then the tensors' bytes in name order."""
  dtypes = {np.dtype(v): k for k, v in _SAFETENSORS_DTYPES.items()}
  header, offset, arrays = {}, 0, []
  for name in sorted(tensors):
    array = np.ascontiguousarray(tensors[name])
    if array.dtype not in dtypes:
      raise ValueError("%s: dtype %s has no safetensors name" % (name, array.dtype))
    header[name] = {"dtype": dtypes[array.dtype], "shape": list(array.shape),
                    "data_offsets": [offset, offset + array.nbytes]}
    offset += array.nbytes
    arrays.append(array.astype(array.dtype.newbyteorder("<"), copy=False))
  text = json.dumps(header, separators=(",", ":")).encode("utf-8")
  text += b" " * (-len(text) % 8)
  with tf.io.gfile.GFile(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for array in arrays:
      f.write(array.tobytes())


# ----------------------------------------------------------------------------------------------
# pytorch_model.bin
# ----------------------------------------------------------------------------------------------

# pytorch_model.bin (torch.save's zip format) is a pickle whose tensors are rebuilt by a few
# torch functions from storages kept as raw files in the zip. The unpickler below resolves
# only those names, to NumPy stand-ins; any other global is refused, so no arbitrary code runs.
_TORCH_STORAGES = {"FloatStorage": np.float32, "DoubleStorage": np.float64,
                   "HalfStorage": np.float16, "BFloat16Storage": "bfloat16",
                   "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
                   "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}
_TORCH_DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
                 "bfloat16": "bfloat16", "int64": np.int64, "int32": np.int32,
                 "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


class _TensorSpec(collections.namedtuple("_TensorSpec", "storage offset size stride")):
  """What torch._utils._rebuild_tensor_v2 receives: made into an array only after unpickling,
  when its name is known and its extent has been checked against its storage."""


def _rebuild_tensor(storage, offset, size, stride, *unused):
  return _TensorSpec(storage, offset, size, stride)


def _rebuild_parameter(data, *unused):
  return data


def _spec_extent(path, name, spec):
  """The number of elements of its storage that the _TensorSpec `spec` reads (0 for an empty
  tensor); CheckpointError naming the tensor if its offset, sizes or strides are not
  integers of a view inside its storage's declared length (a crafted file could otherwise read
  process memory past the storage, or allocate without limit)."""
  def bad(what):
    return CheckpointError("%s: tensor %s: %s" % (path, name, what))
  storage, offset = spec.storage, spec.offset
  size, stride = tuple(spec.size or ()), tuple(spec.stride or ())
  if not isinstance(storage, _StorageRef):
    raise bad("its storage is not a storage of the archive")
  if not (_is_count(offset) and all(map(_is_count, size)) and all(map(_is_count, stride))):
    raise bad("offset %r, size %r, stride %r are not non-negative integers"
              % (spec.offset, spec.size, spec.stride))
  if len(size) != len(stride):
    raise bad("size %s and stride %s differ in rank" % (size, stride))
  count = math.prod(size)
  if count == 0:
    return 0
  last = offset + sum((n - 1) * step for n, step in zip(size, stride))
  if last >= storage.length or count > storage.length:
    raise bad("size %s with stride %s at offset %d needs elements past its storage of %d"
              % (size, stride, offset, storage.length))
  return last + 1


def _tensor_from_spec(spec):
  """The array of a _TensorSpec whose extent _spec_extent checked and whose storage is read."""
  size, stride = tuple(spec.size or ()), tuple(spec.stride or ())
  array = spec.storage.array
  if math.prod(size) == 0:
    return np.zeros(size, array.dtype)
  return np.lib.stride_tricks.as_strided(
      array[spec.offset:], shape=size,
      strides=tuple(n * array.itemsize for n in stride)).copy()


class _StorageRef(object):
  """A storage of the archive, not yet read: its member, element type and declared length."""

  def __init__(self, key, dtype, info):
    self.key, self.dtype, self.info = key, dtype, info
    self.itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype or np.uint8).itemsize
    self.length = info.file_size // self.itemsize
    self.array = None

  def read(self, archive, path, elements):
    """Reads (inflates) only the first `elements` elements of the member: the most the
    tensors over it use, so what is inflated is bounded by the declared tensors."""
    raw = read_archive_member(archive, self.info, elements * self.itemsize, path)
    if self.dtype == "bfloat16":
      self.array = _bf16_to_f32(raw)
    else:
      self.array = np.frombuffer(raw, self.dtype or np.uint8)


def read_archive_member(archive, info, limit, path):
  """At most `limit` bytes of zip member `info`, its declared size checked before anything is
  inflated (zipfile then inflates no more than it declares, and we read no more than `limit`);
  reading less than the whole member reads only its first `limit` bytes. CheckpointError when
  the member is shorter than `limit` bytes would need."""
  want = min(limit, info.file_size)
  with archive.open(info) as f:
    raw = f.read(want)
  if len(raw) != want:
    raise CheckpointError("%s: archive member %s holds %d bytes, it declares %d"
                          % (path, info.filename, len(raw), info.file_size))
  return raw


class _StorageType(object):
  def __init__(self, dtype):
    self.dtype = dtype


class _RestrictedUnpickler(pickle.Unpickler):
  """Unpickles a torch state dict into _TensorSpecs over NumPy storages, refusing every other
  global."""

  def __init__(self, file, archive, root, path):
    super().__init__(file)
    self._archive, self._root, self._path = archive, root, path
    self._storages = {}

  def _refuse(self, what):
    return UnsafeCheckpointError("%s: %s" % (self._path, what))

  def find_class(self, module, name):
    if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
      return _rebuild_tensor
    if module == "torch._utils" and name == "_rebuild_parameter":
      return _rebuild_parameter
    if module == "collections" and name == "OrderedDict":
      return collections.OrderedDict
    if module == "torch" and name in _TORCH_STORAGES:
      return _StorageType(_TORCH_STORAGES[name])
    if module == "torch" and name in _TORCH_DTYPES:
      return _TORCH_DTYPES[name]
    if module == "torch" and name == "UntypedStorage":
      return _StorageType(None)
    raise self._refuse("refusing to load %s.%s from a pytorch_model.bin (only tensors are "
                       "allowed)" % (module, name))

  def persistent_load(self, pid):
    # ("storage", storage type, key, location, numel)
    if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
      raise self._refuse("unexpected persistent id %r" % (pid,))
    storage_type, key = pid[1], pid[2]
    dtype = storage_type.dtype if isinstance(storage_type, _StorageType) else storage_type
    if dtype not in _TORCH_STORAGES.values() and dtype is not None:
      raise self._refuse("storage %r has an unknown type" % (key,))
    try:
      info = self._archive.getinfo("%s/data/%s" % (self._root, key))
    except (KeyError, TypeError):
      raise self._refuse("storage %r is not in the archive" % (key,)) from None
    if info.file_size > 64 * info.compress_size + (1 << 20):
      raise self._refuse("storage %r expands %d bytes to %d: refused"
                         % (key, info.compress_size, info.file_size))
    if key not in self._storages:
      storage = _StorageRef(key, dtype, info)
      if info.file_size % storage.itemsize:
        raise self._refuse("storage %r: %d bytes is not a whole number of %d-byte elements"
                           % (key, info.file_size, storage.itemsize))
      self._storages[key] = storage
    return self._storages[key]


def read_pytorch_bin(path, names=None):
  """{name: np.ndarray} from a torch.save zip file, without executing pickled code. Every
  archive member is read with a limit set before it is inflated: the pickle at most
  MAX_PICKLE_BYTES, a storage only the elements its tensors' declared shapes use. names:
  only these tensors (None: all; the others' storages are not read)."""
  return _read_pytorch_state(path, names=names)


def _read_pytorch_state(path, read_storages=True, names=None):
  """read_storages: {name: np.ndarray} of a torch.save zip file; without, {name: shape
  tuple} from its pickle alone (no storage is read)."""
  with file_io.open_read(path) as f:
    try:
      return _unpickle_state(path, f, read_storages, names)
    except zipfile.BadZipFile:
      raise CheckpointError("%s: legacy (non-zip) torch format is not supported; re-save it "
                            "with a recent torch or convert it to model.safetensors"
                            % path) from None


MAX_PICKLE_BYTES = 64 << 20  # a BERT state dict's pickle is a few hundred KB


def _unpickle_state(path, file, read_storages, names=None):
  try:
    is_zip = zipfile.is_zipfile(file)
  except Exception:  # a remote file shorter than the zip trailer it seeks to
    is_zip = False
  if not is_zip:
    raise zipfile.BadZipFile(path)
  try:
    with zipfile.ZipFile(file) as archive:
      pickles = [info for info in archive.infolist() if info.filename.endswith("/data.pkl")]
      if len(pickles) != 1:
        raise CheckpointError("%s: expected one data.pkl in the archive" % path)
      if pickles[0].file_size > MAX_PICKLE_BYTES:
        raise UnsafeCheckpointError(
            "%s: its pickle %s declares %d bytes (%d compressed), more than a state dict's "
            "limit of %d: refused" % (path, pickles[0].filename, pickles[0].file_size,
                                      pickles[0].compress_size, MAX_PICKLE_BYTES))
      root = pickles[0].filename[:-len("/data.pkl")]
      raw = read_archive_member(archive, pickles[0], MAX_PICKLE_BYTES, path)
      state = _RestrictedUnpickler(io.BytesIO(raw), archive, root, path).load()
      if not isinstance(state, dict):
        raise CheckpointError("%s: expected a state dict, got %s"
                              % (path, type(state).__name__))
      specs = {name: spec for name, spec in state.items() if isinstance(spec, _TensorSpec)}
      if not read_storages:
        return {name: tuple(spec.size or ()) for name, spec in specs.items()}
      if names is not None:
        specs = {name: spec for name, spec in specs.items() if name in names}
      need = {}
      for name, spec in specs.items():
        extent = _spec_extent(path, name, spec)
        need[id(spec.storage)] = max(need.get(id(spec.storage), 0), extent)
      for spec in specs.values():
        if spec.storage.array is None:
          spec.storage.read(archive, path, need[id(spec.storage)])
      return {name: _tensor_from_spec(spec) for name, spec in specs.items()}
  except CheckpointError:
    raise
  except Exception as e:  # a damaged archive or pickle
    raise CheckpointError("%s: unreadable torch archive: %s: %s"
                          % (path, type(e).__name__, str(e)[:300])) from None
