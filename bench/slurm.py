"""What a sweep on SLURM needs before anything is submitted: the commands reachable, the
controller answering, the partition named existing. Without this check a machine with no
SLURM waited about a minute and then printed submitit's traceback, leaving pickles behind.
Also the one place that knows where submitit's logs go and that quiets its repeated
sacct warning."""
from __future__ import annotations

import logging
import shutil
import subprocess
import sys

# submitit_slurm's own default puts logs under Hydra's sweep dir; the presets and the
# plugin's preset alike put them beside the results.
LOG_FOLDER = "${output_root}/.submitit/${now:%Y-%m-%d_%H-%M-%S}/%j"
PLUGIN_LOG_FOLDER = "${hydra.sweep.dir}/.submitit/%j"
COMMANDS = ("sbatch", "srun", "sinfo")
SINFO_TIMEOUT_S = 30  # an unreachable controller takes sinfo about 20 s to admit


def problem(partition: str | None) -> str | None:
    """Why a sweep cannot be submitted to SLURM from here, in one line, or None."""
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        return (f"SLURM is not reachable from this machine: {', '.join(missing)} not found on "
                f"PATH (run from a cluster's login node, or pick hydra/launcher=local)")
    try:  # --all: hidden partitions take jobs too
        proc = subprocess.run(["sinfo", "--all", "--noheader", "--format=%P"], capture_output=True,
                              text=True, timeout=SINFO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"SLURM is not answering: sinfo gave no answer within {SINFO_TIMEOUT_S} s"
    if proc.returncode != 0:
        said = next((line.strip() for line in proc.stderr.splitlines() if line.strip()),
                    f"exit {proc.returncode}")
        return f"SLURM is not answering: sinfo says: {said}"
    partitions = list(dict.fromkeys(p.strip().rstrip("*") for p in proc.stdout.split()))
    # sbatch takes a comma list: the job starts in whichever partition has room first
    unknown = [p for p in str(partition).split(",") if p not in partitions] if partition else []
    if unknown:
        return (f"hydra.launcher.partition={partition}: no such SLURM partition "
                f"{', '.join(unknown)} (sinfo lists: {', '.join(partitions) or 'none'})")
    return None


def accounting_disabled() -> bool:
    """Whether sacct says the cluster keeps no accounting (as tools/slurm-local.sh's)."""
    try:
        proc = subprocess.run(["sacct", "--noheader", "--jobs=1"], capture_output=True, text=True,
                              timeout=SINFO_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "accounting storage is disabled" in (proc.stdout + proc.stderr).lower()


def stop_asking_sacct() -> None:
    """Where accounting is disabled, submitit ran sacct at every poll and sacct printed its
    own error each time (our log filter cannot reach a child's stderr). Its answer carries
    nothing there: submitit then sees a job's end from its result file alone, as it did."""
    from submitit.slurm.slurm import SlurmJob

    SlurmJob.watcher._make_command = lambda: None  # the watcher's update() then asks nobody
    print("[slurm] accounting is disabled on this cluster, so sacct is not asked: a job's end "
          "is seen from its result file only, and a job killed without one leaves this command "
          "waiting (Ctrl-C, then the same command again)", file=sys.stderr, flush=True)


class SayOnce(logging.Filter):
    """submitit logs "Bypassing sacct error" at every poll where accounting is disabled,
    and each record reaches three handlers (submitit's two and Hydra's): say it once, in
    one line of our own, and drop the records."""

    def __init__(self) -> None:
        super().__init__()
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if "Bypassing sacct error" not in record.getMessage():
            return True
        if not self.said:
            self.said = True
            error = record.getMessage().split("Bypassing sacct error", 1)[1]
            error = error.replace(", status may be inaccurate.", "").strip()
            print(f"[slurm] sacct is unavailable here ({error}): a job's end is seen from its "
                  "result file only, so a job killed without one leaves this command waiting "
                  "(Ctrl-C, then the same command again). Said once.", file=sys.stderr, flush=True)
        return False


def quiet_sacct_repeats() -> None:
    log = logging.getLogger("submitit")
    if not any(isinstance(f, SayOnce) for f in log.filters):
        log.addFilter(SayOnce())
