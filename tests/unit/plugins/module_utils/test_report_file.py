"""amlhpc.report.report_file.write_page: the report page written on the controller."""

from __future__ import annotations

import os
import stat

import pytest

from amlhpc.report.report_file import write_page


def mode_of(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_makes_the_folder_and_writes_the_page(tmp_path):
    old = os.umask(0o077)
    try:
        dest = tmp_path / "outputs" / "run" / "report.html"
        got = write_page(str(dest), "<p>é</p>")
    finally:
        os.umask(old)
    assert got == {"dest": str(dest), "size": len("<p>é</p>".encode()), "changed": True, "created_dir": True}
    assert dest.read_text(encoding="utf-8") == "<p>é</p>"
    assert mode_of(dest) == 0o644 and mode_of(dest.parent) == 0o755  # not the umask's
    assert [p.name for p in dest.parent.iterdir()] == ["report.html"]  # no temporary file left


def test_the_same_page_is_not_written_again(tmp_path):
    dest = tmp_path / "report.html"
    write_page(str(dest), "a")
    os.utime(dest, (1, 1))
    assert write_page(str(dest), "a")["changed"] is False
    assert os.stat(dest).st_mtime == 1
    assert write_page(str(dest), "a", mode=0o600)["changed"] is True and mode_of(dest) == 0o600
    assert write_page(str(dest), "b", mode=0o600)["changed"] is True and dest.read_text() == "b"


def test_check_mode_writes_nothing(tmp_path):
    dest = tmp_path / "new" / "report.html"
    want = {"dest": str(dest), "size": 1, "changed": True, "created_dir": True}
    assert write_page(str(dest), "a", check_mode=True) == want
    assert not dest.parent.exists()


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    dest = tmp_path / "report.html"
    dest.mkdir()  # a folder where the page goes: the rename fails
    with pytest.raises(OSError):
        write_page(str(dest), "a")
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_the_link_points_at_the_latest_page_relative_and_replaces_a_page_there(tmp_path):
    from amlhpc.report.report_file import point_link
    link = tmp_path / "run" / "report.html"
    link.parent.mkdir()
    link.write_text("an older run's page, a file")
    first = tmp_path / "run" / "reports" / "1-all.html"
    assert point_link(str(link), str(first), check_mode=True) and not link.is_symlink()
    assert point_link(str(link), str(first))
    assert link.is_symlink() and str(link.readlink()) == "reports/1-all.html"
    assert not point_link(str(link), str(first))
    assert point_link(str(link), str(tmp_path / "run" / "reports" / "2-stage.html"))
    assert str(link.readlink()) == "reports/2-stage.html"
    assert [p.name for p in link.parent.iterdir() if p.name.startswith(".link-")] == []


def test_pages_of_their_own_are_never_overwritten_even_when_written_at_once(tmp_path):
    """write_new_page: 16 writers naming their page the same at the same time keep 16 pages,
    each holding its own bytes, and check mode names the page a run would take."""
    from concurrent.futures import ThreadPoolExecutor

    from amlhpc.report.report_file import write_new_page

    dest = tmp_path / "reports" / "20260101T000000Z-all.html"
    with ThreadPoolExecutor(max_workers=16) as pool:
        got = list(pool.map(lambda i: write_new_page(str(dest), f"page {i}"), range(16)))
    names = [g["dest"] for g in got]
    assert len(set(names)) == 16 and str(dest) in names
    assert sorted(p.name for p in dest.parent.iterdir()) == sorted(os.path.basename(n) for n in names)  # no temp left
    for i, g in enumerate(got):
        assert open(g["dest"], encoding="utf-8").read() == f"page {i}"
        assert mode_of(g["dest"]) == 0o644
    assert write_new_page(str(dest), "x", check_mode=True)["dest"] == str(dest.parent / "20260101T000000Z-all-17.html")
