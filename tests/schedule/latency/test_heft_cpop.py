"""HEFT and CPoP as Topcuoglu, Hariri and Wu define them (IEEE TPDS 13(3), 2002), checked against a second
implementation written here from the paper's pseudocode (its Figures 3 and 5 and equations (1)–(7)), on
random DAGs with heterogeneous links: per-pair latencies and bandwidths, so the mean communication cost
``c̄ = L̄ + data / B̄`` (mean latency, mean bandwidth) differs from a mean of the pairs' delays.

Costs are random floats, so no two ranks or finish times tie: the paper breaks ties at random, and the
comparison needs none."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxpart.schedule import Instance
from onnxpart.schedule.latency import heuristics
from onnxpart.schedule.latency.simulator import validate


def random_dag(rng: np.random.Generator, n: int, k: int) -> dict:
    """One entry op (0) and one exit op (n − 1), as the paper assumes, and random edges between the
    ops between them; float times on ``k`` devices; a latency and a bandwidth per ordered device pair."""
    edges = {(i, j): float(rng.uniform(1, 8)) for i in range(1, n - 1) for j in range(i + 1, n - 1)
             if rng.random() < 0.3}
    inner = range(1, n - 1)
    edges |= {(0, j): float(rng.uniform(1, 8)) for j in inner if not any((i, j) in edges for i in inner)}
    edges |= {(i, n - 1): float(rng.uniform(1, 8)) for i in inner if not any((i, j) in edges for j in inner)}
    latency = rng.uniform(0.1, 1.0, size=(k, k))
    bandwidth = rng.choice([0.5, 1.0, 8.0], size=(k, k))
    return dict(time=rng.uniform(0.5, 6.0, size=(n, k)), edges=edges, latency=latency, bandwidth=bandwidth)


class Paper:
    """The paper's definitions, on the case's own arrays (nothing from onnxpart)."""

    def __init__(self, case: dict):
        self.time, self.edges = case["time"], case["edges"]
        self.latency, self.bandwidth = case["latency"], case["bandwidth"]
        self.n, self.k = self.time.shape
        off = ~np.eye(self.k, dtype=bool)
        self.mean_latency, self.mean_bandwidth = self.latency[off].mean(), self.bandwidth[off].mean()  # L̄, B̄
        self.succ = {i: [j for (a, j) in self.edges if a == i] for i in range(self.n)}
        self.pred = {j: [i for (i, b) in self.edges if b == j] for j in range(self.n)}

    def w_bar(self, i: int) -> float:  # eq. (1)
        return float(self.time[i].mean())

    def c_bar(self, i: int, j: int) -> float:  # eq. (2)
        return self.mean_latency + self.edges[(i, j)] / self.mean_bandwidth

    def c(self, i: int, j: int, p: int, q: int) -> float:  # eq. (2) on one link
        return 0.0 if p == q else self.latency[p, q] + self.edges[(i, j)] / self.bandwidth[p, q]

    def rank_u(self) -> list[float]:  # eq. (7)
        rank: dict[int, float] = {}

        def r(i: int) -> float:
            if i not in rank:
                rank[i] = self.w_bar(i) + max((self.c_bar(i, j) + r(j) for j in self.succ[i]), default=0.0)
            return rank[i]
        return [r(i) for i in range(self.n)]

    def rank_d(self) -> list[float]:  # eq. (8)
        rank: dict[int, float] = {}

        def r(j: int) -> float:
            if j not in rank:
                rank[j] = max((r(i) + self.w_bar(i) + self.c_bar(i, j) for i in self.pred[j]), default=0.0)
            return rank[j]
        return [r(j) for j in range(self.n)]

    def eft(self, i: int, p: int, proc: dict, aft: dict, busy: dict) -> tuple[float, float]:
        """(EST, EFT) of task ``i`` on processor ``p``, insertion-based (eqs. (3)–(4)): the earliest idle
        time slot on ``p`` after every predecessor's data has arrived, long enough for ``i``."""
        ready = max((aft[m] + self.c(m, i, proc[m], p) for m in self.pred[i]), default=0.0)
        w = self.time[i, p]
        for start in sorted({ready} | {end for _, end in busy[p] if end > ready}):
            if all(start + w <= s or start >= e for s, e in busy[p]):
                return start, start + w
        raise AssertionError("the slot after the last busy interval is always free")

    def place(self, i: int, processors, proc: dict, aft: dict, busy: dict) -> None:
        finish, est, p = min((*reversed(self.eft(i, p, proc, aft, busy)), p) for p in processors)
        proc[i], aft[i] = p, finish
        busy[p].append((est, finish))

    def heft(self) -> tuple[list[int], float]:
        """Figure 3: tasks by nonincreasing rank_u, each on the processor minimizing its EFT."""
        rank = self.rank_u()
        assert len(set(rank)) == self.n  # no ties to break
        proc: dict = {}
        aft: dict = {}
        busy: dict = {p: [] for p in range(self.k)}
        for i in sorted(range(self.n), key=lambda i: -rank[i]):
            self.place(i, range(self.k), proc, aft, busy)
        return [proc[i] for i in range(self.n)], max(aft.values())

    def cpop(self) -> tuple[list[int], float]:
        """Figure 5: priorities rank_u + rank_d; the critical path from the entry task through successors
        of priority |CP|; its processor the one minimizing the path's total time; a priority queue of
        ready tasks, critical tasks on that processor, the others where their EFT is least."""
        priority = np.add(self.rank_u(), self.rank_d())
        cp_size = priority[0]
        critical, task = {0}, 0
        while task != self.n - 1:
            task = next(j for j in self.succ[task] if math.isclose(priority[j], cp_size, rel_tol=1e-9))
            critical.add(task)
        p_cp = min(range(self.k), key=lambda p: sum(self.time[i, p] for i in critical))
        proc: dict = {}
        aft: dict = {}
        busy: dict = {p: [] for p in range(self.k)}
        queue = [0]
        while queue:
            i = max(queue, key=lambda t: priority[t])
            queue.remove(i)
            self.place(i, [p_cp] if i in critical else range(self.k), proc, aft, busy)
            queue += [j for j in self.succ[i] if all(m in proc for m in self.pred[j]) and j not in queue]
        return [proc[i] for i in range(self.n)], max(aft.values())


def onnxpart_instance(case: dict) -> Instance:
    return Instance(case["time"], [(i, j, b) for (i, j), b in case["edges"].items()], latency=case["latency"],
                    bandwidth=case["bandwidth"])


@pytest.mark.parametrize("method", ["heft", "cpop"])
def test_heft_and_cpop_are_the_papers_on_random_dags_with_heterogeneous_links(method):
    for seed in range(40):
        rng = np.random.default_rng(seed)
        case = random_dag(rng, n=int(rng.integers(6, 18)), k=int(rng.integers(2, 5)))
        inst = onnxpart_instance(case)
        mapping, makespan = getattr(Paper(case), method)()
        got = getattr(heuristics, method)(inst).schedule
        assert validate(inst, got) == []
        assert list(got.mapping) == mapping, f"seed {seed}"
        assert got.makespan == pytest.approx(makespan, rel=1e-12), f"seed {seed}"


def test_cpop_puts_the_critical_path_on_one_device_heft_need_not():
    """A chain of two ops with a side branch: CPoP keeps the chain together on the device fastest for all
    of it, where HEFT moves its second op to the device where it alone finishes first."""
    time = np.array([[1.0, 3.0], [5.0, 4.0], [1.0, 1.0], [1.0, 9.0]])
    edges = [(0, 1, 1.0), (0, 2, 1.0), (1, 3, 1.0), (2, 3, 1.0)]
    inst = Instance(time, edges, latency=0.0, bandwidth=100.0)
    assert list(heuristics.cpop(inst).schedule.mapping)[:2] == [0, 0]
    assert list(heuristics.heft(inst).schedule.mapping)[:2] == [0, 1]
