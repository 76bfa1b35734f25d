"""The DAG core: CSR adjacency and Kahn's algorithm with a priority."""

import heapq
import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from onnxpart.dag import Dag


def _reference_kahn(n, edges, priority):
    """Textbook Kahn on (priority, index) tuples."""
    succ, indegree = [[] for _ in range(n)], [0] * n
    for u, v in set(edges):
        succ[u].append(v)
        indegree[v] += 1
    heap = [(priority[v], v) for v in range(n) if indegree[v] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, u = heapq.heappop(heap)
        order.append(u)
        for v in succ[u]:
            indegree[v] -= 1
            if indegree[v] == 0:
                heapq.heappush(heap, (priority[v], v))
    return order


def _reference_bfs(n, edges):
    """Textbook FIFO Kahn over the edges as given (duplicates too), sources and successors by index."""
    succ, indegree = [[] for _ in range(n)], [0] * n
    for u, v in edges:
        succ[u].append(v)
        indegree[v] += 1
    queue = [v for v in range(n) if indegree[v] == 0]
    for u in queue:
        for v in sorted(succ[u]):
            indegree[v] -= 1
            if indegree[v] == 0:
                queue.append(v)
    return queue


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 25), seed=st.integers(0, 10_000), ties=st.booleans())
def test_csr_and_kahn_match_a_reference(n, seed, ties):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    pairs = [sorted(rng.integers(0, n, 2)) for _ in range(2 * n)] if n else []
    edges = [(int(perm[a]), int(perm[b])) for a, b in pairs if a != b]
    edges += edges[:3]  # duplicates count once
    priority = rng.integers(0, 3, n).tolist() if ties else rng.random(n).tolist()
    dag = Dag(n, edges)
    for v in range(n):
        assert dag.successors(v).tolist() == sorted({b for a, b in edges if a == v})
        assert dag.predecessors(v).tolist() == sorted({a for a, b in edges if b == v})
    assert dag.topological_order(priority).tolist() == _reference_kahn(n, edges, priority)
    assert dag.topological_order().tolist() == _reference_kahn(n, edges, list(range(n)))
    assert dag.bfs_order().tolist() == _reference_bfs(n, edges)
    position = np.empty(n, dtype=int)
    position[dag.dfs_order()] = np.arange(n)
    assert all(position[u] < position[v] for u, v in edges)


def test_cycles_and_bad_edges_raise():
    with pytest.raises(ValueError, match="cycle"):
        Dag(3, [(0, 1), (1, 2), (2, 1)]).topological_order()
    with pytest.raises(ValueError, match="cycle"):
        Dag(2, [(1, 1)]).dfs_order()
    with pytest.raises(ValueError, match="cycle"):
        Dag(3, [(0, 1), (1, 2), (2, 1)]).bfs_order()
    with pytest.raises(ValueError, match="outside"):
        Dag(2, [(0, 2)])


def test_views_are_read_only_and_dfs_follows_chains():
    dag = Dag(5, np.array([[0, 2], [0, 1], [2, 3], [1, 4]]))
    assert dag.edges.tolist() == [[0, 1], [0, 2], [1, 4], [2, 3]]
    with pytest.raises(ValueError):
        dag.successors(0)[0] = 3
    assert dag.dfs_order().tolist() == [0, 1, 4, 2, 3]
    assert dag.bfs_order().tolist() == [0, 1, 2, 4, 3]
    assert dag.topological_order([5, 4, 3, 2, 1]).tolist() == [0, 2, 3, 1, 4]


def test_pickles_without_its_list_caches():
    dag = Dag(4, [(0, 1), (1, 3), (0, 2)])
    dag.topological_order()  # builds the list caches
    back = pickle.loads(pickle.dumps(dag))
    assert "succ_lists" not in back.__dict__ and not back.succ_idx.flags.writeable
    assert back.topological_order([3, 2, 1, 0]).tolist() == [0, 2, 1, 3]
