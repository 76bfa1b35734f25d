"""`onnxpart partition` (in progress)."""

import typer

from onnxpart.cli.common import err_console


def partition() -> None:
    """Not yet implemented."""
    err_console.print("onnxpart partition is not yet implemented")
    raise typer.Exit(2)
