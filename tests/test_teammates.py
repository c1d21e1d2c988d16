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
    from dev.bench_collect import demo_config, write_run

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


def test_a_table_outside_the_output_root_warns_of_a_run_it_misses_whatever_the_clocks(tmp_path, capsys):
    """The table kept in a home folder, the runs on scratch, the new run's node clock far
    behind the table's (its record says it finished at 1 s after the epoch)."""
    from tpo_bench.analysis import collect
    from dev.bench_collect import demo_config, write_run

    root, table = tmp_path / "scratch" / "out", tmp_path / "home" / "results.parquet"
    write_run(root, demo_config(3, 1e-3), 0, np.linspace(0.9, 0.1, 3))
    table.parent.mkdir()
    assert collect.main([str(root), "--out", str(table)]) == 0
    capsys.readouterr()
    assert collect.warn_if_stale(table) == 0
    write_run(root, demo_config(3, 1e-3), 1, np.linspace(0.9, 0.1, 3))
    assert collect.warn_if_stale(table) == 1
    err = capsys.readouterr().err
    assert f"1 completed run under {root.resolve()}" in err and f"collect.py {root.resolve()}" in err, err
    assert collect.warn_if_stale(table, added=[root]) == 0  # read from their folder: not left out
    assert collect.warn_if_stale(table, added=[tmp_path / "elsewhere"]) == 1
    assert collect.main([str(root), "--merge-into", str(table)]) == 0
    assert collect.warn_if_stale(table) == 0


def test_plot_says_which_seeds_diverged_beside_a_one_seed_line(tmp_path, capsys):
    from tpo_bench.analysis import collect, plot
    from dev.bench_collect import demo_config, write_run

    root, table = tmp_path / "out", tmp_path / "out" / "results.parquet"
    write_run(root, demo_config(3, 1e-3), 0, np.linspace(0.9, 0.1, 3))
    for seed in (1, 2):
        write_run(root, demo_config(3, 1e-3), seed, np.linspace(0.9, 0.1, 3), status="failed",
                  error_kind="diverged", reason="non-finite error nan at step 1")
    assert collect.main([str(root), "--out", str(table)]) == 0
    capsys.readouterr()
    assert plot.main(["--results", str(table), "--out", str(tmp_path / "plots")]) == 0
    text = capsys.readouterr()
    assert "2 seeds diverged (1, 2) and are not in the table: its line is the 1 that completed" \
        in text.err, text.err
    assert "n=1, 2 diverged" in text.out, text.out


def test_a_heartbeat_from_a_clock_ahead_is_not_a_live_run_forever(tmp_path):
    import time

    from tpo_bench.analysis import collect
    from dev.bench_collect import demo_config, write_run

    d = write_run(tmp_path, demo_config(3, 1e-3), 0, np.linspace(0.9, 0.1, 3), status="running",
                  heartbeat=time.time() + 86_400, finished_at=None)
    run = collect.find_runs(tmp_path)[0]
    assert run.path == d and run.status == "incomplete", run
    assert "heartbeat 86400 s in the future" in run.reason or "heartbeat 86399 s in the future" in run.reason, run.reason
