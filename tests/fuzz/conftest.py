"""Fuzzing of every input format (see harness.py for the modes)."""

from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line("markers", "fuzz: fuzzing of the input formats and the CLI (CCL_FUZZ=long for the long mode)")
