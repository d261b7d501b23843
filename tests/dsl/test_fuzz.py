"""Random and mutated programs never make the language raise anything but DslError."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dsl
from ccl.core.errors import DslError, VerificationError

from .conftest import ROOT

SHIPPED = sorted([*(ROOT / "topologies").glob("*.ccl"), *(ROOT / "dsl" / "examples").glob("*.ccl")])
TEXTS = [(p, p.read_text()) for p in SHIPPED]
WORDS = [
    "topology", "collective", "algorithm", "fabric", "link", "let", "for", "in", "if", "else", "require",
    "synthesize", "on", "with", "as", "verify", "ranks", "name", "node_of", "switch", "nic", "node", "x",
    "limit", "over", "pre", "post", "sum", "at", "copy", "reduce", "of", "to", "from", "step", "rounds",
    "import", "true", "false", "and", "or", "not", "host", "sketch", "option", "implements",
    "ring", "dgx1", "n", "r", "i", "allgather", "allreduce", "len", "range", "nics", "nodes", "output",
    "input", "scratch", "basic", "machines",
    "0", "1", "2", "7", "8", "-1", "0.5", "1e9", "99999999", "25 GB/s", "0.7 us", "1 MiB", "100 Gbps", "3 ns",
    "->", "<->", ":", ",", ";", "(", ")", "[", "]", "{", "}", "..", ".", "+", "-", "*", "/", "//", "%", "**",
    "==", "<", ">=", "^", "&", "|", "<<", "=", '"s{n}"', '"x"', '""', '"0"', "[]", "()", "#c", "\n", "\n", "\n", " ", "@", "'", "\\",
]
SNIPPETS = [
    "topology t(n = 4) {\n ranks n\n for i in 0..n { i <-> (i + 1) % n : 25 GB/s, 0.7 us }\n}\n",
    "synthesize allgather on t\n",
    "synthesize allreduce on t with ring { chunks 2 }\n",
    "algorithm a(n = 4) implements allgather on t(n) {\n for s in 0..n-1, r in 0..n {\n"
    "  copy output[(r - s) % n] from r to (r + 1) % n at step s\n }\n}\n",
    "collective c(n = 3) {\n ranks n\n for r in 0..n { pre r at r; post r at (r + 1) % n }\n}\n",
    "from basic import ring, torus\n", "from machines import *\n",
    "topology p(k = 2) {\n node t(2) x k { nic 0 : 10 GB/s, 1 us, host 20 GB/s }\n fabric rail\n}\n",
    "let xs = [i * 2 for i in 0..8 if i % 3 != 0]\n",
]


def lower(text: str, base: Path) -> None:
    """Load and lower everything; only DslError may escape (VerificationError from verify)."""
    try:
        module = dsl.load_string(text, "fuzz.ccl", base=str(base), max_steps=20_000)
        for name, definition in module.topologies().items():
            if all(p.default is not None for p in definition.params):
                module.topology(name)
        module.requests()
        items = module.algorithms()
    except DslError as exc:
        assert exc.render().startswith(f"{exc.span}: " if exc.span else "error: ")
        return
    for item in items:
        try:
            dsl.verify_algorithm(item)
        except VerificationError:
            pass


@st.composite
def mutated(draw):
    path, text = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "replace", "duplicate", "number"]))
        if not text:
            break
        at = draw(st.integers(0, len(text) - 1))
        if kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 12)):]
        elif kind == "insert":
            text = text[:at] + draw(st.sampled_from(WORDS)) + text[at:]
        elif kind == "replace":
            text = text[:at] + draw(st.sampled_from(WORDS)) + text[at + draw(st.integers(1, 6)):]
        elif kind == "duplicate":
            end = min(len(text), at + draw(st.integers(1, 80)))
            text = text[:end] + text[at:end] + text[end:]
        else:
            digits = [k for k, ch in enumerate(text) if ch.isdigit()]
            if digits:
                k = draw(st.sampled_from(digits))
                text = text[:k] + str(draw(st.integers(-3, 10**6))) + text[k + 1:]
    return path.parent, text


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(mutated())
def test_mutated_shipped_files(case):
    base, text = case
    lower(text, base)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=40).map(" ".join))
def test_random_token_soup(text):
    lower(text, ROOT)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.sampled_from(SNIPPETS), min_size=1, max_size=6), st.data())
def test_random_programs_from_snippets(parts, data):
    text = "".join(parts)
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(text)))
        text = text[:at] + data.draw(st.sampled_from(WORDS)) + text[at:]
    lower(text, ROOT / "topologies")


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_text(text):
    lower(text, ROOT)


TEMPLATES = [
    "topology t {{ ranks {a}; {b} -> {c} : {d}, {e} x {f} }}\nsynthesize allgather on t",
    "topology t {{ ranks 4; switch {s} node {a}; 0 <-> {b} : 1 GB/s, 1 us }}\nsynthesize allgather on t",
    "topology p {{ ranks 2; 0 <-> 1 : 1 GB/s, 1 us }}\ntopology t {{ node p x {a} {{ nic {b} : {d}, {e}, host {f} }}\n"
    " fabric {s} }}\nsynthesize allreduce on t",
    "collective c {{ ranks {a}; pre {b} at {c}; post {d} at {e}; post sum {f} at {s} }}\nfrom basic import ring\n"
    "synthesize c on ring(4) with smt",
    "from basic import ring\nalgorithm al implements {s}(chunks = {a}) on ring(4) {{\n"
    " copy output[{b}] of {c} to scratch[{d}] of {e} at step {f}\n reduce input[{b}..{d}] from 1 to 2 at step 0\n}}",
    "from machines import dgx1\nsynthesize {s} on dgx1 with x {{ chunks {a}; steps {b}; size {c}; time_limit {d}\n"
    " sketch {{ relays {e}; internode {f} }} }}",
    "topology t {{ ranks 3; 0 -> 1 : 1 GB/s, 1 us; limit {s} : {d} over {f}; node_of {a} }}\nsynthesize allgather on t",
    "from basic import {s}\nlet v = {s}({a}, {b})\nsynthesize broadcast(root = {c}) on {s}({d})",
]
VALUES = ["0", "1", "2", "3", "4", "-1", "2.5", "1e30", '""', '"a"', '"0"', '"nvswitch"', "[]", "[0, 1]", "[(0, 1)]",
          "[(0, 9)]", "0..2", "0..0", "true", "25 GB/s", "0 GB/s", "-1 us", "1 us", "1 MiB", "1.5 B", "x", "n",
          "allgather", "allreduce", "broadcast", "custom", "ring", "torus", "hypercube", "rail", "leafspine", "1 ns",
          "(0, 1)", "[[0]]", "10**9", "2**62", "[0, 0, 1]", "[1, 2, 3]", "len([1])", "1 // 0", "\"{1}\""]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from(TEMPLATES), st.fixed_dictionaries({k: st.sampled_from(VALUES) for k in "abcdefs"}))
def test_templates_with_odd_values(template, values):
    lower(template.format(**values), ROOT)
