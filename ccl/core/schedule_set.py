"""Schedule sets: verified schedules of one collective on one machine, each serving a range of
message sizes, with the tuner's table that chose them.

A set is what ``ccl synthesize`` writes with ``--solver auto`` (the default): the tuner
simulated every candidate schedule at every swept size and kept, per size, the fastest. Its
entries cover every size from 1 byte up, without gaps or overlaps: entry ``i`` serves calls
of ``min_bytes <= size < max_bytes`` (``max_bytes`` None: no upper limit). ``pick(size)`` is
the dispatch every consumer uses (simulate, run, the torch script, the MSCCL files).

Every entry carries the NCCL protocol (LL, LL128, Simple) a runtime should run it with; the
tuner chooses it by NCCL's own rule at the entry's sizes (``ccl.compiler.msccl.entry_protocol``)
and the MSCCL export writes it (``proto=``). A set records the runtime it was tuned for
(``target``: its entries all export for it; None: any), and whether the tuner ran every
candidate it planned (``complete``: False when a wall-clock stop cut it short; such a set
depends on the machine's speed and is not cached).

An entry may be NCCL itself (``native``: the name of NCCL's algorithm, with its protocol): the
tuner gives a size to NCCL where NCCL's own pick, under the calibrated model, beats every
schedule it tried, so a set is never slower than NCCL at a swept size. Such an entry has no
algorithm; consumers leave its sizes to the runtime (no MSCCL file: the runtimes fall back to
NCCL outside the files' ranges; torch's own collective in the drop-in executor).

The file (``"format": "ccl-schedule-set"``) stores the topology and collective once; each
entry holds its algorithm without them (a native entry holds ``"native"`` instead). Files are deterministic except the timing fields
(``synthesis_seconds``). Files written before entries carried a protocol, and sets a target
and completeness, are read as protocol None (the exporter then applies the rule), target None
and complete; files without ``native`` entries are read as before (readers that predate native
entries refuse a file holding one).
"""

from __future__ import annotations

import math
import os
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from . import limits, validate
from .algorithm import Algorithm
from .collective import Collective
from .errors import CclError, InputError, VerificationError
from .serialize import (
    FORMAT_VERSION,
    TRANSFER_FIELDS,
    TransferRows,
    algorithm_from_json,
    collective_from_json,
    collective_to_json,
    decode,
    dumps,
    read_json,
    topology_from_json,
    topology_to_json,
    write_text_atomic,
)
from .topology import Topology
from .units import format_size
from .verify import verify

SET_FORMAT = "ccl-schedule-set"
SET_VERSION = 1
PROTOCOLS = ("LL", "LL128", "Simple")  # NCCL's protocols, as MSCCL files spell them
NATIVE = "NCCL"  # the runtime a native entry leaves its sizes to


@dataclass(frozen=True)
class Entry:
    """One schedule of a set and the sizes it serves: ``min_bytes <= size < max_bytes``. Its
    collective is the set's, maybe with another chunk factor. A native entry (``native``: the
    name of NCCL's algorithm there, e.g. "NVLS"; ``algorithm`` None; ``protocol`` NCCL's) leaves
    its sizes to NCCL itself: NCCL's own pick was faster than every schedule tried."""

    algorithm: Algorithm | None
    min_bytes: int
    max_bytes: int | None
    label: str  # the candidate it came from, e.g. "packing@64MiB" or "ring"; "NCCL NVLS/Simple" when native
    synthesis_seconds: float | None = None
    protocol: str | None = None  # LL, LL128 or Simple (None: not recorded, the exporter's rule applies)
    native: str | None = None  # NCCL's algorithm when NCCL itself serves these sizes (then no algorithm)

    def __post_init__(self) -> None:
        validate.name(self.label, "schedule set entry: label")
        if self.native is None:
            validate.instance(self.algorithm, Algorithm, "schedule set entry: algorithm")
        else:
            validate.name(self.native, f"schedule set entry {self.label!r}: native", empty=False)
            if self.algorithm is not None:
                raise InputError(f"schedule set entry {self.label!r}: a native entry ({NATIVE} {self.native}) has "
                                 "no algorithm")
            if self.protocol is None:
                raise InputError(f"schedule set entry {self.label!r}: a native entry names NCCL's protocol")
        validate.number(self.min_bytes, f"schedule set entry {self.label!r}: min_bytes", least=0)
        if self.max_bytes is not None:
            validate.number(self.max_bytes, f"schedule set entry {self.label!r}: max_bytes", least=0)
        if self.synthesis_seconds is not None:
            validate.number(self.synthesis_seconds, f"schedule set entry {self.label!r}: synthesis_seconds", least=0)
        if self.protocol is not None and self.protocol not in PROTOCOLS:
            raise InputError(f"schedule set entry {self.label!r}: protocol {self.protocol!r} is not one of "
                             f"{', '.join(PROTOCOLS)}")

    @property
    def is_native(self) -> bool:
        """NCCL itself serves these sizes (no algorithm of ours)."""
        return self.native is not None

    @property
    def served_by(self) -> str:
        """What serves the entry's sizes, in words: its label, or NCCL's choice ("NCCL
        NVLS/Simple, native")."""
        return f"{native_label(str(self.native), str(self.protocol))}, native" if self.is_native else self.label

    def serves(self, size: float) -> bool:
        return self.min_bytes <= size and (self.max_bytes is None or size < self.max_bytes)

    def range_text(self) -> str:
        hi = "" if self.max_bytes is None else format_size(self.max_bytes)
        return f"[{format_size(self.min_bytes)}, {hi or 'no limit'})"

    def summary(self) -> dict[str, Any]:
        """The entry's fields a report shows (a native entry: NCCL's algorithm, no schedule)."""
        alg = self.algorithm
        out: dict[str, Any] = {"label": self.label, "solver": None if alg is None else alg.solver,
                               "min_bytes": self.min_bytes, "max_bytes": self.max_bytes, "protocol": self.protocol,
                               "transfers": None if alg is None else len(alg.transfers),
                               "steps": None if alg is None else alg.n_steps}
        if alg is None:
            out["native"] = native_label(str(self.native), str(self.protocol))
        return out


def native_label(algorithm: str, protocol: str) -> str:
    """The label of a native entry: "NCCL NVLS/Simple"."""
    return f"{NATIVE} {algorithm}/{protocol}"


@dataclass(frozen=True)
class ScheduleSet:
    """Schedules of one collective on one topology by size range (see module docstring).
    ``table``: per swept size the winner (its entry), time, bound and NCCL models;
    ``candidates``: every schedule the tuner tried, with its times or why it is missing;
    ``options``: what the tuner was asked (sizes, budget, solvers); ``target``: the runtime
    every entry exports for (None: not checked); ``complete``: False when the tuner stopped
    before running every candidate it planned."""

    name: str
    topology: Topology
    collective: Collective
    entries: tuple[Entry, ...]
    table: tuple[dict[str, Any], ...] = ()
    candidates: tuple[dict[str, Any], ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    target: str | None = None
    complete: bool = True

    def __post_init__(self) -> None:
        validate.name(self.name, "schedule set name")
        if self.target is not None:
            validate.text(self.target, f"schedule set {self.name!r}: target", empty=False)
        validate.flag(self.complete, f"schedule set {self.name!r}: complete")
        validate.instance(self.topology, Topology, f"schedule set {self.name!r}: topology")
        validate.instance(self.collective, Collective, f"schedule set {self.name!r}: collective")
        entries = validate.sequence(self.entries, f"schedule set {self.name!r}: entries")
        for e in entries:
            validate.instance(e, Entry, f"schedule set {self.name!r}: each entry")
        validate.sequence(self.table, f"schedule set {self.name!r}: table")
        validate.sequence(self.candidates, f"schedule set {self.name!r}: candidates")
        validate.mapping(self.options, f"schedule set {self.name!r}: options")
        if not self.entries:
            raise InputError(f"schedule set {self.name!r} has no entries")
        limits.SET_ENTRIES.check(len(self.entries), f"schedule set {self.name!r} has too many entries")
        lo = 0
        for k, e in enumerate(self.entries):
            c = None if e.algorithm is None else e.algorithm.collective  # None: native, the set's collective
            if c is not None and (e.algorithm.topology != self.topology or c.kind != self.collective.kind
                                  or c.root != self.collective.root or c.n_ranks != self.collective.n_ranks):
                raise InputError(f"schedule set {self.name!r}: entry {k} ({e.label}) is for another topology or "
                                 "collective than the set")
            if e.min_bytes != lo:
                raise InputError(f"schedule set {self.name!r}: entry {k} ({e.label}) starts at {e.min_bytes} bytes, "
                                 f"expected {lo} (ranges must follow each other without gaps or overlaps)")
            if e.max_bytes is None:
                if k != len(self.entries) - 1:
                    raise InputError(f"schedule set {self.name!r}: only the last entry may have no upper limit "
                                     f"(entry {k} of {len(self.entries)})")
            elif e.max_bytes <= e.min_bytes:
                raise InputError(f"schedule set {self.name!r}: entry {k} ({e.label}) has an empty range "
                                 f"[{e.min_bytes}, {e.max_bytes})")
            lo = e.max_bytes if e.max_bytes is not None else -1
        if self.entries[-1].max_bytes is not None:
            raise InputError(f"schedule set {self.name!r}: the last entry must have no upper limit (max_bytes null)")

    def pick(self, size: float) -> Entry:
        """The entry serving calls of ``size`` bytes."""
        if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0 or math.isinf(size):
            raise InputError(f"size must be a positive number of bytes, got {size!r}")
        starts = [e.min_bytes for e in self.entries]
        return self.entries[bisect_right(starts, size) - 1]

    def index(self, size: float) -> int:
        return self.entries.index(self.pick(size))

    @property
    def schedules(self) -> tuple[Entry, ...]:
        """The entries that hold a schedule of ours (not native)."""
        return tuple(e for e in self.entries if e.algorithm is not None)

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "collective": self.collective.kind, "topology": self.topology.name,
                "n_ranks": self.topology.n_ranks, "target": self.target, "complete": self.complete,
                "entries": [e.summary() for e in self.entries]}


# ---------------------------------------------------------------------- files
def set_to_json(sset: ScheduleSet) -> dict[str, Any]:

    return {
        "format": SET_FORMAT,
        "version": SET_VERSION,
        "name": sset.name,
        "target": sset.target,
        "complete": sset.complete,
        "options": sset.options,
        "table": list(sset.table),
        "candidates": list(sset.candidates),
        "collective": collective_to_json(sset.collective),
        "topology": topology_to_json(sset.topology),
        "entries": [_entry_to_json(e) for e in sset.entries],
    }


def _entry_to_json(e: Entry) -> dict[str, Any]:
    out: dict[str, Any] = {"label": e.label, "min_bytes": e.min_bytes, "max_bytes": e.max_bytes,
                           "protocol": e.protocol,
                           "synthesis_seconds": None if e.synthesis_seconds is None else round(e.synthesis_seconds, 3)}
    if e.algorithm is None:
        return {**out, "native": e.native}
    alg = e.algorithm
    return {**out, "algorithm": {"format": "ccl-algorithm", "version": FORMAT_VERSION, "name": alg.name,
                                 "solver": alg.solver, "collective": collective_to_json(alg.collective),
                                 "rounds": None if alg.rounds is None else list(alg.rounds),
                                 "transfer_fields": TRANSFER_FIELDS, "transfers": TransferRows(alg.transfers)}}


def set_from_json(data: dict[str, Any]) -> ScheduleSet:

    if not isinstance(data, dict) or data.get("format") != SET_FORMAT:
        raise InputError(f"not a schedule set (expected \"format\": \"{SET_FORMAT}\")")
    if data.get("version") != SET_VERSION:
        raise InputError(f"schedule set version {data.get('version')!r} is not supported (this tool reads "
                         f"version {SET_VERSION})")
    if isinstance(data.get("entries"), list):  # before any entry is read
        limits.SET_ENTRIES.check(len(data["entries"]), "the schedule set has too many entries")
    topology = topology_from_json(data["topology"])
    collective = collective_from_json(data["collective"])
    entries = []
    for k, e in enumerate(data["entries"]):
        if not isinstance(e, dict):
            raise InputError(f"entry {k}: expected an object")
        native = e.get("native")
        alg = None
        if native is not None:
            if not isinstance(native, str) or e.get("algorithm") is not None:
                raise InputError(f"entry {k}: native must name NCCL's algorithm (text), and a native entry has no "
                                 "algorithm")
        else:
            try:
                own = e["algorithm"]
                shared = collective if not isinstance(own, dict) or "collective" not in own else None
                alg = algorithm_from_json({"collective": data["collective"], **own, "topology": data["topology"]},
                                          topology=topology, collective=shared)
            except CclError as exc:
                raise InputError(f"entry {k}: {exc.message}") from None
        lo, hi = e["min_bytes"], e.get("max_bytes")
        if type(lo) is not int or (hi is not None and type(hi) is not int):
            raise InputError(f"entry {k}: min_bytes and max_bytes must be whole numbers of bytes (max_bytes null: "
                             "no upper limit)")
        seconds = e.get("synthesis_seconds")
        proto = e.get("protocol")
        if proto is not None and proto not in PROTOCOLS:
            raise InputError(f"entry {k}: protocol {validate.show(proto)} is not one of {', '.join(PROTOCOLS)} "
                             "(or null)")
        label = e.get("label", alg.solver if alg is not None else native_label(native, str(proto)))
        try:
            entries.append(Entry(alg, lo, hi, str(label), None if seconds is None else float(seconds), proto, native))
        except InputError as exc:
            raise InputError(f"entry {k}: {exc.message}") from None
    options = data.get("options") or {}
    target, complete = data.get("target"), data.get("complete", True)
    if target is not None and not isinstance(target, str) or not isinstance(complete, bool):
        raise InputError("a schedule set's target must be a name or null and complete true or false")
    return ScheduleSet(str(data["name"]), topology, collective, tuple(entries),
                       tuple(data.get("table") or ()), tuple(data.get("candidates") or ()),
                       options if isinstance(options, dict) else {}, target, complete)


def save_set(sset: ScheduleSet, path: str | os.PathLike[str]) -> None:

    write_text_atomic(path, dumps(set_to_json(sset)) + "\n")


def set_text(sset: ScheduleSet) -> str:
    """The set's file text (what ``save_set`` writes)."""

    return dumps(set_to_json(sset)) + "\n"


def is_set_data(data: Any) -> bool:
    return isinstance(data, dict) and data.get("format") == SET_FORMAT


def load_set(path: str | os.PathLike[str]) -> ScheduleSet:
    """A schedule set file (not verified: ``verify_set`` does that)."""

    return decode(path, read_json(path), set_from_json, "schedule set")


def verify_set(sset: ScheduleSet, *, in_place: bool = False) -> list[Any]:
    """Verify every entry (``ccl.verify``); VerificationError names the entry. Returns the
    VerificationResults in entry order (None for a native entry: NCCL's own, no schedule)."""

    out = []
    for k, e in enumerate(sset.entries):
        if e.algorithm is None:  # native: NCCL's own collective, nothing of ours to verify
            out.append(None)
            continue
        try:
            out.append(verify(e.algorithm, in_place=in_place))
        except VerificationError as exc:
            exc.message = f"schedule set {sset.name!r}, entry {k} ({e.label}, sizes {e.range_text()}): {exc.message}"
            exc.args = (exc.message,)
            raise
    return out
