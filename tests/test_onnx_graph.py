"""utils/onnx_graph.py on small graphs written as tf2onnx writes them: the LayerNorm and GELU
rewrites and the shape simplification give the same outputs as the graph they replace."""

import numpy as np
import pytest

from bert_keras.utils import onnx_graph

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

H, U = 8, 12


def _constant(name, value):
  return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _tf2onnx_graph():
  """x [B, S, H] -> LayerNorm (tf2onnx's ten nodes) -> dense to U on the flat [B * S, H] and
  back (Shape, Slice, Concat, Reshape) -> exact GELU as serving writes it -> y [B, S, U]."""
  rng = np.random.RandomState(0)
  nodes = [
      helper.make_node("GlobalAveragePool", ["x"], ["mean"]),
      helper.make_node("Sub", ["x", "mean"], ["d"]),
      helper.make_node("Mul", ["d", "d"], ["sq"]),
      helper.make_node("GlobalAveragePool", ["sq"], ["var"]),
      helper.make_node("Add", ["var", "eps"], ["ve"]),
      helper.make_node("Sqrt", ["ve"], ["sd"]),
      helper.make_node("Reciprocal", ["sd"], ["r"]),
      helper.make_node("Mul", ["r", "gamma"], ["g"]),
      helper.make_node("Mul", ["d", "g"], ["n"]),
      helper.make_node("Add", ["n", "beta"], ["ln"]),
      helper.make_node("Reshape", ["ln", "flat_shape"], ["flat"]),
      helper.make_node("MatMul", ["flat", "w"], ["mm"]),
      helper.make_node("Add", ["mm", "b"], ["dense_flat"]),
      helper.make_node("Shape", ["ln"], ["shape"]),
      helper.make_node("Slice", ["shape", "zero", "minus_one", "zero"], ["lead"]),
      helper.make_node("Concat", ["lead", "units"], ["back_shape"], axis=0),
      helper.make_node("Reshape", ["dense_flat", "back_shape"], ["dense"]),
      helper.make_node("Mul", ["half", "dense"], ["h"]),
      helper.make_node("Neg", ["dense"], ["neg"]),
      helper.make_node("Mul", ["neg", "inv_sqrt2"], ["s"]),
      helper.make_node("Erf", ["s"], ["e"]),
      helper.make_node("Sub", ["one", "e"], ["erfc"]),
      helper.make_node("Mul", ["h", "erfc"], ["y"]),
  ]
  initializers = [
      _constant("eps", 1e-12), _constant("gamma", rng.rand(H) + 0.5),
      _constant("beta", rng.randn(H)), _constant("w", rng.randn(H, U) / 3),
      _constant("b", rng.randn(U)), _constant("half", 0.5), _constant("one", 1.0),
      _constant("inv_sqrt2", 1 / np.sqrt(2)),
      numpy_helper.from_array(np.array([-1, H], np.int64), "flat_shape"),
      numpy_helper.from_array(np.array([0], np.int64), "zero"),
      numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
      numpy_helper.from_array(np.array([U], np.int64), "units")]
  graph = helper.make_graph(
      nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", H])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model, x):
  session = onnxruntime.InferenceSession(model.SerializeToString(),
                                         providers=["CPUExecutionProvider"])
  return session.run(None, {"x": x})[0]


def test_fuse_and_simplify_keep_the_outputs():
  x = np.random.RandomState(1).randn(3, 5, H).astype(np.float32)
  model = _tf2onnx_graph()
  want = _run(model, x)
  assert onnx_graph.fuse(model) == {"LayerNormalization": 1, "Gelu": 1}
  assert onnx_graph.simplify_shapes(model) == {"dense": 1, "reshape": 0}
  ops = [node.op_type for node in model.graph.node]
  assert sorted(ops) == ["Add", "Gelu", "LayerNormalization", "MatMul"], ops
  for shape in ((3, 5, H), (1, 2, H)):  # one model, any batch and length
    x = np.random.RandomState(2).randn(*shape).astype(np.float32)
    np.testing.assert_allclose(_run(model, x), _run(_tf2onnx_graph(), x), atol=1e-5)
  np.testing.assert_allclose(_run(model, np.random.RandomState(1).randn(3, 5, H).astype(
      np.float32)), want, atol=1e-5)


def test_a_near_miss_is_left_alone():
  """A GELU whose constant is not 1 / sqrt 2 is not a GELU: nothing is rewritten."""
  model = _tf2onnx_graph()
  for value in model.graph.initializer:
    if value.name == "inv_sqrt2":
      value.CopyFrom(_constant("inv_sqrt2", 0.5))
  assert onnx_graph.fuse(model) == {"LayerNormalization": 1, "Gelu": 0}
  assert "Erf" in [node.op_type for node in model.graph.node]


def test_constant_shape_copies_known_axes_and_infers_one():
  assert onnx_graph._constant_shape(["b", "s", 64], ["b", "s", 4, 16]) == [0, 0, 4, 16]
  assert onnx_graph._constant_shape(["b", "s", 4, 16], ["b", "s", 64]) == [0, 0, 64]
  assert onnx_graph._constant_shape(["b", "s", 64], ["b*s", 64]) == [-1, 64]
  assert onnx_graph._constant_shape(["b*s", 64], ["b", "s", 64]) is None  # two unknowns
  assert onnx_graph._constant_shape(["b", "s"], ["b", ""]) is None  # an axis not inferred
