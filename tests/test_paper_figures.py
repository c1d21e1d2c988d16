"""The paper's figures in the paper's form (analysis/paper/paper_figures.py) and the user
figures of analysis/plot.py, read from the matplotlib objects, not pixels."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from tpo_bench.analysis import plot, stats
from tpo_bench.analysis.paper import figures, paper_figures as P
from synthetic import results_table, run, seq

REPO = Path(__file__).resolve().parents[1]
# Facts from the paper's artifact (its plotting scripts): colour and line style per method.
PAPER_LOOK = {"TPO": ("#2C7BB6", "-"), "GRPO": ("#F4A259", "-"), "DG": ("#D62728", "--"),
              "GRPO (no KL)": ("#018571", ":"), "PPO": ("#ABD9E9", "--")}


@pytest.fixture(scope="module")
def table():
    return results_table()


@pytest.fixture(scope="module")
def drawn(table):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = P.render(name, table)[0]
        return cache[name]
    yield get
    for fig in cache.values():
        P.plt.close(fig)


def curves(ax):
    return [l for l in ax.get_lines() if l.get_label() and not l.get_label().startswith("_")]


def check_looks(ax, labels):
    lines = curves(ax)
    assert [l.get_label() for l in lines] == labels, ax.get_title()
    for line in lines:
        color, ls = PAPER_LOOK[line.get_label()]
        assert line.get_color().upper() == color and line.get_linestyle() == ls, line.get_label()
    return lines


def test_hero_in_the_papers_form(drawn, table):
    fig = drawn("hero")
    a, b = fig.axes
    assert b.get_title() == "(b) Token reversal (sparse reward)"
    assert a.get_title().startswith("(a) MNIST") and "first 3,000" in a.get_title()  # which split
    for ax in (a, b):  # the synthetic table also has PG, CE, Group PG, PPO, GRPO (no KL) here
        lines = check_looks(ax, ["TPO", "GRPO", "DG"])
        assert ax.get_yscale() == "linear"
        tpo = lines[0]
        assert tpo.get_linewidth() > max(l.get_linewidth() for l in lines[1:])  # thickest
    lo, hi = a.get_ylim()
    assert lo <= 0.03 and 0.14 <= hi <= 0.16  # the paper's 0.03-0.14 MNIST range
    assert b.get_ylim() == pytest.approx((0.0, 1.05))
    [legend] = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["TPO", "GRPO", "DG"]
    assert legend.get_frame_on()
    assert a.title.get_fontfamily()[0] in ("serif", "STIXGeneral")
    # the terminal panel: the 40-episode trailing moving average of the seed mean
    rows = table[(table["algo.name"] == "tpo") & (table["task.sequence_length"] == 10)
                 & (table["match"] == "prompts") & (table["task.reward"] == "terminal")]
    expected = stats.mean_se(stats.moving_average(stats.seed_curves(rows), 40))[0]
    assert np.allclose(curves(b)[0].get_ydata(), expected.values)


def test_terminal_sweep_in_the_papers_form(drawn):
    fig = drawn("terminal_h_sweep")
    assert len(fig.axes) == 8
    methods = ["TPO", "GRPO", "GRPO (no KL)", "DG", "PPO"]
    for ax in fig.axes:
        check_looks(ax, methods)
        assert ax.get_yscale() == "linear" and ax.get_ylim() == pytest.approx((0.0, 1.05))
    assert [ax.get_title() for ax in fig.axes[:4]] == [f"$H = {h}$" for h in (7, 8, 9, 10)]
    assert fig.axes[0].get_ylabel().startswith("Prompt") and fig.axes[4].get_ylabel().startswith("Interaction")
    [legend] = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == methods  # each method once


def test_extra_runs_go_to_the_companion_and_pngs_are_wide(table, tmp_path, drawn):
    paths = P.draw("hero", table, tmp_path)
    assert [p.name for p in paths] == ["hero.png", "hero.pdf", "hero_companion.png", "hero_companion.pdf"]
    for png in paths[::2]:
        with Image.open(png) as im:
            assert im.width >= 1500 and round(im.info["dpi"][0]) >= 299, png.name
    sweep = drawn("terminal_h_sweep")
    assert sweep.get_size_inches()[0] * P.DPI >= 1500
    fig, got = P.render("hero", table)
    P.plt.close(fig)
    comp = figures.render("hero", table[~table["config_hash"].isin(got.hashes)], title="companion")
    labels = {l.get_label().split(" ")[0] for ax in comp.axes for l in ax.get_lines()}
    P.plt.close(comp)
    assert {"pg", "ce", "grpo_no_kl", "ppo"} <= labels and "tpo" not in labels


def test_every_paper_figure_has_a_preset_and_an_unrun_panel_says_so(table):
    assert sorted(s.number for s in P.PAPER.values()) == list(range(1, 18))
    fig, drawn = P.render("gradient_norms", table.iloc[:0].assign())
    assert not drawn.hashes
    assert all("not run" in " ".join(t.get_text() for t in ax.texts) for ax in fig.axes)
    P.plt.close(fig)
    fig, _ = P.render("mnist", table)
    assert "not recorded" in " ".join(t.get_text() for t in fig.axes[1].texts)
    P.plt.close(fig)


@pytest.mark.parametrize("folder", ["reproduction/figures", "docs/figures"])
def test_committed_pngs_are_at_least_1500_px_wide(folder):
    pngs = sorted((REPO / folder).glob("*.png"))
    if not pngs:
        pytest.skip(f"no PNGs under {folder}")
    for png in pngs:
        with Image.open(png) as im:
            assert im.width >= 1500, png.name


# ---- user figures (analysis/plot.py) ----

def user_table():
    task = seq("bag_of_tokens", H=6, V=3, B=50, name="probe")
    parts = [run("probe", a, task, k=8) for a in ("tpo", "grpo")]
    parts += [run("probe", a, task) for a in ("mystery", "other", "pg", "ppo")]  # PG, PPO: one paper colour
    twin = parts[0][parts[0]["seed"] == 0].assign(config_hash="twin")  # TPO again, 1 seed, a hidden key
    twin["error"] += 0.3
    df = pd.concat([*parts, twin], ignore_index=True)
    df.loc[df["algo.name"].isin(["mystery", "other"]), "algo.k"] = 1
    return df


def draw_user(tmp_path, monkeypatch, *args):
    figs = []
    monkeypatch.setattr(plot.plt, "close", figs.append)
    path = tmp_path / "r.parquet"
    user_table().to_parquet(path)
    rc = plot.main(["--results", str(path), "--out", str(tmp_path / "p"), *args])
    return rc, figs


def test_user_figure_names_methods_once_each_in_distinct_colours(tmp_path, monkeypatch, capsys):
    rc, [fig] = draw_user(tmp_path, monkeypatch)
    assert rc == 0
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    # K differs between methods: each names its own; no second TPO line for its 1-seed twin
    assert sorted(labels) == ["GRPO (K=8)", "PG (K=1)", "PPO (K=1)", "TPO (K=8)", "mystery (K=1)", "other (K=1)"]
    colors = [l.get_color() for l in curves(ax)]
    assert len(set(colors)) == len(colors)
    assert "\n" not in fig.get_suptitle() and "H 6" in fig.get_suptitle()
    assert ax.yaxis.get_major_formatter()(0.05, 0) == "5 %"  # percent on the figure too
    with Image.open(tmp_path / "p" / "probe.png") as im:
        assert im.width >= 1500 and round(im.info["dpi"][0]) >= 299
    out = capsys.readouterr().out
    assert "final error = error at the last step" in out
    rows = [l for l in out.splitlines() if l.startswith(("TPO", "GRPO", "PG", "PPO", "mystery", "other"))]
    finals = [float(l.split()[l.split().index("±") - 1]) for l in rows]
    assert finals == sorted(finals) and max(finals) > 1  # percent, best first


def test_user_filters_and_label_map(tmp_path, monkeypatch, capsys):
    df = user_table()
    picked = plot.filter_rows(df, ["tpo,grpo"])
    fig = plot.render_task("probe", plot.one_config_per_line(picked), labels=plot.parse_labels("tpo=Ours"))
    assert sorted(t.get_text() for t in fig.axes[0].get_legend().get_texts()) == ["GRPO", "Ours"]
    P.plt.close(fig)
    assert set(plot.filter_rows(df, where=["algo.k=1"])["algo.name"]) == {"mystery", "other", "pg", "ppo"}
    assert set(plot.filter_rows(df, where=["K=8"])["algo.name"]) == {"tpo", "grpo"}  # short keys
    rc, figs = draw_user(tmp_path, monkeypatch, "--where", "bogus=1")
    assert rc == 2 and not figs
    err = capsys.readouterr().err
    assert "bogus" in err and "valid:" in err and len(err.strip().splitlines()) == 1
    rc, figs = draw_user(tmp_path, monkeypatch, "--methods", "nope")
    assert rc == 2 and "valid: grpo, mystery, other, pg, ppo, tpo" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_comparison_page_shows_every_figure_and_its_images_resolve():
    page = REPO / "docs" / "figures.md"
    if not page.is_file():
        pytest.skip("no docs/figures.md in this checkout")
    text = page.read_text()
    import re
    for spec in P.PAPER.values():
        assert f"## Figure {spec.number}: `{spec.name}`" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert links and all((page.parent / link).is_file() for link in links), links
