"""The greedy memory-minimizing order keeps its ready ops in a heap; it must pick what scanning every ready
op at every step picks (the rule of :func:`onnxpart.remat.orders.greedy_order`, written out plainly here)."""

from __future__ import annotations

import pytest

from onnxpart.onnx_io import load_graph
from onnxpart.remat.model import build_instance
from onnxpart.remat.orders import greedy_order
from tests.conftest import light
from tests.remat.helpers import branching_dag, random_dag


def scanned_order(instance) -> tuple[int, ...]:
    """Every step: the ready op with the least (outputs − inputs it frees, outputs + internal, position)."""
    n = instance.n_ops
    position = {v: p for p, v in enumerate(instance.order)}
    remaining = [len(c) for c in instance.value_consumers]
    done: set[int] = set()
    order = []
    while len(order) < n:
        ready = [v for v in range(n) if v not in done
                 and all(u >= n or u in done for u in instance.dag.pred_lists[v])]

        def key(v):
            freed = sum(instance.value_sizes[x] for x in set(instance.node_inputs[v])
                        if remaining[x] == 1 and not instance.value_to_end[x])
            out = sum(instance.value_sizes[x] for x in instance.node_outputs[v])
            return out - freed, out + instance.internal[v], position[v]

        v = min(ready, key=key)
        done.add(v)
        order.append(v)
        for x in instance.node_inputs[v]:
            remaining[x] -= 1
    return tuple(order)


@pytest.mark.parametrize("seed", range(40))
def test_heap_order_is_the_scanned_order_on_random_dags(seed):
    for inst in (branching_dag(12 + seed, seed), random_dag(10 + seed % 20, seed)):
        assert greedy_order(inst) == scanned_order(inst)


def test_heap_order_is_the_scanned_order_on_a_light_model():
    inst = build_instance(load_graph(light("shufflenet"))[0])
    assert greedy_order(inst) == scanned_order(inst)
