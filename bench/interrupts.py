"""Signals a run answers at the next episode boundary, so that what it saves is a state it
can resume from bit for bit.

- SIGINT (Ctrl-C) and SIGTERM (`kill`, `timeout`, `scancel`): checkpoint, record
  `interrupted`, stop. A second one stops at once.
- SIGUSR2 (SLURM's warning before a time limit or preemption): checkpoint now, then hand
  over to the previous handler (submitit's requeue); with none, keep training.

In a local sweep's worker (the sweeper sets STOP_FILE_ENV) a stop ends the job normally
instead of raising: an exception would make the launcher kill the other workers
mid-episode. Every run of the sweep stops at its next boundary when the sweep's stop file
appears (written on SIGINT/SIGTERM; `touch` it to stop a sweep by hand).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType


class Interrupted(BaseException):
    """Raised at an episode boundary after a stop signal (a BaseException, like
    KeyboardInterrupt: it must end the sweep, not be recorded as a failed run)."""

    def __init__(self, signame: str):
        super().__init__(signame)
        self.signame = signame
        self.signum = getattr(signal, signame)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
CHECKPOINT_SIGNAL = signal.SIGUSR2
STOP_FILE_ENV = "TPO_BENCH_STOP_FILE"
# The sweeper's own pid: with one job at a time joblib runs the jobs in the sweeper's
# process, which must then stop the way a single run does (SweepStop's handlers are its).
STOP_OWNER_ENV = "TPO_BENCH_STOP_OWNER"

_latched: str | None = None  # a stop this process got: its later runs must not start
_latch_installed = False


def _signame(text: str) -> str:
    return text if text in {s.name for s in STOP_SIGNALS} else signal.SIGTERM.name


def stop_requested() -> str | None:
    """The stop this process was asked for (a signal it got, or its sweep's stop file,
    whose text names the signal the sweep got), else None."""
    if _latched is not None:
        return _latched
    path = os.environ.get(STOP_FILE_ENV)
    return stop_requested_by_file(path) if path and os.path.exists(path) else None


def latch_in_sweep_worker() -> bool:
    """True in a local sweep's worker process, where it (once) installs handlers that keep
    a stop signal arriving between runs: the default would kill the worker, and with it
    every sibling. A run's own Boundary takes over while it trains."""
    global _latch_installed
    if not os.environ.get(STOP_FILE_ENV) or os.environ.get(STOP_OWNER_ENV) == str(os.getpid()):
        return False
    if not _latch_installed and threading.current_thread() is threading.main_thread():
        def latch(signum: int, frame: FrameType | None) -> None:
            global _latched
            _latched = signal.Signals(signum).name
        for sig in STOP_SIGNALS:
            signal.signal(sig, latch)
        _latch_installed = True
    return True


class Boundary:
    """Installed for the duration of a run (main thread only: Python delivers signals
    there; elsewhere the defaults stay)."""

    def __init__(self) -> None:
        self.stop: str | None = None
        self.checkpoint_now = False
        self._previous: dict[int, object] = {}

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        global _latched
        name = signal.Signals(signum).name
        if self.stop is not None:  # the second one: do not wait for the boundary
            raise Interrupted(name)
        self.stop = name
        if _latch_installed:  # a sweep worker: its later runs must not start
            _latched = name

    def _on_checkpoint(self, signum: int, frame: FrameType | None) -> None:
        self.checkpoint_now = True

    def __enter__(self) -> "Boundary":
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_stop)
            self._previous[CHECKPOINT_SIGNAL] = signal.signal(CHECKPOINT_SIGNAL, self._on_checkpoint)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    @property
    def pending(self) -> bool:
        if self.stop is None:
            self.stop = stop_requested()
        return self.stop is not None or self.checkpoint_now

    @property
    def why(self) -> str:
        return self.stop or signal.Signals(CHECKPOINT_SIGNAL).name

    def after_checkpoint(self) -> None:
        """Called once the boundary's checkpoint is on disk."""
        if self.stop is not None:
            raise Interrupted(self.stop)
        if self.checkpoint_now:
            self.checkpoint_now = False
            previous = self._previous.get(CHECKPOINT_SIGNAL)
            if callable(previous):  # submitit: requeue the job, then exit
                previous(CHECKPOINT_SIGNAL, None)


class SweepStop:
    """The local sweep's side (hydra/launcher=local), for the duration of the launch: the
    first SIGINT or SIGTERM writes the stop file (every running run checkpoints at its
    next episode boundary, no further run starts) and the sweep waits for its workers;
    a second one stops at once. `signame` says which signal stopped it, if any."""

    def __init__(self, stop_file: Path) -> None:
        self.stop_file = Path(stop_file)
        self.signame: str | None = None
        self._previous: dict[int, object] = {}
        self._env: dict[str, str | None] = {}

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        from ..contract import io

        name = signal.Signals(signum).name
        if self.signame is not None:
            raise KeyboardInterrupt(name)
        self.signame = name
        io.write_text(self.stop_file, name)
        print(f"[sweep] {name}: every running run stops at its next episode boundary "
              f"(checkpointed) and no further run starts; {name} again stops at once",
              file=sys.stderr, flush=True)

    def __enter__(self) -> "SweepStop":
        self.stop_file.parent.mkdir(parents=True, exist_ok=True)
        self.stop_file.unlink(missing_ok=True)  # a stale request from an earlier sweep
        self._env = {k: os.environ.get(k) for k in (STOP_FILE_ENV, STOP_OWNER_ENV)}
        os.environ[STOP_FILE_ENV] = str(self.stop_file.resolve())  # the workers inherit it
        os.environ[STOP_OWNER_ENV] = str(os.getpid())
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_stop)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        for key, value in self._env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if self.signame is None and self.stop_file.exists():  # stopped by hand (`touch`)
            self.signame = stop_requested_by_file(self.stop_file)
        self.stop_file.unlink(missing_ok=True)


def stop_requested_by_file(path: Path | str) -> str:
    """The signal a stop file names (a `touch`ed, empty one: SIGTERM)."""
    try:
        return _signame(Path(path).read_text().strip())
    except OSError:  # being written, or gone: a stop all the same
        return signal.SIGTERM.name
