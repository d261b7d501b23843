"""Lowering hand-written algorithms (MSCCLang-style) to ``ccl.core.algorithm.Algorithm``.

    algorithm ring_allgather(n = 4) implements allgather on ring(n) {
      for s in 0..n-1, r in 0..n {
        copy output[(r - s) % n] from r to (r + 1) % n at step s
      }
    }

``copy BUF[i] from R to Q`` moves slot i of buffer BUF (input, output or scratch) from rank R to
the same slot on rank Q; ``copy BUF[i] of R to BUF2[j] of Q`` names both slots; ``reduce`` adds
instead of overwriting. ``BUF[i..j]`` moves the j - i consecutive slots i, ..., j-1 as one
transfer. Every transfer has a step, given by ``at step S`` or by an enclosing ``step S { }``.
``rounds [r0, r1, ...]`` gives SCCL's per-step rounds. A switch that reduces is named by a
string where a rank goes (``reduce input[0..8] of r to scratch[0..8] of "nvswitch"`` pushes
into it, ``copy scratch[j] of "nvswitch" to output[j] of r`` pulls from it; see
``ccl.core.algorithm``). The schedule is checked by ``ccl.verify`` like any solver's;
``verify_algorithm`` reports a failure at the transfer that caused it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ccl.core import limits
from ccl.core.algorithm import BUFFERS, Algorithm, Transfer
from ccl.core.errors import CollectiveError, DslError, Span, VerificationError
from ccl.core.topology import Topology
from ccl.core.verify import VerificationResult, verify

from . import ast
from .collective import as_spec, instantiate
from .evaluate import Evaluator, Scope, describe, require_int
from .topology import eval_topology, topology_name
from .values import Definition, show

SOLVER = "hand-written"


def _step_number(value: Any, span: Span) -> int:
    """A transfer's step: an integer >= 0 below ``ccl.core.limits.STEPS`` (a located DslError)."""
    step = require_int(value, "a step", span, least=0)
    if step >= limits.STEPS.value:
        raise DslError(limits.STEPS.message(step + 1, f"step {step} makes too many steps"), span)
    return step


@dataclass(frozen=True)
class HandWritten:
    """A lowered algorithm with where each of its transfers was written."""

    algorithm: Algorithm
    spans: tuple[Span, ...]
    span: Span  # the algorithm definition
    type_label = "an algorithm"

    @property
    def name(self) -> str:
        return self.algorithm.name

    def __str__(self) -> str:
        return self.algorithm.name


class AlgorithmBuilder:
    describe = "an algorithm"

    def __init__(self, ev: Evaluator, algorithm_name: str, topology: Topology, sizes: dict[str, tuple[int, ...]]) -> None:
        self.ev = ev
        self.name = algorithm_name
        self.topology = topology
        self.n_ranks = topology.n_ranks
        self.sizes = sizes
        self.step: int | None = None
        self.transfers: list[Transfer] = []
        self.spans: list[Span] = []
        self.rounds: tuple[int, ...] | None = None
        self.rounds_span: Span | None = None
        self.handlers = {ast.TransferStmt: self.transfer, ast.StepBlock: self.step_block, ast.Rounds: self.rounds_stmt}

    def _rank(self, expr: ast.Expr, scope: Scope) -> int:
        """A rank, or a switch named by a string (a push into it or a pull from it)."""
        value = self.ev.eval(expr, scope)
        if isinstance(value, str):
            for i, sw in enumerate(self.topology.switches):
                if sw.name == value:
                    return self.n_ranks + i
            names = ", ".join(repr(s.name) for s in self.topology.switches if s.reduce) or "none"
            raise DslError(f"the topology has no switch {show(value)} (switches that reduce: {names})", expr.span)
        rank = require_int(value, "a rank or a switch's name", expr.span)
        if not 0 <= rank < self.n_ranks:
            raise DslError(f"rank {rank} is out of range: the topology has ranks 0..{self.n_ranks - 1}", expr.span)
        return rank

    def _slot(self, slot: ast.Slot, rank: int, scope: Scope) -> tuple[str, int, int]:
        if slot.buffer not in BUFFERS:
            raise DslError(f"unknown buffer '{slot.buffer}' (buffers: {', '.join(BUFFERS)})", slot.span)
        value = self.ev.eval(slot.index, scope)
        if isinstance(value, range):
            if value.step != 1 or len(value) < 1:
                raise DslError(f"a slot range moves at least one slot, got {show(value)}", slot.index.span)
            index, count = value.start, len(value)
        else:
            index, count = require_int(value, "a slot index", slot.index.span), 1
        if index < 0:
            raise DslError(f"slot index {index} is negative", slot.index.span)
        if rank >= self.n_ranks and slot.buffer != "scratch":
            raise DslError(f"a switch has scratch slots only, not {slot.buffer}", slot.span)
        if slot.buffer != "scratch":
            size = self.sizes[slot.buffer][rank]
            if index + count > size:
                last = index + count - 1
                raise DslError(f"{slot.buffer}[{last}] does not exist on rank {rank}, which has {size} "
                               f"{slot.buffer} slot{'s' if size != 1 else ''}", slot.index.span)
        return slot.buffer, index, count

    def transfer(self, stmt: ast.TransferStmt, scope: Scope) -> None:
        src = self._rank(stmt.src, scope)
        dst = self._rank(stmt.dst, scope)
        sbuf, sidx, count = self._slot(stmt.src_slot, src, scope)
        if stmt.dst_slot is None:
            dbuf, didx, dcount = self._slot(stmt.src_slot, dst, scope)
        else:
            dbuf, didx, dcount = self._slot(stmt.dst_slot, dst, scope)
        if dcount != count:
            raise DslError(f"moves {count} slot{'s' if count != 1 else ''} into {dcount}", stmt.span)
        if src == dst and sbuf == dbuf and abs(sidx - didx) < count:
            raise DslError(f"a transfer from {sbuf}[{sidx}] of rank {src} onto the same slot", stmt.span)
        if stmt.step is not None:
            step = _step_number(self.ev.eval(stmt.step, scope), stmt.step.span)
        elif self.step is not None:
            step = self.step
        else:
            raise DslError("this transfer has no step: add `at step S` or put it in a `step S { ... }` block",
                           stmt.span)
        self.transfers.append(Transfer(step, src, sbuf, sidx, dst, dbuf, didx, count, stmt.op))
        self.spans.append(stmt.span)

    def step_block(self, stmt: ast.StepBlock, scope: Scope) -> None:
        outer = self.step
        self.step = _step_number(self.ev.eval(stmt.step, scope), stmt.step.span)
        try:
            self.ev.run(stmt.body, self, Scope(scope))
        finally:
            self.step = outer

    def rounds_stmt(self, stmt: ast.Rounds, scope: Scope) -> None:
        if self.rounds_span is not None:
            raise DslError(f"rounds are already given at line {self.rounds_span.line}", stmt.span)
        value = self.ev.eval(stmt.value, scope)
        if isinstance(value, range):
            self.ev.charge(len(value), stmt.value.span)
        if not isinstance(value, (tuple, range)) or not value:
            raise DslError(f"`rounds` takes a list with the rounds of each step, got {describe(value)}",
                           stmt.value.span)
        if len(value) > limits.STEPS.value:
            raise DslError(limits.STEPS.message(len(value), "`rounds` has too many entries (one per step)"),
                           stmt.value.span)
        self.rounds = tuple(require_int(r, "a step's rounds", stmt.value.span, least=1) for r in value)
        self.rounds_span = stmt.span


def build_algorithm(ev: Evaluator, definition: Definition, scope: Scope, values: tuple, span: Span) -> HandWritten:
    node: ast.AlgorithmDef = definition.node
    topo = eval_topology(ev, node.topology, scope, "an algorithm runs on a topology")
    spec = as_spec(ev, ev.eval(node.collective, scope), node.collective.span)
    if spec.size is not None:
        raise DslError("an algorithm's collective takes no size (sizes belong to requests)", node.collective.span)
    collective = instantiate(ev, spec, topo.n_ranks, node.collective.span, chunks=spec.chunks or 1)
    sizes = {"input": tuple(len(x) for x in collective.inputs), "output": tuple(len(x) for x in collective.outputs)}
    name = topology_name(definition, values)
    builder = AlgorithmBuilder(ev, name, topo, sizes)
    ev.run(node.body, builder, scope)
    if not builder.transfers:
        raise DslError(f"algorithm {name} issues no transfers", node.span)
    if builder.rounds is not None:
        last = max(t.step for t in builder.transfers)
        if len(builder.rounds) < last + 1:
            raise DslError(f"rounds has {len(builder.rounds)} entries but the transfers use {last + 1} steps",
                           builder.rounds_span or node.span)
    try:
        alg = Algorithm(name, collective, topo, tuple(builder.transfers), builder.rounds, SOLVER)
    except CollectiveError as exc:
        raise DslError(exc.message, node.span) from None
    return HandWritten(alg, tuple(builder.spans), node.span)


def verify_algorithm(item: HandWritten, *, in_place: bool = False) -> VerificationResult:
    """``ccl.verify`` on a hand-written algorithm; a failure names the algorithm and the line of
    the transfer at fault (or of the algorithm when no single transfer is)."""
    try:
        return verify(item.algorithm, in_place=in_place)
    except VerificationError as exc:
        where = item.span
        if exc.transfer is not None and 0 <= exc.transfer < len(item.spans):
            where = item.spans[exc.transfer]
        raise VerificationError(
            f"{where}: algorithm {item.name}: {exc.message}",
            rank=exc.rank, step=exc.step, buffer=exc.buffer, index=exc.index, transfer=exc.transfer,
            expected=exc.expected, found=exc.found,
        ) from None
