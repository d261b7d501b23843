"""Versioned JSON for topologies, collectives and algorithms, with lossless round-trip, and of
requests and Programs (the problem and program stages, written for reading).

Files are deterministic: the same value always gives the same bytes. Algorithm files are
self-contained (they carry their topology and collective) so ``ccl verify FILE`` needs nothing
else. Built-in collectives are stored by their spec and rebuilt; custom ones explicitly. Links
and transfers are written one per line as arrays, so files stay small and diff well.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from . import files, limits
from .algorithm import Algorithm, Transfer
from .collective import BUILTIN_KINDS, Collective, builtin, runtime_aliases
from .errors import CclError, CollectiveError, InputError
from .limits import read_input_json
from .problem import Request
from .program import OP_FIELDS, PLAIN_OP_FIELDS, Program
from .topology import LINK_FIELDS, Link, SharedLimit, Switch, Topology

FORMAT_VERSION = 1
TRANSFER_FIELDS = list(Transfer._fields)


# ---------------------------------------------------------------------- topology
def topology_to_json(topo: Topology) -> dict[str, Any]:
    return topo.to_json()


def _int(value: Any, field: str) -> int:
    """An integer field of a file: an int, or a float with an integral value (2.0); InputError
    naming ``field`` for anything else (1.7, true, "3", null)."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    raise InputError(f"{field}: expected an integer, got {json.dumps(value) if _plain(value) else repr(value)}")


def _num(value: Any, field: str) -> float:
    """A number field of a file: an int or a float, not a bool or a string."""
    if type(value) in (int, float):
        return float(value)
    raise InputError(f"{field}: expected a number, got {json.dumps(value) if _plain(value) else repr(value)}")


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str)) and len(str(value)) < 80


def _ints(values: Any, field: str) -> tuple[int, ...]:
    if not isinstance(values, list):
        raise InputError(f"{field}: expected an array of integers")
    return tuple(_int(v, f"{field}[{i}]") for i, v in enumerate(values))


def _link(k: int, row: Any) -> Link:
    if not isinstance(row, list) or len(row) != len(LINK_FIELDS):
        raise InputError(f"links[{k}]: expected an array of {len(LINK_FIELDS)} fields {list(LINK_FIELDS)}")
    a, b, bw, lat, lanes = row
    return Link(_int(a, f"links[{k}] src"), _int(b, f"links[{k}] dst"), _num(bw, f"links[{k}] bandwidth_GBps"),
                _num(lat, f"links[{k}] latency_us"), _int(lanes, f"links[{k}] lanes"))


def _pair(field: str, pair: Any) -> tuple[int, int]:
    if not isinstance(pair, list) or len(pair) != 2:
        raise InputError(f"{field}: expected a [src, dst] pair")
    return _int(pair[0], f"{field} src"), _int(pair[1], f"{field} dst")


def topology_from_json(data: dict[str, Any]) -> Topology:
    return Topology(
        name=str(data["name"]),
        n_ranks=_int(data["n_ranks"], "topology n_ranks"),
        links=tuple(_link(k, row) for k, row in enumerate(data["links"])),
        switches=tuple(Switch(s["name"], s.get("kind", "switch"), s.get("node"), s.get("reduce", False))
                       for s in data.get("switches", [])),
        limits=tuple(
            SharedLimit(x["name"], tuple(_pair(f"limits[{i}] links[{j}]", p) for j, p in enumerate(x["links"])),
                        _num(x["bandwidth_GBps"], f"limits[{i}] bandwidth_GBps"))
            for i, x in enumerate(data.get("limits", []))
        ),
        node_of=_ints(data.get("node_of", []), "topology node_of"),
        accelerator=data.get("accelerator", ""),
    )


# ---------------------------------------------------------------------- collective
def _is_builtin(coll: Collective) -> bool:
    if coll.kind not in BUILTIN_KINDS:
        return False
    try:
        rebuilt = builtin(coll.kind, coll.n_ranks, coll.root, coll.chunk_factor)
    except CclError:
        return False
    return replace(rebuilt, name=coll.name) == coll if rebuilt.name != coll.name else rebuilt == coll


def collective_to_json(coll: Collective) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": coll.name,
        "kind": coll.kind,
        "n_ranks": coll.n_ranks,
        "root": coll.root,
        "chunk_factor": coll.chunk_factor,
    }
    if not _is_builtin(coll):
        out["kind"] = coll.kind
        out["explicit"] = True
        out["inputs"] = [list(x) for x in coll.inputs]
        out["outputs"] = [[sorted(need) for need in slots] for slots in coll.outputs]
        out["aliases"] = [list(x) for x in coll.aliases]
        if coll.in_place_aliases != runtime_aliases(coll):  # declared, not the kind's convention
            out["in_place_aliases"] = [list(x) for x in coll.in_place_aliases]
    return out


def collective_from_json(data: dict[str, Any]) -> Collective:
    n_ranks = _int(data["n_ranks"], "collective n_ranks")
    chunk_factor = _int(data.get("chunk_factor", 1), "collective chunk_factor")
    root = data.get("root")
    if root is not None:
        root = _int(root, "collective root")
    if data.get("explicit"):
        def rows(key: str) -> list[Any]:
            value = data[key]
            if not isinstance(value, list) or not all(isinstance(x, list) for x in value):
                raise InputError(f"collective {key}: expected an array of arrays per rank")
            return value

        return Collective(
            name=str(data["name"]),
            kind=str(data["kind"]),
            n_ranks=n_ranks,
            inputs=tuple(_ints(slots, f"collective inputs[{r}]") for r, slots in enumerate(rows("inputs"))),
            outputs=tuple(tuple(frozenset(_ints(need, f"collective outputs[{r}][{i}]")) for i, need in enumerate(slots))
                          for r, slots in enumerate(rows("outputs"))),
            aliases=tuple(tuple(None if a is None else _int(a, f"collective aliases[{r}][{i}]")
                                for i, a in enumerate(slots)) for r, slots in enumerate(rows("aliases"))),
            root=root,
            chunk_factor=chunk_factor,
            in_place_aliases=None if "in_place_aliases" not in data else tuple(
                tuple(None if a is None else _int(a, f"collective in_place_aliases[{r}][{i}]")
                      for i, a in enumerate(slots)) for r, slots in enumerate(rows("in_place_aliases"))),
        )
    coll = builtin(str(data["kind"]), n_ranks, root, chunk_factor)
    name = str(data.get("name", coll.name))
    return coll if name == coll.name else replace(coll, name=name)


# ---------------------------------------------------------------------- algorithm
def algorithm_to_json(alg: Algorithm) -> dict[str, Any]:
    return {
        "format": "ccl-algorithm",
        "version": FORMAT_VERSION,
        "name": alg.name,
        "solver": alg.solver,
        "rounds": None if alg.rounds is None else list(alg.rounds),
        "collective": collective_to_json(alg.collective),
        "topology": topology_to_json(alg.topology),
        "transfer_fields": TRANSFER_FIELDS,
        "transfers": TransferRows(alg.transfers),
    }


class TransferRows(list):
    """Transfers for ``dumps``: written one array per line without a json.dumps call per row
    (schedules reach millions of transfers; every field is an int or a validated name). The
    rows are the ``Transfer`` tuples themselves, which ``json.dumps`` also writes as arrays
    (a list per row cost 1.3 s of writing a 496,000-transfer schedule)."""

    def __init__(self, transfers: tuple[Transfer, ...]) -> None:
        super().__init__(transfers)
        self.transfers = transfers

    def lines(self) -> list[str]:
        return [f'[{a},{b},"{c}",{d},{e},"{f}",{g},{h},"{i}"]' for a, b, c, d, e, f, g, h, i in self.transfers]


def algorithm_from_json(data: dict[str, Any], *, topology: Topology | None = None,
                        collective: Collective | None = None) -> Algorithm:
    """An Algorithm from its JSON; ``topology`` / ``collective``, when given, are the already
    built values of ``data["topology"]`` / ``data["collective"]`` (a schedule set's entries share
    them: building them once per entry would cost entries x topology size)."""
    if not isinstance(data, dict) or data.get("format") != "ccl-algorithm":
        raise InputError("not an algorithm file (expected \"format\": \"ccl-algorithm\")")
    version = data.get("version")
    if version != FORMAT_VERSION:
        raise InputError(f"algorithm file version {version!r} is not supported (this tool reads version {FORMAT_VERSION})")
    fields = data.get("transfer_fields", TRANSFER_FIELDS)
    if list(fields) != TRANSFER_FIELDS:
        raise InputError(f"transfer_fields must be {TRANSFER_FIELDS}, got {fields}")
    transfers = []
    for k, row in enumerate(data["transfers"]):
        if not isinstance(row, list) or len(row) != len(TRANSFER_FIELDS):
            raise InputError(f"transfer {k}: expected an array of {len(TRANSFER_FIELDS)} fields {TRANSFER_FIELDS}, got {row!r}")
        try:
            transfers.append(Transfer(*row))
        except CollectiveError as exc:
            raise CollectiveError(f"transfer {k} {exc.message.removeprefix('transfer ')}") from None
    rounds = data.get("rounds")
    if topology is None:
        topology = topology_from_json(data["topology"])
    if collective is None:
        _check_ranks(data["collective"], topology)
        collective = collective_from_json(data["collective"])
    return Algorithm(
        name=str(data["name"]),
        collective=collective,
        topology=topology,
        transfers=tuple(transfers),
        rounds=None if rounds is None else _ints(rounds, "rounds"),
        solver=str(data.get("solver", "")),
    )


def _check_ranks(coll: Any, topology: Topology) -> None:
    """A collective's JSON names the topology's rank count (checked before it is built: a
    collective of the wrong size may be large)."""
    n = coll.get("n_ranks") if isinstance(coll, dict) else None
    if n is not None and _int(n, "collective n_ranks") != topology.n_ranks:
        raise CollectiveError(f"the collective has {n!r} ranks but topology {topology.name!r} has {topology.n_ranks}")


# ---------------------------------------------------------------------- text and files
def request_to_json(request: Request) -> dict[str, Any]:
    """A Request as JSON (the problem stage's ``request``)."""
    sketch = request.sketch
    return {
        "solver": request.solver, "chunks": request.chunks, "steps": request.steps, "rounds": request.rounds,
        "size": request.size, "time_limit": request.time_limit, "objective": request.objective,
        "sketch": None if sketch is None else {
            "relays": None if sketch.relays is None else list(sketch.relays),
            "internode": None if sketch.internode is None else [list(p) for p in sketch.internode],
            "switch_policy": sketch.switch_policy, "symmetry": list(sketch.symmetry),
            "chunk_partition": sketch.chunk_partition,
        },
        "options": {k: list(v) if isinstance(v, tuple) else v for k, v in request.options},
    }


PROGRAM_FORMAT = "ccl-program"


def program_to_json(program: Program) -> dict[str, Any]:
    """A Program as JSON: its summary (``n_ops`` ops in all), its collective and topology,
    scratch size classes and every rank's ops (``ops[r]``) as rows in ``op_fields`` order (deps
    a list). ``program_from_json`` reads it back."""
    summary = program.summary()
    summary["n_ops"] = summary.pop("ops")
    switched = program.n_switch_ops > 0  # the slot field only where pushes and pulls need it
    return {"format": PROGRAM_FORMAT, "version": 1, **summary,
            "scratch": [list(x) for x in program.scratch],
            "op_fields": list(OP_FIELDS if switched else PLAIN_OP_FIELDS),
            "ops": [[[*op[:10], list(op.deps), *((op.slot,) if switched else ())] for op in ops]
                    for ops in program.ranks],
            "collective_spec": collective_to_json(program.collective),
            "topology_spec": topology_to_json(program.topology)}


def program_from_json(data: dict[str, Any]) -> Program:
    """The Program of ``program_to_json`` (CollectiveError/InputError when malformed)."""
    if not isinstance(data, dict) or data.get("format") != PROGRAM_FORMAT:
        raise InputError(f"not a program file (expected \"format\": \"{PROGRAM_FORMAT}\")")
    if data.get("version") != 1:
        raise InputError(f"program file version {data.get('version')!r} is not supported (this tool reads version 1)")
    fields = list(data.get("op_fields", PLAIN_OP_FIELDS))
    if fields not in (list(OP_FIELDS), list(PLAIN_OP_FIELDS)):
        raise InputError(f"op_fields must be {list(OP_FIELDS)} (or without slot: {list(PLAIN_OP_FIELDS)})")
    if "collective_spec" not in data or "topology_spec" not in data:
        raise InputError("a program file needs collective_spec and topology_spec (written by this tool's "
                         "`ccl import` and `--emit program`)")
    rows = []
    for r, ops in enumerate(data["ops"]):
        row = []
        for i, op in enumerate(ops):
            if not isinstance(op, list) or len(op) != len(fields) or not isinstance(op[10], list):
                raise InputError(f"rank {r} op {i}: expected an array of {len(fields)} fields {fields}")
            row.append((*op[:10], tuple(op[10]), *op[11:]))
        rows.append(row)
    topology = topology_from_json(data["topology_spec"])
    _check_ranks(data["collective_spec"], topology)
    if len(rows) != topology.n_ranks:
        raise CollectiveError(f"ops has {len(rows)} ranks but topology {topology.name!r} has {topology.n_ranks}")
    steps = _int(data.get("steps", 0), "program steps")
    limits.STEPS.check(steps, "the program's steps")
    channels = _int(data.get("channels", 1), "program channels")
    return Program(name=str(data["name"]), collective=collective_from_json(data["collective_spec"]),
                   topology=topology, ops=rows,
                   scratch=tuple(_ints(x, f"program scratch[{i}]") for i, x in enumerate(data["scratch"])),
                   channels=channels, solver=str(data.get("solver", "")), steps=steps)


def _dump_rows(rows: list[list[Any]], indent: str) -> str:
    if not rows:
        return "[]"
    body = f",\n{indent}  ".join(json.dumps(r, separators=(",", ":")) for r in rows)
    return f"[\n{indent}  {body}\n{indent}]"


def dumps(value: dict[str, Any], _indent: str = "") -> str:
    """JSON text with two-space indentation where arrays of rows (links, transfers) are written one
    row per line."""
    rows_keys = {"links", "transfers", "node_of", "link_fields", "transfer_fields"}
    lines = []
    inner = _indent + "  "
    for key, item in value.items():
        head = f"{inner}{json.dumps(key)}: "
        if isinstance(item, dict):
            text = dumps(item, inner)
        elif isinstance(item, TransferRows):
            rows = item.lines()
            text = "[]" if not rows else "[\n" + inner + "  " + f",\n{inner}  ".join(rows) + f"\n{inner}]"
        elif key in rows_keys and isinstance(item, list) and item and isinstance(item[0], list):
            text = _dump_rows(item, inner)
        elif key in rows_keys or (isinstance(item, list) and all(not isinstance(x, (dict, list)) for x in item)):
            text = json.dumps(item, separators=(",", ":"))
        else:
            text = json.dumps(item, indent=None, separators=(",", ":"))
        lines.append(head + text)
    return "{\n" + ",\n".join(lines) + f"\n{_indent}}}"


# Every file is written whole or not at all, an existing file's permissions kept and only a
# regular file replaced: ``ccl.core.files`` (re-exported here, where the writers have always been).
write_atomic = files.write_atomic
write_text_atomic = files.write_text_atomic
write_all = files.write_all


def save_algorithm(alg: Algorithm, path: str | os.PathLike[str]) -> None:
    write_text_atomic(path, dumps(algorithm_to_json(alg)) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    """A JSON file: regular, within ``ccl.core.limits.INPUT_BYTES``, nested no deeper than the
    parser takes (InputError otherwise)."""
    return read_input_json(path)


def decode(path: str | os.PathLike[str], data: Any, read: Callable[[Any], Any], what: str) -> Any:
    """``read(data)`` (a ``*_from_json`` reader) with its errors as InputError naming the file
    ``path`` and the ``what`` it should hold."""
    try:
        return read(data)
    except CclError as exc:
        raise InputError(f"{path}: {exc.message}") from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        # OverflowError: int() of a non-finite number (JSON Infinity, NaN, 1e400) or a number
        # too large for a machine integer
        why = f"missing field {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
        raise InputError(f"{path}: malformed {what} file: {why}") from None


def load_algorithm(path: str | os.PathLike[str]) -> Algorithm:
    return decode(path, read_json(path), algorithm_from_json, "algorithm")
