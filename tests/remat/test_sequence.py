"""The recompute-aware simulator against hand-computed memory, and against the shared no-recompute
profile of `inspect` on real models."""

from __future__ import annotations

import pytest

from onnxpart.memory import memory_profile
from onnxpart.onnx_io import load_graph
from onnxpart.readers import read_graph
from onnxpart.remat.model import build_instance, resolve_budget
from onnxpart.remat.sequence import InvalidSequence, baseline, simulate
from tests.conftest import FIXTURES, SHARED, light, requires_shared
from tests.remat.helpers import instance

# a -> b -> c -> d with a skip a -> d: sizes 10, 20, 30, 40; durations 1, 2, 3, 4.
SKIP = dict(sizes=[10, 20, 30, 40], durations=[1, 2, 3, 4], edges=[(0, 1), (1, 2), (2, 3), (0, 3)])


def test_no_recompute_memory_by_hand():
    inst = instance(**SKIP)
    profile = simulate(inst, [0, 1, 2, 3])
    # a alone; a+b; a+b+c (b read by c); a+c+d (d is the output)
    assert profile.memory == (10, 30, 60, 80)
    assert (profile.peak, profile.peak_event, profile.duration, profile.tdi) == (80, 3, 10, 0.0)


def test_recomputation_frees_the_skip_tensor():
    inst = instance(**SKIP)
    profile = simulate(inst, [0, 1, 2, 0, 3])
    # the first a dies after b reads it; a is recomputed before d
    assert profile.memory == (10, 30, 50, 40, 80)
    assert profile.copy_index == (0, 0, 0, 1, 0)
    assert profile.recomputations == 1 and profile.duration == 11
    assert profile.tdi == pytest.approx(0.1)


def test_reader_uses_the_live_copy():
    inst = instance(sizes=[10, 20, 30], durations=[1, 1, 1], edges=[(0, 1), (0, 2), (1, 2)])
    # a, b, a again, c: c reads the second copy of a, so the first dies after b
    assert simulate(inst, [0, 1, 0, 2]).memory == (10, 30, 30, 60)


@pytest.mark.parametrize("sequence, message", [([1, 0, 2, 3], "before it is computed"),
                                               ([0, 1, 2], "never computed"),
                                               ([0, 1, 2, 3, 3], "only once")])
def test_invalid_sequences(sequence, message):
    with pytest.raises(InvalidSequence, match=message):
        simulate(instance(**SKIP), sequence)


@pytest.mark.parametrize("path", [light("squeezenet"), light("shufflenet"), FIXTURES / "transformer_block.onnx",
                                  FIXTURES / "unet.onnx"])
def test_baseline_matches_inspect(path):
    graph, _ = load_graph(path)
    inst = build_instance(graph)
    assert baseline(inst).memory == memory_profile(graph).memory
    assert baseline(build_instance(graph, include_params=True)).peak == memory_profile(graph, include_params=True).peak


@requires_shared
def test_node_link_reader_and_budget_rule():
    graph = read_graph(SHARED / "benchmarks" / "moccasin-graphs" /
                       "random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json")
    assert len(graph.ops) == 100 and sum(1 for _ in graph.edges()) == 236
    peak = baseline(build_instance(graph)).peak
    assert peak == 46319
    # the paper's budgets for G1 (Table 3)
    assert resolve_budget("fraction", 0.9, peak) == 41687
    assert resolve_budget("fraction", 0.8, peak) == 37055
