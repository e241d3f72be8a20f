"""Weight files of any model, read without running their code: safetensors (read and written)
and torch.save's pytorch_model.bin (a zip of a pickle and raw storages).

  open_weight_file(path)           a WeightFile: its `entries` {name: (shape, dtype)} from the
                                   header or the pickle alone, and read(name), one tensor at a time
  read_safetensors(path, names)    {name: np.ndarray}, through the safetensors library
  write_safetensors(path, tensors) {name: np.ndarray} -> a .safetensors file
  read_pytorch_bin(path, names)    {name: np.ndarray}; a restricted unpickler (only tensors),
                                   each archive member read with a limit set before inflating
  weight_file_shapes(path)         {name: shape} from the header or the pickle alone
  read_weight_file(path, names)    either format, by the file's extension

A .safetensors file is read by the safetensors library (`safe_open`): it checks the whole header
when the file is opened (every tensor's dtype, shape and byte range, the ranges adjacent and
covering the file exactly) and maps the file, so a tensor costs memory only when it is read, and
only its own bytes. bfloat16 tensors (which NumPy lacks) are read here, from the byte range the
library checked, as float32. Local files only (no gs://). No TensorFlow on this path: numpy and
safetensors alone.

Dtypes are named as safetensors names them ("F32", "BF16", "I64", ...) for both formats;
FLOAT_DTYPES are the floating-point ones. A file that is not what it claims is a CheckpointError
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
import safetensors

from bert_keras.utils import file_io


class CheckpointError(ValueError):
  """A checkpoint does not fit the model, or a weight file cannot be read (names the file or
  variable, the shapes and the likely cause)."""


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
  """A pytorch_model.bin that asks for something other than tensors, or whose storages are
  not what they claim."""


# The floating-point dtypes, by their safetensors names: what a weight may be stored as.
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")


def open_weight_file(path):
  """A WeightFile over a .safetensors or (any other name) torch.save file; use it in a `with`.
  CheckpointError when the file is not one."""
  if path.endswith(".safetensors"):
    return _SafetensorsFile(path)
  return _PytorchFile(path)


class WeightFile(object):
  """An open weight file. `entries`: {name: (shape tuple, dtype name)}, known before any tensor
  is read; read(name): that tensor's np.ndarray (bfloat16 as float32), its bytes alone read."""

  def __init__(self, path):
    self.path, self.entries = path, {}

  def read(self, name):
    raise NotImplementedError

  def close(self):
    pass

  def __enter__(self):
    return self

  def __exit__(self, *unused):
    self.close()


def read_weight_file(path, names=None):
  """{name: np.ndarray} of a .safetensors or torch.save file; names: only these tensors (None:
  all)."""
  with open_weight_file(path) as f:
    return {name: f.read(name) for name in f.entries if names is None or name in names}


def weight_file_shapes(path):
  """{name: shape tuple} of a .safetensors or torch.save file, from its header or pickle alone:
  no tensor is read."""
  with open_weight_file(path) as f:
    return {name: shape for name, (shape, _) in f.entries.items()}


# ----------------------------------------------------------------------------------------------
# safetensors
# ----------------------------------------------------------------------------------------------

_NUMPY_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
                 "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
                 "BOOL": np.bool_}


def _bf16_to_f32(raw):
  return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)


def read_safetensors(path, names=None):
  """{name: np.ndarray} from a .safetensors file, its header checked by the safetensors library
  before any tensor is read (CheckpointError otherwise); only the bytes of the tensors asked
  for are read. names: only these tensors (None: all)."""
  with _SafetensorsFile(path) as f:
    return {name: f.read(name) for name in f.entries if names is None or name in names}


class _SafetensorsFile(WeightFile):
  """A .safetensors file opened with safetensors.safe_open (the header checked, the file
  mapped, not read)."""

  def __init__(self, path):
    super().__init__(path)
    if file_io.is_remote(path):
      raise CheckpointError("%s: a safetensors file is read from local disk; copy it there"
                            % path)
    self._error = safetensors.SafetensorError
    try:
      self._file = safetensors.safe_open(path, framework="numpy")
    except FileNotFoundError:
      raise CheckpointError("%s: no such file" % path) from None
    except (self._error, OSError) as e:
      raise CheckpointError("%s: not a valid safetensors file: %s"
                            % (path, " ".join(str(e).split())[:300])) from None
    for name in self._file.keys():
      view = self._file.get_slice(name)
      self.entries[name] = (tuple(int(d) for d in view.get_shape()), view.get_dtype())
    self._offsets = None

  def read(self, name):
    dtype = self.entries[name][1]
    try:
      if dtype == "BF16":
        return self._read_bf16(name)
      if dtype not in _NUMPY_DTYPES:
        raise CheckpointError("%s: tensor %s: dtype %s cannot be read" % (self.path, name, dtype))
      return self._file.get_tensor(name)
    except self._error as e:
      raise CheckpointError("%s: tensor %s cannot be read: %s" % (self.path, name, e)) from None

  def _read_bf16(self, name):
    """NumPy has no bfloat16: the tensor's bytes, at the range safe_open checked, as float32."""
    if self._offsets is None:
      with open(self.path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
      self._offsets = {key: (8 + length + info["data_offsets"][0],
                             8 + length + info["data_offsets"][1])
                       for key, info in header.items() if key != "__metadata__"}
    start, stop = self._offsets[name]
    with open(self.path, "rb") as f:
      f.seek(start)
      raw = f.read(stop - start)
    if len(raw) != stop - start:
      raise CheckpointError("%s: tensor %s: the file ends inside its data" % (self.path, name))
    return _bf16_to_f32(raw).reshape(self.entries[name][0])

  def close(self):
    self._file.__exit__(None, None, None)


def _is_count(value):
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def write_safetensors(path, tensors):
  """Writes {name: array} (float32, int32, ...) as a .safetensors file: the little-endian
  header length, the JSON header (dtype, shape, data_offsets; padded with spaces to a multiple
  of 8 bytes), then the tensors' bytes in name order."""
  dtypes = {np.dtype(v): k for k, v in _NUMPY_DTYPES.items()}
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
  with file_io.open_write(path) as f:
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
  with _PytorchFile(path) as f:
    return {name: f.read(name) for name in f.entries if names is None or name in names}


MAX_PICKLE_BYTES = 64 << 20  # a BERT state dict's pickle is a few hundred KB

_DTYPE_NAMES = {np.dtype(v): k for k, v in _NUMPY_DTYPES.items()}


class _PytorchFile(WeightFile):
  """A torch.save zip file: its pickle unpickled (tensors as _TensorSpecs, nothing else
  allowed), no storage read until read(name) reads the one that tensor lies in, as far as the
  tensor reaches."""

  def __init__(self, path):
    super().__init__(path)
    self._file = file_io.open_read(path)
    try:
      self._archive, self._specs = _open_archive(path, self._file)
    except BaseException:
      self._file.close()
      raise
    for name, spec in self._specs.items():
      dtype = spec.storage.dtype if isinstance(spec.storage, _StorageRef) else None
      self.entries[name] = (tuple(spec.size or ()), "BF16" if dtype == "bfloat16"
                            else _DTYPE_NAMES.get(np.dtype(dtype or np.uint8), "U8"))

  def read(self, name):
    spec = self._specs[name]
    extent = _spec_extent(self.path, name, spec)
    try:
      spec.storage.read(self._archive, self.path, extent)
      return _tensor_from_spec(spec)
    except CheckpointError:
      raise
    except Exception as e:  # a damaged member (zlib, CRC)
      raise CheckpointError("%s: tensor %s cannot be read: %s: %s"
                            % (self.path, name, type(e).__name__, str(e)[:300])) from None
    finally:
      if isinstance(spec.storage, _StorageRef):
        spec.storage.array = None  # (one tensor's storage in memory at a time)

  def close(self):
    self._archive.close()
    self._file.close()


def _open_archive(path, file):
  """(the open zipfile, {name: _TensorSpec}) of a torch.save file; no storage is read."""
  try:
    is_zip = zipfile.is_zipfile(file)
  except Exception:  # a remote file shorter than the zip trailer it seeks to
    is_zip = False
  if not is_zip:
    raise CheckpointError("%s: legacy (non-zip) torch format is not supported; re-save it "
                          "with a recent torch or convert it to model.safetensors" % path)
  archive = None
  try:
    archive = zipfile.ZipFile(file)
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
      raise CheckpointError("%s: expected a state dict, got %s" % (path, type(state).__name__))
    return archive, {name: spec for name, spec in state.items()
                     if isinstance(spec, _TensorSpec)}
  except Exception as e:
    if archive is not None:
      archive.close()
    if isinstance(e, CheckpointError):
      raise
    raise CheckpointError("%s: unreadable torch archive: %s: %s"
                          % (path, type(e).__name__, str(e)[:300])) from None
