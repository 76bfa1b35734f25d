"""One-node ONNX models for the tile --verify tests, and a runner that forces each of the node's catalog
algorithms in turn and runs the plan on the virtual devices."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxpart.loading import load_costed
from onnxpart.tile.onnx.catalog import R
from onnxpart.tile.onnx.mesh import compose
from onnxpart.onnx_constants import small_constants
from onnxpart.tile.onnx.build import build_layout_instance
from onnxpart.tile.onnx.model import Plan
from onnxpart.tile.onnx.verify import verify_plan

_counter = itertools.count()


def one_node(folder: Path, op_type: str, inputs: list, attrs: dict | None = None, out_type=TensorProto.FLOAT,
             outputs: int = 1, opset: int = 17) -> Path:
    """A model of one ``op_type`` node. ``inputs``: (name, shape) for a float graph input (random in
    verify), (name, shape, elem_type) for another graph input (zeros in verify), (name, array) for an
    initializer, or "" for an omitted optional input."""
    graph_inputs, inits, names = [], [], []
    for spec in inputs:
        if spec == "":
            names.append("")
            continue
        name, value, elem_type = spec if len(spec) == 3 else (*spec, TensorProto.FLOAT)
        if name in names:  # the same input in two slots
            names.append(name)
            continue
        names.append(name)
        if isinstance(value, np.ndarray):
            inits.append(numpy_helper.from_array(value, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, elem_type, list(value)))
    outs = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op_type, names, outs, name="op", **(attrs or {}))
    graph = helper.make_graph([node], op_type.lower(), graph_inputs,
                              [helper.make_tensor_value_info(o, out_type, None) for o in outs], inits)
    path = folder / f"{op_type.lower()}_{next(_counter)}.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(onnx.shape_inference.infer_shapes(model), str(path))  # outputs typed in full (onnx.checker's full_check)
    return path


def weight(shape, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def load(path: Path, devices: int | tuple[int, ...]):
    loaded = load_costed(Path(path), cost="analytic", device="a100")
    inst = build_layout_instance(loaded.graph, devices, constants=small_constants(loaded.model.model))
    return inst, loaded


def forced_plan(inst, op, c: int) -> Plan:
    """Every tensor stored as choice ``c`` reads or writes it where its domain allows, else R (a graph
    input or output is never P: the conversion R -> P or P -> R runs instead)."""
    choice = op.choices[c]
    layouts = {t.name: compose((R,) * len(inst.mesh.shape)) for t in inst.tensors}
    for t, want in zip(op.inputs + op.outputs, choice.inputs + choice.outputs):
        if want in inst.tensor(t).domain:
            layouts[t] = want
    return Plan(layouts, {o.name: (c if o is op else 0) for o in inst.ops})


def verify_every_algorithm(path: Path, devices: int | tuple[int, ...]) -> set[str]:
    """Force each algorithm of the model's one op, verify the plan; -> the algorithm names verified."""
    inst, loaded = load(path, devices)
    (op,) = inst.ops
    assert op.catalog, f"{op.op_type} is not in the catalog"
    for c in range(len(op.choices)):
        report = verify_plan(inst, forced_plan(inst, op, c), loaded.graph, loaded.model)
        assert report.ok, (op.choices[c].name, report.to_dict())
    return {choice.name for choice in op.choices}
