"""Rewrites of the ONNX graph that tf2onnx writes of a transformer encoder, so that ONNX Runtime
runs it as fast as an ONNX export of the same model from PyTorch (onnx is imported on use).

tf2onnx spells two of the encoder's blocks in many small nodes that ONNX Runtime's own
fusions do not recognise:
  * each LayerNorm: GlobalAveragePool (the mean over H of a [B, S, H] tensor), Sub, Mul,
    GlobalAveragePool, Add epsilon, Sqrt, Reciprocal, Mul gamma, Mul, Add beta: ten nodes,
    rewritten as one LayerNormalization (opset 17);
  * each exact GELU (TensorFlow's 0.5 x erfc(-x / sqrt 2), whose Erfc serving already wrote
    as 1 - Erf): Mul 0.5, Neg, Mul, Erf, Sub, Mul: six nodes, rewritten as ONNX Runtime's
    com.microsoft Gelu (the same erf GELU), which it fuses with the dense layer's bias add.
With them in place ONNX Runtime's graph optimizer fuses bias + Gelu into BiasGelu at session
start. simplify_shapes then makes tf2onnx's shape arithmetic constant, and fuse_attention
writes each self-attention block (Q, K, V, heads, softmax, merge: 19 nodes) as ONNX Runtime's
com.microsoft Attention. Nothing else changes: the outputs are the same within float32
round-off.

fuse(model) rewrites a ModelProto in place and returns {"LayerNormalization": n, "Gelu": n}.
"""

import math

import numpy as np

MICROSOFT = "com.microsoft"
# one-input elementwise ops a dense layer may end with (its activation)
_ACTIVATIONS = ("Gelu", "Relu", "Tanh", "Sigmoid")
_INT32 = 6  # onnx.TensorProto.INT32


class _Graph(object):
  """An ONNX graph's nodes by output and by consumer, and its constant initializers."""

  def __init__(self, graph):
    self.graph = graph
    self.producer = {o: n for n in graph.node for o in n.output}
    self.consumers = {}
    for node in graph.node:
      for name in node.input:
        self.consumers.setdefault(name, []).append(node)
    self.constants = {i.name: i for i in graph.initializer}

  def node(self, name, op_type):
    """The node of this type that writes `name`, else None."""
    node = self.producer.get(name)
    return node if node is not None and node.op_type == op_type else None

  def scalar(self, name):
    """The value of a one-element constant initializer, else None."""
    from onnx import numpy_helper
    if name not in self.constants:
      return None
    value = numpy_helper.to_array(self.constants[name])
    return float(value.reshape(-1)[0]) if value.size == 1 else None

  def only_used_by(self, name, nodes):
    return all(any(c is n for n in nodes) for c in self.consumers.get(name, []))

  def other(self, node, name):
    """The input of a two-input node other than `name`."""
    return node.input[1] if node.input[0] == name else node.input[0]


def _layer_norm(g, add_beta):
  """(nodes to drop, LayerNormalization node) when add_beta ends tf2onnx's LayerNorm, else None.
  y = (x - mean(x)) * (gamma / sqrt(mean((x - mean(x))^2) + eps)) + beta."""
  from onnx import helper
  for mul_index in (0, 1):
    scaled = g.node(add_beta.input[mul_index], "Mul")
    beta = add_beta.input[1 - mul_index]
    if scaled is None or beta not in g.constants:
      continue
    for d_index in (0, 1):
      sub = g.node(scaled.input[d_index], "Sub")
      scale = g.node(scaled.input[1 - d_index], "Mul")
      if sub is None or scale is None:
        continue
      mean = g.node(sub.input[1], "GlobalAveragePool")
      if mean is None or mean.input[0] != sub.input[0]:
        continue
      x = sub.input[0]
      reciprocal = next((g.node(i, "Reciprocal") for i in scale.input
                         if g.node(i, "Reciprocal")), None)
      if reciprocal is None:
        continue
      gamma = g.other(scale, reciprocal.output[0])
      sqrt = g.node(reciprocal.input[0], "Sqrt")
      add_eps = sqrt and g.node(sqrt.input[0], "Add")
      if not add_eps or gamma not in g.constants:
        continue
      variance = next((g.node(i, "GlobalAveragePool") for i in add_eps.input
                       if g.node(i, "GlobalAveragePool")), None)
      epsilon = variance and g.scalar(g.other(add_eps, variance.output[0]))
      square = variance and g.node(variance.input[0], "Mul")
      if epsilon is None or square is None or list(square.input) != [sub.output[0]] * 2:
        continue
      chain = [mean, sub, square, variance, add_eps, sqrt, reciprocal, scale, scaled, add_beta]
      if not all(g.only_used_by(n.output[0], chain) for n in chain[:-1]):
        continue
      fused = helper.make_node("LayerNormalization", [x, gamma, beta], [add_beta.output[0]],
                               name=add_beta.name + "_layer_norm", axis=-1, epsilon=epsilon)
      return chain, fused
  return None


def _gelu(g, product):
  """(nodes to drop, Gelu node) when `product` ends serving's erf GELU:
  (0.5 x) * (1 - erf(-x * (1 / sqrt 2))), else None."""
  from onnx import helper
  for half_index in (0, 1):
    half = g.node(product.input[half_index], "Mul")
    one_minus = g.node(product.input[1 - half_index], "Sub")
    if half is None or one_minus is None or g.scalar(one_minus.input[0]) != 1.0:
      continue
    erf = g.node(one_minus.input[1], "Erf")
    scaled = erf and g.node(erf.input[0], "Mul")
    if not scaled:
      continue
    neg = next((g.node(i, "Neg") for i in scaled.input if g.node(i, "Neg")), None)
    if neg is None:
      continue
    x = neg.input[0]
    k = g.scalar(g.other(scaled, neg.output[0]))
    c = g.scalar(g.other(half, x)) if x in half.input else None
    if k is None or c is None or not (np.isclose(k, 1 / math.sqrt(2), rtol=1e-6)
                                      and np.isclose(c, 0.5)):
      continue
    chain = [half, neg, scaled, erf, one_minus, product]
    if not all(g.only_used_by(n.output[0], chain) for n in chain[:-1]):
      continue
    return chain, helper.make_node("Gelu", [x], [product.output[0]], name=product.name + "_gelu",
                                   domain=MICROSOFT)
  return None


def fuse(model):
  """LayerNorm and GELU of tf2onnx's graph in `model` (a ModelProto, rewritten in place) as one
  node each: {"LayerNormalization": count, "Gelu": count}."""
  from onnx import helper
  g = _Graph(model.graph)
  dropped, placed, counts = set(), {}, {"LayerNormalization": 0, "Gelu": 0}
  for node in list(model.graph.node):
    if id(node) in dropped:
      continue
    found = (_layer_norm(g, node) if node.op_type == "Add" else
             _gelu(g, node) if node.op_type == "Mul" else None)
    if found is None or any(id(n) in dropped for n in found[0]):
      continue
    chain, fused = found
    dropped.update(id(n) for n in chain)
    placed[id(node)] = fused
    counts[fused.op_type] += 1
  nodes = [placed.get(id(n), n) for n in model.graph.node
           if id(n) not in dropped or id(n) in placed]
  del model.graph.node[:]
  model.graph.node.extend(nodes)
  if counts["Gelu"] and not any(o.domain == MICROSOFT for o in model.opset_import):
    model.opset_import.append(helper.make_opsetid(MICROSOFT, 1))
  _drop_unused_initializers(model.graph)
  return counts


def fuse_attention(model):
  """Each self-attention block of tf2onnx's graph (after simplify_shapes: constant head
  shapes) in `model` (a ModelProto, rewritten in place) as one com.microsoft Attention node:
      Q, K, V = x W_q + b_q, x W_k + b_k, x W_v + b_v       (each [B, S, H])
      heads: Reshape [0, 0, N, D], Transpose (K to [B, N, D, S], Q and V to [B, N, S, D])
      P = Softmax(Q K * scale + (1 - mask[B, 1, 1, S]) * c)   (mask: a [B, S] graph input)
      out = Reshape(Transpose(P V), [0, 0, H])                -> [B, S, H]
  becomes Attention(x, [W_q W_k W_v], [b_q b_k b_v], mask; num_heads N, scale, mask_filter_value
  c): the same function, which ONNX Runtime runs as one kernel (QAttention once quantized: one
  int8 product for Q, K and V) instead of 19 nodes. Returns the number of blocks fused."""
  from onnx import helper
  from onnx import numpy_helper
  g = _Graph(model.graph)
  placed = {}
  for node in model.graph.node:
    found = _attention(g, node) if node.op_type == "Reshape" else None
    if found is None:
      continue
    x, weights, biases, mask, heads, scale, fill = found
    name = node.name + "_attention"
    model.graph.initializer.extend([
        numpy_helper.from_array(np.concatenate(weights, 1), name + "_qkv_weight"),
        numpy_helper.from_array(np.concatenate(biases, 0), name + "_qkv_bias")])
    placed[id(node)] = helper.make_node(
        "Attention", [x, name + "_qkv_weight", name + "_qkv_bias", mask], [node.output[0]],
        name=name, domain=MICROSOFT, num_heads=heads, scale=scale, mask_filter_value=fill)
  if placed:
    nodes = [placed.get(id(n), n) for n in model.graph.node]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    if not any(o.domain == MICROSOFT for o in model.opset_import):
      model.opset_import.append(helper.make_opsetid(MICROSOFT, 1))
    _drop_dead_nodes(model.graph)
    _drop_unused_initializers(model.graph)
  return len(placed)


def _attention(g, merge):
  """(x, [W_q, W_k, W_v], [b_q, b_k, b_v], mask input, heads, scale, mask fill) when `merge`
  (a Reshape) ends fuse_attention's pattern, else None."""
  from onnx import numpy_helper
  back = g.node(merge.input[0], "Transpose")
  if back is None or _perm(back) != [0, 2, 1, 3] or _constant_array(g, merge.input[1]) is None:
    return None
  product = g.node(back.input[0], "MatMul")  # P V
  probs = product and g.node(product.input[0], "Softmax")
  logits = probs and g.node(probs.input[0], "Add")
  if logits is None:
    return None
  for k in (0, 1):
    scaled, mask = g.node(logits.input[k], "Mul"), _mask_bias(g, logits.input[1 - k])
    if scaled is None or mask is None:
      continue
    for j in (0, 1):
      scores, scale = g.node(scaled.input[j], "MatMul"), g.scalar(scaled.input[1 - j])
      if scores is None or scale is None:
        continue
      q = _heads(g, scores.input[0], [0, 2, 1, 3])
      key = _heads(g, scores.input[1], [0, 2, 3, 1])
      v = _heads(g, product.input[1], [0, 2, 1, 3])
      if None in (q, key, v) or len({q[0], key[0], v[0]}) != 1 or not (
          q[3] == key[3] == v[3]) or q[3][:2] != [0, 0]:
        return None
      heads, size = q[3][2:]
      weights = [numpy_helper.to_array(g.constants[part[1]]) for part in (q, key, v)]
      if weights[0].ndim != 2 or heads * size != weights[0].shape[1] or (
          _constant_array(g, merge.input[1]).tolist() != [0, 0, heads * size]):
        return None
      biases = [numpy_helper.to_array(g.constants[part[2]]) for part in (q, key, v)]
      return q[0], weights, biases, mask[0], heads, scale, mask[1]
  return None


def _heads(g, name, perm):
  """(x, W, b, [0, 0, N, D]) when `name` is Transpose(Reshape(x W + b, [0, 0, N, D]), perm)
  with W and b constants, else None."""
  split = g.node(name, "Transpose")
  if split is None or _perm(split) != perm:
    return None
  reshape = g.node(split.input[0], "Reshape")
  if reshape is None:
    return None
  shape, add = _constant_array(g, reshape.input[1]), g.node(reshape.input[0], "Add")
  if shape is None or add is None or shape.size != 4:
    return None
  for k in (0, 1):
    matmul = g.node(add.input[k], "MatMul")
    if (matmul is not None and add.input[1 - k] in g.constants
        and matmul.input[1] in g.constants):
      return matmul.input[0], matmul.input[1], add.input[1 - k], shape.tolist()
  return None


def _mask_bias(g, name):
  """(mask, c) when `name` is (1 - mask[B, 1, 1, S]) * c, the mask an int32 graph input [B, S]
  (_mask_step: BERT's additive attention mask), else None."""
  mul = g.node(name, "Mul")
  for k in (0, 1) if mul is not None else ():
    fill, sub = g.scalar(mul.input[1 - k]), g.node(mul.input[k], "Sub")
    if fill is None or sub is None or g.scalar(sub.input[0]) != 1.0:
      continue
    source, unsqueezed = sub.input[1], False
    while source in g.producer and _mask_step(g, g.producer[source]):
      unsqueezed |= g.producer[source].op_type == "Unsqueeze"
      source = g.producer[source].input[0]
    if unsqueezed and any(i.name == source and i.type.tensor_type.elem_type == _INT32
                          for i in g.graph.input):
      return source, fill  # (Attention takes an int32 mask)
  return None


def _mask_step(g, node):
  """Whether `node` is a step of the mask's [B, S] -> [B, 1, 1, S]: a Cast, the Unsqueeze of
  axes 1 and 2, or a Slice that keeps everything (starts 0, steps 1, ends past any length)."""
  if node.op_type == "Cast":
    return True
  inputs = [_constant_array(g, name) for name in node.input[1:]]
  if node.op_type == "Unsqueeze":
    return bool(inputs) and inputs[0] is not None and inputs[0].tolist() == [1, 2]
  if node.op_type != "Slice" or any(x is None for x in inputs):
    return False
  starts, ends = inputs[0], inputs[1]
  steps = inputs[3] if len(inputs) > 3 else np.ones_like(starts)
  return bool((starts == 0).all() and (ends >= 2 ** 24).all() and (steps == 1).all())


def _perm(node):
  return next((list(a.ints) for a in node.attribute if a.name == "perm"), None)


def _constant_array(g, name):
  from onnx import numpy_helper
  return numpy_helper.to_array(g.constants[name]) if name in g.constants else None


def simplify_shapes(model):
  """tf2onnx's shape arithmetic of a model with inputs [B, S] replaced by constants where ONNX
  Runtime's symbolic shape inference proves them (a ModelProto, rewritten in place):
    * a dense layer on [B, S, H] that tf2onnx flattens to [B * S, H], multiplies, adds its
      bias and reshapes back to [B, S, U] (Shape, Slice, Concat, Cast, Reshape) runs its
      MatMul on [B, S, H] directly (ONNX's MatMul broadcasts over the leading axes);
    * every other Reshape whose output shape is known from its input's takes a constant shape
      (0: this axis of the input, as in ONNX's Reshape; -1 for at most one axis);
  then the nodes nothing reads any more are dropped. Returns {"dense": n, "reshape": n}."""
  from onnx import numpy_helper
  from onnxruntime.tools import symbolic_shape_infer
  for value in model.graph.input:  # every input is [B, S]: one name for each axis
    dims = value.type.tensor_type.shape.dim
    if len(dims) == 2:
      dims[0].dim_param, dims[1].dim_param = "batch", "sequence"
  inferred = symbolic_shape_infer.SymbolicShapeInference.infer_shapes(model, auto_merge=True)
  shapes = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
  g = _Graph(model.graph)
  counts = {"dense": 0, "reshape": 0}
  for node in list(model.graph.node):
    if node.op_type == "MatMul" and _flat_dense(g, node, shapes):
      counts["dense"] += 1
  for node in model.graph.node:
    if node.op_type != "Reshape" or node.input[1] in g.constants:
      continue
    target = _constant_shape(shapes.get(node.input[0]), shapes.get(node.output[0]))
    if target is not None:
      name = node.name + "_shape"
      model.graph.initializer.append(numpy_helper.from_array(np.array(target, np.int64), name))
      node.input[1] = name
      counts["reshape"] += 1
  _drop_dead_nodes(model.graph)
  _drop_unused_initializers(model.graph)
  return counts


def _flat_dense(g, matmul, shapes):
  """Rewires MatMul(Reshape(x, [-1, H]), W) + b [-> an elementwise activation] -> Reshape(.,
  [B, S, U]) as MatMul(x, W) + b [-> activation] when the shapes prove it; True when it did."""
  flat = g.node(matmul.input[0], "Reshape")
  readers = g.consumers.get(matmul.output[0], [])
  if flat is None or matmul.input[1] not in g.constants or len(readers) != 1 or (
      readers[0].op_type != "Add"):
    return False
  add = readers[0]
  if g.other(add, matmul.output[0]) not in g.constants:
    return False
  last = add
  unflat = g.consumers.get(last.output[0], [])
  if len(unflat) == 1 and unflat[0].op_type in _ACTIVATIONS and len(unflat[0].input) == 1:
    last = unflat[0]
    unflat = g.consumers.get(last.output[0], [])
  if len(unflat) != 1 or unflat[0].op_type != "Reshape":
    return False
  x, out = shapes.get(flat.input[0]), shapes.get(unflat[0].output[0])
  units = g.constants[matmul.input[1]].dims[-1]
  if not x or not out or len(x) < 3 or out != x[:-1] + [units]:
    return False
  matmul.input[0] = flat.input[0]
  last.output[0] = unflat[0].output[0]
  unflat[0].output[0] = unflat[0].output[0] + "_unused"
  return True


def _constant_shape(source, target):
  """The constant shape input of a Reshape from symbolic shape `source` to `target`, else
  None."""
  if not source or not target or any(d in (0, "") for d in target):
    return None  # (an axis of the output not inferred)
  shape = [d if isinstance(d, int) else
           0 if k < len(source) and d == source[k] else -1 for k, d in enumerate(target)]
  return shape if shape.count(-1) <= 1 else None


def _drop_dead_nodes(graph):
  """Drops the nodes whose outputs neither a graph output nor a kept node reads."""
  nodes = list(graph.node)
  wanted = {o.name for o in graph.output}
  while True:
    read = wanted | {name for node in nodes for name in node.input}
    kept = [node for node in nodes if any(o in read for o in node.output)]
    if len(kept) == len(nodes):
      break
    nodes = kept
  del graph.node[:]
  graph.node.extend(nodes)


def _drop_unused_initializers(graph):
  used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
  kept = [i for i in graph.initializer if i.name in used]
  del graph.initializer[:]
  graph.initializer.extend(kept)
