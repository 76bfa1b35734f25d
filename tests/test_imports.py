"""No import circle among onnxpart's modules, counting the imports inside functions too (issue 27): a
circle makes what a module can use depend on who imported it first. Read from the source, so no import
runs."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"onnxpart": ROOT / "onnxpart", "onnxpart.cli": ROOT / "cli", "onnxpart.cost_models": ROOT / "cost_models"}


def modules() -> dict[str, Path]:
    """Every module of the installed layout (pyproject's package-dir) by its dotted name."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The onnxpart modules ``name`` imports anywhere in its source (``from a import b``: ``a.b`` when that
    is a module, else ``a``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: up ``level - 1`` packages from this one
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            targets.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
    return {t for t in targets if t in known and t != name}


def test_no_module_imports_itself_through_others():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                circles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not circles, "\n".join(" -> ".join(c) for c in circles[:10])
