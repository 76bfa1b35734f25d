"""The costed scheduling instance both objectives read: ops, their times on every device of the system
(:mod:`onnxpart.schedule.system`), the edges' transfer delays, memory, and the throughput objective's
batch data (:meth:`Instance.time_batch`); :func:`from_graph` builds it from an OpGraph.

Cost semantics (Section 2.3 of Ghannane's thesis, "Mapping neural network inference onto heterogeneous
hardware platforms", 2023). Every method here — simulator, validator, heuristics, MILP, CP-SAT,
MILP-SPLIT, bounds and the brute force in the tests — uses exactly these:

* An instance is a DAG of ``n`` ops. Op ``i`` on device ``u`` runs for ``time[i, u]`` seconds
  (``inf``: it cannot run there), without preemption; a device runs one op at a time.
* Each DAG edge ``(i, j)`` carries ``bytes`` (the tensors ``i`` produces that ``j`` reads). If ``i`` and
  ``j`` run on the same device the data is shared in device memory: no delay. Otherwise ``j`` may not
  start before ``end(i) + delay(u, v, bytes)`` with ``delay = latency + bytes / bandwidth`` of the
  link ``u → v`` (the thesis's ``om_i / β_{u,v}`` plus a fixed latency).
* **Links are contention-free**: a transfer starts when its producer ends and never waits for another
  transfer, nor occupies either device. This is what the thesis's MILP assumes — communication appears
  only as a delay in the precedence constraint (3.3), there is no resource constraint on links.
* A device switch costs the receiver's ``switch`` seconds (the launch of the piece it starts there,
  :attr:`onnxpart.schedule.system.model.Device.switch`): it is part of every delay into that device.
* A missing link means no direct transfer: the data is routed through one intermediate device ``w``
  holding both links (store and forward: ``delay(u,w) + delay(w,v)``, the faster route if several),
  or the transfer is impossible and any mapping that needs it is infeasible.
* **Memory is the thesis's static model, constraint (3.7)**: ``mem[i]`` = weights + input tensors +
  output tensors of op ``i`` (``wm_i + im_i + om_i``), and for every device ``Σ_{i on u} mem[i] ≤
  capacity[u]`` — "all data preemptively moved", i.e. resident for the whole run. Conservative: a
  tensor shared by producer and consumer on one device counts twice.
* Graph inputs are available on every device at time 0; the makespan (latency) is the largest op end
  (graph outputs are not moved back to a host). The throughput objective adds its batch semantics
  (:mod:`onnxpart.schedule.throughput.model`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import networkx as nx
import numpy as np

from onnxpart.dag import Dag
from onnxpart.errors import InfeasibleError, UserError
from onnxpart.schedule.system.costs import analytic_cost_fn, fixed_part
from onnxpart.schedule.system.measured import measured_curves
from onnxpart.schedule.system.model import System


class SystemMismatch(InfeasibleError):
    """The system cannot run this graph at all — an op runs on or fits no device, a transfer the graph
    needs has no route: bad input (exit 2, like a malformed system file), not a budget that cannot be
    met. Still an :class:`InfeasibleError`, so a pinned sub-instance (MILP-SPLIT) that raises it is an
    infeasible pair."""

    exit_code = 2


class Instance:
    """A costed scheduling instance (see the module docstring for the semantics).

    ``time`` is (n, K) seconds with ``inf`` for "cannot run"; ``edges`` are ``(i, j, bytes)`` with
    ``i < j`` not required but the graph must be acyclic; ``delays[e]`` is the (K, K) transfer delay of
    edge ``e``; ``mem`` (n,) and ``capacity`` (K,) are bytes (constraint 3.7).
    """

    def __init__(self, time: Any, edges: Sequence[tuple[int, int, float]], *, mem: Any = None,
                 capacity: Any = None, system: System | None = None, latency: Any = 0.0,
                 bandwidth: Any = math.inf, op_names: Sequence[str] | None = None,
                 device_names: Sequence[str] | None = None, batch_sizes: Sequence[Sequence[int]] | None = None,
                 fixed: Any = None, act_mem: Any = None, curves: Mapping[int, Any] | None = None):
        self.time = np.asarray(time, dtype=float)
        if self.time.ndim != 2 or self.time.shape[0] == 0:
            raise ValueError("time must be an (n ops, K devices) array")
        if np.isnan(self.time).any() or (self.time < 0).any():
            raise ValueError("times must be ≥ 0 (inf = cannot run there)")
        n, k = self.time.shape
        self.n, self.k = n, k
        self.op_names = list(op_names) if op_names is not None else [f"op{i}" for i in range(n)]
        self.system = system
        if system is not None:
            if system.k != k:
                raise ValueError(f"time has {k} device columns but the system has {system.k} devices")
            self.device_names = system.names
        else:
            self.device_names = list(device_names) if device_names is not None else [f"d{u}" for u in range(k)]
        self.mem = np.zeros(n) if mem is None else np.asarray(mem, dtype=float)
        self.capacity = np.full(k, math.inf) if capacity is None else np.asarray(capacity, dtype=float)
        merged: dict[tuple[int, int], float] = {}
        for i, j, b in edges:
            if i == j or not (0 <= i < n and 0 <= j < n):
                raise ValueError(f"bad edge ({i}, {j})")
            merged[(int(i), int(j))] = merged.get((int(i), int(j)), 0.0) + float(b)
        self.edges: list[tuple[int, int, float]] = [(i, j, b) for (i, j), b in merged.items()]
        self._index_edges()
        self._lat = np.broadcast_to(np.asarray(latency, dtype=float), (k, k))
        self._bw = np.broadcast_to(np.asarray(bandwidth, dtype=float), (k, k))
        # (latency, 1/bandwidth) of the system's direct links (inf where none), else (latency, bandwidth)
        self.link_data = system.direct_links() if system is not None else (self._lat, self._bw)
        self.delays = self._edge_delays(system, latency, bandwidth)
        self._init_batch(batch_sizes, fixed, act_mem, curves)
        self.check_feasible()

    # --------------------------------------------------------------------------------- batching
    def _init_batch(self, batch_sizes: Any, fixed: Any, act_mem: Any, curves: Any) -> None:
        """Throughput data (Section 3.2): ``batch_sizes[u]`` the batch sizes device ``u`` supports (from
        the system's devices by default, else ``(1,)``); ``fixed[i, u]`` the batch-independent part of
        ``time[i, u]`` (launch overhead, reading the weights; default 0); ``act_mem[i]`` the per-input
        activation bytes inside ``mem[i]`` (default 0); ``curves[u]`` the measured
        :class:`~onnxpart.schedule.system.batch_curve.BatchCurve` of a device timed per batch size (default
        none). See :meth:`time_batch`."""
        if batch_sizes is None:
            batch_sizes = ([d.batch_sizes for d in self.system.devices] if self.system is not None
                           else [(1,)] * self.k)
        self.batch_sizes = [tuple(sorted({int(b) for b in bs})) for bs in batch_sizes]
        if len(self.batch_sizes) != self.k or any(not bs or bs[0] < 1 for bs in self.batch_sizes):
            raise ValueError("batch_sizes must give every device a non-empty list of positive sizes")
        self.fixed = np.zeros((self.n, self.k)) if fixed is None else np.minimum(np.asarray(fixed, float), self.time)
        self.act_mem = np.zeros(self.n) if act_mem is None else np.asarray(act_mem, dtype=float)
        self.curves = dict(curves or {})

    def time_batch(self, i: int, u: int, size: int) -> float:
        """Seconds op ``i`` takes on device ``u`` for a batch of ``size`` inputs (``t_{i,u,l}``): from
        the device's measured :class:`~onnxpart.schedule.system.batch_curve.BatchCurve` when it has one, else the
        batch-independent part once plus the rest ``size`` times, ``fixed + (time − fixed)·size`` (the
        roofline at batch 1 with weights and launch read once per batch). 0 for size 0; ``inf`` where the
        op cannot run."""
        if size <= 0:
            return 0.0
        t, f = self.time[i, u], self.fixed[i, u]
        if not math.isfinite(t):
            return float(t)
        curve = self.curves.get(u)
        return curve.at(i, size) if curve is not None else float(f + (t - f) * size)

    def batch_times(self, u: int, size: int) -> np.ndarray:
        """(n,): :meth:`time_batch` of every op on device ``u`` at ``size``, the same numbers by the same
        float operations, at once (bMET, data parallelism and the critical path read whole columns)."""
        if size <= 0:
            return np.zeros(self.n)
        curve = self.curves.get(u)
        if curve is not None:
            return np.array([curve.at(i, size) for i in range(self.n)])
        t, f = self.time[:, u], self.fixed[:, u]
        with np.errstate(invalid="ignore"):  # inf − inf where the op cannot run: that entry is t, inf
            return np.where(np.isfinite(t), f + (t - f) * size, t)

    def curve_key(self, u: int) -> bytes:
        """Device ``u``'s measured batch curve as bytes (empty without one): equal keys, equal times."""
        curve = self.curves.get(u)
        return curve.digest if curve is not None else b""

    def delay_count(self, e: int, u: int, v: int, count: int) -> float:
        """Transfer delay of edge ``e``'s tensors for ``count`` inputs from ``u`` to ``v`` (0 on one
        device): the route of ``count × bytes`` (direct link, or one hop) — the same rule as ``delays``."""
        if u == v or count <= 0:
            return 0.0
        if count == 1:
            return float(self.delays[e, u, v])
        memo = self.__dict__.setdefault("_delay_memo", {})  # the batch simulator asks the same ones often
        key = (e, u, v, count)
        if key not in memo:
            nbytes = self.edges[e][2] * count
            if self.system is not None:
                memo[key] = float(self.system.route(u, v, nbytes)[0])
            else:
                bw = self._bw[u, v]
                memo[key] = float(self._lat[u, v] + (nbytes / bw if bw > 0 else math.inf))
        return memo[key]

    def _index_edges(self) -> None:
        """Predecessors, successors, in/out edge lists and the BFS order from ``self.edges``."""
        self.preds: list[list[int]] = [[] for _ in range(self.n)]
        self.succs: list[list[int]] = [[] for _ in range(self.n)]
        self.in_edges: list[list[int]] = [[] for _ in range(self.n)]
        self.out_edges: list[list[int]] = [[] for _ in range(self.n)]
        for e, (i, j, _) in enumerate(self.edges):
            self.succs[i].append(j)
            self.preds[j].append(i)
            self.out_edges[i].append(e)
            self.in_edges[j].append(e)
        self.topo = Dag(self.n, [(i, j) for i, j, _ in self.edges]).bfs_order().tolist()  # Section 4.2's order

    # --------------------------------------------------------------------------------- structure
    def _edge_delays(self, system: System | None, latency: Any, bandwidth: Any) -> np.ndarray:
        """(E, K, K): each edge's transfer delays; with a system, one :meth:`System.delay_matrix` per distinct
        byte count, not one per edge (0.6 s for 20,000 edges, whose tensors have a few sizes)."""
        k = self.k
        delays = np.zeros((len(self.edges), k, k))
        if system is not None:
            sizes, which = np.unique(np.array([b for _, _, b in self.edges], dtype=float), return_inverse=True)
            if len(sizes):
                delays[:] = np.stack([system.delay_matrix(float(b), self.link_data) for b in sizes])[which.reshape(-1)]
            return delays
        lat = np.broadcast_to(np.asarray(latency, dtype=float), (k, k))
        bw = np.broadcast_to(np.asarray(bandwidth, dtype=float), (k, k))
        off = ~np.eye(k, dtype=bool)
        for e, (_, _, b) in enumerate(self.edges):
            with np.errstate(divide="ignore", invalid="ignore"):
                d = lat + np.where(bw > 0, b / bw, math.inf)
            delays[e] = np.where(off, d, 0.0)
        return delays

    def ancestors_closure(self) -> np.ndarray:
        """(n, n) bool: ``reach[i, j]`` iff there is a path i → j (the transitive closure used to prune
        the disjunctions (3.8))."""
        reach = np.zeros((self.n, self.n), dtype=bool)
        for i in reversed(self.topo):
            for j in self.succs[i]:
                reach[i, j] = True
                reach[i] |= reach[j]
        return reach

    def allowed_mask(self) -> np.ndarray:
        """(n, K) booleans: op ``i`` can run on device ``u`` (:meth:`allowed`, for every op at once)."""
        return np.isfinite(self.time) & (self.mem[:, None] <= self.capacity[None, :])

    def allowed(self, i: int) -> list[int]:
        """Devices op ``i`` can run on (finite time, fits the device's memory alone)."""
        return [u for u in range(self.k) if math.isfinite(self.time[i, u]) and self.mem[i] <= self.capacity[u]]

    def symmetry_classes(self) -> list[list[int]]:
        """Groups of interchangeable devices: ``u ~ v`` iff swapping them maps the instance onto itself
        (:meth:`preserved_by`: same op times, memory, batch sizes, link delays to/from every other
        device). Section 5.2."""
        k = self.k
        classes: list[list[int]] = []
        seen = [False] * k
        for u in range(k):
            if seen[u]:
                continue
            cls = [u]
            for v in range(u + 1, k):
                if not seen[v] and self._swappable(u, v):
                    cls.append(v)
                    seen[v] = True
            seen[u] = True
            classes.append(cls)
        return classes

    def _swappable(self, u: int, v: int) -> bool:
        if not np.array_equal(self.time[:, u], self.time[:, v]) or self.capacity[u] != self.capacity[v]:
            return False
        perm = np.arange(self.k)
        perm[u], perm[v] = v, u
        return self.preserved_by(perm)

    def preserved_by(self, perm: Sequence[int]) -> bool:
        """Whether relabelling every device ``u`` as ``perm[u]`` maps the instance onto itself — op times
        and their batch-independent part and measured batch curves, capacities, batch sizes, every edge's
        transfer delays, every direct link's latency and bandwidth: a device automorphism (Section 5.2). A
        schedule relabelled by one is a schedule of the relabelled instance, with the same makespan
        (:mod:`onnxpart.schedule.latency.symmetry`)."""
        p = np.asarray(perm, dtype=np.int64)
        return bool(np.array_equal(self.time[:, p], self.time) and np.array_equal(self.fixed[:, p], self.fixed)
                    and np.array_equal(self.capacity[p], self.capacity)
                    and all(self.batch_sizes[p[u]] == self.batch_sizes[u] for u in range(self.k))
                    and all(self.curve_key(p[u]) == self.curve_key(u) for u in range(self.k))
                    and np.array_equal(self.delays[:, p][:, :, p], self.delays)
                    and all(np.array_equal(a[p][:, p], a) for a in self.link_data))

    # --------------------------------------------------------------------------------- feasibility
    def check_feasible(self, linked: bool = True) -> None:
        """Raise a one-line :class:`SystemMismatch` for the obvious infeasibilities: an op that runs
        nowhere or fits no device's memory, an edge whose every allowed device pair lacks a transfer
        route, and (``linked``) a graph too big for every group of linked devices
        (:meth:`_check_linked_memory`). Vectorized: SPLIT builds K² pinned sub-instances per module."""
        allowed = self.allowed_mask()
        for i in np.flatnonzero(~allowed.any(axis=1))[:1]:
            runs = [u for u in range(self.k) if math.isfinite(self.time[i, u])]
            if not runs:
                raise SystemMismatch(f"op {self.op_names[i]} has no device it can run on")
            big = max(runs, key=lambda u: self.capacity[u])
            raise SystemMismatch(
                f"op {self.op_names[i]} needs {self.mem[i]:.0f} bytes (weights + inputs + outputs) but "
                f"the largest device it can run on, {self.device_names[big]}, has {self.capacity[big]:.0f} bytes")
        if self.edges:
            src = np.array([i for i, _, _ in self.edges])
            dst = np.array([j for _, j, _ in self.edges])
            ok = (np.isfinite(self.delays) & allowed[src][:, :, None] & allowed[dst][:, None, :]).any(axis=(1, 2))
            for e in np.flatnonzero(~ok)[:1]:
                i, j, b = self.edges[e]
                pair = next(((u, v) for u in self.allowed(i) for v in self.allowed(j)), None)
                where = (f" (no link or 1-hop route {self.device_names[pair[0]]} → {self.device_names[pair[1]]})"
                         if pair else "")
                raise SystemMismatch(f"tensor {self.op_names[i]} → {self.op_names[j]} ({b:.0f} bytes) cannot be "
                                     f"transferred between any devices the two ops can run on{where}")
        if linked:
            self._check_linked_memory()

    def _check_linked_memory(self) -> None:
        """The ops of one connected piece of the graph run on devices connected by routes (each edge
        between two used devices needs one), so together they need a group of devices linked to one
        another (a connected component of the route graph, directions ignored) whose capacities sum to
        their memory (3.7). A necessary condition, so the check never refuses a feasible instance."""
        linked = nx.Graph()
        linked.add_nodes_from(range(self.k))
        if self.edges:
            finite = np.isfinite(self.delays).any(axis=0)
            linked.add_edges_from((u, v) for u in range(self.k) for v in range(self.k) if u != v and finite[u, v])
        groups = [sorted(c) for c in nx.connected_components(linked)]
        ops = nx.Graph()
        ops.add_nodes_from(range(self.n))
        ops.add_edges_from((i, j) for i, j, _ in self.edges)
        best = max(groups, key=lambda c: float(self.capacity[c].sum()))
        room = float(self.capacity[best].sum())
        for part in nx.connected_components(ops):
            need = float(self.mem[sorted(part)].sum())
            if need > room * (1 + 1e-12):
                raise SystemMismatch(
                    f"the graph needs {need:.0f} bytes (constraint 3.7) but the largest group of devices linked "
                    f"to one another ({', '.join(self.device_names[u] for u in best)}) holds {room:.0f}: a transfer "
                    "it needs is impossible; add links between the devices")

    def mapping_violations(self, mapping: Sequence[int]) -> list[str]:
        """Why a mapping is infeasible (cannot-run, impossible transfer, memory 3.7); [] if it is not."""
        out: list[str] = []
        mapping = np.asarray(mapping, dtype=int)
        for i in range(self.n):
            if not math.isfinite(self.time[i, mapping[i]]):
                out.append(f"{self.op_names[i]} cannot run on {self.device_names[mapping[i]]}")
        for e, (i, j, _) in enumerate(self.edges):
            if not math.isfinite(self.delays[e, mapping[i], mapping[j]]):
                out.append(f"no route {self.device_names[mapping[i]]} → {self.device_names[mapping[j]]} "
                           f"for {self.op_names[i]} → {self.op_names[j]}")
        load = np.bincount(mapping, weights=self.mem, minlength=self.k)
        for u in range(self.k):
            if load[u] > self.capacity[u] * (1 + 1e-12):
                out.append(f"{self.device_names[u]} holds {load[u]:.0f} bytes > capacity {self.capacity[u]:.0f}")
        return out

    # --------------------------------------------------------------------------------- sub-instances
    def subinstance(self, ops: Sequence[int], fixed: Mapping[int, int] | None = None) -> tuple["Instance", list[int]]:
        """The instance induced on ``ops`` (in the given order), with ``fixed`` ops (global index →
        device) restricted to that device. Returns the sub-instance and the local → global index map."""
        ops = list(ops)
        local = {g: l for l, g in enumerate(ops)}
        time = self.time[ops].copy()
        for g, u in (fixed or {}).items():
            keep = time[local[g], u]
            time[local[g]] = math.inf
            time[local[g], u] = keep
        edges, delays = [], []
        for e, (i, j, b) in enumerate(self.edges):
            if i in local and j in local:
                edges.append((local[i], local[j], b))
                delays.append(self.delays[e])
        sub = Instance.__new__(Instance)
        sub._init_from(self, time, edges, np.array(delays).reshape(len(edges), self.k, self.k),
                       self.mem[ops], [self.op_names[g] for g in ops], ops)
        return sub, ops

    def without_edges(self, drop: Sequence[int]) -> "Instance":
        """This instance less the edges whose indices are in ``drop`` — their precedence and their
        transfers; the ops, times and memory unchanged. Every schedule of this instance is one of the
        result (the links are contention-free), so its optimum is no larger
        (:mod:`onnxpart.schedule.latency.skip_edges`)."""
        gone = set(drop)
        keep = [e for e in range(len(self.edges)) if e not in gone]
        sub = Instance.__new__(Instance)
        sub._init_from(self, self.time, [self.edges[e] for e in keep], self.delays[keep], self.mem, self.op_names)
        return sub

    def _init_from(self, parent: "Instance", time: np.ndarray, edges: list, delays: np.ndarray,
                   mem: np.ndarray, names: list[str], ops: Sequence[int] | None = None) -> None:
        """Fill a sub-instance sharing ``parent``'s devices, with precomputed edge delays."""
        self.time, self.n, self.k = time, time.shape[0], parent.k
        self.op_names, self.system, self.device_names = names, parent.system, parent.device_names
        self.mem, self.capacity = mem, parent.capacity
        self.edges = list(edges)
        self._index_edges()
        self.delays = delays
        self._lat, self._bw, self.link_data = parent._lat, parent._bw, parent.link_data
        self.batch_sizes = parent.batch_sizes
        ops = list(range(len(names))) if ops is None else list(ops)
        self.fixed = np.minimum(parent.fixed[ops], np.where(np.isfinite(time), time, np.inf))
        self.act_mem = parent.act_mem[ops]
        self.curves = {u: curve.rows(ops) for u, curve in parent.curves.items()}
        self.check_feasible(linked=False)  # the parent passed it; a sub-instance's pins are checked above


def from_graph(graph: Any, system: System, cost_fn: Callable[[int, int], float] | None = None) -> Instance:
    """An :class:`Instance` from a (not necessarily costed) :class:`onnxpart.graph.OpGraph`.

    A device whose system entry names measured costs files is timed from them
    (:mod:`onnxpart.schedule.system.measured`): its batch-1 time (measured, or by the rule of
    :mod:`onnxpart.schedule.system.batch_curve`) and, for the throughput objective, its
    curve over batch sizes. Every other device is timed by ``cost_fn(op index, device index)`` (seconds,
    ``inf``: cannot run), by default the analytic roofline of its spec
    (:func:`onnxpart.cost_models.analytic_costs`, one pass per distinct spec). Edge bytes are the tensors
    a producer sends a consumer; ``mem[op]`` is its parameter bytes + input and output tensor bytes +
    internal bytes (constraint 3.7's wm + im + om). A graph with no ops (its outputs are its inputs) has
    nothing to schedule: a UserError, as remat says.
    """
    if not graph.ops:
        raise UserError("the graph has no ops: nothing to schedule")
    fixed = np.array([[fixed_part(d.spec, op) for d in system.devices] for op in graph.ops]).reshape(-1, system.k)
    curves = measured_curves(graph, system, fixed)
    if cost_fn is None and len(curves) < system.k:
        cost_fn = analytic_cost_fn(graph, system)
    time = np.array([[curves[u].at(i, 1) if u in curves else float(cost_fn(i, u)) for u in range(system.k)]
                     for i in range(len(graph.ops))])
    edges = [(u, v, float(graph.tensors[name].bytes)) for u, v, name in graph.edges()]
    mem, act = [], []
    for op in graph.ops:
        io = sum(graph.tensors[t].bytes for t in (*op.inputs, *op.outputs) if t in graph.tensors)
        mem.append(float(op.param_bytes + io + op.internal_bytes))
        act.append(float(io))
    return Instance(time, edges, mem=mem, capacity=[d.memory for d in system.devices], system=system,
                    op_names=[op.name for op in graph.ops], fixed=fixed, act_mem=act, curves=curves)
