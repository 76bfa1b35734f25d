"""The one DAG core: adjacency of nodes ``0..n-1`` in CSR form, and Kahn's algorithm with a priority.

Every problem-specific graph (the :class:`~onnxpart.graph.OpGraph`, the partition and remat instances)
builds a :class:`Dag` once from its ``(u, v)`` edges and asks it for neighbours and topological orders,
instead of each keeping its own adjacency lists and its own Kahn loop.

Edges are stored deduplicated and sorted, so ``successors(u)`` and ``predecessors(v)`` are ascending
array views into ``succ_idx`` / ``pred_idx`` (read-only: they are shared). Kahn's algorithm is the
BRKGA decoder's hot path (thousands of orders per run), so it runs on cached Python lists with the
priorities converted to Python floats once (indexing a numpy array per node costs more than the heap).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from functools import cached_property

import numpy as np


class Dag:
    """Nodes ``0..n-1`` and directed edges in CSR form: ``succ_idx[succ_ptr[u]:succ_ptr[u+1]]`` are u's
    successors, ``pred_idx[pred_ptr[v]:pred_ptr[v+1]]`` v's predecessors, both ascending. Duplicate edges
    count once; a self-loop is kept (it makes the graph cyclic)."""

    def __init__(self, n: int, edges: Iterable[tuple[int, int]] | np.ndarray):
        self.n = int(n)
        pairs = np.asarray(edges if isinstance(edges, np.ndarray) else list(edges), dtype=np.int64).reshape(-1, 2)
        if len(pairs) and (pairs.min() < 0 or pairs.max() >= self.n):
            raise ValueError(f"an edge endpoint is outside 0..{self.n - 1}")
        codes = np.unique(pairs[:, 0] * max(self.n, 1) + pairs[:, 1])  # sorted by (u, v), duplicates gone
        tails, heads = codes // max(self.n, 1), codes % max(self.n, 1)
        self.edges = _frozen(np.stack([tails, heads], axis=1))
        self.succ_ptr = _frozen(_pointers(tails, self.n))
        self.succ_idx = _frozen(heads)
        by_head = np.argsort(heads, kind="stable")  # tails stay ascending within each head
        self.pred_ptr = _frozen(_pointers(heads, self.n))
        self.pred_idx = _frozen(tails[by_head])

    def __len__(self) -> int:
        return self.n

    def __getstate__(self) -> dict:
        """Pickle the arrays only (instances travel to bound-job processes); the list caches are rebuilt
        on first use there."""
        return {k: v for k, v in self.__dict__.items() if isinstance(v, np.ndarray) or k == "n"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({k: _frozen(v) if isinstance(v, np.ndarray) else v for k, v in state.items()})

    def successors(self, u: int) -> np.ndarray:
        """u's successors, ascending: a read-only view, no copy (callers index numpy arrays with it)."""
        return self.succ_idx[self.succ_ptr[u]:self.succ_ptr[u + 1]]

    def predecessors(self, v: int) -> np.ndarray:
        """v's predecessors, ascending: a read-only view, no copy."""
        return self.pred_idx[self.pred_ptr[v]:self.pred_ptr[v + 1]]

    @cached_property
    def succ_lists(self) -> list[list[int]]:
        """Successors as Python lists: what the pure-Python loops (Kahn, searches) iterate fastest."""
        idx, ptr = self.succ_idx.tolist(), self.succ_ptr.tolist()
        return [idx[ptr[u]:ptr[u + 1]] for u in range(self.n)]

    @cached_property
    def pred_lists(self) -> list[list[int]]:
        """Predecessors as Python lists (see :attr:`succ_lists`)."""
        idx, ptr = self.pred_idx.tolist(), self.pred_ptr.tolist()
        return [idx[ptr[v]:ptr[v + 1]] for v in range(self.n)]

    @cached_property
    def _indegree(self) -> list[int]:
        return np.diff(self.pred_ptr).tolist()

    def topological_order(self, priority: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
        """Kahn's algorithm, always taking the ready node with the smallest ``(priority, index)`` — by
        default the smallest index, i.e. as close to ``0, 1, 2, …`` as the edges allow. Every
        topological order is this for some priorities (the BRKGA decoder's Algorithm 3). Raises
        ``ValueError`` on a cycle."""
        if priority is None:
            key: Sequence = range(self.n)
        else:
            key = priority.tolist() if isinstance(priority, np.ndarray) else list(priority)  # Python scalars
        indegree = list(self._indegree)
        heap = [(key[v], v) for v in range(self.n) if not indegree[v]]
        heapq.heapify(heap)
        order = []
        succs, pop, push = self.succ_lists, heapq.heappop, heapq.heappush
        while heap:
            u = pop(heap)[1]
            order.append(u)
            for v in succs[u]:
                indegree[v] -= 1
                if not indegree[v]:
                    push(heap, (key[v], v))
        if len(order) != self.n:
            raise ValueError("the graph has a cycle")
        return np.array(order, dtype=np.int64)

    def bfs_order(self) -> np.ndarray:
        """Breadth-first topological order: Kahn with a FIFO queue, the sources in index order and each
        node's newly ready successors in index order (the heterogeneous-scheduling thesis's order,
        Section 4.2). Raises ``ValueError`` on a cycle."""
        indegree = list(self._indegree)
        queue = [v for v in range(self.n) if not indegree[v]]
        succs, head = self.succ_lists, 0
        while head < len(queue):
            u, head = queue[head], head + 1
            for v in succs[u]:
                indegree[v] -= 1
                if not indegree[v]:
                    queue.append(v)
        if len(queue) != self.n:
            raise ValueError("the graph has a cycle")
        return np.array(queue, dtype=np.int64)

    def dfs_order(self) -> np.ndarray:
        """Depth-first topological order: Kahn with a stack, following a chain while it lasts (lowest
        index first among the sources and among a node's successors). Raises ``ValueError`` on a cycle."""
        indegree = list(self._indegree)
        stack = [v for v in range(self.n - 1, -1, -1) if indegree[v] == 0]
        order = []
        succs = self.succ_lists
        while stack:
            u = stack.pop()
            order.append(u)
            for v in reversed(succs[u]):
                indegree[v] -= 1
                if indegree[v] == 0:
                    stack.append(v)
        if len(order) != self.n:
            raise ValueError("the graph has a cycle")
        return np.array(order, dtype=np.int64)


def _pointers(keys: np.ndarray, n: int) -> np.ndarray:
    """CSR pointers for ``keys`` sorted ascending: ``ptr[i]`` is the first position of key ``i``."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr


def _frozen(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array
