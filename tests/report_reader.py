"""Read the run's report.html back the way a browser would see it (stdlib only).

Used by the unit tests of plugins/module_utils/amlhpc/report_html.py and by the
integration test that runs the local default: sections by id, their text, tables and
images, and a PNG decoder that proves an embedded plot is a whole, valid image.
"""

from __future__ import annotations

import base64
import struct
import zlib
from html.parser import HTMLParser
from typing import Any

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def decode_png(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG after checking its signature, every chunk's CRC, and that its
    image data inflates to exactly the bytes the header promises. Raises ValueError otherwise."""
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG: bad signature")
    pos, idat, header, ended = len(PNG_SIGNATURE), b"", None, False
    while pos < len(data):
        if pos + 8 > len(data):
            raise ValueError("truncated chunk header")
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        crc = data[pos + 8 + length:pos + 12 + length]
        if len(body) != length or len(crc) != 4:
            raise ValueError(f"truncated {kind!r} chunk")
        if zlib.crc32(kind + body) != struct.unpack(">I", crc)[0]:
            raise ValueError(f"bad CRC in {kind!r} chunk")
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            ended = True
            break
        pos += 12 + length
    if header is None or not ended or not idat:
        raise ValueError("PNG without IHDR, IDAT or IEND")
    width, height, depth, colour, _unused, _unused, interlace = header
    if interlace:
        raise ValueError("interlaced PNG not expected")
    row = (width * _CHANNELS[colour] * depth + 7) // 8
    raw = zlib.decompress(idat)
    if len(raw) != height * (1 + row):
        raise ValueError(f"image data is {len(raw)} bytes, the header promises {height * (1 + row)}")
    if any(raw[i * (1 + row)] > 4 for i in range(height)):
        raise ValueError("bad row filter byte")
    return width, height


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
    """The bytes of a ``data:image/png;base64,`` URI (ValueError for anything else)."""
    prefix = "data:image/png;base64,"
    if not src.startswith(prefix):
        raise ValueError(f"not an embedded PNG: {src[:60]!r}")
    return base64.b64decode(src[len(prefix):], validate=True)


def table_dicts(table: dict[str, Any]) -> list[dict[str, str]]:
    return [dict(zip(table["headers"], row)) for row in table["rows"]]
