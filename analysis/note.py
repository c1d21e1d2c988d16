"""A note inside a panel, placed where it hides the least of what the panel draws.

matplotlib's loc="best" scores nine fixed spots by the vertices under them, so a panel
with long flat lines (many vertices) pushes a note onto a lone curve. A Note instead
renders the panel's data to pixels (its lines, bars and other text; apart, its bands) and,
over every spot of a fine grid and a few line breaks of its text, takes the one that covers
the fewest pixels of lines, then of bands, then the fewest lines of text, then the
spot nearest a corner. It is drawn above the bands and bars (which it avoids as it avoids
lines) and beneath the lines, so a line no spot avoids still shows. Where no line break
fits the panel, the one that overflows it least sits in its upper left corner.
"""
from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text

from .style import LEGEND_PT

ZORDER = 1.5  # fill_between's bands draw at 1, lines at 2
SHARES = (1.0, 0.7, 0.5, 0.35, 0.25)  # the line breaks tried, as shares of the longest statement
MIN_CHARS = 16
GRID_PT = 2.0  # the spots tried are this far apart, in points


def wraps(text: str) -> list[list[str]]:
    """Each line of the text (a statement) broken between words to each of SHARES of the
    longest statement's length: a list of statements per share, each distinct once,
    widest first."""
    if not text:
        return [[]]
    longest = max(map(len, text.split("\n")))
    out = []
    for share in SHARES:
        chars = max(MIN_CHARS, int(share * longest))
        tried = [textwrap.fill(line, chars, break_long_words=False, break_on_hyphens=False)
                 for line in text.split("\n")]
        if tried not in out:
            out.append(tried)
    return out


def is_line(artist) -> bool:
    """Drawn data a note must not hide: lines, segments, bars, other text."""
    return isinstance(artist, (Line2D, LineCollection, Text, Patch))


def origin(ax) -> tuple[int, int]:
    """The display pixel of the axes' box that ink's row 0, column 0 is."""
    return max(int(round(ax.bbox.x0)), 0), max(int(round(ax.bbox.y0)), 0)


def ink(ax, renderer, kinds) -> np.ndarray:
    """Which pixels of the axes' box the visible artists of `kinds` (a predicate) paint:
    a boolean array, rows from the box's bottom, [0, 0] at origin(ax)."""
    fig = ax.figure
    w, h = int(np.ceil(fig.bbox.width)), int(np.ceil(fig.bbox.height))
    canvas = RendererAgg(w, h, fig.dpi)
    skip = {id(a) for a in (ax.patch, ax.legend_, ax.xaxis, ax.yaxis, ax.title, ax._left_title,
                            ax._right_title, *ax.spines.values())}
    for artist in ax.get_children():
        if id(artist) not in skip and artist.get_visible() and kinds(artist):
            artist.draw(canvas)
    alpha = np.asarray(canvas.buffer_rgba())[::-1, :, 3] > 0  # rows from the figure's bottom
    x0, y0 = origin(ax)
    x1, y1 = int(round(ax.bbox.x1)), int(round(ax.bbox.y1))
    return alpha[y0:min(y1, h), x0:min(x1, w)]


def _sums(mask: np.ndarray) -> np.ndarray:
    return np.pad(mask.astype(np.int64).cumsum(0).cumsum(1), ((1, 0), (1, 0)))


def _covered(sums: np.ndarray, xs, ys, w: int, h: int) -> np.ndarray:
    """Pixels set within each w x h box whose lower left is (xs[i], ys[j]): [j, i]."""
    X, Y = np.meshgrid(xs, ys)
    return sums[Y + h, X + w] - sums[Y, X + w] - sums[Y + h, X] + sums[Y, X]


class Note(Legend):
    """A legend whose last entries are a note's statements, one each (the entries before
    them: the panel's own legend, kept in the same box), placed as the module says."""

    def __init__(self, ax, handles, labels, text: str, **kw):
        self.text, self.n_labels = text, len(labels)
        self.texts_tried = wraps(text)
        first = self.texts_tried[0]
        super().__init__(ax, [*handles, *[Patch(visible=False)] * len(first)], [*labels, *first], loc="best", **kw)
        self.set_zorder(ZORDER)
        self.set_in_layout(False)  # inside the panel: never a reason to shrink it
        self._masks = None

    def _spot(self, width, height, renderer):
        """(line pixels, area pixels, corner distance, x, y) of the best spot for a box of
        width x height pixels; a box larger than the panel scores more than any that fits,
        the more the larger."""
        line, area = self._masks
        x0, y0 = origin(self.parent)
        pad = int(np.ceil(self.borderaxespad * renderer.points_to_pixels(self._fontsize)))
        H, W = line.shape
        w, h = int(np.ceil(width)), int(np.ceil(height))
        hi = (W - w - pad, H - h - pad)
        if hi[0] < pad or hi[1] < pad:  # its upper left corner
            over = max(0, pad - hi[0]) + max(0, pad - hi[1])
            return line.size + 1 + over, area.size + 1, 0, x0 + pad, y0 + H - pad - h
        step = max(1, int(round(renderer.points_to_pixels(GRID_PT))))
        xs = np.unique(np.r_[np.arange(pad, hi[0] + 1, step), hi[0]])
        ys = np.unique(np.r_[np.arange(pad, hi[1] + 1, step), hi[1]])
        lines, areas = (_covered(s, xs, ys, w, h) for s in (_sums(line), _sums(area)))
        X, Y = np.meshgrid(xs, ys)
        corner = np.minimum(X - pad, hi[0] - X) + np.minimum(Y - pad, hi[1] - Y)
        # lexsort: the last key first; ties go to the top, then the right
        j = np.lexsort((-X.ravel(), -Y.ravel(), corner.ravel(), areas.ravel(), lines.ravel()))[0]
        return int(lines.flat[j]), int(areas.flat[j]), int(corner.flat[j]), x0 + X.flat[j], y0 + Y.flat[j]

    def _choose(self, renderer):
        """Measure the panel and set the line break whose best spot hides the least."""
        ax = self.parent
        self._masks = (ink(ax, renderer, is_line),
                       ink(ax, renderer, lambda a: isinstance(a, PolyCollection)))
        texts = self.texts[self.n_labels:]
        best = None
        for n, tried in enumerate(self.texts_tried):
            for t, line in zip(texts, tried):
                t.set_text(line)
            box = self._legend_box.get_bbox(renderer)
            lines, areas, corner, _, _ = self._spot(box.width, box.height, renderer)
            if best is None or (lines, areas, n, corner) < best[0]:
                best = (lines, areas, n, corner), tried
        for t, line in zip(texts, best[1]):
            t.set_text(line)

    def draw(self, renderer):
        if not self.get_visible():
            return
        try:
            self._choose(renderer)
            super().draw(renderer)
        finally:
            self._masks = None

    def _find_best_position(self, width, height, renderer):
        if self._masks is not None:  # within draw
            return self._spot(width, height, renderer)[3:]
        try:  # asked outside draw (a layout pass, a window extent): as draw would place it
            self._choose(renderer)
            box = self._legend_box.get_bbox(renderer)
            return self._spot(box.width, box.height, renderer)[3:]
        finally:
            self._masks = None


def note_inside(ax, text: str, gid: str, fontsize: float = LEGEND_PT, labelcolor=None,
                **legend_kw) -> Note | None:
    """Put `text` inside the panel as a Note; a legend the panel has joins the note's box
    (its entries first: two boxes would be placed over each other). With text "", the
    panel's legend alone, placed as a note is; None where there is neither."""
    own = ax.get_legend()
    handles, labels = [], []
    if own is not None:
        handles, labels = own.legend_handles, [t.get_text() for t in own.get_texts()]
        if isinstance(own, Note):  # its legend entries, and its statements before these
            handles, labels = handles[:own.n_labels], labels[:own.n_labels]
            text = "\n".join(filter(None, [own.text, text]))
        drawn = ax.get_legend_handles_labels()  # the artists themselves, where it named them
        handles = drawn[0] if drawn[1] == labels else handles
        own.remove()
    if not labels and not text:
        return None
    note = Note(ax, handles, labels, text,
                fontsize=own.get_texts()[0].get_fontsize() if labels else fontsize,
                handlelength=None if labels else 0, handletextpad=None if labels else 0,
                borderpad=0.3, labelspacing=0.2, frameon=True, framealpha=0.85,
                edgecolor="none" if not labels else None, **legend_kw)
    for t in note.texts[len(labels):]:
        t.set_fontsize(fontsize)
        if labelcolor:
            t.set_color(labelcolor)
    ax.legend_ = note
    note._remove_method = ax._remove_legend
    note.set_gid(gid)
    return note
