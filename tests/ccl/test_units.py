from __future__ import annotations

import pytest

from ccl import InputError
from ccl.core.units import format_size, parse_bandwidth, parse_seconds, parse_size, parse_time


@pytest.mark.parametrize(("text", "size"), [("1KiB", 1024), ("64MiB", 64 << 20), ("1GB", 10**9), ("17", 17),
                                             ("1.5KiB", 1536), ("2 MB", 2 * 10**6)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["1XB", "abc", "-1KiB", "1.5B", ""])
def test_bad_sizes(text):
    with pytest.raises(InputError):
        parse_size(text)


def test_bandwidth_and_time():
    assert parse_bandwidth("100Gbps") == 12.5
    assert parse_bandwidth("25GB/s") == 25.0
    assert parse_bandwidth("500MB/s") == 0.5
    assert parse_time("700ns") == pytest.approx(0.7)
    assert parse_time("2ms") == 2000.0
    assert parse_seconds("90") == 90.0 and parse_seconds("2ms") == pytest.approx(0.002)
    with pytest.raises(InputError, match="unknown bandwidth unit"):
        parse_bandwidth("3 furlongs")
    with pytest.raises(InputError, match="unknown time unit"):
        parse_time("3 days")


def test_format_size_is_exact():
    assert format_size(64 << 20) == "64MiB"
    assert format_size(1000) == "1000B"
    assert format_size(3 << 30) == "3GiB"
