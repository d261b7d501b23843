"""Shared fixtures and helpers for the test suite."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _private_result_cache(tmp_path_factory):
    """The tuner's result cache in a folder of this test session, never the user's; progress
    lines on, whatever the caller's CCL_QUIET (tests read them)."""
    old = {name: os.environ.get(name) for name in ("CCL_CACHE_DIR", "CCL_QUIET")}
    os.environ["CCL_CACHE_DIR"] = str(tmp_path_factory.mktemp("ccl-cache"))
    os.environ.pop("CCL_QUIET", None)
    yield
    for name, value in old.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
