"""Partition's stage files: made one at a time, and with ``--freeze-dims`` self-contained. A cut inside
a legacy export's shape chain (``Shape -> Gather -> Unsqueeze -> Concat`` in one stage, the ``Reshape``
reading it in the next) leaves the next stage with a shape input whose value it cannot know, so shape
inference left the Reshape's output unknown and ``remat`` on that stage exited 2 (the 70B stage 1 of 8
at sequence 2048). With the dims frozen the shape is a constant, held in the stage as an initializer."""

from __future__ import annotations

import functools
import json

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from onnxpart.cli.app import app
from onnxpart.loading import load_costed
from onnxpart.parts import part_io, part_models
from onnxpart.verify import verify_parts
from tests import export_like

DIMS = {"shape_gather_reshape": ["batch=1", "sequence=8"],
        "kv_cache_decoder": ["batch=1", "sequence=4", "past_sequence_length=2", "total_sequence_length=6"]}


def _cut_before_a_computed_shape(graph) -> tuple[np.ndarray, str]:
    """Stage 0: the ops before the first one whose shape input an op computes (a Reshape or Expand);
    stage 1: the rest. -> (assignment, that shape input)."""
    for op in graph.ops:
        computed = len(op.inputs) > 1 and graph.tensors[op.inputs[1]].producer is not None
        if op.op_type in ("Reshape", "Expand") and computed:
            assignment = np.array([0 if other.index < op.index else 1 for other in graph.ops])
            return assignment, op.inputs[1]
    raise AssertionError("no computed shape")


@pytest.mark.parametrize("builder", sorted(DIMS))
def test_a_cut_inside_a_shape_chain_leaves_the_frozen_shape_a_constant_of_the_later_stage(tmp_path, builder):
    source = tmp_path / f"{builder}.onnx"
    onnx.save(getattr(export_like, builder)(), source)
    loaded = load_costed(source, dim=DIMS[builder])
    graph, model = loaded.graph, loaded.model
    assignment, shape = _cut_before_a_computed_shape(graph)
    io = part_io(graph, assignment, 2)
    assert shape in io[1][0]  # the cut falls between the shape computation and its use
    stages = part_models(model.model, graph, assignment, 2, lambda b: f"stage_{b}",
                         functools.partial(model.value_info, freeze=True), frozen=model.types)
    later = stages[1].graph
    assert shape not in {vi.name for vi in later.input} and shape in {init.name for init in later.initializer}
    assert all(vi.type.tensor_type.elem_type != onnx.TensorProto.INT64 or vi.name in model.model.graph.input
               for vi in later.input if vi.name not in {i.name for i in model.model.graph.input})
    files = []
    for index, stage in stages.items():
        onnx.checker.check_model(stage)
        files.append((tmp_path / f"stage_{index}.onnx", io[index][0]))
        onnx.save(stage, files[-1][0])
    # the stages still run, in onnxruntime, to the original's outputs
    assert verify_parts(model, files, freeze=True).ok
    # and remat reads the later stage: every shape known
    result = CliRunner().invoke(app, ["remat", str(files[1][0]), "--budget", "100%", "--method", "greedy",
                                      "--time-limit", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["methods"][0]["peak_bytes"] > 0


def test_stage_models_come_one_at_a_time(tmp_path, monkeypatch):
    """The writer holds one stage's weights at once: with 64 stages of a model with 0.9 GB embedded
    weights, building every stage model before writing the first one added 0.9 GB to the peak."""
    import onnxpart.parts as parts
    from onnxpart.partition import Solution
    from onnxpart.partition.emit import stage_models
    from onnxpart.partition.model import from_graph

    source = tmp_path / "model.onnx"
    onnx.save(export_like.shape_gather_reshape(), source)
    loaded = load_costed(source, dim=DIMS["shape_gather_reshape"])
    inst = from_graph(loaded.graph)
    assignment = np.arange(inst.n) * 4 // inst.n
    extracted = []
    original = parts.extract_subgraph
    monkeypatch.setattr(parts, "extract_subgraph", lambda *a, **kw: extracted.append(1) or original(*a, **kw))
    stages = stage_models(loaded.model.model, loaded.graph, Solution(inst, 4, assignment, "test", []),
                          loaded.model.value_info)
    assert not extracted
    assert next(stages)[0] == 0 and len(extracted) == 1
    assert [index for index, _ in stages] == [1, 2, 3] and len(extracted) == 4
