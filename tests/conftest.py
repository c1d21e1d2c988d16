import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def cpu_vendor() -> str:
    """The CPU's vendor_id from /proc/cpuinfo ('' where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


# On Intel CPUs MKL's matrix products round by their operands' memory alignment unless its
# strict conditional numerical reproducibility is on, and a seed's slice of a stacked batch
# sits at another alignment than its single run. Set before torch loads MKL, so the tests
# of bit-for-bit equality between the two hold there (docs/performance.md, "Same numbers").
if cpu_vendor() == "GenuineIntel":
    os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
# A few episodes of a tiny sequence task: every CLI test runs in seconds.
TINY = ["task=demo", "task.episodes=3", "task.batch_size=4", "task.sequence_length=3",
        "log_every=1", "threads=1"]


# The jobs `python -m bench -m +experiment=NAME dry_run=true` validates for each paper preset
# (one seed each, so also its runs): the sweeper's counts, asserted by test_cli's dry runs.
PRESET_JOBS = {
    "hero": 120, "tabular_single": 20, "tabular_multi": 20, "mnist": 120, "mnist_stale": 160,
    "vocab_sweep": 320, "task_variants": 320, "terminal_h_sweep": 560, "ablations": 300,
    "k_sweep": 300, "epoch_sweep": 300, "zero_variance_masking": 90, "eta_sweep": 100,
    "dg_epochs": 80, "dg_epochs_dense": 160,
}


# Numbers the docs spell out as words.
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight",
         9: "nine", 10: "ten"}


def one_line(text: str) -> str:
    """Text with each run of whitespace one space: prose wraps anywhere."""
    return " ".join(text.split())


def md_rows(text: str) -> list[dict]:
    """Every markdown table's rows, as dicts keyed by their table's header."""
    from tpo_bench.analysis.paper.pages import tables

    return [row for table in tables(text) for row in table]


def run_bench(*args: str, cwd: Path = REPO, env: dict | None = None,
              check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "bench", *args], cwd=cwd, text=True,
                          capture_output=True, env={**os.environ, **(env or {})}, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"bench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


class RunStarted(BaseException):
    """A run started inside bench_here: the test fails, whatever exit status it expected."""


def bench_here(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m bench ARGS` in this process, for command lines that stop before any run
    trains (refusals, --help, --cfg, dry runs): the same entry (cli()), its exit status,
    stdout and stderr, without a process start. Commands that train need run_bench (a run
    installs signal handlers, a sweep launches workers): here a run that starts fails the
    test at once, so a refusal that stops refusing cannot train in the test's process."""
    import contextlib
    import io
    import logging
    from unittest import mock

    from hydra.core.global_hydra import GlobalHydra

    from tpo_bench.bench import __main__ as entry

    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level, argv = root.handlers[:], root.level, sys.argv
    # `python -m bench` runs the entry as __main__, so Hydra finds conf/ from its file;
    # imported, Hydra would look for a `tpo_bench.conf` package instead.
    environ = {"HYDRA_MAIN_MODULE": "__main__", **(env or {})}
    code: object = 0

    def no_run(*_args, **_kwargs):  # not an Exception: Hydra's handler must not turn it into exit 1
        raise RunStarted(f"bench_here{args}: a run started (use run_bench for a command that trains)")

    try:
        with mock.patch.dict(os.environ, environ), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err), mock.patch("tpo_bench.bench.runner.run", no_run), \
                mock.patch("tpo_bench.bench.runner.run_seeds", no_run):
            sys.argv = [str(REPO / "bench" / "__main__.py"), *args]
            try:
                entry.cli()
            except SystemExit as e:  # as the interpreter turns it into a status
                code = e.code
                if code is None:
                    code = 0
                elif not isinstance(code, int):
                    print(code, file=sys.stderr)
                    code = 1
    finally:
        sys.argv = argv
        GlobalHydra.instance().clear()  # the next compose starts afresh, as a new process
        root.handlers[:] = handlers  # Hydra's job logging: a handler on this call's stdout
        root.setLevel(level)
    return subprocess.CompletedProcess([sys.executable, "-m", "bench", *args], code,
                                       out.getvalue(), err.getvalue())


def run_script(script: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(REPO / script), *args], cwd=REPO, text=True,
                          capture_output=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_dirs(root: Path) -> list[Path]:
    return sorted(p for p in Path(root).rglob("seed=*") if p.is_dir())


def terminal_summaries(h: int, algo: str) -> list[dict]:
    """The summaries of every completed, prompt-matched, committed terminal-reward run of
    one method at one H (reproduction/runs/terminal)."""
    out = []
    for s in sorted((REPO / "reproduction" / "runs" / "terminal" / f"reverse_h{h}" / algo).glob("*/seed=*/summary.json")):
        if json.loads((s.parent / "config.json").read_text()).get("match") != "prompts":
            continue
        done = json.loads(s.read_text())
        if done.get("status") == "completed":
            out.append(done)
    return out


def wait_for(predicate, timeout: float = 180.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def metrics(run_dir: Path):
    """A run's metrics, timing aside (what must equal an uninterrupted run's)."""
    import pandas as pd
    return pd.read_parquet(run_dir / "metrics.parquet").drop(columns=["wall_s"])


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def as_legacy(run_dir: Path) -> Path:
    """The run as a legacy-hashed record (preset names inside the config hash, which
    tools.migrate re-keys): its legacy hash in its folder's name, the table's column,
    summary.json and the checkpoint's identity. Returns its folder."""
    import pandas as pd
    import torch

    from tpo_bench.contract.identity import legacy_hash

    new, old = run_dir.parent.name, legacy_hash(json.loads((run_dir / "config.json").read_text()))
    df = pd.read_parquet(run_dir / "metrics.parquet")
    df.assign(config_hash=old).to_parquet(run_dir / "metrics.parquet", index=False)
    info = summary(run_dir)
    info.update(config_hash=old, run_dir=info.get("run_dir", "").replace(f"/{new}/", f"/{old}/"))
    (run_dir / "summary.json").write_text(json.dumps(info))
    if (run_dir / "checkpoint.pt").exists():
        state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
        state["identity"]["config_hash"] = old
        torch.save(state, run_dir / "checkpoint.pt")
    target = run_dir.parent.parent / old / run_dir.name
    target.parent.mkdir(exist_ok=True)
    run_dir.rename(target)
    if not any(run_dir.parent.iterdir()):
        run_dir.parent.rmdir()
    return target


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "outputs"


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for a module's tests: bit-for-bit claims are for one thread (an
    intra-op split of a reduction rounds otherwise), as a run with threads=1 computes."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def compose(*overrides: str) -> dict:
    """The resolved config `python -m bench` would see, without a subprocess."""
    from tpo_bench.bench.config import compose as bench_compose

    return bench_compose(*overrides)


# Runs trained in the test's process, for a test that needs a run made or the runner's answer
# rather than the command line's wiring (which run_bench and bench_here cover).

def job_here(*overrides: str):
    """The spec of the one run `python -m bench OVERRIDES` starts: the command line's values
    checked (config.check_overrides), then the job's spec built (jobs.job_specs)."""
    from tpo_bench.bench.config import check_overrides
    from tpo_bench.bench.jobs import explicit_keys, job_specs

    check_overrides(list(overrides))
    [spec] = job_specs(compose(*overrides), explicit_keys(overrides))
    return spec


def refuse_here(*overrides: str) -> str:
    """The ConfigError `python -m bench OVERRIDES` refuses with before any run (its command
    line's values, then its job's specs), as text; the test fails if nothing refuses."""
    from tpo_bench.bench.config import ConfigError, check_overrides
    from tpo_bench.bench.jobs import explicit_keys, job_specs

    with pytest.raises(ConfigError) as refused:
        check_overrides(list(overrides))
        job_specs(compose(*overrides), explicit_keys(overrides))
    return str(refused.value)


def train_here(spec) -> dict:
    """runner.run(spec), as `python -m bench` runs one run, in this process: the runner's
    answer. Torch's thread count, which a run sets from `threads`, is restored after."""
    import torch

    from tpo_bench.bench.runner import run

    threads = torch.get_num_threads()
    try:
        return run(spec)
    finally:
        torch.set_num_threads(threads)


def run_here(root: Path, *args: str) -> dict:
    """What `python -m bench *args output_root=root` does for its one run, in this process."""
    return train_here(job_here(*args, f"output_root={root}"))


def spec_for(root: Path, *args: str):
    """A tiny run's spec under root, built directly (for tests that alter the spec itself)."""
    from tpo_bench.bench.build import build
    return build(compose(*TINY, f"output_root={root}", *args))


# The fast tier (`pytest -m "not slow"`) starts no process. Every way a test can start one
# (subprocess, os.system/popen/spawn*, os.fork, multiprocessing, joblib) goes through one of
# these functions; each is wrapped for the whole session, and a test not marked slow that
# calls one fails, whether the call is in the test, a fixture it uses or code it runs.
_SPAWN_POINTS = [("subprocess", "Popen._execute_child"), ("os", "system"), ("os", "fork"),
                 ("os", "forkpty"), ("os", "posix_spawn"), ("os", "posix_spawnp"),
                 ("multiprocessing.util", "spawnv_passfds")]
_spawned: list[str] = []
_fast_item: list = []  # the running test when it is in the fast tier
_unwatch: list = []


def _watch(owner, attr: str, label: str) -> None:
    original = getattr(owner, attr)

    def spawn(*args, **kwargs):
        if _fast_item and not _platform_probe(label, args):
            _spawned.append(label)
        return original(*args, **kwargs)

    setattr(owner, attr, spawn)
    _unwatch.append(lambda: setattr(owner, attr, original))


# What a library runs while it is imported, to read the platform (platform's `uname -p`,
# ctypes' `ldconfig -p` when transformers or TRL load): the library's doing, in whichever
# test imports it first, not the test starting a process.
PLATFORM_PROBES = {("uname", "-p"), ("/sbin/ldconfig", "-p")}


def _platform_probe(label: str, args: tuple) -> bool:
    if label != "subprocess.Popen._execute_child" or len(args) < 2:
        return False
    argv = args[1]
    return isinstance(argv, (list, tuple)) and tuple(map(str, argv)) in PLATFORM_PROBES


def pytest_sessionstart(session) -> None:
    import importlib

    for module_name, path in _SPAWN_POINTS:
        owner = importlib.import_module(module_name)
        *parents, attr = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        if hasattr(owner, attr):
            _watch(owner, attr, f"{module_name}.{path}")


def pytest_sessionfinish(session, exitstatus) -> None:
    while _unwatch:
        _unwatch.pop()()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    fast = item.get_closest_marker("slow") is None
    if fast:
        _fast_item.append(item)
    try:
        return (yield)
    finally:
        _fast_item.clear()
        _spawned.clear()


def _fail_if_spawned(item) -> None:
    if _spawned and item.get_closest_marker("slow") is None:
        calls = sorted(set(_spawned))
        _spawned.clear()
        pytest.fail(f"{item.nodeid} is in the fast tier but started a process "
                     f"({', '.join(calls)}): mark it (or its module) slow", pytrace=False)
    _spawned.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    result = yield
    _fail_if_spawned(item)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    _fail_if_spawned(item)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    _fail_if_spawned(item)
    return result


def pytest_collection_finish(session) -> None:
    """Torch computes on one thread in each test process: xdist runs one worker per core,
    and a second thread in each worker oversubscribes the cores (small tensor ops then
    cost many times the CPU). A run sets its own count (`threads`)."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
