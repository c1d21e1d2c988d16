"""An output root shared with other users: links and runs they planted, tables merged at
once, what the code fingerprint covers. What the harness does with each: refuse it, name
it, and touch nothing it did not create."""
import json
import os
from pathlib import Path

import pytest

from conftest import TINY, run_bench


# ------------------------------------------------------------------ Hydra's sweep files

def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "theirs" / "private.yaml"
    victim.parent.mkdir()
    victim.write_text("their own file\n")
    victim.chmod(0o600)
    return victim


def test_a_link_planted_at_the_next_sweeps_multirun_yaml_is_not_written_through(tmp_path):
    root, victim = tmp_path / "out", _victim(tmp_path)
    sweep = root / ".hydra" / "multirun" / "next"
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").symlink_to(victim)
    run_bench("-m", *TINY, "task.episodes=1", f"output_root={root}", "seed=1",
              f"hydra.sweep.dir={sweep}")
    assert victim.read_text() == "their own file\n"
    written = sweep / "multirun.yaml"
    assert not written.is_symlink() and "output_root" in written.read_text()


def test_a_linked_folder_on_the_way_to_the_sweep_dir_is_refused(tmp_path):
    root, victim = tmp_path / "out", _victim(tmp_path)
    (root / ".hydra").mkdir(parents=True)
    (root / ".hydra" / "multirun").symlink_to(victim.parent, target_is_directory=True)
    proc = run_bench("-m", *TINY, "task.episodes=1", f"output_root={root}", "seed=1",
                     f"hydra.sweep.dir={root}/.hydra/multirun/next", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "hydra.sweep.dir" in proc.stderr and "multirun is a symbolic link" in proc.stderr
    assert sorted(p.name for p in victim.parent.iterdir()) == ["private.yaml"]
    assert not list(root.rglob("seed=*"))  # refused before any run started
