"""Every bad value of every option gets exit 2 and one line on stderr (issue 15, deliverable 5).

A table of command lines, each with one bad value (negative, zero, huge, fractional,
non-numeric, nan, inf, empty, an unknown name, a root out of range, a bad time limit...), run
in-process through ``ccl.cli.main``: exit code 2, exactly one line on stderr, no traceback, and
the line names the bad value (or the option, for an empty value).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ccl.cli import main

NUMBERS = ("-1", "0", "1.5", "abc", "nan", "inf", "-inf", "1e400", "", "10" + "0" * 30)
SIZES = ("-1", "0", "1.5", "abc", "nan", "inf", "1e400", "1e30", "1e20", "", "0.5B", "1.5B", "2048TiB", "1XB",
         "1e999999999", "9" * 80)
SECONDS = ("-5", "0", "nan", "inf", "-inf", "1e30", "1e400", "abc", "", "5 days")


def _cases() -> list[tuple[list[str], str]]:
    """(argv with {ag} for a 4-rank allgather schedule file, the text stderr must contain)."""
    cases: list[tuple[list[str], str]] = []

    def add(prefix: list[str], option: str, values: tuple[str | tuple[str, str], ...]) -> None:
        """One case per value; the line must name the value (its first 20 characters), or
        the option when the value is empty or argparse takes it for an option (``-inf``), or
        the text given with the value as ``(value, text)``."""
        for item in values:
            value, needle = item if isinstance(item, tuple) else (item, item[:20])
            if not needle or (value.startswith("-") and not re.match(r"^-\d+$|^-\d*\.\d+$", value)):
                needle = option
            cases.append(([*prefix, option, value], needle))

    problem = ["-t", "ring:4", "-c", "allgather"]
    # sizes
    add(["simulate", "{ag}"], "--size", SIZES)
    add(["bounds", *problem], "--size", SIZES)
    add(["compare", *problem], "--size", SIZES)
    add(["run", "{ag}"], "--size", SIZES)
    add(["synthesize", *problem, "-s", "milp"], "--size", SIZES[:-1])
    add(["synthesize", *problem, "-s", "auto"], "--sizes", ("-1", "1e400", "abc", "nan", "0", ("1KiB..1e30", "1e30")))
    add(["pareto", *problem], "--sizes", ("-1", "1e400", "abc", "nan"))
    add(["emit", "msccl", "{ag}"], "--min-bytes", ("-1", "1e400", "abc", "1.5"))
    add(["emit", "msccl", "{ag}"], "--max-bytes", ("-1", "1e400", "abc", "1.5"))
    add(["probe", "--local", "2"], "--sizes", ("-1", "1e400", "abc", "0"))
    # counts
    for prefix, option in ((["synthesize", *problem, "-s", "ring"], "--chunks"),
                           (["synthesize", *problem, "-s", "smt"], "--steps"),
                           (["synthesize", *problem, "-s", "smt"], "--rounds"),
                           (["simulate", "{ag}", "--size", "1MiB"], "--slices"),
                           (["simulate", "{ag}", "--size", "1MiB"], "--channels"),
                           (["compare", *problem, "--size", "1MiB"], "--slices"),
                           (["run", "{ag}", "--size", "1KiB"], "--ranks"),
                           (["pareto", *problem], "--max-chunks"),
                           (["emit", "msccl", "{ag}"], "--instances"),
                           (["place", "-t", "dgx1", "--plan", "tp=8"], "--top"),
                           (["probe"], "--local")):
        add(prefix, option, NUMBERS)
    add(["run", "{ag}", "--size", "1KiB"], "--repeat", ("-1", "1.5", "abc", "nan", "", "10" + "0" * 30))
    add(["run", "{ag}", "--size", "1KiB"], "--warmup", ("-1", "1.5", "abc", "nan", "", "10" + "0" * 30))
    # times
    add(["run", "{ag}", "--size", "1KiB"], "--timeout", SECONDS)
    add(["probe", "--local", "2"], "--timeout", SECONDS)
    add(["compare", *problem, "--size", "1MiB"], "--time-limit", SECONDS)
    add(["synthesize", *problem, "-s", "milp"], "--time-limit", SECONDS)
    add(["synthesize", *problem, "-s", "auto"], "--time-budget", SECONDS[:1] + SECONDS[2:])
    add(["pareto", *problem], "--time-limit", SECONDS)
    # bandwidth
    add(["simulate", "{ag}", "--size", "1MiB"], "--local-bandwidth", ("-1", "0", "nan", "inf", "1e400", "abc"))
    # names
    add(["run", "{ag}", "--size", "1KiB"], "--dtype", ("uint64", "float31", "", "torch.float32"))
    add(["run", "{ag}", "--size", "1KiB"], "--op", ("median", ""))
    add(["synthesize", "-t", "ring:4", "-c", "allgather"], "--solver", ("nosuch",))
    add(["synthesize", "-t", "ring:4", "-s", "ring"], "--collective", ("allgatherx", ""))
    add(["synthesize", "-c", "allgather", "-s", "ring"], "--topology", ("nosuch:4", "ring:-1", ("ring:1e400", "1e400"),
                                                                       ("ring:x", "'x'"), ""))
    add(["synthesize", *problem, "-s", "milp"], "--backend", ("gurobi",))
    add(["simulate", "{ag}", "--size", "1MiB"], "--mode", ("fast",))
    add(["emit", "msccl", "{ag}"], "--protocol", ("LL64",))
    add(["probe", "--local", "2"], "--backend", ("mpi",))
    # roots
    for prefix in (["bounds", "-t", "ring:4", "-c", "broadcast", "--size", "1MiB"],
                   ["synthesize", "-t", "ring:4", "-c", "broadcast", "-s", "ring"]):
        add(prefix, "--root", ("-1", "4", "99", "1.5", "abc", "", "10" + "0" * 30))
    add(["synthesize", "-t", "ring:4", "-c", "broadcast", "-s", "smt"], "--roots", ("-1", "4", "x", "0,,1"))
    # groups
    add(["synthesize", "-t", "dgx1", "-c", "allreduce", "-s", "ring", "--size", "1MiB"], "--groups",
        ("blocks:0", "blocks:-1", "blocks:3", "stride:x", "0-3;3-7", "0-99", "nosuch", ("", "groups")))
    # placement
    add(["place", "-t", "dgx1"], "--plan", (("tp=0", "axis tp"), ("tp=-1", "-1"), ("tp=x", "x"), ("tp=3", "3"), ""))
    add(["place", "-t", "dgx1", "--plan", "tp=8"], "--model", ("-7B", "nan", "abc", "1e400"))
    model = ["place", "-t", "dgx1", "--plan", "tp=8", "--layers", "32", "--hidden", "4096", "--tokens", "4096"]
    for option in ("--layers", "--hidden", "--tokens", "--microbatches"):
        add([a for a in model if a not in (option,)] if option == "--microbatches" else
            model[:model.index(option)] + model[model.index(option) + 2:], option, ("1000000000000",))
    add(["place", "-t", "dgx1", "--plan", "tp=8"], "--comm", (("tp=allreduce:1MiB*1e300", "1e+300"),))
    add(["probe", "--local", "2"], "--repeat", ("1000000000",))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def ag(tmp_path_factory):
    import ccl

    path = tmp_path_factory.mktemp("bad-values") / "ag.json"
    ccl.save(ccl.synthesize(ccl.problem("ring:4", "allgather", solver="ring")).algorithm, path)
    return str(path)


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse exits with 2 on a bad option value
        return int(exc.code or 0)


@pytest.mark.parametrize(("argv", "needle"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_value_is_exit_2_and_one_line(argv, needle, ag, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("{ag}", ag) for a in argv] + ["--quiet"]
    code = _run(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, f"exit {code}: {err}"
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert needle in err, err


def test_run_knows_the_element_types_the_driver_runs():
    """``ccl run --dtype`` is checked at parse time against the same types the driver takes."""
    from ccl.cli.run import DTYPES
    from ccl.compiler.runtimes import DTYPES as RUNTIME_DTYPES

    assert set(DTYPES) == set(RUNTIME_DTYPES)


@pytest.mark.slow  # starts gloo processes (tests/ccl/test_cli_emit_run.py runs --round by default)
def test_run_round_reports_the_size_run(ag, capsys):
    """A size that is not whole elements per part runs only with --round, which says so."""
    pytest.importorskip("torch")
    assert _run(["run", ag, "--size", "1001", "--repeat", "0", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "992B or 1008B" in err and "--round" in err and len(err.strip().splitlines()) == 1
    assert _run(["run", ag, "--size", "1001", "--round", "--repeat", "0", "--quiet", "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert data["requested_size"] == 1001 and data["size_bytes"] == 992 and data["correct"] is True


def test_sizes_and_times_are_read_exactly():
    """No float on the way: 0.1KB is 100 bytes (0.1 * 1000 is not 100 in floats), 1e400 is too
    large rather than infinity, and every bound is enforced on the exact value."""
    from ccl import InputError
    from ccl.core.units import MAX_SIZE, parse_bandwidth, parse_seconds, parse_size, parse_sizes

    assert parse_size("0.1KB") == 100 and parse_size("1.5KiB") == 1536 and parse_size("2e3MiB") == 2000 << 20
    assert parse_size(MAX_SIZE) == MAX_SIZE and parse_size(1e6) == 10**6
    assert parse_seconds("2ms") == 0.002 and parse_bandwidth("100Gbps") == 12.5
    for bad in ("1e400", "1e-400", str(MAX_SIZE + 1), "0.5", "-1", "nan", "inf", "9" * 100, 1.5, float("inf"), True,
                None, 10**400):
        with pytest.raises(InputError):
            parse_size(bad)
    for bad in ("-1", "1e30", "nan", float("nan"), -0.5, "1e400"):
        with pytest.raises(InputError):
            parse_seconds(bad)
    with pytest.raises(InputError, match="at least 1 byte"):
        parse_sizes("0")


# Integer fields of the JSON formats: a float (even integral ones beyond this reader's leniency
# for 2.0), a bool, a string or null is refused naming the file and the field.
INT_FIELDS = {
    "chunk_factor": (lambda a: a["collective"], "chunk_factor", "collective chunk_factor"),
    "collective-ranks": (lambda a: a["collective"], "n_ranks", "collective n_ranks"),
    "topology-ranks": (lambda a: a["topology"], "n_ranks", "topology n_ranks"),
    "root": (lambda a: a["collective"], "root", "collective root"),
    "lanes": (lambda a: a["topology"]["links"][0], 4, "links[0] lanes"),
    "link-src": (lambda a: a["topology"]["links"][0], 0, "links[0] src"),
    "node_of": (lambda a: a["topology"]["node_of"], 0, "topology node_of[0]"),
    "step": (lambda a: a["transfers"][0], 0, "step"),
}


@pytest.mark.parametrize("value", [1.7, True, "2", None], ids=["float", "bool", "str", "null"])
@pytest.mark.parametrize("field", list(INT_FIELDS))
def test_integer_fields_of_a_file_must_be_integers(field, value, ag, tmp_path, capsys):
    import json

    where, key, name = INT_FIELDS[field]
    data = json.loads(Path(ag).read_text())
    if field == "node_of" and not data["topology"].get("node_of"):
        data["topology"]["node_of"] = [0, 0, 0, 0]
    if value is None and field == "root":  # null is "no root"
        return
    where(data)[key] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    assert _run(["verify", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and name in err, err


def test_integral_floats_are_read_as_integers(ag, tmp_path, capsys):
    import json

    data = json.loads(Path(ag).read_text())
    data["collective"]["chunk_factor"] = 1.0
    data["topology"]["n_ranks"] = 4.0
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(data))
    assert _run(["verify", str(path)]) == 0, capsys.readouterr().err


def test_program_and_set_files_check_their_integers(ag, tmp_path, capsys):
    import json

    import ccl
    from ccl.core.schedule_set import Entry, ScheduleSet, set_to_json
    from ccl.core.serialize import program_to_json

    alg = ccl.load(ag)
    program = program_to_json(ccl.lower(alg))
    sset = set_to_json(ScheduleSet("s", alg.topology, alg.collective, (Entry(alg, 0, None, "ring"),), (), (), {}))
    cases = {"prog-steps": (dict(program, steps=2.5), "program steps"),
             "prog-channels": (dict(program, channels=True), "program channels"),
             "prog-chunk_factor": (dict(program, collective_spec=dict(program["collective_spec"], chunk_factor=1.7)),
                                   "collective chunk_factor"),
             "set-chunk_factor": (dict(sset, collective=dict(sset["collective"], chunk_factor="1")),
                                  "collective chunk_factor")}
    for label, (data, name) in cases.items():
        path = tmp_path / f"{label}.json"
        path.write_text(json.dumps(data))
        assert _run(["verify", str(path)]) == 2, label
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(path) in err and name in err, (label, err)
