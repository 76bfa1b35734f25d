"""The plan family's units (:mod:`onnxpart.plan.units`) on a Llama-shaped export: its cuts are the layers'
boundaries, not the positions before the first layer and after the last where less crosses."""

import sys
from pathlib import Path

import numpy as np

from onnxpart.loading import load_costed
from onnxpart.plan.units import crossing_bytes, make_units

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from make_llama70b import Shape, build  # noqa: E402

LAYERS = 12


def _llama(tmp_path):
    shape = Shape(layers=LAYERS, hidden=256, heads=4, kv_heads=4, mlp=512, vocab=1000)
    path = build(tmp_path / "llama", shape)["path"]
    return load_costed(Path(path), dim=["batch=1", "sequence=512"], device="a100").graph


def _layer_starts(graph) -> list[int]:
    """The op index where each layer but the first begins (graph order is the family's order)."""
    starts = []
    for i in range(1, LAYERS):
        starts.append(min(op.index for op in graph.ops if op.name.startswith(f"/model/layers.{i}/")))
    return starts


def test_units_cut_at_every_layer_boundary(tmp_path):
    """Before the first layer (embedding, mask and rotary tables) and after the last (final norm, head) fewer
    bytes cross than at a layer boundary, where the tables every layer reads cross too; taking the least
    crossing over the whole order put every cut there and left the layers one unit (3,589 of llama-7b's 3,631
    ops). With units enough, every stage can start at a layer."""
    graph = _llama(tmp_path)
    crossing = crossing_bytes(graph)
    starts = _layer_starts(graph)
    assert crossing[1] < crossing[starts[0]]  # the trap is there: less crosses before the layers
    units = make_units(graph, 64)
    assert set(starts) <= set(units.bounds)
    assert np.diff(units.bounds).max() <= len(graph.ops) / LAYERS


def test_fewer_units_than_layers_cut_where_layers_meet(tmp_path):
    """With fewer units than layers every cut still crosses no more than a layer boundary does, and no unit
    holds more than an equal share of the work and one layer."""
    graph = _llama(tmp_path)
    crossing = crossing_bytes(graph)
    starts = _layer_starts(graph)
    boundary = crossing[starts].max()
    layer = sum(graph.ops[i].work for i in range(starts[0], starts[1]))
    for max_units in (4, 8, 16):
        units = make_units(graph, max_units)
        assert units.count == max_units
        assert crossing[list(units.bounds[1:-1])].max() <= boundary * 1.01, max_units
        work = np.array([sum(graph.ops[i].work for i in units.ops(u, u + 1)) for u in range(units.count)])
        assert work.max() <= work.mean() + layer, max_units
