"""Hypothesis strategies for every input format: mutated JSON documents (algorithm, program,
topology, schedule set), mutated MSCCL XML, raw-text damage for both, and argument vectors for
every ``ccl`` command built from the real parser's options with ordinary and hostile values."""

from __future__ import annotations

import argparse
import copy
import json
import xml.etree.ElementTree as ET

from hypothesis import strategies as st

HOSTILE_JSON = [
    0, 1, 2, 3, -1, -2, 7, 10**9, 2**31, 2**63, 10**30, -(10**12), 1.5, -0.5, 0.0, 1e308, float("inf"), float("nan"),
    None, True, False, "", "x", "0", "-1", "1e400", "ring:4", "copy", "reduce", "input", "output", "scratch",
    "send", "recv", "allgather", "allreduce", [], {}, [[]], [0], [-1], [0, 0, 0], ["x"], {"x": 1}, "a" * 5000,
    [None] * 50,
]
HOSTILE_ATTR = ["-1", "0", "1", "2", "3", "7", "9999999999", "-99999", "1e3", "0x10", "x", "", " 1 ", "01", "+2",
                "i", "o", "s", "r", "rrc", "nop", "cpy", "re", "allreduce", "Simple", "LL128", "4294967296",
                # sizes beyond the limits: scratch, chunks, gpus, channels of 10^8..10^23
                "8388609", "100000000", "1000000000000", "99999999999999999999999", "9" * 5000]
JUNK = ["", "{", "}", "[", "]", ",", ":", '"', "null", "<", ">", "/>", "</tb>", "&amp;", "&#0;", "\x00", "\ufffd",
        "\n", "<!DOCTYPE x [<!ENTITY a 'aaaa'>]>", "&a;", "1" * 40, "-", "e999", "\\u0000"]


def _paths(node, parent=None, key=None, out=None):
    out = [] if out is None else out
    if parent is not None:
        out.append((parent, key))
    if isinstance(node, dict):
        for k in list(node):
            _paths(node[k], node, k, out)
    elif isinstance(node, list):
        for i in range(len(node)):
            _paths(node[i], node, i, out)
    return out


@st.composite
def json_text(draw, seeds: dict[str, str]) -> str:
    """A seed document with 1-3 tree edits (replace a value by a hostile one, delete a key or
    element, duplicate an element, nest a value, nudge a number), sometimes with raw-text
    damage after."""
    name = draw(st.sampled_from(sorted(seeds)))
    doc = json.loads(seeds[name])
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        if not paths:
            break
        parent, key = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "replace", "delete", "duplicate", "nest", "number", "number", "number"]))
        if op == "replace":
            parent[key] = copy.deepcopy(draw(st.sampled_from(HOSTILE_JSON)))
        elif op == "delete":
            del parent[key]
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        elif op == "nest":
            parent[key] = [parent[key]] if draw(st.booleans()) else {"x": parent[key]}
        elif op == "number" and isinstance(parent[key], int) and not isinstance(parent[key], bool):
            parent[key] += draw(st.sampled_from([-1, 1, -2, 2, 1000, 10**9]))
    text = json.dumps(doc, allow_nan=True)
    if draw(st.integers(0, 9)) == 0:
        text = draw(raw_damage(text))
    return text


@st.composite
def raw_damage(draw, text: str) -> str:
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, max(len(text) - 1, 0)))
        op = draw(st.sampled_from(["truncate", "insert", "delete", "deep"]))
        if op == "truncate":
            text = text[:at]
        elif op == "insert":
            text = text[:at] + draw(st.sampled_from(JUNK)) + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 20)):]
        else:
            depth = draw(st.sampled_from([50, 2000, 100_000]))
            text = text[:at] + "[" * depth + "]" * depth + text[at:]
    return text


@st.composite
def xml_text(draw, seeds: dict[str, str]) -> str:
    """A seed file with 1-4 tree edits (an attribute set to a hostile value or removed, an
    element removed or duplicated), sometimes with raw-text damage after."""
    name = draw(st.sampled_from(sorted(seeds)))
    root = ET.fromstring(seeds[name])
    elements = list(root.iter())
    for _ in range(draw(st.integers(1, 4))):
        el = draw(st.sampled_from(elements))
        op = draw(st.sampled_from(["attr", "attr", "attr", "drop-attr", "remove", "duplicate", "inflate"]))
        if op == "inflate":  # a threadblock of thousands of steps: nops, or its own steps again
            tbs = [t for t in root.iter("tb")]
            if tbs:
                tb = draw(st.sampled_from(tbs))
                count = draw(st.sampled_from([1000, 10_000, 40_000]))
                steps = list(tb)
                kind = draw(st.sampled_from(["nop", "repeat"]))
                for k in range(count):
                    if kind == "nop" or not steps:
                        new = ET.SubElement(tb, "step")
                        new.attrib.update(type="nop", srcbuf="i", srcoff="0", dstbuf="o", dstoff="0", cnt="0",
                                          depid="-1", deps="-1", hasdep="0")
                    else:
                        tb.append(copy.deepcopy(steps[k % len(steps)]))
                for k, s in enumerate(tb):
                    s.set("s", str(k))
                elements = list(root.iter())
            continue
        if op in ("attr", "drop-attr") and el.attrib:
            attr = draw(st.sampled_from(sorted(el.attrib)))
            if op == "attr":
                el.set(attr, draw(st.sampled_from(HOSTILE_ATTR)))
            else:
                del el.attrib[attr]
        elif op in ("remove", "duplicate") and el is not root:
            parent = next(p for p in root.iter() if el in list(p))
            if op == "remove":
                parent.remove(el)
            else:
                parent.insert(list(parent).index(el), copy.deepcopy(el))
            elements = list(root.iter())
    text = ET.tostring(root, encoding="unicode")
    if draw(st.integers(0, 9)) == 0:
        text = draw(raw_damage(text))
    return text


# ---------------------------------------------------------------------------- CLI
FILES = ["ag.json", "ar.json", "prog.json", "set.json", "topo.json", "ag.xml", "ar.xml", "req.ccl", "a2a.xml",
         "probe.json"]
BAD_FILES = ["missing.json", ".", "", "/nonexistent/x.json", "/dev/null", "/dev/zero", "req.ccl:t", "req.ccl:nosuch",
             "req.ccl:t(n = 3)", "req.ccl:t(n = -1)"]
TOPOLOGIES = ["ring:4", "dgx1", "fully-connected:3", "switch:4", "ndv2:2", "hypercube:8", "topo.json", "ring:0",
              "ring:1", "ring:-3", "ring:99999", "nosuch", "", "ring:4,bw=-1GB/s", "ring:4,lat=1e400us", "torus:2x2",
              "ring:1e9", "ring:4:5", "req.ccl:t", "fully-connected:5000"]
COLLECTIVES = ["allgather", "allreduce", "reducescatter", "alltoall", "broadcast", "reduce", "gather", "scatter",
               "", "nosuch", "allgather:3"]
SIZES = ["1KiB", "64MiB", "1", "0", "-5", "1e400", "1.5", "nan", "inf", "3B", "1e30", "1KiB,1MiB", "x", "",
         "18446744073709551616", "1GiB", "1e-3", "4KB", "1,2,3", "1KiB..1MiB"]
INTS = ["0", "1", "2", "3", "-1", "1000000000", "1e3", "x", "", "99999999999999999999", "4"]
FLOATS = ["0", "1", "0.5", "-5", "nan", "inf", "1e400", "x", "2"]
OUTPUTS = ["out.json", "out.xml", "sub/out.json", "ag.json", "prog.json", ".", "", "out.png", "outdir", "out.py",
           "a/b", "req.ccl"]
STRINGS = ["x", "", "a/b", "../x", "k=v", "time_limit=1", "x=1e400", "-", "--", "tp=2,dp=2", "gpt", "ring",
           "allgather", "0,1", "1MiB", "ag.json"]
FAST_SOLVERS = ["ring", "direct", "binomial-tree", "recursive-doubling", "double-binary-tree", "hierarchical",
                "multi-ring", "nosuch", ""]
SLOW_SOLVERS = ["smt", "milp", "teccl", "packing", "auto"]
SKIPPED = {"run", "probe"}  # start processes or a live job: covered by their own tests (probe files: the "probe" format)
SLOW_COMMANDS = {"pareto", "compare", "place"}

GROUPS = ["tp", "dp", "blocks:2", "stride:2", "0-1;2-3", "0-3;4-7", "0,2;1,3", "0-1000000000", "0-" + "9" * 40,
          "0-3;0-3", "0-3;" * 1000 + "4-7", "blocks:0", "stride:" + "9" * 40, "3-1", "0", "x", "", ";", "0-1;2",
          "blocks:1000000000"]
PLANS = ["tp=8", "tp=4,dp=2", "tp=1,dp=1,pp=1,ep=16", "tp=0", "tp=" + "9" * 40, "x", "tp=8,tp=8", ""]
COMMS = ["tp=allreduce:1MiB", "ep=alltoall:1MiB", "tp=allreduce:1MiB*1e9", "tp=nosuch:1MiB", "x", ""]

POOLS = {
    "topology": TOPOLOGIES, "collective": COLLECTIVES, "size": SIZES, "sizes": SIZES, "min_bytes": SIZES,
    "max_bytes": SIZES, "local_bandwidth": ["25GB/s", "0", "-1GB/s", "1e400GB/s", "x", "inf"],
    "output": OUTPUTS, "o": OUTPUTS, "trace": OUTPUTS, "plot": OUTPUTS, "save_dir": OUTPUTS,
    "time_limit": FLOATS, "time_budget": FLOATS, "timeout": FLOATS,
    "file": FILES + BAD_FILES, "files": FILES + BAD_FILES, "sketch": FILES + BAD_FILES,
    "groups": GROUPS, "plan": PLANS, "comm": COMMS, "source": ["probe.json"] + FILES + BAD_FILES,
}


def commands(slow: bool) -> list[tuple[list[str], list[argparse.Action]]]:
    """Every leaf command of ``ccl`` with its actions (help excluded)."""
    from ccl.cli import build_parser

    out = []

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            for name, sp in subs[0].choices.items():
                if name in SKIPPED or (name in SLOW_COMMANDS and not slow):
                    continue
                walk(sp, [*path, name])
            return
        out.append((path, [a for a in p._actions if not isinstance(a, argparse._HelpAction)]))

    walk(build_parser(), [])
    return out


def _values(action: argparse.Action, slow: bool) -> list[str]:
    if action.choices:
        return [*map(str, action.choices), "nosuch", ""]
    name = action.dest
    if name == "solver" or name == "solvers":
        return FAST_SOLVERS + (SLOW_SOLVERS if slow else []) + (["ring,direct", "all"] if name == "solvers" else [])
    if name in POOLS:
        return POOLS[name]
    kind = getattr(action.type, "__name__", "")
    if kind in ("int", "positive_int", "_positive"):
        return INTS
    if kind == "float":
        return FLOATS
    if kind == "sizes_arg":
        return SIZES
    return STRINGS + FILES


@st.composite
def argv(draw, slow: bool) -> list[str]:
    """A command, its positionals (sometimes missing) and 0-5 of its options with values from
    ordinary and hostile pools; sometimes an unknown option or a stray word."""
    path, actions = draw(st.sampled_from(commands(slow)))
    out = list(path)
    positionals = [a for a in actions if not a.option_strings]
    options = [a for a in actions if a.option_strings]
    for a in positionals:
        if draw(st.integers(0, 9)) == 0:
            continue  # missing
        n = draw(st.integers(1, 3)) if a.nargs in ("+", "*") else 1
        out += [draw(st.sampled_from(_values(a, slow))) for _ in range(n)]
    for a in draw(st.lists(st.sampled_from(options), max_size=5)) if options else []:
        flag = draw(st.sampled_from(a.option_strings))
        if a.nargs == 0:
            out.append(flag)
        else:
            out += [flag, draw(st.sampled_from(_values(a, slow)))]
    if not slow and out[0] == "synthesize" and "--time-limit" not in out:
        out += ["--time-limit", "5"]  # quick mode: bounded solver runs
    extra = draw(st.integers(0, 14))
    if extra == 0:
        out.insert(draw(st.integers(0, len(out))), draw(st.sampled_from(["--bogus", "-z", "--json", "x", "--", "-"])))
    return out
