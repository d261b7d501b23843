"""Runs a lowered collective schedule on a torch.distributed process group.

This module depends on torch and the standard library only: ``ccl emit torch`` copies it
verbatim into standalone scripts, and ``backends.torch.Executor`` uses it in-process, so both
run the same code.

A schedule arrives as plain data (``spec``, see ``ScheduleRunner``): per rank an ordered list
of ops (send, recv, copy, reduce) with dependencies, tags and channels, produced by the
schedule compiler's lowering. The runner follows that order exactly:

* for each step it waits for the dependencies of the step's sends and receives, then posts them
  together with ``torch.distributed.batch_isend_irecv`` (one group for NCCL, independent
  transfers in flight at once for every backend); it then runs the step's local copies and
  reductions, each after the transfers it needs. Transfers of later steps that do not depend on
  a pending one go ahead while it is in flight;
* every message carries its tag, so tag-matching transports (gloo) and order-matching ones
  (NCCL) pair sends and receives the same way; on the wire the tag is mixed (XOR, bits 20-30)
  with a hash of the schedule, the element count and the dtype, so ranks that disagree on them
  (``validate="never"``) never pair their messages: they time out with an error instead of
  aborting the receiving process (gloo aborts on a message of the wrong size) or mixing data;
* faults end in ``ScheduleError`` on every surviving rank within ``timeout`` (a peer lost
  mid-collective: at once; a stalled or absent peer: after the timeout), naming the rank, the
  op, its size and the peer. The group's point-to-point state is then inconsistent (gloo also
  closes its connections): the runner records the failure for the group, and every later call
  on it, from any runner, fails at once with that first error; destroy the group
  (``torch.distributed.destroy_process_group()``, which does not hang) and create a new one;
* slots map to element ranges of the caller's tensors: a base slot of U elements is cut in k
  pieces of U // k elements, the first U % k one longer, so any size works, down to 1 element;
* scratch memory is allocated once per (size, dtype, device) and reused across calls;
* output slots that start as a copy of an input slot are copied first in an out-of-place call,
  and are the same memory in an in-place call (when the schedule is safe in place; otherwise
  the runner works on a private copy of the input); the caller's input is never written in an
  out-of-place call.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from typing import Any

import torch
import torch.distributed as dist

FORMAT = "ccl-torch-program"
KINDS_WITH_NATIVE = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce", "gather", "scatter")
REDUCE_OPS = ("sum", "avg", "prod", "max", "min", "band", "bor", "bxor")
_OP_ALIASES = {"product": "prod", "mean": "avg", "average": "avg"}
_INPUT, _OUTPUT, _SCRATCH = 0, 1, 2
_BUFFER_IDS = {"input": _INPUT, "output": _OUTPUT, "scratch": _SCRATCH}
_DTYPES = (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
)


class ScheduleError(Exception):
    """A schedule could not run. ``kind`` is "input" (bad arguments: sizes, dtypes, world size)
    or "backend" (the transport failed: timeout, a lost peer)."""

    def __init__(self, message: str, kind: str = "backend") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


def reduce_op_name(op: Any) -> str:
    """'sum', 'max', ... from a string or a torch.distributed.ReduceOp."""
    name = getattr(op, "name", None) or str(op)
    name = name.rsplit(".", 1)[-1].lower()
    name = _OP_ALIASES.get(name, name)
    if name not in REDUCE_OPS:
        raise ScheduleError(f"unknown reduction {op!r}; known: {', '.join(REDUCE_OPS)}", "input")
    return name


def make_reducer(name: str, dtype: torch.dtype):
    floating = dtype.is_floating_point or dtype.is_complex
    if name in ("band", "bor", "bxor") and floating:
        raise ScheduleError(f"reduction {name} needs an integer or bool dtype, not {dtype}", "input")
    if name in ("max", "min") and dtype.is_complex:
        raise ScheduleError(f"reduction {name} is not defined for complex dtype {dtype}", "input")
    if name == "avg" and not floating:
        raise ScheduleError(f"reduction avg needs a floating-point dtype, not {dtype}", "input")
    if name in ("sum", "avg"):
        return lambda d, s: d.add_(s) if d.dtype != torch.bool else d.logical_or_(s)
    if name == "prod":
        return lambda d, s: d.mul_(s) if d.dtype != torch.bool else d.logical_and_(s)
    if name == "max":
        return lambda d, s: torch.maximum(d, s, out=d)
    if name == "min":
        return lambda d, s: torch.minimum(d, s, out=d)
    if name == "band":
        return lambda d, s: d.bitwise_and_(s)
    if name == "bor":
        return lambda d, s: d.bitwise_or_(s)
    return lambda d, s: d.bitwise_xor_(s)


def piece_sizes(unit: int, k: int) -> list[int]:
    q, rem = divmod(unit, k)
    return [q + 1 if p < rem else q for p in range(k)]


# Process groups whose point-to-point state a failed call left inconsistent: id -> (group, first
# error message). Later calls on them fail at once with that message (the group object is kept
# so its id is not reused).
_BROKEN: dict[int, tuple[Any, str]] = {}
_TAG_SALT_SHIFT, _TAG_SALT_BITS = 20, 11


def _group_key(group: Any) -> Any:
    return group if group is not None else dist.group.WORLD


def fingerprint(spec: dict) -> int:
    """A 62-bit hash of a schedule: ranks loading different schedules disagree on it."""
    text = json.dumps([spec["collective"], spec["n_ranks"], spec["chunk_factor"], spec["ops"], spec["scratch"]],
                      separators=(",", ":"))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 2


class _Plan:
    """A schedule compiled for one base-slot size, dtype and device: element ranges of every
    op, the step structure, and the reused scratch tensor."""

    def __init__(self, runner: ScheduleRunner, unit: int, dtype: torch.dtype, device: torch.device) -> None:
        k = runner.k
        sizes = piece_sizes(unit, k)
        pre = [0]
        for s in sizes:
            pre.append(pre[-1] + s)

        def io_offset(i: int) -> int:
            return (i // k) * unit + pre[i % k]

        soff = [0]
        for cls in runner.scratch_classes:
            soff.append(soff[-1] + sizes[cls])
        offsets = (io_offset, io_offset, soff.__getitem__)

        def span(buf: int, index: int, count: int) -> tuple[int, int]:
            at = offsets[buf]
            return at(index), at(index + count)

        self.unit = unit
        salt_text = f"{runner.fingerprint}:{unit}:{dtype}".encode()
        salt = int.from_bytes(hashlib.blake2b(salt_text, digest_size=4).digest(), "big")
        salt = (salt & ((1 << _TAG_SALT_BITS) - 1)) << _TAG_SALT_SHIFT
        esize = torch.empty((), dtype=dtype).element_size()
        self.nbytes: dict[int, int] = {}  # op index -> bytes it moves (for error messages)
        self.scratch = torch.empty(soff[-1], dtype=dtype, device=device)
        self.private_input: torch.Tensor | None = None
        self.steps: list[tuple[tuple[int, ...], list[tuple], list[tuple]]] = []
        network = runner.network
        current: int | None = None
        waits: set[int] = set()
        net: list[tuple] = []
        local: list[tuple] = []
        for i, (kind, step, buf, index, count, peer, src_buf, src_index, tag, _channel, deps) in enumerate(runner.ops):
            if step != current:
                if current is not None:
                    self.steps.append((tuple(sorted(waits)), net, local))
                current, waits, net, local = step, set(), [], []
            b = _BUFFER_IDS[buf]
            start, stop = span(b, index, count)
            pending = tuple(d for d in deps if network[d])
            if kind == "send" or kind == "recv":
                waits.update(pending)
                if stop > start:  # an empty piece moves nothing: both sides skip the message
                    net.append((i, kind == "send", b, start, stop, peer, tag ^ salt))
                    self.nbytes[i] = (stop - start) * esize
            elif stop > start:
                sb = _BUFFER_IDS[src_buf]
                s0, s1 = span(sb, src_index, count)
                local.append((i, pending, kind == "reduce", b, start, stop, sb, s0, s1))
            elif pending:  # still wait where the op stands: later ops count on what it waited for
                local.append((i, pending, None, 0, 0, 0, 0, 0, 0))
        if current is not None:
            self.steps.append((tuple(sorted(waits)), net, local))
        self.alias = [(io_offset(a), io_offset(j), io_offset(j + c) - io_offset(j)) for a, j, c in runner.alias_runs]
        self.in_place = [(io_offset(a), io_offset(j), io_offset(j + c) - io_offset(j))
                         for a, j, c in runner.in_place_runs]
        self.reduced = [(io_offset(j), io_offset(j + c), t) for j, c, t in runner.reduced_runs]


class ScheduleRunner:
    """Runs one rank's part of a schedule on a process group.

    ``spec`` is the plain-data schedule (``format`` "ccl-torch-program"): ``collective`` (kind),
    ``root``, ``n_ranks``, ``chunk_factor``, per rank ``input_slots``, ``output_slots``,
    ``aliases`` (input slot, output slot, count: output slots starting as a copy of input
    slots), ``in_place_aliases`` (the same for the slots an in-place call overlays: an alltoall's
    whole buffer; ``aliases`` when absent), ``reduced`` (output slot, count, terms),
    ``scratch`` (size class per scratch slot), ``writes_input`` and ``ops`` (kind, step, buffer,
    index, count, peer, source buffer, source index, tag, channel, deps), ``in_place_safe`` and
    ``out_of_place_safe`` (False for a Program correct in place only; True when absent).

    ``validate``: "first" checks on the first call, and whenever this rank's sizes, dtype or
    reduction change, that all ranks run the same schedule with the same element counts, dtype
    and reduction (one small all_gather); "always" on every call; "never" skips it.
    ``timeout`` (seconds) bounds every wait; None uses the process group's timeout.
    """

    def __init__(self, spec: dict, group: Any = None, *, timeout: float | None = None,
                 validate: str = "first") -> None:
        if spec.get("format") != FORMAT:
            raise ScheduleError("not a lowered schedule (expected format 'ccl-torch-program')", "input")
        if not dist.is_available() or not dist.is_initialized():
            raise ScheduleError("torch.distributed is not initialized: call "
                                "torch.distributed.init_process_group first", "input")
        if validate not in ("first", "always", "never"):
            raise ScheduleError(f"validate must be 'first', 'always' or 'never', got {validate!r}", "input")
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        # Peers as global ranks: P2POp takes those in every torch version.
        self.global_ranks = [q if group is None else dist.get_global_rank(group, q) for q in range(self.world)]
        n = spec["n_ranks"]
        if self.world != n:
            raise ScheduleError(f"the schedule {spec['name']!r} is for {n} ranks but the process group has "
                                f"{self.world}", "input")
        r = self.rank
        self.spec = spec
        self.name = spec["name"]
        self.kind = spec["collective"]
        self.root = spec.get("root")
        self.k = spec["chunk_factor"]
        self.input_base = spec["input_slots"][r] // self.k
        self.output_base = spec["output_slots"][r] // self.k
        self.alias_runs = [tuple(x) for x in spec["aliases"][r]]
        self.in_place_runs = [tuple(x) for x in spec.get("in_place_aliases", spec["aliases"])[r]]
        self.reduced_runs = [tuple(x) for x in spec["reduced"][r]]
        self.scratch_classes = list(spec["scratch"][r])
        self.ops = [tuple(op[:10]) + (tuple(op[10]),) for op in spec["ops"][r]]
        unknown = sorted({op[0] for op in self.ops} - {"send", "recv", "copy", "reduce"})
        if unknown:  # pushes and pulls (a switch's reduction) run only as their point-to-point emulation
            raise ScheduleError(f"the schedule {spec['name']!r} has {unknown[0]} ops, which this runtime does not run "
                                "(the backend's to_plain emulates switch ops with point-to-point messages)", "input")
        self.network = [op[0] in ("send", "recv") for op in self.ops]
        self.has_reduce = bool(self.reduced_runs) or any(op[0] == "reduce" for op in self.ops)
        self.in_place_safe = bool(spec["in_place_safe"])
        self.out_of_place_safe = bool(spec.get("out_of_place_safe", True))
        self.writes_input = bool(spec["writes_input"][r])
        self.timeout = None if timeout is None else datetime.timedelta(seconds=timeout)
        self.timeout_seconds = timeout
        self.validate = validate
        self.fingerprint = fingerprint(spec)
        self._plans: dict[tuple, _Plan] = {}
        self._validated: tuple | None = None
        self._works: list[Any] = [None] * len(self.ops)
        self._plan: _Plan | None = None

    # ------------------------------------------------------------------ sizes
    def unit_for(self, input: torch.Tensor, output: torch.Tensor) -> int | None:
        """Elements per base slot implied by this rank's tensors (None: this rank holds none)."""
        where = f"rank {self.rank}"
        unit = None
        for name, t, base in (("input", input, self.input_base), ("output", output, self.output_base)):
            if base == 0:
                if t.numel() != 0:
                    raise ScheduleError(f"{where}: the {self.kind} schedule has no {name} on this rank, but "
                                        f"the {name} tensor has {t.numel()} elements", "input")
                continue
            if t.numel() % base:
                raise ScheduleError(f"{where}: the {name} tensor has {t.numel()} elements, not a multiple of "
                                    f"the {base} equal parts a {self.kind} {name} has on this rank", "input")
            u = t.numel() // base
            if unit is not None and u != unit:
                raise ScheduleError(f"{where}: input and output sizes disagree: the input has {input.numel()} "
                                    f"elements ({self.input_base} part(s) of {unit}), so the output needs "
                                    f"{self.output_base * unit}, but it has {output.numel()}", "input")
            unit = u
        if unit == 0:
            raise ScheduleError(f"{where}: the tensors are empty; a collective needs at least 1 element "
                                "per part", "input")
        return unit

    def _check_tensors(self, input: torch.Tensor, output: torch.Tensor) -> None:
        for name, t in (("input", input), ("output", output)):
            if not isinstance(t, torch.Tensor):
                raise ScheduleError(f"the {name} must be a torch.Tensor, got {type(t).__name__}", "input")
            if not t.is_contiguous():
                raise ScheduleError(f"the {name} tensor must be contiguous (call .contiguous())", "input")
        if input.dtype != output.dtype:
            raise ScheduleError(f"input dtype {input.dtype} and output dtype {output.dtype} differ", "input")
        if input.device != output.device and input.numel() and output.numel():
            raise ScheduleError(f"input is on {input.device} but output on {output.device}", "input")

    def _handshake(self, unit: int | None, dtype: torch.dtype, op: str, device: torch.device) -> int:
        mine = torch.tensor([-1 if unit is None else unit, _DTYPES.index(dtype) if dtype in _DTYPES else 99,
                             REDUCE_OPS.index(op), self.fingerprint,
                             KINDS_WITH_NATIVE.index(self.kind) if self.kind in KINDS_WITH_NATIVE else -1],
                            dtype=torch.int64, device=device)
        got = [torch.empty_like(mine) for _ in range(self.world)]
        what = (f"the check before {self.name} that every rank runs the same schedule with the same sizes "
                "(an all_gather of the group)")
        try:
            work = dist.all_gather(got, mine, group=self.group, async_op=True)
            self._wait_work(work, what)
        except ScheduleError:
            raise
        except Exception as exc:  # noqa: BLE001 - the transport's own exception types vary
            raise ScheduleError(self._work_failure(what, exc)) from None
        rows = [[int(x) for x in g.tolist()] for g in got]
        if any(row[3] != rows[0][3] for row in rows):
            bad = next(q for q, row in enumerate(rows) if row[3] != rows[0][3])

            def kind(q: int) -> str:
                x = rows[q][4]
                name = KINDS_WITH_NATIVE[x] if x >= 0 else ""
                return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}" if name else "another collective"
            kinds = (f"rank 0 runs {kind(0)}, rank {bad} {kind(bad)}" if rows[0][4] != rows[bad][4] else
                     f"both {kind(0)[kind(0).index(' ') + 1:]} schedules, not the same one")
            raise ScheduleError(f"rank {self.rank}: ranks 0 and {bad} run different schedules (fingerprints differ; "
                                f"{kinds}): load the same schedule file on every rank", "input")
        units = {row[0] for row in rows if row[0] >= 0}
        if len(units) > 1 or {row[1] for row in rows} != {rows[0][1]} or {row[2] for row in rows} != {rows[0][2]}:
            def show(q: int) -> str:
                u, d, o = rows[q][:3]
                dt = _DTYPES[d] if d < len(_DTYPES) else "another dtype"
                return f"rank {q}: {u} elements per part, {dt}, {REDUCE_OPS[o]}"
            odd = next(q for q, row in enumerate(rows) if row[:3] != rows[0][:3])
            raise ScheduleError(f"rank {self.rank}: ranks disagree on the call: {show(0)}; {show(odd)}", "input")
        if not units:
            raise ScheduleError("no rank holds data of this collective", "input")
        return units.pop()

    def plan(self, unit: int, dtype: torch.dtype, device: torch.device) -> _Plan:
        key = (unit, dtype, device)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= 8:
                self._plans.pop(next(iter(self._plans)))
            plan = self._plans[key] = _Plan(self, unit, dtype, device)
        return plan

    # ------------------------------------------------------------------ running
    def run(self, input: torch.Tensor, output: torch.Tensor, op: Any = "sum") -> torch.Tensor:
        """Run the schedule: ``input`` and ``output`` are this rank's flat contiguous tensors
        (in place when they overlap in the in-place layout). Returns ``output``."""
        broken = _BROKEN.get(id(_group_key(self.group)))
        if broken is not None:
            raise ScheduleError(f"rank {self.rank}: {self.name}: the process group failed in an earlier call "
                                f"and cannot run collectives any more ({broken[1]}); destroy it "
                                "(torch.distributed.destroy_process_group()) and create a new one")
        self._check_tensors(input, output)
        name = reduce_op_name(op)
        dtype = input.dtype
        reducer = make_reducer(name, dtype) if self.has_reduce else None
        unit = self.unit_for(input, output)
        device = input.device if input.numel() else output.device
        signature = (unit, dtype, name)
        if self.validate == "always" or (self.validate == "first" and self._validated != signature):
            try:
                agreed = self._handshake(unit, dtype, name, device)
            except ScheduleError as exc:
                if exc.kind != "input":  # ranks that disagree all see it: the group stays usable
                    self._broken(exc.message)
                raise
            self._validated = signature
            unit = agreed if unit is None else unit
        if unit is None:
            raise ScheduleError(f"rank {self.rank} holds no data of this collective: its element count is "
                                "unknown without validation (validate='first')", "input")
        plan = self.plan(unit, dtype, device)
        inp = input.view(-1)
        out = output.view(-1)
        layout = self._layout(plan, inp, out)
        in_place = layout == "in place"
        if not in_place and not self.out_of_place_safe:
            raise ScheduleError(f"rank {self.rank}: {self.name} is correct only in place (it reads its input "
                                "through its output): pass the input and output in the in-place layout", "input")
        if self.writes_input or layout == "overlap" or (in_place and not self.in_place_safe):
            if plan.private_input is None or plan.private_input.numel() != inp.numel():
                plan.private_input = torch.empty_like(inp)
            plan.private_input.copy_(inp)
            inp = plan.private_input
        if not in_place:
            for a, j, c in plan.alias:
                out[j:j + c].copy_(inp[a:a + c])
        try:
            self._execute(plan, inp, out, reducer)
        except ScheduleError as exc:
            self._broken(exc.message)
            raise
        except BaseException as exc:  # an interrupt or a local op failing mid-schedule: same state
            self._broken(f"rank {self.rank}: {type(exc).__name__} during the schedule: {first_line(exc)}")
            raise
        if name == "avg":
            for j0, j1, terms in plan.reduced:
                out[j0:j1].div_(terms)
        return output

    def _broken(self, message: str) -> None:
        """Record that this group's point-to-point state is unusable (first failure wins)."""
        key = _group_key(self.group)
        _BROKEN.setdefault(id(key), (key, message))

    def _layout(self, plan: _Plan, inp: torch.Tensor, out: torch.Tensor) -> str:
        """"separate" tensors; "in place": they overlap exactly where an in-place call overlays
        output slots on input slots (``in_place_aliases``); "overlap": any other overlap (run on
        a private copy of the input)."""
        if not inp.numel() or not out.numel():
            return "separate"
        size = inp.element_size()
        a0, a1 = inp.data_ptr(), inp.data_ptr() + inp.numel() * size
        b0, b1 = out.data_ptr(), out.data_ptr() + out.numel() * size
        if a1 <= b0 or b1 <= a0:
            return "separate"
        aliased = sum(c for _a, _j, c in plan.in_place) * size
        same = all(a0 + a * size == b0 + j * size for a, j, c in plan.in_place if c)
        if aliased and same and min(a1, b1) - max(a0, b0) == aliased:
            return "in place"
        return "overlap"

    def _execute(self, plan: _Plan, inp: torch.Tensor, out: torch.Tensor, reducer) -> None:
        bufs = (inp, out, plan.scratch)
        self._plan = plan
        works = self._works
        for i in range(len(works)):
            works[i] = None
        group, peers = self.group, self.global_ranks
        isend, irecv = dist.isend, dist.irecv
        try:
            for waits, net, local in plan.steps:
                for d in waits:
                    if works[d] is not None:
                        self._wait(d)
                if net:
                    p2p = [dist.P2POp(isend if is_send else irecv, bufs[b][start:stop], peers[peer], group, tag)
                           for _i, is_send, b, start, stop, peer, tag in net]
                    try:
                        got = dist.batch_isend_irecv(p2p)
                    except Exception as exc:  # noqa: BLE001 - transports raise their own types
                        raise self._failure(net[0][0], exc, posting=True) from None
                    if len(got) == len(net):
                        for (i, *_rest), w in zip(net, got):
                            works[i] = w
                    else:  # coalesced (NCCL): one handle for the whole batch
                        for i, *_rest in net:
                            works[i] = got
                for _i, pending, is_reduce, b, start, stop, sb, s0, s1 in local:
                    for d in pending:
                        if works[d] is not None:
                            self._wait(d)
                    if is_reduce:
                        reducer(bufs[b][start:stop], bufs[sb][s0:s1])
                    elif is_reduce is not None:
                        bufs[b][start:stop].copy_(bufs[sb][s0:s1])
            for i, w in enumerate(works):
                if w is not None:
                    self._wait(i)
        except BaseException:
            for i in range(len(works)):
                works[i] = None
            raise

    def _wait(self, i: int) -> None:
        w = self._works[i]
        handles = w if isinstance(w, list) else [w]
        try:
            for h in handles:
                if self.timeout is None:
                    h.wait()
                else:
                    h.wait(self.timeout)
        except Exception as exc:  # noqa: BLE001 - transports raise their own types
            raise self._failure(i, exc) from None
        if isinstance(w, list):
            for j, other in enumerate(self._works):
                if other is w:
                    self._works[j] = None
        self._works[i] = None

    def _wait_work(self, work: Any, what: str) -> None:
        try:
            if self.timeout is None:
                work.wait()
            else:
                work.wait(self.timeout)
        except Exception as exc:  # noqa: BLE001
            raise ScheduleError(self._work_failure(what, exc)) from None

    def _work_failure(self, what: str, exc: BaseException) -> str:
        text = first_line(exc)
        if is_timeout(text):
            limit = f" {self.timeout_seconds:g} s" if self.timeout_seconds is not None else ""
            return (f"rank {self.rank}: waited{limit} in {what}: a peer did not join it (it may have died, "
                    f"stalled, or be running another collective): {text}")
        if _is_lost(text):
            return f"rank {self.rank}: lost a peer during {what}: {text}"
        return f"rank {self.rank}: {what} failed: {text}"

    def describe(self, i: int) -> str:
        kind, step, buf, index, count, peer, src_buf, src_index, tag, _channel, _deps = self.ops[i]
        slots = f"{buf}[{index}]" if count == 1 else f"{buf}[{index}..{index + count - 1}]"
        nbytes = self._plan.nbytes.get(i) if self._plan is not None else None
        size = f" ({_bytes_text(nbytes)})" if nbytes is not None else ""
        if kind == "send":
            return f"step {step} send of {slots}{size} to rank {peer} (tag {tag})"
        if kind == "recv":
            return f"step {step} receive into {slots}{size} from rank {peer} (tag {tag})"
        return f"step {step} {kind} into {slots}"

    def _failure(self, i: int, exc: BaseException, posting: bool = False) -> ScheduleError:
        text = first_line(exc)
        what = self.describe(i)
        peer = self.ops[i][5]
        if is_timeout(text):
            limit = f" after {self.timeout_seconds:g} s" if self.timeout_seconds is not None else ""
            return ScheduleError(f"rank {self.rank}: timed out{limit} waiting for the {what}: rank {peer} never "
                                 "sent or received it: peer lost or stalled (it may have died, hung, not called "
                                 "this collective, or called it with another schedule, size or dtype)")
        if _is_lost(text):
            return ScheduleError(f"rank {self.rank}: lost rank {peer} during the {what}: {text} (rank {peer} died, "
                                 "or failed and closed its connections)")
        verb = "posting" if posting else "waiting for"
        return ScheduleError(f"rank {self.rank}: {verb} the {what} failed: {text}")


def is_timeout(text: str) -> bool:
    return "imed out" in text or "imeout" in text


def _is_lost(text: str) -> bool:
    return any(word in text for word in ("closed", "closure", "reset", "refused", "broken pipe", "Broken pipe"))


def _bytes_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    if line.startswith("[") and "] " in line:  # drop the transport's source-file prefix
        line = line.split("] ", 1)[1]
    return line.split(". This is typically", 1)[0]
