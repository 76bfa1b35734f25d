"""MIP lower bounds for MTPP on HiGHS (Section 3 of Archer et al.).

* :func:`exact_mip` — Figure 3, Eqs. (5)–(12): y_vb = "v is in block b or earlier" binary, x eliminated
  with Eq. (11) (x_vb = y_vb − y_v(b−1)), tensor-cut variables c_tb relaxed to continuous [0, 1]. Its
  proven dual bound is a lower bound; its incumbent is a partition.
* :func:`bottleneck_mip` — the three-superblock relaxation of Section 3.2: Figure 3 with k = 3, block 2
  forced to hold ≥ L work (Eq. 14), objective block₂ only.
* :func:`guess_mip` — Section 3.3's LB_j: three superblocks, block 2 is the guessed bottleneck j with
  ≥ L work, and bottleneck ≥ block₁/(j−1), ≥ block₃/(k−j). The bound is min_j LB_j.

Tensors replace the paper's one-output-per-node: c_tb is indexed by tensor t (producer u(t)), with
Eqs. (9)/(10) written for every consumer of t. The overflow of Eq. (2) (``--stage-memory``) enters each
block as o_b ≥ (Σ params·x_vb − M)/B, o_b ≥ 0 (for a superblock of s blocks, (… − s·M)/B: a valid
relaxation by convexity). Every bound is the solver's proven dual bound, also at the time limit.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import highspy
import numpy as np

from onnxpart.partition.model import Instance
from onnxpart.solvers import SparseModel, solve_highs

log = logging.getLogger(__name__)

#: The exact MIP is not built above this many nonzeros (:func:`exact_nonzeros`): it grows as ops × k, and
#: on the 70B-shaped export at k = 80 (9,007 ops, 12.7 M nonzeros) its build alone took 32 s and 1.5 GB of
#: the worker (3.6 GB for the command, against 0.9 GB at k = 16 with 2.4 M), with no bound left to prove
#: in a 60 s limit. The other bounds' models (three superblocks) do not grow with k.
EXACT_NONZEROS = 4_000_000


def exact_nonzeros(inst: Instance, k: int) -> int:
    """The nonzeros of :func:`exact_mip`'s model, counted before building it: monotone y (2 per op and
    block), Eq. (8) (2 per edge and block), Eqs. (9)/(10) (at most 4 per consumer and block, twice),
    Eqs. (6)/(7) (2 per op, 1 per tensor and the bottleneck, per block) and, with ``--stage-memory``, the
    overflow rows (2 per op and 2 more, per block)."""
    pairs = int(sum(len(inst.consumers(t)) for t in range(inst.num_tensors)))
    overflow = 2 * inst.n + 2 if inst.stage_memory is not None and inst.params.any() else 0
    return (2 * inst.n * max(k - 2, 0) + 2 * len(inst.edges()) * (k - 1) + 8 * pairs * k
            + k * (2 * inst.n + inst.num_tensors + 1 + overflow))


def exact_skipped(inst: Instance, k: int) -> str | None:
    """Why :func:`exact_mip` is not run on ``inst`` at ``k`` (None: it is)."""
    size = exact_nonzeros(inst, k)
    if size <= EXACT_NONZEROS:
        return None
    return (f"model skipped: {size:,} nonzeros > {EXACT_NONZEROS:,} (it grows as ops x k; its build alone "
            "would take the memory and time the other bounds need)")


class _Mip(SparseModel):
    """The shared sparse MIP builder, plus the overflow column of each block (for warm starts)."""

    def __init__(self) -> None:
        super().__init__()
        self.overflow: dict[int, int] = {}  # block -> its overflow column


def _add(terms: dict[int, float], col: int | None, coef: float) -> None:
    if col is not None:
        terms[col] = terms.get(col, 0.0) + coef


class _Blocks:
    """y_vb for b = 0..blocks (y_v0 = 0 and y_v,blocks = 1 are constants; None stands for a constant)."""

    def __init__(self, mip: _Mip, inst: Instance, blocks: int):
        self.blocks = blocks
        self.cols = [[mip.var(0, 1, integer=True) for _ in range(blocks - 1)] for _ in range(inst.n)]

    def y(self, v: int, b: int) -> tuple[int | None, float]:
        """(column, constant): y_vb = column value if column is not None, else the constant."""
        if b <= 0:
            return None, 0.0
        if b >= self.blocks:
            return None, 1.0
        return self.cols[v][b - 1], 0.0


def _lin(parts: Sequence[tuple[float, tuple[int | None, float]]]) -> tuple[dict[int, float], float]:
    """Σ coef·y as (terms, constant)."""
    terms: dict[int, float] = {}
    const = 0.0
    for coef, (col, value) in parts:
        if col is None:
            const += coef * value
        else:
            _add(terms, col, coef)
    return terms, const


def _structure(mip: _Mip, inst: Instance, blocks: _Blocks, cut_blocks: Sequence[int]) -> dict[int, list[int]]:
    """Monotone y, the DAG constraints (Eq. 8) and the tensor-cut constraints (Eqs. 9, 10) for the blocks
    in ``cut_blocks`` (1-based). Returns block -> tensor-cut columns c_tb."""
    k = blocks.blocks
    for v in range(inst.n):  # y_v(b-1) <= y_vb
        for b in range(2, k):
            terms, const = _lin([(1.0, blocks.y(v, b)), (-1.0, blocks.y(v, b - 1))])
            mip.row(terms, lower=-const)
    for u, v in inst.edges():  # Eq. (8): y_ub >= y_vb
        for b in range(1, k):
            terms, const = _lin([(1.0, blocks.y(int(u), b)), (-1.0, blocks.y(int(v), b))])
            mip.row(terms, lower=-const)
    cuts: dict[int, list[int]] = {}
    for b in cut_blocks:
        cuts[b] = [mip.var(0.0, 1.0) for _ in range(inst.num_tensors)]
        for t in range(inst.num_tensors):
            u = int(inst.producer[t])
            c = cuts[b][t]
            for v in inst.consumers(t).tolist():
                # Eq. (9): c_tb >= y_u(b-1) + x_vb - 1, with x_vb = y_vb - y_v(b-1)
                terms, const = _lin([(1.0, blocks.y(u, b - 1)), (1.0, blocks.y(v, b)), (-1.0, blocks.y(v, b - 1))])
                if terms or const - 1 > 0:
                    terms = {col: -coef for col, coef in terms.items()}
                    terms[c] = 1.0
                    mip.row(terms, lower=const - 1)
                # Eq. (10): c_tb >= x_ub - y_vb
                terms, const = _lin([(1.0, blocks.y(u, b)), (-1.0, blocks.y(u, b - 1)), (-1.0, blocks.y(v, b))])
                if terms or const > 0:
                    terms = {col: -coef for col, coef in terms.items()}
                    terms[c] = 1.0
                    mip.row(terms, lower=const)
    return cuts


def _block_cost(mip: _Mip, inst: Instance, blocks: _Blocks, b: int, cuts: list[int], stages: int) -> tuple[dict[int, float], float]:
    """Eq. (7) for block b: Σ work·x_vb + Σ transfer·c_tb + overflow, as (terms, constant)."""
    parts = []
    for v in range(inst.n):
        parts += [(inst.work[v], blocks.y(v, b)), (-inst.work[v], blocks.y(v, b - 1))]
    terms, const = _lin(parts)
    for t, c in enumerate(cuts):
        _add(terms, c, float(inst.transfer[t]))
    if inst.stage_memory is not None and inst.params.any():
        over = mip.var(0.0)
        # o_b >= (Σ params·x_vb - stages·M) / B
        p_terms, p_const = _lin([(inst.params[v] / inst.bandwidth, blocks.y(v, b)) for v in range(inst.n)]
                                + [(-inst.params[v] / inst.bandwidth, blocks.y(v, b - 1)) for v in range(inst.n)])
        p_terms = {col: -coef for col, coef in p_terms.items()}
        p_terms[over] = 1.0
        mip.row(p_terms, lower=p_const - stages * inst.stage_memory / inst.bandwidth)
        mip.overflow[b] = over
        _add(terms, over, 1.0)
    return terms, const


@dataclass
class BoundResult:
    method: str
    value: float | None
    status: str
    seconds: float
    incumbent: np.ndarray | None = None  # a partition, for the exact MIP
    incumbent_value: float | None = None
    note: str = ""
    parts: list[float] = field(default_factory=list)


def exact_mip(inst: Instance, k: int, time_limit: float, lower: float = 0.0,
              warm: np.ndarray | None = None, seed: int = 0,
              on_bound: Callable[[float], None] | None = None) -> BoundResult:
    """Figure 3 (Eqs. 5–12) with x eliminated via Eq. (11); ``lower`` (e.g. Lemma 3.3) bounds the objective.
    ``on_bound`` receives the proven dual bound while HiGHS runs. ``time_limit`` includes building the
    model (as in every MIP of this module)."""
    start = time.perf_counter()
    if k == 1:
        from onnxpart.partition.model import bottleneck

        value = bottleneck(inst, np.zeros(inst.n, dtype=np.int64), 1)
        return BoundResult("exact", value, "optimal", 0.0, np.zeros(inst.n, dtype=np.int64), value)
    mip = _Mip()
    z = mip.var(lower, cost=1.0)  # Eq. (5): minimize bottleneck
    blocks = _Blocks(mip, inst, k)
    cuts = _structure(mip, inst, blocks, range(1, k + 1))
    for b in range(1, k + 1):  # Eqs. (6), (7): bottleneck >= block_b
        terms, const = _block_cost(mip, inst, blocks, b, cuts[b], 1)
        terms = {col: -coef for col, coef in terms.items()}
        terms[z] = 1.0
        mip.row(terms, lower=const)
    h = mip.highs()
    if warm is not None:
        _set_warm_start(h, mip, inst, blocks, cuts, warm, z)
    result = solve_highs(h, _left(time_limit, start), seed=seed, on_bound=on_bound)
    incumbent = None
    if result.values:
        values = np.array(result.values)
        ys = np.array([[values[c] for c in row] for row in blocks.cols]).reshape(inst.n, k - 1)
        incumbent = (k - 1 - np.rint(ys).sum(axis=1)).astype(np.int64)
    return BoundResult("exact", _bound(result), result.status, result.seconds, incumbent, result.objective)


def _set_warm_start(h: highspy.Highs, mip: _Mip, inst: Instance, blocks: _Blocks, cuts: dict[int, list[int]],
                    assignment: np.ndarray, z: int) -> None:
    """Hand HiGHS a feasible solution (y from the assignment, c at their minimum, bottleneck from Eq. 3)."""
    from onnxpart.partition.model import block_costs

    k = blocks.blocks
    values = np.zeros(len(mip.lower))
    for v in range(inst.n):
        for b in range(1, k):
            values[blocks.cols[v][b - 1]] = 1.0 if assignment[v] + 1 <= b else 0.0
    for t in range(inst.num_tensors):
        home = assignment[inst.producer[t]]
        others = set(assignment[inst.consumers(t)].tolist()) - {home}
        if others:
            values[cuts[home + 1][t]] = 1.0
            for b in others:
                values[cuts[b + 1][t]] = 1.0
    costs = block_costs(inst, assignment, k)
    values[z] = max(max(c.cost for c in costs), mip.lower[z])
    for b, col in mip.overflow.items():
        values[col] = costs[b - 1].overflow
    solution = highspy.HighsSolution()
    solution.col_value = values.tolist()
    solution.value_valid = True
    h.setSolution(solution)


def bottleneck_mip(inst: Instance, k: int, lower: float, time_limit: float, seed: int = 0,
                   on_bound: Callable[[float], None] | None = None) -> BoundResult:
    """Section 3.2: three superblocks, Σ work·x_v2 ≥ L (Eq. 14), minimize block₂ (Corollary 3.4)."""
    start = time.perf_counter()
    mip = _Mip()
    blocks = _Blocks(mip, inst, 3)
    cuts = _structure(mip, inst, blocks, [2])
    _work_at_least(mip, inst, blocks, lower)
    terms, const = _block_cost(mip, inst, blocks, 2, cuts[2], 1)
    z = mip.var(-math.inf, cost=1.0)
    terms = {col: -coef for col, coef in terms.items()}
    terms[z] = 1.0
    mip.row(terms, lower=const, upper=const)
    result = solve_highs(mip.highs(), _left(time_limit, start), seed=seed, on_bound=on_bound)
    return BoundResult("bottleneck", _bound(result), result.status, result.seconds)


def guess_mip(inst: Instance, k: int, j: int, lower: float, time_limit: float, seed: int = 0,
              floor: float = 0.0) -> BoundResult:
    """Section 3.3's LB_j: block 2 is the guessed bottleneck block j (work ≥ L); superblock 1 holds blocks
    1..j−1 and superblock 3 blocks j+1..k, each charged at its average (block/(j−1), block/(k−j)).

    ``floor`` must be a proven bound on OPT: with z ≥ floor the MIP gives max(LB_j, floor), and
    min_j max(LB_j, floor) = max(min_j LB_j, floor) ≤ OPT."""
    start = time.perf_counter()
    mip = _Mip()
    z = mip.var(floor, cost=1.0)
    blocks = _Blocks(mip, inst, 3)
    if j == 1:  # nothing before block 1
        for row in blocks.cols:
            mip.upper[row[0]] = 0.0
    if j == k:  # nothing after block k
        for row in blocks.cols:
            mip.lower[row[1]] = 1.0
    cuts = _structure(mip, inst, blocks, [1, 2, 3])
    _work_at_least(mip, inst, blocks, lower)
    for b, share in ((1, j - 1), (2, 1), (3, k - j)):
        if share <= 0:
            continue
        terms, const = _block_cost(mip, inst, blocks, b, cuts[b], share)
        # bottleneck >= block_b / share
        terms = {col: -coef / share for col, coef in terms.items()}
        terms[z] = 1.0
        mip.row(terms, lower=const / share)
    result = solve_highs(mip.highs(), _left(time_limit, start), seed=seed)
    return BoundResult(f"guess-{j}", _bound(result), result.status, result.seconds)


def convex_block_mip(inst: Instance, v: int, time_limit: float, floor: float = 0.0, seed: int = 0) -> BoundResult:
    """min f(B) over the blocks B ∋ v that some partition can have: three superblocks with v in block 2,
    objective block₂ (Figure 3 with k = 3, no Eq. 14).

    In every partition the block holding v is B = I_j ∖ I_{j−1} for ideals I_{j−1} ⊆ I_j, and putting
    I_{j−1} in superblock 1, B in 2 and the rest in 3 is feasible here with block₂ = f(B) ≤ OPT, so the
    optimum (and HiGHS' dual bound) is a lower bound on OPT. It is the convex refinement of
    :func:`onnxpart.partition.cuts.single_block_bound`'s min cut, so that cut value (``floor``) is a valid
    objective lower limit."""
    start = time.perf_counter()
    mip = _Mip()
    blocks = _Blocks(mip, inst, 3)
    first, second = blocks.cols[v]
    mip.upper[first] = 0.0  # v not in superblock 1
    mip.lower[second] = 1.0  # v in superblock 1 or 2
    cuts = _structure(mip, inst, blocks, [2])
    terms, const = _block_cost(mip, inst, blocks, 2, cuts[2], 1)
    z = mip.var(floor, cost=1.0)
    terms = {col: -coef for col, coef in terms.items()}
    terms[z] = 1.0
    mip.row(terms, lower=const)
    result = solve_highs(mip.highs(), _left(time_limit, start), seed=seed)
    return BoundResult(f"convex-{v}", _bound(result), result.status, result.seconds)


def _left(time_limit: float, start: float) -> float:
    """What is left of ``time_limit`` (seconds) once the model is built (started at ``start``)."""
    return time_limit - (time.perf_counter() - start)


def _work_at_least(mip: _Mip, inst: Instance, blocks: _Blocks, lower: float) -> None:
    """Eq. (14): Σ work(v)·x_v2 ≥ L."""
    terms, const = _lin([(inst.work[v], blocks.y(v, 2)) for v in range(inst.n)]
                        + [(-inst.work[v], blocks.y(v, 1)) for v in range(inst.n)])
    mip.row(terms, lower=lower - const)


def scaled(inst: Instance, scale: float) -> Instance:
    """The instance with every cost divided by ``scale`` (so that f, OPT and every bound are too)."""
    return dataclasses.replace(inst, work=inst.work / scale, transfer=inst.transfer / scale,
                               bandwidth=inst.bandwidth * scale if inst.bandwidth else inst.bandwidth)


def _bound(result) -> float | None:
    if result.status == "infeasible":
        return math.inf
    return result.bound if math.isfinite(result.bound) else None
