"""``ccl place`` (P^2 class): where the parallel axes of a training job should go.

A plan is axes with sizes (``tp=8,pp=2,dp=8``; their product is the number of ranks) and the
communication each axis does per training step: a collective of a size, some number of times
(``tp=allreduce:16MiB*128``), or a model from which those are derived (``Model``). A placement
is a *parallelism matrix*: how much of each axis lives inside a node (the intra-node factors
multiply to the ranks per node) and how much across nodes (the rest). Ranks are numbered node by
node; inside a level the axes vary in the plan's order, the first fastest, and an axis's
coordinate is its intra-node digit plus its inter-node digit times its intra-node factor. An
axis's groups are the ranks that agree on every other axis.

Every placement is predicted, not run: for each axis, its collective is synthesized on its
groups, all groups at once (``ccl.compiler.groups``: each group's schedule made for its fair
share of the shared links, the joined schedule verified and simulated with every group sharing
the links); ``sendrecv`` (pipeline stages) sends each stage's buffer to the next stage. The
step's communication time is the sum over axes of count x time (axes do not overlap: an upper
estimate where a framework overlaps them). Placements are ranked by it, with the reasons: per
axis, whether its groups stay inside nodes, how many nodes they span and how much the other
groups slow them down.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any

import solvers

from ..core import validate
from ..core.algorithm import Algorithm, Transfer
from ..core.collective import Collective
from ..core.errors import InputError
from ..core.groups import Groups
from ..core.topology import Topology
from ..core.units import MAX_SIZE, format_size, parse_size
from .groups import synthesize_groups
from .timing import simulate

KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "sendrecv")
MAX_CALLS = 1e12  # calls of one axis's collective per training step
# The largest model shape ``Model`` takes (far beyond any trained model; its traffic must also
# stay within MAX_SIZE per call).
MODEL_BOUNDS = {"layers": 10**5, "hidden": 10**7, "tokens": 10**9, "microbatches": 10**6}


@dataclass(frozen=True)
class Traffic:
    """One axis's communication per step: ``count`` calls of ``kind`` with ``size`` bytes."""

    kind: str
    size: int
    count: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InputError(f"traffic kind {self.kind!r:.40} is not one of {', '.join(KINDS)}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or not 0 <= self.size <= MAX_SIZE:
            shown = format_size(self.size) if isinstance(self.size, int) and self.size > 0 else repr(self.size)
            raise InputError(f"{self.kind} of {shown:.40}: the size must be a whole number of bytes in "
                             f"0..{MAX_SIZE} (1 PiB)")
        if (isinstance(self.count, bool) or not isinstance(self.count, (int, float))
                or not 0 < self.count <= MAX_CALLS):
            raise InputError(f"{self.kind} x {self.count!r:.40}: the calls per step must be a number in "
                             f"(0, {MAX_CALLS:g}]")

    def text(self) -> str:
        count = f" x {self.count:g}" if self.count != 1 else ""
        return f"{self.kind} {format_size(self.size)}{count}"


@dataclass(frozen=True)
class Model:
    """A transformer from which the traffic is derived (Megatron-style, bf16, per step):
    ``layers``, ``hidden``, ``tokens`` per micro-batch, ``microbatches`` per step.

    * tp: 4 allreduces per layer and micro-batch (2 forward, 2 backward) of tokens x hidden x 2
      bytes, for the layers of one pipeline stage;
    * pp: per micro-batch, the activation forward and its gradient backward, tokens x hidden x
      2 bytes each, between consecutive stages (2 x microbatches sendrecv calls);
    * dp: one allreduce of the gradients a rank holds: 12 x layers x hidden^2 parameters over
      tp x pp ranks, 2 bytes each.
    """

    layers: int
    hidden: int
    tokens: int
    microbatches: int = 1

    def __post_init__(self) -> None:
        for name, most in MODEL_BOUNDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise InputError(f"model {name} {value!r:.40}: expected a whole number in 1..{most}")

    def traffic(self, sizes: dict[str, int]) -> dict[str, Traffic]:
        tp, pp, dp = sizes.get("tp", 1), sizes.get("pp", 1), sizes.get("dp", 1)
        activation = self.tokens * self.hidden * 2
        params = 12 * self.layers * self.hidden ** 2
        if max(activation, params * 2) > MAX_SIZE:
            raise InputError(f"model of {self.layers} layers, hidden {self.hidden}, {self.tokens} tokens: its "
                             f"{'activations' if activation > MAX_SIZE else 'gradients'} are over "
                             f"{format_size(MAX_SIZE)} per call, the largest message size")
        out: dict[str, Traffic] = {}
        if tp > 1:
            out["tp"] = Traffic("allreduce", activation, 4 * self.microbatches * self.layers / pp)
        if pp > 1:
            out["pp"] = Traffic("sendrecv", activation, 2 * self.microbatches)
        if dp > 1:
            out["dp"] = Traffic("allreduce", int(params * 2 // (tp * pp)), 1)
        return out


# Published shapes (layers, hidden) of GPT/Llama-class models by parameter count.
SHAPES = {7e9: (32, 4096), 13e9: (40, 5120), 30e9: (60, 6656), 70e9: (80, 8192), 175e9: (96, 12288)}


def model_shape(text: str) -> tuple[int, int]:
    """(layers, hidden) for a model size such as ``7B``, ``70B``, ``1.3B`` or ``6.7e9``: a
    published shape when the size is one, else hidden = (128 x 12 x size / 12)^(1/3) rounded
    to 128 and layers = size / (12 x hidden^2) (12 x layers x hidden^2 parameters, 128 hidden
    per layer)."""
    m = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?\d+)?)\s*([kKmMbBtT]?)\s*", text or "")
    if not m:
        raise InputError(f"--model: expected a parameter count such as 7B, 70B or 6.7e9, got {text!r}")
    scale = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2).lower()]
    try:
        params = float(m.group(1)) * scale
    except ValueError:
        raise InputError(f"--model: {text!r} is not a number") from None
    if not 1e6 <= params <= 1e14:
        raise InputError(f"--model: {text} parameters is outside 1M..100T")
    for known, shape in SHAPES.items():
        if abs(params - known) / known < 0.02:
            return shape
    hidden = max(128, round((128 * params / 12) ** (1 / 3) / 128) * 128)
    return max(1, round(params / (12 * hidden * hidden))), hidden


def parse_plan(text: str) -> dict[str, int]:
    """``tp=8,pp=2,dp=8`` -> {"tp": 8, "pp": 2, "dp": 8} (order kept)."""
    out: dict[str, int] = {}
    for part in (text or "").split(","):
        m = re.fullmatch(r"\s*([A-Za-z][\w-]*)\s*=\s*(\d+)\s*", part)
        if not m:
            raise InputError(f"--plan: expected AXIS=SIZE pairs such as tp=8,pp=2,dp=8, got {part.strip()!r}")
        name, size = m.group(1), int(m.group(2))
        if size < 1:
            raise InputError(f"--plan: axis {name} needs a size of at least 1")
        if name in out:
            raise InputError(f"--plan: axis {name} is given twice")
        out[name] = size
    if not out:
        raise InputError("--plan names no axis")
    return out


def parse_traffic(text: str, axes: dict[str, int]) -> dict[str, Traffic]:
    """``tp=allreduce:16MiB*128,dp=allreduce:1GiB`` (``*N``: calls per step, default 1)."""
    out: dict[str, Traffic] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        m = re.fullmatch(r"\s*([A-Za-z][\w-]*)\s*=\s*([a-z]+)\s*:\s*([^*]+?)\s*(?:\*\s*([0-9.eE+]+))?\s*", part)
        if not m:
            raise InputError(f"--comm: expected AXIS=KIND:SIZE[*COUNT] such as dp=allreduce:1GiB, got {part.strip()!r}")
        axis, kind, size, count = m.group(1), m.group(2), m.group(3), m.group(4)
        if axis not in axes:
            raise InputError(f"--comm: axis {axis} is not in the plan ({', '.join(axes)})")
        if kind not in KINDS:
            raise InputError(f"--comm: {kind} is not one of {', '.join(KINDS)}")
        try:
            n = float(count) if count else 1.0
        except ValueError:
            raise InputError(f"--comm: count {count!r} is not a number") from None
        if not n > 0 or not math.isfinite(n):
            raise InputError(f"--comm: the count must be a positive number, got {count}")
        out[axis] = Traffic(kind, parse_size(size), n)
    return out


@dataclass(frozen=True)
class AxisCost:
    axis: str
    traffic: Traffic
    groups: Groups
    nodes_spanned: int
    time_us: float  # one call, every group at once
    alone_us: float  # one call, one group with the links to itself
    solver: str

    @property
    def total_us(self) -> float:
        return self.time_us * self.traffic.count


@dataclass(frozen=True)
class Placement:
    intra: dict[str, int]  # axis -> factor inside a node
    inter: dict[str, int]  # axis -> factor across nodes
    costs: tuple[AxisCost, ...] = field(default=())

    @property
    def total_us(self) -> float:
        return sum(c.total_us for c in self.costs)

    def label(self) -> str:
        inside = " ".join(f"{a}{f}" for a, f in self.intra.items() if f > 1) or "-"
        across = " ".join(f"{a}{f}" for a, f in self.inter.items() if f > 1) or "-"
        return f"node: {inside} | across: {across}"

    def reasons(self) -> list[str]:
        out = []
        for c in self.costs:
            where = "inside one node" if c.nodes_spanned == 1 else f"across {c.nodes_spanned} nodes"
            share = c.time_us / c.alone_us if c.alone_us > 0 else 1.0
            shared = f", {share:.2f}x slower with the other groups" if share > 1.005 else ""
            out.append(f"{c.axis} ({c.traffic.text()}): {len(c.groups)} groups {where}, "
                       f"{c.time_us:.4g} us per call{shared}, {c.total_us / 1e3:.4g} ms per step")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"placement": self.label(), "intra": self.intra, "inter": self.inter,
                "total_us": round(self.total_us, 3),
                "axes": [{"axis": c.axis, "collective": c.traffic.kind, "size": c.traffic.size,
                          "count": c.traffic.count, "groups": [list(g) for g in c.groups.members],
                          "nodes_spanned": c.nodes_spanned, "time_us": round(c.time_us, 3),
                          "alone_us": round(c.alone_us, 3), "total_us": round(c.total_us, 3), "solver": c.solver}
                         for c in self.costs],
                "reasons": self.reasons()}


def _divisors(x: int) -> list[int]:
    return [d for d in range(1, x + 1) if x % d == 0]


def matrices(axes: dict[str, int], per_node: int) -> list[tuple[dict[str, int], dict[str, int]]]:
    """Every split of the axes into intra-node factors (multiplying to ``per_node``) and the
    inter-node rest."""
    names = list(axes)
    out = []
    for combo in itertools.product(*(_divisors(axes[a]) for a in names)):
        if math.prod(combo) == per_node:
            intra = dict(zip(names, combo))
            out.append((intra, {a: axes[a] // intra[a] for a in names}))
    return out


def axis_groups(axes: dict[str, int], intra: dict[str, int], inter: dict[str, int], per_node: int,
                axis: str) -> list[tuple[int, ...]]:
    """The groups of ``axis`` under a placement (module docstring), ranks ordered by the axis."""
    names = list(axes)

    def rank_of(coord: dict[str, int]) -> int:
        local, node = 0, 0
        for a in reversed(names):  # the first axis varies fastest
            local = local * intra[a] + coord[a] % intra[a]
            node = node * inter[a] + coord[a] // intra[a]
        return node * per_node + local

    others = [a for a in names if a != axis]
    groups = []
    for rest in itertools.product(*(range(axes[a]) for a in others)):
        coord = dict(zip(others, rest))
        groups.append(tuple(rank_of({**coord, axis: i}) for i in range(axes[axis])))
    return groups


def _sendrecv(topology: Topology, groups: Groups) -> Algorithm:
    """Each stage's buffer to the next stage of its group (one pipeline boundary crossing)."""
    n = topology.n_ranks
    inputs: list[list[int]] = [[] for _ in range(n)]
    outputs: list[list[frozenset[int]]] = [[] for _ in range(n)]
    transfers = []
    chunk = 0
    for g in groups.members:
        for a, b in zip(g, g[1:]):
            if topology.flat_link(a, b) is None:
                raise InputError(f"ranks {a} and {b} are consecutive pipeline stages but not linked")
            inputs[a].append(chunk)
            outputs[b].append(frozenset((chunk,)))
            transfers.append(Transfer(0, a, "input", len(inputs[a]) - 1, b, "output", len(outputs[b]) - 1))
            chunk += 1
    coll = Collective(f"sendrecv-{groups.spec}", "custom", n, tuple(map(tuple, inputs)), tuple(map(tuple, outputs)),
                      tuple(tuple(None for _ in o) for o in outputs))
    return Algorithm(coll.name, coll, topology, tuple(transfers), None, "direct")


def _axis_cost(topology: Topology, axis: str, traffic: Traffic, members: list[tuple[int, ...]], solver: str,
               cache: dict, quick: bool) -> AxisCost:
    spec = ";".join(",".join(map(str, g)) for g in members)
    groups = Groups(spec, tuple(members))
    node_of = topology.node_of or (0,) * topology.n_ranks
    spanned = max(len({node_of[r] for r in g}) for g in members)
    key = (traffic.kind, traffic.size, spec)
    if key not in cache:
        if traffic.kind == "sendrecv":
            alg = _sendrecv(topology, groups)
            together = simulate(alg, traffic.size, bound=False, baselines=False).time_us
            one = _sendrecv(topology, Groups(spec, (members[0],)))
            alone = simulate(one, traffic.size, bound=False, baselines=False).time_us
            cache[key] = (together, alone, "direct")
        else:
            try:
                result = synthesize_groups(topology, traffic.kind, groups, size=traffic.size, solver=solver,
                                           quick=quick)
            except InputError:  # the solver cannot do this axis: a template that implements it does
                fallback = _fallback(traffic.kind, solver)
                if fallback is None:
                    raise
                result = synthesize_groups(topology, traffic.kind, groups, size=traffic.size, solver=fallback)
            cache[key] = (result.together_us, max(result.alone_us), "+".join(result.solvers))
    together, alone, used = cache[key]
    return AxisCost(axis, traffic, groups, spanned, together, alone, used)


def _fallback(kind: str, tried: str) -> str | None:
    """The template a placement uses for an axis the chosen solver cannot do (recorded as the
    axis's solver in the result), or None."""
    return next((name for name in solvers.TEMPLATES if name != tried and kind in solvers.SOLVERS[name].kinds), None)


def place(topology: Topology, axes: dict[str, int], traffic: dict[str, Traffic], *, solver: str = "packing",
          progress: Any = None, quick: bool = True) -> list[Placement]:
    """Every placement of the plan on ``topology``, fastest predicted first (module docstring).
    ``quick`` (default): the solver picks its pipeline without the judge's search (packing: its
    best-rate trees in 4 stages), which ranks placements in a fraction of the time."""
    n = topology.n_ranks
    if math.prod(axes.values()) != n:
        raise InputError(f"the plan {' x '.join(f'{a}={s}' for a, s in axes.items())} has "
                         f"{math.prod(axes.values())} ranks but {topology.name!r} has {n}")
    if not traffic:
        raise InputError("no communication given: --comm AXIS=KIND:SIZE[*COUNT] or a model (--layers, --hidden, "
                         "--tokens)")
    if solver != "auto" and solver not in solvers.SOLVERS:
        raise InputError(f"no solver named {validate.show(solver)} (known: auto, {', '.join(solvers.SOLVERS)})")
    if all(axes[axis] < 2 for axis in traffic):
        raise InputError(f"nothing crosses ranks: every axis with communication ({', '.join(traffic)}) has size 1 "
                         "in the plan, so every placement costs nothing")
    nodes = topology.node_ranks if topology.n_nodes > 1 else (tuple(range(n)),)
    per_node = len(nodes[0])
    if any(len(x) != per_node for x in nodes) or any(x != tuple(range(k * per_node, (k + 1) * per_node))
                                                     for k, x in enumerate(nodes)):
        raise InputError(f"{topology.name!r}: placement needs equal nodes numbered node by node")
    options = matrices(axes, per_node)
    if not options:
        raise InputError(f"no split of the plan's axes gives {per_node} ranks per node (each axis's share of a node "
                         "must divide its size)")
    cache: dict = {}
    out = []
    for k, (intra, inter) in enumerate(options):
        costs = []
        for axis, t in traffic.items():
            if axes[axis] < 2:
                continue
            if progress is not None:
                progress(f"placement {k + 1} of {len(options)}: {axis} ({t.text()})", k / len(options))
            members = axis_groups(axes, intra, inter, per_node, axis)
            costs.append(_axis_cost(topology, axis, t, members, solver, cache, quick))
        out.append(Placement(intra, inter, tuple(costs)))
    out.sort(key=lambda p: (p.total_us, p.label()))
    return out
