"""The house rules of issue 27 as tests: no import circle (imports inside functions count), no arrow from the
library up to the command line, no module over 450 lines, every library function under 60 lines and every
command under 80 (decorators and signature included)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the installed packages and where their sources are (cli/ and cost_models/ install as onnxpart.*)
PACKAGES = {"onnxpart": ROOT / "onnxpart", "onnxpart.cli": ROOT / "cli", "onnxpart.cost_models": ROOT / "cost_models"}
MODULE_LINES, FUNCTION_LINES, COMMAND_LINES = 450, 60, 80


def modules() -> dict[str, Path]:
    """Every module of the project by its dotted name (a package by its own name)."""
    found = {}
    for prefix, base in PACKAGES.items():
        for path in sorted(base.rglob("*.py")):
            parts = [part for part in path.relative_to(base).with_suffix("").parts if part != "__init__"]
            found[".".join([prefix, *parts])] = path
    return found


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for all the tests here."""
    return ast.parse(path.read_text())


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its source (at the top, in functions, under
    ``TYPE_CHECKING``); ``from package import name`` counts as importing the submodule when there is one."""
    targets: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            wanted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            wanted = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in wanted:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):  # a package's own parents
                targets.add(target)
    return targets


@functools.cache
def import_graph() -> nx.DiGraph:
    known = modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for name, path in known.items():
        graph.add_edges_from((name, target) for target in imported(name, path, known))
    return graph


def test_no_import_circle():
    circles = sorted(nx.simple_cycles(import_graph()), key=len)
    assert not circles, f"{len(circles)} import circles, e.g. {' -> '.join(circles[0] + circles[0][:1])}"


def test_the_library_never_imports_the_command_line():
    graph = import_graph()
    upward = [(a, b) for a, b in graph.edges if b.startswith("onnxpart.cli") and not a.startswith("onnxpart.cli")]
    assert not upward, upward


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_modules_and_functions_stay_small(package):
    too_long = []
    for path in sorted(PACKAGES[package].rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(ROOT)
        if source.count("\n") > MODULE_LINES:
            too_long.append(f"{where}: {source.count(chr(10))} lines")
        limit = COMMAND_LINES if package == "onnxpart.cli" else FUNCTION_LINES
        for node in ast.walk(parsed(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - first + 1 >= limit:
                    too_long.append(f"{where}:{node.lineno} {node.name}: {node.end_lineno - first + 1} lines")
    assert not too_long, too_long
