"""The ``--check-certificate`` mutation table in BENCHMARKS.md (section ``schedule-check``): every kind of
tampering that ``tests/safety/test_check_certificate.py`` applies to a schedule folder (latency and
throughput: the diamond on two CPUs, so tensors move between devices), each run through the real CLI.
A kind is *caught* when the check exits 2 with one ``error:`` line naming the problem the test expects;
*refused* when it exits 2 naming something else; *accepted* on exit 0; *traceback* on a crash. The kinds
and the folders are the test's own data (imported from it), so the table and the test cannot drift
apart. ``--before REV`` adds the same columns for the code at git revision REV (its folders made by
that code), run from a scratch copy of its tree.

    python scripts/bench_check_certificate.py --before main   # writes BENCHMARKS.md
    python scripts/bench_check_certificate.py --no-write      # prints the table only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_common import ROOT, machine_line, write_section  # noqa: E402
from tests.safety import test_check_certificate as T  # noqa: E402
from tests.safety.harness import run_cli  # noqa: E402

OBJECTIVES = ("latency", "throughput")
#: a case: (the solved folder, scratch) -> (the folder to check, the model to check it with, the problem it must name)
Case = Callable[[T.Folder, Path], tuple[Path, Path, str]]


def cases() -> dict[str, Case]:
    """Every kind of tampering of the test, as a folder to check."""
    out: dict[str, Case] = {}
    for name, (tamper, mention) in {**T.SCHEDULE, **T.SHARED}.items():
        out[name] = lambda f, tmp, tamper=tamper, mention=mention: (f.copy(tmp, tamper), f.model, mention)
    for name, (text, mention) in T.MALFORMED.items():
        out[f"manifest is {name}"] = lambda f, tmp, text=text, mention=mention: (_written(f, tmp, text), f.model,
                                                                               mention)
    out["another model's folder"] = lambda f, tmp: (f.copy(tmp), T.UNET, "another model")
    out["folder missing"] = lambda f, tmp: (tmp / "nowhere", f.model, "no such folder")
    out["certificate missing"] = lambda f, tmp: (_without_certificate(f, tmp), f.model, "does not exist")
    return out


def _written(folder: T.Folder, tmp: Path, text) -> Path:
    copy = folder.copy(tmp)
    (copy / folder.manifest_name).write_text(text(folder))
    return copy


def _without_certificate(folder: T.Folder, tmp: Path) -> Path:
    copy = folder.copy(tmp)
    (copy / "certificate.json").unlink()
    return copy


def outcome(folder: T.Folder, checked: Path, model: Path, mention: str, cwd: Path) -> str:
    """caught / refused / accepted / traceback (module docstring) for one check."""
    proc = run_cli(folder.command, model, *folder.options, "--check-certificate", checked, "--json", cwd=cwd)
    if proc.returncode == 0:
        return "accepted"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    if proc.returncode != 2 or "Traceback" in proc.stderr or len(errors) != 1:
        return "traceback"
    try:
        problems = json.loads(proc.stdout)["problems"] if proc.stdout.strip() else []
    except (ValueError, KeyError):
        problems = []
    return "caught" if any(mention in text for text in [errors[0], *problems]) else "refused"


def run(root: Path) -> dict[str, dict[str, str]]:
    """kind -> objective -> outcome, with the code found on this process's PYTHONPATH."""
    root.mkdir(parents=True, exist_ok=True)
    system = root / "two_cpus.yaml"
    system.write_text(T.TWO_CPUS)
    folders = {kind: T.Folder(kind, root, system) for kind in OBJECTIVES}
    rows: dict[str, dict[str, str]] = {}
    for n, (name, case) in enumerate(cases().items()):
        rows[name] = {}
        for kind, folder in folders.items():
            scratch = root / f"case{n}-{kind}"
            rows[name][kind] = outcome(folder, *case(folder, scratch), cwd=scratch / "cwd")
    return rows


def before(rev: str, root: Path) -> dict[str, dict[str, str]]:
    """:func:`run` on the code at ``rev``: its onnxpart, cli and cost_models exported into one package
    tree first on PYTHONPATH (so the subprocesses import it, not this checkout)."""
    tree = root / "tree"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "onnxpart", "cli", "cost_models"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    for name in ("cli", "cost_models"):
        shutil.move(str(tree / name), str(tree / "onnxpart" / name))
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(tree)
    try:
        return run(root / "run")
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved


def markdown(rows: dict, old: dict | None, rev: str | None, seconds: float) -> str:
    caught = sum(row[kind] == "caught" for row in rows.values() for kind in OBJECTIVES)
    total = len(rows) * len(OBJECTIVES)
    lines = ["## --check-certificate mutation table (schedule)", "",
             f"{machine_line()}; command: `python scripts/bench_check_certificate.py"
             f"{f' --before {rev}' if rev else ''}` ({seconds:.0f} s). The kinds of tampering of "
             "`tests/safety/test_check_certificate.py` applied to a latency and a throughput folder (the diamond "
             "on two CPUs: two and four transfers). caught = exit 2, one `error:` line naming the problem; "
             "refused = exit 2 naming another; accepted = exit 0; traceback = a crash.", "",
             f"**{caught} of {total} caught**" + (
                 f" (before, at `{rev}`: {sum(r[k] == 'caught' for r in old.values() for k in OBJECTIVES)} caught, "
                 f"{sum(r[k] == 'accepted' for r in old.values() for k in OBJECTIVES)} accepted, "
                 f"{sum(r[k] == 'traceback' for r in old.values() for k in OBJECTIVES)} tracebacks)." if old else "."),
             ""]
    head = ["tampering", "latency", "throughput"] + (["latency before", "throughput before"] if old else [])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in rows.items():
        cells = [name, row["latency"], row["throughput"]] + ([old[name]["latency"], old[name]["throughput"]]
                                                            if old else [])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", metavar="REV", help="also run the code at this git revision (e.g. main)")
    ap.add_argument("--no-write", action="store_true", help="print only; do not touch BENCHMARKS.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="onnxpart-check-") as scratch:
        old = before(args.before, Path(scratch) / "before") if args.before else None
        rows = run(Path(scratch) / "now")
    md = markdown(rows, old, args.before, time.perf_counter() - t0)
    print(md)
    if not args.no_write:
        write_section("schedule-check", md)


if __name__ == "__main__":
    main()
