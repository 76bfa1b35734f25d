"""``onnxpart sweep``: many models × strategies × option settings, each job one run of the real strategy
command in its own process, with one results table, a report and plots.

The package is built on the commands' public contract only (their options and ``--json`` result), never
on the strategies' internals, so a job behaves exactly like the command a user would type:

* :mod:`.commands` — the strategy commands' options: names, flags, parse checks (the one place that reads
  the Typer app).
* :mod:`.grid` — a grid from the command line or a sweep file (pydantic schema) expanded into jobs, each
  keyed by model hash + strategy + normalized options + onnxpart version (what ``--resume`` matches).
* :mod:`.job` — one job as a child process: exit code, first error line, seconds, peak RSS, its result.
* :mod:`.folder` — the sweep's output folder: per-job records, ``results.csv``/``results.jsonl``, resume.
* :mod:`.engine_local` (this machine) and :mod:`.engine_ray` (a Ray cluster) run the jobs.
* :mod:`.curves` (best setting, knee, certified margins), :mod:`.report` (``report.md``) and
  :mod:`.plots` (PNG charts) read the finished rows.
"""
