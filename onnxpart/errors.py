"""User-facing errors.

A :class:`UserError` is a mistake in what the user gave us (a file, an option, a budget). The CLI prints
its message on one line, without a traceback, and exits with :attr:`UserError.exit_code`. Anything else
is a bug and keeps its traceback.

Exit codes (documented in README.md):

* 0 — success
* 1 — internal error (a bug: please report it with the traceback), or ``--verify`` found a mismatch
* 2 — bad input: missing/corrupt file, bad option, unresolved shapes, existing output folder, ...
* 3 — the result is valid but not provably within ``--max-gap``
* 4 — the problem is infeasible as given (memory budget or system cannot be met)
"""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix; the message says what was wrong and what to do."""

    exit_code = 2


class InfeasibleError(UserError):
    """The instance has no solution (e.g. a memory budget below what any schedule needs)."""

    exit_code = 4


class GapNotMetError(UserError):
    """A solution was written but its certified gap is above the requested ``--max-gap``."""

    exit_code = 3
