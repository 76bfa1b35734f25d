"""The ``--check-certificate`` mutation table in BENCHMARKS.md (section ``schedule-check``): every kind of
tampering that ``tests/safety/test_check_certificate.py`` applies to a schedule folder (latency and
throughput: the diamond on two CPUs, so tensors move between devices), each run through the real CLI;
a kind counts as caught when the check exits 2 with one ``error:`` line, touches nothing, and names
the problem the test expects. The kinds and the folders are the test's own data (imported from it), so
the table and the test cannot drift apart.

    python scripts/bench_check_certificate.py              # writes BENCHMARKS.md
    python scripts/bench_check_certificate.py --no-write   # prints the table only
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_common import machine_line, write_section  # noqa: E402
from tests.safety import test_check_certificate as T  # noqa: E402

OBJECTIVES = ("latency", "throughput")


def kinds() -> dict[str, Callable[[T.Folder, Path], tuple[str, str]]]:
    """Every kind of tampering -> a function ``(folder, scratch) -> (caught lines, expected mention)``."""
    out: dict[str, Callable] = {}
    for name, (tamper, mention) in {**T.SCHEDULE, **T.SHARED}.items():
        out[name] = lambda f, tmp, tamper=tamper, mention=mention: (f.refused(tmp, f.copy(tmp, tamper)), mention)
    for name, (text, mention) in T.MALFORMED.items():
        out[f"manifest is {name}"] = lambda f, tmp, text=text, mention=mention: (f.refused(tmp, _written(f, tmp, text)),
                                                                               mention)
    out["another model's folder"] = lambda f, tmp: (f.refused(tmp, f.copy(tmp), model=T.UNET), "another model")
    out["folder missing"] = lambda f, tmp: (f.refused(tmp, tmp / "nowhere"), "no such folder")
    out["certificate missing"] = lambda f, tmp: (f.refused(tmp, _without_certificate(f, tmp)), "does not exist")
    return out


def _written(folder: T.Folder, tmp: Path, text) -> Path:
    copy = folder.copy(tmp)
    (copy / folder.manifest_name).write_text(text(folder))
    return copy


def _without_certificate(folder: T.Folder, tmp: Path) -> Path:
    copy = folder.copy(tmp)
    (copy / "certificate.json").unlink()
    return copy


def run(root: Path) -> list[tuple[str, dict[str, str]]]:
    """One row per kind: per objective ``caught`` or ``MISSED``, and the problem named first (latency)."""
    system = root / "two_cpus.yaml"
    system.write_text(T.TWO_CPUS)
    folders = {kind: T.Folder(kind, root, system) for kind in OBJECTIVES}
    rows = []
    for n, (name, check) in enumerate(kinds().items()):
        row = {}
        for kind, folder in folders.items():
            try:
                caught, mention = check(folder, root / f"case{n}-{kind}")
                row[kind] = "caught" if mention in caught else "MISSED"
                row.setdefault("first", caught.splitlines()[0].removeprefix("error: "))
            except AssertionError:
                row[kind] = "MISSED"
        rows.append((name, row))
    return rows


def markdown(rows: list[tuple[str, dict[str, str]]], seconds: float) -> str:
    caught = sum(row[kind] == "caught" for _, row in rows for kind in OBJECTIVES)
    lines = ["## --check-certificate mutation table (schedule)", "",
             f"{machine_line()}; command: `python scripts/bench_check_certificate.py` ({seconds:.0f} s). The "
             "kinds of tampering of `tests/safety/test_check_certificate.py`, applied to a latency and a "
             "throughput folder (the diamond on two CPUs: two and four transfers); caught = exit 2, one "
             "`error:` line naming the problem, nothing touched. The last column is the line the latency "
             "check printed (paths shortened).", "",
             f"**{caught} of {2 * len(rows)} caught.**", "",
             "| tampering | latency | throughput | first problem named (latency) |", "|---|---|---|---|"]
    for name, row in rows:
        first = row.get("first", "—").replace("|", "\\|")
        first = first if len(first) <= 110 else first[:107] + "..."
        lines.append(f"| {name} | {row['latency']} | {row['throughput']} | {first} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-write", action="store_true", help="print only; do not touch BENCHMARKS.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="onnxpart-check-") as scratch:
        rows = run(Path(scratch))
        md = markdown(rows, time.perf_counter() - t0).replace(scratch, "…")
    print(md)
    if not args.no_write:
        write_section("schedule-check", md)


if __name__ == "__main__":
    main()
