"""Fault campaign (a benchmark, not a test): N randomised trials of a fault on a short
demo run, each followed by the same command again until the run says `completed`, then
every run directory checked against an uninterrupted reference of its config.

    python -m dev.faults --trials 100 --root outputs/faults

Faults: SIGKILL, SIGTERM, SIGINT; a duplicate launch; ENOSPC (a tmpfs; needs root); a
symlinked `.lock`; a NaN metric; an edit of a plugin's loss or of a helper module it
imports; a plot of a stale table; a teammate's links and planted runs; two merges into one
table at once; a teammate's unreadable run; a stray module; repeated rows; a failed commit.
Right after the fault the record must be truthful; after re-running every row must equal
the reference's; no file outside the trial's run directory (bar the tables and sweep files
the trial owns) may change. Prints rows lost, mislabelled and files touched; exits 1 if any.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd

from tpo_bench.contract import io
from tpo_bench.contract.schema import CHECKPOINT, LOCK, METRICS, SUMMARY, run_dirs

SIGNALS = {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigint": signal.SIGINT}
FAULTS = (*SIGNALS, "duplicate", "enospc", "symlink_lock", "nan_metric", "code_edit", "stale_plot",
          "planted_links", "planted_run", "concurrent_merge", "unreadable_run", "helper_edit",
          "stray_module", "duplicate_rows", "failed_commit")
# A handful of configs, so that references are shared between trials.
CONFIGS = [
    ["task=demo", "algo=tpo", "task.episodes=16", "checkpoint_every=4"],
    ["task=demo", "algo=grpo", "task.episodes=12", "checkpoint_every=3"],
    ["task=demo", "algo=ppo", "task.episodes=20", "checkpoint_every=5"],
    ["task=demo", "algo=dg", "task.episodes=20", "checkpoint_every=2"],
    ["task=demo", "algo=pg", "task.episodes=14", "checkpoint_every=7"],
]
COMMON = ["task.batch_size=8", "task.sequence_length=4", "threads=1", "log_every=1000"]
# The code-edit fault's config: TPO through a plugin module the trial edits.
PLUGIN_CONFIG = ["task=demo", "algo=tpo", "algo.impl=tpo_fault", "plugins=[fault_plugin]",
                 "task.episodes=10", "checkpoint_every=5"]
PLUGIN = '''"""TPO through a plugin module (dev.faults edits it between launches)."""
from dataclasses import dataclass

from tpo_bench.algorithms import register
from tpo_bench.algorithms.tpo import TPO


@register("tpo_fault")
@dataclass(frozen=True)
class FaultTPO(TPO):
    def loss(self, batch, logp):
        out = super().loss(batch, logp)
        return out
'''
# The helper-edit fault's config: TPO through a plugin package whose loss imports a helper
# module of the package; the trial edits the helper, never the loss.
PACKAGE_CONFIG = ["task=demo", "algo=tpo", "algo.impl=tpo_fault_pkg", "plugins=[fault_pkg.loss]",
                  "task.episodes=10", "checkpoint_every=5"]
PACKAGE = {"__init__.py": "",
           "loss.py": '''"""TPO scaled by a helper of its package (dev.faults edits the helper)."""
from dataclasses import dataclass

from tpo_bench.algorithms import register
from tpo_bench.algorithms.tpo import TPO

from fault_pkg.helper import scale


@register("tpo_fault_pkg")
@dataclass(frozen=True)
class PackageTPO(TPO):
    def loss(self, batch, logp):
        out = super().loss(batch, logp)
        return type(out)(out.loss * scale(), out.metrics)
''',
           "helper.py": "def scale():\n    return 1.0\n"}
# A teammate's files on the shared tree (made once per campaign, mode 0600): planted links
# aim at them; the touched-files check sees any write through a link.
TEAMMATE = {"private.yaml": "their own file\n", "multirun/keep.txt": "their own folder\n"}
# A slow shared file system: each merge sleeps between reading the table and writing it,
# so two merges at once overlap (collect's own code otherwise).
SLOW_MERGE = ("import sys, time\n"
              "from tpo_bench.analysis import collect\n"
              "merge = collect.merge\n"
              "collect.merge = lambda *a: (time.sleep(0.5), merge(*a))[1]\n"
              "sys.exit(collect.main(sys.argv[1:]))\n")
# Another user than the one running the campaign (root cannot be refused a folder): an
# audit hook answers EACCES to an open or a listing below a folder that others may not
# read and search (a teammate's umask 077 or mode 000), as the OS would.
AS_OTHER_USER = """import errno, os, sys
top = os.path.abspath(os.environ["FAULTS_TOP"])


def other(path):
    p = os.path.abspath(os.fsdecode(path))
    if os.path.isfile(p) and p.startswith(top) and not os.stat(p).st_mode & 0o004:
        return True
    while p.startswith(top):
        if os.path.isdir(p) and os.stat(p).st_mode & 0o005 != 0o005:
            return True
        p = os.path.dirname(p)
    return False


def hook(event, args):
    if event in ("open", "os.scandir", "os.listdir") and args \\
            and isinstance(args[0], (str, bytes, os.PathLike)) and other(args[0]):
        raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(args[0]))


sys.addaudithook(hook)
from tpo_bench.analysis import collect
sys.exit(collect.main(sys.argv[1:]))
"""
# Edits that leave the numbers alone: a comment (the fingerprint ignores it: the run is
# skipped) or a statement (the fingerprint changes: the run is refused until rerun).
EDITS = {"comment": ("        return out\n", "        return out  # reviewed\n"),
         "statement": ("        return out\n", "        unused = 1.0\n        return out\n")}
# The stray-module fault: an untracked module in a checkout's algorithms/ (imported by every
# run, as that package imports its whole folder) that zeroes TPO's loss.
STRAY = '''from tpo_bench.algorithms.tpo import TPO

_loss = TPO.loss
TPO.loss = lambda self, batch, logp: type(_loss(self, batch, logp))(
    0.0 * _loss(self, batch, logp).loss, _loss(self, batch, logp).metrics)
'''
# What a harness checkout holds (the stray-module fault trains in a copy of it).
CHECKOUT = ("tpo_bench", "bench", "tasks", "algorithms", "contract", "conf", "hydra_plugins",
            "analysis", "tools", "integrations", "pyproject.toml")
MAX_ATTEMPTS = 6
PLANTED = "zz"  # the task and algorithm folder names of a planted copy
REPO = Path(__file__).resolve().parent.parent


def write_plugin(folder: Path, text: str = PLUGIN) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fault_plugin.py").write_text(text)


def bench(args: list[str], root: Path, plugin: Path | None = None, cwd: Path | None = None) -> subprocess.Popen:
    """`python -m bench` on `root`; `plugin`: a folder put first on PYTHONPATH; `cwd`: the
    checkout whose code trains (this process's working directory by default)."""
    env = None if plugin is None else {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(plugin), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "bench", *args, *COMMON, f"output_root={root}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)


def run_dir(root: Path) -> Path | None:
    """The one run directory under root with a summary, found by collect's walk (a copy
    the campaign planted under PLANTED aside)."""
    found = [d for d in run_dirs(root) if (d / SUMMARY).is_file()
             and d.relative_to(root).parts[0] != PLANTED] if root.is_dir() else []
    return found[0] if len(found) == 1 else None


def status(root: Path) -> str | None:
    d = run_dir(root)
    try:
        return io.read_json_object(d / SUMMARY).get("status") if d else None
    except (OSError, io.DamagedFile):
        return "damaged"


def fingerprint(root: Path) -> str | None:
    return json.loads((run_dir(root) / SUMMARY).read_text()).get("code_fingerprint")


def wait_started(root: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None and status(root) is None:
        time.sleep(0.02)


def signal_trial(args: list[str], root: Path, sig: int, rng: random.Random) -> str:
    """The status the record must have afterwards."""
    proc = bench(args, root)
    wait_started(root, proc)
    time.sleep(rng.uniform(0.0, 2.5))  # before, between or after checkpoints
    if proc.poll() is not None:
        return "completed"
    proc.send_signal(sig)
    proc.wait()
    return "running" if sig == signal.SIGKILL else "interrupted"


def duplicate_trial(args: list[str], root: Path, rng: random.Random) -> str:
    first = bench(args, root)
    time.sleep(rng.uniform(0.0, 1.5))
    second = bench(args, root)
    first.wait()
    second.wait()
    return "completed"


def enospc_trial(args: list[str], root: Path) -> str | None:
    """None where no tmpfs can be mounted here."""
    root.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(root)],
                      capture_output=True).returncode != 0:
        return None
    bench(args, root).wait()
    return "failed"


def symlink_trial(args: list[str], root: Path, where: Path, watch: Watch) -> str | None:
    """The run's .lock (`where` under root) a link to a file outside the run: the run
    must refuse (exit 1) and write nothing; the operator then removes the link. Returns
    what was wrong, or None."""
    victim = root.parent / f"{root.name}-victim.txt"
    root.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text("not the harness's")
    (root / where).mkdir(parents=True)
    (root / where / LOCK).symlink_to(victim)
    watch.start(watch.trial)  # the victim planted: protected from here on
    code = bench(args, root).wait()
    wrong = [f"exit {code}, not 1"] if code != 1 else []
    if not victim.is_file() or victim.read_text() != "not the harness's":
        wrong.append("the link's target was written or replaced")
    if any((d / SUMMARY).exists() for d in run_dirs(root)):
        wrong.append("a summary was written beside the link")
    (root / where / LOCK).unlink()
    return "; ".join(wrong) or None


def write_package(folder: Path, helper: str = PACKAGE["helper.py"]) -> None:
    pkg = folder / "fault_pkg"
    pkg.mkdir(parents=True, exist_ok=True)
    for name, text in PACKAGE.items():
        (pkg / name).write_text(helper if name == "helper.py" else text)


HELPER_EDITS = {"comment": ("    return 1.0\n", "    return 1.0  # reviewed\n"),
                "statement": ("    return 1.0\n", "    unused = 1.0\n    return 1.0\n")}


def code_edit_trial(args: list[str], root: Path, plugin: Path, rng: random.Random,
                    helper: bool = False) -> tuple[str, str | None]:
    """Run to completion with the plugin as written, edit it (`helper`: the helper module
    its loss imports, not the loss), launch again: a comment is skipped (exit 0), a
    statement refused (exit 1), the record untouched either way. Returns (the edit, what
    was wrong or None)."""
    write, text, edits = (write_package, PACKAGE["helper.py"], HELPER_EDITS) if helper else \
        (write_plugin, PLUGIN, EDITS)
    write(plugin)
    bench(args, root, plugin).wait()
    before = (run_dir(root) / SUMMARY).read_text() if run_dir(root) else None
    edit = rng.choice(sorted(edits))
    old, new = edits[edit]
    write(plugin, text.replace(old, new))
    code = bench(args, root, plugin).wait()
    want = 0 if edit == "comment" else 1
    wrong = [f"exit {code} after a {edit} edit, not {want}"] if code != want else []
    if before is None or (run_dir(root) / SUMMARY).read_text() != before:
        wrong.append("the completed run's record changed")
    return edit, "; ".join(wrong) or None


class Watch:
    """Every file and link under the campaign's root, before and after a trial: a file
    changed, added or removed outside the trial's run directories (each canonical run
    folder, links resolved) and the paths the trial owns (its tables, Hydra's sweep files,
    its plugin, what it planted and later removes) is touched. Directories alone do not
    count, their files do."""

    OWNED = {".hydra", "plots", "plugin", "__pycache__", "results.parquet", ".results.parquet.lock"}

    def __init__(self, top: Path):
        self.top = top
        self.before: dict[str, tuple] = {}
        self.runs: list[str] = []
        self.owned: list[str] = []

    def files(self) -> dict[str, tuple]:
        out = {}
        for folder, dirs, names in os.walk(self.top):
            for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                path = os.path.join(folder, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                out[path] = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode)
        return out

    def start(self, trial: Path) -> None:
        """(Re)take the baseline: after planting, what was planted is protected too."""
        self.trial, self.before = trial, self.files()

    def run(self, folder: Path) -> None:
        self.runs.append(os.path.realpath(folder) + os.sep)

    def own(self, path: Path) -> None:
        self.owned.append(os.path.abspath(path))

    def touched(self) -> list[str]:
        after = self.files()
        changed = [p for p in set(self.before) | set(after) if self.before.get(p) != after.get(p)]
        trial = os.path.abspath(self.trial) + os.sep

        def allowed(p: str) -> bool:
            real = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
            if any(real.startswith(r) for r in self.runs) or any(
                    p == o or p.startswith(o + os.sep) for o in self.owned):
                return True
            return p.startswith(trial) and bool(self.OWNED & set(Path(p[len(trial):]).parts))
        wrong = sorted(os.path.relpath(p, self.top) for p in changed if not allowed(p))
        self.runs, self.owned = [], []
        return wrong


def make_teammate(top: Path) -> Path:
    folder = top / "teammate"
    for name, text in TEAMMATE.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
        (folder / name).chmod(0o600)
    return folder


def planted_links_trial(args: list[str], root: Path, where: Path, teammate: Path,
                        watch: Watch, rng: random.Random) -> tuple[str, str | None, str | None]:
    """A second user's links under a shared output_root, aimed at their own files: at
    multirun.yaml of the sweep folder the next sweep is given (a sweep runs, the link replaced),
    at `.hydra/multirun` itself (the sweep refused, exit 2), or at the run's summary.json or
    config.json (the run refused, exit 1). The operator then removes the link. Returns
    (where the link was, the status the record must have or None, what was wrong)."""
    kind = rng.choice(["multirun.yaml", "multirun folder", SUMMARY, "config.json"])
    wrong = []
    if kind == "multirun.yaml":  # the default folder's name is not foreseeable (microseconds)
        sweep = root / ".hydra" / "multirun" / "next"
        sweep.mkdir(parents=True)
        (sweep / "multirun.yaml").symlink_to(teammate / "private.yaml")
        watch.start(watch.trial)
        code = bench(["-m", *args, f"hydra.sweep.dir={sweep}"], root).wait()
        if code != 0:
            wrong.append(f"sweep exited {code}, not 0")
        return kind, (None if wrong else "completed"), "; ".join(wrong) or None
    if kind == "multirun folder":
        (root / ".hydra").mkdir(parents=True)
        link = root / ".hydra" / "multirun"
        link.symlink_to(teammate / "multirun", target_is_directory=True)
        watch.start(watch.trial)
        code = bench(["-m", *args], root).wait()
        if code != 2:
            wrong.append(f"sweep exited {code}, not 2")
        if any(run_dirs(root)):
            wrong.append("a run started though the sweep dir was refused")
        watch.own(link)
        link.unlink()
        return kind, None, "; ".join(wrong) or None
    (root / where).mkdir(parents=True)
    link = root / where / kind
    link.symlink_to(teammate / "private.yaml")
    watch.start(watch.trial)
    code = bench(args, root).wait()
    if code != 1:
        wrong.append(f"exit {code}, not 1")
    if (root / where / SUMMARY).exists() and kind != SUMMARY:
        wrong.append("a summary was written beside the link")
    watch.own(link)
    link.unlink()
    return kind, None, "; ".join(wrong) or None


def planted_run_trial(args: list[str], root: Path, where: Path, ref_run: Path, other_run: Path,
                      watch: Watch, rng: random.Random) -> tuple[str, str | None]:
    """A completed run planted where it does not belong: the reference's run under other
    task and algorithm names (`zz/zz/<hash>/seed=N`), or another seed's completed run in
    this run's own folder. The runner must train this run at its own path (not skip to the
    copy) or refuse the folder (exit 1, files untouched; the operator removes it); collect
    must not pool the copy. Returns (the plant, what was wrong or None)."""
    kind = rng.choice(["other names", "other seed"])
    wrong = []
    if kind == "other names":
        planted = root / PLANTED / PLANTED / where.parent.name / where.name
        shutil.copytree(ref_run, planted, symlinks=True)
        watch.start(watch.trial)
        code = bench(args, root).wait()
        if code != 0:
            wrong.append(f"exit {code}, not 0")
        return kind, "; ".join(wrong) or None
    shutil.copytree(other_run, root / where, symlinks=True)
    watch.start(watch.trial)
    watch.runs.clear()  # the planted copy must stay as it was until the operator removes it
    code = bench(args, root).wait()
    if code != 1:
        wrong.append(f"exit {code} on another seed's run in this run's folder, not 1")
    touched = watch.touched()
    if touched:
        wrong.append(f"touched the planted run: {touched}")
    watch.start(watch.trial)
    shutil.rmtree(root / where)
    return kind, "; ".join(wrong) or None


def planted_run_collect(root: Path, reference: pd.DataFrame) -> str | None:
    """collect of a tree holding a planted copy: exit 1 naming it; with --allow-skips
    exactly this run's rows."""
    table = root / "results.parquet"
    wrong = []
    if (r := analysis("collect", root, "--out", table)).returncode != 1 or "zz/zz" not in r.stdout + r.stderr:
        wrong.append(f"collect of a planted copy exited {r.returncode} without naming it")
    if (r := analysis("collect", root, "--out", table, "--allow-skips")).returncode != 0:
        wrong.append(f"collect --allow-skips exited {r.returncode}: {r.stderr.strip()[-200:]}")
    elif len(pd.read_parquet(table, columns=["step"])) != len(reference):
        wrong.append(f"collect pooled {len(pd.read_parquet(table, columns=['step']))} rows, not "
                     f"the run's {len(reference)}")
    return "; ".join(wrong) or None


def concurrent_merge_trial(root: Path, first: Path, other: Path, want: int) -> tuple[int, str | None]:
    """Three runs' tables: `first` collected into a table, then this trial's run and
    `other` merged into it at once (`collect --merge-into`, on a slow file system). Both
    must exit 0 and the table hold all `want` rows. Returns (rows lost, what was wrong)."""
    table = root / "results.parquet"
    if (r := analysis("collect", first, "--out", table)).returncode != 0:
        return 0, f"collect exited {r.returncode}: {r.stderr.strip()[-200:]}"
    procs = [subprocess.Popen([sys.executable, "-c", SLOW_MERGE, str(r), "--merge-into", str(table)],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (root, other)]
    codes = [p.wait() for p in procs]
    for p in procs:
        p.communicate()
    got = len(pd.read_parquet(table, columns=["step"]))
    wrong = [f"merges exited {codes}"] if codes != [0, 0] else []
    if got != want:
        wrong.append(f"the table holds {got} rows of {want}")
    return max(want - got, 0), "; ".join(wrong) or None


def unreadable_trial(root: Path, where: Path, other_where: Path, other_run: Path, want: int,
                     rng: random.Random) -> str | None:
    """A teammate's completed run beside this run, made with umask 077 (folder 0700, files
    0600), its folder mode 000, or its files alone 0600: collect as another user must name
    it unreadable, leave it out and collect this run (exit 0). Returns what was wrong."""
    theirs = root / other_where
    shutil.copytree(other_run, theirs, symlinks=True)
    kind = rng.choice(["umask 077", "mode 000", "files 0600"])
    if kind != "mode 000":
        for f in theirs.iterdir():
            f.chmod(0o600)
    theirs.chmod({"umask 077": 0o700, "mode 000": 0o000}.get(kind, 0o755))
    table = root / "results.parquet"
    r = subprocess.run([sys.executable, "-c", AS_OTHER_USER, str(root), "--out", str(table)],
                       cwd=REPO, capture_output=True, text=True, env={**os.environ, "FAULTS_TOP": str(root)})
    theirs.chmod(0o755)
    for f in theirs.iterdir():
        f.chmod(0o644)
    wrong = []
    if r.returncode != 0:
        wrong.append(f"collect ({kind}) exited {r.returncode}: {(r.stdout + r.stderr).strip()[-300:]}")
    elif len(pd.read_parquet(table, columns=["step"])) != want:
        wrong.append("the table does not hold exactly this run's rows")
    if not any(str(other_where) in ln and "unreadable" in ln for ln in (r.stdout + r.stderr).splitlines()):
        wrong.append("the teammate's run is not named unreadable")
    return "; ".join(wrong) or None


def make_checkout(dest: Path) -> Path | None:
    """A git repository at `dest` holding this checkout's harness files (CHECKOUT, as the
    working tree has them), committed; None where this code is not in a git checkout."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--", *CHECKOUT],
                            capture_output=True, text=True)
    if listed.returncode != 0 or not listed.stdout:
        return None
    for rel in filter(None, listed.stdout.split("\0")):
        src, dst = REPO / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copy2(src, dst)
    (dest / ".gitignore").write_text("__pycache__/\n")
    for cmd in (["init", "-q"], ["add", "-A"],
                ["-c", "user.name=faults", "-c", "user.email=faults@localhost", "commit", "-qm", "harness"]):
        subprocess.run(["git", "-C", str(dest), *cmd], check=True, capture_output=True)
    return dest


def stray_module_trial(args: list[str], root: Path, checkout: Path, other: Path, clean: str) -> str | None:
    """An untracked module in the checkout's algorithms/ that zeroes TPO's loss, and this
    run trained there: its record must say `-dirty` and hold another code fingerprint than
    `clean` (the clean checkout's), and collect must refuse to pool it with `other` (another
    seed's run of the clean code). The operator then removes the module. Returns what was
    wrong, or None."""
    stray = checkout / "algorithms" / "zz_local.py"
    stray.write_text(STRAY)
    code = bench(args, root, cwd=checkout).wait()
    stray.unlink()
    d = run_dir(root)
    if code != 0 or d is None:
        return f"the run with a stray module exited {code}"
    s = io.read_json_object(d / SUMMARY)
    wrong = []
    if not str(s.get("git_commit")).endswith("-dirty"):
        wrong.append(f"recorded commit {s.get('git_commit')!r}, not -dirty")
    if s.get("code_fingerprint") in (None, clean):
        wrong.append("recorded the clean checkout's code fingerprint")
    pool = root.parent / f"{root.name}-pool"
    pool.mkdir()
    (pool / "this").symlink_to(root.resolve(), target_is_directory=True)
    (pool / "other").symlink_to(other.resolve(), target_is_directory=True)
    r = analysis("collect", pool, "--out", root / "results.parquet")
    if r.returncode != 1 or "code versions" not in r.stderr:
        wrong.append(f"collect of the two seeds exited {r.returncode} without naming their two code versions")
    return "; ".join(wrong) or None


def duplicate_rows_trial(root: Path, other: Path) -> str | None:
    """This run's rows repeated in its collected table with error 0: plot must refuse the
    table and `collect --merge-into` leave it as it is (exit 1 each, naming the repeated
    rows). Returns what was wrong, or None."""
    table = root / "results.parquet"
    if (r := analysis("collect", root, "--out", table)).returncode != 0:
        return f"collect exited {r.returncode}: {r.stderr.strip()[-200:]}"
    df = pd.read_parquet(table)
    pd.concat([df, df.assign(error=0.0)], ignore_index=True).to_parquet(table, index=False)
    before = table.read_bytes()
    wrong = []
    r = analysis("plot", "--results", table, "--out", root / "plots")
    if r.returncode != 1 or "rows repeat" not in r.stderr:
        wrong.append(f"plot of a table with repeated rows exited {r.returncode}: {r.stderr.strip()[-200:]!r}")
    r = analysis("collect", other, "--merge-into", table)
    if r.returncode != 1 or "rows repeat" not in r.stderr or table.read_bytes() != before:
        wrong.append(f"collect --merge-into a table with repeated rows exited {r.returncode}"
                     f"{'' if table.read_bytes() == before else ', the table rewritten'}")
    table.unlink()
    return "; ".join(wrong) or None


def _study(*argv: str) -> tuple[int, str]:
    """The study queue's command in this process: (exit status, what it printed)."""
    import contextlib
    import io as text_io

    from tpo_bench.tools import study

    said = text_io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        code = study.main(list(argv))
    return code, said.getvalue()


def failed_commit_trial(args: list[str], root: Path) -> str | None:
    """This run trained by the study queue with `--commit` (in a git repository at root)
    while a stale `index.lock` stands: the queue must exit 1 and `status` say that the run
    is not committed. The operator removes the lock; the same command must then commit it
    (exit 0, status silent). Returns what was wrong, or None."""
    import torch
    import yaml

    from tpo_bench.tools import study

    root.mkdir(parents=True)
    for cmd in (["init", "-q"], ["config", "user.email", "faults@localhost"], ["config", "user.name", "faults"],
                ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(["git", "-C", str(root), *cmd], check=True, capture_output=True)
    seed = int(next(a for a in args if a.startswith("seed=")).split("=", 1)[1])
    rest = [a for a in args if not a.startswith("seed=")] + COMMON[:2]  # the shapes; the queue sets the rest
    queue = root / ".git" / "faults-queue.yaml"
    queue.write_text(yaml.safe_dump({"stages": [{"name": "faults", "why": "a failed commit", "sweeps": [
        {"root": ".", "seeds": [seed, seed + 1], "cost_s": 1, "args": " ".join(rest)}]}]}))
    lock = root / ".git" / "index.lock"
    lock.write_text("")
    argv = ["--queue", str(queue), "--repo", str(root)]
    # The queue's runs with this code and the references' CPU kernels; a stale lock, no pause.
    env = {"PYTHONPATH": str(REPO), "ATEN_CPU_CAPABILITY": torch.backends.cpu.get_cpu_capability().lower()}
    old_env, pause = {k: os.environ.get(k) for k in env}, study.COMMIT_PAUSE_S
    os.environ.update(env)
    study.COMMIT_PAUSE_S = 0.0
    wrong = []
    try:
        code, said = _study("run", *argv, "--commit", "--any-code", "--jobs", "1")
        if code != 1 or "1 failed" not in said:
            wrong.append(f"the queue exited {code} with its commit failed: {said.strip()[-200:]!r}")
        if "(1 not committed)" not in _study("status", *argv)[1]:
            wrong.append("status did not say the run is not committed")
        lock.unlink()
        code, said = _study("run", *argv, "--commit", "--any-code", "--jobs", "1")
        if code != 0 or "not committed" in _study("status", *argv)[1]:
            wrong.append(f"the same command again exited {code} and left the run uncommitted")
    finally:
        study.COMMIT_PAUSE_S = pause
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return "; ".join(wrong) or None


def analysis(script: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"tpo_bench.analysis.{script}", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO)


def stale_plot_trial(args: list[str], root: Path, ref_root: Path, reference: pd.DataFrame) -> str | None:
    """A table collected before the run finished (the reference's), the run completed
    in a folder under root that is a symlink, then plot: it must warn that the table misses one completed run; after
    collect again it must be silent and the table hold the run's rows. Returns what was
    wrong, or None."""
    table = root / "results.parquet"
    root.mkdir(parents=True)
    # The run's output_root a link to scratch space: collect and plot walk through it.
    scratch = root.parent / f"{root.name}-scratch"
    scratch.mkdir()
    (root / "sweep").symlink_to(scratch.resolve(), target_is_directory=True)
    wrong = []
    if (r := analysis("collect", ref_root, "--out", table)).returncode != 0:
        return f"collect of the reference exited {r.returncode}: {r.stderr.strip()[-200:]}"
    time.sleep(0.05)  # the run's finished_at strictly after the table's mtime
    bench(args, root / "sweep").wait()
    r = analysis("plot", "--results", table, "--out", root / "plots")
    if r.returncode != 0 or "warning: 1 completed run under" not in r.stderr:
        wrong.append(f"plot of a stale table: exit {r.returncode}, no warning of the run it misses "
                     f"({r.stderr.strip()[-200:]!r})")
    if (r := analysis("collect", root, "--out", table)).returncode != 0:
        wrong.append(f"collect exited {r.returncode}: {r.stderr.strip()[-200:]}")
    elif len(pd.read_parquet(table, columns=["step"])) != len(reference):
        wrong.append("the re-collected table does not hold the run's rows")
    r = analysis("plot", "--results", table, "--out", root / "plots")
    if r.returncode != 0 or "warning" in r.stderr:
        wrong.append(f"plot of a fresh table: exit {r.returncode}: {r.stderr.strip()[-200:]!r}")
    return "; ".join(wrong) or None


def after_fault(root: Path, expected: str, reference: pd.DataFrame) -> tuple[int, str | None]:
    """(rows mislabelled, problem) of the record as the fault left it."""
    d = run_dir(root)
    if d is None:
        return 0, None if expected == "running" else "no run directory"
    try:
        s = io.read_json_object(d / SUMMARY)
    except (OSError, io.DamagedFile) as e:
        return len(reference), f"summary unreadable after the fault: {e}"
    try:
        rows = len(pd.read_parquet(d / METRICS))
    except (OSError, ValueError):
        rows = 0
    temps = [p.name for p in d.glob(f".*{io.TEMP_SUFFIX}")]
    wrong = None
    if s.get("status") == "completed" and expected not in ("completed", "diverged"):
        expected = "completed"  # the run ended before the fault could reach it
    if s.get("status") != ("failed" if expected == "diverged" else expected):
        wrong = f"record says {s.get('status')!r} ({s.get('reason')}), expected {expected!r}"
    elif expected == "failed" and s.get("error_kind") != "io":
        wrong = f"failed without error_kind io: {s.get('reason')}"
    elif expected == "diverged" and (s.get("error_kind") != "diverged"
                                     or "non-finite error" not in str(s.get("reason"))):
        wrong = f"NaN error not recorded as diverged: {s.get('error_kind')}: {s.get('reason')}"
    elif expected == "completed" and (rows != len(reference) or s.get("attempts") != 1):
        wrong = f"completed with {rows} rows, attempts {s.get('attempts')}"
    elif temps and expected != "running":  # a killed writer's temp is expected; others not
        wrong = f"temp files left: {temps}"
    return (max(rows, 1) if wrong else 0), wrong


def finish(args: list[str], root: Path, done=lambda: True, plugin: Path | None = None) -> int:
    """The same command again until the run is completed (a run held by a process that
    is still going waits for it) and `done()`. Returns the attempts made."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        if status(root) == "completed" and done():
            return attempt - 1
        bench(args, root, plugin).wait()
    return MAX_ATTEMPTS


def compare(result: Path, reference: pd.DataFrame) -> tuple[int, int, str | None]:
    """(rows lost, rows mislabelled, problem) of one run directory against its reference:
    a row is lost when its step is missing, mislabelled when any value but wall time
    differs, it is marked partial, or the run is not recorded as completed."""
    d = run_dir(result)
    if d is None or status(result) != "completed":
        return len(reference), 0, f"not completed ({status(result)})"
    got = pd.read_parquet(d / METRICS).drop(columns=["wall_s"])
    leftovers = [p.name for p in d.iterdir() if p.name.endswith(io.TEMP_SUFFIX)
                 or p.name == CHECKPOINT]
    lost = len(set(reference["step"]) - set(got["step"]))
    merged = reference.merge(got, on="step", how="inner", suffixes=("", "_got"))
    bad = pd.Series(False, index=merged.index)
    for col in reference.columns.drop("step"):
        a, b = merged[col], merged[f"{col}_got"]
        bad |= ~((a == b) | (a.isna() & b.isna()))
    extra = len(got) - len(merged)
    mislabelled = int(bad.sum()) + extra + int(got["partial"].sum())
    problem = f"left behind: {leftovers}" if leftovers else None
    return lost, mislabelled, problem


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="the campaign's own random draws")
    ap.add_argument("--root", type=Path, default=Path("outputs/faults"))
    ap.add_argument("--minutes", type=float, default=0.0,
                    help="stop after the trial that passes this wall time (0: run every trial)")
    ap.add_argument("--only", default=None, metavar="KIND[,KIND]",
                    help=f"draw only these faults (of {', '.join(FAULTS)})")
    args = ap.parse_args(argv)
    kinds = FAULTS if args.only is None else tuple(args.only.split(","))
    if unknown := sorted(set(kinds) - set(FAULTS)):
        print(f"error: --only {','.join(unknown)}: unknown fault; valid: {', '.join(FAULTS)}",
              file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    shutil.rmtree(args.root, ignore_errors=True)
    args.root = args.root.absolute()
    teammate = make_teammate(args.root)
    watch = Watch(args.root)
    references: dict[tuple, pd.DataFrame] = {}
    where: dict[tuple, Path] = {}  # each reference's run directory, relative to its root

    def config_for(c, seed: int) -> list[str]:
        base = {"plugin": PLUGIN_CONFIG, "package": PACKAGE_CONFIG}.get(c) or CONFIGS[c]
        return [*base, f"seed={seed}", "debug.sleep=0.05"]

    def ref_root(key: tuple) -> Path:
        return args.root / "reference" / f"config{key[0]}-seed{key[1]}"  # no "=": Hydra parses it

    def reference(c, seed: int) -> tuple:
        key = (c, seed)
        if key not in references:
            plugin = None
            if c == "plugin":
                write_plugin(plugin := args.root / "reference" / "plugin")
            elif c == "package":
                write_package(plugin := args.root / "reference" / "package")
            bench(config_for(c, seed), ref_root(key), plugin).wait()
            references[key] = pd.read_parquet(run_dir(ref_root(key)) / METRICS).drop(columns=["wall_s"])
            where[key] = run_dir(ref_root(key)).relative_to(ref_root(key))
        return key

    injected, problems, touched_all = Counter(), [], []
    lost = mislabelled = compared = 0
    can_mount = True
    checkout: Path | None | bool = None  # the stray-module trials' copy of this checkout, made once
    t0 = time.time()
    for trial in range(args.trials):
        fault = rng.choice([f for f in kinds if (can_mount or f != "enospc")
                            and (checkout is not False or f != "stray_module")] or list(SIGNALS))
        # the stray module patches TPO: its trials train the TPO config
        c = {"code_edit": "plugin", "helper_edit": "package", "stray_module": 0}.get(fault)
        c = rng.randrange(len(CONFIGS)) if c is None else c
        seed = rng.randrange(3)
        config = config_for(c, seed)
        key = reference(c, seed)
        others = [reference(c, (seed + i) % 3) for i in (1, 2)] \
            if fault in ("planted_run", "concurrent_merge", "unreadable_run", "stray_module", "duplicate_rows") else []
        plugin = None
        root = args.root / "trials" / f"{trial:03d}-{fault}"
        watch.start(root)
        repair, done, problem_now, problem_after = config, (lambda: True), None, None
        runs = [root / where[key]]
        if fault in SIGNALS:
            expected = signal_trial(config, root, SIGNALS[fault], rng)
        elif fault == "duplicate":
            expected = duplicate_trial(config, root, rng)
        elif fault == "symlink_lock":
            watch.own(root / where[key] / LOCK)
            expected, problem_now = None, symlink_trial(config, root, where[key], watch)
        elif fault == "stale_plot":
            watch.own(root / "sweep")
            runs.append(root / "sweep" / where[key])
            expected, problem_now = None, stale_plot_trial(config, root, ref_root(key), references[key])
        elif fault == "nan_metric":
            episodes = int(next(a for a in config if a.startswith("task.episodes=")).split("=")[1])
            expected = "diverged"
            bench([*config, f"debug.nan_error_at={rng.randrange(episodes)}"], root).wait()
        elif fault in ("code_edit", "helper_edit"):
            plugin = root / "plugin"
            root = root / "out"
            runs = [root / where[key]]
            edit, problem_now = code_edit_trial(config, root, plugin, rng, helper=fault == "helper_edit")
            expected = None
            if edit == "statement":  # the remedy the refusal names
                first = fingerprint(root)
                repair = [*config, "on_code_change=rerun"]
                done = lambda: fingerprint(root) != first  # noqa: E731
        elif fault == "planted_links":
            _, expected, problem_now = planted_links_trial(config, root, where[key], teammate, watch, rng)
        elif fault == "planted_run":
            kind, problem_now = planted_run_trial(config, root, where[key], ref_root(key) / where[key],
                                                  ref_root(others[0]) / where[others[0]], watch, rng)
            expected = "completed" if kind == "other names" else None
            if kind == "other names":
                problem_after = lambda: planted_run_collect(root, references[key])  # noqa: E731
        elif fault == "concurrent_merge":
            expected = "completed"
            bench(config, root).wait()
            problem_after = lambda: concurrent_merge_trial(  # noqa: E731
                root, ref_root(others[0]), ref_root(others[1]), 3 * len(references[key]))
        elif fault == "unreadable_run":
            expected = "completed"
            bench(config, root).wait()
            watch.own(root / where[others[0]])
            problem_after = lambda: unreadable_trial(  # noqa: E731
                root, where[key], where[others[0]], ref_root(others[0]) / where[others[0]],
                len(references[key]), rng)
        elif fault == "stray_module":
            if checkout is None:
                checkout = make_checkout(args.root / "checkout") or False
            if checkout is False:
                print("[faults] this code is not in a git checkout: stray-module trials left out")
                fault = rng.choice(list(SIGNALS))
                expected = signal_trial(config, root, SIGNALS[fault], rng)
            else:
                watch.own(checkout)
                watch.own(root.parent / f"{root.name}-pool")
                other = ref_root(others[0])
                expected, problem_now = None, stray_module_trial(
                    config, root, checkout, other, fingerprint(other))
                repair = [*config, "on_code_change=rerun"]  # the remedy the fingerprint calls for
                done = lambda: fingerprint(root) == fingerprint(other)  # noqa: E731
        elif fault == "duplicate_rows":
            expected = "completed"
            bench(config, root).wait()
            problem_after = lambda: duplicate_rows_trial(root, ref_root(others[0]))  # noqa: E731
        elif fault == "failed_commit":
            watch.own(root / ".git")
            expected, problem_now = "completed", failed_commit_trial(config, root)
        elif (expected := enospc_trial(config, root)) is None:
            can_mount = False
            print("[faults] cannot mount a tmpfs here (needs root): ENOSPC trials left out")
            fault = rng.choice(list(SIGNALS))
            expected = signal_trial(config, root, SIGNALS[fault], rng)
        injected[fault] += 1
        bad_record, record_problem = (0, None) if expected is None else \
            after_fault(root, expected, references[key])
        if problem_now:
            bad_record, record_problem = len(references[key]), problem_now
        if fault == "enospc":  # the operator frees space; the same command repairs the run
            subprocess.run(["mount", "-o", "remount,size=64m", str(root)], check=True)
        attempts = finish(repair, root, done, plugin)
        rows_lost, rows_bad, problem = compare(root, references[key])
        if problem_after is not None:
            later = problem_after()
            if isinstance(later, tuple):
                rows_lost, later = rows_lost + later[0], later[1]
            elif later:
                rows_bad += len(references[key])
            problem = "; ".join(p for p in (problem, later) if p) or None
        rows_bad += bad_record
        if fault == "enospc":
            subprocess.run(["umount", "-l", str(root)], check=False)
        for r in runs:
            watch.run(r)
        touched = watch.touched()
        touched_all += touched
        problem = "; ".join(p for p in (record_problem, problem, touched and
                                        f"files outside the run touched: {touched}") if p) or None
        compared += 1
        lost += rows_lost
        mislabelled += rows_bad
        if rows_lost or rows_bad or problem:
            problems.append(f"trial {trial} ({fault}, {' '.join(config)}): lost {rows_lost}, "
                            f"mislabelled {rows_bad}{'; ' + problem if problem else ''}")
        print(f"[faults] trial {trial + 1}/{args.trials}: {fault}, {attempts} more attempt(s), "
              f"lost {rows_lost}, mislabelled {rows_bad}, touched {len(touched)}", flush=True)
        if args.minutes and time.time() - t0 > 60 * args.minutes:
            print(f"[faults] stopped after {trial + 1} of {args.trials} trials (--minutes {args.minutes:g})")
            break
    print(f"\n| trials | faults injected | runs compared | rows lost | rows mislabelled | "
          f"files outside a run touched | other problems | wall |\n"
          f"|---|---|---|---|---|---|---|---|\n"
          f"| {compared} | {', '.join(f'{k} {v}' for k, v in sorted(injected.items()))} | "
          f"{compared} | {lost} | {mislabelled} | {len(touched_all)} | {len(problems)} | "
          f"{(time.time() - t0) / 60:.1f} min |")
    for p in problems:
        print(f"  {p}")
    return 1 if lost or mislabelled or touched_all or problems else 0


if __name__ == "__main__":
    sys.exit(main())
