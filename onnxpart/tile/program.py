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

Labels (tiling types, the paper's Fig. 1): ``row``, ``col``, ``block`` (tau = 3). Transposing swaps
``row`` and ``col`` and keeps ``block``. Each op has algorithms, each with its preferred tilings
(output first, then the operands as the op reads them); L(e) is their union (Section 4).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnxpart.errors import UserError

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

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.']*$")


@dataclass(frozen=True)
class Operand:
    matrix: str
    transposed: bool = False

    def __str__(self) -> str:
        return self.matrix + ("T" if self.transposed else "")


@dataclass(frozen=True)
class Expression:
    """One atomic expression ``out = op(inputs)``; ``where`` names it in messages (``expression 3``)."""

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


def load_program(text: str, name: str = "program") -> Program:
    """Parse JSON text (see the module docstring)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"matrix program is not valid JSON: {exc}") from None
    return parse_program(data, name)


def parse_program(data: Any, name: str = "program") -> Program:
    """Parse the decoded JSON (a list of expressions or an object with ``program``); raises UserError
    with the expression index and field for anything malformed."""
    if isinstance(data, list):
        data = {"program": data}
    if not isinstance(data, dict) or not isinstance(data.get("program"), list):
        raise UserError("matrix program must be a JSON list of expressions or an object with a "
                        "'program' list")
    unknown = set(data) - {"program", "sizes", "default_size", "fixed", "name"}
    if unknown:
        raise UserError(f"matrix program: unknown top-level field(s) {sorted(unknown)}")
    default = _shape(data.get("default_size", [1, 1]), "default_size")
    sizes = data.get("sizes", {})
    if not isinstance(sizes, dict):
        raise UserError("matrix program: 'sizes' must map matrix names to [rows, cols]")
    declared = {str(k): _shape(v, f"sizes[{k!r}]") for k, v in sizes.items()}
    flat: list[tuple[str, dict, int]] = []
    _flatten(data["program"], "expression ", 1, flat)
    if not flat:
        raise UserError("matrix program has no expressions")
    state = _State(declared, default)
    expressions = tuple(state.expression(where, raw, weight) for where, raw, weight in flat)
    fixed = _fixed(data.get("fixed", {}), state)
    return Program(expressions, dict(state.shapes), tuple(state.inputs), fixed,
                   str(data.get("name", name)))


def _shape(value: Any, what: str) -> tuple[int, int]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in value)):
        raise UserError(f"matrix program: {what} must be [rows, cols] with positive integers, got {value!r}")
    return int(value[0]), int(value[1])


def _flatten(items: Any, prefix: str, weight: int, out: list[tuple[str, dict, int]]) -> None:
    """Unroll loop blocks into (where, expression dict, weight) in program order."""
    for i, raw in enumerate(items):
        where = f"{prefix}{i}"
        if not isinstance(raw, dict):
            raise UserError(f"{where}: must be an object like {{\"out\": \"G\", \"op\": \"mul\", "
                            f"\"in\": [\"A\", \"FT\"]}}, got {raw!r}")
        if "loop" in raw:
            count = raw["loop"]
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise UserError(f"{where}: field 'loop' must be a positive integer, got {count!r}")
            if set(raw) - {"loop", "body"} or not isinstance(raw.get("body"), list):
                raise UserError(f"{where}: a loop block is {{\"loop\": k, \"body\": [...]}}")
            _flatten_body(raw["body"], where, weight * count, out)
        else:
            out.append((where, raw, weight))


def _flatten_body(items: list, where: str, weight: int, out: list[tuple[str, dict, int]]) -> None:
    start = len(out)
    _flatten(items, f"{where}, body ", weight, out)
    if len(out) == start:
        raise UserError(f"{where}: field 'body' is empty")


class _State:
    """Matrices defined so far while reading the program in order (SSA renaming, shapes)."""

    def __init__(self, declared: dict[str, tuple[int, int]], default: tuple[int, int]) -> None:
        self.declared, self.default = declared, default
        self.shapes: dict[str, tuple[int, int]] = {}
        self.current: dict[str, str] = {}  # user name -> latest matrix (SSA version)
        self.versions: dict[str, int] = {}
        self.inputs: list[str] = []

    def known(self, name: str) -> bool:
        return name in self.current or name in self.declared

    def resolve(self, name: str, where: str) -> Operand:
        stem = name[:-1] if len(name) > 1 and name.endswith("T") else None
        if self.known(name):
            if stem is not None and self.known(stem):
                raise UserError(f"{where}: field 'in': {name!r} is ambiguous (a matrix, and the "
                                f"transpose of {stem!r}); rename one of them")
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

    def expression(self, where: str, raw: dict, weight: int) -> Expression:
        unknown = set(raw) - {"out", "op", "in", "weight", "algorithms"}
        if unknown:
            raise UserError(f"{where}: unknown field(s) {sorted(unknown)} (use out, op, in, weight, "
                            f"algorithms)")
        op = raw.get("op")
        if op not in CATALOG:
            raise UserError(f"{where}: field 'op' must be one of {', '.join(CATALOG)}, got {op!r}")
        out = raw.get("out")
        if not isinstance(out, str) or not _NAME.match(out) or "@" in out:
            raise UserError(f"{where}: field 'out' must be a matrix name (letters, digits, _), got {out!r}")
        arity = CATALOG[op][0]
        names = raw.get("in")
        if (not isinstance(names, list) or len(names) != arity
                or not all(isinstance(n, str) and _NAME.match(n) for n in names)):
            raise UserError(f"{where}: field 'in' must list {arity} matrix name(s) for {op}, got {names!r}")
        extra = raw.get("weight", 1)
        if not isinstance(extra, int) or isinstance(extra, bool) or extra < 1:
            raise UserError(f"{where}: field 'weight' must be a positive integer, got {extra!r}")
        algorithms = _algorithms(raw.get("algorithms"), op, where)
        inputs = tuple(self.resolve(n, where) for n in names)
        shape = self._out_shape(op, inputs, where)
        if self.declared.get(out, shape) != shape:
            raise UserError(f"{where}: field 'out': sizes[{out!r}] is {self.declared[out]} but "
                            f"{op} gives {shape}")
        matrix = self.define(out, shape)
        return Expression(where, matrix, op, inputs, weight * extra, algorithms)

    def _out_shape(self, op: str, inputs: tuple[Operand, ...], where: str) -> tuple[int, int]:
        shapes = []
        for o in inputs:
            r, c = self.shapes[o.matrix]
            shapes.append((c, r) if o.transposed else (r, c))
        text = " and ".join(f"{r}x{c}" for r, c in shapes)
        if op == "add" and shapes[0] != shapes[1]:
            raise UserError(f"{where}: add needs equal shapes, got {text} (field 'in')")
        if op == "mul":
            if shapes[0][1] != shapes[1][0]:
                raise UserError(f"{where}: mul shapes {text} do not match ({shapes[0][1]} != "
                                f"{shapes[1][0]}; field 'in')")
            return shapes[0][0], shapes[1][1]
        if op == "inv" and shapes[0][0] != shapes[0][1]:
            raise UserError(f"{where}: inv needs a square matrix, got {text} (field 'in')")
        if op == "transpose":
            return shapes[0][1], shapes[0][0]
        return shapes[0]


def _algorithms(value: Any, op: str, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = {a for a, _ in CATALOG[op][1]}
    if (not isinstance(value, list) or not value
            or not all(isinstance(a, str) and a in names for a in value)):
        raise UserError(f"{where}: field 'algorithms' must be a non-empty list of {op} algorithms "
                        f"({', '.join(sorted(names))}), got {value!r}")
    return tuple(value)


def _fixed(value: Any, state: _State) -> dict[str, str]:
    if not isinstance(value, dict):
        raise UserError("matrix program: 'fixed' must map matrix names to row, col or block")
    fixed = {}
    for name, label in value.items():
        if name not in state.current:
            raise UserError(f"matrix program: fixed[{name!r}]: no such matrix")
        if label not in LABELS:
            raise UserError(f"matrix program: fixed[{name!r}] must be one of {', '.join(LABELS)}, "
                            f"got {label!r}")
        fixed[state.current[name]] = label
    return fixed


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
