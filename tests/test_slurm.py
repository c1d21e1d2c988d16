"""SLURM for real: tools/slurm-local.sh, the slurm_cpu launcher preset end to
end through sbatch, and a requeued job that resumes from its checkpoint.

The tests that need a cluster use whatever `sinfo` reaches; `tools/slurm-local.sh start`
gives a one-node cluster on this machine (their tmp paths must be visible to the compute
node, which is true there). Without a reachable SLURM with an idle node they skip, unless
TPO_BENCH_REQUIRE_SLURM=1 (set by .ci/run), where they fail instead.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, TINY, run_bench, run_dirs

SCRIPT = REPO / "tools" / "slurm-local.sh"
REQUIRE = os.environ.get("TPO_BENCH_REQUIRE_SLURM") == "1"
UP_STATES = ("idle", "mixed")  # a node that can take a new job now


def _cmd(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), text=True, capture_output=True, timeout=timeout)


@functools.lru_cache(maxsize=None)
def slurm_unavailable() -> str | None:
    """Why the SLURM tests cannot run here, or None when they can (asked once: sinfo can
    take its time to give up on an unreachable controller)."""
    for tool in ("sinfo", "sbatch", "squeue", "scontrol"):
        if shutil.which(tool) is None:
            return f"SLURM is not installed (no {tool} on PATH; `tools/slurm-local.sh start` sets up one)"
    try:
        proc = _cmd("sinfo", "-h", "-o", "%T", timeout=10)
    except subprocess.TimeoutExpired:
        return "sinfo timed out (slurmctld unreachable)"
    if proc.returncode != 0:
        return f"sinfo failed ({proc.returncode}): {proc.stderr.strip()}"
    states = [s.strip() for s in proc.stdout.split()]
    if not any(s in UP_STATES for s in states):  # ("idle*": not responding)
        return f"no idle SLURM node (sinfo states: {', '.join(states) or 'none'})"
    return None


@pytest.fixture(scope="module")
def slurm() -> None:
    reason = slurm_unavailable()
    if reason is None:
        return
    if REQUIRE:
        pytest.fail(f"TPO_BENCH_REQUIRE_SLURM=1 but SLURM is not usable: {reason}")
    pytest.skip(reason)


def _launcher(name: str, out: Path) -> list[str]:
    """slurm_cpu sized so that several jobs fit on a small machine."""
    return ["hydra/launcher=slurm_cpu", "hydra.launcher.timeout_min=5",
            "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1",
            f"hydra.launcher.name={name}", f"output_root={out}"]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


# ---------------------------------------------------------------- the script

@pytest.mark.slow
def test_script_exists_and_status_tells_whether_the_cluster_is_up():
    assert SCRIPT.is_file() and os.access(SCRIPT, os.X_OK), f"{SCRIPT} missing or not executable"
    assert SCRIPT.read_text().startswith("#!/usr/bin/env bash")
    assert _cmd("bash", "-n", str(SCRIPT)).returncode == 0
    usage = _cmd(str(SCRIPT), "bogus")
    assert usage.returncode == 2 and "start|stop|status" in usage.stderr

    status = _cmd(str(SCRIPT), "status", timeout=60)
    reason = slurm_unavailable()
    if reason is None:
        assert status.returncode == 0, status.stdout + status.stderr
        assert "PARTITION" in status.stdout and "JOBID" in status.stdout  # sinfo and squeue
        assert any(s in status.stdout for s in ("idle", "mix", "alloc"))
    else:
        assert status.returncode != 0 and status.stderr.strip(), status.stdout + status.stderr
        if REQUIRE:
            pytest.fail(f"TPO_BENCH_REQUIRE_SLURM=1 but SLURM is not usable: {reason}")


@pytest.mark.slow
def test_script_refuses_other_systems_and_non_root(tmp_path):
    os_release = tmp_path / "os-release"
    os_release.write_text('ID=fedora\nID_LIKE="rhel centos"\n')
    for command in ("start", "stop"):
        proc = subprocess.run([str(SCRIPT), command], text=True, capture_output=True, timeout=30,
                              env={**os.environ, "SLURM_LOCAL_OS_RELEASE": str(os_release)})
        assert proc.returncode != 0 and "Debian/Ubuntu" in proc.stderr and "fedora" in proc.stderr
    if os.geteuid() == 0 and shutil.which("runuser") and Path("/etc/debian_version").exists():
        # The checkout may sit in a folder only root can enter (mktemp -d is 0700): run a
        # copy from a world-readable place so the check is about the user, not the path.
        public = Path(tempfile.mkdtemp(prefix="slurm-local-", dir="/tmp"))
        try:
            public.chmod(0o755)
            copy = public / SCRIPT.name
            shutil.copy(SCRIPT, copy)
            copy.chmod(0o755)
            proc = _cmd("runuser", "-u", "nobody", "--", "bash", str(copy), "start")
        finally:
            shutil.rmtree(public, ignore_errors=True)
        assert proc.returncode != 0 and "root" in proc.stderr, proc.stderr


# ---------------------------------------------------------------- the presets (no cluster needed)

def _launcher_config(*overrides: str) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from tpo_bench.bench.config import register


    register()  # the schema nodes conf/ composes

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
    return OmegaConf.to_container(cfg.hydra.launcher, resolve=True)


def _sbatch_text(launcher: dict, folder: Path) -> str:
    """The sbatch script hydra-submitit-launcher would submit for this launcher config
    (its parameters passed to submitit the way the plugin passes them). Writing it needs no
    cluster: submitit's check for `srun` on PATH, which only guards submission, is answered
    as on a SLURM node, so the presets are checked on any machine."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf
    from submitit.slurm.slurm import SlurmExecutor

    base = set(OmegaConf.structured(BaseQueueConf).keys())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: 2))  # (2: srun found)
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm",
                                         slurm_max_num_timeout=launcher["max_num_timeout"])
    executor.update_parameters(**{
        k if k in base else f"slurm_{k}": v for k, v in launcher.items()
        if k not in ("_target_", "submitit_folder", "max_num_timeout")})
    return executor._executor._make_submission_file_text("python -u -m bench", "uid")


@pytest.mark.slow  # composes Hydra configs
def test_launcher_presets_make_the_intended_sbatch_jobs(tmp_path):
    cpu = _launcher_config("hydra/launcher=slurm_cpu", "output_root=/data/runs")
    assert cpu["_target_"].endswith("SlurmLauncher")
    assert cpu["submitit_folder"].startswith("/data/runs/.submitit/")  # logs beside results
    assert cpu["submitit_folder"].endswith("/%j") and cpu["max_num_timeout"] >= 1
    text = _sbatch_text(cpu, tmp_path)
    for flag in ("--cpus-per-task=1", "--mem=4GB", "--time=240", "--requeue",
                 "--signal=USR2@120", "--job-name=tpo-bench"):
        assert f"#SBATCH {flag}\n" in text, (flag, text)
    assert "--gpus-per-node" not in text and "--partition" not in text and "--account" not in text
    assert "export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK" in text  # threads=0 follows cpus_per_task

    gpu = _launcher_config("hydra/launcher=slurm_gpu", "hydra.launcher.partition=gpu",
                           "hydra.launcher.account=proj", "hydra.launcher.array_parallelism=7")
    text = _sbatch_text(gpu, tmp_path)
    for flag in ("--gpus-per-node=1", "--cpus-per-task=4", "--mem=16GB", "--partition=gpu",
                 "--account=proj", "--requeue", "--signal=USR2@120"):
        assert f"#SBATCH {flag}\n" in text, (flag, text)
    assert gpu["array_parallelism"] == 7

    local = _launcher_config("hydra/launcher=local")
    assert local["_target_"].endswith("JoblibLauncher") and local["n_jobs"] == -1


# ---------------------------------------------------------------- a sweep through sbatch

@pytest.mark.slow
def test_slurm_sweep_end_to_end_then_collect_and_plot(slurm, tmp_path, capsys):
    from tpo_bench.analysis import collect, plot

    out = tmp_path / "outputs"
    name = f"tpo-test-{uuid.uuid4().hex[:8]}"
    proc = run_bench("-m", "algo=tpo,dg", "seed=0", *TINY[:4], *_launcher(name, out))
    assert "2 completed, 0 failed" in proc.stdout, proc.stdout + proc.stderr

    dirs = run_dirs(out)
    assert len(dirs) == 2
    job_ids = set()
    for d in dirs:
        summary = _summary(d)
        assert summary["status"] == "completed" and summary["rows"] == 3
        # it ran inside a SLURM job, with the preset's thread count (OMP_NUM_THREADS from
        # cpus_per_task, since the command left threads at 0)
        assert summary["slurm_job_id"], summary
        assert summary["threads"] == 1
        job_ids.add(summary["slurm_job_id"])
    assert len(job_ids) == 2  # one SLURM job (array task) per run

    # submitit's files land beside the results: <output_root>/.submitit/<time>/<job>/
    [sub] = list((out / ".submitit").iterdir())
    scripts = list(sub.glob("*/*_submission.sh"))
    assert len(scripts) == 1
    sbatch = scripts[0].read_text()
    assert "#SBATCH --array=0-1" in sbatch and "#SBATCH --cpus-per-task=1" in sbatch
    assert "#SBATCH --requeue" in sbatch and "#SBATCH --signal=USR2@" in sbatch
    assert f"#SBATCH --job-name={name}" in sbatch and "srun " in sbatch
    logs = sorted(sub.glob("*_*/*_log.out"))
    assert len(logs) == 2
    for log in logs:
        text = log.read_text()
        assert "submitit INFO" in text and "Job completed successfully" in text
        assert "step 3/3 error" in text  # the run's own progress line
    assert len(list(sub.glob("*_*/*_result.pkl"))) == 2

    # the analysis CLIs on the sweep's outputs (their own start-up is test_analysis's)
    results = out / "results.parquet"
    assert collect.main([str(out), "--out", str(results)]) == 0
    table = pd.read_parquet(results)
    assert len(table) == 2 * 3 and set(table["algo.name"]) == {"tpo", "dg"}
    plots = out / "plots"
    capsys.readouterr()
    assert plot.main(["--results", str(results), "--out", str(plots)]) == 0
    shown = capsys.readouterr().out
    pngs = list(plots.glob("*.png"))
    assert pngs and all(p.stat().st_size > 1000 for p in pngs)
    assert "tpo" in shown and "dg" in shown


@pytest.fixture(scope="module")
def packed_plugin_sweep(slurm, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One sweep for the two tests below (a sweep through sbatch is most of their time):
    through `hydra/launcher=submitit_slurm`, the plugin's own preset, four seeds packed two
    to a job. (output_root, the command's output)."""
    out = tmp_path_factory.mktemp("packed") / "outputs"
    name = f"tpo-pack-{uuid.uuid4().hex[:8]}"
    proc = run_bench("-m", "task=tabular_single", "algo=pg", "task.episodes=3",
                     "seed=range(0,4,2)", "seeds_per_job=2", "hydra/launcher=submitit_slurm",
                     "hydra.launcher.timeout_min=5", "hydra.launcher.cpus_per_task=1",
                     "hydra.launcher.mem_gb=1", f"hydra.launcher.name={name}",
                     f"hydra.launcher.partition={_partition()}", f"output_root={out}")
    return out, proc


@pytest.mark.slow
def test_plugin_preset_logs_beside_the_results_and_says_sacct_once(packed_plugin_sweep):
    """`hydra/launcher=submitit_slurm` (the name users type) behaves as slurm_cpu: logs
    under <output_root>/.submitit/, not Hydra's sweep dir; and a cluster without
    accounting gets submitit's sacct warning once, not at every poll."""
    out, proc = packed_plugin_sweep
    assert "4 completed, 0 failed" in proc.stdout, proc.stdout + proc.stderr
    logs = sorted((out / ".submitit").glob("*/*_*/*_log.out"))
    assert len(logs) == 2, sorted(p.relative_to(out) for p in out.rglob("*_log.out"))  # one per job
    assert not list((out / ".hydra").rglob(".submitit"))
    said = proc.stdout + proc.stderr
    assert "Bypassing sacct error" not in said
    from tpo_bench.bench import slurm
    if slurm.accounting_disabled():  # tools/slurm-local.sh's cluster: sacct is not asked
        assert said.count("[slurm] accounting is disabled on this cluster") == 1, said
        assert "Slurm accounting storage is disabled" not in said, said
    else:
        assert "[slurm] accounting is disabled" not in said


def _partition() -> str:
    """The cluster's default partition, as sinfo marks it (the pre-check is then real)."""
    listed = _cmd("sinfo", "--noheader", "--format=%P").stdout.split()
    return next(p.rstrip("*") for p in listed if p.endswith("*"))


@pytest.mark.slow
def test_seeds_per_job_packs_runs_into_fewer_slurm_jobs(packed_plugin_sweep):
    out, proc = packed_plugin_sweep
    assert "2 jobs, 4 runs: 4 completed, 0 failed" in proc.stdout, proc.stdout + proc.stderr
    dirs = run_dirs(out)
    assert [d.name for d in dirs] == ["seed=0", "seed=1", "seed=2", "seed=3"]
    assert len({d.parent for d in dirs}) == 1  # one config hash
    jobs = [_summary(d)["slurm_job_id"] for d in dirs]
    assert all(jobs) and jobs[0] == jobs[1] and jobs[2] == jobs[3] and jobs[0] != jobs[2]


# ---------------------------------------------------------------- requeue and resume

# Long enough to interrupt: with debug.sleep=0.3, the first checkpoint at episode 4 leaves
# 20 episodes (about 6 s) for the interruption to land.
SLOW = ["task=demo", "task.episodes=24", "task.batch_size=4", "task.sequence_length=3",
        "checkpoint_every=4", "log_every=4", "threads=1", "seed=3"]


def _squeue(*args: str) -> str:
    return _cmd("squeue", "-h", *args).stdout.strip()


def _wait_for(what: str, check, proc: subprocess.Popen, log: Path, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"bench exited ({proc.returncode}) before {what}:\n{log.read_text()}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()}")


@pytest.fixture(scope="module")
def uninterrupted(slurm, tmp_path_factory):
    """The same config and seed run without SLURM and uninterrupted, once for both ways of
    interrupting, started in the background while the first SLURM job runs (which mostly
    sleeps). Call it for (output_root, the run's directory)."""
    root = tmp_path_factory.mktemp("local")
    log = root.parent / f"{root.name}.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "bench", *SLOW, f"output_root={root}"],
                                cwd=REPO, stdout=f, stderr=subprocess.STDOUT, text=True)

    def done() -> tuple[Path, Path]:
        assert proc.wait(timeout=600) == 0, log.read_text()
        [run_dir] = run_dirs(root)
        return root, run_dir
    yield done
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["scontrol_requeue", "usr2_preemption"])
def test_requeued_job_resumes_from_checkpoint(slurm, uninterrupted, tmp_path, how):
    """A job interrupted mid-run -- `scontrol requeue`, or USR2 as SLURM sends before a
    time limit or on preemption, which makes submitit requeue the job itself -- runs again
    and resumes from the run's checkpoint; its metrics equal an uninterrupted run's."""
    out = tmp_path / "slurm"
    name = f"tpo-requeue-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "bench.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench", "-m", *SLOW, "debug.sleep=0.3", *_launcher(name, out)],
            cwd=REPO, stdout=f, stderr=subprocess.STDOUT, text=True)
    try:
        ckpt = _wait_for("the first checkpoint",
                         lambda: next(out.glob("demo/*/*/seed=3/checkpoint.pt"), None), proc, log, 90)
        run_dir = ckpt.parent
        job = _wait_for("the job in squeue", lambda: _squeue("-n", name, "-o", "%i"), proc, log, 30)
        job = job.split()[0]
        if how == "scontrol_requeue":
            done = _cmd("scontrol", "requeue", job)
        else:
            done = _cmd("scancel", "--signal=USR2", job)
        assert done.returncode == 0, done.stderr

        # SLURM holds a requeued job back for about two minutes (BeginTime); release it.
        released = False
        deadline = time.monotonic() + 150
        while proc.poll() is None and time.monotonic() < deadline:
            state = _squeue("-j", job, "-o", "%T %r")
            if not released and state.startswith("PENDING"):
                released = _cmd("scontrol", "update", f"JobId={job}", "StartTime=now").returncode == 0
            time.sleep(0.3)
        if proc.poll() is None:
            proc.kill()
            pytest.fail(f"the requeued job did not finish:\n{log.read_text()}")
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["scancel", "-n", name], capture_output=True)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert released, f"the job was never pending again after {how}:\n{text}"

    summary = _summary(run_dir)
    assert summary["status"] == "completed", summary
    assert summary["attempts"] >= 2, summary
    assert summary["slurm_job_id"]
    assert not (run_dir / "checkpoint.pt").exists()  # deleted on success
    job_logs = list((out / ".submitit").glob("*/*/*_log.out"))
    assert any("resumed from checkpoint at step" in p.read_text() for p in job_logs), text
    if how == "usr2_preemption":
        assert any("Caught signal SIGUSR2" in p.read_text() for p in
                   (out / ".submitit").glob("*/*/*_log.err")), text
        # the checkpoint was taken at the signal, not left at the last periodic one
        logs = "".join(p.read_text() for p in job_logs)
        step = re.search(r"checkpoint at step (\d+) \(SIGUSR2\)", logs)
        assert step and f"resumed from checkpoint at step {step.group(1)}" in logs, logs

    # the same config and seed, uninterrupted and without SLURM
    local_root, local = uninterrupted()
    assert local.relative_to(local_root) == run_dir.relative_to(out)  # same hash
    a = pd.read_parquet(run_dir / "metrics.parquet").drop(columns=["wall_s"])
    b = pd.read_parquet(local / "metrics.parquet").drop(columns=["wall_s"])
    assert len(a) == 24 and not a["partial"].any()
    pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.mark.parametrize("first_line, ours", [
    ("# written by tpo-bench slurm-local.sh", True),
    ("# written by tpo-bench tools/slurm-local.sh", True),
    ("# written by tpo-bench scripts/slurm-local.sh", True),  # a checkout laid out otherwise
    ("# written by the site's admins", False),
    ("ClusterName=site", False)])
@pytest.mark.slow  # starts a process
def test_script_recognises_its_own_config_wherever_it_lives(first_line, ours):
    """`start` rewrites a slurm.conf that this script wrote, from whatever path in a checkout,
    and refuses any other: the check is its OURS pattern against the file's first line."""
    probe = f'source <(sed -n "/^MARKER=/p; /^OURS=/p" {SCRIPT}); ' \
            f'printf "%s\\n" "$MARKER" | grep -qE "$OURS" || exit 3; ' \
            f'printf "%s\\n" "$1" | grep -qE "$OURS"'
    proc = subprocess.run(["bash", "-c", probe, "probe", first_line], capture_output=True, text=True)
    assert proc.returncode != 3, "the script does not recognise the marker it writes"
    assert (proc.returncode == 0) == ours, proc.stderr
