"""A file system shared with teammates, and a newcomer's first commands: a teammate's file
this user cannot read, a run's config checked against its path, a table outside the
output root, a whole sweep validated before it starts, what a plot says of diverged seeds."""
import errno
import pathlib

import numpy as np
import pandas as pd


def _collect(root, tmp_path, capsys, *flags):
    from tpo_bench.analysis import collect

    out = tmp_path / "results.parquet"
    capsys.readouterr()
    rc = collect.main([str(root), "--out", str(out), *flags])
    text = capsys.readouterr()
    return rc, text.out + text.err, (pd.read_parquet(out) if out.exists() else None)


def test_a_teammates_unreadable_summary_file_is_named_unreadable_not_damaged(tmp_path, capsys, monkeypatch):
    """A run folder others may list but whose summary.json is 0600 (a teammate's umask
    077 on files, or chmod): as root cannot be refused a file, the OS's answer is played
    by the read that meets it."""
    from tpo_bench.tools.bench_collect import demo_config, write_run

    root = tmp_path / "out"
    write_run(root, demo_config(3, 1e-3), 0, np.linspace(0.9, 0.1, 3))
    theirs = write_run(root, demo_config(3, 2e-3), 1, np.linspace(0.9, 0.1, 3))
    read_text = pathlib.Path.read_text

    def guarded(self, *a, **k):
        if self.parent == theirs:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return read_text(self, *a, **k)
    monkeypatch.setattr(pathlib.Path, "read_text", guarded)
    rc, text, table = _collect(root, tmp_path, capsys)
    assert rc == 0, text
    assert table["seed"].unique().tolist() == [0]
    [line] = [ln for ln in text.splitlines() if str(theirs.relative_to(root)) in ln and "skipped" in ln]
    assert "unreadable (Permission denied" in line and "damaged" not in line, line
