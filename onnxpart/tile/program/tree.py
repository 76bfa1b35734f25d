"""Theorem 1 of "Matrix Tiling as Constrained Hypergraph Labeling": tree programs in linear time.

For BTP_T — programs of ``A = B`` and ``A = B^T`` expressions only, each matrix written once — the
bipartite incidence graph (matrices + expressions) is a tree (the proof's pigeonhole argument), so a
tiling chosen at a root propagates down without backtracking. The corollary extends this to any
number of tiling types "as long as G is a tree". We implement that corollary in its general form: when
the incidence graph of the CHLP instance is a forest, a min-sum dynamic program from the leaves up
(one pass, O(Σ_e |L(e)|·|e|·tau)) followed by a top-down pass choosing labels is exact for the weighted
Hamming cost, pinned tilings and any feasible sets. On a transpose-only program it is exactly Theorem
1's root-and-propagate algorithm: every edge is satisfied and the optimum is 0 unless pinned tilings
conflict.

:func:`applies` says whether the incidence graph is a forest; :func:`is_transpose_only` recognises
BTP_T programs (which always pass it).
"""

from __future__ import annotations

import numpy as np

from onnxpart.tile.program.model import Instance


def is_transpose_only(instance: Instance) -> bool:
    """Every edge is a ``transpose`` (or a copy ``A = transpose(BT)``) of one other matrix."""
    return all(len(e.vertices) == 2 and set(e.algorithms) == {"local"} for e in instance.edges)


def applies(instance: Instance) -> bool:
    """Whether the vertex–edge incidence graph is a forest (Theorem 1's tree condition)."""
    parent = list(range(instance.n + instance.m))

    def find(u: int) -> int:
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    for i, e in enumerate(instance.edges):
        for v in e.vertices:
            a, b = find(v), find(instance.n + i)
            if a == b:
                return False
            parent[a] = b
    return True


def solve_tree(instance: Instance) -> tuple[np.ndarray, int]:
    """The optimal labeling and its cost on a forest instance (raises ValueError otherwise)."""
    if not applies(instance):
        raise ValueError("the incidence graph has a cycle: Theorem 1's algorithm does not apply")
    tau = len(instance.labels)
    order, parent_edge = _rooted_order(instance)
    # f[v][x]: least cost of v's subtree (edges below v) with v labeled x; inf outside v's domain.
    f = np.full((instance.n, tau), np.inf)
    for v in range(instance.n):
        f[v, list(instance.domains[v])] = 0.0
    best_tuple: dict[int, np.ndarray] = {}  # edge -> best tuple index per parent label
    for v in reversed(order):  # children before parents
        for i in instance.incident[v]:
            if i == parent_edge[v]:
                continue
            g, arg = _edge_message(instance, i, v, f)
            f[v] += g
            best_tuple[i] = arg
    x = np.full(instance.n, -1, dtype=np.int64)
    for v in order:  # parents before children
        if parent_edge[v] < 0:
            x[v] = int(np.argmin(f[v]))
        for i in instance.incident[v]:
            if i == parent_edge[v]:
                continue
            verts, tuples, _, _ = instance.arrays[i]
            t = tuples[best_tuple[i][x[v]]]
            for u, label in zip(verts.tolist(), t.tolist()):
                if u != v:
                    x[u] = _cheapest(instance, i, u, f, label)
    return x, instance.cost(x)


def _rooted_order(instance: Instance) -> tuple[list[int], list[int]]:
    """Vertices in BFS order from a root per component, and the edge to each vertex's parent (-1)."""
    parent_edge = [-2] * instance.n
    order: list[int] = []
    for root in range(instance.n):
        if parent_edge[root] != -2:
            continue
        parent_edge[root] = -1
        queue = [root]
        while queue:
            v = queue.pop()
            order.append(v)
            for i in instance.incident[v]:
                if i == parent_edge[v]:
                    continue
                for u in instance.edges[i].vertices:
                    if u != v:
                        parent_edge[u] = i
                        queue.append(u)
    return order, parent_edge


def _edge_message(instance: Instance, i: int, v: int, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """g(x_v) = min_l [ w·base(l) + w·c(v)·[x_v ≠ l_v] + Σ_{child u} min_y (w·c(u)·[y ≠ l_u] + f_u(y)) ]
    per label x_v of the parent vertex v, and the minimizing l per x_v."""
    verts, tuples, cw, base = instance.arrays[i]
    tau = f.shape[1]
    per_tuple = base.astype(float).copy()
    for j, u in enumerate(verts.tolist()):
        if u == v:
            continue
        mismatch = cw[j] * (np.arange(tau)[None, :] != tuples[:, j:j + 1])  # (s, tau)
        per_tuple += (mismatch + f[u][None, :]).min(axis=1)
    jv = verts.tolist().index(v)
    total = per_tuple[None, :] + cw[jv] * (np.arange(tau)[:, None] != tuples[None, :, jv])  # (tau, s)
    return total.min(axis=1), total.argmin(axis=1)


def _cheapest(instance: Instance, i: int, u: int, f: np.ndarray, label: int) -> int:
    """argmin_y w·c(u)·[y ≠ label] + f_u(y): the child's label once the edge's labeling is chosen."""
    verts, _, cw, _ = instance.arrays[i]
    j = verts.tolist().index(u)
    tau = f.shape[1]
    return int(np.argmin(cw[j] * (np.arange(tau) != label) + f[u]))
