"""The Megatron-LM layout (Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter Language Models Using
Model Parallelism", 2019, Section 3) as a tile plan, for the blocks of ``scripts/make_tp_blocks.py``: the
first matmul of each pair column-parallel (Q, K, V, the MLP's up and gate: weight ``S(1)``, bias ``S(0)``),
the second row-parallel (the attention's output projection and the MLP's down: weight ``S(0)``, bias
``R``), attention heads split in between, one all-reduce after each row-parallel matmul. On a 2-D mesh
with ``dp`` set, the batch is split over that axis (data parallel) and the tensor-parallel layout runs
along the other.

The plan is derived, not listed: weights take those layouts, and each op in topological order runs the
algorithm of the most parallelism that reads its inputs as they are stored (no resharding), storing
its outputs as made, a partial sum all-reduced where it is made — which is Megatron's dataflow.
"""

from __future__ import annotations

from onnxpart.tile.onnx.catalog import P, R, S
from onnxpart.tile.onnx.mesh import compose, parts
from onnxpart.tile.onnx.model import LayoutInstance, Plan

COLUMN = {"q", "k", "v", "up", "gate"}
ROW = {"o", "down"}


def role(name: str):
    """The Megatron layout (one mesh axis) of a weight named ``l{i}.{attn,mlp}.{proj}.{w,b}``, else None."""
    *_, proj, kind = name.split(".") if name.count(".") >= 3 else ("", "", "")
    if proj in COLUMN:
        return S(1) if kind == "w" else S(0)
    if proj in ROW:
        return S(0) if kind == "w" else R
    return None


def megatron_plan(inst: LayoutInstance, tp: int = -1, dp: int | None = None) -> Plan:
    """The Megatron layout on ``inst``'s mesh: tensor parallel along mesh axis ``tp``, data parallel (the batch,
    dim 0, split) along ``dp`` (module docstring). AssertionError where an op has no algorithm reading its
    stored inputs (the model is not such a block)."""
    axes = len(inst.mesh.shape)
    tp %= axes

    def on_mesh(tp_part, dp_part=R):
        return compose([tp_part if j == tp else dp_part if j == dp else R for j in range(axes)])

    layouts = {}
    for t in inst.tensors:
        if t.kind == "weight":
            layouts[t.name] = on_mesh(role(t.name) or R)
        elif t.kind == "input":
            layouts[t.name] = on_mesh(R, S(0))
    algorithms = {}
    for op in inst.ops:
        stored = tuple(layouts[t] for t in op.inputs)
        free = [c for c, choice in enumerate(op.choices) if choice.inputs == stored]
        assert free, f"{op.name} ({op.op_type}): no algorithm reads {[str(a) for a in stored]}"
        c = max(free, key=lambda c: (op.choices[c].divisor, -c))
        algorithms[op.name] = c
        for t, made in zip(op.outputs, op.choices[c].outputs):
            layouts[t] = compose([R if a == P else a for a in parts(made)])  # all-reduce the partial sums
            assert layouts[t] in inst.tensor(t).domain, (t, str(layouts[t]))
    return Plan(layouts, algorithms)
