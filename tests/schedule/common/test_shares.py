"""One run's time on the shared base (:class:`onnxpart.strategy.Budget`, :func:`onnxpart.strategy.run_methods`):
the schedule registries' weights cut it, on one clock (here a fake one, so the shares are exact)."""

from __future__ import annotations

from types import SimpleNamespace

from onnxpart.board import Board
from onnxpart.schedule import latency, throughput
from onnxpart.schedule.common.methods import CONSTRUCTIVE, Context, Run, registry
from onnxpart.strategy import FLOOR, Budget, run_methods


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_latency_baselines_get_no_share_and_each_weighted_method_its_share_of_what_is_left():
    """Constructive baselines weigh 0 (the least share); SA, EA and the exact methods weigh 1 each, and
    what one leaves unused goes to the next; each exact method's end is reported on the board."""
    clock, given, phases = FakeClock(), {}, []

    def record(spent):
        def run(name, context, seconds):
            given[name] = seconds
            clock.t += spent
            return context.run.keep(name, None, "failed", spent)
        return run

    runs = {name: record(0.0 if name in CONSTRUCTIVE else 1.0) for name in latency.METHODS.names}
    table = registry(runs, {m.name: m.weight for m in latency.METHODS})
    run = Run(Budget(8.0, clock=clock), Board(lambda progress: phases.append(progress.phase)), lambda s: [], "schedule")
    asked = SimpleNamespace(methods=("split", "cpsat", "sa", "heft"))
    run_methods(table.select(asked.methods), Context(None, asked, run, lambda inst: None), asked, run.board,
                run.budget)
    assert given == {"heft": FLOOR, "sa": 8.0 / 3, "cpsat": (8.0 - 1.0) / 2, "split": 6.0}
    assert phases == ["cpsat", "split"]  # in registry order, whatever the order asked
    assert [r.method for r in run.results] == ["heft", "sa", "cpsat", "split"]


def test_throughput_methods_weigh_the_same():
    assert {m.weight for m in throughput.METHODS} == {1.0}
    assert [m.name for m in latency.METHODS if m.weight == 0] == list(CONSTRUCTIVE)
