"""Local search on a partition itself: move one op to another block, keep the move if it helps.

SliceGraph (Algorithm 1) is optimal *for its order*, but a partition that no topological order slices
into can still be better: the exact MIP found such partitions on REGAL graphs. This search starts
from any valid partition (blocks numbered in DAG order: ``block(u) ≤ block(v)`` for every edge
``u → v``, hence an acyclic quotient graph) and moves single ops.

**Moves.** Op v may go to any block ``b'`` with ``max_{u→v} block(u) ≤ b' ≤ min_{v→w} block(w)``;
exactly these moves keep every edge non-decreasing, so every partition visited is valid. Group moves
(when no single move helps): v with all its descendants in its block to the next block, or with all its
ancestors in its block to the previous one — valid for the same reason, moved sinks (sources) first.

**Acceptance.** A move is kept iff it lowers the block costs sorted in decreasing order
lexicographically (the bottleneck first, then the second largest cost, …): it lowers the bottleneck,
or keeps it and relieves the next blocks, which frees room for a later move that lowers it. Each kept
move strictly decreases a vector in a finite set, so the search ends.

**Incremental costs (Eq. 1, Eq. 3).** ``count[t, b]`` is the number of consumers of tensor t in block
b. With h the producer's block, t costs its producer ``transfer(t)`` as output iff some consumer lies
outside h, and costs every other block b with ``count[t, b] > 0`` ``transfer(t)`` as input: once per
direction, however many consumers are on the other side. Moving v changes only the tensors v produces
(their home) and the tensors v reads (their counts), so a move is priced from those tensors alone.

**Iterated local search.** :func:`iterated` kicks the current partition (a few random valid moves,
:func:`kick`), improves it, and keeps the result when its bottleneck is not higher (a walk over
plateaus); the best partition seen is returned, so the result is never worse than the start.

**Restarts.** The blocks of a partition, in block order with each block's ops in index order, form a
topological order that SliceGraph slices at least as well as the partition (the partition is one of
its slicings); :func:`improve` alternates the two until neither lowers the bottleneck.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from onnxpart.partition.model import Instance
from onnxpart.partition.runs import best_slicing

log = logging.getLogger(__name__)

_REL = 1e-9  # relative tolerance of "strictly lower"


@dataclass(frozen=True)
class LocalSearchResult:
    assignment: np.ndarray  # op -> block (0..k-1), blocks in DAG order
    value: float  # bottleneck cost (Eq. 3)
    moves: int  # single-op moves kept
    rounds: int  # local search / SliceGraph alternations


class _State:
    """A partition with its per-block cost terms, updated move by move."""

    def __init__(self, inst: Instance, assignment: np.ndarray, k: int):
        self.inst, self.k = inst, k
        self.block = np.asarray(assignment, dtype=np.int64).copy()
        n, T = inst.n, inst.num_tensors
        self.produced: list[list[int]] = [[] for _ in range(n)]
        self.read: list[list[int]] = [[] for _ in range(n)]
        for t in range(T):
            self.produced[int(inst.producer[t])].append(t)
            for v in inst.consumers(t):
                self.read[int(v)].append(t)
        self.preds = inst.predecessors()
        self.succs = inst.successors()
        owner = np.repeat(np.arange(T), np.diff(inst.cons_ptr))
        self.count = np.zeros((T, k), dtype=np.int64)
        np.add.at(self.count, (owner, self.block[inst.cons_idx]), 1)
        self.work = np.bincount(self.block, weights=inst.work, minlength=k)
        self.params = np.bincount(self.block, weights=inst.params, minlength=k)
        self.io = self._all_io()
        self.cost = self._costs(self.work, self.params, self.io)

    def _costs(self, work: np.ndarray, params: np.ndarray, io: np.ndarray) -> np.ndarray:
        return work + io + self.inst.overflow(params)

    def _all_io(self) -> np.ndarray:
        """Σ over tensors of :meth:`_tensor_io`, vectorized (what the moves then update)."""
        home = self.block[self.inst.producer]
        elsewhere = self.count > 0
        elsewhere[np.arange(len(home)), home] = False
        crossing = elsewhere.any(axis=1)
        io = (elsewhere * self.inst.transfer[:, None]).sum(axis=0)
        return io + np.bincount(home[crossing], weights=self.inst.transfer[crossing], minlength=self.k)

    def _tensor_io(self, t: int, count: np.ndarray, home: int) -> np.ndarray:
        """io_in + io_out that tensor t adds to every block (Eq. 1)."""
        paid = (count > 0).astype(float)
        paid[home] = 0.0
        if paid.any():
            paid[home] = 1.0
        return paid * self.inst.transfer[t]

    def range_of(self, v: int) -> tuple[int, int]:
        """Blocks v may move to without a backward edge."""
        lo = int(self.block[self.preds[v]].max(initial=0))
        hi = int(self.block[self.succs[v]].min(initial=self.k - 1))
        return lo, hi

    def try_move(self, v: int, target: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(work, params, io) after moving v to ``target`` if that lowers the sorted costs, else None."""
        return self.try_group([v], target)

    def apply(self, v: int, target: int, terms: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.apply_group([v], target, terms)

    def closure(self, v: int, forward: bool) -> list[int]:
        """v and its descendants (``forward``) or ancestors inside v's block, in an order in which moving
        them one by one to the next (previous) block keeps every edge non-decreasing: sinks (sources)
        of the group first."""
        links = self.succs if forward else self.preds
        home, seen, stack = int(self.block[v]), {v}, [v]
        while stack:
            for w in links[stack.pop()].tolist():
                if w not in seen and self.block[w] == home:
                    seen.add(w)
                    stack.append(w)
        return sorted(seen, reverse=forward)  # op indices are topological

    def try_group(self, group: list[int], target: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`try_move` for moving the ops of ``group`` (all in one block, in a valid order) together."""
        io, work, params = self.io.copy(), self.work.copy(), self.params.copy()
        counts: dict[int, np.ndarray] = {}
        homes: dict[int, int] = {}
        for v in group:
            source = int(self.block[v])
            for t in self.produced[v]:
                count = counts.get(t, self.count[t])
                io -= self._tensor_io(t, count, source)
                io += self._tensor_io(t, count, target)
                homes[t] = target
            for t in self.read[v]:
                home = homes.get(t, int(self.block[self.inst.producer[t]]))
                count = counts.get(t, self.count[t])
                io -= self._tensor_io(t, count, home)
                moved = count.copy()
                moved[source] -= 1
                moved[target] += 1
                counts[t] = moved
                io += self._tensor_io(t, moved, home)
            work[source] -= self.inst.work[v]
            work[target] += self.inst.work[v]
            params[source] -= self.inst.params[v]
            params[target] += self.inst.params[v]
        if lex_lower(self._costs(work, params, io), self.cost):
            return work, params, io
        return None

    def apply_group(self, group: list[int], target: int, terms: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        for v in group:
            source = int(self.block[v])
            for t in self.read[v]:
                self.count[t, source] -= 1
                self.count[t, target] += 1
            self.block[v] = target
        self.work, self.params, io = terms
        self.io = np.maximum(io, 0.0)  # clear float dust
        self.cost = self._costs(self.work, self.params, self.io)


def lex_lower(new: np.ndarray, old: np.ndarray) -> bool:
    """True iff ``new`` sorted decreasingly is lexicographically below ``old`` sorted decreasingly, with
    differences under a relative tolerance counted as ties."""
    a, b = -np.sort(-new), -np.sort(-old)
    tol = _REL * max(1.0, float(b[0]))
    diff = np.flatnonzero(np.abs(a - b) > tol)
    return bool(len(diff)) and a[diff[0]] < b[diff[0]]


def descend(inst: Instance, assignment: np.ndarray, k: int, rng: np.random.Generator,
            deadline: float = np.inf) -> tuple[np.ndarray, int]:
    """Single-op moves until none lowers the sorted block costs (or the deadline); ops are tried in one
    random order drawn from ``rng``, target blocks nearest first. When no single move helps, group
    moves are tried: an op with its descendants inside its block to the next block, or with its
    ancestors inside its block to the previous one (a chain moved op by op would pay for its inner
    tensors halfway). Returns the partition and the moves."""
    state = _State(inst, assignment, k)
    ops = rng.permutation(inst.n)
    moves, improved = 0, True
    while improved and time.monotonic() < deadline:
        improved = False
        for v in ops:
            v = int(v)
            lo, hi = state.range_of(v)
            here = int(state.block[v])
            for target in sorted(range(lo, hi + 1), key=lambda b: (abs(b - here), b)):
                if target == here:
                    continue
                terms = state.try_move(v, target)
                if terms is not None:
                    state.apply(v, target, terms)
                    moves += 1
                    improved = True
                    break
        if improved:
            continue
        for v in ops:
            if time.monotonic() >= deadline:
                break
            v, here = int(v), int(state.block[v])
            for forward, target in ((True, here + 1), (False, here - 1)):
                if not 0 <= target < k:
                    continue
                group = state.closure(v, forward)
                if len(group) < 2:
                    continue  # a single op: tried above
                terms = state.try_group(group, target)
                if terms is not None:
                    state.apply_group(group, target, terms)
                    moves += 1
                    improved = True
                    break
    return state.block, moves


def kick(inst: Instance, assignment: np.ndarray, k: int, rng: np.random.Generator, size: int) -> np.ndarray:
    """Move ``size`` random ops, one after another, each to a random block of its valid range (the
    perturbation of an iterated local search; the partition stays valid)."""
    block = np.asarray(assignment, dtype=np.int64).copy()
    preds, succs = inst.predecessors(), inst.successors()
    for v in rng.choice(inst.n, size=min(size, inst.n), replace=False):
        lo = int(block[preds[v]].max(initial=0))
        hi = int(block[succs[v]].min(initial=k - 1))
        block[v] = rng.integers(lo, hi + 1)
    return block


def block_cost_array(inst: Instance, assignment: np.ndarray, k: int) -> np.ndarray:
    """Eq. (3) for every block, as one array (what :func:`lex_lower` compares)."""
    return _State(inst, assignment, k).cost


def _value(inst: Instance, assignment: np.ndarray, k: int) -> float:
    return float(block_cost_array(inst, assignment, k).max()) if inst.n else 0.0


def block_order(assignment: np.ndarray) -> np.ndarray:
    """The ops sorted by (block, index): a topological order when no edge goes to an earlier block (op
    indices are topological), and the partition is one of its slicings."""
    return np.lexsort((np.arange(len(assignment)), assignment))


def improve(inst: Instance, assignment: np.ndarray, k: int, seed: int = 0, deadline: float = np.inf,
            target: float = 0.0) -> LocalSearchResult:
    """Alternate :func:`descend` and SliceGraph on :func:`block_order` while the bottleneck drops; stop
    at ``deadline`` or once the bottleneck reaches ``target`` (a proven lower bound). Never worse than
    the start; deterministic for a given seed when the deadline is not hit."""
    rng = np.random.default_rng(seed)
    best = np.asarray(assignment, dtype=np.int64).copy()
    best_value = _value(inst, best, k)
    moves = rounds = 0
    while inst.n and time.monotonic() < deadline and best_value > target * (1 + _REL):
        rounds += 1
        best, count = descend(inst, best, k, rng, deadline)  # never raises the bottleneck
        moves += count
        sliced = best_slicing(inst, block_order(best), k).assignment
        value = _value(inst, sliced, k)
        if value >= _value(inst, best, k) * (1 - _REL):
            best_value = _value(inst, best, k)
            break
        best, best_value = sliced, value
    log.debug("local search: %d moves in %d rounds, bottleneck %.6g", moves, rounds, best_value)
    return LocalSearchResult(best, best_value, moves, rounds)


def iterated(inst: Instance, assignment: np.ndarray, k: int, seed: int, stop: Callable[[float], bool],
             deadline: float = np.inf, kicks: int = 0) -> LocalSearchResult:
    """Iterated local search from ``assignment`` (see module doc) until ``stop(best value)`` or the
    deadline, or after ``kicks`` kicks when that is positive. Kicks move 2–5 ops; every random choice
    comes from ``seed``."""
    rng = np.random.default_rng(seed)
    first = improve(inst, assignment, k, int(rng.integers(1 << 30)), deadline)
    best = current = first
    moves, rounds, done = first.moves, first.rounds, 0
    while inst.n and not stop(best.value) and time.monotonic() < deadline and (kicks <= 0 or done < kicks):
        done += 1
        start = kick(inst, current.assignment, k, rng, int(rng.integers(2, 6)))
        trial = improve(inst, start, k, int(rng.integers(1 << 30)), deadline)
        moves, rounds = moves + trial.moves, rounds + trial.rounds
        if trial.value <= current.value * (1 + _REL):
            current = trial
            if trial.value < best.value * (1 - _REL):
                best = trial
    log.debug("iterated local search: %d kicks, bottleneck %.6g", done, best.value)
    return LocalSearchResult(best.assignment, best.value, moves, rounds)
