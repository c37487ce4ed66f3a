# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Fix the mechanical pylint findings of `ansible-test sanity --test pylint` in place.

    .ci/sanity --test pylint 2>&1 | python3 tests/sanity/pylint_fix.py

Reads the ``ERROR: path:line:col: code: message`` lines and fixes, at those exact places:
``subprocess-run-check`` (adds ``check=False``: the callers read the return code themselves),
``disallowed-name`` for ``_`` (renamed ``_unused``, which pylint knows is unused),
``trailing-newlines`` and ``use-maxsplit-arg``. Anything else is printed for a person.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^ERROR: (?P<path>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<code>[\w-]+): (?P<msg>.*)$")


def _offset(lines: list[str], line: int, col: int) -> int:
    return sum(len(x) for x in lines[:line - 1]) + col


def fix_file(path: Path, findings: list[tuple[int, int, str, str]]) -> list[str]:
    text = path.read_text(encoding="utf-8")
    left = []
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) on the original text
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    calls = {(n.lineno, n.col_offset): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
    stmt_end = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.stmt):
            stmt_end[n.lineno] = max(stmt_end.get(n.lineno, 0), n.end_lineno or n.lineno)
    for line, col, code, msg in findings:
        if code == "subprocess-run-check" and (line, col) in calls:
            call = calls[(line, col)]
            end = _offset(lines, call.end_lineno, call.end_col_offset) - 1  # the closing parenthesis
            inner = text[:end].rstrip()
            sep = "" if inner.endswith(",") else ","
            edits.append((len(inner), end, f"{sep} check=False"))
        elif code == "disallowed-name" and '"_"' in msg:
            start = _offset(lines, line, col)
            if text[start] == "_" and not (text[start + 1].isalnum() or text[start + 1] == "_"):
                edits.append((start, start + 1, "_unused"))
                # Continuation lines aligned after the renamed name move with it (pep8 E128).
                for nxt in range(line + 1, stmt_end.get(line, line) + 1):
                    indent = len(lines[nxt - 1]) - len(lines[nxt - 1].lstrip(" "))
                    if indent > col and lines[nxt - 1].strip():
                        pos = _offset(lines, nxt, 0)
                        edits.append((pos, pos, " " * len("unused")))
            else:
                left.append(f"{path}:{line}:{col}: {code}: {msg}")
        elif code == "trailing-newlines":
            edits.append((len(text.rstrip("\n")) + 1, len(text), ""))
        elif code == "use-maxsplit-arg":
            start = _offset(lines, line, col)
            m = re.compile(r"\.split\(([^()]*)\)\[0\]").search(text, start)
            if m and m.start() - start < 80:
                edits.append((m.start(), m.end(), f".split({m.group(1)}, maxsplit=1)[0]"))
            else:
                left.append(f"{path}:{line}:{col}: {code}: {msg}")
        else:
            left.append(f"{path}:{line}:{col}: {code}: {msg}")
    for start, end, new in sorted(set(edits), reverse=True):
        text = text[:start] + new + text[end:]
    path.write_text(text, encoding="utf-8")
    return left


def main() -> int:
    by_file: dict[str, list[tuple[int, int, str, str]]] = defaultdict(list)
    for raw in sys.stdin:
        m = LINE.match(raw.strip())
        if m:
            by_file[m["path"]].append((int(m["line"]), int(m["col"]), m["code"], m["msg"]))
    left = []
    for rel, findings in sorted(by_file.items()):
        path = ROOT / rel
        if path.is_file():
            left.extend(fix_file(path, findings))
    for item in left:
        print(item)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
