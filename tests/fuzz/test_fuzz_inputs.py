"""Every input format and the CLI, fuzzed: loading (and verifying) a damaged file either
succeeds or raises a project error (CclError); ``ccl`` with any argument vector exits 0, 2, 3,
4 or 5 (6 for ``emit``: a schedule the target cannot hold) with, on error, one ``ccl:`` line on
stderr and no traceback. Each case runs in a worker process under a 2 GiB address-space limit
and a per-case time limit (``harness.py``).

Quick mode by default (a few derandomized examples per format, the counts printed at the end);
the long mode::

    CCL_FUZZ=long CCL_FUZZ_EXAMPLES=2000 python -m pytest tests/fuzz -m fuzz -s

Every bad case of a run is collected (not just the first), and the test fails listing each
distinct one with a reproducer.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from . import harness as H
from . import strategies as S

QUICK = {"algorithm": 25, "program": 20, "topology": 20, "set": 15, "xml": 25, "dsl": 25, "cli": 30, "probe": 25,
         "cache": 15}

pytestmark = pytest.mark.fuzz


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz") / "fixtures"
    folder.mkdir()
    texts = H.make_fixtures(folder)
    worker = H.Worker(folder)
    worker.start()
    yield texts, worker
    worker.close()
    print("\n" + H.summary())


def _settings(fmt: str):
    return settings(max_examples=H.EXAMPLES or QUICK[fmt], deadline=None, derandomize=not H.LONG,
                    database=None if not H.LONG else settings.default.database,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate],
                    suppress_health_check=list(HealthCheck))


def _fuzz(fmt: str, strategy, worker, make_case) -> None:
    @_settings(fmt)
    @given(strategy)
    def prop(value):
        case = make_case(value)
        H.record(fmt, case, worker.run(case))

    prop()
    assert not H.FAILURES.get(fmt), H.report(fmt)


@pytest.mark.parametrize("fmt,seeds", [("algorithm", ("ag.json", "ar.json")), ("program", ("prog.json",)),
                                       ("topology", ("topo.json",)), ("set", ("set.json",)), ("probe", ("probe.json",)),
                                       ("cache", ("entry.json", "set.json"))])
def test_json_files(env, fmt, seeds):
    texts, worker = env
    strategy = S.json_text({name: texts[name] for name in seeds})
    _fuzz(fmt, strategy, worker, lambda text: {"format": fmt, "text": text})


def test_msccl_xml(env):
    texts, worker = env
    strategy = S.xml_text({name: texts[name] for name in ("ag.xml", "ar.xml", "a2a.xml") if name in texts})
    _fuzz("xml", strategy, worker, lambda text: {"format": "xml", "text": text})


def test_dsl_text(env):
    from ..dsl.test_fuzz import mutated  # the DSL's own mutation strategy (shipped files, tokens)

    texts, worker = env
    hostile = st.sampled_from(["let x = 10 ** 100000\n", "let x = " + "9" * 100_000 + "\n",
                               'let s = "' + "a" * 1_000_000 + '"\n', "let x = " + "(" * 10_000 + "1" + ")" * 10_000 + "\n",
                               "topology t(n = 4) {\n ranks n\n for i in 0..n { i <-> (i + 1) % n : 25 GB/s, 0.7 us }\n}\n"
                               "synthesize allgather on t with ring { chunks 1000000000 }\n"])
    strategy = st.one_of(mutated().map(lambda pt: pt[1] if isinstance(pt, tuple) else pt), hostile,
                         st.just(texts["req.ccl"]))
    _fuzz("dsl", strategy, worker, lambda text: {"format": "dsl", "text": text})


def test_cli_argument_vectors(env):
    texts, worker = env
    _fuzz("cli", S.argv(H.LONG), worker, lambda argv: {"format": "cli", "argv": argv})


def _edit(texts: dict, name: str, path: tuple, value) -> str:
    import json

    doc = json.loads(texts[name])
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(doc)


# Cases the fuzzers found (kept as fixed examples: each must load or fail as a project error).
REPRODUCERS = {
    "json-infinity-chunk-factor": lambda t: {"format": "algorithm",
                                             "text": _edit(t, "ag.json", ("collective", "chunk_factor"), float("inf"))},
    "json-1e400-n-ranks": lambda t: {"format": "algorithm",
                                     "text": _edit(t, "ag.json", ("topology", "n_ranks"), 0).replace(
                                         '"n_ranks": 0', '"n_ranks": 1e400')},
    "json-nan-link": lambda t: {"format": "topology",
                                "text": _edit(t, "topo.json", ("topology", "links", 0, 0), float("nan"))},
    "json-huge-node-of": lambda t: {"format": "topology",
                                    "text": _edit(t, "topo.json", ("topology", "node_of", 0), 10**17)},
    "json-2pow63-node-of": lambda t: {"format": "program",
                                      "text": _edit(t, "prog.json", ("topology_spec", "node_of", 0), 2**63)},
    "json-topology-key-missing": lambda t: {"format": "topology", "text": '{"format": "ccl-topology"}'},
    "dsl-100000-digit-integer": lambda t: {"format": "dsl", "text": "let x = " + "9" * 100_000 + "\n"},
    "cli-simulate-size-1e400": lambda t: {"format": "cli", "argv": ["simulate", "ag.json", "--size", "1e400"]},
    "cli-emit-instances-1e20": lambda t: {"format": "cli", "argv": ["emit", "msccl", "ag.json", "--instances",
                                                                    "99999999999999999999", "-o", "x.xml"]},
    # the issue's hostile cases (tests/ccl/test_hostile.py has them all)
    "xml-s-chunks-1e12": lambda t: {"format": "xml", "text": t["ag.xml"].replace('s_chunks="0"', 's_chunks="1000000000000"', 1)},
    "xml-30000-nops": lambda t: {"format": "xml", "text": _nops(t["ag.xml"], 30_000)},
    "cli-groups-1e9": lambda t: {"format": "cli", "argv": ["synthesize", "-t", "ring:8", "-c", "allgather", "-s", "ring",
                                                          "--groups", "0-1000000000", "--size", "1MiB"]},
    "probe-zero-time": lambda t: {"format": "probe", "text": t["probe.json"].replace('"4096": 10.8192', '"4096": 0', 1)},
    "cache-bare-set": lambda t: {"format": "cache", "text": t["set.json"]},
}


def _nops(text: str, count: int) -> str:
    """The file with ``count`` nop steps after gpu 0 tb 0's first step."""
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if 'type="cpy"' in line) + 1
    new = [f'      <step s="{k}" type="nop" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="0" depid="-1" deps="-1" '
           'hasdep="0"/>' for k in range(1, count + 1)]
    return "\n".join(lines[:at] + new + lines[at:])


@pytest.mark.parametrize("name", sorted(REPRODUCERS))
def test_reproducers_found_by_fuzzing(env, name):
    texts, worker = env
    case = REPRODUCERS[name](texts)
    answer = worker.run(case)
    H.record("reproducer", case, answer)
    assert answer["outcome"] != "bad", (answer.get("why"), (answer.get("trace") or answer.get("stderr") or "")[-600:])
