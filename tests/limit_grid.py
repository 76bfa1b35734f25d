"""The time-limit property's grid (issue 40): every strategy's options that change how much work a solve
does, with ``--workers 1`` and the default, on each shape of :mod:`tests.limit_graphs`.

The property, for every cell: ``seconds.load + seconds.solve`` of the ``--json`` result ≤ 1.1·T + 5 s, and
the command's peak RSS ≤ :data:`RSS_LIMIT`. ``tests/test_time_limits.py`` checks a fast subset of it;
``scripts/bench_limits.py`` runs all of it into BENCHMARKS.md.
"""

from __future__ import annotations

from pathlib import Path

SYSTEM = Path(__file__).resolve().parents[1] / "fixtures" / "systems" / "cpu_t4_a100.yaml"
RSS_LIMIT = 1.5e9  # bytes

#: (command, its options): partition's k, remat's budgets, schedule's objectives, tile's 1-D and 2-D meshes
SETTINGS = (
    ("partition", ("-k", "2")),
    ("partition", ("-k", "16")),
    ("partition", ("-k", "64")),
    ("remat", ("--budget", "95%")),
    ("remat", ("--budget", "80%")),
    ("remat", ("--budget", "min")),
    ("schedule", ("--system", str(SYSTEM))),
    ("schedule", ("--system", str(SYSTEM), "--objective", "throughput", "--batch", "8")),
    ("tile", ("--devices", "4")),
    ("tile", ("--mesh", "2x4")),
)
WORKERS = ((), ("--workers", "1"))  # the default (every core) and one


def limit(time_limit: float) -> float:
    """The README's rule: loading and solving end by 1.1·T + 5 s."""
    return 1.1 * time_limit + 5


def argv(command: str, options: tuple[str, ...], workers: tuple[str, ...], model: Path, out: Path,
         time_limit: float) -> list[str]:
    """The command line of one cell (without the program), ``--json`` to stdout."""
    return [command, str(model), *options, *workers, "--time-limit", str(time_limit), "-o", str(out), "--json"]


def label(command: str, options: tuple[str, ...], workers: tuple[str, ...]) -> str:
    """``partition -k 16 --workers 1``: the cell's options, a system file by its name."""
    shown = [Path(o).name if o.endswith(".yaml") else o for o in options]
    return " ".join([command, *shown, *workers])
