"""Problem = Topology + Collective + Request: everything a solver needs, as one frozen value."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .collective import Collective
from .errors import CollectiveError, InputError
from .topology import Topology


@dataclass(frozen=True)
class Request:
    """How to synthesize. ``chunks`` is the chunk factor the user asks for (a template may split
    further, e.g. ring allreduce uses n x chunks slots); ``steps``/``rounds`` bound exact
    solvers; ``size`` is the buffer size in bytes cost-aware solvers optimize for;
    ``time_limit`` is in seconds. ``options`` carries solver-specific settings by name."""

    solver: str = "ring"
    chunks: int = 1
    steps: int | None = None
    rounds: int | None = None
    size: int | None = None
    time_limit: float | None = None
    objective: str | None = None
    sketch: Any = None
    options: tuple[tuple[str, Any], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not isinstance(self.solver, str) or not self.solver:
            raise InputError(f"solver must be a name, got {self.solver!r}")
        for name in ("chunks", "steps", "rounds"):
            value = getattr(self, name)
            if value is None and name != "chunks":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        if self.size is not None and (not isinstance(self.size, int) or self.size < 1):
            raise InputError(f"size must be a positive number of bytes, got {self.size!r}")
        if self.time_limit is not None and not self.time_limit > 0:
            raise InputError(f"time limit must be positive, got {self.time_limit!r}")
        object.__setattr__(self, "options", tuple(sorted(dict(self.options).items())))

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)


@dataclass(frozen=True)
class Problem:
    topology: Topology
    collective: Collective
    request: Request = field(default_factory=Request)

    def __post_init__(self) -> None:
        if self.collective.n_ranks != self.topology.n_ranks:
            raise CollectiveError(
                f"collective {self.collective.name!r} has {self.collective.n_ranks} ranks but topology "
                f"{self.topology.name!r} has {self.topology.n_ranks}"
            )
