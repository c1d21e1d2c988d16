"""Test-only fault injection (config `debug.*`), kept out of the training loop's body:
the loop calls whatever episode function this returns, the plain one unless a test
asks for a fault.

    debug.nan_at=N    the loss of episode N reads NaN (the run must record `diverged`)
    debug.nan_error_at=N  the error of episode N reads NaN, its loss finite (likewise)
    debug.sleep=S     S seconds after each episode (gives a test time to kill a run)

(`debug.checkpoint_pause`, the pause between a checkpoint's temp file and its rename,
is the run directory's: bench.rundir.RunDir.)
"""
from __future__ import annotations

import math
import time
from typing import Callable

from .config import DebugConfig

Episode = Callable[[], dict]


def inject(episode: Episode, debug: DebugConfig) -> Callable[[int], dict]:
    nan_at, nan_error_at, sleep = debug.nan_at, debug.nan_error_at, debug.sleep
    if nan_at < 0 and nan_error_at < 0 and not sleep:
        return lambda step: episode()

    def faulty(step: int) -> dict:
        row = episode()
        if step == nan_at:
            row["loss"] = math.nan
        if step == nan_error_at:
            row["error"] = math.nan
        if sleep:
            time.sleep(sleep)
        return row

    return faulty
