"""The public Python API raises the project's errors for bad arguments (issue 15, deliverable 5).

The test walks ``ccl.__all__`` (and the public functions of ``ccl.collectives``, the solvers'
and backends' entry points and ``ccl.torch``'s argument checks): every parameter of every
callable, one at a time, is given each of ``BAD`` (None, a string where a number belongs, a
negative or fractional or huge number, nan, inf, an object, an empty container...) while the
other arguments stay good. Every call must either succeed or raise a ``CclError`` subclass:
never a raw TypeError, AttributeError, IndexError, KeyError, ValueError, OverflowError or
RecursionError. A second table pins values that must be refused, not accepted silently.

Dataclass and NamedTuple IR values (Transfer, Link, Topology, Algorithm, ...) are walked field
by field: a good instance's fields, one replaced by a bad value, passed to the constructor.
"""

from __future__ import annotations

import dataclasses
import inspect
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

import ccl
from ccl.core.errors import CclError, CollectiveError, InputError

NAN = float("nan")
INF = float("inf")


class _Opaque:
    """An object of no type the API knows."""

    def __repr__(self) -> str:
        return "<opaque>"


BAD: tuple[Any, ...] = (None, "x", "", -1, 0, 1.5, -2.5, 10**30, -(10**30), NAN, INF, -INF, True, _Opaque(), [],
                        {}, "1e400", "-5", b"bytes")
# The exceptions that must never escape the public API for a bad argument.
RAW = (TypeError, AttributeError, IndexError, KeyError, ValueError, OverflowError, RecursionError, ZeroDivisionError,
       AssertionError, LookupError, ArithmeticError, NotImplementedError, UnicodeError, MemoryError)

SLOW_CALL = 3.0  # seconds: a bad value must be refused quickly, not after work


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Good values to start from: a verified schedule, its Program and its files."""
    from ccl.core.schedule_set import Entry, ScheduleSet, save_set

    folder = tmp_path_factory.mktemp("api")
    result = ccl.synthesize(ccl.problem("ring:4", "allgather", solver="ring"))
    alg = result.algorithm
    program = ccl.lower(alg)
    ccl.save(alg, folder / "ag.json")
    (folder / "ag.xml").write_text(ccl.to_msccl(alg))
    sset = ScheduleSet("set", alg.topology, alg.collective, (Entry(alg, 0, None, "ring"),))
    save_set(sset, folder / "set.json")
    report = ccl.simulate(alg, 1024)
    return {"folder": folder, "result": result, "alg": alg, "program": program, "set": sset, "report": report,
            "problem": ccl.problem("ring:4", "allgather", solver="ring")}


class _TooSlow(BaseException):
    """Raised by the alarm when one call runs past ``HARD_LIMIT``."""


HARD_LIMIT = 20  # seconds: a call still running then is stopped and reported


def _alarm(signum: int, frame: Any) -> None:
    raise _TooSlow


def _call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> str | None:
    """None when ``fn(*args, **kwargs)`` succeeds or raises a CclError; else what went wrong."""
    start = time.perf_counter()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HARD_LIMIT)
    try:
        fn(*args, **kwargs)
    except _TooSlow:
        return f"still running after {HARD_LIMIT} s: stopped"
    except CclError as exc:
        text = str(exc)
        if not text or "\n" in text.strip() and not isinstance(exc, ccl.DslError):
            return f"{type(exc).__name__} with an empty or multi-line message: {text!r}"
        took = time.perf_counter() - start
        return None if took < SLOW_CALL else f"refused only after {took:.1f} s"
    except RAW as exc:
        return f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - anything else escaping is a failure too
        return f"{type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    took = time.perf_counter() - start
    return None if took < SLOW_CALL else f"accepted, but took {took:.1f} s"


def _walk(name: str, fn: Callable[..., Any], good: dict[str, Any], extra: dict[str, Any] | None = None,
          keep: dict[str, tuple[Any, ...]] | None = None) -> list[str]:
    """Call ``fn(**good)`` with each parameter replaced by each bad value in turn (and each of
    ``extra``'s keyword options, which ``fn`` takes through ``**options``); the failures.
    ``keep`` names values not tried for a parameter (a default that means "all the work")."""
    failures = []
    params = dict(good)
    params.update(extra or {})
    for key in params:
        for bad in BAD:
            if _same(bad, params[key]) or any(_same(bad, v) for v in (keep or {}).get(key, ())):
                continue
            kwargs = dict(good)
            kwargs[key] = bad
            problem = _call(fn, (), kwargs)
            if problem:
                failures.append(f"{name}({key}={bad!r}): {problem}")
    # an option nobody knows
    sig = inspect.signature(fn)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        problem = _call(fn, (), {**good, "no_such_option": 1})
        if problem:
            failures.append(f"{name}(no_such_option=1): {problem}")
    return failures


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def _instance_fields(obj: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
    return dict(obj._asdict())


def _good_instances(world: dict[str, Any]) -> dict[str, Any]:
    """A good instance of every class in ``ccl.__all__`` that is not an error."""
    from ccl.core.errors import Span

    alg, program = world["alg"], world["program"]
    return {
        "Algorithm": alg,
        "Collective": alg.collective,
        "Link": alg.topology.links[0],
        "Op": program.ranks[0][0],
        "Problem": world["problem"],
        "Program": program,
        "ProgramVerification": ccl.verify_program(program),
        "Report": world["report"],
        "Request": ccl.Request(solver="ring", chunks=2, steps=3, size=1024, time_limit=1.0),
        "SharedLimit": ccl.SharedLimit("nic", ((0, 1), (1, 2)), 25.0),
        "Sketch": ccl.Sketch(relays=(0,), internode=((0, 0),), symmetry=(2,), chunk_partition=2),
        "Span": Span("f.ccl", 1, 2, 1, 4),
        "Switch": ccl.Switch("sw", "switch", 0),
        "ScheduleSet": world["set"],
        "SynthesisResult": world["result"],
        "Topology": alg.topology,
        "Transfer": alg.transfers[0],
        "VerificationResult": world["result"].verification,
    }


def _classes() -> list[str]:
    return [n for n in ccl.__all__ if isinstance(getattr(ccl, n), type)
            and not issubclass(getattr(ccl, n), BaseException)]


def test_every_public_class_has_a_good_instance(world):
    assert sorted(_good_instances(world)) == sorted(_classes())


@pytest.mark.parametrize("name", _classes())
def test_constructors_raise_the_projects_errors(world, name):
    cls = getattr(ccl, name)
    good = _instance_fields(_good_instances(world)[name])
    assert cls(**good) is not None  # the good instance rebuilds
    failures = _walk(name, cls, good)
    assert not failures, "\n".join(failures)


def _functions(world: dict[str, Any]) -> dict[str, tuple[Callable[..., Any], dict[str, Any], dict[str, Any]]]:
    """Every function of ``ccl.__all__``: (the function, good arguments, good ``**options``)."""
    f = world["folder"]
    alg, program = world["alg"], world["program"]
    return {
        "executor": (ccl.executor, {"schedule": alg, "group": None},
                     {"channels": 1, "fuse": True, "timeout": 5.0, "validate": "first"}),
        "from_msccl": (ccl.from_msccl, {"path": str(f / "ag.xml"), "topology": None, "in_place": False}, {}),
        "load": (ccl.load, {"path": str(f / "ag.json")}, {}),
        "load_set": (ccl.load_set, {"path": str(f / "set.json")}, {}),
        "lower": (ccl.lower, {"algorithm": alg, "channels": 1, "fuse": True}, {}),
        "problem": (ccl.problem, {"topology": "ring:4", "collective": "allgather"},
                    {"solver": "ring", "chunks": 1, "root": None, "steps": None, "rounds": None, "size": None,
                     "time_limit": None, "objective": None, "sketch": None, "options": ()}),
        "save": (ccl.save, {"alg": alg, "path": str(f / "out.json")}, {}),
        "simulate": (ccl.simulate, {"schedule": alg, "size": 4096},
                     {"channels": 1, "fuse": True, "mode": "dependency", "slices": 1, "in_place": False,
                      "overlap_latency": False, "local_bandwidth": None, "bound": True, "baselines": True}),
        "synthesize": (ccl.synthesize, {"problem": world["problem"]}, {}),
        "to_msccl": (ccl.to_msccl, {"schedule": alg},
                     {"target": "msccl", "protocol": "Simple", "instances": 1, "min_bytes": 0, "max_bytes": None,
                      "mode": "auto", "name": "x", "channels": 1, "fuse": True}),
        "topology": (ccl.topology, {"spec": "ring:4"}, {}),
        "tune": (ccl.tune, {"topology": "ring:4", "collective": "allgather"},
                 {"sizes": "1KiB", "solvers": ["ring"], "chunks": 1, "root": None, "time_budget": 5.0,
                  "channels": 1, "fuse": True, "cache": False}),
        "verify": (ccl.verify, {"algorithm": alg, "in_place": False}, {}),
        "verify_program": (ccl.verify_program, {"program": program, "in_place": False}, {}),
    }


def _function_names() -> list[str]:
    return sorted(n for n in ccl.__all__ if callable(getattr(ccl, n)) and not isinstance(getattr(ccl, n), type))


def test_every_public_function_is_walked(world):
    assert sorted(_functions(world)) == _function_names()


@pytest.mark.parametrize("name", _function_names())
def test_functions_raise_the_projects_errors(world, name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a bad path such as "x" is written here, not in the repository
    if name == "executor":  # torch loads once, before the clock of any one call starts
        pytest.importorskip("torch.distributed")
    fn, good, options = _functions(world)[name]
    if name == "tune":  # keep the tuner quick: one solver, one size, no cache, whatever else is walked
        quick = {"sizes": "1KiB", "solvers": ["ring"], "cache": False}
        good = {**good, **quick}
        options = {k: v for k, v in options.items() if k not in quick}
        failures = _walk(name, fn, good, options, keep={"solvers": (None,)})
    else:
        failures = _walk(name, fn, good, options)
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------- beyond ccl.__all__
def _entry_points(world: dict[str, Any]) -> dict[str, tuple[Callable[..., Any], dict[str, Any], dict[str, Any]]]:
    """The collectives module's builders, the solvers' and the backends' entry points and the
    driver's local run: (function, good arguments, good ``**options``)."""
    import backends.sim as sim
    import solvers
    from ccl import collectives as C
    from ccl.compiler import run_local

    alg, program = world["alg"], world["program"]
    out: dict[str, tuple[Callable[..., Any], dict[str, Any], dict[str, Any]]] = {
        "collectives.builtin": (C.builtin, {"kind": "broadcast", "n": 4, "root": 1, "chunks": 2}, {}),
        "collectives.multi_root": (C.multi_root, {"kind": "broadcast", "n_ranks": 4, "roots": (0, 2), "chunks": 1}, {}),
        "collectives.replicated_broadcast": (C.replicated_broadcast, {"n_ranks": 4, "roots": (0, 2), "chunks": 1}, {}),
        "solvers.synthesize": (solvers.synthesize, {"problem": world["problem"], "judge": None}, {}),
        "solvers.solve": (solvers.solve, {"problem": world["problem"], "judge": None}, {}),
        "solvers.solvers_for": (solvers.solvers_for, {"kind": "allgather"}, {}),
        "backends.sim.simulate": (sim.simulate, {"program": program, "size": 4096.0},
                                  {"mode": "dependency", "slices": 1, "in_place": False, "overlap_latency": False,
                                   "local_bandwidth": None}),
        "compiler.run_local": (run_local, {"schedule": alg, "size": 4096, "channels": 1, "fuse": True,
                                           "topology": None},
                               {"repeat": 1, "warmup": 1, "dtype": "float32", "op": "sum", "in_place": False,
                                "timeout": 5.0, "ranks": 4, "check": True, "round_sizes": False}),
    }
    for kind in ("allgather", "reducescatter", "allreduce", "alltoall"):
        out[f"collectives.{kind}"] = (getattr(C, kind), {"n": 4}, {})
    for kind in ("broadcast", "reduce", "gather", "scatter"):
        out[f"collectives.{kind}"] = (getattr(C, kind), {"n": 4, "root": 1}, {})
    return out


ENTRY_POINTS = ["collectives.builtin", "collectives.multi_root", "collectives.replicated_broadcast",
                "collectives.allgather", "collectives.reducescatter", "collectives.allreduce", "collectives.alltoall",
                "collectives.broadcast", "collectives.reduce", "collectives.gather", "collectives.scatter",
                "solvers.synthesize", "solvers.solve", "solvers.solvers_for", "backends.sim.simulate",
                "compiler.run_local"]


@pytest.fixture
def no_processes(monkeypatch):
    """The local run's launch replaced by a stub: the walk checks the driver's boundary without
    starting processes (tests/backends/torch run them)."""
    import backends.torch.launch as launch

    def stub(programs, sizes, **options):
        return [None for _ in sizes]

    monkeypatch.setattr(launch, "run_local_sizes", stub)


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_entry_points_raise_the_projects_errors(world, name, no_processes):
    fn, good, options = _entry_points(world)[name]
    failures = _walk(name, fn, good, options)
    assert not failures, "\n".join(failures)


def test_torch_module_checks_its_arguments(world):
    """``ccl.torch``'s functions: a bad schedule, group or option is the project's error
    (before any process group is needed)."""
    pytest.importorskip("torch")
    import ccl.torch as ct

    failures = []
    failures += _walk("ccl.torch.executor", ct.executor, {"schedule": world["alg"], "group": None},
                      {"channels": 1, "fuse": True, "timeout": 5.0, "validate": "first"})
    failures += _walk("ccl.torch.registered", ct.registered, {"kind": "allgather", "group": None})
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------- values refused, not accepted
def _must_refuse(world: dict[str, Any]) -> list[tuple[str, Callable[[], Any], type[CclError], str]]:
    from ccl.compiler import run_local

    alg, program = world["alg"], world["program"]
    return [
        ("run_local size 0", lambda: run_local(alg, size=0), InputError, "at least 1 byte"),
        ("run_local size not whole elements", lambda: run_local(alg, size=1001), InputError, "1008B"),
        ("run_local dtype uint64", lambda: run_local(alg, size=1024, dtype="uint64"), InputError, "uint64"),
        ("run_local timeout -5", lambda: run_local(alg, size=1024, timeout=-5), InputError, "-5"),
        ("run_local repeat -1", lambda: run_local(alg, size=1024, repeat=-1), InputError, "-1"),
        ("simulate 1.5 bytes", lambda: ccl.simulate(alg, 1.5), InputError, "1.5"),
        ("simulate 0 bytes", lambda: ccl.simulate(alg, 0), InputError, "at least 1 byte"),
        ("simulate 1e400", lambda: ccl.simulate(alg, "1e400"), InputError, "1e400"),
        ("simulate huge", lambda: ccl.simulate(alg, 10**30), InputError, "limit"),
        ("simulate nan", lambda: ccl.simulate(program, NAN), InputError, "nan"),
        ("simulate unknown option", lambda: ccl.simulate(alg, 1024, colour="red"), InputError, "colour"),
        ("Transfer negative step", lambda: ccl.Transfer(step=-1, src=0, src_buf="input", src_index=0, dst=1,
                                                        dst_buf="output", dst_index=0), CollectiveError, "-1"),
        ("Transfer unknown buffer", lambda: ccl.Transfer(0, 0, "x", 0, 1, "output", 0), CollectiveError, "'x'"),
        ("Transfer float index", lambda: ccl.Transfer(0, 0, "input", 0.5, 1, "output", 0), CollectiveError, "0.5"),
        ("Transfer _replace", lambda: alg.transfers[0]._replace(count=0), CollectiveError, "count 0"),
        ("Request nan time limit", lambda: ccl.Request(time_limit=NAN), InputError, "nan"),
        ("Request huge size", lambda: ccl.Request(size=10**30), InputError, "limit"),
        ("Link nan bandwidth", lambda: ccl.Link(0, 1, NAN, 1.0), ccl.TopologyError, "nan"),
        ("problem unknown option", lambda: ccl.problem("ring:4", "allgather", colour=1), InputError, "colour"),
        ("lower channels huge", lambda: ccl.lower(alg, channels=10**30), CollectiveError, "channels"),
        ("to_msccl instances huge", lambda: ccl.to_msccl(alg, instances=10**30), InputError, "instances"),
        ("tune sizes huge", lambda: ccl.tune("ring:4", "allgather", sizes=[10**30], solvers=["ring"], cache=False),
         InputError, "limit"),
        ("load a number", lambda: ccl.load(7), InputError, "file name"),
    ]


def test_bad_values_are_refused_not_accepted(world):
    failures = []
    for what, call, error, needle in _must_refuse(world):
        try:
            call()
        except error as exc:
            if needle not in str(exc):
                failures.append(f"{what}: {type(exc).__name__} without {needle!r}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{what}: {type(exc).__name__}: {exc}")
            continue
        failures.append(f"{what}: accepted")
    assert not failures, "\n".join(failures)
