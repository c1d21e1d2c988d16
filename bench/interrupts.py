"""Signals a run answers at the next episode boundary, so that what it saves is a state it
can resume from bit for bit (mid-episode, the optimizer and the random streams are half
way through a step).

- SIGINT (Ctrl-C) and SIGTERM (`kill`, `timeout`, `scancel`): checkpoint, record
  `interrupted`, stop. A second one stops at once.
- SIGUSR2 (SLURM's warning before a time limit or a preemption): checkpoint now, then
  hand over to the handler that was there before (submitit's requeue); where there was
  none (a plain `sbatch --signal=USR2@120`), keep training: the kill that follows then
  loses only the episodes since this checkpoint.
"""
from __future__ import annotations

import signal
import threading
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


class Boundary:
    """Installed for the duration of a run (main thread only: Python delivers signals
    there; elsewhere the defaults stay)."""

    def __init__(self) -> None:
        self.stop: str | None = None
        self.checkpoint_now = False
        self._previous: dict[int, object] = {}

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.stop is not None:  # the second one: do not wait for the boundary
            raise Interrupted(name)
        self.stop = name

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
