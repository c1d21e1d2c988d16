"""Notes inside panels (analysis/note.py): a note hides no line where a spot of its size
would leave every line uncovered, and a line no spot avoids is drawn over it.

The check here is geometric and brute force (points along each line, a coarse grid of
spots), independent of the note's own pixel search."""
import numpy as np
import pytest
from matplotlib.transforms import Bbox

from tpo_bench.analysis import note as N
from tpo_bench.analysis import plot
from tpo_bench.analysis.paper import paper_figures as P
from tpo_bench.analysis.style import plt

SAID = "TPO, GRPO, GRPO (no KL): prompt-matched runs (same configuration)"


def along(line) -> np.ndarray:
    """Points along a drawn line in display coordinates, a pixel or less apart."""
    xy = line.get_transform().transform(np.column_stack([line.get_xdata(), line.get_ydata()]).astype(float))
    a, b = xy[:-1], xy[1:]
    ok = np.isfinite(a).all(1) & np.isfinite(b).all(1)
    a, b = a[ok], b[ok]
    if not len(a):  # a single point (a marker)
        return xy[np.isfinite(xy).all(1)]
    n = np.maximum(1, np.ceil(np.hypot(*(b - a).T)).astype(int))
    t = np.concatenate([np.arange(k) / k for k in n])
    return np.repeat(a, n, 0) + t[:, None] * np.repeat(b - a, n, 0)


def inside(box: Bbox, pts: np.ndarray, margin: float = 0.0) -> np.ndarray:
    return ((pts[:, 0] >= box.x0 - margin) & (pts[:, 0] <= box.x1 + margin)
            & (pts[:, 1] >= box.y0 - margin) & (pts[:, 1] <= box.y1 + margin))


def lines_of(ax):
    return [l for l in ax.get_lines() if l.get_visible() and l.get_linestyle() not in ("None", "")
            and l.get_linewidth() > 0]


def free_spot(ax, note, size: Bbox, pts: np.ndarray, margin: float, n: int = 40):
    """A spot inside the panel (as far in from its edges as a note keeps) where a box of
    size's size has no point of a line within margin, or None."""
    pad = note.borderaxespad * note._fontsize * ax.figure.dpi / 72
    a = ax.bbox
    for x in np.linspace(a.x0 + pad, a.x1 - pad - size.width, n):
        for y in np.linspace(a.y0 + pad, a.y1 - pad - size.height, n):
            if not inside(Bbox.from_bounds(x, y, size.width, size.height), pts, margin).any():
                return x, y
    return None


def check_notes(fig) -> list:
    """Every note of the figure: beneath the lines and above the bands, and, where some
    spot of its size is clear of every line by a margin, clear of every line itself. The
    axes whose note had such a spot."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    clear = []
    for ax in fig.axes:
        for note in [c for c in ax.get_children() if isinstance(c, N.Note)]:
            lines = lines_of(ax)
            if not lines:
                continue
            assert note.get_zorder() < min(l.get_zorder() for l in lines), ax.get_title()
            bands = [c for c in ax.collections if type(c).__name__ in ("PolyCollection", "FillBetweenPolyCollection")]
            assert all(b.get_zorder() < note.get_zorder() for b in bands), ax.get_title()
            box = note.get_frame().get_window_extent(r)
            pts = np.concatenate([along(l) for l in lines])
            width = max(l.get_linewidth() for l in lines) * fig.dpi / 72
            if free_spot(ax, note, box, pts, width / 2 + N.GRID_PT * fig.dpi / 72 + 2) is not None:
                clear.append(ax)
                hidden = inside(box, pts)
                assert not hidden.any(), (ax.get_title(), " ".join(t.get_text() for t in note.get_texts()),
                                          pts[hidden][:3], box)
    return clear


def flat_lines_and_two_curves():
    """Long flat lines at 1 (many points, as the methods that never learn give) and two
    falling curves with bands: the shape where matplotlib's loc="best" covers a curve."""
    return panel((3.1, 2.2))


def panel(size):
    fig, ax = plt.subplots(figsize=size, dpi=150, layout="constrained")
    x = np.arange(2000.0)
    for ls in (":", "--", "-."):
        ax.plot(x, np.ones_like(x), ls=ls, lw=1.5)
    for floor, speed in ((0.15, 400), (0.3, 700)):
        y = floor + (1 - floor) * np.exp(-x / speed)
        ax.fill_between(x, y - 0.04, y + 0.04, alpha=0.2, lw=0)
        ax.plot(x, y, lw=2)
    ax.set_ylim(0, 1.05)
    return fig, ax


def test_a_note_goes_where_it_hides_no_line():
    fig, ax = flat_lines_and_two_curves()
    N.note_inside(ax, SAID, "notes", fontsize=6.5)
    assert check_notes(fig) == [ax]
    plt.close(fig)


def test_a_note_no_spot_keeps_clear_of_lines_is_drawn_beneath_them():
    from matplotlib.colors import to_rgb
    fig, ax = plt.subplots(figsize=(2.0, 1.5), dpi=150)
    x = np.linspace(0, 1, 400)
    for k in range(12):  # lines everywhere: no box of the note's height between two
        ax.plot(x, np.full_like(x, k / 11), lw=1.5)
    ax.set_ylim(-0.05, 1.05)
    note = N.note_inside(ax, SAID, "notes", fontsize=6.5)
    assert check_notes(fig) == []  # no clear spot: the order is what keeps the lines
    box = note.get_frame().get_window_extent(fig.canvas.get_renderer())
    pixels = np.asarray(fig.canvas.buffer_rgba())[::-1, :, :3] / 255  # rows from the bottom
    shown = []
    for line in ax.get_lines():
        pts = along(line)
        pts = pts[inside(box, pts, -3)]
        pts = pts[np.isfinite(pts).all(1)][::25]
        # a line's own colour where it crosses the note (its centre pixels, the text aside)
        got = pixels[pts[:, 1].astype(int), pts[:, 0].astype(int)]
        shown += list(np.abs(got - to_rgb(line.get_color())).max(1) < 0.15)
    assert len(shown) > 20 and np.mean(shown) > 0.8, np.mean(shown)
    plt.close(fig)


def test_a_note_covers_a_band_rather_than_a_line():
    # the top half: a band over all of it, lines at its edges only; the bottom half: no
    # band, lines closer together than the note is tall
    fig, ax = plt.subplots(figsize=(3.1, 2.2), dpi=150)
    x = np.linspace(0, 1, 200)
    ax.fill_between(x, 0.5, 1.0, alpha=0.2, lw=0)
    for y in (0.52, 0.98, *np.arange(0.03, 0.5, 0.05)):
        ax.plot(x, np.full_like(x, y), lw=1)
    ax.set_ylim(0, 1)
    note = N.note_inside(ax, "PPO: not run", "notes", fontsize=6.5)
    assert check_notes(fig) == [ax]
    box = ax.transAxes.inverted().transform_bbox(note.get_frame().get_window_extent(fig.canvas.get_renderer()))
    assert box.y0 > 0.5  # on the band
    plt.close(fig)


def test_a_panels_own_legend_joins_the_note_and_each_statement_stays_an_entry():
    fig, ax = flat_lines_and_two_curves()
    ax.lines[3].set_label("TPO")
    ax.lines[4].set_label("GRPO")
    ax.legend()
    note = N.note_inside(ax, "PPO: not run\n" + SAID, "notes", fontsize=6.5)
    texts = [" ".join(t.get_text().split()) for t in note.get_texts()]
    assert texts == ["TPO", "GRPO", "PPO: not run", SAID]
    assert ax.get_legend() is note and note.get_gid() == "notes"
    check_notes(fig)
    plt.close(fig)


def test_a_panels_legend_alone_is_placed_as_a_note_is():
    fig, ax = flat_lines_and_two_curves()
    for line, name in zip(ax.lines[3:], ("TPO", "GRPO")):
        line.set_label(name)
    ax.legend()
    legend = N.note_inside(ax, "", "legend")
    assert [t.get_text() for t in legend.get_texts()] == ["TPO", "GRPO"] and ax.get_legend() is legend
    assert check_notes(fig) == [ax]
    plt.close(fig)
    fig, ax = plt.subplots()
    assert N.note_inside(ax, "", "legend") is None and ax.get_legend() is None  # nothing to say
    plt.close(fig)


def test_a_note_is_broken_into_shorter_lines_where_that_clears_a_line():
    wide, *narrower = N.wraps(SAID)
    assert narrower and all(max(map(len, n[0].split("\n"))) < max(map(len, wide[0].split("\n")))
                            for n in narrower)
    chosen = []
    for split in (False, True):
        fig, ax = panel((5.0, 2.2))  # the unbroken note fits beside the curves
        if split:
            ax.plot([1000, 1000], [0, 1], lw=1)  # a line down the middle: half the width is room
        note = N.note_inside(ax, SAID, "notes", fontsize=6.5)
        assert check_notes(fig) == [ax]
        chosen.append(note.get_texts()[0].get_text())
        plt.close(fig)
    assert chosen[0] == wide[0] and chosen[1] in [n[0] for n in narrower], chosen


def test_no_break_that_fits_the_panel_gives_the_one_that_overflows_least():
    fig, ax = plt.subplots(figsize=(1.0, 0.8), dpi=150)
    ax.plot([0, 1], [0, 1])
    note = N.note_inside(ax, SAID, "notes", fontsize=6.5)
    assert note.texts_tried[-1][0] != note.texts_tried[0][0]
    fig.canvas.draw()
    box = note.get_frame().get_window_extent(fig.canvas.get_renderer())
    narrowest = N.wraps(SAID)[-1][0]
    assert note.get_texts()[0].get_text() == narrowest and box.x0 >= ax.bbox.x0, box
    plt.close(fig)


def test_a_note_added_to_a_panel_with_a_note_is_one_note_broken_anew():
    fig, ax = panel((3.1, 2.2))
    first = "final error 0: TPO at eta = 0.25, 2; axis linear below 0.0001"
    N.note_inside(ax, first, "zeros", fontsize=6.5)
    note = N.note_inside(ax, SAID, "progress", fontsize=6.5)
    assert ax.get_legend() is note and note.n_labels == 0
    fig.canvas.draw()
    assert [" ".join(t.get_text().split()) for t in note.get_texts()] == [first, SAID]
    box = note.get_frame().get_window_extent(fig.canvas.get_renderer())
    assert ax.bbox.x0 <= box.x0 and box.x1 <= ax.bbox.x1, (box, ax.bbox)  # broken to the panel
    plt.close(fig)


def test_a_note_goes_where_it_hides_less_band():
    # two spots clear of lines, the upper under a band: the lower one, though a note
    # otherwise prefers the top
    fig, ax = plt.subplots(figsize=(3.1, 2.2), dpi=150)
    x = np.linspace(0, 1, 200)
    for y in (0.01, 0.5, 0.99):
        ax.plot(x, np.full_like(x, y), lw=1)
    ax.fill_between(x, 0.5, 1.0, alpha=0.2, lw=0)
    ax.set_ylim(0, 1)
    note = N.note_inside(ax, "PPO: not run", "notes", fontsize=6.5)
    assert check_notes(fig) == [ax]
    box = ax.transAxes.inverted().transform_bbox(note.get_frame().get_window_extent(fig.canvas.get_renderer()))
    assert box.y1 < 0.5, box
    plt.close(fig)


@pytest.mark.slow  # reads every committed run
def test_the_committed_terminal_sweep_hides_no_line_a_note_could_leave_clear(tmp_path, monkeypatch):
    kept = []
    monkeypatch.setattr(P.plt, "close", kept.append)  # the figure as saved, kept open
    assert plot.main(["--figure", "terminal_h_sweep", "--results", str(plot.COMMITTED_TABLE),
                      "--out", str(tmp_path)]) == 0
    [fig] = [f for f in kept if len(f.axes) == 8]
    interaction_row = fig.axes[4:]
    assert all("prompt-matched runs" in " ".join(" ".join(t.get_text().split()) for n in ax.get_children()
                                                 if isinstance(n, N.Note) for t in n.get_texts())
               for ax in interaction_row)
    with P.plt.rc_context(P.PAPER_RC):  # the type the figure is drawn and saved in
        check_notes(fig)
        h10 = interaction_row[-1]  # room beside its curves: its note hides none of them
        [note] = [c for c in h10.get_children() if isinstance(c, N.Note)]
        box = note.get_frame().get_window_extent(fig.canvas.get_renderer())
        assert not inside(box, np.concatenate([along(l) for l in lines_of(h10)])).any(), box
    plt.close(fig)
