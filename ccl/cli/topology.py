"""``ccl topology list`` and ``ccl topology show``."""

from __future__ import annotations

import argparse
from typing import Any

import topologies

from ..compiler import load_topology
from ..core.serialize import topology_to_json
from .common import Parser, command, emit


def cmd_list(args: argparse.Namespace) -> int:
    rows = [{"name": b.name, "usage": b.usage, "summary": b.summary, "example": b.example}
            for b in topologies.BUILDERS.values()]
    width = max(len(r["usage"]) for r in rows)
    text = "\n".join(f"{r['usage']:<{width}}  {r['summary']}" for r in rows)
    emit(args, {"topologies": rows}, text)
    return 0


def _fmt_bw(x: float) -> str:
    return f"{x:.6g} GB/s"


def cmd_show(args: argparse.Namespace) -> int:
    topo = load_topology(args.topology)
    if args.flat:
        topo = topo.flat()
    data = {"format": "ccl-topology", "version": 1, "topology": topology_to_json(topo),
            "n_nodes": topo.n_nodes, "n_switches": len(topo.switches), "n_links": len(topo.links)}
    lines = [f"topology {topo.name}: {topo.n_ranks} ranks on {topo.n_nodes} node(s), "
             f"{len(topo.switches)} switch vertices, {len(topo.links)} directed links, "
             f"{len(topo.limits)} shared limits"]
    if topo.n_nodes > 1:
        sizes = sorted({len(x) for x in topo.node_ranks})
        lines.append(f"nodes: {topo.n_nodes} x {'/'.join(map(str, sizes))} ranks (rank = node * size + local)")
    if topo.switches:
        lines.append("switches: " + ", ".join(f"{s.name} ({s.kind})" for s in topo.switches))
    lines.append("links:")
    done = set()
    for link in topo.links:
        if link.pair in done:
            continue
        back = topo.link(link.dst, link.src)
        same = back is not None and (back.bandwidth, back.latency, back.lanes) == (link.bandwidth, link.latency, link.lanes)
        arrow = "<->" if same else "->"
        done.add(link.pair)
        if same:
            done.add((link.dst, link.src))
        lanes = f" x{link.lanes}" if link.lanes > 1 else ""
        lines.append(f"  {topo.vertex_name(link.src)} {arrow} {topo.vertex_name(link.dst)}: "
                     f"{_fmt_bw(link.bandwidth)}{lanes}, {link.latency:.6g} us")
    if topo.limits:
        lines.append("shared limits:")
        for limit in topo.limits:
            lines.append(f"  {limit.name}: {_fmt_bw(limit.bandwidth)} over {len(limit.links)} links")
    emit(args, data, "\n".join(lines))
    return 0


def register(sub: Any) -> None:
    topo = sub.add_parser("topology", help="the topology library")
    tsub = topo.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", parser_class=Parser)
    tsub.required = True
    command(tsub, "list", "list the topology library", cmd_list)
    show = command(tsub, "show", "show a topology's ranks, links, bandwidths, limits and nodes", cmd_show)
    show.add_argument("topology", help="NAME, NAME:ARGS or a topology JSON file")
    show.add_argument("--flat", action="store_true", help="show the flattened rank-to-rank view")
