"""MSCCL XML as values: ``Algo`` > ``Gpu`` > ``Threadblock`` > ``Step``, a reader that keeps
line numbers and tolerates what published files contain (as the runtimes do: elements they
have no use for are skipped and listed), and a deterministic writer.

The format (what the msccl executor and RCCL load)::

    <algo name proto nchannels nchunksperloop ngpus coll inplace outofplace minBytes maxBytes>
      <gpu id i_chunks o_chunks s_chunks>
        <tb id send recv chan>
          <step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep/>

Buffers are ``i`` (input), ``o`` (output) and ``s`` (scratch), offsets count chunks. A
threadblock (tb) runs its steps in order; ``send``/``recv`` name its peers (-1: none) and
``chan`` its channel. ``depid``/``deps`` name one (tb, step) of the same gpu a step waits for
(-1/-1: none); ``hasdep`` marks steps another tb waits for. The reader checks the shape only
(numbers where numbers belong, step types known); ``limits`` checks a target's limits and
``interpret`` the meaning.

Counts are checked against ``ccl.core.limits`` before anything is built from them: the memory
the file's steps take (estimated from the text before it is parsed), gpus (``RANKS``),
channels (``CHANNELS``), scratch chunks per gpu and over all gpus (``SLOTS``) and the chunks
the steps move (``XML_MOVES``: the sum of their ``cnt``).
"""

from __future__ import annotations

import xml.parsers.expat
from dataclasses import dataclass, field
from xml.sax.saxutils import quoteattr

from ccl.core import limits
from ccl.core.display import shown
from ccl.core.errors import InputError
from ccl.core.limits import read_input_text

BUFFER_NAMES = {"i": "input", "o": "output", "s": "scratch"}
BUFFER_LETTERS = {v: k for k, v in BUFFER_NAMES.items()}
# Step types: send, recv, recv-copy-send, recv-reduce-send, recv-reduce-copy,
# recv-reduce-copy-send, local copy, local reduce, dependency only.
STEP_TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
RECEIVING = ("r", "rcs", "rrs", "rrc", "rrcs")
SENDING = ("s", "rcs", "rrs", "rrcs")
PROTOCOLS = ("Simple", "LL", "LL128")


@dataclass(frozen=True)
class Step:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int = -1
    deps: int = -1
    hasdep: int = 0
    line: int = 0  # source line when read from a file (0: built)

    @property
    def receives(self) -> bool:
        return self.type in RECEIVING

    @property
    def sends(self) -> bool:
        return self.type in SENDING


@dataclass(frozen=True)
class Threadblock:
    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...]
    line: int = 0


@dataclass(frozen=True)
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: tuple[Threadblock, ...]
    line: int = 0


@dataclass(frozen=True)
class Algo:
    name: str
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: int
    outofplace: int
    min_bytes: int
    max_bytes: int
    gpus: tuple[Gpu, ...]
    redop: str = ""  # an explicit reduction operator attribute, when a file has one
    extra: tuple[tuple[str, str], ...] = ()  # attributes of <algo> this reader does not use
    line: int = 0
    missing: tuple[str, ...] = field(default=(), compare=False)  # <algo> attributes the file lacked
    # elements the runtimes' parsers skip, as (line, element, where: "<algo>", "gpu 3", "gpu 3 tb 1")
    skipped: tuple[tuple[int, str, str], ...] = field(default=(), compare=False)

    @property
    def n_steps(self) -> int:
        return sum(len(tb.steps) for g in self.gpus for tb in g.tbs)


def skipped_text(algo: Algo, most: int = 3) -> str:
    """The elements the runtimes skip, for a report: ``<copy> (line 7, gpu 3)`` and so on
    ("" when none); element names are printed as read only when printable."""
    def name(tag: str) -> str:
        return f"<{tag}>" if tag.isprintable() and len(tag) <= 40 else repr(tag)[:40]

    parts = [f"{name(tag)} (line {line}, in {inside})" for line, tag, inside in algo.skipped[:most]]
    more = len(algo.skipped) - most
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def where(gpu: int | None = None, tb: int | None = None, step: int | None = None) -> str:
    """``gpu 3 tb 2 step 7`` (the parts known)."""
    parts = []
    for name, value in (("gpu", gpu), ("tb", tb), ("step", step)):
        if value is not None:
            parts.append(f"{name} {value}")
    return " ".join(parts)


# ---------------------------------------------------------------------- reading
_ALGO_INTS = ("nchannels", "nchunksperloop", "ngpus", "inplace", "outofplace", "minBytes", "maxBytes")
# Attributes the runtimes' parsers read with a default when absent (older files lack some).
_ALGO_DEFAULTS = {"proto": "Simple", "inplace": "0", "outofplace": "1", "minBytes": "0", "maxBytes": "0",
                  "name": "msccl"}
_STEP_DEFAULTS = {"depid": "-1", "deps": "-1", "hasdep": "0", "srcbuf": "i", "srcoff": "-1", "dstbuf": "o",
                  "dstoff": "-1", "cnt": "1"}


class _Node:
    __slots__ = ("tag", "attrs", "line", "children")

    def __init__(self, tag: str, attrs: dict[str, str], line: int) -> None:
        self.tag, self.attrs, self.line, self.children = tag, attrs, line, []


def _tree(text: str, path: str) -> _Node:
    parser = xml.parsers.expat.ParserCreate()
    root: list[_Node] = []
    stack: list[_Node] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        node = _Node(tag, attrs, parser.CurrentLineNumber)
        if stack:
            stack[-1].children.append(node)
        else:
            root.append(node)
        stack.append(node)

    def end(tag: str) -> None:
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as exc:
        raise InputError(f"{path}:{exc.lineno}:{exc.offset + 1}: not well-formed XML: "
                         f"{xml.parsers.expat.ErrorString(exc.code)}") from None
    if not root:
        raise InputError(f"{path}: no XML element")
    return root[0]


MAX_DIGITS = 20


def _int(node: _Node, name: str, path: str, context: str, default: str | None = None) -> int:
    value = node.attrs.get(name, default)
    if value is None:
        raise InputError(f"{path}:{node.line}: {context}: attribute {name!r} is missing")
    text = value.strip()
    if len(text) > MAX_DIGITS:  # no count, id or offset of a real file has more digits than int64
        raise InputError(f"{path}:{node.line}: {context}: attribute {name}={shown(repr(text[:24]))}... is not an "
                         f"integer of at most {MAX_DIGITS} characters")
    try:
        return int(text)
    except ValueError:
        raise InputError(f"{path}:{node.line}: {context}: attribute {name}={shown(repr(text))} is not an "
                         "integer") from None


# Memory reading a file takes, estimated before it is parsed: per step (its element, attributes,
# Step and the ops and dependencies it becomes) and per byte of text.
XML_BYTES_PER_STEP = 12288
XML_BYTES_PER_CHAR = 4


def check_memory(text: str, path: str) -> None:
    """InputError before parsing when the file's steps would take more memory than an input may
    (``ccl.core.limits.check_memory``)."""
    steps = text.count("<step")
    needed = steps * XML_BYTES_PER_STEP + len(text) * XML_BYTES_PER_CHAR
    if needed > limits.JSON_MEMORY_FLOOR:  # below it, any machine this runs on has the memory
        limits.check_memory(f"{shown(path)} ({steps} steps)", needed)


def parse(text: str, path: str = "<xml>") -> Algo:
    """An ``Algo`` from XML text. Shape errors (missing or non-numeric attributes, unknown
    step types, a root element other than ``<algo>``) raise InputError naming the line and
    gpu/tb/step; counts beyond ``ccl.core.limits`` raise InputError naming the value and the
    limit. Other elements inside ``<algo>``, ``<gpu>`` and ``<tb>`` than ``<gpu>``, ``<tb>`` and
    ``<step>`` are skipped with everything inside them, as both runtimes' parsers skip them
    (RCCL's and the msccl executor's loaders read only the elements they have a handler for: a
    ``<copy>`` inside ``<gpu>``, as in published TE-CCL files, is never run); ``Algo.skipped``
    lists them."""
    check_memory(text, path)
    root = _tree(text, path)
    if root.tag != "algo":
        raise InputError(f"{path}:{root.line}: the root element is <{root.tag}>, expected <algo>")
    a = root.attrs
    missing = tuple(name for name in ("proto", "inplace", "outofplace", "minBytes", "maxBytes") if name not in a)
    for name in ("nchannels", "nchunksperloop", "ngpus", "coll"):
        if name not in a:
            raise InputError(f"{path}:{root.line}: <algo>: attribute {name!r} is missing")
    defaults = dict(_ALGO_DEFAULTS)
    if "outofplace" not in a:  # older files (msccl before the executor): in-place ones are in place only
        defaults["outofplace"] = "0" if a.get("inplace", "0").strip() == "1" else "1"
    values = {name: _int(root, name, path, "<algo>", defaults.get(name)) for name in _ALGO_INTS}
    limits.RANKS.check(values["ngpus"], f"{path}:{root.line}: <algo> ngpus")
    limits.CHANNELS.check(values["nchannels"], f"{path}:{root.line}: <algo> nchannels")
    scratch = moves = 0
    gpus = []
    skipped: list[tuple[int, str, str]] = []
    for g in root.children:
        if g.tag != "gpu":
            skipped.append((g.line, g.tag, "<algo>"))
            continue
        gid = _int(g, "id", path, "<gpu>")
        ctx = where(gid)
        counts = {name: _int(g, name, path, ctx, "0") for name in ("i_chunks", "o_chunks", "s_chunks")}
        limits.SLOTS.check(counts["s_chunks"], f"{path}:{g.line}: {ctx}: s_chunks (scratch chunks of one gpu)")
        scratch += max(counts["s_chunks"], 0)
        limits.SLOTS.check(scratch, f"{path}:{g.line}: {ctx}: s_chunks of gpus 0..{gid} together (scratch chunks)")
        tbs = []
        for t in g.children:
            if t.tag != "tb":
                skipped.append((t.line, t.tag, ctx))
                continue
            tid = _int(t, "id", path, ctx)
            tctx = where(gid, tid)
            send, recv = _int(t, "send", path, tctx, "-1"), _int(t, "recv", path, tctx, "-1")
            chan = _int(t, "chan", path, tctx, "0")
            steps = []
            for s in t.children:
                if s.tag != "step":
                    skipped.append((s.line, s.tag, tctx))
                    continue
                sidx = _int(s, "s", path, tctx)
                sctx = where(gid, tid, sidx)
                kind = s.attrs.get("type")
                if kind is None:
                    raise InputError(f"{path}:{s.line}: {sctx}: attribute 'type' is missing")
                if kind not in STEP_TYPES:
                    raise InputError(f"{path}:{s.line}: {sctx}: step type {kind!r} is not one of "
                                     f"{', '.join(STEP_TYPES)}")
                bufs = {}
                for name in ("srcbuf", "dstbuf"):
                    b = s.attrs.get(name, _STEP_DEFAULTS[name]).strip()
                    if b not in BUFFER_NAMES:
                        raise InputError(f"{path}:{s.line}: {sctx}: {name}={b!r} is not a buffer (i, o or s)")
                    bufs[name] = b
                ints = {name: _int(s, name, path, sctx, _STEP_DEFAULTS[name])
                        for name in ("srcoff", "dstoff", "cnt", "depid", "deps", "hasdep")}
                moves += max(ints["cnt"], 1)
                if moves > limits.XML_MOVES.value:
                    raise InputError(limits.XML_MOVES.message(moves, f"{path}:{s.line}: {sctx}: the steps up to here "
                                                                     "move too many chunks (the sum of their cnt)"))
                steps.append(Step(sidx, kind, bufs["srcbuf"], ints["srcoff"], bufs["dstbuf"], ints["dstoff"],
                                  ints["cnt"], ints["depid"], ints["deps"], ints["hasdep"], s.line))
            tbs.append(Threadblock(tid, send, recv, chan, tuple(steps), t.line))
        gpus.append(Gpu(gid, counts["i_chunks"], counts["o_chunks"], counts["s_chunks"], tuple(tbs), g.line))
    used = {"name", "proto", "coll", "redop", *_ALGO_INTS}
    extra = tuple(sorted((k, v) for k, v in a.items() if k not in used))
    return Algo(
        name=a.get("name", _ALGO_DEFAULTS["name"]), proto=a.get("proto", _ALGO_DEFAULTS["proto"]).strip(),
        nchannels=values["nchannels"], nchunksperloop=values["nchunksperloop"], ngpus=values["ngpus"],
        coll=a["coll"].strip(), inplace=values["inplace"], outofplace=values["outofplace"],
        min_bytes=values["minBytes"], max_bytes=values["maxBytes"], gpus=tuple(gpus), redop=a.get("redop", ""),
        extra=extra, line=root.line, missing=missing, skipped=tuple(skipped))


def read(path: str) -> Algo:
    """``parse`` a file (InputError when it cannot be read)."""
    return parse(read_input_text(path, "XML file"), path)


# ---------------------------------------------------------------------- writing
def _attrs(pairs: list[tuple[str, object]]) -> str:
    return " ".join(f"{k}={quoteattr(str(v))}" for k, v in pairs)


def dumps(algo: Algo) -> str:
    """The XML text (two-space indentation as the runtimes' own files; the same Algo always
    gives the same bytes)."""
    head = [("name", algo.name), ("proto", algo.proto), ("nchannels", algo.nchannels),
            ("nchunksperloop", algo.nchunksperloop), ("ngpus", algo.ngpus), ("coll", algo.coll),
            ("inplace", algo.inplace), ("outofplace", algo.outofplace), ("minBytes", algo.min_bytes),
            ("maxBytes", algo.max_bytes)]
    if algo.redop:
        head.append(("redop", algo.redop))
    lines = [f"<algo {_attrs(head)}>"]
    for g in algo.gpus:
        lines.append(f"  <gpu {_attrs([('id', g.id), ('i_chunks', g.i_chunks), ('o_chunks', g.o_chunks), ('s_chunks', g.s_chunks)])}>")
        for tb in g.tbs:
            lines.append(f"    <tb {_attrs([('id', tb.id), ('send', tb.send), ('recv', tb.recv), ('chan', tb.chan)])}>")
            for s in tb.steps:
                lines.append(
                    f'      <step s="{s.s}" type="{s.type}" srcbuf="{s.srcbuf}" srcoff="{s.srcoff}" '
                    f'dstbuf="{s.dstbuf}" dstoff="{s.dstoff}" cnt="{s.cnt}" depid="{s.depid}" '
                    f'deps="{s.deps}" hasdep="{s.hasdep}"/>')
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"
