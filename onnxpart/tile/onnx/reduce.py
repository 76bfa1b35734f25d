"""Dominance reductions of an ONNX layout instance before the exact model (:mod:`onnxpart.tile.onnx`).

Two rules, applied until neither removes anything; each keeps an optimal plan inside what remains,
so the optimum — and any proven bound of the reduced model — is that of the full instance:

* **layouts** — tensor t's layout a is dominated by b when, for every layout a kept reader slot of t
  may want (w) and every layout its producer may write (m), reshard(b -> w) ≤ reshard(a -> w) and
  reshard(m -> b) ≤ reshard(m -> a), and b takes no more bytes per device (only with
  ``--device-memory``). Swapping a for b in any plan costs no more and fits no worse. Without a
  memory bound this leaves graph inputs and weights replicated only (reading R is free).
* **algorithms** — op o's choice c is dominated by c' when c' computes no slower (work/divisor) and, on
  every slot and every kept layout of its tensor, reshards no dearer (reads: a -> c'.in ≤ a -> c.in;
  writes: c'.out -> a ≤ c.out -> a). Swapping c for c' costs no more.

Ties keep the first (catalog order), so the reduction is deterministic. This is the classic
dominated-label elimination of MAP inference in pairwise models (e.g. Desmet et al.'s "dead-end
elimination", Nature 1992), here with collective costs as the pairwise terms.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from onnxpart.tile.onnx.model import LayoutInstance


@dataclass(frozen=True)
class Reduced:
    """Kept layouts per tensor and choice indices per op (both in the instance's order), and for every
    removed layout the kept one that replaces it (:meth:`replace`)."""

    domains: dict[str, tuple]
    choices: list[tuple[int, ...]]
    replaced: dict[tuple[str, object], object]

    def replace(self, layouts: dict) -> dict:
        """A plan's layouts with every removed layout swapped for its dominator (no dearer, no bigger)."""
        out = {}
        for t, a in layouts.items():
            while (t, a) in self.replaced:
                a = self.replaced[(t, a)]
            out[t] = a
        return out


def reduce_instance(inst: LayoutInstance, max_rounds: int = 10, deadline: float | None = None,
                    keep: frozenset[str] = frozenset()) -> Reduced | None:
    """Apply both rules (module docstring) until a fixpoint (or ``max_rounds``), the tensors in ``keep`` keeping
    every layout (the algorithm rule then weighs all of them: a plan with those tensors in any layouts keeps
    an optimum); None past ``deadline`` (``time.monotonic()`` seconds, checked per tensor and per op). Kept in
    ``inst.memo``: tile's exact method and a bound on the same instance
    (:func:`onnxpart.tile.onnx.relax.split_bound`) reduce it once."""
    key = ("reduced", max_rounds, inst.memory, keep)
    if key not in inst.memo:
        reduced = _reduce(inst, max_rounds, deadline, keep)
        if reduced is None:
            return None
        inst.memo[key] = reduced
    return inst.memo[key]


def _reduce(inst: LayoutInstance, max_rounds: int, deadline: float | None, keep: frozenset[str]) -> Reduced | None:
    domains = {t.name: tuple(t.domain) for t in inst.tensors}
    choices = [tuple(range(len(op.choices))) for op in inst.ops]
    replaced: dict = {}
    try:
        for _ in range(max_rounds):
            changed = _reduce_layouts(inst, domains, choices, replaced, deadline, keep)
            changed |= _reduce_choices(inst, domains, choices, deadline)
            if not changed:
                break
    except _Late:
        return None
    return Reduced(domains, choices, replaced)


class _Late(Exception):
    """The deadline passed."""


def _check(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise _Late


def _slot_layouts(inst: LayoutInstance, choices) -> tuple[dict, dict]:
    """Per tensor: the layouts kept reader slots may want, and those its producer may write."""
    wants: dict[str, set] = {t.name: set() for t in inst.tensors}
    makes: dict[str, set] = {t.name: set() for t in inst.tensors}
    for op, kept in zip(inst.ops, choices):
        for c in kept:
            choice = op.choices[c]
            for t, a in zip(op.inputs, choice.inputs):
                wants[t].add(a)
            for t, a in zip(op.outputs, choice.outputs):
                makes[t].add(a)
    return wants, makes


def _reduce_layouts(inst: LayoutInstance, domains: dict, choices, replaced: dict, deadline: float | None,
                    whole: frozenset[str]) -> bool:
    wants, makes = _slot_layouts(inst, choices)
    changed = False
    for t in inst.tensors:
        _check(deadline)
        dom = domains[t.name]
        if len(dom) == 1 or t.name in whole:
            continue
        w, m = sorted(wants[t.name], key=str), sorted(makes[t.name], key=str)
        columns = [inst.slot_seconds(t.name, dom, w, True), inst.slot_seconds(t.name, dom, m, False),
                   np.array([[inst.final_time(t.name, a)] for a in dom])]
        if inst.memory is not None:
            columns.append(np.array([[float(t.per_device(a, inst.mesh))] for a in dom]))
        keep, by = _undominated(np.hstack(columns))
        for i, j in by.items():
            replaced[(t.name, dom[i])] = dom[j]
        if len(keep) < len(dom):
            domains[t.name] = tuple(dom[i] for i in keep)
            changed = True
    return changed


def _undominated(vectors: np.ndarray) -> tuple[list[int], dict[int, int]]:
    """Rows in order, each dropped when a row kept before it, or any row after it, is ≤ it everywhere and
    strictly smaller somewhere (ties: the earlier row wins); -> (kept rows, dropped row -> its dominator)."""
    le = (vectors[:, None, :] <= vectors[None, :, :] * (1 + 1e-12) + 1e-18).all(axis=2)  # le[j, i]: row j ≤ row i
    lt = (vectors[:, None, :] < vectors[None, :, :] * (1 - 1e-12) - 1e-18).any(axis=2)
    n = len(vectors)
    earlier = np.tri(n, n, -1, dtype=bool).T  # earlier[j, i]: j < i
    beats = le & (earlier | lt)
    np.fill_diagonal(beats, False)
    kept = np.zeros(n, dtype=bool)
    by = {}
    for i in range(n):
        candidates = np.flatnonzero(beats[:, i] & ((earlier[:, i] & kept) | ~earlier[:, i]))
        if len(candidates):
            by[i] = int(candidates[0])
        else:
            kept[i] = True
    return list(np.flatnonzero(kept)), by


def _reduce_choices(inst: LayoutInstance, domains: dict, choices: list, deadline: float | None) -> bool:
    changed = False
    for i, op in enumerate(inst.ops):
        _check(deadline)
        kept = choices[i]
        if len(kept) == 1:
            continue
        columns = [np.array([[op.choices[c].seconds] for c in kept])]
        for j, t in enumerate(op.inputs + op.outputs):
            slot = [(op.choices[c].inputs + op.choices[c].outputs)[j] for c in kept]
            columns.append(inst.slot_seconds(t, domains[t], slot, j < len(op.inputs)).T)
        survivors, _ = _undominated(np.hstack(columns))
        if len(survivors) < len(kept):
            choices[i] = tuple(kept[k] for k in survivors)
            changed = True
    return changed
