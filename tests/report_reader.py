"""Read the run's report.html back the way a browser would see it (stdlib only).

Used by the unit tests of plugins/module_utils/amlhpc/report/report_html.py and by the
integration test that runs the local default: sections by id, their text, tables and
images; an SVG reader that proves an embedded plot is a whole, valid image and tells what it
shows (panels, ticks, series, bars, markers, legend).
"""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from typing import Any

SVG_NS = "http://www.w3.org/2000/svg"
SVG_URI = "data:image/svg+xml;base64,"
_S = "{" + SVG_NS + "}"
_PATH_TOKEN = re.compile(r"[MLHVZmlhvz]|-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_SI = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def path_points(d: str) -> list[list[tuple[float, float]]]:
    """The vertices of an SVG path's subpaths (M, L, H, V, Z and their relative forms, the
    commands the report draws with; ValueError for any other)."""
    subpaths: list[list[tuple[float, float]]] = []
    x = y = 0.0
    cmd = ""
    tokens = _PATH_TOKEN.findall(d)
    if "".join(tokens).replace(" ", "") != re.sub(r"[\s,]", "", d):
        raise ValueError(f"path with commands the report does not draw with: {d[:60]!r}")
    i = 0
    while i < len(tokens):
        if tokens[i].isalpha():
            cmd = tokens[i]
            i += 1
            if cmd in "Zz":
                continue
        if not cmd:
            raise ValueError(f"path starts with a number: {d[:60]!r}")
        if cmd in "MLml":
            dx, dy = float(tokens[i]), float(tokens[i + 1])
            i += 2
            x, y = (x + dx, y + dy) if cmd.islower() else (dx, dy)
            if cmd in "Mm":
                subpaths.append([])
                cmd = "l" if cmd == "m" else "L"
        elif cmd in "Hh":
            x = x + float(tokens[i]) if cmd == "h" else float(tokens[i])
            i += 1
        else:
            y = y + float(tokens[i]) if cmd == "v" else float(tokens[i])
            i += 1
        if not subpaths:
            raise ValueError(f"path draws before it moves: {d[:60]!r}")
        subpaths[-1].append((x, y))
    return subpaths


def _parse_svg(data: bytes | str) -> ET.Element:
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise ValueError(f"not well-formed XML: {exc}") from exc
    if root.tag != _S + "svg":
        raise ValueError(f"root element is {root.tag!r}, not svg in the SVG namespace")
    return root


def _drawn_points(root: ET.Element):
    """(x, y) of every place the document draws at: rectangles' corners, circles' extent,
    text anchors, path vertices."""
    for el in root.iter():
        tag = el.tag.replace(_S, "")
        if tag == "rect":
            x, y = float(el.get("x", 0)), float(el.get("y", 0))
            w, h = float(el.get("width", 0)), float(el.get("height", 0))
            if w < 0 or h < 0:
                raise ValueError(f"rect with a negative size: {el.attrib}")
            yield from ((x, y), (x + w, y + h))
        elif tag == "circle":
            cx, cy, r = float(el.get("cx", 0)), float(el.get("cy", 0)), float(el.get("r", 0))
            yield from ((cx - r, cy - r), (cx + r, cy + r))
        elif tag in ("text", "tspan") and el.get("y") is not None:
            yield float(el.get("x", 0)), float(el.get("y", 0))
        elif tag == "path":
            for sub in path_points(el.get("d", "")):
                yield from sub


def decode_svg(data: bytes | str) -> tuple[int, int]:
    """(width, height) of an SVG image after checking that it is well-formed XML whose root is
    svg in the SVG namespace, with a viewBox from (0, 0) the size of its width and height, and
    that everything it draws lies inside that box. Raises ValueError otherwise."""
    root = _parse_svg(data)
    box = [float(v) for v in (root.get("viewBox") or "").replace(",", " ").split()]
    if len(box) != 4 or box[:2] != [0.0, 0.0] or box[2] <= 0 or box[3] <= 0:
        raise ValueError(f"no usable viewBox: {root.get('viewBox')!r}")
    width, height = float(root.get("width", box[2])), float(root.get("height", box[3]))
    if (width, height) != (box[2], box[3]):
        raise ValueError(f"width/height {width} x {height} differ from the viewBox {box}")
    for x, y in _drawn_points(root):
        if not (0 <= x <= width and 0 <= y <= height):
            raise ValueError(f"draws at ({x}, {y}), outside the {width} x {height} box")
    return round(width), round(height)


def _text_of(el: ET.Element) -> str:
    spans = el.findall(_S + "tspan")
    return "\n".join(s.text or "" for s in spans) if spans else (el.text or "")


def _classes(el: ET.Element) -> set[str]:
    return set((el.get("class") or "").split())


def _panel(g: ET.Element) -> dict[str, Any]:
    out: dict[str, Any] = {"title": "", "xlabel": "", "ylabel": "", "xticks": [], "yticks": [], "series": [],
                           "hlines": [], "legend": [], "notes": [], "area": None, "xticks_rotated": False}
    for el in g.iter():
        cls = _classes(el)
        if el.tag == _S + "text":
            text = _text_of(el)
            for key in ("title", "xlabel", "ylabel"):
                if key in cls:
                    out[key] = text
            if "xtick" in cls:
                out["xticks"].append((float(el.get("x", 0)), text))
                out["xticks_rotated"] = out["xticks_rotated"] or "rotate(" in (el.get("transform") or "")
            elif "ytick" in cls:
                out["yticks"].append((float(el.get("y", 0)), text))
            elif "legend-label" in cls:
                out["legend"].append(text)
            elif "note" in cls:
                out["notes"].append(text)
        elif "axes" in cls:
            left, top = float(el.get("x", 0)), float(el.get("y", 0))
            out["area"] = (left, top, left + float(el.get("width", 0)), top + float(el.get("height", 0)))
        elif "hline" in cls:
            out["hlines"].append({"y": path_points(el.get("d", ""))[0][0][1], "stroke": el.get("stroke"),
                                  "dashed": bool(el.get("stroke-dasharray"))})
        elif "series" in cls:
            out["series"].append(_series(el))
    return out


def _series(g: ET.Element) -> dict[str, Any]:
    s: dict[str, Any] = {"label": g.get("data-label", ""), "lines": [], "markers": [], "bars": [], "colours": []}
    for el in g:
        cls = _classes(el)
        colour = el.get("stroke") if "line" in cls else el.get("fill")
        if colour and colour not in s["colours"]:
            s["colours"].append(colour)
        if "line" in cls:
            s["lines"].extend(path_points(el.get("d", "")))
        elif "marker" in cls:
            s["markers"].append((float(el.get("cx", 0)), float(el.get("cy", 0))))
        elif "bar" in cls:
            s["bars"].append({k: float(el.get(k, 0)) for k in ("x", "y", "width", "height")} | {"fill": el.get("fill")})
    return s


def read_svg(data: bytes | str) -> dict[str, Any]:
    """What a plot shows, from the classes the report's plots carry: ``{"width", "height",
    "title", "texts": [every text], "panels": [{"title", "xlabel", "ylabel", "xticks": [(x, label)],
    "xticks_rotated",
    "yticks": [(y, label)], "series": [{"label", "lines": [[(x, y), ...]], "markers": [(x, y)],
    "bars": [{"x", "y", "width", "height", "fill"}], "colours"}], "hlines": [{"y", "stroke",
    "dashed"}], "legend": [label], "notes": [text], "area": (left, top, right, bottom)}]}``
    (pixels, y down). Checks the document with :func:`decode_svg` first."""
    width, height = decode_svg(data)
    root = _parse_svg(data)
    title = root.find(_S + "title")
    return {"width": width, "height": height, "title": "" if title is None else title.text or "",
            "texts": [_text_of(el) for el in root.iter(_S + "text")],
            "panels": [_panel(g) for g in root.iter(_S + "g") if "panel" in _classes(g)]}


def tick_value(label: str) -> float:
    """The number a linear axis' tick label stands for ("2.5", "20k", "1.5M", "5e-5")."""
    if label and label[-1] in _SI:
        return float(label[:-1]) * _SI[label[-1]]
    return float(label)


def axis_value(ticks: list[tuple[float, str]], px: float) -> float:
    """The value at ``px`` on a linear axis, from its first and last tick (position, label)."""
    (p0, l0), (p1, l1) = ticks[0], ticks[-1]
    v0, v1 = tick_value(l0), tick_value(l1)
    return v0 + (px - p0) * (v1 - v0) / (p1 - p0)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: dict[str, dict[str, Any]] = {}
        self.current: dict[str, Any] | None = None
        self.stack: list[str] = []
        self.table: dict[str, Any] | None = None
        self.row: list[str] | None = None
        self.cell: list[str] | None = None
        self.text_tag: str | None = None
        self.buf: list[str] = []
        self.header_row = False
        self.srcs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("img", "script", "link", "iframe", "source"):
            self.srcs.append(str(a.get("src") or a.get("href") or ""))
        if tag == "section":
            self.current = {"id": a.get("id"), "title": "", "summary": [], "nodata": [], "images": [],
                            "tables": []}
            self.sections[str(a.get("id"))] = self.current
        elif self.current is None:
            return
        elif tag == "img":
            self.current["images"].append(str(a.get("src", "")))
        elif tag == "table":
            self.table = {"headers": [], "rows": []}
            self.current["tables"].append(self.table)
        elif tag == "tr" and self.table is not None:
            self.row, self.header_row = [], False
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []
            self.header_row = self.header_row or tag == "th"
        elif tag in ("h2", "li", "p"):
            self.text_tag, self.buf = (f"{tag}.{a.get('class', '')}"), []

    def handle_endtag(self, tag: str) -> None:
        if self.current is None:
            return
        if tag in ("td", "th") and self.cell is not None and self.row is not None:
            self.row.append("".join(self.cell))
            self.cell = None
        elif tag == "tr" and self.row is not None and self.table is not None:
            if self.header_row:
                self.table["headers"] = self.row
            else:
                self.table["rows"].append(self.row)
            self.row = None
        elif tag == "table":
            self.table = None
        elif tag in ("h2", "li", "p") and self.text_tag:
            text = "".join(self.buf).strip()
            if tag == "h2":
                self.current["title"] = text
            elif self.text_tag == "p.nodata":
                self.current["nodata"].append(text)
            elif tag == "li":
                self.current["summary"].append(text)
            self.text_tag = None
        elif tag == "section":
            self.current = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)
        elif self.text_tag:
            self.buf.append(data)


def read_report(text: str) -> dict[str, Any]:
    """``{"sections": {id: {"title", "summary", "nodata", "images", "tables"}}, "srcs": [...]}``;
    a table is ``{"headers": [...], "rows": [[...], ...]}``."""
    r = _Reader()
    r.feed(text)
    r.close()
    return {"sections": r.sections, "srcs": r.srcs}


def image_bytes(src: str) -> bytes:
    """The bytes of a ``data:image/svg+xml;base64,`` URI (ValueError for anything else)."""
    if not src.startswith(SVG_URI):
        raise ValueError(f"not an embedded SVG: {src[:60]!r}")
    return base64.b64decode(src[len(SVG_URI):], validate=True)


def table_dicts(table: dict[str, Any]) -> list[dict[str, str]]:
    return [dict(zip(table["headers"], row)) for row in table["rows"]]
