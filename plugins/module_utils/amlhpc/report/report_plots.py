# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""SVG plots of the HTML report, drawn in plain Python (standard library only).

Every function returns one SVG document as UTF-8 bytes; the page embeds it as a
``data:image/svg+xml;base64`` image. No plotting library is imported: drawing a plot costs
about a millisecond of controller CPU. The same data gives the same bytes.

Sizes are in inches at 100 px per inch (7.5 x 3.0 -> 750 x 300 px). Points whose x or y is
None, not a number, NaN or infinite are left out (a line breaks there); on a log2 axis so are
x <= 0. Axes cover the data with "nice" ticks (1, 2, 2.5 or 5 x 10^k, about five). Elements
carry classes (``panel``, ``title``, ``xlabel``, ``ylabel``, ``xtick``, ``ytick``, ``grid``,
``series`` with ``data-label``, ``line``, ``marker``, ``bar``, ``hline``, ``legend``, ``note``)
so that a reader (tests/report_reader.py) can tell what a plot shows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Optional

# One colour per series, colour-blind safe (Okabe-Ito), the same order in every plot.
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
PASS_COLOUR = "#009E73"
FAIL_COLOUR = "#D55E00"
SKIP_COLOUR = "#999999"

DPI = 100
FONT = "DejaVu Sans,Helvetica,Arial,sans-serif"
TEXT_COLOUR = "#222222"
AXIS_COLOUR = "#444444"
GRID_COLOUR = "#e3e3e3"
TITLE_PX, LABEL_PX, TICK_PX, LEGEND_PX = 13.0, 12.0, 10.0, 10.0
LINE_HEIGHT = 1.2  # of the font size
TICK_LEN = 4.0
MARKER_R = 2.5
MAX_LABEL_CHARS = 24  # per line of a tick label; longer ones lose their middle to an ellipsis
LEGEND_CHARS = 40  # of a legend label, likewise
ROTATE = 40.0  # degrees, bar labels when there are more than 4 groups
LEGEND_ROWS = 8  # at most; colours repeat after 8 series anyway
SVG_NS = "http://www.w3.org/2000/svg"


# --------------------------------------------------------------------------------------
# Numbers, ticks and labels (pure; tested directly)
# --------------------------------------------------------------------------------------
def finite(value: Any) -> Optional[float]:
    """``value`` as a float, or None when it is None, not a number, NaN or infinite."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def widen(lo: float, hi: float, *, integer: bool = False, zero: bool = False) -> tuple[float, float]:
    """[lo, hi] with some width: from 0 when ``zero``; a range with no width (one value, all
    equal, or no wider than float noise) is widened around it by a tenth of the value each way
    (by 1 when ``integer``), to [0, 1] around 0."""
    if zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi - lo > max(1e-9 * max(abs(lo), abs(hi)), 1e-200):
        return lo, hi
    if max(abs(lo), abs(hi)) <= 1e-200:
        return (-1.0, 1.0) if lo < 0 else (0.0, 1.0)
    # Not around 0, so not from 0 either (``zero`` has made a range from 0 to the values).
    if integer:
        return math.floor(lo) - 1.0, math.ceil(hi) + 1.0
    return lo - abs(lo) * 0.1, lo + abs(lo) * 0.1


def _candidate_steps(span: float, intervals: int, integer: bool) -> list[float]:
    exp = math.floor(math.log10(span / intervals))
    steps = []
    for e in range(exp, exp + 3):
        for mantissa in (1.0, 2.0, 2.5, 5.0):
            step = mantissa * 10.0 ** e
            if integer and (step < 1.0 or step != round(step)):
                continue
            steps.append(step)
    return steps or [1.0]


def _multiples(lo: float, hi: float, step: float) -> tuple[int, int]:
    """The multiples of ``step`` at or below ``lo`` and at or above ``hi`` (float noise such as
    0.30000000000000004 / 0.1 is no step further)."""
    a, b = lo / step, hi / step
    first, last = math.floor(a + 1e-12 * abs(a)), math.ceil(b - 1e-12 * abs(b))
    return first, max(last, first + 1)


def nice_ticks(lo: float, hi: float, *, integer: bool = False, zero: bool = False,
               intervals: int = 5) -> list[float]:
    """Evenly spaced ticks at a nice step (1, 2, 2.5 or 5 x 10^k; whole numbers when
    ``integer``) from at or below ``lo`` to at or above ``hi`` in at most ``intervals`` steps
    (about five ticks); from 0 when ``zero``. See :func:`widen` for a range with no width."""
    lo, hi = widen(lo, hi, integer=integer, zero=zero)
    steps = _candidate_steps(hi - lo, intervals, integer)
    step = next((s for s in steps if _multiples(lo, hi, s)[1] - _multiples(lo, hi, s)[0] <= intervals), steps[-1])
    first, last = _multiples(lo, hi, step)
    digits = max(0, 2 - math.floor(math.log10(step)))
    return [round(k * step, digits) + 0.0 for k in range(first, last + 1)]


def _decimals(step: float) -> int:
    """Decimals that show every multiple of ``step`` exactly (0.25 -> 2, 5 -> 0)."""
    for d in range(0, 12):
        scaled = step * 10 ** d
        if round(scaled) >= 1 and abs(scaled - round(scaled)) <= 1e-6 * scaled:
            return d
    return 12


_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _significant(value: float, step: float) -> str:
    """``value`` with as many significant digits as a multiple of ``step`` needs: 1.5e-108, 2e+300 -> 2e300."""
    mantissa = float(f"{step:e}".split("e")[0])
    digits = math.floor(math.log10(abs(value))) - math.floor(math.log10(step)) + 1 + (mantissa != int(mantissa))
    text = f"{value:.{max(1, digits)}g}"
    return re.sub(r"e([-+])0*(\d)", lambda m: "e" + m.group(1).replace("+", "") + m.group(2), text)


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """Short labels of evenly spaced ticks: 0.3 (not 0.30000000000000004), 2.5, 1500, 20k, 1.5M;
    steps below 0.0001 and ticks from 10^15 with significant digits (5e-5, 1.5e-108, 2e300)."""
    if not ticks:
        return []
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    big = max(abs(t) for t in ticks)
    # k, M, G, T when the ticks are big, and whole or with two decimals at most in that unit
    unit, suffix = next(((u, s) for u, s in _SI if big >= max(u, 1e4) and _decimals(step / u) <= 2), (1.0, ""))
    out = []
    for t in ticks:
        if abs(t) < step * 1e-6:
            out.append("0")
        elif step < 1e-4 or big >= 1e15:
            out.append(_significant(t, step))
        else:
            out.append(f"{t / unit:.{_decimals(step / unit)}f}" + suffix)
    return out


def log2_ticks(lo: float, hi: float) -> list[int]:
    """The exponents of the powers of two from at or below ``lo`` to at or above ``hi`` (both > 0)."""
    first = math.floor(math.log2(lo) + 1e-9)
    last = math.ceil(math.log2(hi) - 1e-9)
    if first == last:
        first, last = first - 1, last + 1
    return list(range(first, last + 1))


def log2_label(exp: int) -> str:
    """2^exp with a binary suffix: 8, 512, 1K, 64K, 1M, 8G (1K = 1024); 1/2, 1/4 below 1."""
    if exp < 0:
        return f"1/{2 ** -exp}"
    unit = min(exp // 10, 6)
    return f"{2 ** (exp - 10 * unit)}{' KMGTPE'[unit].strip()}"


def log2_labelled(exps: Sequence[int], room: float, label_px: float) -> list[int]:
    """The exponents to label so that labels ``label_px`` wide do not overlap over ``room`` px:
    every 1st, 2nd, 5th, 10th, ... power (on multiples of it, so 1K, 1M, 1G line up)."""
    if len(exps) < 2:
        return list(exps)
    pitch = room / (len(exps) - 1)
    for stride in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000):
        if stride * pitch >= label_px + 6:
            break
    labelled = [e for e in exps if e % stride == 0]
    return labelled if len(labelled) >= 2 else list(exps[::stride])


def label_stride(count: int, pitch: float, needed: float) -> int:
    """Label every n-th of ``count`` ticks ``pitch`` px apart when a label needs ``needed`` px."""
    if count <= 1 or pitch <= 0:
        return 1
    return max(1, math.ceil(needed / pitch - 1e-9))


_NARROW = frozenset("iljI.,:;'|! ")
_SEMI = frozenset("frt()[]{}-/\\\"*")
_WIDE = frozenset("mwMW@%")


def text_width(text: str, size: float) -> float:
    """Estimated width in px of the widest line of ``text`` in a sans-serif face (no font metrics
    here; on the wide side, DejaVu Sans's, so that labels fit in narrower faces too)."""
    def one(line: str) -> float:
        return size * sum(0.3 if c in _NARROW else 0.4 if c in _SEMI else 0.9 if c in _WIDE
                          else 0.72 if c.isupper() else 0.64 if c.isdigit() else 0.58 for c in line)
    return max((one(line) for line in str(text).split("\n")), default=0.0)


def shorten(text: Any, limit: int = MAX_LABEL_CHARS) -> str:
    """Each line of ``text`` at most ``limit`` characters, an ellipsis in the middle of a longer
    one (node names differ at their ends); at most 3 lines."""
    lines = str("" if text is None else text).split("\n")[:3]
    head = (limit - 1) // 2
    return "\n".join(line if len(line) <= limit else line[:head] + "\u2026" + line[len(line) - (limit - 1 - head):]
                     for line in lines)


# --------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------
def as_list(value: Any) -> list[Any]:
    """A list or tuple as a list; anything else (None, a number, a string) as no values."""
    return list(value) if isinstance(value, (list, tuple)) else []


def point_runs(xs: Any, ys: Any, logx: bool = False) -> list[list[tuple[float, float]]]:
    """The drawable points of a series as runs between left-out points (see the module's doc)."""
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in zip(as_list(xs), as_list(ys)):
        fx, fy = finite(x), finite(y)
        if fx is None or fy is None or (logx and fx <= 0):
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append((fx, fy))
    return [r for r in runs if r]


def step_vertices(run: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Steps-pre: y[i] holds over the interval that ends at x[i] (vertical at x[i-1], then horizontal)."""
    out = list(run[:1])
    for (x0, _unused), (x1, y1) in zip(run, run[1:]):
        out.extend([(x0, y1), (x1, y1)])
    return out


class Scale:
    """Data to pixels along one axis: [lo, hi] (exponents of 2 when ``log``) onto [px0, px1]."""

    def __init__(self, lo: float, hi: float, px0: float, px1: float, log: bool = False) -> None:
        self.lo, self.hi, self.px0, self.px1, self.log = lo, hi, px0, px1, log

    def __call__(self, value: float) -> float:
        v = math.log2(value) if self.log else value
        return self.px0 + (v - self.lo) / (self.hi - self.lo) * (self.px1 - self.px0)


# --------------------------------------------------------------------------------------
# SVG text
# --------------------------------------------------------------------------------------
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def esc(text: Any) -> str:
    """Text or an attribute value for XML: escaped, characters XML cannot carry left out."""
    s = _NOT_XML.sub("", str(text))
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def num(value: float) -> str:
    """A coordinate, to 0.1 px."""
    s = f"{value:.1f}"
    s = s[:-2] if s.endswith(".0") else s
    return "0" if s == "-0" else s


def _text(x: float, y: float, text: str, *, size: float, cls: str, anchor: str = "middle",
          rotate: Optional[float] = None, weight: str = "", fill: str = TEXT_COLOUR, central: bool = False) -> str:
    """One <text> at (x, y): the first line's baseline there (its middle, ``central``); lines
    after the first as <tspan>s below it."""
    lines = str(text).split("\n")
    attrs = f'class="{cls}" x="{num(x)}" y="{num(y)}" font-size="{num(size)}" fill="{fill}"'
    if anchor != "start":
        attrs += f' text-anchor="{anchor}"'
    if central:
        attrs += ' dominant-baseline="central"'
    if weight:
        attrs += f' font-weight="{weight}"'
    if rotate is not None:
        attrs += f' transform="rotate({num(rotate)} {num(x)} {num(y)})"'
    if len(lines) == 1:
        return f"<text {attrs}>{esc(lines[0])}</text>"
    spans = "".join(f'<tspan x="{num(x)}" dy="{LINE_HEIGHT if i else 0}em">{esc(line)}</tspan>'
                    for i, line in enumerate(lines))
    return f"<text {attrs}>{spans}</text>"


def _path(points: Sequence[tuple[float, float]]) -> str:
    """M x y L x y ...: horizontal and vertical moves as H and V."""
    out = []
    prev = None
    for x, y in points:
        if prev is None:
            out.append(f"M{num(x)} {num(y)}")
        elif num(y) == num(prev[1]):
            out.append(f"H{num(x)}")
        elif num(x) == num(prev[0]):
            out.append(f"V{num(y)}")
        else:
            out.append(f"L{num(x)} {num(y)}")
        prev = (x, y)
    return "".join(out)


def _fit(text: str, size: float, room: float) -> float:
    """The font size (at most ``size``) at which ``text`` fits ``room`` px."""
    width = text_width(text, size)
    return size if width <= room or width == 0 else max(6.0, size * room / width)


def document(width: float, height: float, parts: Sequence[str], title: str = "") -> bytes:
    """A whole SVG document of ``width`` x ``height`` px, white behind ``parts``."""
    w, h = num(width), num(height)
    head = (f'<svg xmlns="{SVG_NS}" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            f'font-family="{FONT}" role="img">')
    return "\n".join([head, f"<title>{esc(title)}</title>",
                      f'<rect class="background" x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>',
                      *parts, "</svg>"]).encode("utf-8") + b"\n"


# --------------------------------------------------------------------------------------
# Axes, legend
# --------------------------------------------------------------------------------------
class Frame:
    """The plot area of a panel, in px."""

    def __init__(self, left: float, top: float, right: float, bottom: float) -> None:
        self.left, self.top, self.right, self.bottom = left, top, right, bottom


def _frame(x0: float, y0: float, w: float, h: float, *, title: str, ylabel: str, ytick_w: float,
           below: float, right_pad: float = 0.0, min_left: float = 0.0) -> Frame:
    """The plot area once the title, the y label and tick labels, and ``below`` px under the
    axis are laid out, at least ``min_left`` px from the panel's left edge."""
    top = y0 + (TITLE_PX * LINE_HEIGHT * len(title.split("\n")) + 10 if title else 10)
    left = x0 + max(min_left, 8 + (LABEL_PX * LINE_HEIGHT + 4 if ylabel else 0) + ytick_w + TICK_LEN + 4)
    right = x0 + w - max(12.0, right_pad)
    bottom = y0 + h - max(below, 10.0)
    # A panel too small for its labels still gets a plot area.
    return Frame(min(left, x0 + w / 2 - 1), min(top, y0 + h / 2 - 1), max(right, x0 + w / 2 + 1),
                 max(bottom, y0 + h / 2 + 1))


def _titles(f: Frame, x0: float, w: float, y0: float, h: float, title: str, xlabel: str, ylabel: str,
            ytick_w: float) -> list[str]:
    """The title over the plot area, the x label under it, the y label left of the y tick labels."""
    out = []
    if title:
        out.append(_text((f.left + f.right) / 2, y0 + 6 + TITLE_PX, title, cls="title",
                         size=_fit(title, TITLE_PX, w - 8), weight="bold"))
    if xlabel:
        out.append(_text((f.left + f.right) / 2, y0 + h - 6, xlabel, cls="xlabel",
                         size=_fit(xlabel, LABEL_PX, w - 8)))
    if ylabel:
        cy = (f.top + f.bottom) / 2
        x = max(x0 + 6 + LABEL_PX, f.left - TICK_LEN - 3 - ytick_w - 5)
        out.append(_text(x, cy, ylabel, cls="ylabel", rotate=-90.0,
                         size=_fit(ylabel, LABEL_PX, f.bottom - f.top)))
    return out


def _yaxis(f: Frame, ys: Scale, ticks: Sequence[float], labels: Sequence[str]) -> list[str]:
    grid = "".join(f"M{num(f.left)} {num(ys(t))}H{num(f.right)}" for t in ticks)
    marks = "".join(f"M{num(f.left - TICK_LEN)} {num(ys(t))}H{num(f.left)}" for t in ticks)
    out = [f'<path class="grid" d="{grid}" stroke="{GRID_COLOUR}" stroke-width="1" fill="none"/>',
           f'<path class="tickmarks" d="{marks}" stroke="{AXIS_COLOUR}" stroke-width="1" fill="none"/>']
    out.extend(_text(f.left - TICK_LEN - 3, ys(t), label, cls="ytick", size=TICK_PX, anchor="end", central=True)
               for t, label in zip(ticks, labels))
    return out


def _xaxis(f: Frame, positions: Sequence[float], labelled: Sequence[tuple[float, str]], *, grid: bool,
           rotate: bool = False) -> list[str]:
    out = []
    if grid and labelled:
        d = "".join(f"M{num(x)} {num(f.top)}V{num(f.bottom)}" for x, _unused in labelled)
        out.append(f'<path class="grid" d="{d}" stroke="{GRID_COLOUR}" stroke-width="1" fill="none"/>')
    marks = "".join(f"M{num(x)} {num(f.bottom)}v{num(TICK_LEN)}" for x in positions)
    if marks:
        out.append(f'<path class="tickmarks" d="{marks}" stroke="{AXIS_COLOUR}" stroke-width="1" fill="none"/>')
    y = f.bottom + TICK_LEN + 2 + TICK_PX
    for x, label in labelled:
        if rotate:
            out.append(_text(x, y - TICK_PX * 0.5, label, cls="xtick", size=TICK_PX, anchor="end", rotate=-ROTATE,
                             central=True))
        else:
            out.append(_text(x, y, label, cls="xtick", size=TICK_PX))
    return out


def _box(f: Frame) -> str:
    return (f'<rect class="axes" x="{num(f.left)}" y="{num(f.top)}" width="{num(f.right - f.left)}" '
            f'height="{num(f.bottom - f.top)}" fill="none" stroke="{AXIS_COLOUR}" stroke-width="1"/>')


def _hline(f: Frame, y: float) -> str:
    return (f'<path class="hline" d="M{num(f.left)} {num(y)}H{num(f.right)}" stroke="{FAIL_COLOUR}" '
            f'stroke-width="1.2" stroke-dasharray="5 3" fill="none"/>')


def _overlays(out: list[str], f: Frame, ysc: Scale, hval: Optional[float], hlabel: str,
              entries: list[tuple[str, str, str]], obstacles: list[Box], *, empty: bool) -> None:
    """What a line or bar panel draws over its data: the dashed threshold line at ``hval`` (an
    obstacle for the legend, with a legend entry where it has a label) and, where the panel has
    no data (``empty``), the "no data" note."""
    if hval is not None:
        out.append(_hline(f, ysc(hval)))
        obstacles.append((f.left, ysc(hval), f.right, ysc(hval)))
        if hlabel:
            entries.append(("hline", FAIL_COLOUR, hlabel))
    if empty:
        out.append(_text((f.left + f.right) / 2, (f.top + f.bottom) / 2, "no data", cls="note", size=LABEL_PX,
                         fill="#777777"))


def _legend_sample(kind: str, colour: str, x: float, y: float) -> str:
    if kind == "bar":
        return f'<rect x="{num(x)}" y="{num(y - 4)}" width="16" height="8" fill="{colour}"/>'
    if kind == "hline":
        return (f'<path d="M{num(x)} {num(y)}h16" stroke="{colour}" stroke-width="1.2" stroke-dasharray="5 3" '
                'fill="none"/>')
    if kind == "line":
        return (f'<path d="M{num(x)} {num(y)}h16" stroke="{colour}" stroke-width="1.5" fill="none"/>'
                f'<circle cx="{num(x + 8)}" cy="{num(y)}" r="{num(MARKER_R)}" fill="{colour}"/>')
    return ""


Box = "tuple[float, float, float, float]"


def segment_boxes(points: Sequence[tuple[float, float]], every: float = 8.0) -> list[tuple[float, float, float, float]]:
    """Points along a polyline (px) at most ``every`` px apart, as boxes of no size: what a legend
    box placed over the line would hide."""
    out = [(x, y, x, y) for x, y in points[:1]]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        n = min(200, max(1, math.ceil(math.hypot(x1 - x0, y1 - y0) / every)))
        out.extend((x0 + (x1 - x0) * k / n, y0 + (y1 - y0) * k / n) * 2 for k in range(1, n + 1))
    return out


def legend(f: Frame, entries: Sequence[tuple[str, str, str]], obstacles: Sequence[Box]) -> list[str]:
    """A legend box of ``(kind, colour, label)`` entries (kind: line, bar, hline) in the corner of
    the plot area that overlaps the fewest ``obstacles`` (boxes x0, y0, x1, y1 of what is drawn); at most :data:`LEGEND_ROWS`
    rows, the last ``+N more`` when there are more entries."""
    if not entries:
        return []
    row = LEGEND_PX * 1.4
    fits = max(1, min(LEGEND_ROWS, int((f.bottom - f.top - 10) // row)))
    shown = list(entries) if len(entries) <= fits else [*entries[:fits - 1], ("more", "", f"+{len(entries) - fits + 1} more")]
    labels = [shorten(e[2].replace("\n", " "), LEGEND_CHARS) for e in shown]
    w = 8 + 20 + 4 + max(text_width(t, LEGEND_PX) for t in labels) + 8
    h = len(shown) * row + 8
    corners = [(f.right - w - 6, f.top + 6), (f.left + 6, f.top + 6), (f.left + 6, f.bottom - h - 6),
               (f.right - w - 6, f.bottom - h - 6)]

    def covered(corner: tuple[float, float]) -> int:
        x, y = corner
        return sum(1 for x0, y0, x1, y1 in obstacles if x0 <= x + w + 3 and x1 >= x - 3 and y0 <= y + h + 3
                   and y1 >= y - 3)

    x, y = min(corners, key=covered)
    out = ['<g class="legend">',
           f'<rect x="{num(x)}" y="{num(y)}" width="{num(w)}" height="{num(h)}" fill="#ffffff" '
           f'fill-opacity="0.85" stroke="#cccccc" stroke-width="1" rx="3"/>']
    for i, ((kind, colour, _unused), label) in enumerate(zip(shown, labels)):
        cy = y + 4 + row * (i + 0.5)
        out.append(_legend_sample(kind, colour, x + 8, cy))
        out.append(_text(x + 32, cy + LEGEND_PX * 0.35, label, cls="legend-label", size=LEGEND_PX, anchor="start"))
    out.append("</g>")
    return out


# --------------------------------------------------------------------------------------
# Line plots
# --------------------------------------------------------------------------------------
def _hline_of(hline: Any) -> tuple[Optional[float], str]:
    if not isinstance(hline, (tuple, list)) or not hline:
        return None, ""
    return finite(hline[0]), str(hline[1]) if len(hline) > 1 and hline[1] else ""


def _x_axis_of(panel: Mapping[str, Any], xs: Sequence[float], room: float) -> tuple[Scale, list[float], list[tuple[float, str]]]:
    """The x scale (onto [0, room]), the tick positions and the labelled ones, for a panel's x values."""
    if panel.get("logx"):
        exps = log2_ticks(min(xs), max(xs)) if xs else [0, 1]
        scale = Scale(exps[0], exps[-1], 0.0, room, log=True)
        widest = max(text_width(log2_label(e), TICK_PX) for e in exps)
        labelled = log2_labelled(exps, room, widest)
        return scale, [2.0 ** e for e in exps], [(2.0 ** e, log2_label(e)) for e in labelled]
    ticks = nice_ticks(min(xs), max(xs), integer=bool(panel.get("integer_x"))) if xs else nice_ticks(0.0, 1.0)
    labels = tick_labels(ticks)
    stride = label_stride(len(ticks), room / max(1, len(ticks) - 1), max(text_width(t, TICK_PX) for t in labels) + 6)
    return (Scale(ticks[0], ticks[-1], 0.0, room), ticks,
            [(t, label) for i, (t, label) in enumerate(zip(ticks, labels)) if i % stride == 0])


def _line_panel(panel: Mapping[str, Any], x0: float, w: float, h: float) -> list[str]:
    logx, steps = bool(panel.get("logx")), bool(panel.get("steps"))
    title, xlabel, ylabel = (str(panel.get(k) or "") for k in ("title", "xlabel", "ylabel"))
    series = [(s, point_runs(s.get("x"), s.get("y"), logx)) for s in as_list(panel.get("series")) if isinstance(s, Mapping)]
    points = [p for _unused, runs in series for run in runs for p in run]
    hval, hlabel = _hline_of(panel.get("hline"))
    ys = [p[1] for p in points] + ([hval] if hval is not None else [])
    yt = nice_ticks(min(ys), max(ys)) if ys else nice_ticks(0.0, 1.0)
    ylabels = tick_labels(yt)
    xscale, xpos, xlabelled = _x_axis_of(panel, [p[0] for p in points], w)
    last_w = text_width(xlabelled[-1][1], TICK_PX) / 2 + 4 if xlabelled else 0.0
    ytick_w = max(text_width(t, TICK_PX) for t in ylabels)
    f = _frame(x0, 0.0, w, h, title=title, ylabel=ylabel, ytick_w=ytick_w,
               below=TICK_LEN + 6 + TICK_PX * LINE_HEIGHT + (LABEL_PX * LINE_HEIGHT + 4 if xlabel else 0),
               right_pad=last_w)
    # Now that the plot area is known, the x axis again over its real width.
    xscale, xpos, xlabelled = _x_axis_of(panel, [p[0] for p in points], f.right - f.left)
    xs = Scale(xscale.lo, xscale.hi, f.left, f.right, log=logx)
    ysc = Scale(yt[0], yt[-1], f.bottom, f.top)
    out = ['<g class="panel">', *_yaxis(f, ysc, yt, ylabels),
           *_xaxis(f, [xs(p) for p in xpos], [(xs(p), label) for p, label in xlabelled], grid=True)]
    entries, obstacles = [], []
    for i, (s, runs) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        label = s.get("label")
        out.append(f'<g class="series" data-label="{esc(label or "")}">')
        for run in runs:
            px = [(xs(x), ysc(y)) for x, y in (step_vertices(run) if steps else run)]
            obstacles.extend(segment_boxes(px))
            if len(px) > 1:
                out.append(f'<path class="line" d="{_path(px)}" stroke="{colour}" stroke-width="1.5" '
                           'stroke-linejoin="round" fill="none"/>')
            out.extend(f'<circle class="marker" cx="{num(xs(x))}" cy="{num(ysc(y))}" r="{num(MARKER_R)}" '
                       f'fill="{colour}"/>' for x, y in run)
        out.append("</g>")
        if label:
            entries.append(("line", colour, str(label)))
    _overlays(out, f, ysc, hval, hlabel, entries, obstacles, empty=not points)
    out.extend([_box(f), *legend(f, entries, obstacles), *_titles(f, x0, w, 0.0, h, title, xlabel, ylabel, ytick_w), "</g>"])
    return out


def lines(panels: Sequence[Mapping[str, Any]], width: float = 7.5, height: float = 3.0) -> bytes:
    """Line plots side by side, one panel each (wider than ``width`` for more than two).

    A panel: ``{"title", "xlabel", "ylabel", "series": [{"label", "x": [...], "y": [...]}],
    "logx": bool (base 2; ticks at powers of two labelled 8, 1K, 64K, 1M, ... with 1K = 1024),
    "steps": bool (a rate over the interval ending at x: y[i] holds over (x[i-1], x[i]]),
    "integer_x": bool, "hline": (value, label) or None}``. Each series is a line with a small
    circle at each point, in the colours of :data:`COLOURS` in order; a legend when a series
    has a label or there is a line at ``hline`` (dashed, :data:`FAIL_COLOUR`).
    """
    panels = [p for p in panels if isinstance(p, Mapping)]
    n = len(panels)
    total_w = width * DPI * (1 if n <= 2 else n / 2)
    total_h = height * DPI
    parts = []
    for i, panel in enumerate(panels):
        parts.extend(_line_panel(panel, i * total_w / n, total_w / n, total_h))
    return document(total_w, total_h, parts, "; ".join(str(p.get("title") or "") for p in panels))


# --------------------------------------------------------------------------------------
# Bars
# --------------------------------------------------------------------------------------
def _bar_labels(groups: Sequence[Any], room: float) -> tuple[list[str], bool, int, float, float]:
    """Group labels, whether rotated, every how many one is shown, the px they need under the
    axis and left of the first group's centre."""
    labels = [shorten(g) for g in groups]
    rotate = len(labels) > 4
    lines = max((len(t.split("\n")) for t in labels), default=1)
    widest = max((text_width(t, TICK_PX) for t in labels), default=0.0)
    pitch = room / max(1, len(labels))
    if rotate:
        a = math.radians(ROTATE)
        stride = label_stride(len(labels), pitch * math.sin(a), lines * TICK_PX * LINE_HEIGHT + 2)
        below = widest * math.sin(a) + lines * TICK_PX * LINE_HEIGHT * math.cos(a) + TICK_LEN + 10
        left = widest * math.cos(a) + 6
    else:
        stride = label_stride(len(labels), pitch, widest + 8)
        below = lines * TICK_PX * LINE_HEIGHT + TICK_LEN + 6
        left = text_width(labels[0], TICK_PX) / 2 + 4 if labels else 0.0
    return labels, rotate, stride, below, left


def _bar_colour(s: Mapping[str, Any], i: int, j: int) -> str:
    colours = s.get("colours")
    if isinstance(colours, Sequence) and not isinstance(colours, str) and j < len(colours) and colours[j]:
        return str(colours[j])
    return str(s.get("colour") or COLOURS[i % len(COLOURS)])


def bars(groups: Sequence[str], series: Sequence[Mapping[str, Any]], *, title: str, ylabel: str,
         hline: tuple[float, str] | None = None, integer: bool = False, width: float = 7.5,
         height: float = 3.0) -> bytes:
    """Grouped vertical bars: one group per label in ``groups``, one bar per series
    (``{"label", "values": [...] (None = no bar), "colour" or "colours": [...] optional}``);
    ``integer``: counts, whole-number ticks. The y axis starts at 0 (or below, for negative
    values); group labels are rotated when there are more than 4 groups, and only every n-th
    is shown when they would overlap."""
    w, h = width * DPI, height * DPI
    series = [s for s in series if isinstance(s, Mapping)]
    values = [[finite(v) for v in as_list(s.get("values"))[:len(groups)]] for s in series]
    hval, hlabel = _hline_of(hline)
    ys = [v for vs in values for v in vs if v is not None] + ([hval] if hval is not None else [])
    yt = nice_ticks(min(ys, default=0.0), max(ys, default=0.0), integer=integer, zero=True)
    ylabels = tick_labels(yt)
    _labels, _rotate, _stride, below, left = _bar_labels(groups, w * 0.8)
    room = w * 0.8 / max(1, len(groups))  # about what a group gets: its centre is half of it inside the axes
    ytick_w = max(text_width(t, TICK_PX) for t in ylabels)
    f = _frame(0.0, 0.0, w, h, title=title, ylabel=ylabel, ytick_w=ytick_w,
               below=min(below, h * 0.45), min_left=min(left - room / 2, w * 0.3))
    labels, rotate, stride, _below, _left = _bar_labels(groups, f.right - f.left)
    xs = Scale(-0.5, max(len(groups), 1) - 0.5, f.left, f.right)
    ysc = Scale(yt[0], yt[-1], f.bottom, f.top)
    out = ['<g class="panel">', *_yaxis(f, ysc, yt, ylabels),
           *_xaxis(f, [xs(g) for g in range(len(groups))],
                   [(xs(g), t) for g, t in enumerate(labels) if g % stride == 0], grid=False, rotate=rotate)]
    n = max(1, len(series))
    step = 0.8 / n
    unit = xs(1.0) - xs(0.0)
    entries, obstacles = [], []
    for i, (s, vals) in enumerate(zip(series, values)):
        out.append(f'<g class="series" data-label="{esc(s.get("label") or "")}">')
        for g, v in enumerate(vals):
            if v is None:
                continue
            centre = xs(g + (i - (n - 1) / 2) * step)
            top, base = ysc(max(v, 0.0)), ysc(min(v, 0.0))
            obstacles.append((centre - step * 0.45 * unit, top, centre + step * 0.45 * unit, base))
            out.append(f'<rect class="bar" x="{num(centre - step * 0.45 * unit)}" y="{num(top)}" '
                       f'width="{num(step * 0.9 * unit)}" height="{num(base - top)}" fill="{_bar_colour(s, i, g)}"/>')
        out.append("</g>")
        if s.get("label"):
            entries.append(("bar", _bar_colour(s, i, 0), str(s["label"])))
    if yt[0] < 0:
        out.append(f'<path class="zero" d="M{num(f.left)} {num(ysc(0.0))}H{num(f.right)}" stroke="{AXIS_COLOUR}" '
                   'stroke-width="1" fill="none"/>')
    _overlays(out, f, ysc, hval, hlabel, entries, obstacles, empty=not ys)
    out.extend([_box(f), *legend(f, entries, obstacles), *_titles(f, 0.0, w, 0.0, h, title, "", ylabel, ytick_w), "</g>"])
    return document(w, h, out, title)
