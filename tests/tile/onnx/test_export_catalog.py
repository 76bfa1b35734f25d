"""The torch-export-like models (tests/export_like.py) leave no compute op replicated only: every op is in
the catalog, or is shape arithmetic on tiny integer tensors (which the terminal reports apart)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from onnxpart.cli.app import app
from onnxpart.loading import load_costed
from onnxpart.onnx_constants import small_constants
from onnxpart.tile.onnx.build import build_layout_instance

from tests.export_like import ALL_DYNAMIC, ALL_STATIC


@pytest.mark.parametrize("name, build, dims", ALL_STATIC + ALL_DYNAMIC, ids=[c[0] for c in ALL_STATIC + ALL_DYNAMIC])
@pytest.mark.parametrize("mesh", [2, (2, 2)], ids=["ring2", "mesh2x2"])
def test_exports_leave_only_shape_arithmetic_replicated(tmp_path, name, build, dims, mesh):
    path = tmp_path / f"{name}.onnx"
    onnx.save(build(), str(path))
    loaded = load_costed(path, cost="analytic", device="a100", dim=[f"{k}={v}" for k, v in dims.items()],
                         need_model=True)
    inst = build_layout_instance(loaded.graph, mesh, constants=small_constants(loaded.model.model))
    left = Counter(op.op_type for op in inst.ops if not op.catalog and not op.shape_computation)
    assert not left, f"{name}: compute ops replicated only: {dict(left)}"
    types = Counter(op.op_type for op in inst.ops)
    if name == "kv_cache_decoder":  # the attention mask's Expand and the Shape reads of activations
        assert types["Expand"] and types["Shape"]
        assert all(len(op.choices) > 1 for op in inst.ops if op.op_type in ("Expand", "Shape"))


def test_terminal_reports_shape_arithmetic_apart_from_missing_ops(tmp_path):
    """Range over int64 scalars (x's width, read through Shape and Gather) is a shape computation; CumSum on
    floats is a compute op not in the catalog."""
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["c"], name="cumsum"),
             helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "one"], ["limit"], name="gather"),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="range"),
             helper.make_node("Cast", ["r"], ["rf"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Add", ["c", "rf"], ["y"], name="add")]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n)
             for n, v in [("axis", 0), ("one", 1), ("start", 0), ("delta", 1)]]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    result = CliRunner().invoke(app, ["tile", str(tmp_path / "m.onnx"), "-d", "2", "-o", str(tmp_path / "out"),
                                      "--time-limit", "1", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "replicated only (not in the catalog): 1 CumSum (see plan.json)" in result.output
    assert "shape computations (small integer tensors, replicated at no real cost): 1 Range" in result.output
