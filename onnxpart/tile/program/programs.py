"""The five test programs of Section 6 of "Matrix Tiling as Constrained Hypergraph Labeling", as data.

The paper names them — approximate linear regression, a 3-round power-method PCA ("Parallel PCA"),
bidirectional power-set multiplication, and two random programs — says each has fewer than 18
operations over matrices of one size, and reports times (Table 1) and costs (Fig. 6), but does not
print the programs. The expression lists below follow the experiment file of the authors' public
implementation (STEllAR-GROUP/TilingSolver, ``exp/exp1.py``: ``edge_set1`` linear regression,
``edge_set_pca_3_rounds``, ``edge_set5`` power set, and ``edge_set7``/``edge_set8`` taken as the two
random programs, since the file does not label which of its random sets the paper used).

What is approximated, and so why our costs are not Fig. 6's numbers:

* Costs are the paper's Hamming retiling cost (Section 4) with our catalog's feasible tilings
  (:data:`onnxpart.tile.program.program.CATALOG`), not the implementation's per-algorithm cost tables, and
  every op keeps all of its algorithms (the paper restricted each op to one implementation).
* Operations the catalog lacks are replaced by the nearest one: a vector norm by a product
  (``b_1_int_norm = b_1_int · b_1_int``), subtraction by ``add``; vectors are matrices of the common
  size, as in the implementation's size classes (everything ``large x large``).
* All matrices are ``size x size`` (default 1: every matrix weighs 1, the cost counts retiled
  matrices as in Fig. 6; any other size scales every cost by size²).
"""

from __future__ import annotations

from typing import Any

from onnxpart.tile.program.program import Program, parse_program


def _e(out: str, op: str, *ins: str) -> dict[str, Any]:
    return {"out": out, "op": op, "in": list(ins)}


#: Approximate linear regression (two right-hand sides): beta = (aᵀa)⁻¹aᵀ, fits and residuals.
LINEAR_REGRESSION = [
    _e("alpha", "mul", "aT", "a"),
    _e("beta", "inv", "alpha"),
    _e("kappa", "mul", "beta", "aT"),
    _e("gamma", "mul", "kappa", "b"),
    _e("gamma_p", "mul", "kappa", "c"),
    _e("delta", "mul", "a", "gamma"),
    _e("delta_p", "mul", "a", "gamma_p"),
    _e("epsilon", "add", "delta", "b"),
    _e("epsilon_p", "add", "delta_p", "c"),
]

#: Power-method PCA, 3 rounds (each: b = A b, its norm, the normalized b), then a Rayleigh-quotient
#: style eigenvalue estimate and a deflation step.
PCA = []
for _k in (1, 2, 3):
    PCA += [
        _e(f"b_{_k}_int", "mul", "A", f"b_{_k - 1}"),
        _e(f"b_{_k}_int_norm", "mul", f"b_{_k}_int", f"b_{_k}_int"),
        _e(f"b_{_k}", "mul", f"b_{_k}_int", f"b_{_k}_int_norm"),
    ]
PCA += [
    _e("alpha", "mul", "b_3", "A"),
    _e("alpha_2", "mul", "b_2", "alpha"),
    _e("beta", "inv", "alpha_2"),
    _e("kappa", "mul", "beta", "AT"),
    _e("gamma", "mul", "kappa", "b_3"),
    _e("delta", "mul", "A", "gamma"),
    _e("epsilon", "add", "delta", "b_3"),
]

#: Bidirectional power-set multiplication: every ordered pair of {A, B, C} with {A_1, B_1, C_1} in both
#: directions, then the sum A + B + C against each of A_1, B_1, C_1.
POWER_SET = [
    _e(f"compare_{i + 1}", "mul", x, y) for i, (x, y) in enumerate([
        ("A", "B_1"), ("A", "C_1"), ("B", "A_1"), ("B", "C_1"), ("C", "A_1"), ("C", "B_1"),
        ("A_1", "B"), ("A_1", "C"), ("B_1", "A"), ("B_1", "C"), ("C_1", "A"), ("C_1", "B")])
] + [
    _e("ABSum", "add", "A", "B"),
    _e("ABCSum", "add", "ABSum", "C"),
    _e("compare_p_1", "mul", "ABCSum", "A_1"),
    _e("compare_p_2", "mul", "ABCSum", "B_1"),
    _e("compare_p_3", "mul", "ABCSum", "C_1"),
]

#: Random program 1 (several components, transposes).
RANDOM_1 = [
    _e("q", "mul", "a", "b"), _e("k", "add", "j", "b"), _e("l", "add", "e", "e"),
    _e("p", "transpose", "d"), _e("o", "mul", "g", "i"), _e("r", "mul", "c", "h"),
    _e("m", "transpose", "c"), _e("n", "mul", "j", "i"), _e("s", "add", "l", "i"),
    _e("t", "add", "f", "s"),
]

#: Random program 2 (inverses feeding products).
RANDOM_2 = [
    _e("o", "inv", "i"), _e("n", "mul", "h", "h"), _e("k", "add", "c", "j"), _e("q", "add", "c", "h"),
    _e("l", "mul", "g", "b"), _e("m", "add", "f", "i"), _e("s", "mul", "b", "g"), _e("r", "add", "d", "n"),
    _e("t", "mul", "o", "a"), _e("p", "mul", "e", "o"), _e("u", "mul", "m", "p"),
]

#: name -> expression list, in the order of the paper's Table 1.
PAPER_PROGRAMS: dict[str, list[dict[str, Any]]] = {
    "linear-regression": LINEAR_REGRESSION,
    "pca": PCA,
    "power-set": POWER_SET,
    "random-1": RANDOM_1,
    "random-2": RANDOM_2,
}


#: One implementation per op, as the paper's Section 6 ran them: Section 1's examples — Cannon's
#: algorithm for mul (block tilings) and Gauss-Jordan on column tiles for inv.
ONE_IMPLEMENTATION: dict[str, list[str]] = {"mul": ["cannon"], "inv": ["gauss-jordan-col"]}


def paper_program(name: str, size: int = 1, implementations: str = "all") -> Program:
    """One of the five programs, every matrix ``size x size``; ``implementations``: ``"all"`` (every
    algorithm of the catalog) or ``"one"`` (:data:`ONE_IMPLEMENTATION`, the Section 6 setting)."""
    if implementations not in ("all", "one"):
        raise ValueError(f"implementations must be 'all' or 'one', got {implementations!r}")
    exprs = PAPER_PROGRAMS[name]
    if implementations == "one":
        exprs = [{**e, "algorithms": ONE_IMPLEMENTATION[e["op"]]} if e["op"] in ONE_IMPLEMENTATION else e
                 for e in exprs]
    return parse_program({"program": exprs, "default_size": [size, size]}, f"{name}-{implementations}")
