"""What every schedule run does once per instance, at 20,000 ops within the time a run is given (issue 40):
the edges' delay tables (one per distinct byte count, not per edge: 0.6 s), and the validation of each
schedule kept (an exact method that gives its warm start back is not checked again: 0.3 s)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from onnxpart.board import Board
from onnxpart.schedule import Instance, load_system
from onnxpart.schedule.common.methods import Context, Run, within_size
from onnxpart.strategy import Budget
from tests.conftest import FIXTURES


@pytest.mark.parametrize("system", ["cpu_t4_a100.yaml", "multinode_6x4.yaml", "host_8xa100.yaml"])
def test_edge_delays_are_each_edges_route(system):
    """Every edge's (K, K) delays are :meth:`System.delay_matrix` of its bytes, whatever byte counts repeat
    (routed one-hop pairs and switch costs included)."""
    sys_ = load_system(str(FIXTURES / "systems" / system))
    rng = np.random.default_rng(0)
    n = 60
    edges = [(i, j, float(rng.choice([0.0, 1e3, 2.5e6, 7e8]))) for j in range(1, n) for i in range(max(0, j - 3), j)]
    inst = Instance(np.ones((n, sys_.k)), edges, system=sys_)
    for e, (_, _, nbytes) in enumerate(inst.edges):
        assert np.array_equal(inst.delays[e], sys_.delay_matrix(nbytes, sys_.direct_links()))


def test_a_schedule_kept_twice_is_validated_once():
    checked = []
    run = Run(Budget(1.0), Board(), lambda sched: checked.append(sched) or [], "schedule")
    start, other = SimpleNamespace(makespan=2.0), SimpleNamespace(makespan=2.0)
    run.keep("heft", start, "ok", 0.1)
    run.keep("cpsat", start, "time_limit", 0.1)  # its warm start given back
    run.keep("sa", other, "ok", 0.1)
    assert checked == [start, other] and [f[1] for f in run.found] == ["heft", "cpsat", "sa"]


def test_a_method_too_big_for_its_time_is_listed_skipped_with_its_bound():
    """:func:`within_size`: the rule's reason in the method's row and, for a solver, in its bound's; the
    method itself does not run."""
    ran = []
    run = Run(Budget(1.0), Board(), lambda sched: [], "schedule")
    context = Context(None, SimpleNamespace(), run, lambda inst: None)
    sized = within_size(lambda name, ctx, seconds: ran.append(name), lambda name, ctx, seconds: "skipped: too big",
                        {"cpsat": "cp-sat"})
    result = sized("cpsat", context, 0.5)
    assert not ran and result.status == "skipped" and result.note == "skipped: too big"
    assert [(b.method, b.status, b.solver, b.value) for b in run.lower_bounds] == [("cpsat", "skipped", "cp-sat", None)]
