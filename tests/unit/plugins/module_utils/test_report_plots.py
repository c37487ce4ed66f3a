"""The report's SVG plots (amlhpc.report.report_plots): the tick and scale logic directly, and what
the drawn documents show, read back with tests/report_reader.py (xml.etree)."""

from __future__ import annotations

import ast
import math
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_reader import SVG_NS, axis_value, decode_svg, path_points, read_svg, tick_value

from amlhpc.report import report_plots as rp

NAN, INF = math.nan, math.inf


# ---------------------------------------------------------------- ticks
@pytest.mark.parametrize("lo, hi, kw, ticks", [
    (0, 1, {}, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
    (0, 0.3, {}, [0, 0.1, 0.2, 0.3]),
    (0, 20, {}, [0, 5, 10, 15, 20]),
    (0.1, 0.9, {}, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
    (-2.3, 7.1, {}, [-2.5, 0, 2.5, 5, 7.5]),
    (0, 123.4, {"zero": True}, [0, 25, 50, 75, 100, 125]),
    (40, 95.3, {"zero": True}, [0, 20, 40, 60, 80, 100]),
    (0, 2, {"integer": True}, [0, 1, 2]),
    (0, 99, {"integer": True}, [0, 20, 40, 60, 80, 100]),
    (0, 0.4, {"integer": True, "zero": True}, [0, 1]),
    (0, 7, {"integer": True, "zero": True}, [0, 2, 4, 6, 8]),
    (1e-5, 1.6e-4, {}, [0, 5e-5, 1e-4, 1.5e-4, 2e-4]),
])
def test_nice_ticks(lo, hi, kw, ticks):
    assert rp.nice_ticks(lo, hi, **kw) == pytest.approx(ticks)


@pytest.mark.parametrize("lo, hi, kw, ticks", [
    (0, 0, {}, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),  # all zeros
    (0, 0, {"zero": True, "integer": True}, [0, 1]),
    (3, 3, {}, [2.6, 2.8, 3.0, 3.2, 3.4]),  # one value: widened around it
    (-5, -5, {}, [-5.5, -5.25, -5.0, -4.75, -4.5]),
    (3, 3, {"integer": True}, [2, 3, 4]),
    (7, 7, {"zero": True}, [0, 2, 4, 6, 8]),
    (1.0, 1.0 + 1e-12, {}, [0.9, 0.95, 1.0, 1.05, 1.1]),  # float noise is no range
])
def test_nice_ticks_of_a_range_with_no_width(lo, hi, kw, ticks):
    assert rp.nice_ticks(lo, hi, **kw) == pytest.approx(ticks)


finite_floats = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(finite_floats, finite_floats, st.booleans(), st.booleans())
def test_ticks_cover_the_data_at_a_nice_step(a, b, integer, zero):
    lo, hi = min(a, b), max(a, b)
    ticks = rp.nice_ticks(lo, hi, integer=integer, zero=zero)
    assert 2 <= len(ticks) <= 6
    slack = 1e-9 * max(abs(lo), abs(hi), hi - lo)  # float noise, e.g. -5e-324 / 2 == 0
    assert ticks[0] <= lo + slack and ticks[-1] >= hi - slack
    if zero:
        assert ticks[0] <= 0 <= ticks[-1]
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert min(abs(mantissa - m) for m in (1, 2, 2.5, 5, 10)) < 1e-6
    assert all(t2 - t1 == pytest.approx(step, rel=1e-6) for t1, t2 in zip(ticks, ticks[1:]))
    if integer:
        assert all(t == int(t) for t in ticks)
    labels = rp.tick_labels(ticks)
    assert len(set(labels)) == len(labels)  # every tick told apart
    assert all(tick_value(label) == pytest.approx(t, abs=step / 100) for label, t in zip(labels, ticks)), labels
    assert all(len(label) <= 16 and label != "-0" for label in labels), labels


@pytest.mark.parametrize("ticks, labels", [
    ([0, 0.1, 0.2, 0.30000000000000004], ["0", "0.1", "0.2", "0.3"]),
    ([0, 0.25, 0.5], ["0", "0.25", "0.50"]),
    ([-2.5, 0, 2.5], ["-2.5", "0", "2.5"]),
    ([0, 500, 1000, 1500], ["0", "500", "1000", "1500"]),
    ([0, 5000, 10000], ["0", "5k", "10k"]),
    ([0, 5e5, 1e6, 1.5e6], ["0", "0.5M", "1.0M", "1.5M"]),
    ([0, 2e9, 4e9], ["0", "2G", "4G"]),
    ([24078980, 24078981, 24078982], ["24078980", "24078981", "24078982"]),  # not 24.078981M
    ([0, 5e-5, 1e-4, 1.5e-4], ["0", "5e-5", "0.0001", "0.00015"]),
    ([-1e-17, 0.5, 1.0], ["0", "0.5", "1.0"]),  # no "-0"
])
def test_tick_labels_are_short_and_exact(ticks, labels):
    assert rp.tick_labels(ticks) == labels


def test_log2_ticks_and_labels():
    assert rp.log2_ticks(8, 8 * 2**30) == list(range(3, 34))
    assert rp.log2_ticks(3, 1000) == list(range(1, 11))
    assert rp.log2_ticks(1024, 1024) == [9, 10, 11]  # one value: a power either side
    assert [rp.log2_label(e) for e in (0, 3, 9, 10, 16, 20, 30, 33, 40, -1)] == [
        "1", "8", "512", "1K", "64K", "1M", "1G", "8G", "1T", "1/2"]


def test_log2_labels_are_thinned_on_round_powers():
    exps = rp.log2_ticks(8, 8 * 2**30)  # 31 powers
    assert rp.log2_labelled(exps, 1200, 20) == exps  # room for all
    some = rp.log2_labelled(exps, 600, 25)
    assert some == list(range(4, 34, 2))  # every second, on even powers
    few = rp.log2_labelled(exps, 150, 25)
    assert [rp.log2_label(e) for e in few] == ["1K", "1M", "1G"]
    assert rp.log2_labelled([21, 22, 23], 10, 25) == [21]  # no multiple of the stride: the first


@pytest.mark.parametrize("count, pitch, needed, stride", [(10, 50, 30, 1), (128, 5, 30, 6), (1, 1, 100, 1),
                                                          (4, 0, 10, 1)])
def test_label_stride(count, pitch, needed, stride):
    assert rp.label_stride(count, pitch, needed) == stride


def test_values_that_are_not_numbers_are_left_out():
    assert [rp.finite(v) for v in (1, "2.5", None, NAN, INF, -INF, "x", [1], 10**400)] == [
        1.0, 2.5, None, None, None, None, None, None, None]
    assert rp.point_runs([0, 1, 2, 3, 4, 5], [1, 2, None, 4, NAN, 6]) == [[(0, 1), (1, 2)], [(3, 4)], [(5, 6)]]
    assert rp.point_runs([-1, 0, 1, 2], [1, 2, 3, 4], logx=True) == [[(1, 3), (2, 4)]]
    assert rp.point_runs(None, 5) == [] and rp.point_runs([1, 2], [3]) == [[(1, 3)]]


def test_steps_hold_each_value_over_the_interval_that_ends_at_its_x():
    assert rp.step_vertices([(0, 2), (1, 2), (2, 8), (4, 5)]) == [
        (0, 2), (0, 2), (1, 2), (1, 8), (2, 8), (2, 5), (4, 5)]
    assert rp.step_vertices([(3, 1)]) == [(3, 1)]


def test_shorten_keeps_both_ends():
    assert rp.shorten("a-very-long-node-name-000\nshort") == "a-very-long…ode-name-000\nshort"
    assert rp.shorten("x" * 40, 10) == "xxxx…xxxxx"
    assert rp.shorten(None) == "" and rp.shorten("a\nb\nc\nd") == "a\nb\nc"


def test_text_width_grows_with_the_text():
    assert rp.text_width("", 10) == 0
    assert rp.text_width("iii", 10) < rp.text_width("000", 10) < rp.text_width("MMM", 10)
    assert rp.text_width("ab\nabcdef", 10) == rp.text_width("abcdef", 10)


# ---------------------------------------------------------------- documents
def panel(**over):
    p = {"title": "T", "xlabel": "x", "ylabel": "y", "series": [{"label": "a", "x": [0, 1, 2], "y": [1, 3, 2]}]}
    p.update(over)
    return p


def test_a_line_plot_reads_back():
    plot = read_svg(rp.lines([panel(series=[{"label": "a", "x": [0, 1, 2], "y": [1, 3, 2]},
                                            {"label": "b", "x": [0, 2], "y": [2, 2.5]}], hline=(2.7, "floor"))]))
    assert (plot["width"], plot["height"], plot["title"]) == (750, 300, "T")
    (p,) = plot["panels"]
    assert (p["title"], p["xlabel"], p["ylabel"]) == ("T", "x", "y")
    assert p["legend"] == ["a", "b", "floor"]
    a, b = p["series"]
    assert (a["colours"], b["colours"]) == ([rp.COLOURS[0]], [rp.COLOURS[1]])
    assert len(a["markers"]) == 3 and len(a["lines"]) == 1 and len(a["lines"][0]) == 3
    values = [(axis_value(p["xticks"], x), axis_value(p["yticks"], y)) for x, y in a["markers"]]
    assert values == [pytest.approx(v, abs=0.01) for v in [(0, 1), (1, 3), (2, 2)]]
    (h,) = p["hlines"]
    assert h["dashed"] and h["stroke"] == rp.FAIL_COLOUR and axis_value(p["yticks"], h["y"]) == pytest.approx(2.7, abs=0.01)
    left, top, right, bottom = p["area"]
    assert all(left <= x <= right and top <= y <= bottom for x, y in a["markers"] + b["markers"])


def test_no_legend_without_a_label_or_an_hline():
    assert read_svg(rp.lines([panel(series=[{"x": [0, 1], "y": [0, 1]}])]))["panels"][0]["legend"] == []
    assert read_svg(rp.lines([panel(series=[{"x": [0, 1], "y": [0, 1]}], hline=(0.5, "t"))]))["panels"][0][
        "legend"] == ["t"]


def test_many_series_keep_the_legend_short():
    series = [{"label": f"node-{i:03d}", "x": [0, 1], "y": [i, i + 1]} for i in range(32)]
    (p,) = read_svg(rp.lines([panel(series=series)]))["panels"]
    assert len(p["series"]) == 32 and p["legend"] == [f"node-{i:03d}" for i in range(7)] + ["+25 more"]
    assert [s["colours"][0] for s in p["series"][:9]] == [*rp.COLOURS, rp.COLOURS[0]]


def test_the_legend_goes_where_it_hides_least():
    # A line along the top and a point in the lower left corner: the lower right corner is free.
    doc = rp.lines([panel(series=[{"label": "a", "x": list(range(11)), "y": [9] * 11},
                                  {"label": "b", "x": [0.5], "y": [1]}])])
    (p,) = read_svg(doc)["panels"]
    box = ET.fromstring(doc).find(f".//{{{SVG_NS}}}g[@class='legend']/{{{SVG_NS}}}rect")
    left, top, right, bottom = p["area"]
    assert float(box.get("y")) > (top + bottom) / 2 and float(box.get("x")) > (left + right) / 2


def test_steps_draw_vertical_then_horizontal_segments():
    (p,) = read_svg(rp.lines([panel(series=[{"x": [0, 1, 2, 4], "y": [2, 2, 8, 5]}], steps=True)]))["panels"]
    path = [(round(axis_value(p["xticks"], x), 2), round(axis_value(p["yticks"], y), 2))
            for x, y in p["series"][0]["lines"][0]]
    path = [q for i, q in enumerate(path) if i == 0 or q != path[i - 1]]
    assert path == [(0, 2), (1, 2), (1, 8), (2, 8), (2, 5), (4, 5)]
    (plain,) = read_svg(rp.lines([panel(series=[{"x": [0, 1, 2, 4], "y": [2, 2, 8, 5]}])]))["panels"]
    assert len(plain["series"][0]["lines"][0]) == 4


def test_log2_axis_places_powers_of_two_evenly():
    sizes = [2**e for e in range(3, 34)]
    (p,) = read_svg(rp.lines([panel(series=[{"label": "busbw", "x": sizes, "y": [s / 2**28 for s in sizes]}],
                                    logx=True)]))["panels"]
    ticks = dict((label, x) for x, label in p["xticks"])
    assert {"16", "1K", "64K", "1M", "1G"} <= set(ticks) and "8" not in ticks  # thinned to even powers
    step = ticks["64"] - ticks["16"]
    assert ticks["1K"] - ticks["256"] == pytest.approx(step, abs=0.2)
    markers = p["series"][0]["markers"]
    assert markers[sizes.index(2**20)][0] == pytest.approx(ticks["1M"], abs=0.1)
    assert markers[1][0] - markers[0][0] == pytest.approx(step / 2, abs=0.2)


def test_integer_x_ticks_are_whole_numbers():
    (p,) = read_svg(rp.lines([panel(series=[{"x": [0, 1, 2], "y": [3, 2, 1]}], integer_x=True)]))["panels"]
    assert [label for _unused, label in p["xticks"]] == ["0", "1", "2"]


def test_more_than_two_panels_widen_the_plot():
    assert decode_svg(rp.lines([panel()] * 2)) == (750, 300)
    assert decode_svg(rp.lines([panel()] * 3)) == (1125, 300)
    three = read_svg(rp.lines([panel(title=f"p{i}") for i in range(3)]))["panels"]
    assert [p["title"] for p in three] == ["p0", "p1", "p2"]
    assert three[0]["area"][2] < three[1]["area"][0] and three[1]["area"][2] < three[2]["area"][0]


def test_bars_read_back():
    doc = rp.bars(["n0", "n1", "n2"], [{"label": "write", "values": [10, None, -4]},
                                       {"label": "read", "values": [20, 30, 5], "colours": ["#111111", "", "#333333"]}],
                  title="B", ylabel="MB/s", hline=(15, "threshold"))
    (p,) = read_svg(doc)["panels"]
    write, read = p["series"]
    assert len(write["bars"]) == 2 and len(read["bars"]) == 3  # None: no bar
    assert [b["fill"] for b in read["bars"]] == ["#111111", rp.COLOURS[1], "#333333"]
    assert p["legend"] == ["write", "read", "threshold"]
    assert not p["xticks_rotated"] and [label for _unused, label in p["xticks"]] == ["n0", "n1", "n2"]
    zero = dict((label, y) for y, label in p["yticks"])["0"]
    assert write["bars"][1]["y"] == pytest.approx(zero, abs=0.1)  # the negative bar hangs from 0
    assert axis_value(p["yticks"], write["bars"][1]["y"] + write["bars"][1]["height"]) == pytest.approx(-4, abs=0.1)
    assert axis_value(p["yticks"], read["bars"][1]["y"]) == pytest.approx(30, abs=0.1)


def test_bar_axes_start_at_zero_and_count_in_whole_numbers():
    (p,) = read_svg(rp.bars(["a", "b"], [{"values": [3, 4]}], title="t", ylabel="n", integer=True))["panels"]
    assert p["yticks"][0][1] == "0" and all(label.isdigit() for _unused, label in p["yticks"])
    (q,) = read_svg(rp.bars(["a"], [{"values": [0.3]}], title="t", ylabel="n", integer=True))["panels"]
    assert [label for _unused, label in q["yticks"]] == ["0", "1"]


def test_bar_labels_rotate_past_four_groups_and_thin_out_when_crowded():
    assert read_svg(rp.bars(list("abcd"), [{"values": [1] * 4}], title="t", ylabel="y"))["panels"][0][
        "xticks_rotated"] is False
    (p,) = read_svg(rp.bars(list("abcde"), [{"values": [1] * 5}], title="t", ylabel="y"))["panels"]
    assert p["xticks_rotated"] and len(p["xticks"]) == 5
    groups = [f"nd-{i:03d}\nnccl_all_reduce_node" for i in range(128)]
    (many,) = read_svg(rp.bars(groups, [{"values": list(range(128))}], title="t", ylabel="y"))["panels"]
    assert len(many["series"][0]["bars"]) == 128
    shown = [label for _unused, label in many["xticks"]]
    assert 8 <= len(shown) < 128 and shown[0] == groups[0] and set(shown) <= set(groups)


EDGE_CASES = {
    "no panels": lambda: rp.lines([]),
    "empty series": lambda: rp.lines([panel(series=[])]),
    "series without points": lambda: rp.lines([panel(series=[{"label": "a", "x": [], "y": []}])]),
    "one point": lambda: rp.lines([panel(series=[{"label": "a", "x": [3], "y": [7]}])]),
    "all equal": lambda: rp.lines([panel(series=[{"x": [1, 2, 3], "y": [5, 5, 5]}], steps=True)]),
    "all zero": lambda: rp.lines([panel(series=[{"x": [0, 0], "y": [0, 0]}])]),
    "negative": lambda: rp.lines([panel(series=[{"x": [0, 1], "y": [-3.5, -1e-3]}], hline=(-1, "f"))]),
    "nan and inf": lambda: rp.lines([panel(series=[{"x": [0, 1, NAN, 3, INF], "y": [NAN, INF, 1, 2, 3]}])]),
    "log2 without positive x": lambda: rp.lines([panel(series=[{"x": [0, -4], "y": [1, 2]}], logx=True)]),
    "log2 one point": lambda: rp.lines([panel(series=[{"x": [1024], "y": [2]}], logx=True)]),
    "hline not a number": lambda: rp.lines([panel(hline=(NAN, "x"))]),
    "not lists": lambda: rp.lines([panel(series=[{"x": "abc", "y": 5}, "not a series", {"x": [1], "y": ["z"]}])]),
    "huge values": lambda: rp.lines([panel(series=[{"x": [0, 1e300], "y": [-1e300, 1e300]}])]),
    "tiny values": lambda: rp.lines([panel(series=[{"x": [0, 1e-300], "y": [1e-300, 2e-300]}])]),
    "bars: no groups": lambda: rp.bars([], [], title="t", ylabel="y"),
    "bars: all None": lambda: rp.bars(["a", "b"], [{"label": "s", "values": [None, None]}], title="t", ylabel="y"),
    "bars: all zero": lambda: rp.bars(["a"], [{"values": [0]}], title="t", ylabel="y", integer=True),
    "bars: fewer values than groups": lambda: rp.bars(["a", "b", "c"], [{"values": [1]}], title="t", ylabel="y"),
    "bars: values not a list": lambda: rp.bars(["a"], [{"values": 3}], title="t", ylabel="y"),
    "bars: long labels": lambda: rp.bars(["x" * 200 + "\n" + "y" * 200] * 6, [{"values": [1] * 6}], title="t",
                                         ylabel="y"),
}


@pytest.mark.parametrize("case", EDGE_CASES)
def test_edge_cases_draw_a_valid_plot(case):
    doc = EDGE_CASES[case]()
    assert decode_svg(doc)  # well-formed, everything inside the view box
    assert doc == EDGE_CASES[case]()  # and the same bytes again


def test_a_panel_without_points_says_so():
    (p,) = read_svg(rp.lines([panel(series=[{"label": "a", "x": [NAN], "y": [1]}])]))["panels"]
    assert p["notes"] == ["no data"] and p["series"][0]["markers"] == []


series_values = st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=32),
                                   st.integers(-10**6, 10**6)), max_size=12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(series_values, series_values), max_size=4), st.booleans(), st.booleans())
def test_any_series_draws_inside_the_box_with_one_marker_per_finite_point(pairs, logx, steps):
    series = [{"label": f"s{i}", "x": xs, "y": ys} for i, (xs, ys) in enumerate(pairs)]
    doc = rp.lines([panel(series=series, logx=logx, steps=steps)])
    (p,) = read_svg(doc)["panels"]
    for s, got in zip(series, p["series"]):
        finite = sum(1 for x, y in zip(s["x"], s["y"]) if rp.finite(x) is not None and rp.finite(y) is not None
                     and (not logx or rp.finite(x) > 0))
        assert len(got["markers"]) == finite
    left, top, right, bottom = p["area"]
    points = [pt for s in p["series"] for pt in s["markers"] + [v for line in s["lines"] for v in line]]
    assert all(left - 0.1 <= x <= right + 0.1 and top - 0.1 <= y <= bottom + 0.1 for x, y in points)


@settings(max_examples=40, deadline=None)
@given(st.lists(series_values, min_size=1, max_size=3), st.integers(0, 40), st.booleans())
def test_any_bars_draw_inside_the_box(values, groups, integer):
    doc = rp.bars([f"g{i}" for i in range(groups)], [{"values": v} for v in values], title="t", ylabel="y",
                  integer=integer)
    (p,) = read_svg(doc)["panels"]
    left, top, right, bottom = p["area"]
    for s, got in zip(values, p["series"]):
        assert len(got["bars"]) == sum(1 for v in s[:groups] if rp.finite(v) is not None)
        assert all(left <= b["x"] and b["x"] + b["width"] <= right + 0.1 and top - 0.1 <= b["y"]
                   and b["y"] + b["height"] <= bottom + 0.1 for b in got["bars"])


def test_text_is_escaped_and_kept():
    title = 'a <b> & "c" \x01 d'
    doc = rp.lines([panel(title=title, series=[{"label": "<script>", "x": [0, 1], "y": [0, 1]}])])
    assert b"<script>" not in doc and b"\x01" not in doc
    plot = read_svg(doc)
    assert plot["panels"][0]["title"] == 'a <b> & "c"  d' and plot["panels"][0]["legend"] == ["<script>"]
    assert plot["panels"][0]["series"][0]["label"] == "<script>"


def test_documents_are_plain_self_contained_svg():
    doc = rp.lines([panel()]).decode("utf-8")
    root = ET.fromstring(doc)
    assert root.tag == f"{{{SVG_NS}}}svg" and root.get("viewBox") == "0 0 750 300"
    assert all(el.get("id") is None for el in root.iter())  # nothing for two plots on a page to clash over
    assert "href" not in doc and "<image" not in doc and "<script" not in doc and "url(" not in doc


def test_path_reader_knows_the_commands_it_is_given():
    assert path_points("M1 2H5V7L8 9M0 0h2v3") == [[(1, 2), (5, 2), (5, 7), (8, 9)], [(0, 0), (2, 0), (2, 3)]]
    with pytest.raises(ValueError):
        path_points("M0 0C1 1 2 2 3 3")


def test_decode_svg_refuses_what_is_not_a_plot():
    with pytest.raises(ValueError, match="not well-formed"):
        decode_svg(b"<svg")
    with pytest.raises(ValueError, match="not svg"):
        decode_svg(b'<svg width="1" height="1" viewBox="0 0 1 1"/>')  # no namespace
    with pytest.raises(ValueError, match="outside"):
        decode_svg(f'<svg xmlns="{SVG_NS}" width="10" height="10" viewBox="0 0 10 10"><circle cx="12" cy="1" r="1"/>'
                   "</svg>".encode())
    with pytest.raises(ValueError, match="viewBox"):
        decode_svg(f'<svg xmlns="{SVG_NS}" width="10" height="10"/>'.encode())


def test_the_renderer_imports_the_standard_library_only():
    source = Path(rp.__file__).read_text()
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    assert names and names <= set(sys.stdlib_module_names) | {"__future__"}, names
