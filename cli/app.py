"""The ``onnxpart`` command: one Typer app, one module per command. No algorithm lives here."""

from __future__ import annotations

import logging

import typer

from onnxpart.cli import annotate_cmd, inspect_cmd, partition_cmd, remat_cmd, schedule_cmd, sweep_cmd, tile_cmd
from onnxpart.cli.common import err_console

app = typer.Typer(
    name="onnxpart",
    help="Partition, schedule, rematerialize and tile ONNX models — each result with a certified lower bound.",
    no_args_is_help=True,
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
app.command("sweep")(sweep_cmd.sweep)


def main() -> None:
    """The ``onnxpart`` command: SIGINT and SIGTERM stop it cleanly (:mod:`onnxpart.interrupts`)."""
    from onnxpart import interrupts

    interrupts.install()
    app()


if __name__ == "__main__":
    main()
