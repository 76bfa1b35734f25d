"""Device-contiguous pieces of a schedule: what ``onnxpart schedule`` writes as runnable ONNX files.

* :func:`canonical` — the schedule re-simulated (append list scheduling) in its start-time order, so a
  checker can rebuild it from the manifest's mapping and order alone. It starts no op later than the
  schedule it came from (the argument in :mod:`onnxpart.schedule.latency.simulator`), so the makespan never
  grows.
* :func:`pieces` — the ops in that execution order, each joining its device's latest piece unless it
  reads an op of a piece opened after that one (running the pieces one after the other would then loop):
  then it opens a new piece. So a piece reads only tensors of earlier pieces, its own or graph inputs —
  the pieces' dependency graph is acyclic by construction, and :func:`later_reads` re-checks it without
  trusting that — and ops of parallel branches on two devices interleaved in time stay in one piece per
  device: a new piece (a device switch, a session launch) only where data comes back from another device.
* :func:`merge` — ``--max-pieces``: fold the piece whose move onto a neighbour's device lengthens the
  makespan least, until at most N are left; refuse (infeasible) when no move is feasible (memory 3.7,
  no route). Fewer device switches trade latency for fewer transfers (thesis Section 3.3, MILP-SPLIT's
  module boundaries: ../shared/papers/heterogeneous-scheduling-milp-split.txt).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnxpart.errors import InfeasibleError
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.pieces import Piece
from onnxpart.schedule.latency.simulator import Schedule, order_by_start, simulate


def canonical(inst: Instance, sched: Schedule) -> Schedule:
    """``sched``'s mapping re-simulated in its start order (append): re-simulatable from the manifest."""
    return simulate(inst, sched.mapping, order_by_start(inst, sched.start))


def pieces(inst: Instance, mapping: Sequence[int], order: Sequence[int]) -> list[Piece]:
    """The pieces of ``mapping`` in the topological ``order`` (module docstring), numbered as opened."""
    runs: list[tuple[int, list[int]]] = []
    latest: dict[int, int] = {}  # device -> its latest piece
    where = np.full(inst.n, -1, dtype=np.int64)
    for i in order:
        u = int(mapping[i])
        p = latest.get(u)
        if p is None or any(where[j] > p for j in inst.preds[i]):
            p = latest[u] = len(runs)
            runs.append((u, []))
        runs[p][1].append(int(i))
        where[i] = p
    return [Piece(p, u, tuple(ops)) for p, (u, ops) in enumerate(runs)]


def piece_of(inst: Instance, parts: Sequence[Piece]) -> np.ndarray:
    """op → piece index."""
    out = np.full(inst.n, -1, dtype=np.int64)
    for piece in parts:
        out[list(piece.ops)] = piece.index
    return out


def later_reads(inst: Instance, assignment: np.ndarray) -> list[str]:
    """Edges whose consumer's piece comes before its producer's (empty for a valid piece order)."""
    return [f"piece {assignment[j]} ({inst.op_names[j]}) reads {inst.op_names[i]} of later piece {assignment[i]}"
            for i, j, _ in inst.edges if assignment[i] > assignment[j]]


def merge(inst: Instance, sched: Schedule, max_pieces: int) -> Schedule:
    """At most ``max_pieces`` pieces: repeatedly move the piece whose move onto a neighbouring piece's
    device leaves fewer pieces with the smallest makespan (ties: earliest piece), keeping the execution
    order. Raises :class:`InfeasibleError` naming the reason when no feasible move is left."""
    order, mapping = list(sched.order), np.asarray(sched.mapping).copy()
    while len(runs := pieces(inst, mapping, order)) > max_pieces:
        best: tuple[float, int, int] | None = None
        best_mapping = None
        for p, piece in enumerate(runs):
            for q in (p - 1, p + 1):
                if not 0 <= q < len(runs):
                    continue
                trial = mapping.copy()
                trial[list(piece.ops)] = runs[q].device
                if inst.mapping_violations(trial) or len(pieces(inst, trial, order)) >= len(runs):
                    continue
                key = (simulate(inst, trial, order, check=False).makespan, p, q)
                if best is None or key < best:
                    best, best_mapping = key, trial
        if best_mapping is None:
            reason = inst.mapping_violations(_moved(mapping, runs))
            raise InfeasibleError(f"cannot merge {len(runs)} pieces into --max-pieces {max_pieces}: every merge "
                                  f"breaks a hard rule or leaves as many pieces "
                                  f"({reason[0] if reason else 'memory or links'})")
        mapping = best_mapping
    return simulate(inst, mapping, order)


def _moved(mapping: np.ndarray, runs: list[Piece]) -> np.ndarray:
    """The first piece moved onto its neighbour's device (for the refusal message)."""
    trial = mapping.copy()
    trial[list(runs[0].ops)] = runs[1].device
    return trial


def emitted_schedule(inst: Instance, sched: Schedule, max_pieces: int | None) -> Schedule:
    """The schedule the command writes: :func:`canonical`, merged to ``max_pieces`` pieces when given."""
    sched = canonical(inst, sched)
    return merge(inst, sched, max_pieces) if max_pieces is not None else sched


def checked_pieces(inst: Instance, sched: Schedule) -> list[Piece]:
    """The pieces of an emitted schedule; a piece reading a later one is a bug (the order is topological)."""
    parts = pieces(inst, sched.mapping, sched.order)
    bad = later_reads(inst, piece_of(inst, parts))
    if bad:
        raise AssertionError(f"piece graph has a cycle: {bad[0]}")
    return parts
