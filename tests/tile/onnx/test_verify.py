"""tile --verify: every catalog algorithm of every op type, forced on a one-node model with random shapes
that divide by D, runs on D virtual devices and reproduces the model; broken collectives and a wrong
catalog entry are caught and named."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxpart.tile.onnx import catalog_conv, exchange, op_catalog, resharding
from onnxpart.tile.onnx import verify as tile_verify
from onnxpart.tile.onnx.catalog import R, S, Algorithm
from onnxpart.tile.onnx.mesh import MeshLayout
from onnxpart.tile.onnx.model import Plan
from onnxpart.verify import VerificationError

from tests.tile.onnx.verify_models import forced_plan, load, one_node, verify_every_algorithm, weight

FEW = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
DEVICES = st.sampled_from([2, 4])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("verify")


def multiple(draw, p: int, most: int = 3) -> int:
    return p * draw(st.integers(1, most))


@FEW
@given(st.data())
def test_matmul_batched_and_2d(folder, data):
    p = data.draw(DEVICES)
    b, m, k, n = (multiple(data.draw, p) for _ in range(4))
    batched = data.draw(st.booleans())
    a_shape = [b, m, k] if batched else [m, k]
    names = verify_every_algorithm(one_node(folder, "MatMul", [("a", a_shape), ("b", weight([k, n]))]), p)
    assert {"replicated", "rows", "cols", "contraction"} | ({"batch0"} if batched else set()) <= names


@FEW
@given(st.data())
def test_gemm_transposes_and_bias(folder, data):
    p = data.draw(DEVICES)
    m, k, n = (multiple(data.draw, p) for _ in range(3))
    trans_a, trans_b = data.draw(st.booleans()), data.draw(st.booleans())
    bias = data.draw(st.sampled_from([None, [n], [m, n]]))
    inputs = [("a", [k, m] if trans_a else [m, k]), ("b", weight([n, k] if trans_b else [k, n]))]
    inputs += [("c", weight(bias, 2))] if bias else []
    names = verify_every_algorithm(one_node(folder, "Gemm", inputs, {"transA": int(trans_a), "transB": int(trans_b),
                                                                     "alpha": 0.5, "beta": 2.0}), p)
    assert {"rows", "cols", "contraction"} <= names


ELEMENTWISE = [("Add", 2), ("Sub", 2), ("Mul", 2), ("Div", 2), ("Max", 2), ("Pow", 2), ("Sum", 3), ("Mean", 3),
               ("Relu", 1), ("Tanh", 1), ("Sigmoid", 1), ("Erf", 1), ("Neg", 1)]


@FEW
@given(st.data(), st.sampled_from(ELEMENTWISE))
def test_elementwise_with_broadcasting(folder, data, case):
    op_type, arity = case
    p = data.draw(DEVICES)
    shape = [multiple(data.draw, p) for _ in range(data.draw(st.integers(2, 3)))]
    inputs = [("x", shape)]
    for i in range(1, arity):  # the others broadcast: a suffix of the shape, or a size-1 dim
        suffix = shape[data.draw(st.integers(0, len(shape) - 1)):]
        suffix = [1 if data.draw(st.booleans()) else s for s in suffix]
        value = np.abs(weight(suffix, i)) + 0.5 if op_type in ("Div", "Pow") else weight(suffix, i)
        inputs.append((f"w{i}", value))
    if op_type == "Pow":
        inputs = [("x", shape), ("e", np.full([1], 2.0, np.float32))]
    names = verify_every_algorithm(one_node(folder, op_type, inputs), p)
    assert {f"shard{d}" for d in range(len(shape))} <= names
    if op_type in ("Add", "Sub", "Sum"):
        assert "partial-sum" in names


@FEW
@given(st.data(), st.sampled_from(["Clip", "Where", "Equal", "Less", "Greater"]))
def test_clip_where_and_comparisons(folder, data, op_type):
    from onnx import TensorProto

    p = data.draw(DEVICES)
    shape = [multiple(data.draw, p), multiple(data.draw, p)]
    out = TensorProto.FLOAT
    if op_type == "Clip":
        inputs = [("x", shape), ("lo", np.array(-0.5, np.float32)), ("hi", np.array(0.7, np.float32))]
    elif op_type == "Where":
        inputs = [("c", np.random.default_rng(3).random(shape) > 0.5), ("x", shape), ("y", weight(shape[1:], 4))]
    else:
        inputs, out = [("x", shape), ("z", weight(shape[1:], 5))], TensorProto.BOOL
    assert {"shard0", "shard1"} <= verify_every_algorithm(one_node(folder, op_type, inputs, out_type=out), p)


BOOLEAN_OPS = {"Not", "And", "Or", "Xor"}
COMPARISONS = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf"}


@pytest.mark.parametrize("op_type", sorted(op for op in (op_catalog.UNARY | set(op_catalog.BINARY)) - {"Where", "Clip"}
                                            if onnx.defs.has(op)))  # Silu is no ONNX op (only exporters' name)
def test_every_elementwise_op_type(folder, op_type):
    """Each unary and broadcasting ONNX op of the catalog, on [4, 6] (and a [6] second input) at D = 2."""
    from onnx import TensorProto

    arity = 1 if op_type in op_catalog.UNARY else 2
    elem = TensorProto.BOOL if op_type in BOOLEAN_OPS else TensorProto.FLOAT
    out = TensorProto.BOOL if op_type in BOOLEAN_OPS | COMPARISONS else TensorProto.FLOAT
    second = np.random.default_rng(1).random([6]) > 0.5 if elem == TensorProto.BOOL else np.abs(weight([6])) + 0.5
    attrs = {"to": TensorProto.DOUBLE} if op_type == "Cast" else {}
    out = TensorProto.DOUBLE if op_type == "Cast" else out
    inputs = [("x", [4, 6], elem)] + [("w", second)] * (arity - 1)
    names = verify_every_algorithm(one_node(folder, op_type, inputs, attrs, out_type=out, opset=20), 2)
    assert {"shard0", "shard1"} <= names


@FEW
@given(st.data())
def test_transpose_softmax_layernorm(folder, data):
    p = data.draw(DEVICES)
    shape = [multiple(data.draw, p) for _ in range(3)]
    perm = data.draw(st.permutations(range(3)))
    assert {"shard0", "shard1", "shard2", "partial"} <= verify_every_algorithm(
        one_node(folder, "Transpose", [("x", shape)], {"perm": list(perm)}), p)
    axis = data.draw(st.integers(-3, 2))
    soft = verify_every_algorithm(one_node(folder, "Softmax", [("x", shape)], {"axis": axis}), p)
    assert f"shard{axis % 3}" not in soft and len(soft) == 3
    ln = one_node(folder, "LayerNormalization", [("x", shape), ("g", weight(shape[2:])), ("b", weight(shape[2:], 2))],
                  {"axis": -1})
    assert {"shard0", "shard1"} <= verify_every_algorithm(ln, p)


@FEW
@given(st.data())
def test_conv_batch_and_channels(folder, data):
    p = data.draw(DEVICES)
    n, c, m = (multiple(data.draw, p, 2) for _ in range(3))
    kernel, stride = data.draw(st.sampled_from([1, 3])), data.draw(st.sampled_from([1, 2]))
    inputs = [("x", [n, c, 6, 5]), ("w", weight([m, c, kernel, kernel]))]
    inputs += [("b", weight([m], 2))] if data.draw(st.booleans()) else []
    names = verify_every_algorithm(one_node(folder, "Conv", inputs, {"strides": [stride, stride],
                                                                     "pads": [1, 1, 1, 1]}), p)
    assert {"batch", "out-channels", "in-channels"} <= names


@FEW
@given(st.data(), st.sampled_from(["Conv", "ConvTranspose"]))
def test_grouped_and_depthwise_conv(folder, data, op_type):
    """Grouped (and, with one channel per group, depthwise) Conv and ConvTranspose: whole groups per
    device. Conv's weight is (C_out, C_in/group, k, k), ConvTranspose's (C_in, C_out/group, k, k)."""
    p = data.draw(DEVICES)
    groups = multiple(data.draw, p, 2)
    per_group_in, per_group_out = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    w = ([groups * per_group_out, per_group_in] if op_type == "Conv" else [groups * per_group_in, per_group_out])
    inputs = [("x", [2, groups * per_group_in, 5, 5]), ("w", weight(w + [3, 3])),
              ("b", weight([groups * per_group_out], 2))]
    names = verify_every_algorithm(one_node(folder, op_type, inputs, {"group": groups}), p)
    assert "groups" in names and "in-channels" not in names and "out-channels" not in names


@FEW
@given(st.data(), st.sampled_from(["MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool"]))
def test_pooling(folder, data, op_type):
    p = data.draw(DEVICES)
    shape = [multiple(data.draw, p, 2), multiple(data.draw, p, 2), 6, 6]
    attrs = {} if op_type.startswith("Global") else {"kernel_shape": [2, 2], "strides": [2, 2]}
    names = verify_every_algorithm(one_node(folder, op_type, [("x", shape)], attrs), p)
    assert {"batch", "channels"} <= names and ("partial" in names) == (op_type in catalog_conv.LINEAR_POOLS)


@FEW
@given(st.data())
def test_batchnorm_inference(folder, data):
    p = data.draw(DEVICES)
    c = multiple(data.draw, p)
    params = [("s", weight([c], 1)), ("b", weight([c], 2)), ("m", weight([c], 3)),
              ("v", np.abs(weight([c], 4)) + 0.1)]
    names = verify_every_algorithm(one_node(folder, "BatchNormalization", [("x", [p, c, 3, 3])] + params), p)
    assert {"batch", "channels"} <= names


RESHAPES = [([4, 6, 2], [24, 2]), ([24, 2], [4, 6, 2]), ([2, 3, 8], [6, 8]), ([8, 3], [2, 4, 3]),
            ([1, 8, 4], [8, 2, 2]), ([6, 8], [48])]


@FEW
@given(st.data(), st.sampled_from(RESHAPES))
def test_reshape(folder, data, shapes):
    p = data.draw(DEVICES)
    before, after = shapes
    target = list(after)
    target[data.draw(st.integers(0, len(target) - 1))] = -1  # the runtime resolves it; the local rule too
    names = verify_every_algorithm(one_node(folder, "Reshape", [("x", before), ("s", np.array(target, np.int64))]),
                                   p)
    assert {"replicated", "partial"} <= names


def test_reshape_keeps_only_contiguous_shards(folder):
    inst, _ = load(one_node(folder, "Reshape", [("x", [2, 4, 3]), ("s", np.array([8, 3], np.int64))]), 2)
    by_name = {c.name: c for c in inst.ops[0].choices}
    assert by_name["shard0"].outputs == (S(0),)  # the leading factor of the merged dims
    assert "shard1" not in by_name  # dim 1 inside the merged group: shards would interleave


@FEW
@given(st.data(), st.sampled_from(["Flatten", "Squeeze", "Unsqueeze"]))
def test_flatten_squeeze_unsqueeze(folder, data, op_type):
    p = data.draw(DEVICES)
    a, b = multiple(data.draw, p), multiple(data.draw, p)
    if op_type == "Flatten":
        path = one_node(folder, "Flatten", [("x", [a, b, 3])], {"axis": data.draw(st.integers(1, 2))})
    elif op_type == "Squeeze":
        path = one_node(folder, "Squeeze", [("x", [a, 1, b]), ("ax", np.array([1], np.int64))])
    else:
        path = one_node(folder, "Unsqueeze", [("x", [a, b]), ("ax", np.array([0, 2], np.int64))])
    assert "shard0" in verify_every_algorithm(path, p)


@FEW
@given(st.data())
def test_concat_split_slice(folder, data):
    p = data.draw(DEVICES)
    shape = [multiple(data.draw, p), multiple(data.draw, p), 3]
    axis = data.draw(st.integers(0, 2))
    concat = one_node(folder, "Concat", [("x", shape), ("w", weight(shape))], {"axis": axis})
    assert f"shard{axis}" not in verify_every_algorithm(concat, p)
    size = shape[axis]
    split = one_node(folder, "Split", [("x", shape), ("s", np.array([1, size - 1], np.int64))], {"axis": axis},
                     outputs=2)
    assert f"shard{axis}" not in verify_every_algorithm(split, p)
    step = data.draw(st.sampled_from([1, -1, 2]))
    starts, ends = ([0], [size]) if step > 0 else ([size - 1], [-size - 1])
    slice_ = one_node(folder, "Slice", [("x", shape), ("b", np.array(starts, np.int64)),
                                        ("e", np.array(ends, np.int64)), ("a", np.array([axis], np.int64)),
                                        ("t", np.array([step], np.int64))])
    names = verify_every_algorithm(slice_, p)
    assert f"shard{axis}" not in names and len(names) >= 3


@FEW
@given(st.data())
def test_gather_embedding_and_indices(folder, data):
    p = data.draw(DEVICES)
    vocab, width = multiple(data.draw, p), multiple(data.draw, p)
    rows = multiple(data.draw, p)
    indices = np.random.default_rng(data.draw(st.integers(0, 99))).integers(-vocab, vocab, size=(rows, 3))
    axis = data.draw(st.sampled_from([0, 1]))
    table = [vocab, width] if axis == 0 else [width, vocab]
    names = verify_every_algorithm(one_node(folder, "Gather", [("t", table), ("i", indices.astype(np.int64))],
                                            {"axis": axis}), p)
    assert {"rows", f"data{1 - axis}", "indices0", "partial"} <= names


@FEW
@given(st.data())
def test_gather_elements(folder, data):
    p = data.draw(DEVICES)
    shape = [multiple(data.draw, p), multiple(data.draw, p)]
    axis = data.draw(st.sampled_from([0, 1]))
    indices = np.random.default_rng(data.draw(st.integers(0, 99))).integers(0, shape[axis], size=shape)
    names = verify_every_algorithm(one_node(folder, "GatherElements", [("x", shape), ("i", indices.astype(np.int64))],
                                            {"axis": axis}), p)
    assert {"indices", f"shard{1 - axis}", "partial"} <= names


@pytest.mark.parametrize("mesh", [2, (2, 2)])
def test_gather_nd_batch_indices_and_kept_dims(folder, mesh):
    """batch_dims 1, data [4, 6, 8], indices [4, 4, 1] -> [4, 4, 8]: the batch, the indices' own dim and the
    data's kept dim may each be sharded."""
    indices = np.random.default_rng(0).integers(0, 6, size=(4, 4, 1)).astype(np.int64)
    names = verify_every_algorithm(one_node(folder, "GatherND", [("x", [4, 6, 8]), ("i", indices)],
                                            {"batch_dims": 1}), mesh)
    assert {"batch0", "indices1", "data2", "partial"} <= {n.split("·")[0] for n in names}


@pytest.mark.parametrize("mesh", [2, (2, 2)])
def test_constant_of_shape_fills_its_own_shard(folder, mesh):
    """Shape(x) -> ConstantOfShape -> Mul(x, ·): the fill computed at run time, sharded along either dim."""
    nodes = [onnx.helper.make_node("Shape", ["x"], ["s"], name="shape"),
             onnx.helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill",
                                   value=onnx.numpy_helper.from_array(np.array([1.5], np.float32))),
             onnx.helper.make_node("Mul", ["x", "c"], ["y0"], name="mul")]
    graph = onnx.helper.make_graph(nodes, "fill", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
                                   [onnx.helper.make_tensor_value_info("y0", onnx.TensorProto.FLOAT, [4, 8])])
    path = folder / "fill.onnx"
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]), str(path))
    inst, loaded = load(path, mesh)
    fill = next(op for op in inst.ops if op.op_type == "ConstantOfShape")
    assert fill.catalog and len(fill.choices) > 1
    for c in range(len(fill.choices)):
        assert tile_verify.verify_plan(inst, forced_plan(inst, fill, c), loaded.graph, loaded.model).ok


REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceSumSquare", "ReduceL1"]


@FEW
@given(st.data(), st.sampled_from(REDUCTIONS))
def test_reductions(folder, data, op_type):
    p = data.draw(DEVICES)
    shape = [multiple(data.draw, p) for _ in range(3)]
    axes = sorted(data.draw(st.sets(st.integers(-3, 2), min_size=1, max_size=2)), key=lambda a: a % 3)
    if len({a % 3 for a in axes}) < len(axes):
        axes = axes[:1]
    keepdims = int(data.draw(st.booleans()))
    as_input = op_type == "ReduceSum" or data.draw(st.booleans())
    inputs = [("x", shape)] + ([("axes", np.array(axes, np.int64))] if as_input else [])
    attrs = {"keepdims": keepdims} | ({} if as_input else {"axes": axes})
    names = verify_every_algorithm(one_node(folder, op_type, inputs, attrs, opset=18 if as_input else 13), p)
    kept = {d for d in range(3) if d not in {a % 3 for a in axes}}
    assert {f"shard{d}" for d in kept} <= names
    assert bool({n for n in names if n.startswith("reduce")}) == (op_type in ("ReduceSum", "ReduceSumSquare",
                                                                              "ReduceL1"))


# ------------------------------------------------------------------------------ catching bugs
def test_a_broken_all_reduce_is_caught_and_named(folder, monkeypatch):
    path = one_node(folder, "MatMul", [("a", [4, 8]), ("b", weight([8, 4]))])
    inst, loaded = load(path, 2)
    op = inst.ops[0]
    contraction = [c.name for c in op.choices].index("contraction")
    plan = forced_plan(inst, op, contraction)
    assert tile_verify.verify_plan(inst, plan, loaded.graph, loaded.model).ok
    real = exchange.all_reduce
    monkeypatch.setattr(exchange, "all_reduce", lambda group: ([group[0]] * len(group), real(group)[1]))  # forgets
    with pytest.raises(VerificationError, match="tensor 'y0'.*contraction"):
        tile_verify.verify_plan(inst, plan, loaded.graph, loaded.model)


def test_a_wrong_catalog_entry_is_caught(folder, monkeypatch):
    """A Conv sharded by input channels does not give sharded output channels: claiming so must fail."""
    def wrong(n_inputs, group, p):
        return [Algorithm("in-channels", (S(1), S(1)) + (R,) * (n_inputs - 2), S(1), p)]

    monkeypatch.setattr(op_catalog, "conv_algorithms", wrong)
    path = one_node(folder, "Conv", [("x", [2, 4, 5, 5]), ("w", weight([4, 4, 3, 3]))])
    with pytest.raises(VerificationError, match="tensor 'y0'"):
        verify_every_algorithm(path, 2)


@pytest.fixture
def fresh_prices():
    """The resharding planner's caches emptied before and after a test that patches it."""
    _clear_prices()
    yield
    _clear_prices()


def _clear_prices() -> None:
    for cached in (resharding._paths, resharding._transitions):
        cached.cache_clear()


def nested_plan(folder):
    """Relu on a 2x4 mesh, x stored S(0)S(0) and read RS(0): the transition issue 28 found priced as one
    all-gather along x (which leaves strided pieces)."""
    path = one_node(folder, "Relu", [("x", [8, 4])])
    inst, loaded = load(path, (2, 4))
    op = inst.ops[0]
    algorithm = [c.name for c in op.choices].index("replicated·shard0")
    return inst, Plan({"x": MeshLayout((S(0), S(0))), "y0": MeshLayout((R, S(0)))}, {op.name: algorithm}), loaded


def test_a_wrong_transition_fails_verify(folder, monkeypatch, fresh_prices):
    inst, plan, loaded = nested_plan(folder)
    assert tile_verify.verify_plan(inst, plan, loaded.graph, loaded.model).ok
    monkeypatch.setattr(resharding, "allowed", lambda *args: True)  # every per-axis step taken as exact
    _clear_prices()
    inst, plan, loaded = nested_plan(folder)
    assert [s.collective for s in inst.reshard_steps(plan.layouts["x"], MeshLayout((R, S(0))), "x")] == ["all-gather"]
    with pytest.raises(VerificationError, match="tensor 'y0'"):
        tile_verify.verify_plan(inst, plan, loaded.graph, loaded.model)


def test_a_mispriced_transition_fails_verify(folder, monkeypatch, fresh_prices):
    real = resharding._step
    monkeypatch.setattr(resharding, "_step", lambda state, j, after, nbytes, mesh: real(state, j, after, nbytes / 2, mesh))
    inst, plan, loaded = nested_plan(folder)
    with pytest.raises(VerificationError, match="resharding 'x'.*priced"):
        tile_verify.verify_plan(inst, plan, loaded.graph, loaded.model)


def test_one_tensor_read_twice_in_two_layouts(folder):
    """Mul(x, x) as partial-scale0 reads x as P in one slot and R in the other."""
    names = verify_every_algorithm(one_node(folder, "Mul", [("x", [4, 6]), ("x", [4, 6])]), 2)
    assert {"partial-scale0", "partial-scale1", "shard0", "shard1"} <= names


# ------------------------------------------------------------ padding, resizing, broadcasting
@FEW
@given(st.data(), st.sampled_from(["constant", "reflect", "edge"]))
def test_pad_shards_the_dims_it_leaves_alone(folder, data, mode):
    """Pad's pads as an input (with or without ``axes``, the constant value omitted, 0 or not) or as
    attributes (opset 10): every unpadded dim shards, no padded one does; P only when Pad is linear."""
    p = data.draw(DEVICES)
    shape = [multiple(data.draw, p) for _ in range(3)]
    padded = data.draw(st.sets(st.integers(0, 2), min_size=1, max_size=2))
    most = 1 if mode == "reflect" else 2  # reflect pads less than the dim (every dim is at least 2)
    begin = [data.draw(st.integers(1, most)) if d in padded else 0 for d in range(3)]
    end = [data.draw(st.integers(0, 1)) if d in padded else 0 for d in range(3)]
    value = data.draw(st.sampled_from([None, 0.0, 1.5])) if mode == "constant" else None
    if data.draw(st.booleans()):
        attrs = {"mode": mode, "pads": begin + end} | ({} if value is None else {"value": value})
        path = one_node(folder, "Pad", [("x", shape)], attrs, opset=10)
    elif data.draw(st.booleans()):  # axes naming the padded dims only, the constant value omitted
        axes = sorted(padded)
        pads = np.array([begin[a] for a in axes] + [end[a] for a in axes], np.int64)
        value = None
        path = one_node(folder, "Pad", [("x", shape), ("pads", pads), "", ("axes", np.array(axes, np.int64))],
                        {"mode": mode}, opset=18)
    else:
        rest = [] if value is None else [("c", np.array(value, np.float32))]
        path = one_node(folder, "Pad", [("x", shape), ("pads", np.array(begin + end, np.int64))] + rest,
                        {"mode": mode}, opset=13)
    names = verify_every_algorithm(path, p)
    assert {n for n in names if n.startswith("shard")} == {f"shard{d}" for d in range(3) if d not in padded}
    assert ("partial" in names) == (mode != "constant" or not value)


@FEW
@given(st.data(), st.sampled_from(["nearest", "linear", "cubic"]))
def test_resize_shards_batch_and_channels(folder, data, mode):
    """Resize by scales (Resize(X, "", scales)), by sizes (Resize(X, "", "", sizes)) or Upsample-9 on an
    NCHW image resized in H and W: batch and channels shard (the sizes rewritten locally), H and W do not."""
    p = data.draw(DEVICES)
    n, c = multiple(data.draw, p, 2), multiple(data.draw, p, 2)
    x = ("x", [n, c, 4, 5])
    how = data.draw(st.sampled_from(["scales", "sizes", "upsample"]))
    if how == "scales":
        path = one_node(folder, "Resize", [x, "", ("s", np.array([1, 1, 2, 1.5], np.float32))], {"mode": mode},
                        opset=13)
    elif how == "sizes":
        path = one_node(folder, "Resize", [x, "", "", ("z", np.array([n, c, 7, 3], np.int64))], {"mode": mode},
                        opset=13)
    else:
        path = one_node(folder, "Upsample", [x, ("s", np.array([1, 1, 2, 2], np.float32))],
                        {"mode": "nearest" if mode == "cubic" else mode}, opset=9)
    names = verify_every_algorithm(path, p)
    assert {"shard0", "shard1", "partial"} <= names and not {"shard2", "shard3"} & names


def test_resize_left_replicated_where_its_dims_are_unknown_or_moved(folder):
    """tf_crop_and_resize moves every dim (its roi); scales computed at run time name no dim."""
    crop = one_node(folder, "Resize", [("x", [2, 2, 4, 4]), ("roi", np.array([0, 0, .1, .1, 1, 1, .9, .9], np.float32)),
                                       ("s", np.array([1, 1, 2, 2], np.float32))],
                    {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"}, opset=13)
    inst, _ = load(crop, 2)
    assert not inst.ops[0].catalog
    assert op_catalog.op_algorithms("Resize", {}, [[2, 2, 4, 4], [4]], [2, 2, 8, 8], 2, [None, None], [0, 2]) is None
    known = op_catalog.op_algorithms("Resize", {}, [[2, 2, 4, 4], [4]], [2, 2, 8, 8], 2,
                                     [None, np.array([1, 1, 2, 2.0])], [0, 2])
    assert {a.name for a in known} == {"replicated", "partial", "shard0", "shard1"}


@FEW
@given(st.data())
def test_conv_transpose_batch_and_channels(folder, data):
    """ConvTranspose: W is (C_in, C_out/group, k, k), so out-channels shards W's dim 1 and in-channels its dim 0."""
    p = data.draw(DEVICES)
    n, c_in, c_out = (multiple(data.draw, p, 2) for _ in range(3))
    attrs = {"strides": [data.draw(st.sampled_from([1, 2]))] * 2, "pads": [1, 1, 1, 1]}
    if data.draw(st.booleans()):
        attrs["output_padding"] = [1, 1] if attrs["strides"][0] == 2 else [0, 0]
    inputs = [("x", [n, c_in, 4, 5]), ("w", weight([c_in, c_out, 3, 3]))]
    inputs += [("b", weight([c_out], 2))] if data.draw(st.booleans()) else []
    names = verify_every_algorithm(one_node(folder, "ConvTranspose", inputs, attrs), p)
    assert {"batch", "out-channels", "in-channels"} <= names


@FEW
@given(st.data())
def test_expand_like_broadcasting(folder, data):
    """Expand to a shape of 2-3 dims from an input that is a suffix of it with some dims 1 (the shape
    input holding 1 where the input has the dim, as Expand allows): every output dim shards, the input
    sharded where it has the dim in full, replicated where it broadcasts; the shape rewritten locally."""
    p = data.draw(DEVICES)
    out = [multiple(data.draw, p) for _ in range(data.draw(st.integers(2, 3)))]
    cut = data.draw(st.integers(0, len(out) - 1))
    src = [1 if data.draw(st.booleans()) else s for s in out[cut:]]
    shape = [s if d < cut or src[d - cut] == 1 or data.draw(st.booleans()) else 1 for d, s in enumerate(out)]
    names = verify_every_algorithm(one_node(folder, "Expand", [("x", src), ("s", np.array(shape, np.int64))]), p)
    assert {f"shard{d}" for d in range(len(out))} | {"partial"} <= names


@FEW
@given(st.data())
def test_tile_shards_the_unrepeated_dims(folder, data):
    p = data.draw(DEVICES)
    shape = [multiple(data.draw, p), multiple(data.draw, p), 3]
    repeats = [data.draw(st.integers(1, 2)) for _ in shape]
    names = verify_every_algorithm(one_node(folder, "Tile", [("x", shape), ("r", np.array(repeats, np.int64))]), p)
    assert {n for n in names if n.startswith("shard")} == {f"shard{d}" for d in range(2) if repeats[d] == 1}


def test_castlike_reads_its_type_donor_replicated(folder):
    from onnx import TensorProto

    path = one_node(folder, "CastLike", [("x", [4, 6]), ("t", np.zeros([1], np.float64))],
                    out_type=TensorProto.DOUBLE, opset=19)
    assert {"shard0", "shard1"} <= verify_every_algorithm(path, 2)


@FEW
@given(st.data(), st.sampled_from(["Shape", "Size"]))
def test_shape_and_size_read_any_layout(folder, data, op_type):
    """Shape (with start/end) and Size of a tensor in any layout give its whole static shape, no all-gather."""
    from onnx import TensorProto

    p = data.draw(DEVICES)
    shape = [multiple(data.draw, p) for _ in range(3)]
    attrs = {"start": data.draw(st.integers(-3, 0)), "end": data.draw(st.integers(1, 3))} if op_type == "Shape" else {}
    path = one_node(folder, op_type, [("x", shape)], attrs, out_type=TensorProto.INT64, opset=17)
    assert {"shard0", "shard1", "shard2"} <= verify_every_algorithm(path, p)
    inst, _ = load(path, p)
    assert all(c.outputs == (R,) and c.divisor == 1 for c in inst.ops[0].choices)


@FEW
@given(st.data(), st.sampled_from(["ArgMax", "ArgMin"]))
def test_argmax_shards_its_kept_dims(folder, data, op_type):
    from onnx import TensorProto

    p = data.draw(DEVICES)
    shape = [multiple(data.draw, p) for _ in range(3)]
    axis, keepdims = data.draw(st.integers(-3, 2)), data.draw(st.sampled_from([0, 1]))
    path = one_node(folder, op_type, [("x", shape)], {"axis": axis, "keepdims": keepdims}, out_type=TensorProto.INT64)
    names = verify_every_algorithm(path, p)
    assert {n for n in names if n != "replicated"} == {f"shard{d}" for d in range(3) if d != axis % 3}


EINSUMS = ["ij,jk->ik", "bij,bjk->bik", "bhqd,bhkd->bhqk", "ij->ji", "ij->i", "i,i->", "bi,ij->bj", "ijk,k->ij"]


@FEW
@given(st.data(), st.sampled_from(EINSUMS))
def test_einsum_letters_sharded(folder, data, equation):
    """Every letter shards (an output letter -> S of its position, a summed one -> P), and each input alone P."""
    p = data.draw(DEVICES)
    lhs, out = equation.split("->")
    size = {letter: multiple(data.draw, p) for letter in dict.fromkeys(lhs.replace(",", ""))}
    inputs = [(f"x{i}", [size[c] for c in term]) for i, term in enumerate(lhs.split(","))]
    names = verify_every_algorithm(one_node(folder, "Einsum", inputs, {"equation": equation}, opset=17), p)
    assert {f"shard-{c}" for c in size} | {f"partial{i}" for i in range(len(inputs))} <= names


def test_einsum_outside_the_catalog_where_letters_are_not_plain():
    for equation in ("ii->i", "...ij,...jk->...ik", "ij,jk"):
        assert op_catalog.op_algorithms("Einsum", {"equation": equation}, [[4, 4], [4, 4]], [4], 2) is None
