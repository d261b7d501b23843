"""docs/dsl.md stays true: every `ccl` example is a complete file that loads, lowers and
verifies, and the grammar it shows is the shipped one."""

from __future__ import annotations

import re

import pytest

import dsl

from .conftest import ROOT, lower_everything

DOC = (ROOT / "docs" / "dsl.md").read_text(encoding="utf-8")
EXAMPLES = re.findall(r"```ccl\n(.*?)```", DOC, flags=re.S)


def test_the_reference_has_examples_of_every_construct():
    assert len(EXAMPLES) >= 12
    text = "\n".join(EXAMPLES)
    for construct in ("import ", "from ", "topology ", "collective ", "algorithm ", "fabric ", "link ", "let ",
                      "for ", "if ", "else", "require ", "node_of ", "synthesize ", "verify ", "ranks ", "name ", "switch ",
                      "nic ", "node ", "limit ", "<->", "->", " x ", "pre ", "post ", "post sum", "copy ", "reduce ",
                      " of ", " from ", "at step", "step ", "rounds ", "sketch", "option ", " as ", "..", "Gbps",
                      " ns", " MiB", "**", "//", "%", " if ", " else ", "[", "]", "{k}"):
        assert construct in text, construct


@pytest.mark.parametrize("k", range(len(EXAMPLES)))
def test_example_loads_lowers_and_verifies(k):
    module = dsl.load_string(EXAMPLES[k], f"docs-example-{k}.ccl", base=str(ROOT))
    lower_everything(module)


def test_the_grammar_in_the_reference_is_the_shipped_grammar():
    shown = re.search(r"```lark\n(.*?)```", DOC, flags=re.S)
    assert shown is not None and shown.group(1) == dsl.grammar_text()


def test_the_readme_example_loads():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"```ccl\n(.*?)```", readme, flags=re.S)
    module = dsl.load_string(example, "readme.ccl", base=str(ROOT))
    lower_everything(module)
    assert [r.problem.topology.name for r in module.requests()] == ["pod(4, \"rail\")", "pod(2, \"rail\")"]
