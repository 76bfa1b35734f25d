"""Matrix programs: the paper's user programs, parsed from JSON, and their operations' feasible tilings.

A matrix program (Section 1.1 and Section 6 of "Matrix Tiling as Constrained Hypergraph Labeling") is an
ordered list of atomic expressions ``{"out": "G", "op": "mul", "in": ["A", "FT"]}`` over large matrices;
a trailing ``T`` on an operand means its transpose. Ops are ``add``, ``mul``, ``inv`` and ``transpose``.

The JSON is either that list or an object::

    {"program": [...], "sizes": {"A": [1000, 500]}, "default_size": [1000, 1000],
     "fixed": {"A": "row"}}

* ``sizes`` gives input matrices' shapes (rows, cols); unlisted inputs take ``default_size`` (default
  ``[1, 1]``: every matrix weighs 1 and the cost is the paper's unweighted Hamming count). Outputs'
  shapes are inferred and checked (``mul`` inner dimensions, ``add`` equal shapes, ``inv`` square).
* ``fixed`` pins a matrix's tiling (e.g. an input that arrives row-tiled).
* An expression may carry ``"weight": k`` (it runs k times) and ``"algorithms": [...]`` (restrict the
  op to those implementations, as the paper's Section 6 did); ``{"loop": k, "body": [...]}`` multiplies
  the weight of every expression in its body by k (loop weights; loop-carried tilings are not linked).
* Each matrix is written at most once (Section 3's assumption): a second ``out`` of the same name is a
  new matrix ``NAME@2`` (the paper's rewrite ``e3(A = C + G) -> e3(H = C + G)``), later reads see it.

Operand resolution: a defined (or ``sizes``-declared) name is that matrix; else ``XT`` is the transpose
of ``X``; else the name is a new input matrix. A name that is both a matrix and ``stem + "T"`` of
another is ambiguous and rejected.

:class:`ProgramFile`, :class:`_Expression` and :class:`_Loop` are the schema: a bad field is one error
naming the file and its path (``program[0].op``; a bare list reads as ``program``). Dims and weights
(``weight`` × its loops) are integers up to 2**31 − 1, and Σ weight × elements over the expressions'
matrices at most 2**53, so every cost the solvers add up stays exact.

Labels (tiling types, the paper's Fig. 1): ``row``, ``col``, ``block`` (tau = 3). Transposing swaps
``row`` and ``col`` and keeps ``block``. Each op has algorithms, each with its preferred tilings
(output first, then the operands as the op reads them); L(e) is their union (Section 4).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Optional

from pydantic import Field, model_validator

from onnxpart.units import Range
from onnxpart.validate import Schema, identifier, located, number, parse_json, validate

#: The tiling types of the paper's Fig. 1, in label-index order.
LABELS: tuple[str, ...] = ("row", "col", "block")
#: The tiling of A^T's storage that is the given tiling of A (row <-> col).
TRANSPOSED: dict[str, str] = {"row": "col", "col": "row", "block": "block"}

_R, _C, _B = LABELS

#: op -> (arity, [(algorithm, preferred tiling: output first, then operands as the op reads them)]).
#: mul: 1-D ring algorithms (row-/column-panel circulation), the panel algorithms that rotate B's column
#: (or A's row) panels, and Cannon's on blocks (Section 1's example); inv: Gauss-Jordan on columns
#: (Section 1) or rows; add: elementwise, all three tilings aligned; transpose: local, the output's
#: tiling is the transpose of the input's (Section 3.1, BTP_T's "A = B^T").
CATALOG: dict[str, tuple[int, tuple[tuple[str, tuple[str, ...]], ...]]] = {
    "add": (2, (("elementwise", (_R, _R, _R)), ("elementwise", (_C, _C, _C)),
                ("elementwise", (_B, _B, _B)))),
    "mul": (2, (("row-ring", (_R, _R, _R)), ("col-ring", (_C, _C, _C)),
                ("row-panels", (_R, _R, _C)), ("col-panels", (_C, _R, _C)),
                ("cannon", (_B, _B, _B)))),
    "inv": (1, (("gauss-jordan-col", (_C, _C)), ("gauss-jordan-row", (_R, _R)))),
    "transpose": (1, (("local", (_C, _R)), ("local", (_R, _C)), ("local", (_B, _B)))),
}

@dataclass(frozen=True)
class Operand:
    matrix: str
    transposed: bool = False

    def __str__(self) -> str:
        return self.matrix + ("T" if self.transposed else "")


@dataclass(frozen=True)
class Expression:
    """One atomic expression ``out = op(inputs)``; ``where`` names it in plans (``expression 3``, or
    ``expression 1, body 0`` inside a loop)."""

    where: str
    out: str
    op: str
    inputs: tuple[Operand, ...]
    weight: int = 1
    algorithms: tuple[str, ...] | None = None  # None: every algorithm of the op

    def __str__(self) -> str:
        return f"{self.out} = {self.op}({', '.join(map(str, self.inputs))})"


@dataclass(frozen=True)
class Program:
    """A parsed program: expressions in program order, every matrix's shape, inputs, pinned tilings."""

    expressions: tuple[Expression, ...]
    shapes: Mapping[str, tuple[int, int]]
    inputs: tuple[str, ...]
    fixed: Mapping[str, str] = field(default_factory=dict)
    name: str = "program"

    @property
    def matrices(self) -> tuple[str, ...]:
        """Inputs first (first-use order), then outputs in program order."""
        return self.inputs + tuple(e.out for e in self.expressions)

    def elements(self, matrix: str) -> int:
        rows, cols = self.shapes[matrix]
        return rows * cols


def load_program(text: str, name: str = "program", source: str = "matrix program") -> Program:
    """Parse JSON text (see the module docstring); ``source`` names the file in errors."""
    return parse_program(parse_json(text, source), name, source)


#: What a program's numbers may be: matrix dims, and expression weights (``weight`` × enclosing ``loop``s).
MATRIX_DIM = Range(1, 2**31 - 1, integer=True)
WEIGHT = Range(1, 2**31 - 1, integer=True)
#: Σ over expressions of weight × the elements of their matrices bounds every cost the solvers add up
#: (CP-SAT's integer objective included); above 2**53 costs are no longer exact.
MAX_WEIGHTED_ELEMENTS = 2**53

MatrixName = identifier(r"[A-Za-z_][A-Za-z0-9_.']*", "a matrix name (letters, digits, _ . ')")
Shape = Annotated[list[number(MATRIX_DIM)], Field(min_length=2, max_length=2)]


class _Expression(Schema):
    """``{"out": "G", "op": "mul", "in": ["A", "FT"], "weight": 1, "algorithms": [...]}``."""

    out: MatrixName
    op: Literal["add", "mul", "inv", "transpose"]
    operands: list[MatrixName] = Field(alias="in")
    weight: number(WEIGHT) = 1
    algorithms: Optional[Annotated[list[str], Field(min_length=1)]] = None

    @model_validator(mode="after")
    def _fits_the_op(self) -> "_Expression":
        arity, algorithms = CATALOG[self.op][0], {a for a, _ in CATALOG[self.op][1]}
        if len(self.operands) != arity:
            raise ValueError(f"'in' must list {arity} matrix name(s) for {self.op}, got {self.operands!r}")
        unknown = [a for a in self.algorithms or () if a not in algorithms]
        if unknown:
            raise ValueError(f"'algorithms' must be {self.op} algorithms ({', '.join(sorted(algorithms))}), "
                             f"got {unknown!r}")
        return self


class _Loop(Schema):
    """``{"loop": k, "body": [...]}``: the body's expressions run k times."""

    loop: number(WEIGHT)
    body: Annotated[list[Any], Field(min_length=1)]


class ProgramFile(Schema):
    """The schema of a matrix program's top level (the module docstring); the expressions and loops of
    ``program`` are validated one by one as :func:`_flatten` unrolls them."""

    program: list[Any]
    sizes: dict[MatrixName, Shape] = {}
    default_size: Shape = [1, 1]
    fixed: dict[str, Literal["row", "col", "block"]] = {}
    name: Optional[str] = None


def parse_program(data: Any, name: str = "program", source: str = "matrix program") -> Program:
    """Parse the decoded JSON (a list of expressions or an object with ``program``); a UserError naming
    ``source``, the field path (``program[2].op``; a bare list reads as ``program``) and what is wrong."""
    top = validate(ProgramFile, {"program": data} if isinstance(data, list) else data, source)
    flat: list[tuple[tuple, _Expression, int]] = []
    _flatten(top.program, ("program",), 1, flat, source)
    if not flat:
        raise located(source, ("program",), "the program has no expressions")
    state = _State({k: (int(r), int(c)) for k, (r, c) in top.sizes.items()},
                   (int(top.default_size[0]), int(top.default_size[1])), source)
    expressions = tuple(state.expression(at, raw, weight) for at, raw, weight in flat)
    fixed = {state.matrix(m, ("fixed", m)): label for m, label in top.fixed.items()}
    program = Program(expressions, dict(state.shapes), tuple(state.inputs), fixed, top.name or name)
    weighted = sum(e.weight * sum(program.elements(o.matrix) for o in e.inputs) + e.weight * program.elements(e.out)
                   for e in expressions)
    if weighted > MAX_WEIGHTED_ELEMENTS:
        raise located(source, ("program",), f"weights × matrix elements add up to {weighted:.3g}, above the "
                                            f"limit 2**53 = {MAX_WEIGHTED_ELEMENTS:.3g}: use smaller sizes or weights")
    return program


def _flatten(items: list, at: tuple, weight: int, out: list[tuple[tuple, _Expression, int]], source: str) -> None:
    """Unroll loop blocks into (field path, expression, weight) in program order."""
    for i, raw in enumerate(items):
        if isinstance(raw, dict) and "loop" in raw:
            loop = validate(_Loop, raw, source, at=at + (i,))
            total = weight * loop.loop
            if total > WEIGHT.high:
                raise located(source, at + (i, "loop"), f"nested loops repeat the body {total} times, above the "
                                                        f"limit {WEIGHT.high}")
            _flatten(loop.body, at + (i, "body"), total, out, source)
        else:
            out.append((at + (i,), validate(_Expression, raw, source, at=at + (i,)), weight))


def _expression_name(at: tuple) -> str:
    """``("program", 0, "body", 1)`` -> ``expression 0, body 1``: how plans name an expression."""
    indices = [p for p in at if isinstance(p, int)]
    return ", ".join([f"expression {indices[0]}"] + [f"body {i}" for i in indices[1:]])


class _State:
    """Matrices defined so far while reading the program in order (SSA renaming, shapes)."""

    def __init__(self, declared: dict[str, tuple[int, int]], default: tuple[int, int], source: str) -> None:
        self.declared, self.default, self.source = declared, default, source
        self.shapes: dict[str, tuple[int, int]] = {}
        self.current: dict[str, str] = {}  # user name -> latest matrix (SSA version)
        self.versions: dict[str, int] = {}
        self.inputs: list[str] = []

    def known(self, name: str) -> bool:
        return name in self.current or name in self.declared

    def matrix(self, name: str, at: tuple) -> str:
        """The latest matrix of a user name (``fixed``'s keys)."""
        if name not in self.current:
            raise located(self.source, at, "no such matrix")
        return self.current[name]

    def resolve(self, name: str, at: tuple) -> Operand:
        stem = name[:-1] if len(name) > 1 and name.endswith("T") else None
        if self.known(name):
            if stem is not None and self.known(stem):
                raise located(self.source, at, f"{name!r} is ambiguous (a matrix, and the transpose of "
                                               f"{stem!r}); rename one of them")
            return Operand(self._use(name))
        if stem is not None:
            return Operand(self._use(stem), True)
        return Operand(self._use(name))

    def _use(self, name: str) -> str:
        if name not in self.current:  # a program input
            self.current[name] = name
            self.shapes[name] = self.declared.get(name, self.default)
            self.inputs.append(name)
        return self.current[name]

    def define(self, name: str, shape: tuple[int, int]) -> str:
        version = self.versions.get(name, 1 if name in self.current else 0) + 1
        self.versions[name] = version
        matrix = name if version == 1 else f"{name}@{version}"
        self.current[name] = matrix
        self.shapes[matrix] = shape
        return matrix

    def expression(self, at: tuple, raw: _Expression, weight: int) -> Expression:
        inputs = tuple(self.resolve(n, at + ("in", k)) for k, n in enumerate(raw.operands))
        shape = self._out_shape(raw.op, inputs, at + ("in",))
        if self.declared.get(raw.out, shape) != shape:
            raise located(self.source, at + ("out",), f"sizes[{raw.out!r}] is {self.declared[raw.out]} but "
                                                      f"{raw.op} gives {shape}")
        matrix = self.define(raw.out, shape)
        return Expression(_expression_name(at), matrix, raw.op, inputs, weight * int(raw.weight),
                          tuple(raw.algorithms) if raw.algorithms else None)

    def _out_shape(self, op: str, inputs: tuple[Operand, ...], at: tuple) -> tuple[int, int]:
        shapes = []
        for o in inputs:
            r, c = self.shapes[o.matrix]
            shapes.append((c, r) if o.transposed else (r, c))
        text = " and ".join(f"{r}x{c}" for r, c in shapes)
        if op == "add" and shapes[0] != shapes[1]:
            raise located(self.source, at, f"add needs equal shapes, got {text}")
        if op == "mul":
            if shapes[0][1] != shapes[1][0]:
                raise located(self.source, at, f"mul shapes {text} do not match ({shapes[0][1]} != {shapes[1][0]})")
            return shapes[0][0], shapes[1][1]
        if op == "inv" and shapes[0][0] != shapes[0][1]:
            raise located(self.source, at, f"inv needs a square matrix, got {text}")
        if op == "transpose":
            return shapes[0][1], shapes[0][0]
        return shapes[0]


def feasible_tilings(expr: Expression) -> tuple[tuple[str, ...], list[tuple[str, tuple[str, ...], tuple[str, ...]]]]:
    """L(e) of an expression over its *distinct* matrices (output first, then inputs in order), in
    stored-matrix tilings: a transposed operand's preferred tiling is mapped through ``TRANSPOSED``.

    The paper's hyperedge is a set of vertices with one label each (Section 4). When an algorithm reads
    a matrix twice in different stored tilings (``mul(aT, a)`` under ``row-ring`` wants ``a`` as col and
    as row), it needs one retiled copy per extra tiling whatever ``a``'s label: such a preferred tiling
    becomes one entry per tiling the matrix could keep, each listing the matrices it copies (the
    entry's base cost is their size), so the cost is still "one retiling per matrix not in the tiling
    the algorithm reads it in". Returns (matrices, [(algorithm, tiling per matrix, copied matrices)]);
    a tiling seen twice keeps its cheapest entry (then the first algorithm).
    """
    matrices: list[str] = [expr.out]
    for o in expr.inputs:
        if o.matrix not in matrices:
            matrices.append(o.matrix)
    seen: dict[tuple[str, ...], tuple[str, tuple[str, ...]]] = {}
    for algorithm, tiling in CATALOG[expr.op][1]:
        if expr.algorithms is not None and algorithm not in expr.algorithms:
            continue
        wanted: dict[str, list[str]] = {expr.out: [tiling[0]]}
        for o, label in zip(expr.inputs, tiling[1:]):
            labels = wanted.setdefault(o.matrix, [])
            label = TRANSPOSED[label] if o.transposed else label
            if label not in labels:
                labels.append(label)
        copies = tuple(m for m in matrices for _ in wanted[m][1:])
        for choice in itertools.product(*(wanted[m] for m in matrices)):
            old = seen.get(choice)
            if old is None or len(copies) < len(old[1]):
                seen[choice] = (algorithm, copies)
    return tuple(matrices), [(a, t, c) for t, (a, c) in seen.items()]


def dump_program(expressions: Sequence[dict], **top: Any) -> str:
    """JSON text of a program (the inverse of :func:`load_program` for generated programs)."""
    return json.dumps({"program": list(expressions), **top} if top else list(expressions))
