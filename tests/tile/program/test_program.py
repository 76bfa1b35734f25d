"""Parsing matrix programs: transposes, SSA renaming, loops, shapes, feasible tilings, errors."""

from __future__ import annotations

import pytest

from onnxpart.errors import UserError
from onnxpart.tile.program.model import build_instance
from onnxpart.tile.program.program import Operand, feasible_tilings, load_program, parse_program


def test_transpose_operands_inputs_and_ssa():
    p = parse_program([{"out": "G", "op": "mul", "in": ["A", "FT"]},
                       {"out": "G", "op": "add", "in": ["G", "GT"]},
                       {"out": "H", "op": "inv", "in": ["G"]}])
    assert p.inputs == ("A", "F")
    assert p.expressions[0].inputs == (Operand("A"), Operand("F", True))
    # the second G is a new matrix; it reads the first G and later reads see the new one
    assert p.expressions[1].out == "G@2"
    assert p.expressions[1].inputs == (Operand("G"), Operand("G", True))
    assert p.expressions[2].inputs == (Operand("G@2"),)
    assert p.matrices == ("A", "F", "G", "G@2", "H")


def test_shapes_sizes_and_loop_weights():
    p = parse_program({"program": [{"out": "C", "op": "mul", "in": ["A", "B"], "weight": 2},
                                   {"loop": 3, "body": [{"out": "D", "op": "transpose", "in": ["C"]},
                                                        {"loop": 2, "body": [
                                                            {"out": "E", "op": "mul", "in": ["CT", "C"]}]}]}],
                       "sizes": {"A": [4, 3], "B": [3, 5]}})
    assert p.shapes["C"] == (4, 5) and p.shapes["D"] == (5, 4) and p.shapes["E"] == (5, 5)
    assert [e.weight for e in p.expressions] == [2, 3, 6]
    inst = build_instance(p)
    assert inst.vertex_weight[inst.vertices.index("C")] == 20
    assert [e.weight for e in inst.edges] == [2, 3, 6]


def test_feasible_tilings_map_transposes_and_agree_on_repeated_reads():
    p = parse_program([{"out": "B", "op": "transpose", "in": ["A"]},
                       {"out": "C", "op": "add", "in": ["A", "AT"]},
                       {"out": "D", "op": "mul", "in": ["A", "A"]}])
    matrices, tilings = feasible_tilings(p.expressions[0])
    assert matrices == ("B", "A")
    assert {t for _, t, _ in tilings} == {("col", "row"), ("row", "col"), ("block", "block")}
    # add(A, AT): only block agrees; row/col need one retiled copy of A (listed as a copy)
    _, tilings = feasible_tilings(p.expressions[1])
    free = {t for _, t, c in tilings if not c}
    assert free == {("block", "block")}
    assert all(c == ("A",) for _, t, c in tilings if t != ("block", "block"))
    # mul(A, A): row-panels wants A as row and as col -> a copy; row-ring needs none
    _, tilings = feasible_tilings(p.expressions[2])
    assert ("row", "row") in {t for _, t, c in tilings if not c}


def test_algorithms_restrict_the_feasible_set():
    p = parse_program([{"out": "C", "op": "mul", "in": ["A", "B"], "algorithms": ["cannon"]}])
    _, tilings = feasible_tilings(p.expressions[0])
    assert [(a, t) for a, t, _ in tilings] == [("cannon", ("block", "block", "block"))]


def test_fixed_pins_a_domain():
    p = parse_program({"program": [{"out": "C", "op": "inv", "in": ["A"]}], "fixed": {"A": "block"}})
    inst = build_instance(p)
    assert inst.domains[inst.vertices.index("A")] == (2,)


@pytest.mark.parametrize("data, message", [
    ("[", "p.json: line 1: not valid JSON"),
    ('{"x": 1}', "p.json: program: missing"),
    ("[]", "program: the program has no expressions"),
    ('[5]', "program[0]: expected a mapping, got 5"),
    ('[{"out": "G", "op": "sub", "in": ["A", "B"]}]', "program[0].op: must be 'add', 'mul', 'inv' or 'transpose'"),
    ('[{"out": "G", "op": "mul", "in": ["A"]}]', "program[0]: 'in' must list 2 matrix name(s) for mul"),
    ('[{"out": "C", "op": "inv", "in": ["A"]}, {"out": 3, "op": "inv", "in": ["C"]}]',
     "program[1].out: must be a matrix name (letters, digits, _ . '), got 3"),
    ('[{"out": "G", "op": "inv", "in": ["A"], "weight": 0}]', "program[0].weight: must be an integer from 1"),
    ('[{"out": "G", "op": "inv", "in": ["A"], "algorithms": ["cannon"]}]', "program[0]: 'algorithms' must be inv"),
    ('[{"out": "G", "op": "inv", "in": ["A"], "colour": 1}]', "program[0].colour: unknown key"),
    ('{"program": [{"out": "C", "op": "mul", "in": ["A", "B"]}], "sizes": {"A": [2, 3], "B": [2, 3]}}',
     "program[0].in: mul shapes 2x3 and 2x3 do not match"),
    ('{"program": [{"out": "C", "op": "inv", "in": ["A"]}], "sizes": {"A": [2, 3]}}',
     "program[0].in: inv needs a square matrix"),
    ('{"program": [{"out": "C", "op": "add", "in": ["A", "AT"]}], "sizes": {"A": [2, 3]}}',
     "program[0].in: add needs equal shapes"),
    ('{"program": [{"out": "C", "op": "inv", "in": ["A"]}], "sizes": {"A": [2, -1]}}', "sizes.A[1]: must be"),
    ('[{"loop": 0, "body": []}]', "program[0].loop: must be an integer from 1"),
    ('[{"loop": 2, "body": [{"out": "C", "op": "inv"}]}]', "program[0].body[0].in: missing"),
    ('[{"out": "A", "op": "inv", "in": ["X"]}, {"out": "AT", "op": "inv", "in": ["X"]},'
     ' {"out": "C", "op": "inv", "in": ["AT"]}]', "program[2].in[0]: 'AT' is ambiguous"),
    ('{"program": [{"out": "C", "op": "inv", "in": ["A"]}], "fixed": {"A": "diagonal"}}',
     "fixed.A: must be 'row', 'col' or 'block'"),
    ('[{"loop": 65536, "body": [{"loop": 65536, "body": [{"out": "C", "op": "inv", "in": ["A"]}]}]}]',
     "program[0].body[0].loop: nested loops repeat the body 4294967296 times, above the limit 2147483647"),
    ('{"program": [{"out": "C", "op": "mul", "in": ["A", "A"]}], "default_size": [100000000, 100000000]}',
     "program: weights × matrix elements add up to 3e+16, above the limit 2**53"),
])
def test_malformed_programs_name_the_expression_and_field(data, message):
    with pytest.raises(UserError, match="^[^\n]*$") as info:
        load_program(data, source="p.json")
    assert str(info.value).startswith("p.json: ") and message in str(info.value)
