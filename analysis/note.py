"""A note inside a panel, placed where it hides the least of what the panel draws.

matplotlib's loc="best" scores nine fixed spots by the vertices under them, so a panel
with long flat lines (many vertices) pushes a note onto a lone curve. A Note instead
renders the panel's data to pixels (its lines, bars and other text; apart, its bands) and,
over every spot of a fine grid and a few line breaks of its text, takes the one that covers
the fewest pixels of lines, then of bands, then the fewest lines of text, then the
spot nearest a corner. It is drawn above the bands and beneath the lines, so a line no
spot avoids still shows. A note too wide for its panel at every line break tried sits in
its upper left corner.
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
SHARES = (1.0, 0.7, 0.5, 0.35)  # the line breaks tried, as shares of the longest statement
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
    return isinstance(artist, (Line2D, LineCollection, Text)) or (
        isinstance(artist, Patch) and not isinstance(artist, Legend))


def ink(ax, renderer, kinds) -> np.ndarray:
    """Which pixels of the axes' box the visible artists of `kinds` (a predicate) paint:
    a boolean array, rows from the box's bottom."""
    fig = ax.figure
    w, h = int(np.ceil(fig.bbox.width)), int(np.ceil(fig.bbox.height))
    canvas = RendererAgg(w, h, fig.dpi)
    for artist in ax.get_children():
        if artist.get_visible() and kinds(artist) and artist is not ax.patch and artist is not ax.legend_ \
                and artist not in ax.spines.values() and artist not in (ax.xaxis, ax.yaxis) \
                and artist not in (ax.title, ax._left_title, ax._right_title):
            artist.draw(canvas)
    alpha = np.asarray(canvas.buffer_rgba())[::-1, :, 3] > 0  # rows from the figure's bottom
    x0, y0, x1, y1 = (int(round(v)) for v in ax.bbox.extents)
    return alpha[max(y0, 0):min(y1, h), max(x0, 0):min(x1, w)]


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
        self.texts_tried = wraps(text)
        first = self.texts_tried[0]
        super().__init__(ax, [*handles, *[Patch(visible=False)] * len(first)], [*labels, *first], loc="best", **kw)
        self.set_zorder(ZORDER)
        self.set_in_layout(False)  # inside the panel: never a reason to shrink it
        self._masks = None

    def _spot(self, width, height, renderer):
        """(line pixels, area pixels, corner distance, x, y) of the best spot for a box of
        width x height pixels."""
        ax = self.parent
        line, area = self._masks
        pad = self.borderaxespad * renderer.points_to_pixels(self._fontsize)
        H, W = line.shape
        w, h = int(np.ceil(width)), int(np.ceil(height))
        lo, hi = int(np.ceil(pad)), (W - w - int(np.ceil(pad)), H - h - int(np.ceil(pad)))
        if hi[0] < lo or hi[1] < lo:  # larger than the panel: its upper left corner, the worst spot
            return line.size + 1, area.size + 1, 0, ax.bbox.x0 + pad, ax.bbox.y1 - pad - height
        step = max(1, int(round(renderer.points_to_pixels(GRID_PT))))
        xs = np.unique(np.r_[np.arange(lo, hi[0] + 1, step), hi[0]])
        ys = np.unique(np.r_[np.arange(lo, hi[1] + 1, step), hi[1]])
        lines, areas = (_covered(s, xs, ys, w, h) for s in (_sums(line), _sums(area)))
        X, Y = np.meshgrid(xs, ys)
        corner = np.minimum(X - lo, hi[0] - X) + np.minimum(Y - lo, hi[1] - Y)
        # lexsort: the last key first; ties go to the top, then the right
        j = np.lexsort((-X.ravel(), -Y.ravel(), corner.ravel(), areas.ravel(), lines.ravel()))[0]
        return (int(lines.flat[j]), int(areas.flat[j]), int(corner.flat[j]),
                ax.bbox.x0 + X.flat[j], ax.bbox.y0 + Y.flat[j])

    def _measure(self, renderer):
        ax = self.parent
        self._masks = (ink(ax, renderer, is_line),
                       ink(ax, renderer, lambda a: isinstance(a, PolyCollection)))

    def draw(self, renderer):
        if not self.get_visible():
            return
        self._measure(renderer)
        texts = self.texts[len(self.texts) - len(self.texts_tried[0]):]
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
        try:
            super().draw(renderer)
        finally:
            self._masks = None

    def _find_best_position(self, width, height, renderer):
        if self._masks is not None:  # within draw
            return self._spot(width, height, renderer)[3:]
        self._measure(renderer)  # asked outside draw (a layout pass)
        try:
            return self._spot(width, height, renderer)[3:]
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
