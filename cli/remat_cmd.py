"""`onnxpart remat` (in progress)."""

import typer

from onnxpart.cli.common import err_console


def remat() -> None:
    """Not yet implemented."""
    err_console.print("onnxpart remat is not yet implemented")
    raise typer.Exit(2)
