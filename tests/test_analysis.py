import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tpo_bench.analysis import collect, plot, style
from tpo_bench.analysis.labels import legend_labels
from tpo_bench.contract.identity import config_hash
from dev.bench_collect import demo_config, write_run

REPO = Path(__file__).resolve().parents[1]


# The tree's configurations, by a letter: the demo task under TPO, each at its own
# learning rate (D: each seed ends otherwise; E: each file is damaged).
CONFIGS = {"A": demo_config(3, 1e-3), "B": demo_config(3, 1e-2), "C": demo_config(4, 2e-3),
           "D": demo_config(3, 3e-3), "E": demo_config(3, 4e-3)}
H = {name: config_hash(config) for name, config in CONFIGS.items()}


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "outputs"
    A, B, C, D, E = CONFIGS.values()
    write_run(root, A, 0, [0.5, 0.1, 0.0])
    write_run(root, A, 1, [0.6, 0.2, 0.05])
    write_run(root, B, 0, [0.9, 0.8, 0.7])
    write_run(root, C, 0, [0.7, 0.6, 0.5, 0.4])
    write_run(root, D, 0, [0.1] * 3, status="failed", reason="loss is nan")
    write_run(root, D, 1, [0.1] * 3, status="running", heartbeat=time.time())
    write_run(root, D, 2, [0.1] * 3, status=None)
    bad = write_run(root, E, 0, [0.1] * 3)
    (bad / "metrics.parquet").write_bytes(b"\x00garbage, not parquet\xff" * 10)
    cut = write_run(root, E, 1, [0.1] * 50)
    data = (cut / "metrics.parquet").read_bytes()
    (cut / "metrics.parquet").write_bytes(data[: len(data) // 2])
    # Parquet files that are not a seed dir's metrics.parquet must be ignored.
    pd.DataFrame({"step": [0], "error": [1.0]}).to_parquet(root / "results.parquet")
    pd.DataFrame({"step": [0], "error": [1.0]}).to_parquet(root / "demo" / "metrics.parquet")
    pd.DataFrame({"step": [0], "error": [1.0]}).to_parquet(
        root / "demo" / "tpo" / H["A"] / "seed=0" / "ckpt.parquet")
    return root


def reasons(skipped):
    return {"/".join(r.path.parts[-2:]): r.reason for r in skipped}


def test_collect_keeps_exactly_good_rows(tree):
    df, skipped = collect.collect(tree)
    assert len(df) == 3 + 3 + 3 + 4
    runs = set(zip(df["config_hash"], df["seed"]))
    assert runs == {(H["A"], 0), (H["A"], 1), (H["B"], 0), (H["C"], 0)}
    assert df.loc[df.config_hash == H["B"], "optim.lr"].eq(1e-2).all()

    r = reasons(skipped)
    assert len(r) == 5
    assert r[f"{H['D']}/seed=0"] == "failed: loss is nan"
    assert r[f"{H['D']}/seed=1"].startswith("incomplete (running, heartbeat")
    assert r[f"{H['D']}/seed=2"] == "incomplete (no summary.json)"
    assert r[f"{H['E']}/seed=0"].startswith("corrupt metrics.parquet: ")
    assert r[f"{H['E']}/seed=1"].startswith("corrupt metrics.parquet: ")


def test_find_runs_classifies_by_summary(tree):
    status = {"/".join(r.path.parts[-2:]): r.status for r in collect.find_runs(tree)}
    assert status[f"{H['A']}/seed=0"] == "completed"
    assert status[f"{H['D']}/seed=0"] == "failed"
    assert status[f"{H['D']}/seed=1"] == "running"
    assert status[f"{H['D']}/seed=2"] == "incomplete"
    assert len(status) == 9


@pytest.mark.slow
def test_cli_by_path(tree, tmp_path):
    out = tmp_path / "res" / "results.parquet"
    cmd = [sys.executable, "analysis/collect.py", str(tree), "--out", str(out)]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 1 and "--allow-skips" in p.stderr and not out.exists()
    p = subprocess.run([*cmd, "--allow-skips"], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "failed: loss is nan" in p.stdout
    assert "incomplete (running, heartbeat" in p.stdout
    assert p.stdout.index("failed (1):") < p.stdout.index("incomplete (")  # grouped
    assert "incomplete (no summary.json)" in p.stdout
    assert p.stdout.count("warning: skipped") == 2
    assert "collected 4 runs (13 rows), skipped 5" in p.stdout
    assert len(pd.read_parquet(out)) == 13
    assert list(out.parent.iterdir()) == [out]  # no temp file left behind

    # Writing into ROOT itself and collecting again must not pick up the previous output.
    inside = tree / "results.parquet"
    for _ in range(2):
        p = subprocess.run([sys.executable, "analysis/collect.py", str(tree), "--out", str(inside),
                            "--allow-skips"], cwd=REPO, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
    assert len(pd.read_parquet(inside)) == 13
    assert not list(tree.glob("*.tmp"))


def test_cli_errors(tmp_path, capsys):
    # exit codes: 2 nothing to collect (bad input), 1 runs there but none usable
    assert collect.main([str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert collect.main([str(tmp_path / "empty"), "--out", str(tmp_path / "e.parquet")]) == 2
    assert "no completed run found" in capsys.readouterr().err

    root = tmp_path / "outputs"
    write_run(root, demo_config(1), 0, [0.5], status="failed", reason="oom")
    out = tmp_path / "r.parquet"
    assert collect.main([str(root), "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert "no completed run" in captured.err
    assert "failed: oom" in captured.out
    assert not out.exists()


def test_write_atomic_keeps_old_file_on_failure(tmp_path):
    out = tmp_path / "results.parquet"
    collect.write_atomic(pd.DataFrame({"a": [1, 2]}), out)
    collect.write_atomic(pd.DataFrame({"a": [3]}), out)
    assert pd.read_parquet(out)["a"].tolist() == [3]

    unwritable = pd.DataFrame({"a": [object()]})  # pyarrow cannot serialise this
    with pytest.raises(Exception):
        collect.write_atomic(unwritable, out)
    assert pd.read_parquet(out)["a"].tolist() == [3]
    assert [p.name for p in tmp_path.iterdir()] == ["results.parquet"]


def frame(task, algo, chash, seed, errors, lr=1e-3, steps=None):
    n = len(errors)
    return pd.DataFrame({
        "step": list(steps if steps is not None else range(n)), "error": errors,
        "loss": np.arange(n, dtype=float), "config_hash": chash, "seed": seed,
        "task.name": task, "algo.name": algo, "optim.lr": lr, "match": "exact",
    })


@pytest.fixture
def results():
    return pd.concat([
        frame("copy", "tpo", "A", 0, [0.5, 0.1, 0.0, 0.0]),
        # Seed 1 logged one extra step: the final value must come from the last common step.
        frame("copy", "tpo", "A", 1, [0.5, 0.3, 0.04, 0.01, 0.5]),
        frame("copy", "tpo", "B", 0, [0.9, 0.8, 0.7, 0.6], lr=1e-2),
        frame("copy", "grpo", "C", 0, [0.9, 0.5, 0.2, 0.0]),  # mean - SE hits 0 at the end
        frame("reverse_h8", "tpo", "D", 0, [0.4, 0.3]),
    ], ignore_index=True)


def test_steps_to_threshold():
    assert plot.steps_to_threshold([0, 10, 20], [0.5, 0.005, 0.001], 0.01) == 10
    assert plot.steps_to_threshold([0, 10], [0.5, 0.01], 0.01) is None  # strictly below
    assert plot.steps_to_threshold([], [], 0.01) is None


def test_summarise_hand_computed(results):
    s = plot.summarise(results).set_index("config_hash")
    a = s.loc["A"]
    assert a.n_seeds == 2 and a.final_step == 3
    assert a.final_error_mean == pytest.approx(0.005)
    assert a.final_error_se == pytest.approx(0.005 / np.sqrt(2))  # std ddof=0 of [0, .01]
    assert a.steps_to_1pct == 3  # means: .5, .2, .02, .005
    assert a.seeds_below_1pct == 1  # seed 1 bottoms out at exactly 0.01

    # Same algorithm, different hash: its own line, never pooled with A.
    b = s.loc["B"]
    assert b.n_seeds == 1 and b.final_error_mean == pytest.approx(0.6) and b.final_error_se == 0
    assert pd.isna(b.steps_to_1pct) and b.seeds_below_1pct == 0
    assert len(s) == 4

    text = plot.format_summary(plot.summarise(results))
    assert "== copy" in text and "== reverse_h8" in text
    line_b = next(l for l in text.splitlines() if "optim.lr=0.01" in l)
    assert "—" in line_b and "0/1 seeds" in line_b
    line_a = next(l for l in text.splitlines() if l.startswith("tpo (optim.lr=0.001"))
    assert "1/2 seeds" in line_a and "0.50 ± 0.35 %" in line_a  # percent


def test_legend_labels(results):
    labels = legend_labels(results)
    assert labels[("copy", "tpo", "A")] == "tpo (optim.lr=0.001, n=2)"
    assert labels[("copy", "tpo", "B")] == "tpo (optim.lr=0.01, n=1)"
    assert labels[("reverse_h8", "tpo", "D")] == "tpo (n=1)"  # alone in its figure: nothing differs
    # Identical visible config but different hashes still get distinct labels.
    twin = pd.concat([results, frame("copy", "tpo", "E", 0, [0.3] * 4)], ignore_index=True)
    labels = legend_labels(twin)
    assert labels[("copy", "tpo", "A")] != labels[("copy", "tpo", "E")]


@pytest.mark.slow  # takes seconds in process
def test_plot_files_legend_and_scales(results, tmp_path, monkeypatch):
    figs = []
    monkeypatch.setattr(plot.plt, "close", figs.append)
    paths = plot.plot_results(results, tmp_path / "plots")
    assert sorted(p.name for p in paths) == ["copy.pdf", "copy.png", "reverse_h8.pdf", "reverse_h8.png"]
    for p in paths:
        head = p.read_bytes()[:8]
        assert head.startswith(b"\x89PNG" if p.suffix == ".png" else b"%PDF")
        assert p.stat().st_size > 1000

    axes = {f.get_suptitle().split(",")[0]: f.axes[0] for f in figs}  # the task's name first
    copy_ax = axes["copy"]
    texts = [t.get_text() for t in copy_ax.get_legend().get_texts()]
    assert len(texts) == 3  # A and B not pooled, plus grpo
    assert "TPO (optim.lr=0.001, n=2)" in texts and any(t.startswith("GRPO") for t in texts)
    assert copy_ax.get_yscale() == "log" and axes["reverse_h8"].get_yscale() == "linear"

    # Colour is fixed per algorithm; the band never reaches zero on a log axis.
    colors = {l.get_label(): l.get_color() for l in copy_ax.get_lines()}
    assert colors["TPO (optim.lr=0.001, n=2)"] == style.COLORS["tpo"]
    for band in copy_ax.collections:
        assert min(p.vertices[:, 1].min() for p in band.get_paths()) >= style.LOG_FLOOR

    figs.clear()
    plot.plot_results(results, tmp_path / "lin", yscale="linear")
    assert all(f.axes[0].get_yscale() == "linear" for f in figs)


def test_color_fallback_is_deterministic():
    assert style.color_for("mystery") == style.color_for("mystery")
    assert style.color_for("mystery") in style.FALLBACK
    assert style.color_for("grpo") != style.color_for("tpo")


@pytest.mark.slow  # takes seconds in process
def test_plot_cli_errors(tmp_path, capsys, results):
    # bad input (a missing, column-less or empty table) exits 2 and draws nothing
    assert plot.main(["--results", str(tmp_path / "missing.parquet")]) == 2
    assert "not found" in capsys.readouterr().err
    bad = tmp_path / "bad.parquet"
    results.drop(columns=["config_hash"]).to_parquet(bad)
    assert plot.main(["--results", str(bad), "--out", str(tmp_path / "p")]) == 2
    assert "config_hash" in capsys.readouterr().err
    empty = tmp_path / "empty.parquet"
    results.iloc[:0].to_parquet(empty)
    assert plot.main(["--results", str(empty), "--out", str(tmp_path / "p")]) == 2
    assert "has no rows" in capsys.readouterr().err and not (tmp_path / "p").exists()

    good = tmp_path / "good.parquet"
    results.to_parquet(good)
    assert plot.main(["--results", str(good), "--out", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "== copy" in out and "copy.png" in out


def test_legend_names_algo_knobs_only_within_an_algorithm():
    df = pd.concat([
        frame("t", "tpo", "A", 0, [0.5, 0.1]).assign(**{"algo.k": 8, "algo.impl": "tpo"}),
        frame("t", "tpo", "B", 0, [0.5, 0.2]).assign(**{"algo.k": 4, "algo.impl": "tpo"}),
        frame("t", "dg", "C", 0, [0.5, 0.3]).assign(**{"algo.k": 1, "algo.impl": "dg"}),
    ], ignore_index=True)
    labels = legend_labels(df)
    assert labels[("t", "tpo", "A")] == "tpo (algo.k=8, n=1)"
    assert labels[("t", "tpo", "B")] == "tpo (algo.k=4, n=1)"
    assert labels[("t", "dg", "C")] == "dg (algo.k=1, n=1)"
    only_across = df[df["config_hash"] != "B"]
    assert legend_labels(only_across)[("t", "dg", "C")] == "dg (n=1)"
    # interaction matching scales only the single-sample method: no label for that alone
    matched = only_across.assign(match="prompts", batch_size_effective=100)
    matched.loc[matched["algo.name"] == "dg", ["match", "batch_size_effective"]] = ["interactions", 800]
    assert legend_labels(matched)[("t", "dg", "C")] == "dg (n=1)"


def test_stale_heartbeat_is_reported_as_killed(tmp_path):
    write_run(tmp_path, demo_config(1), 0, [0.5], status="running", heartbeat=time.time() - 3600)
    write_run(tmp_path, demo_config(1), 1, [0.5], status="running", heartbeat=time.time() - 5)
    write_run(tmp_path, demo_config(1), 2, [0.5], status="interrupted", reason="KeyboardInterrupt")
    runs = {r.path.name: r for r in collect.find_runs(tmp_path, stale_after=600)}
    assert runs["seed=0"].status == "incomplete" and "heartbeat stale" in runs["seed=0"].reason
    assert runs["seed=1"].status == "running"
    assert "interrupted: KeyboardInterrupt" in runs["seed=2"].reason
    assert collect.find_runs(tmp_path, stale_after=1)[1].status == "incomplete"


@pytest.mark.slow  # takes seconds in process
def test_a_task_with_a_held_out_error_gets_its_panel(results, tmp_path, monkeypatch):
    """Beside the training error, the held-out error (MNIST's test file, an LLM task's
    1 - pass@1) where the table has one: a second panel drawing test_error's seed means."""
    figs = []
    monkeypatch.setattr(plot.plt, "close", figs.append)
    held = results[results["task.name"] == "copy"].copy()
    held["test_error"] = np.where(held["step"] % 2 == 0, 1.0 - held["error"], np.nan)
    plot.plot_results(pd.concat([held, results[results["task.name"] != "copy"]]), tmp_path)
    by_task = {f.get_suptitle().split(",")[0]: f for f in figs}
    assert len(by_task["reverse_h8"].axes) == 1  # no held-out column: one panel
    train, test = by_task["copy"].axes[:2]
    assert test.get_ylabel() == "held-out error (%)" and train.get_ylabel() == "error (%)"
    line = next(l for l in test.get_lines() if l.get_color() == style.color_for("grpo"))
    steps, means = line.get_data()
    assert list(steps) == [0, 2] and list(means) == [1 - 0.9, 1 - 0.2]
    # one legend for both panels, naming every line once
    labels = [t.get_text() for t in by_task["copy"].legends[0].get_texts()]
    assert len(labels) == 3 and sum(l.startswith("GRPO") for l in labels) == 1
    # and the summary's held-out columns: grpo's held-out curve is 1 - 0.9 at step 0, 1 - 0.2 at 2
    row = plot.summarise(held).set_index("config_hash").loc["C"]
    assert (row.first_test_error, row.final_test_error_mean) == pytest.approx((0.1, 0.8))
    assert "10.00 -> 80.00" in plot.format_summary(plot.summarise(held))
