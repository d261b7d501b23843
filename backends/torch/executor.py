"""The in-process executor: a verified Program as a collective on a live process group.

    import ccl
    allreduce = ccl.executor("allreduce.json")   # loads, verifies, lowers: any process group
    allreduce(grad)                              # in place, like torch.distributed.all_reduce

``Executor`` wraps ``runtime.ScheduleRunner`` (the code generated scripts embed too) with the
project's types and errors: it runs a ``Program`` (verified here; the driver lowers schedules,
``ccl.executor``), offers torch's calling conventions (``all_reduce``,
``all_gather_single``, ``reduce_scatter_single``, ``all_to_all_single``, ``broadcast``,
``reduce``, ``gather``, ``scatter``) and a uniform ``__call__(input, output=None, op=...)``, and
raises ``InputError`` (bad arguments) or ``BackendError`` (transport failures) only.
"""

from __future__ import annotations

from typing import Any

import torch

from ccl.core.errors import BackendError, CclError, InputError
from ccl.core.program import Program

from .plain import to_plain
from .runtime import ScheduleError, ScheduleRunner


def _translate(exc: ScheduleError) -> CclError:
    return InputError(exc.message) if exc.kind == "input" else BackendError(exc.message)


class Executor:
    """One schedule bound to a process group (None: the default group).

    ``timeout`` (seconds) bounds every wait for a transfer (None: the group's timeout); a peer
    that dies or never calls raises ``BackendError`` naming this rank, the op, its size and the
    peer; the group is then unusable and later calls on it fail at once with that error.
    ``validate`` ("first", "always", "never") controls the cross-rank check of schedule, sizes,
    dtype and reduction (see ``runtime.ScheduleRunner``).
    """

    def __init__(self, program: Program, group: Any = None, *, timeout: float | None = None,
                 validate: str = "first") -> None:
        self.program = program
        self.spec = to_plain(program)
        try:
            self.runner = ScheduleRunner(self.spec, group, timeout=timeout, validate=validate)
        except ScheduleError as exc:
            raise _translate(exc) from None
        self.group = group

    # ------------------------------------------------------------------ facts
    @property
    def kind(self) -> str:
        return self.program.collective.kind

    @property
    def root(self) -> int | None:
        return self.program.collective.root

    @property
    def rank(self) -> int:
        return self.runner.rank

    @property
    def world_size(self) -> int:
        return self.runner.world

    def __repr__(self) -> str:
        root = f", root {self.root}" if self.root is not None else ""
        return (f"Executor({self.program.name!r}: {self.kind} on {self.world_size} ranks{root}, "
                f"{self.program.n_ops} ops)")

    # ------------------------------------------------------------------ the uniform call
    def __call__(self, input: torch.Tensor, output: torch.Tensor | None = None, *, op: Any = "sum") -> torch.Tensor:
        """Run the collective on this rank's ``input``; returns the output tensor. With
        ``output=None`` the call is in place when this rank's output has the input's layout
        (all_reduce, broadcast, the root of reduce), else a new output tensor is allocated."""
        if output is None:
            output = self._new_output(input)
        try:
            return self.runner.run(input, output, op)
        except ScheduleError as exc:
            raise _translate(exc) from None
        except (RuntimeError, TypeError, ValueError) as exc:
            raise BackendError(f"rank {self.rank}: {self.program.name}: {exc}") from None

    def _new_output(self, input: torch.Tensor) -> torch.Tensor:
        r = self.runner
        if not isinstance(input, torch.Tensor):
            raise InputError(f"the input must be a torch.Tensor, got {type(input).__name__}")
        if r.input_base == r.output_base and r.alias_runs == [(0, 0, r.input_base * r.k)] and r.input_base:
            return input
        if r.input_base == 0:
            raise InputError(f"rank {self.rank} has no input in this {self.kind}: pass the output tensor")
        unit = input.numel() // r.input_base
        count = r.output_base * unit
        if input.dim() >= 1 and input.numel() and count % input.numel() == 0:
            shape = (input.shape[0] * (count // input.numel()), *input.shape[1:])
            return torch.empty(shape, dtype=input.dtype, device=input.device)
        return torch.empty(count, dtype=input.dtype, device=input.device)

    def _need(self, *kinds: str) -> None:
        if self.kind not in kinds:
            raise InputError(f"this schedule implements {self.kind}, not {' / '.join(kinds)}")

    def _empty(self, like: torch.Tensor) -> torch.Tensor:
        return torch.empty(0, dtype=like.dtype, device=like.device)

    # ------------------------------------------------------------------ torch's conventions
    def all_reduce(self, tensor: torch.Tensor, op: Any = "sum") -> torch.Tensor:
        self._need("allreduce")
        return self(tensor, tensor, op=op)

    def all_gather_single(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        self._need("allgather")
        return self(input_tensor, output_tensor)

    all_gather_into_tensor = all_gather_single

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, op: Any = "sum") -> torch.Tensor:
        self._need("reducescatter")
        return self(input, output, op=op)

    reduce_scatter_tensor = reduce_scatter_single

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
        self._need("alltoall")
        return self(input, output)

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        """Root's ``tensor`` to every rank's ``tensor`` (the root is the schedule's)."""
        self._need("broadcast")
        return self(tensor if self.rank == self.root else self._empty(tensor), tensor)

    def reduce(self, tensor: torch.Tensor, op: Any = "sum") -> torch.Tensor:
        """The reduction of every rank's ``tensor`` into the root's; others are left unchanged."""
        self._need("reduce")
        return self(tensor, tensor if self.rank == self.root else self._empty(tensor), op=op)

    def gather(self, tensor: torch.Tensor, gather_list: list[torch.Tensor] | None = None) -> torch.Tensor | None:
        """Every rank's ``tensor`` into the root's ``gather_list`` (or a new flat tensor,
        returned on the root)."""
        self._need("gather")
        if self.rank != self.root:
            self(tensor, self._empty(tensor))
            return None
        out = self(tensor, torch.empty(tensor.numel() * self.world_size, dtype=tensor.dtype, device=tensor.device))
        if gather_list is not None:
            if len(gather_list) != self.world_size:
                raise InputError(f"gather_list has {len(gather_list)} tensors, expected {self.world_size}")
            for dst, part in zip(gather_list, out.chunk(self.world_size)):
                dst.view(-1).copy_(part)
        return out

    def scatter(self, tensor: torch.Tensor, scatter_list: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Part r of the root's ``scatter_list`` into rank r's ``tensor``."""
        self._need("scatter")
        if self.rank == self.root:
            if scatter_list is None or len(scatter_list) != self.world_size:
                raise InputError(f"the root needs a scatter_list of {self.world_size} tensors")
            source = torch.cat([t.reshape(-1) for t in scatter_list])
        else:
            source = self._empty(tensor)
        return self(source, tensor)
