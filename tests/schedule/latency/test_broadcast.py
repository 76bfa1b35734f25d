"""The broadcast relaxation (:mod:`onnxpart.schedule.latency.broadcast`): SPLIT on the graph without the
ops that make a tensor every layer reads is a proven lower bound — never above the brute-force optimum —
and its schedule lifted onto the whole graph is a valid one."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxpart.schedule import Instance, Options, from_graph, load_system, solve
from onnxpart.schedule.common.modules import cut_ops, has_modules
from onnxpart.schedule.latency import broadcast
from onnxpart.schedule.latency.simulator import validate
from tests.export_like import kv_cache_decoder
from tests.schedule.helpers import brute_force

FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[3] / "fixtures"


def masked_layers(rng: np.random.Generator, layers: int, k: int = 2) -> dict:
    """A transformer-like DAG: the residual stream (op 0, the main source) through ``layers`` layers of three
    ops ``a → b → c`` with the residual edge into ``c``, and a mask (op 1, a second source) read by every
    layer's ``b``: no op but the source separates one layer from the next."""
    edges, x = [], 0
    for layer in range(layers):
        a, b, c = 2 + 3 * layer, 3 + 3 * layer, 4 + 3 * layer
        edges += [(x, a, float(rng.integers(1, 5))), (a, b, float(rng.integers(1, 5))), (1, b, float(rng.integers(1, 5))),
                  (b, c, float(rng.integers(1, 5))), (x, c, float(rng.integers(1, 5)))]
        x = c
    n = 2 + 3 * layers
    return dict(time=rng.integers(1, 9, size=(n, k)).astype(float), edges=edges,
                latency=float(rng.integers(0, 3)), bandwidth=float(rng.choice([1.0, 2.0, 4.0])))


def case_instance(case: dict) -> Instance:
    return Instance(case["time"], case["edges"], latency=case["latency"], bandwidth=case["bandwidth"])


@pytest.mark.parametrize("seed", range(8))
def test_the_relaxed_bound_never_exceeds_the_optimum(seed):
    """``broadcast-dp`` ≤ the brute-force optimum on masked layers (a dishonest relaxation — the mask op
    charged in sequence before the layers, say — exceeds it on some of these), and the lifted schedule is
    valid and no shorter than the optimum."""
    case = masked_layers(np.random.default_rng(seed), layers=2)
    inst = case_instance(case)
    assert not has_modules(inst, cut_ops(inst))  # the mask breaks every one-op cut
    relaxed = broadcast.relaxation(inst)
    assert relaxed is not None and relaxed[2] == [1]  # the mask is the one op deleted
    optimum, _ = brute_force(case["time"], case["edges"], case["latency"], case["bandwidth"])
    sched, bound = broadcast.broadcast_split(inst, relaxed, time_limit=5.0)
    assert bound.method == "broadcast-dp" and bound.value <= optimum + 1e-9
    assert validate(inst, sched) == [] and sched.makespan >= optimum - 1e-9


def test_no_relaxation_where_the_rest_has_no_modules_or_there_is_one_source():
    """An edge skipping a layer leaves no one-op cut once the mask is deleted: SPLIT on the relaxation
    would be a whole-graph solve of a smaller graph, weaker than the whole graph's own; so is a graph
    with one source (nothing to delete)."""
    case = masked_layers(np.random.default_rng(0), layers=2)
    case["edges"].append((2, 7, 1.0))  # the first layer's first op into the second layer's last
    assert broadcast.relaxation(case_instance(case)) is None
    case["edges"].append((0, 1, 1.0))  # the mask made from the residual input: one source
    assert broadcast.broadcast_ops(case_instance(case)) == []


def test_the_relaxation_gets_most_of_the_time_only_where_the_graph_has_no_one_op_module():
    """Masked layers (the mask breaks every one-op cut) give the relaxation :data:`SHARE_WITHOUT_MODULES`;
    a chain, whose middle op is a cut op, leaves it :data:`SHARE` (SPLIT on the graph proves its own
    bound) — fails if the share ignores the graph's own modules."""
    case = masked_layers(np.random.default_rng(0), layers=2)
    assert broadcast.share(case_instance(case)) == broadcast.SHARE_WITHOUT_MODULES
    assert broadcast.share(Instance(np.ones((3, 2)), [(0, 1, 1.0), (1, 2, 1.0)])) == broadcast.SHARE


def test_the_kv_cache_decoder_step_gets_modules_and_a_bound(tmp_path):
    """On the exporter-shaped KV-cache decoder step (the additive mask read by every layer: no one-op cut),
    deleting the ops not downstream of the token input frees a module per layer, and ``solve``'s default
    method reports ``broadcast-dp``, at most the schedule."""
    from onnxpart.onnx_io import load_graph

    path = tmp_path / "decoder.onnx"
    onnx.save(kv_cache_decoder(layers=3), path)
    graph, _ = load_graph(path, dims={"batch": 1, "sequence": 4, "past_sequence_length": 3,
                                      "total_sequence_length": 7})
    inst = from_graph(graph, load_system(str(FIXTURES / "systems" / "cpu_t4_a100.yaml")))
    relaxed = broadcast.relaxation(inst)
    assert relaxed is not None and broadcast.largest_module(inst) == inst.n
    assert broadcast.largest_module(relaxed[0]) < inst.n // 3  # a module per layer
    assert broadcast.share(inst) == broadcast.SHARE_WITHOUT_MODULES  # no one-op cut: the relaxation's time
    sol = solve(inst, Options(methods=("met", "split"), time_limit=1.0))
    found = {b.method: b.value for b in sol.lower_bounds if b.value is not None}
    assert validate(inst, sol.schedule) == [] and 0 < found["broadcast-dp"] <= sol.makespan * (1 + 1e-9)
