"""tpo-bench runner: joins a task (groups of scored candidates) with an algorithm (a loss).

Kept import-light on purpose: algorithms and tasks import `bench.batch` only.
"""
