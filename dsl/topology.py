"""Lowering topology bodies: ranks, switches and NICs, links with units and lanes, link classes,
shared limits, and multi-node composition (``node T x N { nic ... }`` then ``fabric F``).

Composition is implemented here only (the library's multi-node machines in
``topologies/machines.ccl`` are built with it): rank = node * ranks_per_node + local rank;
node-local switches are renamed ``n<node>.<name>``; NIC k of node a is the vertex ``n<a>.nic<k>``
(kind ``nic``) with a host link each way (host bandwidth, latency 0) to every GPU it serves;
vertices are numbered ranks first, then switches in the order they are declared (each node's own
switches, then its NICs, node by node, then whatever the fabric adds). With one node there is
nothing to join: no NICs, and ``fabric`` does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ccl.core import limits
from ccl.core.errors import DslError, InputError, Span, TopologyError
from ccl.core.hardware import generation
from ccl.core.topology import Link, SharedLimit, Switch, Topology

from . import ast
from .evaluate import Evaluator, Scope, describe, relocate, require_int, require_str, suggest
from .values import BANDWIDTH, TIME, Definition, LinkClass, NicSpec, Quantity, show, show_item

Key = int | str  # a rank number or a switch name


@dataclass(frozen=True)
class BoundFabric:
    """A fabric definition with its arguments: ``leafspine(nodes_per_leaf = 2)``."""

    definition: Definition
    scope: Scope
    type_label = "a fabric"

    def __str__(self) -> str:
        return self.definition.name


@dataclass(frozen=True)
class Cluster:
    count: int
    per_node: int
    nics: tuple[NicSpec, ...]
    span: Span


def eval_props(ev: Evaluator, props: ast.Props, scope: Scope, *, nic: bool = False, partial: bool = False):
    """(bandwidth GB/s, latency us, lanes, host bandwidth GB/s) from a property list.

    Items are told apart by their units: a bandwidth, a latency, or a link class whose values
    apply first; ``host B`` is a NIC's host-side bandwidth. ``partial`` allows missing items
    (link classes)."""
    bandwidth = latency = host = None
    lanes: int | None = None
    explicit: dict[str, Span] = {}
    for prop in props.items:
        value = ev.eval(prop.value, scope)
        if prop.host:
            if not nic:
                raise DslError("'host' gives a NIC's host-side bandwidth; a link has none", prop.span)
            host = _bandwidth(value, "a NIC's host bandwidth", prop.value.span)
            continue
        if isinstance(value, LinkClass):
            if nic:
                raise DslError("a NIC takes a bandwidth, a latency and `host BANDWIDTH`, not a link class",
                               prop.span)
            bandwidth = value.bandwidth.value if value.bandwidth is not None and "bandwidth" not in explicit \
                else bandwidth
            latency = value.latency.value if value.latency is not None and "latency" not in explicit else latency
            lanes = value.lanes if value.lanes is not None else lanes
            continue
        if isinstance(value, Quantity) and value.dim in (BANDWIDTH, TIME):
            field = "bandwidth" if value.dim == BANDWIDTH else "latency"
            if field in explicit:
                raise DslError(f"two {field}s given (the first at column {explicit[field].column})", prop.span)
            explicit[field] = prop.span
            if field == "bandwidth":
                bandwidth = _bandwidth(value, "bandwidth", prop.value.span)
            else:
                if not value.value >= 0 or value.value == float("inf"):
                    raise DslError(f"latency must not be negative, got {show(value)}", prop.value.span)
                latency = float(value.value)
            continue
        raise DslError(_prop_problem(value), prop.value.span)
    if props.lanes is not None:
        if nic:
            raise DslError("a NIC has no lanes", props.lanes.span)
        lanes = require_int(ev.eval(props.lanes, scope), "lanes", props.lanes.span, least=1)
    if not partial:
        what = "a NIC" if nic else "a link"
        if bandwidth is None:
            raise DslError(f"{what} needs a bandwidth, e.g. 25 GB/s", props.span)
        if latency is None:
            raise DslError(f"{what} needs a latency, e.g. 0.7 us", props.span)
        if nic and host is None:
            raise DslError("a NIC needs its host-side (PCIe) bandwidth: add `host 12 GB/s`", props.span)
    return bandwidth, latency, lanes, host


def _bandwidth(value: Any, what: str, span: Span) -> float:
    if not isinstance(value, Quantity) or value.dim != BANDWIDTH:
        raise DslError(f"{what} must be a bandwidth such as 25 GB/s, got {describe(value)}", span)
    if not value.value > 0 or value.value == float("inf"):
        raise DslError(f"{what} must be positive, got {show(value)}", span)
    return float(value.value)


def _prop_problem(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (f"{show(value)} has no unit: write a bandwidth such as {show(value)} GB/s or a latency such as "
                f"{show(value)} us")
    return f"a link takes a bandwidth, a latency or a link class, not {describe(value)}"


def make_link_class(ev: Evaluator, stmt: ast.LinkClass, scope: Scope) -> LinkClass:
    bandwidth, latency, lanes, _ = eval_props(ev, stmt.props, scope, partial=True)
    return LinkClass(
        stmt.name,
        None if bandwidth is None else Quantity(bandwidth, BANDWIDTH),
        None if latency is None else Quantity(latency, TIME),
        lanes,
    )


class TopologyBuilder:
    """Collects one topology's vertices and links while its body runs."""

    describe = "a topology"

    def __init__(self, ev: Evaluator, name: str, span: Span) -> None:
        self.ev = ev
        self.default_name = name
        self.span = span
        self.n_ranks: int | None = None
        self.ranks_span: Span | None = None
        self.name: str | None = None
        self.name_span: Span | None = None
        self.accelerator: str | None = None
        self.accelerator_span: Span | None = None
        self.switches: list[Switch] = []
        self.switch_spans: dict[str, Span] = {}
        self.links: dict[tuple[Key, Key], tuple[float, float, int, Span]] = {}
        self.limits: list[tuple[str, tuple[tuple[Key, Key], ...], float, Span]] = []
        self.node_of: tuple[int, ...] | None = None
        self.cluster: Cluster | None = None
        self.handlers = {
            ast.Ranks: self.ranks, ast.NameStmt: self.name_stmt, ast.NodeOf: self.node_of_stmt,
            ast.Accelerator: self.accelerator_stmt,
            ast.Vertex: self.vertex, ast.NodeStmt: self.node, ast.FabricUse: self.fabric,
            ast.Limit: self.limit, ast.LinkStmt: self.link, ast.LinkClass: self.link_class,
        }

    # ------------------------------------------------------------------ statements
    def ranks(self, stmt: ast.Ranks, scope: Scope) -> None:
        if self.ranks_span is not None:
            raise DslError(f"the ranks are already given at line {self.ranks_span.line}", stmt.span)
        self.n_ranks = require_int(self.ev.eval(stmt.count, scope), "the number of ranks", stmt.count.span, least=1)
        if self.n_ranks > limits.RANKS.value:
            raise DslError(limits.RANKS.message(self.n_ranks, "too many ranks"), stmt.count.span)
        self.ev.charge(self.n_ranks, stmt.count.span)
        self.ranks_span = stmt.span

    def name_stmt(self, stmt: ast.NameStmt, scope: Scope) -> None:
        if self.name_span is not None:
            raise DslError(f"the name is already given at line {self.name_span.line}", stmt.span)
        name = require_str(self.ev.eval(stmt.value, scope), "a topology name", stmt.value.span)
        if not name:
            raise DslError("a topology name must not be empty", stmt.value.span)
        self.name, self.name_span = name, stmt.span

    def accelerator_stmt(self, stmt: ast.Accelerator, scope: Scope) -> None:
        if self.accelerator_span is not None:
            raise DslError(f"the accelerator is already given at line {self.accelerator_span.line}", stmt.span)
        value = require_str(self.ev.eval(stmt.value, scope), "an accelerator model such as \"H100\"", stmt.value.span)
        try:
            generation(value)
        except InputError as exc:
            raise DslError(exc.message, stmt.value.span) from None
        self.accelerator, self.accelerator_span = value, stmt.span

    def node_of_stmt(self, stmt: ast.NodeOf, scope: Scope) -> None:
        if self.n_ranks is None or self.cluster is not None:
            raise DslError("`node_of` follows `ranks N` (a `node ... x N` statement numbers the nodes itself)",
                           stmt.span)
        value = self.ev.eval(stmt.value, scope)
        if isinstance(value, range):
            self.ev.charge(len(value), stmt.value.span)
        if not isinstance(value, (tuple, range)) or len(value) != self.n_ranks:
            raise DslError(f"`node_of` needs a list of {self.n_ranks} node numbers, one per rank, got "
                           f"{describe(value)}", stmt.value.span)
        nodes = tuple(require_int(v, "a node number", stmt.value.span, least=0) for v in value)
        if sorted(set(nodes)) != list(range(max(nodes) + 1)):
            raise DslError("nodes must be numbered 0..N-1 without gaps", stmt.value.span)
        self.node_of = nodes

    def vertex(self, stmt: ast.Vertex, scope: Scope) -> None:
        if isinstance(stmt.name, ast.Name):
            name = stmt.name.id
            scope.define(name, name, stmt.span, "switch")
        else:
            name = require_str(self.ev.eval(stmt.name, scope), "a switch name", stmt.name.span)
        node = None
        if stmt.node is not None:
            node = require_int(self.ev.eval(stmt.node, scope), "a node number", stmt.node.span, least=0)
        reduce = stmt.reduce
        if not isinstance(reduce, bool):
            reduce = self.ev.eval(reduce, scope)
            if not isinstance(reduce, bool):
                raise DslError(f"`reduce` takes a condition (true or false), got {describe(reduce)}", stmt.reduce.span)
        self.add_switch(name, stmt.kind, node, stmt.span, stmt.name.span, reduce)

    def add_switch(self, name: str, kind: str, node: int | None, span: Span, name_span: Span | None = None,
                   reduce: bool = False) -> None:
        if not name or name.isdigit():
            raise DslError(f"a switch name must be a non-empty string that is not a rank number, got '{name}'",
                           name_span or span)
        if name in self.switch_spans:
            raise DslError(f"switch '{name}' is already defined at line {self.switch_spans[name].line}",
                           name_span or span)
        self.switches.append(Switch(name, kind, node, reduce))
        self.switch_spans[name] = span

    def link_class(self, stmt: ast.LinkClass, scope: Scope) -> None:
        scope.define(stmt.name, make_link_class(self.ev, stmt, scope), stmt.span, "link class")

    def _ends(self, value: Any, span: Span) -> list[Key]:
        items = value if isinstance(value, (tuple, range)) else (value,)
        self.ev.charge(len(items), span)
        out: list[Key] = []
        for v in items:
            if isinstance(v, bool) or not isinstance(v, (int, str)):
                raise DslError(f"a link end is a rank number or a switch name, got {describe(v)}", span)
            if isinstance(v, int):
                if self.n_ranks is None:
                    raise DslError("declare the ranks (`ranks N` or `node T x N`) before the first link", span)
                if not 0 <= v < self.n_ranks:
                    raise DslError(f"rank {v} is out of range: this topology has ranks 0..{self.n_ranks - 1}", span)
            elif v not in self.switch_spans:
                known = list(self.switch_spans)
                listed = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "") if known else "none yet"
                raise DslError(f"no switch named '{v}'{suggest(v, known)} (switches: {listed})", span)
            out.append(v)
        return out

    def link(self, stmt: ast.LinkStmt, scope: Scope) -> None:
        ev = self.ev
        srcs = self._ends(ev.eval(stmt.src, scope), stmt.src.span)
        dsts = self._ends(ev.eval(stmt.dst, scope), stmt.dst.span)
        bandwidth, latency, lanes, _ = eval_props(ev, stmt.props, scope)
        props = (bandwidth, latency, lanes or 1, stmt.span)
        links = self.links
        self._check_links(len(links) + len(srcs) * len(dsts) * (2 if stmt.both else 1), stmt.span)
        for s in srcs:
            for d in dsts:
                if s == d:
                    raise DslError(f"a link from {_vertex(s)} to itself", stmt.span)
                pairs = ((s, d), (d, s)) if stmt.both else ((s, d),)
                for pair in pairs:
                    if pair in links:
                        raise DslError(f"link {_vertex(pair[0])} -> {_vertex(pair[1])} is already defined at line "
                                       f"{links[pair][3].line} (parallel links are lanes: `x 2`)", stmt.span)
                    links[pair] = props

    def limit(self, stmt: ast.Limit, scope: Scope) -> None:
        ev = self.ev
        name = require_str(ev.eval(stmt.name, scope), "a limit name", stmt.name.span)
        bandwidth = _bandwidth(ev.eval(stmt.bandwidth, scope), "a limit's bandwidth", stmt.bandwidth.span)
        value = ev.eval(stmt.links, scope)
        if not isinstance(value, tuple) or not value:
            raise DslError(f"a limit covers a list of links as pairs [(a, b), ...], got {describe(value)}",
                           stmt.links.span)
        pairs = []
        for pair in value:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise DslError(f"a limit's link is a pair (a, b), got {describe(pair)}", stmt.links.span)
            a = self._ends(pair[0], stmt.links.span)[0]
            b = self._ends(pair[1], stmt.links.span)[0]
            if (a, b) not in self.links:
                raise DslError(f"limit '{name}' names link {_vertex(a)} -> {_vertex(b)}, which is not defined "
                               "(define links before the limits that cover them)", stmt.links.span)
            pairs.append((a, b))
        self.limits.append((name, tuple(pairs), bandwidth, stmt.span))

    # ------------------------------------------------------------------ composition
    def node(self, stmt: ast.NodeStmt, scope: Scope) -> None:
        ev = self.ev
        if self.ranks_span is not None:
            raise DslError(f"the ranks are already given at line {self.ranks_span.line}; a topology has either "
                           "`ranks N` or `node T x N`", stmt.span)
        value = ev.eval(stmt.topology, scope)
        if isinstance(value, Definition) and value.kind == "topology":
            value = ev.invoke(value, (), {}, stmt.topology.span)
        if not isinstance(value, Topology):
            raise DslError(f"`node` copies a topology, got {describe(value)}", stmt.topology.span)
        if value.n_nodes != 1:
            raise DslError(f"a node is one machine, but topology {value.name} has {value.n_nodes} nodes",
                           stmt.topology.span)
        count = require_int(ev.eval(stmt.count, scope), "the number of nodes", stmt.count.span, least=1)
        block = NodeBlock(ev, value.n_ranks)
        ev.run(stmt.body, block, Scope(scope))
        ev.charge(count * (value.n_ranks + len(value.links) + len(value.switches) + 3 * len(block.nics)),
                  stmt.count.span)
        self._compose(value, count, tuple(block.nics), stmt.span)
        self.ranks_span = stmt.span
        self.cluster = Cluster(count, value.n_ranks, tuple(block.nics), stmt.span)

    def _check_links(self, total: int, span: Span) -> None:
        """A located DslError when the topology would have more links than ``ccl.core.limits.LINKS``
        (checked before they are made: each costs memory however cheap the loop making it)."""
        if total > limits.LINKS.value:
            raise DslError(limits.LINKS.message(total, "the topology has too many links"), span)

    def _compose(self, node: Topology, count: int, nics: tuple[NicSpec, ...], span: Span) -> None:
        per = node.n_ranks
        self.node_accelerator = node.accelerator
        self.n_ranks = per * count
        links = self.links
        self._check_links(len(links) + count * (len(node.links) + 2 * sum(len(nic.hosts) for nic in nics)), span)
        for a in range(count):
            base = a * per
            prefix = f"n{a}." if count > 1 else ""
            names = {}
            for i, sw in enumerate(node.switches):
                names[per + i] = prefix + sw.name
                self.add_switch(prefix + sw.name, sw.kind, a, span, reduce=sw.reduce)

            def key(v: int, base: int = base, names: dict = names) -> Key:
                return base + v if v < per else names[v]

            for link in node.links:
                pair = (key(link.src), key(link.dst))
                if pair in links:
                    raise DslError(f"link {_vertex(pair[0])} -> {_vertex(pair[1])} is already defined at line "
                                   f"{links[pair][3].line}", span)
                links[pair] = (link.bandwidth, link.latency, link.lanes, span)
            for limit in node.limits:
                self.limits.append((prefix + limit.name, tuple((key(x), key(y)) for x, y in limit.links),
                                    limit.bandwidth, span))
            if count > 1:
                for k, nic in enumerate(nics):
                    vertex = f"n{a}.nic{k}"
                    self.add_switch(vertex, "nic", a, span)
                    host = float(nic.host_bandwidth.value)
                    for h in nic.hosts:
                        links[(base + h, vertex)] = (host, 0.0, 1, span)
                        links[(vertex, base + h)] = (host, 0.0, 1, span)
        self.node_of = tuple(r // per for r in range(self.n_ranks))

    def fabric(self, stmt: ast.FabricUse, scope: Scope) -> None:
        ev = self.ev
        if self.cluster is None:
            raise DslError("`fabric` joins the nodes of a `node T x N` statement, and this topology has none",
                           stmt.span)
        value = self._fabric_value(stmt.fabric, scope)
        cluster = self.cluster
        if cluster.count == 1:
            return
        if not cluster.nics:
            raise DslError("nodes cannot be joined without NICs: declare them in the node block "
                           "(`nic 0..8 : 25 GB/s, 2.6 us, host 32 GB/s`)", cluster.span)
        inner = Scope(value.scope)
        inner.vars["nodes"] = cluster.count
        inner.vars["nics"] = cluster.nics
        definition = value.definition
        ev.enter(stmt.span)
        try:
            ev.run(definition.node.body, FabricContext(self), inner)
        except DslError as exc:
            raise relocate(exc, f"fabric {definition.name}", stmt.span) from None
        finally:
            ev.leave()

    def _fabric_value(self, expr: ast.Expr, scope: Scope) -> BoundFabric:
        """In `fabric F` a bare name (or the name called) is a fabric even where a topology or
        variable of that name shadows it; a string names a fabric; else F is evaluated."""
        ev = self.ev
        if isinstance(expr, ast.Name):
            value = scope.lookup(expr.id) if scope.has(expr.id) else None
            if not isinstance(value, (str, BoundFabric)) and not _is_fabric(value):
                value = _fabric_by_name(expr.id, scope, expr.span)
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
            func = scope.lookup(expr.func.id) if scope.has(expr.func.id) else None
            if not _is_fabric(func):
                func = _fabric_by_name(expr.func.id, scope, expr.func.span)
            args = tuple(ev.eval(a, scope) for a in expr.args)
            kwargs = {kw.name: (ev.eval(kw.value, scope), kw.span) for kw in expr.kwargs}
            value = ev.call(func, args, kwargs, expr)
        else:
            value = ev.eval(expr, scope)
        if isinstance(value, str):
            value = _fabric_by_name(value, scope, expr.span)
        if _is_fabric(value):
            value = ev.invoke(value, (), {}, expr.span)
        if not isinstance(value, BoundFabric):
            raise DslError(f"`fabric` needs a fabric such as switch, leafspine or rail, got {describe(value)}",
                           expr.span)
        return value

    # ------------------------------------------------------------------ the result
    def build(self, scope_span: Span) -> Topology:
        if self.n_ranks is None:
            raise DslError("this topology declares no ranks: add `ranks N` or `node T x N`", self.span)
        n = self.n_ranks
        nodes = 1 + max(self.node_of) if self.node_of else 1
        for sw in self.switches:
            if sw.node is not None and sw.node >= nodes:
                raise DslError(f"switch '{sw.name}' is on node {sw.node}, but this topology has "
                               f"{'only node 0' if nodes == 1 else f'nodes 0..{nodes - 1}'}", self.switch_spans[sw.name])
        ids = {sw.name: n + i for i, sw in enumerate(self.switches)}

        def vid(k: Key) -> int:
            return k if isinstance(k, int) else ids[k]

        name = self.name or self.default_name
        try:
            links = tuple(Link(vid(s), vid(d), float(bw), float(lat), lanes)
                          for (s, d), (bw, lat, lanes, _) in self.links.items())
            limits = tuple(SharedLimit(lname, tuple((vid(a), vid(b)) for a, b in pairs), bw)
                           for lname, pairs, bw, _ in self.limits)
            accelerator = self.accelerator or getattr(self, "node_accelerator", "")
            return Topology(name, n, links, tuple(self.switches), limits, self.node_of or (), accelerator)
        except TopologyError as exc:
            raise DslError(exc.message, scope_span) from None


class NodeBlock:
    """The block of ``node T x N { ... }``: the NICs of every node."""

    describe = "a node block"

    def __init__(self, ev: Evaluator, per_node: int) -> None:
        self.ev = ev
        self.per_node = per_node
        self.nics: list[NicSpec] = []
        self.handlers = {ast.NicPort: self.nic}

    def nic(self, stmt: ast.NicPort, scope: Scope) -> None:
        value = self.ev.eval(stmt.hosts, scope)
        items = value if isinstance(value, (tuple, range)) else (value,)
        self.ev.charge(len(items), stmt.hosts.span)
        hosts = []
        for h in items:
            h = require_int(h, "a NIC's host rank", stmt.hosts.span)
            if not 0 <= h < self.per_node:
                raise DslError(f"a NIC serves node-local ranks 0..{self.per_node - 1}, got {h}", stmt.hosts.span)
            hosts.append(h)
        if not hosts:
            raise DslError("a NIC serves at least one rank", stmt.hosts.span)
        bandwidth, latency, _, host = eval_props(self.ev, stmt.props, scope, nic=True)
        self.nics.append(NicSpec(tuple(hosts), Quantity(bandwidth, BANDWIDTH), Quantity(latency, TIME),
                                 Quantity(host, BANDWIDTH)))


class FabricContext:
    """A fabric body adds switches, links and limits to the topology it joins."""

    describe = "a fabric"

    def __init__(self, topology: TopologyBuilder) -> None:
        self.handlers = {ast.Vertex: topology.vertex, ast.Limit: topology.limit, ast.LinkStmt: topology.link,
                         ast.LinkClass: topology.link_class}


def _is_fabric(value: Any) -> bool:
    return isinstance(value, Definition) and value.kind == "fabric"


def _fabric_by_name(name: str, scope: Scope, span: Span) -> Definition:
    """The innermost fabric definition called ``name``, passing over other kinds of value."""
    known: list[str] = []
    level: Scope | None = scope
    while level is not None:
        value = level.vars.get(name)
        if _is_fabric(value):
            return value
        known.extend(k for k, v in level.vars.items() if _is_fabric(v))
        level = level.parent
    known = sorted(set(known))
    raise DslError(f"unknown fabric '{name}'{suggest(name, known)} (fabrics: {', '.join(known)})", span)


def _vertex(k: Key) -> str:
    return str(k) if isinstance(k, int) else k


def eval_topology(ev: Evaluator, expr: ast.Expr, scope: Scope, what: str) -> Topology:
    """The topology ``expr`` names: a value, or a topology definition called with no arguments;
    anything else is an error saying ``what`` needed it."""
    topo = ev.eval(expr, scope)
    if isinstance(topo, Definition) and topo.kind == "topology":
        topo = ev.invoke(topo, (), {}, expr.span)
    if not isinstance(topo, Topology):
        raise DslError(f"{what}, got {describe(topo)}", expr.span)
    return topo


def topology_name(definition: Definition, values: tuple) -> str:
    if not definition.params:
        return definition.name
    return f"{definition.name}({', '.join(show_item(v) for v in values)})"


def build_topology(ev: Evaluator, definition: Definition, scope: Scope, values: tuple, span: Span) -> Topology:
    builder = TopologyBuilder(ev, topology_name(definition, values), definition.node.span)
    ev.run(definition.node.body, builder, scope)
    return builder.build(definition.node.span)
