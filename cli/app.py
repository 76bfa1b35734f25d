"""The ``onnxpart`` command: one Typer app, one module per command. No algorithm lives here."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

import typer
from rich.markup import escape

from onnxpart.cli import (annotate_cmd, bench_cmd, inspect_cmd, partition_cmd, plan_cmd, remat_cmd, schedule_cmd,
                          sweep_cmd, tile_cmd)
from onnxpart.cli.common import err_console

app = typer.Typer(
    name="onnxpart",
    help="Partition, schedule, rematerialize and tile ONNX models — each result with a certified lower bound.",
    no_args_is_help=False,  # no argument at all is a usage error like any other: one line (main)
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log what the library does (stderr).")) -> None:
    from rich.logging import RichHandler

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(message)s",
                        handlers=[RichHandler(console=err_console, show_time=False, show_path=False)])


app.command("inspect")(inspect_cmd.inspect)
app.command("annotate")(annotate_cmd.annotate)
app.command("partition")(partition_cmd.partition)
app.command("remat")(remat_cmd.remat)
app.command("schedule")(schedule_cmd.schedule)
app.command("tile")(tile_cmd.tile)
app.command("plan")(plan_cmd.plan)
app.command("sweep")(sweep_cmd.sweep)
app.command("bench")(bench_cmd.bench)


def main() -> None:
    """The ``onnxpart`` command. SIGINT and SIGTERM stop it cleanly (:mod:`onnxpart.interrupts`). A usage
    mistake — an unknown option or command, a missing or extra argument, no argument at all — is one
    ``error:`` line on stderr and exit 2, like every other bad input (click's "did you mean" hint kept in
    it); ``--help`` keeps its rich page."""
    from typer._click.exceptions import ClickException  # typer ≥ 0.29 ships click inside itself

    from onnxpart import interrupts

    interrupts.install()
    _matplotlib_config()
    try:
        code = app(prog_name="onnxpart", standalone_mode=False)
    except ClickException as exc:
        err_console.print(f"[bold red]error:[/] {escape(usage_message(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


def _matplotlib_config() -> None:
    """Where the user's config folder cannot be written (a read-only or missing home, as in some CI
    containers), matplotlib warns on every run and rebuilds its font cache in a new temporary folder:
    point it at one folder per user under the temporary folder instead (issue 40)."""
    if "MPLCONFIGDIR" in os.environ:
        return
    folder = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "matplotlib"
    while not folder.exists() and folder != folder.parent:  # the nearest folder matplotlib would create it in
        folder = folder.parent
    if not (folder.is_dir() and os.access(folder, os.W_OK)):
        os.environ["MPLCONFIGDIR"] = str(Path(tempfile.gettempdir()) / f"onnxpart-matplotlib-{os.getuid()}")


def usage_message(exc) -> str:
    """One line for a click usage error: the command it concerns, click's message with its hint, where
    help is."""
    where = exc.ctx.command_path if getattr(exc, "ctx", None) is not None else "onnxpart"
    return f"{where}: {' '.join(exc.format_message().split())} (see {where} --help)"


if __name__ == "__main__":
    main()
