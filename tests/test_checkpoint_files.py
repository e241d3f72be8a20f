"""Untrusted weight files: crafted pytorch_model.bin and model.safetensors files are refused
with a CheckpointError naming the file and the tensor, before any read past a buffer or any
allocation on the file's word; well-formed ones (views, scalars, bf16) read exactly.

The pytorch_model.bin files are written without torch: stand-in `torch` / `torch._utils`
modules give the pickle the same global names torch.save writes."""

import collections
import json
import pickle
import struct
import sys
import types
import zipfile

import numpy as np
import pytest

from bert_keras import checkpoints


class _Storage:
  def __init__(self, key, array):
    self.key, self.array = key, array


class _Tensor:
  def __init__(self, storage, offset, size, stride):
    self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())


@pytest.fixture
def write_bin(monkeypatch, tmp_path):
  """write_bin({name: _Tensor}) -> path of a torch.save-style zip (archive/data.pkl + storages)."""
  torch = types.ModuleType("torch")
  utils = types.ModuleType("torch._utils")

  def _rebuild_tensor_v2(*args):
    raise AssertionError("never called here")
  _rebuild_tensor_v2.__module__ = "torch._utils"
  _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
  utils._rebuild_tensor_v2 = _rebuild_tensor_v2
  storage_types = {}
  for name in ("FloatStorage", "LongStorage", "BFloat16Storage"):
    storage_types[name] = type(name, (), {"__module__": "torch"})
    setattr(torch, name, storage_types[name])
  monkeypatch.setitem(sys.modules, "torch", torch)
  monkeypatch.setitem(sys.modules, "torch._utils", utils)
  _Tensor.__reduce__ = lambda self: (_rebuild_tensor_v2, self.args)

  def write(state, storage_type="FloatStorage", raw=None):
    storages = {}

    class Pickler(pickle.Pickler):
      def persistent_id(self, obj):
        if isinstance(obj, _Storage):
          storages[obj.key] = obj.array
          return ("storage", storage_types[storage_type], obj.key, "cpu", obj.array.size)
        return None
    path = tmp_path / "pytorch_model.bin"
    import io
    buffer = io.BytesIO()
    Pickler(buffer, protocol=2).dump(collections.OrderedDict(state))
    with zipfile.ZipFile(path, "w") as archive:
      archive.writestr("archive/data.pkl", buffer.getvalue())
      for key, array in storages.items():
        archive.writestr("archive/data/%s" % key, raw if raw is not None else array.tobytes())
    return str(path)
  return write


def test_well_formed_bin_reads_views_and_scalars(write_bin):
  storage = _Storage("0", np.arange(6, dtype=np.float32))
  path = write_bin({"matrix": _Tensor(storage, 0, [2, 3], [3, 1]),
                    "transposed": _Tensor(storage, 0, [3, 2], [1, 3]),
                    "row": _Tensor(storage, 3, [3], [1]),
                    "scalar": _Tensor(storage, 5, [], []),
                    "empty": _Tensor(storage, 0, [0, 4], [4, 1])})
  read = checkpoints.read_pytorch_bin(path)
  np.testing.assert_array_equal(read["matrix"], [[0, 1, 2], [3, 4, 5]])
  np.testing.assert_array_equal(read["transposed"], [[0, 3], [1, 4], [2, 5]])
  np.testing.assert_array_equal(read["row"], [3, 4, 5])
  assert read["scalar"].shape == () and read["scalar"] == 5
  assert read["empty"].shape == (0, 4)


@pytest.mark.parametrize("offset, size, stride, what", [
    (0, [1000], [1], "past its storage"),           # 1,000 floats claimed over 4
    (0, [100000000], [1], "past its storage"),      # 1e8: would segfault as_strided
    (3, [2], [1], "past its storage"),              # offset + extent one past the end
    (0, [2, 2], [2, 1], None),                      # exactly the storage: fine
    (0, [10**6, 10**6], [0, 0], "past its storage"),  # broadcast to 1e12 elements
    (0, [2], [-1], "non-negative integers"),        # a negative stride reads before it
    (-1, [2], [1], "non-negative integers"),
    (0, [2.5], [1], "non-negative integers"),
    (0, [2, 2], [1], "differ in rank"),
    (2**70, [1], [1], "past its storage"),          # overflowing values
])
def test_crafted_extents_are_refused(write_bin, offset, size, stride, what):
  storage = _Storage("0", np.arange(4, dtype=np.float32))
  path = write_bin({"bert.embeddings.word_embeddings.weight":
                    _Tensor(storage, offset, size, stride)})
  if what is None:
    assert checkpoints.read_pytorch_bin(path)[
        "bert.embeddings.word_embeddings.weight"].shape == (2, 2)
    return
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"pytorch_model.bin: tensor bert.embeddings.word_embeddings.weight: .*"
                           + what):
    checkpoints.read_pytorch_bin(path)


def test_crafted_storages_are_refused(write_bin):
  storage = _Storage("0", np.arange(4, dtype=np.float32))
  # 7 bytes are not a whole number of floats.
  path = write_bin({"w": _Tensor(storage, 0, [1], [1])}, raw=b"\0" * 7)
  with pytest.raises(checkpoints.CheckpointError, match="not a whole number of 4-byte"):
    checkpoints.read_pytorch_bin(path)


def test_refused_globals_are_checkpoint_errors(tmp_path):
  class Evil:
    def __reduce__(self):
      import os
      return (os.system, ("echo pwned > /dev/null",))
  path = tmp_path / "pytorch_model.bin"
  with zipfile.ZipFile(path, "w") as archive:
    archive.writestr("archive/data.pkl", pickle.dumps({"x": Evil()}, protocol=2))
  with pytest.raises(checkpoints.CheckpointError, match="refusing to load posix.system"):
    checkpoints.read_pytorch_bin(str(path))
  with zipfile.ZipFile(path, "w") as archive:
    archive.writestr("archive/data.pkl", b"\x80\x02}q\x00(X\x01")  # cut short
  with pytest.raises(checkpoints.CheckpointError, match="unreadable torch archive"):
    checkpoints.read_pytorch_bin(str(path))


def _safetensors(path, header, body):
  raw = json.dumps(header).encode()
  path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)
  return str(path)


@pytest.mark.parametrize("entry, what", [
    ({"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}, "not fully covered"),
    ({"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 8]}, "invalid shape"),
    ({"dtype": "F32", "shape": [4], "data_offsets": [8, 4]}, "invalid offset"),
    ({"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}, "integer `-4`"),
    ({"dtype": "F32", "shape": [10**9, 10**9], "data_offsets": [0, 16]}, "overflow"),
    ({"dtype": "X99", "shape": [4], "data_offsets": [0, 16]}, "unknown variant `X99`"),
    ({"dtype": "F32", "shape": [4]}, "missing field `data_offsets`"),
])
def test_crafted_safetensors_headers_are_refused(tmp_path, entry, what):
  """The safetensors library checks the whole header when the file is opened."""
  path = _safetensors(tmp_path / "model.safetensors", {"w": entry}, b"\0" * 16)
  for read in (checkpoints.read_safetensors, checkpoints.checkpoint_shapes):
    with pytest.raises(checkpoints.CheckpointError,
                       match="model.safetensors: not a valid safetensors file: .*" + what):
      read(path)


def test_crafted_safetensors_header_lengths(tmp_path):
  path = tmp_path / "model.safetensors"
  path.write_bytes(struct.pack("<Q", 10**12) + b"{}")
  with pytest.raises(checkpoints.CheckpointError, match="header too large"):
    checkpoints.read_safetensors(str(path))
  path.write_bytes(b"\x01\x02")
  with pytest.raises(checkpoints.CheckpointError, match="header too small"):
    checkpoints.read_safetensors(str(path))
  ok = _safetensors(tmp_path / "ok.safetensors",
                    {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}},
                    np.arange(4, dtype=np.float32).tobytes())
  np.testing.assert_array_equal(checkpoints.read_safetensors(ok)["w"], [[0, 1], [2, 3]])


def test_safetensors_bfloat16_reads_as_float32(tmp_path):
  """NumPy has no bfloat16: its bytes are read at the range the library checked."""
  values = np.array([1.5, -2.0, 3.0e20], np.float32)
  raw = (values.view(np.uint32) >> 16).astype("<u2").tobytes()
  path = _safetensors(tmp_path / "b.safetensors",
                      {"__metadata__": {"format": "pt"},
                       "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                       "b": {"dtype": "BF16", "shape": [3], "data_offsets": [4, 10]}},
                      np.float32([7]).tobytes() + raw)
  read = checkpoints.read_safetensors(path)
  np.testing.assert_array_equal(read["b"], (values.view(np.uint32) >> 16 << 16).view(np.float32))
  assert read["b"].dtype == np.float32 and read["a"] == 7


def _peak_bytes(function):
  """Python's peak allocation while function() runs (raises what it raises)."""
  import tracemalloc
  tracemalloc.start()
  try:
    function()
  finally:
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
  return peak


def test_pickle_bomb_is_refused_before_it_inflates(tmp_path):
  import zipfile
  path = tmp_path / "pytorch_model.bin"
  with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
    with archive.open("archive/data.pkl", "w", force_zip64=True) as member:
      chunk = b"\0" * (1 << 20)
      for _ in range(checkpoints.MAX_PICKLE_BYTES // len(chunk) + 8):
        member.write(chunk)
  assert path.stat().st_size < 1 << 20                     # 72 MiB of pickle in under 1 MB
  for read in (checkpoints.read_pytorch_bin, checkpoints.checkpoint_shapes):
    def call():
      with pytest.raises(checkpoints.CheckpointError,
                         match=r"its pickle archive/data.pkl declares \d+ bytes .*limit"):
        read(str(path))
    assert _peak_bytes(call) < 8 << 20


def test_storage_read_only_as_far_as_its_tensors(write_bin):  # noqa: F811
  big = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)  # 4 MiB
  path = write_bin({"w": _Tensor(_Storage("0", big), 2, [2, 2], [2, 1])})
  del big
  peak = _peak_bytes(lambda: np.testing.assert_array_equal(
      checkpoints.read_pytorch_bin(path)["w"],
      np.random.default_rng(0).standard_normal(6).astype(np.float32)[2:].reshape(2, 2)))
  assert peak < 1 << 20


def test_only_the_tensors_asked_for_are_read(write_bin, tmp_path):  # noqa: F811
  """load_checkpoint reads a HF file's shapes first, then only the tensors the model takes
  (read_pytorch_bin / read_safetensors with names): an unused tensor is never inflated."""
  big = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)   # 4 MiB
  path = write_bin({"small": _Tensor(_Storage("0", np.arange(4, dtype=np.float32)), 0, [4],
                                     [1]),
                    "unused": _Tensor(_Storage("1", big), 0, [1 << 20], [1])})
  del big
  read = {}
  assert _peak_bytes(lambda: read.update(checkpoints.read_pytorch_bin(path, {"small"}))) < (
      1 << 20)
  assert list(read) == ["small"]
  header = json.dumps({"small": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                       "unused": {"dtype": "F32", "shape": [1 << 20],
                                  "data_offsets": [4, 4 + (4 << 20)]}}).encode()
  st = tmp_path / "model.safetensors"
  st.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * (4 + (4 << 20)))
  assert _peak_bytes(lambda: read.update(checkpoints.read_safetensors(str(st), {"small"}))) < (
      1 << 20)


def test_safetensors_with_bytes_past_its_tensors_is_refused(tmp_path):
  header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
  path = tmp_path / "model.safetensors"
  path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8 + b"\1" * (4 << 20))
  with pytest.raises(checkpoints.CheckpointError, match="not fully covered"):
    checkpoints.read_safetensors(str(path))
