"""Inputs the fuzzers found once; each must stay a clean DslError."""

from __future__ import annotations

import pytest

import dsl
from ccl import DslError


def test_brace_inside_an_interpolation():
    # a Hypothesis mutation of basic.ccl: the parser expected nothing it could name
    with pytest.raises(DslError) as info:
        dsl.load_string('topology t(n) {\n  name "{fully-connected{n}"\n  ranks 2\n}\n', "t.ccl")
    assert info.value.render() == 't.ccl:2:25: unexpected \'{\'\n      name "{fully-connected{n}"\n                            ^'
