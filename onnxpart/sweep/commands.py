"""The strategy commands as a sweep sees them: their options (by any spelling a user writes in a grid), the
command line of one job, and a parse check that refuses a bad option or value before any job starts.

This is the one module of the sweep that reads the command line's commands, and it reads only what
``--help`` shows: option names, flags and value types (``Command.make_context`` parses a command line
without running it). The commands are handed in (:class:`Commands`, made by the ``sweep`` command from
the app it runs in), so the library never imports the command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from onnxpart.errors import UserError

#: The commands a sweep runs: the four strategies, plan (which composes them), and annotate (``--cost measured`` on a node that has
#: the device, with Ray resources).
STRATEGIES = ("partition", "remat", "schedule", "tile", "plan", "annotate")

#: Where a command writes inside its job's folder: the strategies write the folder itself (``-o DIR``),
#: annotate one file.
OUTPUT_FILE = {"annotate": "costs.json"}

#: Flags the sweep sets itself on every job: a grid may not name them.
RESERVED_FLAGS = frozenset({"--output", "-o", "--json", "--force", "--clean", "--check-certificate", "--compare",
                            "--help"})

#: A grid value: text (``80%``, ``2x4``), a number, a boolean (flags) or a list (repeatable options).
Value = Union[str, int, float, bool, list]


@dataclass(frozen=True)
class Option:
    """One option of a strategy command: ``name`` is its canonical name (the Typer parameter, e.g.
    ``stages`` for ``-k/--stages``), ``flag`` what a job's command line passes."""

    name: str
    flag: str
    off_flag: str | None = None  # ``--no-mla`` for a boolean flag with an off form
    is_flag: bool = False
    multiple: bool = False

    def argv(self, value: Value) -> list[str]:
        """The command-line words for ``value`` (a flag's ``True``/``False``, a repeatable option's list)."""
        if self.is_flag:
            return [self.flag] if value else ([self.off_flag] if self.off_flag else [])
        values = value if isinstance(value, list) else [value]
        return [word for item in values for word in (self.flag, str(item))]


class Command:
    """A strategy command's options by every spelling: ``k``, ``stages``, ``time-limit``, ``time_limit``."""

    def __init__(self, name: str, click_command: Any):
        self.name = name
        self._command = click_command
        self._options: dict[str, Option] = {}
        for param in click_command.params:
            opts = list(getattr(param, "opts", []))
            if not any(opt.startswith("-") for opt in opts) or RESERVED_FLAGS.intersection(opts):
                continue  # the model argument, and the options the sweep sets itself
            longest = max(opts, key=len)
            off = list(getattr(param, "secondary_opts", []) or [])
            option = Option(param.name, longest, off[0] if off else None, bool(getattr(param, "is_flag", False)),
                            bool(getattr(param, "multiple", False)))
            for spelling in [param.name, *opts]:
                bare = spelling.lstrip("-")
                self._options[bare] = self._options[bare.replace("-", "_")] = option

    def has(self, spelled: str) -> bool:
        return spelled.strip().lstrip("-") in self._options

    def option(self, spelled: str) -> Option:
        """The option a grid names ``spelled``; an unknown one is a :class:`UserError` listing the valid."""
        option = self._options.get(spelled.strip().lstrip("-"))
        if option is None:
            names = sorted({o.name for o in self._options.values()})
            raise UserError(f"{self.name} has no option {spelled!r}: use one of {', '.join(names)}")
        return option

    def check(self, argv: list[str]) -> None:
        """Parse ``MODEL ARGV -o OUT --json`` as the command would, without running it: a bad option
        value (``k=abc``, ``time-limit=-1``) is a :class:`UserError` naming it."""
        try:
            self._command.make_context(self.name, ["MODEL", *argv, "-o", "OUT", "--json"])
        except Exception as exc:  # the CLI parser's UsageError family, whatever its module
            if not hasattr(exc, "format_message"):
                raise
            raise UserError(f"{self.name} {' '.join(argv)}: {exc.format_message()}") from None


def output_in(strategy: str, folder: Path) -> Path:
    """The ``-o`` of a job whose folder is ``folder``."""
    return folder / OUTPUT_FILE[strategy] if strategy in OUTPUT_FILE else folder


class Commands:
    """The strategy commands of a command-line group (a click ``Group``: the app's, as
    ``typer.main.get_command(app)`` or the running context's root command), by name."""

    def __init__(self, group: Any):
        self._group = group
        self._made: dict[str, Command] = {}

    def __call__(self, name: str) -> Command:
        """The strategy command ``name``; an unknown one is a :class:`UserError`."""
        if name not in STRATEGIES:
            raise UserError(f"unknown strategy {name!r}: use {', '.join(STRATEGIES)}")
        if name not in self._made:
            self._made[name] = Command(name, self._group.commands[name])
        return self._made[name]
