"""The Constrained Hypergraph Labeling Problem (CHLP, Section 4 of "Matrix Tiling as Constrained
Hypergraph Labeling") and its weighted form TP(H, G, L, w) of Section 5.

Vertices are matrices (tensors) with a label domain; a hyperedge is an expression (op) over a *set* of
vertices with its feasible labelings L(e) (one label per vertex). A labeling X costs

    C(X) = Σ_e w(e) · min_{l ∈ L(e)} ( base(l) + Σ_{v ∈ e} c(v) · [X[v] ≠ l[v]] )

— the paper's Hamming distance d(X, l) (Section 4), with the Section 5 edge weight w(e) (loop counts)
and, per the paper's "if the matrices have unequal sizes, we can use weights to scale the retiling
cost", a vertex weight c(v) (a matrix program's elements, rows × cols). ``base(l)`` is an optional
per-labeling algorithm cost (0 in the paper; kept for the ONNX catalog's compute costs). All costs
are integers, so CP-SAT optimizes them exactly.

The chosen labeling per op (the "algorithm choice") is the minimizing l; ties go to the first.

Edges built from a program carry their output vertex, which gives the computation DAG G of Section 5
(input matrices -> output matrix); random CHLP instances (Section 4) have no outputs and no order.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from onnxpart.errors import UserError
from onnxpart.tile.program.program import CATALOG, LABELS, Program, dump_program, feasible_tilings, parse_program


@dataclass(frozen=True)
class Edge:
    """A hyperedge: distinct ``vertices`` (the output first when there is one), feasible labelings
    ``tuples`` (label indices, one per vertex), the algorithm behind each, and integer costs."""

    name: str
    vertices: tuple[int, ...]
    tuples: tuple[tuple[int, ...], ...]
    algorithms: tuple[str, ...]
    weight: int = 1
    output: int | None = None  # the vertex this expression writes (None: unordered CHLP)
    base: tuple[int, ...] | None = None  # per-tuple algorithm cost (None: all 0, the paper's)

    def base_cost(self, t: int) -> int:
        return 0 if self.base is None else self.base[t]


@dataclass(frozen=True)
class Instance:
    """A CHLP instance; ``labels`` names the label indices, ``domains`` lists each vertex's labels."""

    vertices: tuple[str, ...]
    vertex_weight: tuple[int, ...]
    domains: tuple[tuple[int, ...], ...]
    edges: tuple[Edge, ...]
    labels: tuple[str, ...] = LABELS
    name: str = "chlp"
    unit: str = "elements retiled"

    def __post_init__(self) -> None:
        n, tau = len(self.vertices), len(self.labels)
        ints = all(isinstance(x, (int, np.integer)) and x >= 0 for x in self.vertex_weight)
        if len(self.vertex_weight) != n or len(self.domains) != n or not ints:
            raise ValueError("one non-negative integer weight and one domain per vertex")
        if any(not d or any(not 0 <= x < tau for x in d) for d in self.domains):
            raise ValueError("every domain is a non-empty list of label indices")
        for e in self.edges:
            if len(set(e.vertices)) != len(e.vertices) or any(not 0 <= v < n for v in e.vertices):
                raise ValueError(f"edge {e.name}: vertices must be distinct vertex indices")
            if not e.tuples or any(len(t) != len(e.vertices) for t in e.tuples):
                raise ValueError(f"edge {e.name}: every feasible labeling has one label per vertex")
            if e.weight < 0 or (e.base is not None and (len(e.base) != len(e.tuples) or min(e.base) < 0)):
                raise ValueError(f"edge {e.name}: weights and base costs are non-negative integers")

    @property
    def n(self) -> int:
        return len(self.vertices)

    @property
    def m(self) -> int:
        return len(self.edges)

    @cached_property
    def arrays(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Per edge: vertices (k,), tuples (s, k), weighted vertex costs w·c (k,), weighted base w·base (s,)."""
        out = []
        vw = np.asarray(self.vertex_weight, dtype=np.int64)
        for e in self.edges:
            verts = np.asarray(e.vertices, dtype=np.int64)
            base = np.zeros(len(e.tuples), dtype=np.int64) if e.base is None else np.asarray(e.base)
            out.append((verts, np.asarray(e.tuples, dtype=np.int64).reshape(len(e.tuples), len(verts)),
                        vw[verts] * e.weight, base.astype(np.int64) * e.weight))
        return out

    @cached_property
    def incident(self) -> tuple[tuple[int, ...], ...]:
        """Edge indices per vertex."""
        inc: list[list[int]] = [[] for _ in range(self.n)]
        for i, e in enumerate(self.edges):
            for v in e.vertices:
                inc[v].append(i)
        return tuple(tuple(x) for x in inc)

    def space_size(self, vertices: Sequence[int] | None = None) -> int:
        """|S|: the number of labelings of ``vertices`` (all by default)."""
        vs = range(self.n) if vertices is None else vertices
        return math.prod(len(self.domains[v]) for v in vs)

    def edge_costs(self, labels: Sequence[int] | np.ndarray) -> np.ndarray:
        """w(e)·C(e, X) per edge for a full labeling X (label indices per vertex)."""
        x = np.asarray(labels, dtype=np.int64)
        out = np.empty(self.m, dtype=np.int64)
        for i, (verts, tuples, cw, base) in enumerate(self.arrays):
            out[i] = ((x[verts][None, :] != tuples) @ cw + base).min()
        return out

    def cost(self, labels: Sequence[int] | np.ndarray) -> int:
        """C(X) (module docstring); raises ValueError for a label outside a vertex's domain."""
        for v, x in enumerate(labels):
            if x not in self.domains[v]:
                raise ValueError(f"vertex {self.vertices[v]}: label {x} is not in its domain")
        return int(self.edge_costs(labels).sum())

    def choices(self, labels: Sequence[int] | np.ndarray) -> tuple[int, ...]:
        """The minimizing feasible labeling (tuple index) per edge; ties go to the first."""
        x = np.asarray(labels, dtype=np.int64)
        return tuple(int(np.argmin((x[verts][None, :] != tuples) @ cw + base))
                     for verts, tuples, cw, base in self.arrays)

    def components(self) -> list[list[int]]:
        """Connected components of the hypergraph as sorted vertex lists (Algorithm 1, line 1)."""
        parent = list(range(self.n))

        def find(v: int) -> int:
            while parent[v] != v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v

        for e in self.edges:
            for u in e.vertices[1:]:
                parent[find(u)] = find(e.vertices[0])
        groups: dict[int, list[int]] = {}
        for v in range(self.n):
            groups.setdefault(find(v), []).append(v)
        return list(groups.values())

    def layers(self) -> list[int]:
        """Layer (1-based) of each edge in the dependency poset of Section 5: layer 1 reads only
        inputs; otherwise 1 + the deepest layer among the edges that wrote its inputs. Edges without
        an output (unordered CHLP) are all layer 1."""
        writer = {e.output: i for i, e in enumerate(self.edges) if e.output is not None}
        layer = [0] * self.m
        for i in self._topological():
            e = self.edges[i]
            preds = [writer[v] for v in e.vertices if v != e.output and v in writer]
            layer[i] = 1 + max((layer[p] for p in preds), default=0)
        return layer

    def covers(self) -> list[list[int]]:
        """cov(e): the edges that directly read e's output (Algorithm 4, line 5)."""
        out: list[list[int]] = [[] for _ in range(self.m)]
        for i, e in enumerate(self.edges):
            if e.output is not None:
                out[i] = [j for j in self.incident[e.output] if j != i]
        return out

    def _topological(self) -> list[int]:
        writer = {e.output: i for i, e in enumerate(self.edges) if e.output is not None}
        order, state = [], [0] * self.m
        for root in range(self.m):
            stack = [(root, False)]
            while stack:
                i, done = stack.pop()
                if done:
                    state[i] = 2
                    order.append(i)
                    continue
                if state[i]:
                    continue
                state[i] = 1
                stack.append((i, True))
                e = self.edges[i]
                for v in e.vertices:
                    p = writer.get(v)
                    if v != e.output and p is not None and state[p] == 0:
                        stack.append((p, False))
        return order

    def label_names(self, labels: Sequence[int]) -> dict[str, str]:
        return {self.vertices[v]: self.labels[int(x)] for v, x in enumerate(labels)}


def restrict_labels(instance: Instance, labels: Sequence[str]) -> Instance:
    """The instance with every free matrix's domain cut to ``labels`` (``--labels``); a pinned matrix keeps
    its one label."""
    unknown = [x for x in labels if x not in instance.labels]
    if unknown or not labels:
        raise UserError(f"unknown --labels {', '.join(unknown) or '(empty)'}: use {', '.join(instance.labels)}")
    allowed = {instance.labels.index(x) for x in labels}
    domains = tuple(d if len(d) == 1 else tuple(a for a in d if a in allowed) for d in instance.domains)
    return dataclasses.replace(instance, domains=domains)


def build_instance(program: Program) -> Instance:
    """The CHLP instance of a matrix program: one vertex per matrix (weight = elements), one edge per
    expression (weight = loop weight) with L(e) from :func:`~onnxpart.tile.program.program.feasible_tilings`
    (base cost = the elements of the extra retiled copies a tiling needs, else none);
    a ``fixed`` matrix's domain is its one label."""
    names = program.matrices
    index = {m: i for i, m in enumerate(names)}
    label = {x: i for i, x in enumerate(LABELS)}
    full = tuple(range(len(LABELS)))
    domains = tuple((label[program.fixed[m]],) if m in program.fixed else full for m in names)
    edges = []
    for expr in program.expressions:
        matrices, tilings = feasible_tilings(expr)
        base = tuple(sum(program.elements(m) for m in copies) for _, _, copies in tilings)
        edges.append(Edge(f"{expr.where}: {expr}", tuple(index[m] for m in matrices),
                          tuple(tuple(label[x] for x in t) for _, t, _ in tilings),
                          tuple(a for a, _, _ in tilings), expr.weight, index[expr.out],
                          base if any(base) else None))
    weights = tuple(program.elements(m) for m in names)
    return Instance(names, weights, domains, tuple(edges), LABELS, program.name)


def random_chlp(n: int, m: int, k: int, s: int, tau: int = 3, seed: int = 0) -> Instance:
    """A random instance (H_{m,n,k}, L_{tau,s}) of Section 4: m distinct k-subsets of n vertices chosen
    uniformly, and for each edge an s-subset of [tau]^k chosen uniformly; unit weights, no order."""
    if not (1 <= k <= n and 1 <= s <= tau ** k and 0 <= m <= math.comb(n, k)):
        raise UserError(f"random CHLP needs 1 <= k <= n, 1 <= s <= tau^k, m <= C(n, k); "
                        f"got n={n} m={m} k={k} s={s} tau={tau}")
    rng = np.random.default_rng(seed)
    chosen: set[tuple[int, ...]] = set()
    edges = []
    while len(edges) < m:
        verts = tuple(sorted(int(v) for v in rng.choice(n, size=k, replace=False)))
        if verts in chosen:
            continue
        chosen.add(verts)
        codes = rng.choice(tau ** k, size=s, replace=False)
        tuples = tuple(tuple(int(c) // tau ** j % tau for j in range(k)) for c in sorted(codes))
        edges.append(Edge(f"e{len(edges)}", verts, tuples, ("random",) * s))
    labels = LABELS[:tau] if tau <= len(LABELS) else tuple(f"l{i}" for i in range(tau))
    return Instance(tuple(f"v{i}" for i in range(n)), (1,) * n, (tuple(range(tau)),) * n,
                    tuple(edges), labels, f"random-chlp-n{n}-m{m}-k{k}-s{s}-seed{seed}", "mismatches")


def random_program_json(n_inputs: int, n_exprs: int, ops: Sequence[str] = tuple(CATALOG),
                        p_transpose: float = 0.3, max_weight: int = 1, seed: int = 0) -> str:
    """A random matrix program (JSON text): square matrices of one size, each expression's operands
    drawn from the inputs and earlier outputs, transposed with probability ``p_transpose``."""
    rng = np.random.default_rng(seed)
    names = [f"X{i}" for i in range(n_inputs)]
    exprs = []
    for i in range(n_exprs):
        op = str(ops[int(rng.integers(len(ops)))])
        arity = CATALOG[op][0]
        ins = [names[int(rng.integers(len(names)))] + ("T" if rng.random() < p_transpose else "")
               for _ in range(arity)]
        expr = {"out": f"Y{i}", "op": op, "in": ins}
        if max_weight > 1:
            expr["weight"] = int(rng.integers(1, max_weight + 1))
        exprs.append(expr)
        names.append(f"Y{i}")
    return dump_program(exprs)


def random_program(n_inputs: int, n_exprs: int, ops: Sequence[str] = tuple(CATALOG),
                   p_transpose: float = 0.3, max_weight: int = 1, seed: int = 0) -> Instance:
    """:func:`random_program_json` parsed and built into a CHLP instance."""
    text = random_program_json(n_inputs, n_exprs, ops, p_transpose, max_weight, seed)
    return build_instance(parse_program(json.loads(text), f"random-program-seed{seed}"))


def all_labelings(instance: Instance) -> itertools.product:
    """Every labeling, in lexicographic order of the domains (for brute force on tiny instances)."""
    return itertools.product(*instance.domains)
