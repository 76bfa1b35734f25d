"""Limits that the matrix-program package's options and its solvers share, in a module of their own: the
package's ``__init__`` reads them when it is imported (with no solver, nor numpy, loaded), and the solvers read
them here rather than from the package they belong to, so no module imports its own package's ``__init__``."""

#: Default limit of the exhaustive search, in labelings enumerated (about a second per 10^6 here).
EXHAUSTIVE_LIMIT = 3 ** 13
