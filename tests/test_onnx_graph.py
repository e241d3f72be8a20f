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


def _attention_graph(fill=-10000.0, one=1.0, mask_end=10 ** 9):
  """x [B, S, H] and mask [B, S] (int32) -> BERT's self-attention as tf2onnx writes it after
  simplify_shapes (constant head shapes): Q, K, V dense layers, heads split by Reshape and
  Transpose, scaled scores plus (one - mask) * fill, Softmax, merge -> y [B, S, H]."""
  rng = np.random.RandomState(0)
  heads, size = 2, H // 2
  nodes = [helper.make_node("Cast", ["mask"], ["mask_f"], to=TensorProto.FLOAT),
           helper.make_node("Unsqueeze", ["mask_f", "axes12"], ["mask_4d"]),
           helper.make_node("Slice", ["mask_4d", "starts", "ends", "axes", "steps"],
                            ["mask_all"]),  # (tf2onnx's strided_slice of everything)
           helper.make_node("Sub", ["one", "mask_all"], ["inverted"]),
           helper.make_node("Mul", ["inverted", "fill"], ["bias"])]
  for part, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
    nodes += [helper.make_node("MatMul", ["x", f"w_{part}"], [f"{part}_mm"]),
              helper.make_node("Add", [f"{part}_mm", f"b_{part}"], [part]),
              helper.make_node("Reshape", [part, "split"], [f"{part}_split"]),
              helper.make_node("Transpose", [f"{part}_split"], [f"{part}_t"], perm=perm)]
  nodes += [helper.make_node("MatMul", ["q_t", "k_t"], ["scores"]),
            helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
            helper.make_node("Add", ["scaled", "bias"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
            helper.make_node("MatMul", ["probs", "v_t"], ["context"]),
            helper.make_node("Transpose", ["context"], ["context_t"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", ["context_t", "merge"], ["y"])]
  initializers = [_constant("one", one), _constant("fill", fill),
                  _constant("scale", 1 / np.sqrt(size)),
                  numpy_helper.from_array(np.array([1, 2], np.int64), "axes12"),
                  numpy_helper.from_array(np.zeros(4, np.int64), "starts"),
                  numpy_helper.from_array(np.array([10 ** 9] * 3 + [mask_end], np.int64), "ends"),
                  numpy_helper.from_array(np.arange(4, dtype=np.int64), "axes"),
                  numpy_helper.from_array(np.ones(4, np.int64), "steps"),
                  numpy_helper.from_array(np.array([0, 0, heads, size], np.int64), "split"),
                  numpy_helper.from_array(np.array([0, 0, H], np.int64), "merge")]
  for part in "qkv":
    initializers += [_constant(f"w_{part}", rng.randn(H, H) / 2),
                     _constant(f"b_{part}", rng.randn(H) / 2)]
  graph = helper.make_graph(
      nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", H]),
                   helper.make_tensor_value_info("mask", TensorProto.INT32, ["b", "s"])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run_attention(model, x, mask):
  session = onnxruntime.InferenceSession(model.SerializeToString(),
                                         providers=["CPUExecutionProvider"])
  return session.run(None, {"x": x, "mask": mask})[0]


def test_fuse_attention_keeps_the_outputs_with_padding():
  """One com.microsoft Attention node in place of the 24 (the mask's five included), the same
  outputs within 1e-5 on rows with padding (mask 0), and on the real positions whatever the
  padding holds."""
  model = _attention_graph()
  assert onnx_graph.fuse_attention(model) == 1
  assert [node.op_type for node in model.graph.node] == ["Attention"]
  rng = np.random.RandomState(1)
  x = rng.randn(3, 6, H).astype(np.float32)
  mask = np.ones((3, 6), np.int32)
  mask[1, 4:], mask[2, 1:] = 0, 0
  want = _run_attention(_attention_graph(), x, mask)
  np.testing.assert_allclose(_run_attention(model, x, mask), want, atol=1e-5)
  x[1, 4:] = 100.0  # padding attention never reads
  np.testing.assert_allclose(_run_attention(model, x, mask)[1, :4], want[1, :4], atol=1e-5)


@pytest.mark.parametrize("change", [dict(fill=-1e9), dict(one=2.0), dict(mask_end=3)])
def test_fuse_attention_follows_the_mask_or_leaves_it(change):
  """Another fill value is carried over (mask_filter_value); a mask that is not 1 - mask, or
  a slice of it, is not BERT's, and nothing is rewritten."""
  model = _attention_graph(**change)
  fused = onnx_graph.fuse_attention(model)
  assert fused == (1 if "fill" in change else 0)
  if "mask_end" in change:
    return  # (a cut mask does not fit the scores: that graph does not run at all)
  rng = np.random.RandomState(2)
  x, mask = rng.randn(2, 5, H).astype(np.float32), np.array([[1] * 5, [1, 1, 0, 0, 0]], np.int32)
  np.testing.assert_allclose(_run_attention(model, x, mask),
                             _run_attention(_attention_graph(**change), x, mask), atol=1e-5)
