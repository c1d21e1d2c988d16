"""A SLURM sweep is checked before anything is submitted: without
sbatch, with a controller that does not answer, or with a partition that does not exist,
the sweep is refused in one line naming the launcher and the cause, exit 2, nothing
created. These run anywhere: SLURM's commands are replaced by stand-ins on PATH. They run
`python -m bench`'s entry in this process (bench_here), PATH changed for the call;
test_no_sbatch_is_refused_from_a_process runs one through a real process."""
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpo_bench.bench import slurm
from conftest import REPO, TINY, bench_here


def _args(tmp_path: Path, *extra: str) -> list[str]:
    return ["-m", "seed=0,1", *TINY, f"output_root={tmp_path / 'outputs'}", *extra]


def _sweep(tmp_path: Path, path: str, *extra: str) -> subprocess.CompletedProcess:
    return bench_here(*_args(tmp_path, *extra), env={"PATH": path})


def _stand_ins(tmp_path: Path, sinfo: str) -> str:
    """A PATH holding sbatch and srun that do nothing, and an sinfo running `sinfo`."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, body in (("sbatch", "exit 0"), ("srun", "exit 0"), ("sinfo", sinfo)):
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / name).chmod(0o755)
    return str(bin_)


def _nothing_created(tmp_path: Path) -> None:
    assert not (tmp_path / "outputs").exists()


def _no_sbatch_refused(proc: subprocess.CompletedProcess, tmp_path: Path) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: hydra/launcher=slurm_cpu: SLURM is not reachable")
    assert "sbatch, srun, sinfo not found on PATH" in line and "nothing was launched" in line
    assert "valid jobs" not in proc.stdout and "Traceback" not in proc.stderr
    _nothing_created(tmp_path)


@pytest.mark.parametrize("dry_run", ["dry_run=true", "dry_run=false"])
def test_no_sbatch_is_refused_in_one_line(tmp_path, dry_run):
    empty = tmp_path / "empty"
    empty.mkdir()
    _no_sbatch_refused(_sweep(tmp_path, str(empty), "hydra/launcher=slurm_cpu", dry_run), tmp_path)


@pytest.mark.slow
def test_no_sbatch_is_refused_from_a_process(tmp_path):
    """A real process's stderr: the one line and nothing else (a warning, a log record)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "bench", *_args(tmp_path, "hydra/launcher=slurm_cpu")],
                          cwd=REPO, env={**os.environ, "PATH": str(empty)}, text=True,
                          capture_output=True, timeout=300)
    _no_sbatch_refused(proc, tmp_path)


@pytest.mark.slow  # runs the sinfo stand-in
def test_controller_that_does_not_answer_is_named(tmp_path):
    path = _stand_ins(tmp_path, "echo 'sinfo: error: Unable to process configuration file' >&2; exit 1")
    proc = _sweep(tmp_path, path, "hydra/launcher=submitit_slurm")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line == ("error: hydra/launcher=submitit_slurm: SLURM is not answering: sinfo says: "
                    "sinfo: error: Unable to process configuration file; nothing was launched")
    _nothing_created(tmp_path)


@pytest.mark.slow  # runs the sinfo stand-in
def test_unknown_partition_is_refused_naming_the_partitions(tmp_path):
    # answers only with --all (hidden partitions take jobs too), a partition per node line
    path = _stand_ins(tmp_path, '[ "$1" = --all ] && printf "debug*\\ncpu\\ncpu\\nhidden\\n"')
    proc = _sweep(tmp_path, path, "hydra/launcher=slurm_cpu", "hydra.launcher.partition='cpu,gpu'")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert ("hydra.launcher.partition=cpu,gpu: no such SLURM partition gpu "
            "(sinfo lists: debug, cpu, hidden)" in proc.stderr)
    _nothing_created(tmp_path)
    # partitions sinfo lists (the default one without its '*', a hidden one, a comma list
    # as sbatch takes it) pass the check
    for partition in ("cpu", "debug", "hidden", "'cpu,debug'"):
        ok = _sweep(tmp_path, path, "hydra/launcher=slurm_cpu",
                    f"hydra.launcher.partition={partition}", "dry_run=true")
        assert ok.returncode == 0 and "[dry run] 2 valid jobs" in ok.stdout, ok.stderr


def test_the_optuna_sweeper_checks_too(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _sweep(tmp_path, str(empty), "hydra/launcher=slurm_cpu", "hydra/sweeper=optuna",
                  "hydra.sweeper.n_trials=1", "hydra.sweeper.seeds=1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error: hydra/launcher=slurm_cpu: SLURM is not reachable" in proc.stderr
    _nothing_created(tmp_path)


def test_local_launcher_is_not_checked(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _sweep(tmp_path, str(empty), "hydra/launcher=local", "dry_run=true")
    assert proc.returncode == 0 and "[dry run] 2 valid jobs" in proc.stdout, proc.stderr


def test_repeated_sacct_warning_is_said_once(capsys, caplog):
    log = logging.getLogger("submitit")
    slurm.quiet_sacct_repeats()
    slurm.quiet_sacct_repeats()  # a second sweep in one process adds no second filter
    with caplog.at_level(logging.WARNING, logger="submitit"):
        for call in range(1, 4):
            log.warning(f"Call #{call} - Bypassing sacct error Command '['sacct']' returned "
                        f"non-zero exit status 1., status may be inaccurate.")
        log.warning("another warning")
    assert [r.getMessage() for r in caplog.records] == ["another warning"]
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("[slurm] sacct is unavailable here (Command '['sacct']' returned non-zero")
    assert "Bypassing" not in line and "Said once" in line


@pytest.mark.slow  # runs the sinfo stand-in
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a GPU")
def test_a_gpu_sweep_is_submitted_from_a_machine_without_one(tmp_path):
    """A SLURM job trains on a compute node, so the submitting machine's lack of a GPU does
    not refuse device=cuda; a device that is
    no device name is still refused before anything is submitted, and a local sweep still
    refuses a device this machine lacks."""
    path = _stand_ins(tmp_path, 'printf "gpu*\\n"')
    ok = _sweep(tmp_path, path, "hydra/launcher=slurm_gpu", "device=cuda", "dry_run=true")
    assert ok.returncode == 0 and "[dry run] 2 valid jobs" in ok.stdout, ok.stderr
    bad = _sweep(tmp_path, path, "hydra/launcher=slurm_gpu", "device=cuda:x", "dry_run=true")
    assert bad.returncode == 2 and "device='cuda:x' is not a device name" in bad.stderr, bad.stderr
    local = _sweep(tmp_path, path, "hydra/launcher=local", "device=cuda", "dry_run=true")
    assert local.returncode == 2 and "is not available on this machine" in local.stderr, local.stderr
    _nothing_created(tmp_path)
    # the tuning sweeper validates its trials the same way
    tune = bench_here("-m", *TINY, "hydra/launcher=slurm_gpu", "hydra/sweeper=optuna",
                      "hydra.sweeper.n_trials=1", "hydra.sweeper.seeds=1", "device=cuda", "dry_run=true",
                      f"output_root={tmp_path / 'outputs'}", env={"PATH": path})
    assert tune.returncode == 0 and "[dry run] 1 studies validated" in tune.stdout, tune.stderr
