"""Issue 40: no module of ``onnxpart.tile`` imports a name from its own package's ``__init__``. That is a
circle whenever the ``__init__`` runs the module (``program/__init__`` ran ``program.exact``, which read
``EXHAUSTIVE_LIMIT`` back from ``program/__init__``). A name imported for annotations only, under ``if
TYPE_CHECKING:``, is not imported when the code runs; a submodule (``from onnxpart.tile.onnx import mesh``)
is not a name of the ``__init__``."""

from __future__ import annotations

import ast
from pathlib import Path

import onnxpart.tile

TILE = Path(onnxpart.tile.__file__).parent


def _runtime_imports(node: ast.AST):
    """The ``from … import …`` statements under ``node`` that run (those under ``if TYPE_CHECKING:`` do not)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
            yield from (n for branch in child.orelse for n in _runtime_imports(branch))
            continue
        if isinstance(child, ast.ImportFrom):
            yield child
        yield from _runtime_imports(child)


def test_no_module_imports_its_own_package_init():
    found = []
    for path in sorted(TILE.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        package = "onnxpart." + ".".join(path.parent.relative_to(TILE.parent).parts)
        submodules = {p.stem for p in path.parent.glob("*.py")} | {p.name for p in path.parent.iterdir() if p.is_dir()}
        for node in _runtime_imports(ast.parse(path.read_text())):
            own = node.module == package or (node.level == 1 and not node.module)
            names = [a.name for a in node.names if a.name not in submodules]
            if own and names:
                found.append(f"{path.relative_to(TILE.parent)}:{node.lineno} imports {', '.join(names)}")
    assert not found, found
