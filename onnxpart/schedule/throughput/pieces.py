"""Pieces of a batched schedule (``--objective throughput``): what ``onnxpart schedule`` writes as
runnable ONNX files, and ``--max-pieces`` for them. The latency pieces are in :mod:`onnxpart.schedule.latency.pieces`.

A batched schedule (:mod:`onnxpart.schedule.throughput.simulator`) runs *slices*: op ``i`` on device ``u`` for the
inputs ``[lo, hi)`` of the batch. A slice's *lane* is ``(device, [lo, hi))``: the slices of a lane run
on one device on the same inputs, so consecutive ones can run as one model.

* :func:`execution_order` — the slices by (start, end, topological position of the op, device). A
  slice starts no earlier than the end of every slice it reads (precedence per input, 3.3), ties broken
  by the topological order, so the order is a linear extension of the slices' dependencies, and a
  checker rebuilds it from the manifest's ``ops[]`` alone.
* :func:`pieces` — slices taken in that order; each joins its lane's open piece when every slice it
  reads is in that piece or an earlier one, else opens a new piece (numbered next). Every read goes from
  a piece to itself or a later one, so the pieces' dependency graph follows their numbering and cannot
  have a cycle; :func:`later_reads` re-checks that without trusting it. Plain data parallelism (every op
  split alike) gives one piece per lane; a device hop gives a new piece, as in latency.
* :func:`merge` — ``--max-pieces N``, the analogue of latency's merge (which moves a piece onto a
  neighbouring piece's device). A move takes a piece ``P`` and a neighbouring piece ``Q`` (numbers
  ``P ± 1``) and either moves ``P``'s slices onto ``Q``'s device (each op of ``P`` gives its inputs
  there: that device's slice grows by them) or gives ``P``'s ops the split of an op of ``Q`` (their
  slices line up with ``Q``'s lanes). Each round applies the move that leaves fewer pieces with the
  smallest batch makespan (the slices re-simulated in the schedule's op order), until no move lowers the
  count within the batch sizes (3.5), memory (3.7) and links. Plain data parallelism over at most ``N``
  devices is the other candidate; the faster one that has at most ``N`` pieces is kept, and
  :class:`InfeasibleError` (exit 4) when neither has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from onnxpart.errors import InfeasibleError
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.pieces import Piece
from onnxpart.schedule.throughput.heuristics import uniform
from onnxpart.schedule.throughput.model import Split, memory_violations, op_splits, overlapping_slices, ranges
from onnxpart.schedule.throughput.simulator import BatchSchedule, simulate, slice_order

Slice = tuple[int, int]  # (op, device)


def execution_order(inst: Instance, sched: BatchSchedule) -> list[Slice]:
    """Every slice by (start, end, topological position of its op, device): a linear extension of the
    slice precedence (module docstring)."""
    position = {op: k for k, op in enumerate(inst.topo)}
    return sorted(sched.start, key=lambda key: (sched.start[key], sched.end[key], position[key[0]], key[1]))


def _producers(inst: Instance, splits: Sequence[Split]) -> dict[Slice, list[Slice]]:
    """slice → the slices it reads (a predecessor's slices sharing inputs with it)."""
    out: dict[Slice, list[Slice]] = {}
    for _, src, dst, _ in overlapping_slices(inst, splits):
        out.setdefault(dst, []).append(src)
    return out


def pieces(inst: Instance, sched: BatchSchedule) -> list[Piece]:
    """The pieces of ``sched`` (module docstring), numbered in execution order; ``Piece.inputs`` is the
    lane's ``[lo, hi)``."""
    reads = _producers(inst, sched.splits)
    where: dict[Slice, int] = {}
    groups: list[tuple[tuple[int, tuple[int, int]], list[int]]] = []
    open_piece: dict[tuple[int, tuple[int, int]], int] = {}
    for i, u in execution_order(inst, sched):
        lane = (u, ranges(sched.splits[i])[u])
        p = open_piece.get(lane)
        if p is None or any(where[src] > p for src in reads.get((i, u), ())):
            p = open_piece[lane] = len(groups)
            groups.append((lane, []))
        groups[p][1].append(i)
        where[(i, u)] = p
    return [Piece(p, lane[0], tuple(ops), lane[1]) for p, (lane, ops) in enumerate(groups)]


def later_reads(inst: Instance, sched: BatchSchedule, parts: Sequence[Piece]) -> list[str]:
    """Slices that read a slice of a later piece (empty for a valid piece order), and slices no piece
    holds."""
    where = {(i, piece.device): piece.index for piece in parts for i in piece.ops}
    missing = [f"slice {inst.op_names[i]} on {inst.device_names[u]} is in no piece" for i, u in sched.start
               if (i, u) not in where]
    return missing or [f"piece {where[dst]} ({inst.op_names[dst[0]]}) reads {inst.op_names[src[0]]} of later "
                       f"piece {where[src]}" for _, src, dst, _ in overlapping_slices(inst, sched.splits)
                       if where[src] > where[dst]]


def merge(inst: Instance, sched: BatchSchedule, max_pieces: int) -> BatchSchedule:
    """At most ``max_pieces`` pieces: the faster of the greedy moves (module docstring) and plain data
    parallelism over at most ``max_pieces`` devices (one piece per lane; the moves alone cannot turn 16
    data-parallel lanes into 4, since each move keeps the other pieces' splits). :class:`InfeasibleError`
    when neither gets there. A schedule already within the limit is returned as it is."""
    if len(pieces(inst, sched)) <= max_pieces:
        return sched
    found = [s for s in (_merge_moves(inst, sched, max_pieces), uniform(inst, sched.batch, max_pieces).schedule)
             if s is not None and len(pieces(inst, s)) <= max_pieces]
    if not found:
        raise InfeasibleError(f"cannot merge {len(pieces(inst, sched))} pieces into --max-pieces {max_pieces}: "
                              "no move of a piece's slices onto a neighbouring piece's device or split leaves "
                              "fewer pieces within the devices' batch sizes, memory and links, and no data-"
                              f"parallel split over at most {max_pieces} devices fits")
    return min(found, key=lambda s: s.makespan)


def _merge_moves(inst: Instance, sched: BatchSchedule, max_pieces: int) -> BatchSchedule | None:
    """Greedy moves until at most ``max_pieces`` pieces; None when no move lowers the count."""
    choices = op_splits(inst, sched.batch)
    position = {op: k for k, op in enumerate(inst.topo)}
    while len(parts := pieces(inst, sched)) > max_pieces:
        best: tuple[tuple[float, int, int, int], BatchSchedule] | None = None
        first: dict[int, float] = {}  # each op's first slice start: the order every trial re-simulates in
        for (i, _), start in sched.start.items():
            first[i] = min(first.get(i, math.inf), start)
        op_order = sorted(range(inst.n), key=lambda i: (first[i], position[i]))
        for p, piece in enumerate(parts):
            for q in (p - 1, p + 1):
                if not 0 <= q < len(parts):
                    continue
                for move in _moves(sched, piece, parts[q]):
                    trial = _trial(inst, sched, move, choices, op_order)
                    if trial is None or (best is not None and trial.makespan > best[0][0]):
                        continue  # infeasible, or slower than a move already found: no need to count
                    count = len(pieces(inst, trial))
                    if count < len(parts) and (best is None or (trial.makespan, count, p, q) < best[0]):
                        best = ((trial.makespan, count, p, q), trial)
        if best is None:
            return None
        sched = best[1]
    return sched


def _moves(sched: BatchSchedule, piece: Piece, other: Piece) -> list[dict[int, Split]]:
    """The new splits (op → split) of ``piece``'s ops: its slices moved onto ``other``'s device, then
    each distinct split of ``other``'s ops."""
    u, v = piece.device, other.device
    onto = {}
    for i in piece.ops:
        split = list(sched.splits[i])
        split[v], split[u] = split[v] + split[u], 0
        onto[i] = tuple(split)
    return [onto] + [dict.fromkeys(piece.ops, split) for split in dict.fromkeys(sched.splits[j] for j in other.ops)]


def _trial(inst: Instance, sched: BatchSchedule, move: dict[int, Split], choices: list[list[Split]],
           op_order: list[int]) -> BatchSchedule | None:
    """``sched`` with the splits of ``move``, re-simulated in ``op_order`` (``sched``'s ops by their first
    slice's start); None when an op cannot use its new split, memory overflows or a transfer has no route."""
    if any(split not in choices[i] for i, split in move.items()):
        return None
    splits = list(sched.splits)
    for i, split in move.items():
        splits[i] = split
    if memory_violations(inst, splits):
        return None
    trial = simulate(inst, splits, slice_order(inst, splits, op_order))
    return trial if math.isfinite(trial.makespan) else None


def emitted_schedule(inst: Instance, sched: BatchSchedule, max_pieces: int | None) -> BatchSchedule:
    """The schedule the command writes: ``sched``, merged to ``max_pieces`` pieces when given."""
    return merge(inst, sched, max_pieces) if max_pieces is not None else sched


def checked_pieces(inst: Instance, sched: BatchSchedule) -> list[Piece]:
    """The pieces of an emitted schedule; a piece reading a later one is a bug (by construction none does)."""
    parts = pieces(inst, sched)
    bad = later_reads(inst, sched, parts)
    if bad:
        raise AssertionError(f"piece graph has a cycle: {bad[0]}")
    return parts
