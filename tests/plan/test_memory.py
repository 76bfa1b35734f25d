"""A stage's memory (:meth:`onnxpart.plan.stages.Stage.memory`) is what an inference run holds: its weights,
and its activations live at the peak — not every activation at once, which no runtime keeps (Llama-70B's
activations at sequence 2048 alone would not fit 8 A100s)."""

from __future__ import annotations

from onnxpart.plan.evaluate import build_stage, stage_io
from onnxpart.plan.model import Shape

from tests.plan.test_family import chain_model, problem

WIDTHS = (64, 256, 128, 512, 64, 256, 32)
ROWS = 64


def test_a_chain_holds_one_op_at_a_time(tmp_path):
    """On one device a MatMul/Relu chain holds, at each op, its input and its output: the peak is the largest
    such pair (the model's output lives to the end, and is the last op's output)."""
    pb = problem(chain_model(tmp_path / "chain.onnx", WIDTHS, ROWS), "1x1:a100")
    shape = Shape(((tuple(range(len(pb.graph.ops))), pb.meshes[0]),))
    stage = build_stage(pb, shape, 0, stage_io(pb, shape)[0], [])
    nbytes = [ROWS * w * 4 for w in WIDTHS]
    pairs = [nbytes[i] + nbytes[i + 1] for i in range(len(WIDTHS) - 1)]  # MatMul i: its input and its output
    pairs += [2 * nbytes[i + 1] for i in range(len(WIDTHS) - 1)]  # Relu i: the MatMul's output and its own
    memory = stage.memory()
    assert memory["activations"] == max(pairs)
    assert memory["weights"] == sum(WIDTHS[i] * WIDTHS[i + 1] * 4 for i in range(len(WIDTHS) - 1))
