import re

import numpy as np
import pandas as pd
import pytest

from tpo_bench.analysis import configs, plot, stats, style
from tpo_bench.analysis.paper import experiments, figures, paper_figures
from synthetic import results_table


@pytest.fixture(scope="module")
def table():
    return results_table()


@pytest.mark.slow  # long in process
@pytest.mark.parametrize("name", list(figures.FIGURES))
def test_every_figure_renders(name, table, tmp_path):
    paths = figures.draw(name, table, tmp_path, dpi=60)
    assert sorted(p.name for p in paths) == [f"{name}.pdf", f"{name}.png"]
    for p in paths:
        assert p.read_bytes()[:4] == (b"\x89PNG" if p.suffix == ".png" else b"%PDF")
        assert p.stat().st_size > 2000  # a palette PNG: small, not empty


@pytest.mark.slow  # long in process
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
        curves = [l for l in ax.get_lines() if not l.get_label().endswith("threshold")]
        assert curves
        for line in curves:
            algo = line.get_label().split(" ")[0]
            assert line.get_color() == style.COLORS[algo]
    for fig_axes, algos in ((vocab, set(experiments.DENSE)), (terminal, set(experiments.TERMINAL))):
        [legend] = fig_axes[0].figure.legends  # one legend under all panels
        assert {t.get_text().split(" ")[0] for t in legend.get_texts()} == algos

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
    assert sorted(t.get_text() for t in k.figure.legends[0].get_texts()) == ["grpo", "tpo"]


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
    assert set(configs.pick_config(rows)["config_hash"]) == {"b"}


@pytest.mark.slow  # takes seconds in process
def test_plot_cli(table, tmp_path, capsys):
    res = tmp_path / "results.parquet"
    table[table["experiment"] == "ablations"].to_parquet(res)
    assert plot.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in [*paper_figures.PAPER, *plot.our_figures()])

    out = tmp_path / "figs"
    assert plot.main(["--figure", "ablations", "--results", str(res), "--out", str(out)]) == 0
    assert (out / "ablations.png").is_file() and (out / "ablations.pdf").is_file()
    # Missing data: a clear message and a non-zero exit, not a traceback (a paper figure
    # is drawn all the same, its panels saying what to run).
    assert plot.main(["--figure", "mnist_stale", "--results", str(res), "--out", str(out)]) == 1
    assert "no results for figure 'mnist_stale'" in capsys.readouterr().err
    assert plot.main(["--figure", "bogus", "--results", str(res)]) == 2
    assert "unknown figure" in capsys.readouterr().err
    assert not (out / "mnist_stale.png").exists()


@pytest.mark.slow  # long in process
def test_redrawn_figures_are_byte_identical(table, tmp_path, monkeypatch):
    """A regenerated report must change only where the data did: no timestamps in files.
    (Two draws a day apart, as matplotlib's clock sees it.)"""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    a = figures.draw("mnist", table, tmp_path / "a")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "86400")
    b = figures.draw("mnist", table, tmp_path / "b")
    for x, y in zip(a, b):
        assert x.read_bytes() == y.read_bytes(), x.name


@pytest.mark.slow  # long in process
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
    assert all(l.get_color() == style.COLORS["tpo"] for l in steps)
    assert all(l.get_color() == style.COLORS["grpo"] for l in grpo.get_lines()[:2])
    assert tpo.get_title() == f"tpo: rank-sum p = {stats.rank_sum_test(ours, paper):.2g}"
    assert tpo.get_title() != grpo.get_title()
    plot.plt.close(fig)
    paths = figures.draw_seed_distributions(groups, "per seed", tmp_path, dpi=60)
    assert [p.name for p in paths] == ["terminal_seeds.png", "terminal_seeds.pdf"]
    assert all(p.stat().st_size > 5000 for p in paths)
    with pytest.raises(figures.NoData):
        figures.render_seed_distributions([], "per seed")


# ---- what a reader needs on the figure ----

from synthetic import run, seq  # noqa: E402


@pytest.fixture(scope="module")
def rendered(table):
    """Paper figures rendered once for the checks below (rendering is the slow part); a
    check of the layout draws the figure itself (check_legends)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = figures.render(name, table)
        return cache[name]
    yield get
    for fig in cache.values():
        plot.plt.close(fig)


def title_of(fig) -> str:
    return fig.get_suptitle()


def legend_texts(fig) -> list[str]:
    legends = fig.legends or [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return [t.get_text() for leg in legends for t in leg.get_texts()]


def probe(algos, H=6, V=3, B=50, reward="bag_of_tokens", seeds=None, floor=0.0, **kw):
    """One task's table, one line per algorithm: {algo: K}; seeds: {algo: n} (default 3)."""
    task = seq(reward, H=H, V=V, B=B, name="probe")
    return pd.concat([run("probe", a, task, seeds=range((seeds or {}).get(a, 3)), floor=floor, k=k, **kw)
                      for a, k in algos.items()], ignore_index=True)


def test_task_figure_title_names_the_parameters_from_the_data():
    fig = plot.render_task("probe", probe({"tpo": 4, "grpo": 4}, H=6, V=3, B=50))
    title = title_of(fig)
    for want in ("bag-of-tokens reward", "H 6", "V 3", "B 50", "K 4"):
        assert re.search(rf"\b{want}\b", title), (want, title)
    plot.plt.close(fig)
    # other values, other title: read from the table, not written in the code
    fig = plot.render_task("probe", probe({"tpo": 8, "dg": 1}, H=13, V=7, B=21, reward="terminal"))
    title = title_of(fig)
    for want in ("terminal reward", "H 13", "V 7", "B 21", "K per line"):
        assert re.search(rf"\b{want}\b", title), (want, title)
    # K differs between the lines: each label names its own
    assert legend_texts(fig) == ["DG (K=1)", "TPO (K=8)"]
    plot.plt.close(fig)
    mnist = run("m", "tpo", {"impl": "mnist", "name": "mnist", "delay": 0, "batch_size": 100})
    fig = plot.render_task("mnist", mnist)
    assert title_of(fig).startswith("MNIST bandit") and "B 100" in title_of(fig)
    assert not re.search(r"\b[HV] \d", title_of(fig))  # no sequence parameters on MNIST
    plot.plt.close(fig)


@pytest.mark.slow  # long in process
def test_paper_figure_titles_name_the_parameters_from_the_data(table, rendered):
    # a panel's filter does not pin MNIST's batch size: what the title says is the table's
    mnist = table.assign(**{"task.batch_size": np.where(table["task.impl"] == "mnist", 37, table["task.batch_size"])})
    fig = figures.render("mnist", mnist)
    assert "B 37" in title_of(fig) and "MNIST bandit" in title_of(fig)
    plot.plt.close(fig)
    title = title_of(rendered("zero_variance_masking"))
    for want in ("terminal reward", "H 8", "V 2", "B 256", "K 32"):
        assert re.search(rf"\b{want}\b", title), (want, title)
    # what differs between panels is in the panel's title, what they share in the figure's
    hero = rendered("hero")
    assert "MNIST bandit" in hero.axes[0].get_title() and "V 2" in hero.axes[1].get_title()
    assert "K per line" in title_of(hero)
    assert "tpo (K=8)" in legend_texts(hero) and "dg (K=1)" in legend_texts(hero)
    variants = rendered("task_variants")
    assert "H 10" in title_of(variants) and "V 2" in title_of(variants)


def test_the_seed_count_is_on_the_figure():
    fig = plot.render_task("probe", probe({"tpo": 8, "grpo": 8}, seeds={"tpo": 5, "grpo": 5}))
    assert "mean ± 1 SE over 5 seeds" in title_of(fig)
    assert not any("n=" in t for t in legend_texts(fig))  # said once, not on every line
    plot.plt.close(fig)
    fig = plot.render_task("probe", probe({"tpo": 8, "dg": 1}, seeds={"tpo": 5, "dg": 2}))
    assert "mean ± 1 SE over n seeds (n per line)" in title_of(fig)
    assert legend_texts(fig) == ["DG (K=1, n=2)", "TPO (K=8, n=5)"]
    plot.plt.close(fig)


@pytest.mark.slow  # long in process
def test_paper_figures_say_the_seed_count(table, rendered):
    assert "mean ± 1 SE over 3 seeds" in title_of(rendered("vocab_sweep"))
    assert "mean ± 1 SE over 3 seeds" in title_of(rendered("k_sweep"))  # final-value panels too
    # one line with fewer seeds: every label says its own
    cut = table[~((table["experiment"] == "vocab_sweep") & (table["algo.name"] == "dg") & (table["seed"] == 2))]
    fig = figures.render("vocab_sweep", cut)
    assert "n per line" in title_of(fig)
    texts = legend_texts(fig)
    assert "dg (K=1, n=2)" in texts and "ppo (K=1, n=3)" in texts
    plot.plt.close(fig)


def threshold_lines(ax, thr):
    return [l for l in ax.get_lines() if list(l.get_ydata()) == [thr, thr] and l.get_linestyle() == ":"]


def test_task_figure_draws_the_threshold_it_reports():
    fig = plot.render_task("probe", probe({"tpo": 8, "grpo": 8}))  # reaches 1 %
    ax = fig.axes[0]
    [line] = threshold_lines(ax, 0.01)
    assert line.get_label() == "1 % threshold" and line.get_color() == "k"
    assert "1 %" in [t.get_text() for t in ax.texts]
    plot.plt.close(fig)
    # a y range that stops above 1 %: no line, and the range is not stretched to show one
    fig = plot.render_task("probe", probe({"tpo": 8}, floor=0.3))
    assert not threshold_lines(fig.axes[0], 0.01) and fig.axes[0].get_ylim()[0] > 0.1
    plot.plt.close(fig)


def steps_thresholds() -> dict:
    """experiment -> the thresholds of its steps-to-threshold numbers, from the paper's table."""
    paper = pd.read_csv(figures.Path(__file__).resolve().parents[1] / "analysis" / "paper" / "paper_numbers.csv",
                        dtype=str, keep_default_na=False)
    steps = paper[paper["metric"].str.startswith("steps_to_")]
    return {e: {float(m.removeprefix("steps_to_").removesuffix("pct")) / 100 for m in g["metric"]}
            for e, g in steps.groupby("experiment")}


@pytest.mark.slow  # takes seconds in process
@pytest.mark.parametrize("experiment", sorted(steps_thresholds()))
def test_paper_figures_draw_the_threshold_they_report(experiment, rendered):
    names = [n for n, f in figures.FIGURES.items() if (f.experiment or n) == experiment]
    assert names, f"no figure for {experiment}, which reports steps to a threshold"
    for thr in steps_thresholds()[experiment]:
        for name in names:
            spec, fig = figures.FIGURES[name], rendered(name)
            shown = 0
            for p, ax in zip(spec.panels, fig.axes):
                if p.kind == "steps":  # the panel's y is the steps: its threshold is this one
                    assert p.hline == thr and f"{thr * 100:g} %" in p.ylabel + p.title
                    shown += 1
                elif p.kind == "curve":
                    lo, hi = ax.get_ylim()
                    lines = threshold_lines(ax, thr)
                    assert len(lines) == (lo <= thr <= hi), (name, p.title)
                    assert f"{thr * 100:g} %" in [t.get_text() for t in ax.texts] or not lines
                    shown += len(lines)
            assert shown, f"{name}: steps to {thr:.0%} reported, the level drawn nowhere"


def check_legends(fig):
    """Legible at a paper column: >= 7 pt when one panel is printed 3.3 in wide; and outside
    every axes, inside the figure."""
    fig.canvas.draw()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert legends
    ncols = max(ax.get_subplotspec().get_gridspec().ncols for ax in fig.axes)
    panel_in = fig.get_size_inches()[0] / ncols
    for leg in legends:
        for text in leg.get_texts():
            assert text.get_fontsize() * 3.3 / panel_in >= 7, (text.get_text(), text.get_fontsize(), panel_in)
        box = leg.get_window_extent()
        assert fig.bbox.x0 - 1 <= box.x0 and box.x1 <= fig.bbox.x1 + 1 and fig.bbox.y0 - 1 <= box.y0
        for ax in fig.axes:
            assert not box.overlaps(ax.bbox), (leg, ax.get_title())


@pytest.mark.slow  # long in process
@pytest.mark.parametrize("name", ["vocab_sweep", "hero", "dg_epochs", "k_sweep", "diagnostics", "eta_sweep"])
def test_paper_figure_legends_are_legible_and_off_the_curves(name, rendered):
    check_legends(rendered(name))


@pytest.mark.slow  # takes seconds in process
def test_task_and_seed_figure_legends_are_legible_and_off_the_curves():
    many = probe({"tpo": 8, "grpo": 8, "dg": 1, "ppo": 1, "grpo_no_kl": 8, "pg": 1})
    for fig in (plot.render_task("probe", many),
                figures.render_seed_distributions([figures.SeedGroup("tpo", (0.0, 1.0, 90.0), (0.0, 14.0)),
                                                   figures.SeedGroup("grpo", (100.0,) * 3, (0.5, 76.0))], "s")):
        check_legends(fig)
        plot.plt.close(fig)


@pytest.mark.slow  # takes seconds in process
def test_a_key_named_per_line_is_named_on_every_panel(table):
    # H = 10 interaction-matched holds only grouped methods (K = 8 throughout): their lines
    # still say K, so the shared legend has one entry and one style per run
    # (a grouped method's interaction-matched runs are its prompt-matched ones, as the runner records them)
    inter = (table["experiment"] == "terminal_h_sweep") & (table["match"] == "interactions")
    cut = table[~(inter & ((table["task.sequence_length"] == 10) | (table["algo.k"] == 8)))].assign(match_k=8)
    fig = figures.render("terminal_h_sweep", cut)
    panel = fig.axes[7]
    assert panel.get_title().startswith("interaction-matched, H = 10") and panel.get_lines()
    assert [t for t in legend_texts(fig) if t.startswith("tpo")] == ["tpo (K=8)"]
    styles = {l.get_linestyle() for ax in fig.axes for l in ax.get_lines() if l.get_label() == "tpo (K=8)"}
    assert len(styles) == 1
    assert "K per line" in title_of(fig) and not any("K 8" in ax.get_title() for ax in fig.axes)
    plot.plt.close(fig)


def test_final_values_at_zero_show_on_a_log_panel_and_are_named(table):
    """A log axis cannot show 0: a final panel with values at 0 draws them on a symlog
    axis (linear below a stated floor) and names them inside the panel."""
    zero = table.copy()
    eta = experiments.select(zero, "eta_sweep")
    at = eta.index[eta["algo.eta"].isin([0.25, 2.0])]
    zero.loc[at, "error"] = 0.0
    fig = figures.render("eta_sweep", zero)
    final = fig.axes[1]
    assert final.get_yscale() == "symlog" and final.get_ylim()[0] < 0 < final.get_ylim()[1]
    at_zero = {x for l in final.get_lines() for x, y in zip(l.get_xdata(), l.get_ydata()) if y == 0}
    assert {0.25, 2.0} <= at_zero  # drawn, at 0
    [note] = [c for c in final.get_children() if getattr(c, "get_gid", lambda: None)() == "zeros"]
    text = " ".join(t.get_text() for t in note.get_texts()).replace("\n", " ")
    assert "final error 0:" in text and "eta = 0.25, 2" in text and "linear below" in text, text
    plot.plt.close(fig)
    # every value at 0: the floor is LOG_FLOOR and the panel is not blank
    dense = experiments.select(zero, "dg_epochs")
    zero.loc[dense.index[dense["task.reward"] != "terminal"], "error"] = 0.0
    fig = figures.render("dg_epochs", zero)
    variants = fig.axes[1]
    assert variants.get_yscale() == "symlog"
    assert variants.yaxis.get_transform().linthresh == style.LOG_FLOOR
    assert any(len(l.get_ydata()) and not np.any(l.get_ydata()) for l in variants.get_lines())
    plot.plt.close(fig)
