"""Resource bounds (ccl.core.limits): hostile input is refused before memory is spent, with exit 2
and one line naming the limit and the variable that raises it.

Every hostile case runs in one child process capped at 2 GiB of address space (a regression
that allocates by the asked-for count dies there instead of taking the machine), each through
``ccl.cli.main`` with its own environment.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

from ccl.cli import main
from ccl.core import limits
from ccl.core.errors import InputError
from ccl.core.serialize import load_algorithm, program_to_json

CAP = 2 << 30  # bytes of address space for the child

DRIVER = r"""
import contextlib, io, json, os, sys
from ccl.cli import main
results = []
for argv, env in json.load(sys.stdin):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
        except BaseException as exc:
            rc, err = repr(exc), io.StringIO(repr(exc))
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    results.append([rc, err.getvalue()])
print(json.dumps(results))
"""


def run_capped(cases: list[tuple[list[str], dict[str, str]]], cwd) -> list[tuple[object, str]]:
    """Run ``ccl.cli.main(argv)`` for every case in one child under the memory cap."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    env = {k: v for k, v in os.environ.items() if not k.startswith("CCL_MAX_")}
    env["CCL_QUIET"] = "1"
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(cases), capture_output=True, text=True,
                          cwd=cwd, env=env, preexec_fn=cap, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [tuple(x) for x in json.loads(proc.stdout)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A good algorithm and program file and hostile variants of them."""
    d = tmp_path_factory.mktemp("limits")
    good = d / "ag.json"
    assert main(["synthesize", "-t", "ring:4", "-c", "allgather", "-s", "ring", "-q", "-o", str(good)]) == 0
    alg = json.loads(good.read_text())

    def variant(name, change):
        data = json.loads(json.dumps(alg))
        change(data)
        (d / name).write_text(json.dumps(data))

    variant("chunk_factor.json", lambda a: a["collective"].update(chunk_factor=10**9))
    variant("n_ranks.json", lambda a: (a["collective"].update(n_ranks=10**9), a["topology"].update(n_ranks=10**9)))
    variant("coll_ranks.json", lambda a: a["collective"].update(n_ranks=100_000))
    variant("step.json", lambda a: a["transfers"][0].__setitem__(0, 10**9))
    variant("sparse.json", lambda a: a["transfers"][-1].__setitem__(0, 500_000))
    variant("far_step.json", lambda a: a["transfers"][-1].__setitem__(0, 10**9))
    variant("scratch.json", lambda a: a["transfers"].append([0, 0, "output", 0, 1, "scratch", 10**9, 1, "copy"]))
    variant("rounds.json", lambda a: a.update(rounds=[1] * 2_000_000))
    topo = dict(alg["topology"], n_ranks=10**9)
    del topo["node_of"]
    (d / "topo.json").write_text(json.dumps(topo))
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "digits.json").write_text('{"n_ranks": ' + "7" * 100_000 + "}")
    os.mkfifo(d / "fifo.json")
    program = program_to_json(__import__("ccl").lower(load_algorithm(good)))
    (d / "prog_steps.json").write_text(json.dumps(dict(program, steps=10**9)))
    (d / "prog_ranks.json").write_text(json.dumps(dict(program, collective_spec=dict(program["collective_spec"],
                                                                                      n_ranks=10**6))))
    # "[[],[],...]" expands ~20x when parsed: over the child's 2 GiB cap, refused before parsing
    with open(d / "expands.json", "w") as fh:
        fh.write("[" + "[]," * 30_000_000 + "[]]")
    return d


HOSTILE = {
    # name: (argv, env, exit code, words the one line must hold)
    "device": (["topology", "show", "/dev/zero"], {}, 2, ["/dev/zero", "device", "regular"]),
    "device-verify": (["verify", "/dev/zero"], {}, 2, ["device"]),
    "device-xml": (["import", "msccl", "/dev/zero", "-o", "out.json"], {}, 2, ["device"]),
    "fifo": (["verify", "fifo.json"], {}, 2, ["FIFO"]),
    "device-dsl": (["check", "/dev/zero"], {}, 2, ["device"]),
    "fifo-dsl": (["check", "fifo.json"], {}, 2, ["FIFO"]),
    "fifo-topology": (["synthesize", "-t", "fifo.json", "-c", "allgather"], {}, 2, ["FIFO"]),
    "file-size": (["verify", "ag.json"], {"CCL_MAX_INPUT_BYTES": "100"}, 2,
                  ["too large", "limit of 100 bytes", "CCL_MAX_INPUT_BYTES"]),
    "deep-json": (["verify", "deep.json"], {}, 2, ["nested too deeply"]),
    "json-digits": (["verify", "digits.json"], {}, 2, ["invalid JSON", "digits"]),
    "chunks-auto": (["synthesize", "-t", "ring:4", "-c", "allgather", "-k", "1000000000"], {}, 2,
                    ["chunk factor 1000000000", "CCL_MAX_SLOTS"]),
    "chunks-ring": (["synthesize", "-t", "ring:4", "-c", "allreduce", "-s", "ring", "-k", "1000000000"], {}, 2,
                    ["CCL_MAX_SLOTS"]),
    "pareto-chunks": (["pareto", "-t", "ring:4", "-c", "allgather", "--max-chunks", "1000000000"], {}, 2,
                      ["CCL_MAX_SLOTS"]),
    "smt-steps": (["synthesize", "-t", "ring:4", "-c", "allgather", "-s", "smt", "--steps", "100000"], {}, 2,
                  ["100000 steps", "CCL_MAX_SMT_VARS"]),
    "request-steps": (["synthesize", "-t", "ring:4", "-c", "allgather", "-s", "smt", "--steps", "2000000"], {}, 2,
                      ["CCL_MAX_STEPS"]),
    "slices": (["simulate", "ag.json", "--size", "1MiB", "--slices", "10000000"], {}, 2,
               ["10000000 slices", "CCL_MAX_SIM_OPS"]),
    "json-chunk-factor": (["verify", "chunk_factor.json"], {}, 2, ["chunk factor 1000000000", "CCL_MAX_SLOTS"]),
    "json-ranks": (["verify", "n_ranks.json"], {}, 2, ["1000000000 ranks", "CCL_MAX_RANKS"]),
    "json-collective-ranks": (["verify", "coll_ranks.json"], {}, 2, ["100000 ranks", "topology"]),
    "json-step": (["verify", "step.json"], {}, 2, ["step 1000000000", "CCL_MAX_STEPS"]),
    "json-last-step": (["verify", "far_step.json"], {}, 2, ["step 1000000000", "CCL_MAX_STEPS"]),
    "json-scratch": (["verify", "scratch.json"], {}, 2, ["scratch", "CCL_MAX_SLOTS"]),
    "json-rounds": (["verify", "rounds.json"], {}, 2, ["rounds", "CCL_MAX_STEPS"]),
    "json-topology-ranks": (["topology", "show", "topo.json"], {}, 2, ["CCL_MAX_RANKS"]),
    "program-steps": (["verify", "prog_steps.json"], {}, 2, ["steps", "CCL_MAX_STEPS"]),
    "program-ranks": (["verify", "prog_ranks.json"], {}, 2, ["1000000 ranks"]),
    "cluster-links": (["topology", "show", "dgx-h100:100000"], {}, 2, ["links", "CCL_MAX_LINKS"]),
    "dense-links": (["topology", "show", "fully-connected:5000"], {"CCL_MAX_LINKS": "20000"}, 2,
                    ["limit of 20000 links", "CCL_MAX_LINKS"]),
    "flat-links": (["topology", "show", "switch:5000", "--flat"], {}, 2, ["rank-to-rank", "CCL_MAX_LINKS"]),
    "ring-ranks": (["topology", "show", "ring:1000000000"], {}, 2, ["1000000000"]),
    "torus": (["topology", "show", "torus:100000x100000"], {}, 2, ["torus"]),
    "instances": (["emit", "msccl", "ag.json", "-o", "x.xml", "--instances", "1000000000"], {}, 2,
                  ["--instances 1000000000", "at most"]),
    "probe-processes": (["probe", "--local", "100000"], {}, 2, ["100000 processes", "CCL_MAX_LOCAL_PROCESSES"]),
    "bad-variable": (["verify", "ag.json"], {"CCL_MAX_SLOTS": "lots"}, 2, ["CCL_MAX_SLOTS", "positive integer"]),
    "json-expands": (["verify", "expands.json"], {}, 2, ["expands.json", "too large to parse in memory",
                                                          "CCL_MAX_INPUT_BYTES"]),
    "nul-path": (["verify", "in\x00.json"], {}, 2, ["NUL character"]),
    "nul-topology": (["synthesize", "-t", "t\x00.json", "-c", "allgather"], {}, 2, ["NUL character"]),
    "nul-dsl": (["check", "d\x00.ccl"], {}, 2, ["NUL character"]),
    "run-ranks": (["run", "ag.json", "--size", "1KiB", "--ranks", "1000000000"], {}, 2,
                  ["ranks 1000000000", "1000000000 processes", "CCL_MAX_LOCAL_PROCESSES"]),
    "run-schedule-ranks": (["run", "ag.json", "--size", "1KiB"], {"CCL_MAX_LOCAL_PROCESSES": "3"}, 2,
                           ["is for 4 ranks", "limit of 3 processes", "CCL_MAX_LOCAL_PROCESSES"]),
    "probe-memory": (["probe", "--local", "2", "--sizes", "4KiB,1024TiB"], {}, 2, ["GiB of memory"]),
    "probe-repeat": (["probe", "--local", "2", "--repeat", "1000000000"], {}, 2, ["--repeat 1000000000", "at most"]),
    "place-model": (["place", "-t", "dgx1", "--plan", "tp=8", "--layers", "100000", "--hidden", "10000000",
                     "--tokens", "4096"], {}, 2, ["gradients", "1024TiB"]),
    "place-layers": (["place", "-t", "dgx1", "--plan", "tp=8", "--layers", "1000000000", "--hidden", "4096",
                      "--tokens", "4096"], {}, 2, ["layers 1000000000", "1..100000"]),
    # within the limits: a sparse step costs nothing, and raising a limit lets a file through
    "sparse-step": (["verify", "sparse.json"], {}, 0, []),
    "raised": (["verify", "far_step.json"], {"CCL_MAX_STEPS": "2000000000"}, 0, []),
}


@pytest.fixture(scope="module")
def results(files):
    names = list(HOSTILE)
    out = run_capped([(HOSTILE[n][0], HOSTILE[n][1]) for n in names], files)
    return dict(zip(names, out))


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_input_is_refused_with_one_line_naming_the_limit(name, results):
    _, _, code, words = HOSTILE[name]
    rc, err = results[name]
    assert rc == code, (name, rc, err)
    assert "Traceback" not in err and "internal error" not in err and "MemoryError" not in err
    if code:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        for word in words:
            assert word in lines[0], (word, lines[0])


def test_reading_stops_after_the_limit(tmp_path, monkeypatch):
    """At most limit + 1 bytes are read even when a file grows past what stat said."""
    path = tmp_path / "x.json"
    path.write_text("[1]")
    monkeypatch.setenv("CCL_MAX_INPUT_BYTES", "3")
    assert limits.read_input_json(path) == [1]
    path.write_text("[1 ]")
    with pytest.raises(InputError, match=r"x.json is too large: 4 bytes, over the limit of 3 bytes \(set "
                                         r"CCL_MAX_INPUT_BYTES to raise it\)"):
        limits.read_input_json(path)


def test_every_limit_reads_its_variable(monkeypatch):
    for limit in limits.ALL:
        assert limit.env.startswith("CCL_MAX_") and limit.value == limit.default
        monkeypatch.setenv(limit.env, "7")
        assert limit.value == 7
        with pytest.raises(InputError, match=limit.env):
            limit.check(8, "something")
        monkeypatch.setenv(limit.env, "0")
        with pytest.raises(InputError, match=f"{limit.env}='0': expected a positive integer"):
            _ = limit.value


def test_the_python_api_checks_before_building(monkeypatch):
    from ccl.core.collective import builtin, multi_root
    from ccl.core.errors import CollectiveError

    with pytest.raises(CollectiveError, match="alltoall on 100000 ranks .*CCL_MAX_SLOTS"):
        builtin("alltoall", 100_000)
    with pytest.raises(CollectiveError, match="multi-root gather on 10000 ranks with 10000 roots"):
        multi_root("gather", 10_000, range(10_000))
    monkeypatch.setenv("CCL_MAX_SLOTS", "10")
    with pytest.raises(CollectiveError, match="chunk factor 3"):
        builtin("allreduce", 2).chunk_up(3)


def test_input_paths_with_a_nul_byte_are_bad_input(tmp_path):
    """Only a caller in-process can pass one (not a shell): the readers, the DSL and the CLI
    refuse it as bad input."""
    import dsl

    for read in (limits.read_input_json, limits.read_input_text, dsl.load, dsl.parse_file, load_algorithm):
        with pytest.raises(InputError, match="NUL"):
            read(str(tmp_path / "in\x00.json"))


def test_out_of_memory_while_parsing_is_bad_input(tmp_path, monkeypatch):
    """A MemoryError while parsing a file (the estimate missed) names the file and the limit."""
    path = tmp_path / "x.json"
    path.write_text("[1]")

    def no_memory(text):
        raise MemoryError

    monkeypatch.setattr(limits.json, "loads", no_memory)
    with pytest.raises(InputError, match=r"x.json: too large to parse in memory: .*CCL_MAX_INPUT_BYTES"):
        limits.read_input_json(path)


def test_parse_memory_estimate_only_counts_large_text(monkeypatch):
    """Normal files cost nothing extra; a text whose items outgrow the parse budget (16 bytes per
    byte of the input limit, at most the memory free) is refused."""
    monkeypatch.setattr(limits, "memory_available", lambda: 8 << 20)  # the memory free, when less
    limits.check_parse_memory("[" + "1," * 1000 + "1]", "small")  # 2 KB: not even counted
    limits.check_parse_memory(" " * 3_000_000, "blank")  # large but no items
    with pytest.raises(InputError, match=r"wide: too large to parse in memory \(needs about 124 MiB, 8 MiB "
                                         r"allowed\).*CCL_MAX_INPUT_BYTES"):
        limits.check_parse_memory("[" + "[]," * 1_000_000 + "[]]", "wide")
    monkeypatch.setattr(limits, "memory_available", lambda: None)
    monkeypatch.setenv("CCL_MAX_INPUT_BYTES", str(8 << 20))  # a budget of 128 MiB
    with pytest.raises(InputError, match=r"needs about 312 MiB, 128 MiB allowed"):
        limits.check_parse_memory(b"[" + b"[]," * 2_500_000 + b"[]]", "wide")
    monkeypatch.setenv("CCL_MAX_INPUT_BYTES", str(32 << 20))
    limits.check_parse_memory(b"[" + b"[]," * 2_500_000 + b"[]]", "wide")


def test_the_cli_reports_running_out_of_memory_in_one_line(files, monkeypatch, capsys):
    import ccl.compiler.loader

    def no_memory(path):
        raise MemoryError

    monkeypatch.setattr(ccl.compiler.loader, "read_json", no_memory)
    assert main(["verify", str(files / "ag.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ccl: out of memory") and len(err.strip().splitlines()) == 1, err
