import numpy as np
import pandas as pd
import pytest

from analysis import experiments, figures, plot, stats
from synthetic import results_table


@pytest.fixture(scope="module")
def table():
    return results_table()


@pytest.mark.parametrize("name", list(figures.FIGURES))
def test_every_figure_renders(name, table, tmp_path):
    paths = figures.draw(name, table, tmp_path, dpi=60)
    assert sorted(p.name for p in paths) == [f"{name}.pdf", f"{name}.png"]
    for p in paths:
        assert p.read_bytes()[:4] == (b"\x89PNG" if p.suffix == ".png" else b"%PDF")
        assert p.stat().st_size > 5000


def test_layouts_scales_and_colours(table):
    axes = {}
    for name in ("vocab_sweep", "task_variants", "terminal_h_sweep", "hero", "diagnostics", "k_sweep"):
        fig = figures.render(name, table)
        axes[name] = fig.axes
        plot.plt.close(fig)
    vocab = axes["vocab_sweep"]
    assert [a.get_title() for a in vocab] == ["V = 2", "V = 4", "V = 8", "V = 16"]
    assert all(a.get_yscale() == "linear" for a in vocab)
    variants = axes["task_variants"]
    assert len(variants) == 8 and all(a.get_yscale() == "log" for a in variants)
    assert variants[2].get_title() == "bag rev-copy"
    # The shared configuration (vocab_sweep's V = 2 runs) fills the bag rev-copy panel.
    assert len(variants[2].get_lines()) >= 4
    terminal = axes["terminal_h_sweep"]
    assert [a.get_title() for a in terminal][::4] == ["prompt-matched, H = 7", "interaction-matched, H = 7"]
    assert all(a.get_yscale() == "linear" for a in terminal)

    # One colour per algorithm in every figure, named in the legend.
    for ax in vocab + terminal:
        for line in ax.get_lines():
            algo = line.get_label().split(" ")[0]
            if algo in plot.COLORS:
                assert line.get_color() == plot.COLORS[algo]
        assert ax.get_legend() is not None

    hero = axes["hero"]
    assert hero[0].get_yscale() == "log" and hero[1].get_yscale() == "linear"
    # The terminal panel is the 40-episode trailing moving average of the seed mean.
    tpo = next(l for l in hero[1].get_lines() if l.get_label().startswith("tpo "))
    rows = table[(table["algo.name"] == "tpo") & (table["task.sequence_length"] == 10)
                 & (table["match"] == "prompts") & (table["task.reward"] == "terminal")]
    expected = stats.mean_se(stats.moving_average(stats.seed_curves(rows), 40))[0]
    assert np.allclose(tpo.get_ydata(), expected.values)
    assert not any("tpo_no_anchor" in l.get_label() for l in hero[1].get_lines())

    diag = axes["diagnostics"]
    labels = [l.get_label() for l in diag[3].get_lines()]
    assert any(l.endswith("q_success") for l in labels) and any(l.endswith("q_fail") for l in labels)

    k = axes["k_sweep"][0]
    xs = sorted(k.get_lines()[0].get_xdata())
    assert xs == [4, 8, 16, 32, 64] and k.get_xscale() == "log"
    assert sorted(t.get_text() for t in k.get_legend().get_texts()) == ["grpo", "tpo"]


def test_missing_panel_says_no_data(table):
    only_d0 = table[~((table["task.name"] == "mnist_stale") & (table["task.delay"] == 1000))]
    fig = figures.render("mnist_stale", only_d0)
    assert [t.get_text() for t in fig.axes[3].texts] == ["no data"]
    assert fig.axes[0].get_lines()
    plot.plt.close(fig)
    with pytest.raises(figures.NoData, match="no results for figure 'mnist'"):
        figures.render("mnist", only_d0[only_d0["task.name"] != "mnist"])


def test_select_shared_runs_and_fallback(table):
    abl = experiments.select(table, "ablations")
    algos = set(abl["algo.name"])
    # TPO/GRPO/GRPO-no-KL were run (and labelled) by terminal_h_sweep: still the ablations'.
    assert algos == {"tpo", "tpo_no_anchor", "group_pg", "grpo", "grpo_no_kl"}
    assert set(abl["task.sequence_length"]) == {7, 8, 10} and set(abl["match"]) == {"prompts"}

    # The DG epoch study's H is not pinned: only the H its own runs used is admitted.
    dg = experiments.select(table, "dg_epochs")
    term = dg[dg["task.reward"] == "terminal"]
    assert set(term["task.sequence_length"]) == {10} and set(term["match"]) == {"prompts"}
    assert set(term["algo.epochs"]) == {1, 4}
    # The dense half comes from its own preset (dg_epochs_dense): 8 variants x 1 and 4 epochs.
    dense = dg[dg["task.reward"] != "terminal"]
    assert dense.groupby(["task.reward", "task.target"])["algo.epochs"].unique().map(set).eq({1, 4}).sum() == 8
    # Before the study's own runs exist it borrows any H, but only prompt-matched DG.
    borrowed = experiments.select(table[table["experiment"] != "dg_epochs"], "dg_epochs")
    term = borrowed[borrowed["task.reward"] == "terminal"]
    assert set(term["task.sequence_length"]) == {7, 8, 9, 10} and set(term["match"]) == {"prompts"}

    # Held defaults: the eta sweep's TPO_token runs do not leak into the vocabulary sweep.
    vocab = experiments.select(table, "vocab_sweep")
    assert set(vocab.loc[vocab["algo.name"] == "tpo_token", "algo.eta"]) == {1.0}
    assert set(experiments.select(table, "eta_sweep")["algo.eta"]) == {0.25, 0.5, 1.0, 2.0, 4.0}
    # ...and the sweep holds both readings of the paper's "TPO" (token-level and sequence-level)
    assert set(experiments.select(table, "eta_sweep")["algo.name"]) == {"tpo_token", "tpo"}

    # Without the experiment column, the filters alone.
    bare = table.drop(columns=["experiment"])
    assert set(experiments.select(bare, "ablations")["algo.name"]) == algos
    assert experiments.select(bare, "mnist_stale")["task.name"].eq("mnist_stale").all()


def test_pick_config_prefers_more_seeds_then_longer():
    rows = pd.DataFrame({"config_hash": ["a"] * 2 + ["b"] * 3 + ["c"] * 3,
                         "seed": [0, 0, 0, 1, 2, 0, 1, 2], "step": [0, 1, 0, 0, 0, 0, 0, 0]})
    assert set(experiments.pick_config(rows)["config_hash"]) == {"b"}


def test_plot_cli(table, tmp_path, capsys):
    res = tmp_path / "results.parquet"
    table[table["experiment"] == "ablations"].to_parquet(res)
    assert plot.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in figures.FIGURES)

    out = tmp_path / "figs"
    assert plot.main(["--figure", "ablations", "--results", str(res), "--out", str(out)]) == 0
    assert (out / "ablations.png").is_file() and (out / "ablations.pdf").is_file()
    # Missing data: a clear message and a non-zero exit, not a traceback.
    assert plot.main(["--figure", "mnist", "--results", str(res), "--out", str(out)]) == 1
    assert "no results for figure 'mnist'" in capsys.readouterr().err
    assert plot.main(["--figure", "bogus", "--results", str(res)]) == 2
    assert "unknown figure" in capsys.readouterr().err
    assert not (out / "mnist.png").exists()


def test_redrawn_figures_are_byte_identical(table, tmp_path, monkeypatch):
    """A regenerated report must change only where the data did: no timestamps in files.
    (Two draws a day apart, as matplotlib's clock sees it.)"""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    a = figures.draw("mnist", table, tmp_path / "a")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "86400")
    b = figures.draw("mnist", table, tmp_path / "b")
    for x, y in zip(a, b):
        assert x.read_bytes() == y.read_bytes(), x.name


def test_per_seed_distributions_beside_the_papers(tmp_path):
    # 1.0 % sits on the threshold: a seed there has not solved the task
    ours, paper = (0.0, 1.0, 90.0), (0.0, 0.125, 0.5, 14.375, 76.75)
    groups = [figures.SeedGroup("tpo", ours, paper), figures.SeedGroup("grpo", (100.0,) * 3, paper)]
    fig = figures.render_seed_distributions(groups, "per seed")
    tpo, grpo = fig.axes
    assert tpo.get_xscale() == "symlog"
    labels = [t.get_text() for t in tpo.get_legend().get_texts()]
    assert labels == ["tpo ours: 1/3 seeds < 1 %", "tpo paper: 3/5 seeds < 1 %"]
    steps = [l for l in tpo.get_lines() if l.get_label() in labels]
    # each curve is the empirical CDF: k/n at the k-th smallest seed
    assert list(steps[0].get_xdata())[1:-1] == sorted(ours)
    assert np.allclose(steps[0].get_ydata()[1:-1], [1 / 3, 2 / 3, 1])
    assert np.allclose(steps[1].get_ydata()[1:-1], [0.2, 0.4, 0.6, 0.8, 1.0])
    assert steps[0].get_linestyle() != steps[1].get_linestyle()
    assert all(l.get_color() == plot.COLORS["tpo"] for l in steps)
    assert all(l.get_color() == plot.COLORS["grpo"] for l in grpo.get_lines()[:2])
    assert tpo.get_title() == f"tpo: rank-sum p = {stats.rank_sum_test(ours, paper):.2g}"
    assert tpo.get_title() != grpo.get_title()
    plot.plt.close(fig)
    paths = figures.draw_seed_distributions(groups, "per seed", tmp_path, dpi=60)
    assert [p.name for p in paths] == ["terminal_seeds.png", "terminal_seeds.pdf"]
    assert all(p.stat().st_size > 5000 for p in paths)
    with pytest.raises(figures.NoData):
        figures.render_seed_distributions([], "per seed")
