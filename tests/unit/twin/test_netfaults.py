"""The twin's link faults build the command lines they promise (tests/twin/netfaults.py).

Issue 50: ``slow_link``'s fixed 32 kbit burst capped every pair at 0.6-0.8 Gb/s whatever rate
was asked (a token bucket refills once per kernel tick: at most burst x HZ per second). The
burst is sized to the rate now; no twin is needed to check the command line.
"""

from __future__ import annotations

import pytest

from twin import netfaults


def burst_bytes(argv: list[str]) -> int:
    value = argv[argv.index("burst") + 1]
    assert value.endswith("b"), argv
    return int(value[:-1])


@pytest.mark.parametrize("rate, bits", [("10mbit", 10e6), ("5gbit", 5e9), ("20gbit", 20e9), ("500kbit", 5e5),
                                        ("2000000", 2e6), ("125mbps", 1e9)])
def test_the_burst_lets_the_bucket_reach_the_rate_asked(rate, bits):
    argv = netfaults.tbf_argv("veth0", rate)
    assert argv[:8] == ["tc", "qdisc", "add", "dev", "veth0", "root", "tbf", "rate"] and argv[8] == rate
    # tbf's rule: burst >= rate / HZ; the twin's kernels tick at 100 to 1000 Hz, so 100 bounds it.
    assert burst_bytes(argv) >= bits / 8 / netfaults.TBF_HZ
    assert burst_bytes(argv) >= netfaults.TBF_MIN_BURST
    assert argv[-2:] == ["latency", "400ms"]


def test_rates_ten_times_apart_get_bursts_ten_times_apart():
    assert burst_bytes(netfaults.tbf_argv("v", "20gbit")) == 4 * burst_bytes(netfaults.tbf_argv("v", "5gbit"))


def test_a_rate_tc_would_not_read_is_refused_in_one_sentence():
    with pytest.raises(ValueError, match="rate '10 megabits'.*like 10mbit"):
        netfaults.tbf_argv("v", "10 megabits")


def test_slow_uploads_shape_only_what_goes_to_the_port():
    root, fast, slow, match = netfaults.slow_uploads_argv(10000, "500kbit")
    assert root[-4:] == ["1:", "htb", "default", "10"] and root[4] == "eth0"
    assert fast[fast.index("classid") + 1] == "1:10"
    assert slow[slow.index("classid") + 1] == "1:30" and slow[-4:] == ["rate", "500kbit", "ceil", "500kbit"]
    assert match[match.index("dport") + 1: match.index("dport") + 3] == ["10000", "0xffff"]
    assert match[-2:] == ["flowid", "1:30"]
    with pytest.raises(ValueError, match="500kbit"):
        netfaults.slow_uploads_argv(10000, "half a megabit")
