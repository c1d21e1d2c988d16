"""A run directory and the one process allowed to write it.

Its layout and files are contract.schema's; this module writes them for one attempt.

The lock is a POSIX record lock (fcntl.lockf) on `.lock`: the kernel drops it when its
holder dies however it dies, so a killed run never leaves a stale lock, and NFS (v4, or
v3 with lockd) carries it between hosts. Where the filesystem has no locks (some Lustre
and GPFS mounts, without `flock`/`localflocks`) the run says so and goes on unlocked.
The holder writes who it is into `.lock`, so a second process can name it.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from . import checkpoint
from ..contract import io, schema
from ..contract.schema import (CHECKPOINT, CONFIG, ERROR, FAILED, HEARTBEAT_S, IO_ERROR, LOCK, METRICS,
                             RUNNING, SUMMARY)

BUSY = (errno.EACCES, errno.EAGAIN)  # what lockf raises when another process holds it


def whoami() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "since": time.time()}


def describe(holder: dict[str, Any]) -> str:
    job = f", SLURM job {holder['slurm_job_id']}" if holder.get("slurm_job_id") else ""
    since = holder.get("since")
    when = f", since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}" if since else ""
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}{job}{when}"


def hold(path: Path) -> tuple[int | None, dict[str, Any] | None]:
    """Lock `path` (created if need be, never through a symbolic link) for this process,
    as RunDir.acquire locks a run: (descriptor, None) when this process holds it (closing
    the descriptor releases it), (None, what the holder wrote) when another process does,
    (None, None) on a filesystem without POSIX locks (said on stderr)."""
    io.refuse_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = None
        if e.errno in BUSY:
            try:
                holder = json.loads(os.read(fd, 4096) or b"{}")
            except ValueError:  # caught between the holder's truncate and write
                holder = {}
        else:
            print(f"[warning] no lock: {path} is on a filesystem without POSIX locks "
                  f"({e.strerror}); nothing stops a second process", file=sys.stderr, flush=True)
        os.close(fd)
        return None, holder
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(whoami()).encode(), 0)
    return fd, None


class RunDir:
    """One run's directory through an attempt: `acquire` the lock, `begin` (config.json and
    a first `running` summary), `heartbeat`/`beat_if_due` and `checkpoint` while
    training, `finish` with the verdict, `release`."""

    def __init__(self, path: Path, pause_s: float = 0.0):
        self.path = Path(path)
        self._lock_fd: int | None = None
        self.lock_note: str | None = None  # why this run is not locked, if it is not
        self.pause_s = pause_s  # test-only: checkpoint temp file held this long before its rename
        self.provenance: dict[str, Any] = {}
        self._last_beat = 0.0

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    def previous(self) -> dict[str, Any]:
        """The last summary.json ({} if none); io.DamagedFile if it cannot be read,
        io.LinkRefused where a link stands in the run's path."""
        self.check_links()
        return io.read_json_object(self.summary_path) if self.summary_path.exists() else {}

    def acquire(self) -> dict[str, Any] | None:
        """Take the lock: None when this process holds it (or the filesystem has no locks),
        else what the holder wrote about itself."""
        self.check_links()
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as e:
            if e.errno == errno.ELOOP:  # made a link since check_links looked
                io.refuse_link(self.path / LOCK)
            raise
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in BUSY:
                try:
                    holder = json.loads(os.read(fd, 4096) or b"{}")
                except ValueError:  # caught between the holder's truncate and write
                    holder = {}
                os.close(fd)
                return holder
            os.close(fd)
            self.lock_note = (f"no lock: {self.path} is on a filesystem without POSIX locks "
                              f"({e.strerror}); nothing stops a second process on this run")
            print(f"[warning] {self.lock_note}", file=sys.stderr, flush=True)
            return None
        self._lock_fd = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(whoami()).encode(), 0)
        return None

    def check_links(self) -> None:
        """io.LinkRefused for a symbolic link where the harness would follow one: the run's
        folder and, for a run directory, the three above it up to output_root (task, algo,
        config hash; output_root itself is the user's to choose), or any file of the run."""
        folders = [self.path, *self.path.parents[:3]] if schema.parse_run_dir(self.path) else [self.path]
        for p in [*reversed(folders), *(self.path / n for n in (LOCK, SUMMARY, CONFIG, METRICS, CHECKPOINT))]:
            io.refuse_link(p)

    def release(self) -> None:
        """Closing the descriptor drops the lock; `.lock` itself stays (removing it would
        let a process that opened it a moment ago lock a file nobody else can see)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def clear_stale_temps(self) -> None:
        """Temp files left by killed writers. Under the lock nobody else writes here, so
        every temp file is stale; without one, only this process's own are known to be."""
        stale = self.path.glob(f".*{io.TEMP_SUFFIX}") if self._lock_fd is not None \
            else io.own_temps(self.path)
        for p in stale:
            p.unlink(missing_ok=True)

    def write_config(self, config: dict[str, Any]) -> None:
        io.write_json(self.path / CONFIG, config)

    def write_summary(self, summary: dict[str, Any]) -> None:
        io.write_json(self.summary_path, summary)

    def begin(self, provenance: dict[str, Any], config: dict[str, Any]) -> None:
        """config.json, then a `running` summary carrying `provenance` (every later summary
        of this attempt does too)."""
        self.provenance = provenance
        self.write_config(config)
        self.heartbeat()

    def heartbeat(self, **extra: Any) -> None:
        self.write_summary({**self.provenance, "status": RUNNING, "reason": None,
                            "heartbeat": time.time(), **extra})
        self._last_beat = time.monotonic()

    def beat_if_due(self) -> None:
        if time.monotonic() - self._last_beat > HEARTBEAT_S:
            self.heartbeat()

    def checkpoint(self, state: dict[str, Any], step: int) -> None:
        checkpoint.save(self.path, state, pause_s=self.pause_s)
        self.heartbeat(checkpoint_step=step)

    def finish(self, df: pd.DataFrame | None, *, status: str, reason: str | None = None,
               error_kind: str | None = None, rows: list[dict] = (), **extra: Any) -> dict[str, Any]:
        """metrics.parquet, then summary.json (last: it is what says `completed`): the
        provenance, the verdict, the last row's numbers, and `extra` (what the run really
        used). Whatever stops the table (a full disk: error_kind io; a value parquet
        cannot store: error) turns the record into `failed` with that error, where the
        disk still takes the small summary; where it takes nothing, it is said on stderr
        (summary.json then still says `running`, its heartbeat going stale). `df` None:
        the table could not be built (the record says why)."""
        summary = {**self.provenance, "status": status, "reason": reason, "error_kind": error_kind,
                   "final": {k: v for k, v in (rows[-1] if rows else {}).items() if isinstance(v, (int, float))},
                   "rows": len(rows), "finished_at": time.time(),
                   "duration_s": time.time() - self.provenance.get("started_at", time.time()), **extra}
        try:
            if df is not None:
                io.write_parquet(self.path / METRICS, df)
        except Exception as e:
            reason = f"{type(e).__name__} writing {METRICS}: {e}"
            if summary.get("reason"):
                reason = f"{summary['reason']}; then {reason}"
            summary = {**summary, "status": FAILED, "reason": reason,
                       "error_kind": IO_ERROR if isinstance(e, OSError) else ERROR}
        try:
            self.write_summary(summary)
        except OSError as e:
            print(f"[error] {self.path}: could not record the run's end ({summary['status']}: "
                  f"{summary.get('reason')}) in {SUMMARY}: {e}", file=sys.stderr, flush=True)
            summary = {**summary, "status": FAILED, "error_kind": IO_ERROR,
                       "reason": f"{summary.get('reason') or summary['status']}; "
                                 f"OSError writing {SUMMARY}: {e}"}
        for p in io.own_temps(self.path):
            p.unlink(missing_ok=True)
        return summary
