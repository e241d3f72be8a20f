"""utils/tensor_bundle.Reader (TensorFlow's checkpoint files read with NumPy alone, for Keras
on JAX and PyTorch) against TensorFlow's own reader, on TF1 and TF2 checkpoints of our models
and on every dtype a weight may have; damaged files as one-line errors naming them."""

import os

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import checkpoints, modeling
from bert_keras.utils import tensor_bundle


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  root = tmp_path_factory.mktemp("bundle")
  config = modeling.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=37)
  model = modeling.BertPretrainer(config)
  tf1 = str(root / "tf1" / "model.ckpt")
  checkpoints.save_tf1_checkpoint(model, tf1)
  extra = dict(step=tf.Variable(3, dtype=tf.int64), flags=tf.Variable([True, False]),
               half=tf.Variable(np.arange(6, dtype=np.float16).reshape(2, 3)),
               brain=tf.Variable(tf.constant([1.5, -2.25], tf.bfloat16)),
               scalar=tf.Variable(2.5))
  tf2 = tf.train.Checkpoint(model=model, **extra).save(str(root / "tf2" / "ckpt"))
  return tf1, tf2


@pytest.mark.parametrize("which", [0, 1])
def test_same_tensors_as_tensorflow(saved, which):
  prefix = saved[which]
  theirs, ours = tf.train.load_checkpoint(prefix), tensor_bundle.Reader(prefix)
  shapes = theirs.get_variable_to_shape_map()
  assert ours.get_variable_to_shape_map() == {k: list(v) for k, v in shapes.items()}
  assert {k: v.name for k, v in ours.get_variable_to_dtype_map().items()} == {
      k: v.name for k, v in theirs.get_variable_to_dtype_map().items()}
  compared = 0
  for name, dtype in theirs.get_variable_to_dtype_map().items():
    if dtype == tf.string:
      with pytest.raises(ValueError, match="string tensor"):
        ours.get_tensor(name)
      continue
    expected = theirs.get_tensor(name)
    if dtype == tf.bfloat16:
      expected = expected.astype(np.float32)
    got = ours.get_tensor(name)
    assert got.dtype == expected.dtype and got.shape == expected.shape, name
    np.testing.assert_array_equal(got, expected, err_msg=name)
    compared += 1
  assert compared >= 40


def test_damaged_files_are_named(saved, tmp_path):
  prefix = saved[0]
  copy = str(tmp_path / "model.ckpt")
  for suffix in (".index", ".data-00000-of-00001"):
    with open(prefix + suffix, "rb") as f, open(copy + suffix, "wb") as g:
      g.write(f.read())
  reader = tensor_bundle.Reader(copy)
  name = "bert/embeddings/word_embeddings"
  data = copy + ".data-00000-of-00001"
  os.truncate(data, os.path.getsize(data) // 2)
  with pytest.raises(ValueError, match="past the end of the file"):
    for key in reader.get_variable_to_shape_map():
      reader.get_tensor(key)
  with pytest.raises(KeyError):
    reader.get_tensor("no/such/tensor")
  assert reader.has_tensor(name)
  index = copy + ".index"
  raw = open(index, "rb").read()
  for damaged in (raw[:-3], raw[:40], b"\0" * 100):
    with open(index, "wb") as f:
      f.write(damaged)
    with pytest.raises(ValueError, match="damaged checkpoint index"):
      tensor_bundle.Reader(copy)


def test_random_damage_is_a_value_error(saved, tmp_path):
  """Bytes flipped anywhere in the index: a ValueError or a reader whose every tensor reads
  as one (or fails as one); never another exception, a hang or a huge allocation."""
  raw = bytearray(open(saved[0] + ".index", "rb").read())
  copy = str(tmp_path / "model.ckpt")
  os.symlink(saved[0] + ".data-00000-of-00001", copy + ".data-00000-of-00001")
  rng = np.random.RandomState(0)
  for _ in range(200):
    damaged = bytearray(raw)
    for position in rng.randint(0, len(raw), rng.randint(1, 4)):
      damaged[position] = rng.randint(0, 256)
    with open(copy + ".index", "wb") as f:
      f.write(damaged)
    try:
      reader = tensor_bundle.Reader(copy)
      for key in reader.get_variable_to_shape_map():
        try:
          reader.get_tensor(key)
        except ValueError:
          pass
    except ValueError:
      pass
