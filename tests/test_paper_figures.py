"""The paper's figures in the paper's form (analysis/paper/paper_figures.py) and the user
figures of analysis/plot.py, read from the matplotlib objects, not pixels."""
import re
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
    """P.render(name, table) -> (figure, Drawn), once per figure for all the checks below
    (rendering is the slow part); empty: of the table's columns without its rows. A check
    reads a figure and at most draws it, which lays it out anew each time."""
    cache = {}

    def get(name, empty=False):
        if (name, empty) not in cache:
            cache[name, empty] = P.render(name, table.iloc[:0].assign() if empty else table)
        return cache[name, empty]
    yield get
    for fig, _ in cache.values():
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
    fig, _ = drawn("hero")
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


@pytest.mark.slow  # takes seconds in process
def test_terminal_sweep_in_the_papers_form(drawn):
    fig, _ = drawn("terminal_h_sweep")
    assert len(fig.axes) == 8
    methods = ["TPO", "GRPO", "GRPO (no KL)", "DG", "PPO"]
    for ax in fig.axes:
        check_looks(ax, methods)
        assert ax.get_yscale() == "linear" and ax.get_ylim() == pytest.approx((0.0, 1.05))
    assert [ax.get_title() for ax in fig.axes[:4]] == [f"$H = {h}$" for h in (7, 8, 9, 10)]
    assert fig.axes[0].get_ylabel().startswith("Prompt") and fig.axes[4].get_ylabel().startswith("Interaction")
    [legend] = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == methods  # each method once


@pytest.mark.slow  # takes seconds in process
def test_extra_runs_go_to_the_companion_and_pngs_are_wide(table, tmp_path, drawn, monkeypatch):
    close, saved = P.plt.close, []
    monkeypatch.setattr(P.plt, "close", saved.append)  # each saved figure, kept to be read
    paths = P.draw("hero", table, tmp_path)
    assert [p.name for p in paths] == ["hero.png", "hero.pdf", "hero_companion.png", "hero_companion.pdf"]
    for png in paths[::2]:
        with Image.open(png) as im:
            assert im.width >= 1500 and round(im.info["dpi"][0]) >= 299, png.name
    sweep, _ = drawn("terminal_h_sweep")
    assert sweep.get_size_inches()[0] * P.DPI >= 1500
    hero, comp = saved  # the figure, then its companion
    labels = {l.get_label().split(" ")[0] for ax in comp.axes for l in ax.get_lines()}
    close(hero), close(comp)
    assert {"pg", "ce", "grpo_no_kl", "ppo"} <= labels and "tpo" not in labels


@pytest.mark.slow  # draws the three figures, each rendering its two siblings
def test_a_shared_companion_is_the_same_whichever_figure_draws_it(table, tmp_path, monkeypatch):
    """Figures 10, 11 and 14 share one companion file: each draws the runs none of them
    draws, under a title naming all three, so the file does not depend on the last writer."""
    close, saved = P.plt.close, []
    monkeypatch.setattr(P.plt, "close", saved.append)  # each saved figure, kept to be read
    sharing = sorted(s.name for s in P.PAPER.values() if s.companion == "mechanism_h8")
    assert len(sharing) == 3
    got = []
    for name in sharing:
        saved.clear()
        paths = P.draw(name, table, tmp_path / name)
        assert [p.name for p in paths[2:]] == ["mechanism_h8.png", "mechanism_h8.pdf"], name
        comp = saved[-1]
        got.append((comp._suptitle.get_text(),
                    sorted(l.get_label() for ax in comp.axes for l in ax.get_lines())))
        for fig in saved:
            close(fig)
    numbers = sorted(P.PAPER[n].number for n in sharing)
    assert got[0][0].startswith(f"Companion to Figures {numbers[0]}, {numbers[1]} and {numbers[2]}")
    assert got[0][1] and got[1:] == got[:-1]


@pytest.mark.slow  # draws the three figures sharing a companion, twice
def test_a_shared_companion_renders_each_sibling_once_per_table(table, tmp_path, monkeypatch):
    """The first of the three figures sharing a companion renders its siblings to find the
    runs they draw; the later ones render only themselves. A different table (here a copy)
    renders them again, never reusing the first table's runs."""
    rendered, render = [], P.render

    def counting(name, df):
        rendered.append((name, id(df)))
        return render(name, df)
    monkeypatch.setattr(P, "render", counting)
    monkeypatch.setattr(P, "DRAWN_FROM", {})  # nothing drawn yet
    sharing = sorted(s.name for s in P.PAPER.values() if s.companion == "mechanism_h8")
    for df in (table, table.copy()):
        for i, name in enumerate(sharing):
            rendered.clear()
            P.draw(name, df, tmp_path)
            assert sorted(n for n, _ in rendered) == (sharing if i == 0 else [name]), name
            assert {at for _, at in rendered} == {id(df)}


def test_every_paper_figure_has_a_preset_and_an_unrun_panel_says_so(drawn):
    assert sorted(s.number for s in P.PAPER.values()) == list(range(1, 18))
    fig, got = drawn("gradient_norms", empty=True)
    assert not got.hashes
    assert all("not run" in " ".join(t.get_text() for t in ax.texts) for ax in fig.axes)
    fig, _ = drawn("mnist")
    assert "not recorded" in " ".join(t.get_text() for t in fig.axes[1].texts)


def test_committed_pngs_are_at_least_1500_px_wide():
    pngs = sorted((REPO / "reproduction" / "figures").glob("*.png"))
    if not pngs:
        pytest.skip("no PNGs under reproduction/figures")
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
    assert "H 6" in fig.get_suptitle()
    check_text_inside(fig)
    assert fig._suptitle.get_fontsize() == plot.TITLE_PT + 1  # broken into lines, not shrunk
    # percent on the figure too: the axis label says so once, the ticks are numbers
    assert ax.yaxis.get_major_formatter()(0.05, 0) == "5" and ax.get_ylabel().endswith("(%)")
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
    # one copy of each figure: the page links reproduction/figures/, docs/ holds no image
    figures = (REPO / "reproduction" / "figures").resolve()
    assert all((page.parent / link).resolve().parent == figures for link in links), links
    assert not [p.name for p in (REPO / "docs").rglob("*") if p.suffix in (".png", ".pdf")]


# ---- every line the paper draws: drawn, or named in its panel ----

def check_text_inside(fig, slack=1.0):
    """Every text of the figure (titles, captions, labels, notes) lies inside it, and a
    panel's title is no wider than its panel."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    box = fig.bbox
    ticks = {id(t) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
             for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()] for t in tick.findobj(P.plt.Text)}
    texts = [t for t in fig.findobj(P.plt.Text)
             if t.get_visible() and t.get_text().strip() and id(t) not in ticks]
    inside = lambda e: (box.x0 - slack <= e.x0 and e.x1 <= box.x1 + slack  # noqa: E731
                        and box.y0 - slack <= e.y0 and e.y1 <= box.y1 + slack)
    for t in texts:
        assert inside(t.get_window_extent(r)), (t.get_text(), t.get_window_extent(r), box)
    for ax in fig.axes:  # with the tick labels it draws
        assert inside(ax.get_tightbbox(r)), ax.get_title()
        if ax.title.get_text():
            assert ax.title.get_window_extent(r).width <= ax.bbox.width + slack, ax.title.get_text()


def panel_notes(ax) -> str:
    """What a panel says of its lines: its note, or an empty panel's text."""
    notes = [a for a in ax.get_children() if getattr(a, "get_gid", lambda: None)() == "notes"]
    return " ".join([*(t.get_text() for n in notes for t in n.get_texts()), *(t.get_text() for t in ax.texts)])


def drop(table, **where):
    from tpo_bench.analysis.paper import experiments
    return table[~experiments.matches(table, where)]


def test_a_line_the_paper_draws_and_a_panel_lacks_is_named_in_that_panel(table):
    # at H = 10 no PPO; interaction-matched at H = 10, no DG either
    cut = drop(table, algo="ppo", H=10, task="seq", reward="terminal")
    cut = drop(cut, algo="dg", H=10, match="interactions", task="seq", reward="terminal")
    fig, _ = P.render("terminal_h_sweep", cut)
    h10 = fig.axes[3]
    assert h10.get_title() == "$H = 10$" and "PPO" not in [l.get_label() for l in curves(h10)]
    assert panel_notes(h10) == "PPO: not run"  # one line absent: named
    assert all("not run" not in panel_notes(ax) for ax in fig.axes[:3])  # PPO drawn there
    assert "DG, PPO: not run" in panel_notes(fig.axes[7])  # two lines absent: one note naming both
    P.plt.close(fig)


def test_a_bar_the_paper_draws_and_we_lack_is_named_with_its_category(table):
    cut = drop(table, algo="dg", epochs=4, reward="bag_of_tokens", target="copy")
    fig, _ = P.render("dg_epochs", cut)
    a, b, c = fig.axes
    assert "DG (4 ep): not run at Copy" in panel_notes(b)
    assert "Flip" not in panel_notes(b) and "not run" not in panel_notes(c)
    P.plt.close(fig)


def test_an_empty_panel_names_the_lines_it_lacks(drawn):
    fig, _ = drawn("gradient_norms", empty=True)
    assert "TPO (4 ep), TPO (1 ep), GRPO, PPO, DG: not run" in " ".join(panel_notes(fig.axes[0]).split())
    assert "TPO, GRPO: not run" in panel_notes(fig.axes[1])


def test_seed_counts_below_the_papers_are_starred():
    d = P.Drawn(seeds={"TPO": {(0, "(a)", None): 20, (1, "(b)", None): 15}, "DG": {(0, "(a)", None): 20}},
                paper={0: 20, 1: 20}, letters={0: "(a)", 1: "(b)"})
    assert P.seed_note(d) == ("Ours, mean ± 1 SE over seeds: TPO 20 (a), 15* (b), DG 20; "
                              "the paper's: 20 per line, * fewer here")
    d.paper = {0: 20, 1: 10}  # fewer seeds in the paper's (b): nothing is short
    assert P.seed_note(d).endswith("the paper's: 20 (a), 10 (b) per line")
    d.paper = {0: 0, 1: 0}  # the paper does not say
    assert "paper" not in P.seed_note(d) and "*" not in P.seed_note(d)


def test_the_caption_says_the_papers_seeds_and_stars_ours_below_them(drawn):
    fig, _ = drawn("dg_epochs")  # 3 seeds a line; the paper's 20 (a), 10 (b, c)
    caption = fig.get_suptitle() or fig._supxlabel.get_text()
    assert "the paper's: 20 (a), 10 (b, c) per line, * fewer here" in caption.replace("\n", " ")
    assert "DG (1 ep) 3*" in caption


def test_the_papers_seed_counts_are_its_numbers_seed_counts():
    numbers = pd.read_csv(REPO / "analysis" / "paper" / "paper_numbers.csv")
    checked = 0
    for spec in P.PAPER.values():
        rows = numbers[(numbers["experiment"] == spec.experiment) & numbers["seeds"].notna()]
        for p in spec.panels:
            reward = p.where.get("reward")
            got = rows[rows["reward"] == reward] if reward and (rows["reward"] == reward).any() else rows
            if got.empty or reward in ("bag_of_tokens", "sequential") and spec.name == "dg_epochs":
                continue
            assert (p.seeds or spec.seeds) in set(got["seeds"].astype(int)), (spec.name, p.title)
            checked += 1
    assert checked >= 20


@pytest.mark.slow  # takes seconds in process
def test_panel_letters_sit_in_one_place(drawn):
    for name in ("k_sweep", "epoch_sweep", "dg_epochs", "zero_variance_masking"):
        fig, _ = drawn(name)
        for ax, p in zip(fig.axes, P.PAPER[name].panels):
            letter, rest = P.split_letter(p.title)
            assert not ax.get_title().startswith("("), (name, ax.get_title())
            assert ax.get_title() == rest and letter in [t.get_text() for t in ax.texts], (name, p.title)


def test_dg_epochs_draws_a_above_b_and_c(drawn):
    fig, _ = drawn("dg_epochs")
    fig.canvas.draw()
    a, b, c = (ax.get_position() for ax in fig.axes)
    assert a.y0 > max(b.y1, c.y1) and b.x1 <= c.x0 and abs(b.y0 - c.y0) < 1e-6


def test_a_panel_legend_covers_no_curve(table):
    # 4-epoch DG stays near 0.95 all run, across the panel's top, as in our runs
    stuck = run("dg_epochs", "dg", seq("terminal"), epochs=4, floor=0.78)
    fig, _ = P.render("dg_epochs", pd.concat([drop(table, algo="dg", epochs=4, reward="terminal"), stuck]))
    fig.canvas.draw()
    ax = fig.axes[0]
    from tpo_bench.analysis.note import Note
    assert isinstance(ax.get_legend(), Note)  # placed as the notes are (tests/test_note.py)
    box = ax.get_legend().get_window_extent()
    for line in curves(ax):
        pts = ax.transData.transform(line.get_xydata())
        assert not any(box.contains(x, y) for x, y in pts), line.get_label()
    P.plt.close(fig)


def test_each_eta_has_its_own_colour(drawn):
    fig, _ = drawn("eta_sweep")
    lines = curves(fig.axes[0])
    assert len(lines) == 5
    rgb = [np.array(P.plt.matplotlib.colors.to_rgb(l.get_color())) for l in lines]
    hues = [P.plt.matplotlib.colors.rgb_to_hsv(c)[0] for c in rgb]
    # distinct hues, not tones of one: every pair at least 0.05 of the colour wheel apart
    gaps = [min(abs(h - k), 1 - abs(h - k)) for i, h in enumerate(hues) for k in hues[i + 1:]]
    assert min(gaps) >= 0.05, hues
    assert lines[2].get_color().upper() == PAPER_LOOK["TPO"][0]  # eta = 1: TPO's own


@pytest.mark.parametrize("name", ["mnist", "llm", "hero", "k_sweep", "dg_epochs", "eta_sweep"])
def test_paper_figure_texts_fit(drawn, name):
    fig, _ = drawn(name)
    check_text_inside(fig)


@pytest.mark.slow  # takes seconds in process
def test_paper_figures_are_saved_in_the_papers_type(table, tmp_path, monkeypatch):
    faces = []
    real = P.io.save_figure
    monkeypatch.setattr(P.io, "save_figure", lambda *a, **k: (faces.append(P.plt.rcParams["font.serif"][0]),
                                                              real(*a, **k)))
    P.draw("mnist", table, tmp_path, dpi=30)  # the type, not the pixels: a draft's dpi
    assert faces and set(faces) == {"STIXGeneral"}


def test_long_titles_break_inside_the_figure(table):
    comp = figures.render("mnist", table, title="Companion to Figure 4: our runs not in the paper's figure")
    check_text_inside(comp)
    P.plt.close(comp)
    seeds = figures.render_seed_distributions(
        [figures.SeedGroup("tpo", (0.0, 1.0, 90.0), (0.0, 14.0))],
        "Terminal reward, H = 10: per-seed final error, ours and the paper's")
    check_text_inside(seeds)
    P.plt.close(seeds)


# ---- user figures: what --where, --labels and the committed table mean ----

def two_rewards():
    bag = seq("bag_of_tokens", H=10, name="copy_bag")
    term = seq("terminal", H=10, name="reverse_h10")
    short = seq("terminal", H=7, name="reverse_h7")
    return pd.concat([run("x", "tpo", bag), run("x", "tpo", term), run("x", "grpo", term),
                      run("x", "tpo", short)], ignore_index=True)


def test_where_h_means_the_terminal_reward_horizon():
    df, notes = two_rewards(), []
    got = plot.filter_rows(df, where=["H=10"], notes=notes)
    assert set(got["task.name"]) == {"reverse_h10"}
    assert len(notes) == 1 and "copy_bag" in notes[0] and "reward=" in notes[0]
    # naming the reward keeps exactly what the keys name
    both = plot.filter_rows(df, where=["H=10", "reward=bag_of_tokens"])
    assert set(both["task.name"]) == {"copy_bag"}
    assert set(plot.filter_rows(df, where=["reward=terminal"])["task.name"]) == {"reverse_h10", "reverse_h7"}
    assert set(plot.filter_rows(df, where=["target=reverse_copy", "task.reward=bag_of_tokens"])["task.name"]) \
        == {"copy_bag"}


def test_where_h_on_the_cli_says_what_it_left_out(tmp_path, monkeypatch, capsys):
    figs = []
    monkeypatch.setattr(plot.plt, "close", figs.append)
    path = tmp_path / "r.parquet"
    two_rewards().to_parquet(path)
    assert plot.main(["--results", str(path), "--out", str(tmp_path / "p"), "--where", "H=10"]) == 0
    assert len(figs) == 1 and "copy_bag" in capsys.readouterr().err


def test_the_table_uses_the_label_map(tmp_path, monkeypatch, capsys):
    rc, _ = draw_user(tmp_path, monkeypatch, "--labels", "tpo=Ours,grpo=Theirs")
    out = capsys.readouterr().out
    names = [l.split(" (")[0] for l in out.splitlines() if "seeds" in l and "@" in l]
    assert rc == 0 and "Ours" in names and "Theirs" in names and "tpo" not in names and "grpo" not in names


@pytest.mark.slow  # takes seconds in process
def test_the_committed_table_brings_its_committed_runs(tmp_path, monkeypatch, capsys):
    assert [p.name for p in plot.committed_runs(plot.COMMITTED_TABLE)] == \
        [p.name for p in map(Path, plot.COMMITTED_RUNS) if (plot.COMMITTED_TABLE.parent / p).is_dir()]
    copy = tmp_path / "results.parquet"
    (tmp_path / "runs" / "terminal").mkdir(parents=True)
    assert plot.committed_runs(copy) == []  # another table: its folder's runs are not assumed
    roots = []
    monkeypatch.setattr(plot, "COMMITTED_TABLE", copy)
    monkeypatch.setattr(plot.collect, "collect", lambda root: (roots.append(Path(root)), (pd.DataFrame(), None))[1])
    monkeypatch.setattr(plot.plt, "close", lambda fig: None)
    user_table().to_parquet(copy)
    assert plot.main(["--results", str(copy), "--out", str(tmp_path / "p")]) == 0
    assert roots == [tmp_path / "runs" / "terminal"] and "--no-committed-runs" in capsys.readouterr().err
    roots.clear()
    assert plot.main(["--results", str(copy), "--out", str(tmp_path / "p"), "--no-committed-runs"]) == 0
    assert roots == []


def test_a_narrow_log_axis_labels_its_minor_ticks_in_percent():
    df = run("probe", "tpo", seq("bag_of_tokens", H=4, V=4, B=4, name="probe"), floor=0.7)
    df["error"] = 0.7 + 0.1 * (df["step"] % 3) / 2  # between 70 % and 80 %: no decade tick
    fig = plot.render_task("probe", df, scale="log")
    fig.canvas.draw()
    ax = fig.axes[0]
    shown = [t.get_text() for t in ax.yaxis.get_ticklabels(minor=True) if t.get_text()]
    assert shown and all(re.fullmatch(r"\d+(\.\d+)?", t) for t in shown), shown
    P.plt.close(fig)


def test_the_llm_figure_names_each_paper_panel_not_run_beside_ours(table):
    ours = pd.concat([run("llm", algo, {"impl": "llm", "name": "llm", "dataset": "spell_backward"})
                      for algo in ("tpo", "grpo")], ignore_index=True)
    ours["pass_at_1"] = 1 - ours["error"]
    fig, _ = P.render("llm", pd.concat([table, ours], ignore_index=True))
    papers = [p.title for p in P.PAPER["llm"].panels]
    n = len(papers)
    assert [ax.get_title() for ax in fig.axes[:n]] == papers  # the paper's tasks and models, first
    for ax in fig.axes[:n]:
        assert not curves(ax) and "TPO, GRPO: not run" in panel_notes(ax), ax.get_title()
    [mine] = fig.axes[n:]
    assert "ours" in mine.get_title() and "spell_backward" in mine.get_title()
    assert [l.get_label() for l in curves(mine)] == ["TPO", "GRPO"]
    check_text_inside(fig)
    P.plt.close(fig)


def test_mnist_test_error_panels_say_the_test_file_is_the_first_3000_images(drawn, table):
    said = "first 3,000 of 10,000 images"
    for name in ("hero", "mnist"):
        a = drawn(name)[0].axes[0]
        assert said in a.get_title().replace("\n", " "), name
    stale = figures.render("mnist_stale", table)
    titles = [ax.get_title().replace("\n", " ") for ax in stale.axes]
    assert len(titles) == 4 and all(said in t for t in titles), titles
    P.plt.close(stale)


# ---- every line the paper draws: declared, then drawn or named in its panel ----

# Facts from the paper's figures: lines (and Figure 9's row of panels) it draws that have
# no runs here; declared, each is named in its panel.
PAPER_GAPS = {
    "task_variants": {None: ["GRPO (no KL)"]},  # its legend's green dotted line, every panel
    "gradient_norms": {"(a)": ["TPO (1 ep)"]},
    "all_fail": {"(b)": ["TPO (1 ep)"]},
}
PAPER_LLM_MODELS = ("Qwen3-1.7B", "R1-Distill-Qwen-1.5B")  # Figure 9: a row of panels each


def drawn_labels(ax) -> set:
    lines = {l.get_label().removesuffix(" winners").removesuffix(" losers") for l in curves(ax)}
    return lines | {c.get_label() for c in ax.containers if not c.get_label().startswith("_")}


def named_not_run(ax) -> set:
    """The lines a panel names as not drawn: each statement of its note, or its empty text,
    up to ": not run" (or a metric's ": not recorded")."""
    notes = [a for a in ax.get_children() if getattr(a, "get_gid", lambda: None)() == "notes"]
    said = [" ".join(t.get_text().split()) for t in [*(t for n in notes for t in n.get_texts()), *ax.texts]]
    return {name for s in said for cut in re.findall(r"^(.*?): not (?:run|recorded)", s)
            for name in cut.split(", ")}


def test_the_papers_lines_are_declared_where_it_draws_them():
    for name, where in PAPER_GAPS.items():
        for panel in P.PAPER[name].panels:
            for title, labels in where.items():
                if title is None or panel.title == title:
                    assert set(labels) <= {P.line_label(l) for l in panel.lines}, (name, panel.title)
    for model in PAPER_LLM_MODELS:
        row = [p for p in P.PAPER["llm"].panels if p.title.endswith(f" - {model}")]
        assert [p.title.split(" - ")[0] for p in row] == ["GSM8K", "Graph color", "Knights & Knaves"], model
        assert all([P.line_label(l) for l in p.lines] == ["TPO", "GRPO"] for p in row), model


@pytest.mark.slow  # renders every paper figure, with and without runs
@pytest.mark.parametrize("name", P.ORDER)
def test_every_line_a_figure_declares_is_drawn_or_named_in_its_panel(name, drawn):
    for empty in (False, True):
        fig, _ = drawn(name, empty)
        for ax, panel in zip(fig.axes, P.PAPER[name].panels):
            shown, named = drawn_labels(ax), named_not_run(ax)
            silent = [P.line_label(l) for l in panel.lines
                      if P.line_label(l) not in shown and P.line_label(l) not in named]
            assert not silent, (name, panel.title, "empty table" if empty else "synthetic table")
            assert not (shown & named), (name, panel.title)  # drawn and said not run: one is false


def test_an_llm_panel_draws_its_own_models_runs_only(table):
    ours = pd.concat([run("llm", algo, {"impl": "llm", "name": "llm_gsm8k", "dataset": "gsm8k",
                                        "model_path": "/models/DeepSeek-R1-Distill-Qwen-1.5B"})
                      for algo in ("tpo", "grpo")], ignore_index=True)
    ours["pass_at_1"] = 1 - ours["error"]
    fig, _ = P.render("llm", pd.concat([table, ours], ignore_index=True))
    by_title = {ax.get_title(): ax for ax in fig.axes}
    assert [l.get_label() for l in curves(by_title["GSM8K - R1-Distill-Qwen-1.5B"])] == ["TPO", "GRPO"]
    assert named_not_run(by_title["GSM8K - Qwen3-1.7B"]) == {"TPO", "GRPO"}
    P.plt.close(fig)


# ---- what else a panel says of its lines ----

def test_an_interaction_matched_panel_says_which_lines_are_prompt_matched_runs(table):
    # a grouped method's interaction-matched runs are its prompt-matched ones, as the runner
    # records them (experiments.already_interaction_matched): none under match=interactions
    inter = table["match"].eq("interactions") & table["algo.k"].eq(8)
    cut = table[~inter].assign(match_k=8)
    fig, _ = P.render("terminal_h_sweep", cut)
    said = "TPO, GRPO, GRPO (no KL): prompt-matched runs (same configuration)"
    for ax in fig.axes[4:]:  # the interaction-matched row
        assert said in " ".join(panel_notes(ax).split()), ax.get_title()
        assert {"TPO", "GRPO", "GRPO (no KL)", "DG", "PPO"} <= drawn_labels(ax)
    assert not any("prompt-matched runs" in panel_notes(ax) for ax in fig.axes[:4])
    P.plt.close(fig)
    fig, _ = P.render("task_variants", cut)  # Figure 6's bottom rows: dense runs, only prompt-matched
    for ax in fig.axes[8:]:
        text = " ".join(panel_notes(ax).split())
        assert "TPO_token, GRPO_token: prompt-matched runs (same configuration)" in text
        assert named_not_run(ax) == {"DG", "PPO", "GRPO (no KL)"}
    P.plt.close(fig)


def caption(fig) -> str:
    return " ".join((fig.get_suptitle() or fig._supxlabel.get_text()).split())


def test_seeds_are_given_per_panel_where_a_methods_count_differs(table):
    # DG with 2 seeds at V = 4, 3 elsewhere; PPO with 2 at H = 10 prompt-matched
    dg = table["experiment"].eq("vocab_sweep") & table["algo.name"].eq("dg") & table["task.vocab_size"].eq(4)
    ppo = (table["experiment"].eq("terminal_h_sweep") & table["algo.name"].eq("ppo")
           & table["task.sequence_length"].eq(10) & table["match"].eq("prompts"))
    cut = table[~((dg | ppo) & table["seed"].eq(2))]
    fig, _ = P.render("vocab_sweep", cut)
    text = caption(fig)
    assert "per panel: V = 2, V = 8, V = 16: 3* per line; V = 4: TPO_token 3*, GRPO_token 3*, DG 2*, PPO 3*" in text
    assert not re.search(r"\d[-–]\d", text), text  # no range of counts
    P.plt.close(fig)
    fig, _ = P.render("terminal_h_sweep", cut)
    text = caption(fig)
    assert "prompt H = 10: TPO 3*, GRPO 3*, GRPO (no KL) 3*, DG 3*, PPO 2*" in text
    assert "interaction H = 10: 3* per line" in text.replace("interaction H = 10, ", "")
    assert not re.search(r"\d[-–]\d", text), text
    P.plt.close(fig)


def under_way(rows: pd.DataFrame, last: int, status: str = "running") -> pd.DataFrame:
    """rows as collect.in_progress reads a run under way: its first episodes, marked."""
    from tpo_bench.analysis.collect import PROGRESS
    return rows[rows["step"] <= last].assign(partial=True, **{PROGRESS: status})


def test_runs_under_way_are_drawn_as_far_as_they_got_and_never_as_a_final_value(table):
    k4 = table["experiment"].eq("k_sweep") & table["algo.name"].eq("tpo") & table["algo.k"].eq(4)
    part = pd.concat([table[~k4], under_way(table[k4], 19)], ignore_index=True)
    total = int(table.loc[k4, "task.episodes"].iloc[0])
    fig, got = P.render("k_sweep", part)
    a, _, c = fig.axes
    [line] = [l for l in curves(a) if l.get_label() == "$K$=4"]
    assert max(line.get_xdata()) == 19
    assert f"$K$=4: episodes 0–19 of {total}, running" in " ".join(panel_notes(a).split())
    [tpo] = [h for h in c.containers if h.get_label() == "TPO"]
    assert 4 not in list(tpo.lines[0].get_xdata())  # no final value from a run under way
    assert f"TPO at K = 4: episodes 0–19 of {total}, running" in " ".join(panel_notes(c).split())
    assert "TPO" not in named_not_run(c)
    P.plt.close(fig)
    comp = figures.render("k_sweep", part)  # the generic layout says so too
    assert f"tpo at K = 4: episodes 0–19 of {total}, running" in " ".join(
        t.get_text() for a in comp.axes for n in a.get_children() if getattr(n, "get_gid", lambda: None)() == "progress"
        for t in n.get_texts()).replace("\n", " ")
    P.plt.close(comp)


@pytest.mark.slow  # runs plot.main
def test_plot_draws_the_runs_under_way_under_add_runs(tmp_path, monkeypatch):
    import time
    from dev.bench_collect import demo_config, write_run
    config = demo_config(episodes=2000)
    config["task"].update(name="reverse_h10", reward="terminal", sequence_length=10, vocab_size=2,
                          batch_size=100)
    root = tmp_path / "runs"
    for seed in (0, 1):  # seed 1 further on: the line stops where both are
        write_run(root, config, seed, np.linspace(1.0, 0.5, 500 + 100 * seed), status="running",
                  heartbeat=time.time())
    write_run(root, config, 2, np.linspace(1.0, 0.5, 300), status="interrupted", reason="SIGTERM")
    res = tmp_path / "r.parquet"
    user_table().to_parquet(res)
    figs = []
    monkeypatch.setattr(plot.plt, "close", figs.append)
    assert plot.main(["--figure", "hero", "--results", str(res), "--add-runs", str(root),
                      "--out", str(tmp_path / "f")]) == 0
    b = figs[0].axes[1]
    [tpo] = [l for l in curves(b) if l.get_label() == "TPO"]
    assert max(tpo.get_xdata()) == 299
    assert "TPO: episodes 0–299 of 2,000, running" in " ".join(panel_notes(b).split())


def test_the_pages_verdicts_come_from_completed_runs_only(table, tmp_path, monkeypatch):
    from tpo_bench.analysis.paper import page
    judged = []
    monkeypatch.setattr(page, "numbers", lambda name, df, *a: judged.append(df) or [])
    monkeypatch.setattr(page, "section", lambda *a: "")
    part = pd.concat([table, under_way(table[table["algo.name"].eq("tpo")].assign(config_hash="new"), 9)],
                     ignore_index=True)
    page.write(part, tmp_path / "figures.md", tmp_path)
    assert judged and all(not d["partial"].eq(True).any() for d in judged)
    assert all(len(d) == len(table) for d in judged)


def test_a_panel_says_its_lines_mix_learning_rates_where_they_do():
    """The committed LLM runs (reproduction/runs/llm): the learning rates the drawn lines
    ran at, said in the panel when they differ."""
    from tpo_bench.analysis import collect
    runs, _ = collect.collect(REPO / "reproduction" / "runs" / "llm")
    fig, got = P.render("llm", runs)
    [ax] = [ax for ax in fig.axes if "(ours" in ax.get_title()]
    lrs = {label: set(v) for label, v in got.lrs[fig.axes.index(ax)].items()}
    assert sorted(lrs) == sorted(l.get_label() for l in curves(ax))
    for line in curves(ax):  # each drawn line's learning rate, as its runs recorded it
        algo = next(a for a in runs["algo.name"].unique() if P.method_label(a) == line.get_label())
        hashes = set(runs.loc[runs["algo.name"].eq(algo), "config_hash"]) & got.hashes
        assert lrs[line.get_label()] == set(runs.loc[runs["config_hash"].isin(hashes), "optim.lr"])
    text = " ".join(panel_notes(ax).split())
    if len(set().union(*lrs.values())) > 1:
        assert text.startswith("lines mix learning rates: ")
        for label, values in lrs.items():
            assert re.search(rf"{re.escape(label)}(, [\w ()]+)* {'|'.join(f'{v:g}' for v in values)}", text)
    else:
        assert "learning rate" not in text
    P.plt.close(fig)
    same = runs[runs["optim.lr"].eq(runs["optim.lr"].max())]  # one rate: nothing said
    fig, _ = P.render("llm", same)
    assert not any("learning rate" in panel_notes(ax) for ax in fig.axes)
    P.plt.close(fig)


def test_the_figures_pages_introduction_is_the_generators():
    from tpo_bench.analysis.paper import page
    text = (REPO / "docs" / "figures.md").read_text()
    assert text.startswith("\n".join(page.intro()))
    assert "Each line the paper draws is drawn or named inside its panel" in " ".join(page.intro())


# ---- one look per method in every figure ----

def cielab(color: str) -> np.ndarray:
    """sRGB colour -> CIELAB (D65), where distance is seen difference."""
    rgb = np.array(P.plt.matplotlib.colors.to_rgb(color))
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ lin
    f = np.cbrt(xyz / np.array([0.95047, 1.0, 1.08883]))
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def one_method(a: str, b: str) -> bool:
    """A token-level variant and its sequence-level method: one method, one look."""
    return a.removesuffix("_token") == b.removesuffix("_token")


def test_every_method_has_a_look_of_its_own():
    from tpo_bench.analysis import style
    methods = sorted(p.stem for p in (REPO / "conf" / "algo").glob("*.yaml"))
    assert set(methods) <= set(style.STYLE), set(methods) - set(style.STYLE)
    gap = lambda a, b: float(np.linalg.norm(cielab(a) - cielab(b)))  # noqa: E731
    colors = {m: look.color for m, look in style.STYLE.items()}
    for m, c in colors.items():
        others = [colors[o] for o in colors if not one_method(o, m)]
        assert c not in others, m
        if m not in style.PAPER_METHODS:  # the paper's keep the artifact's colours
            assert min(gap(c, o) for o in others) >= 25, m
    assert min(gap(f, c) for f in style.FALLBACK for c in colors.values()) >= 20
    pg, ppo = style.STYLE["pg"], style.STYLE["ppo"]
    assert (pg.color, pg.marker) != (ppo.color, ppo.marker) and pg.color != ppo.color


def method_of(label: str, paper_form: bool) -> str | None:
    """The method a legend label names: the paper's form names it exactly (a label with a
    setting, "TPO (1 ep)", is a tone of its own); other figures by name and settings."""
    from tpo_bench.analysis import style
    names = {**{look.label: m for m, look in style.STYLE.items()}, **{m: m for m in style.STYLE}}
    return names.get(label if paper_form else label.split(" (")[0])


@pytest.mark.slow  # renders a dozen figures
def test_a_method_looks_the_same_in_every_figure_and_unlike_the_others_beside_it(table, drawn):
    from tpo_bench.analysis import style
    demo = probe_table({"tpo": 8, "grpo": 8, "dg": 1, "pg": 1, "ppo": 1})  # the quickstart's methods
    figs = [(drawn(n)[0], True) for n in ("hero", "tabular_single", "mnist", "vocab_sweep", "k_sweep",
                                          "terminal_h_sweep")]
    owned = [(figures.render(n, table), False) for n in ("hero", "mnist", "k_sweep")]
    owned.append((plot.render_task("probe", demo), False))
    colors, markers = {}, {}
    for fig, paper_form in figs + owned:
        for ax in fig.axes:
            here = {}
            # a curve carries its label, an error-bar line its container
            labelled = [*((l, l) for l in ax.get_lines()),
                        *((c, c.lines[0]) for c in ax.containers if hasattr(c, "has_xerr"))]
            for holder, line in labelled:
                m = method_of(holder.get_label(), paper_form)
                if m is None:
                    continue
                color = P.plt.matplotlib.colors.to_hex(line.get_color()).upper()
                colors.setdefault(m, set()).add(color)
                here.setdefault(color, set()).add(m)
                if line.get_marker() not in ("None", "", None):
                    markers.setdefault(m, set()).add(line.get_marker())
            shared = [ms for ms in here.values() if len(ms) > 1 and not all(one_method(*p) for p in
                                                                           zip(sorted(ms), sorted(ms)[1:]))]
            assert not shared, (ax.get_title(), shared)  # two methods, one colour
    for m, seen in colors.items():
        assert seen == {style.STYLE[m].color.upper()}, (m, seen)
    for m, seen in markers.items():
        assert seen == {style.STYLE[m].marker}, (m, seen)
    assert {"pg", "ppo", "dg", "tpo", "grpo"} <= set(colors) and {"tpo", "grpo"} <= set(markers)
    [ax] = owned[-1][0].axes
    for line in ax.get_lines():  # the quickstart's figure: each method its dash too
        m = method_of(line.get_label(), False)
        if m:
            assert line.get_linestyle() == style.STYLE[m].ls, m
    for fig, _ in owned:
        P.plt.close(fig)


def probe_table(algos: dict) -> pd.DataFrame:
    task = seq("bag_of_tokens", H=6, V=3, B=50, name="probe")
    return pd.concat([run("probe", a, task, k=k) for a, k in algos.items()], ignore_index=True)
