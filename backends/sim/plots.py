"""PNG plots with matplotlib (imported here only, Agg canvas, no pyplot state):

* ``plot_simulation``: the timeline of a run (one row per link lane, a bar per message,
  coloured by step) above a link-utilization heatmap (rank x rank: bytes a link carried over
  what its capacity could carry in the whole run, like the traffic heatmaps papers show);
* ``plot_sizes``: time-vs-size curves of several schedules and models against the lower bound,
  with bus bandwidth below and the fastest curve per size marked.

Files are written whole or not at all.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ccl.core.errors import BackendError
from ccl.core.report import NOT_COMPUTED, format_bytes, format_us
from ccl.core.units import format_size

from .files import write_atomic

if TYPE_CHECKING:
    from .simulator import Simulation

MAX_ROWS = 64  # timeline rows (link lanes) shown; the busiest links are kept
MAX_BARS = 20_000  # above this, bars of a row closer than a pixel are merged


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover - matplotlib is a dev/plot extra
        raise BackendError("plots need matplotlib: pip install 'ccl-synth[plot]'") from None
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: str | os.PathLike[str]) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    write_atomic(path, lambda fh: fh.write(buffer.getvalue()), binary=True)


def timeline(sim: Simulation, ax: Any) -> None:
    """Gantt chart of link lanes; messages coloured by step."""
    import matplotlib as mpl

    res = sim.resource
    used = res >= 0
    if not np.any(used):
        ax.text(0.5, 0.5, "no messages", ha="center", va="center", transform=ax.transAxes)
        return
    busy = np.bincount(res[used], weights=(sim.sent - sim.start)[used], minlength=len(sim.resource_pairs))
    order = sorted(range(len(sim.resource_pairs)), key=lambda k: (-busy[k], sim.resource_pairs[k]))
    rows: list[tuple[int, int]] = []
    for k in order:
        for lane in range(sim.resource_lanes[k]):
            if len(rows) < MAX_ROWS:
                rows.append((k, lane))
    rows.sort(key=lambda x: (sim.resource_pairs[x[0]], x[1]))
    row_of = {key: i for i, key in enumerate(rows)}
    steps = np.repeat(sim.graph.msg_step, sim.slices)
    n_steps = max(1, int(steps.max()) + 1 if len(steps) else 1)
    cmap = mpl.colormaps["viridis"]
    end = max(sim.report.time_us, 1e-9)
    total = int(np.sum(used))
    for (k, lane), y in row_of.items():
        sel = np.flatnonzero((res == k) & (sim.lane == lane))
        if not len(sel):
            continue
        starts, ends = sim.start[sel], sim.sent[sel]
        if total <= MAX_BARS:
            colors = [cmap(s / max(1, n_steps - 1)) for s in steps[sel]]
            ax.broken_barh(list(zip(starts, ends - starts)), (y - 0.4, 0.8), facecolors=colors, linewidth=0)
        else:
            ax.broken_barh(_merge(starts, ends, end / 2000), (y - 0.4, 0.8), facecolors=cmap(0.5), linewidth=0)
    labels = []
    for k, lane in rows:
        a, b = sim.resource_pairs[k]
        name = f"{a} copy" if a == b else f"{a}->{b}"
        labels.append(name + (f" #{lane}" if sim.resource_lanes[k] > 1 else ""))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=6 if len(rows) > 24 else 8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.invert_yaxis()
    ax.set_xlim(0, end)
    ax.set_xlabel("time (us)")
    shown = "" if len(rows) == sum(sim.resource_lanes) else f" (busiest {len(rows)} lanes)"
    ax.set_title(f"timeline{shown}: colour = step (0..{n_steps - 1})", fontsize=9)


def _merge(starts: np.ndarray, ends: np.ndarray, gap: float) -> list[tuple[float, float]]:
    order = np.argsort(starts, kind="stable")
    out: list[list[float]] = []
    for s, e in zip(starts[order].tolist(), ends[order].tolist()):
        if out and s <= out[-1][1] + gap:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e - s) for s, e in out]


def heatmap(sim: Simulation, ax: Any, fig: Any) -> None:
    """Link utilization, rank x rank (blank: no link between the two ranks), then the switches
    pushes and pulls use (a row and a column each, after the ranks)."""
    n = sim.program.n_ranks
    topo = sim.program.topology
    switches = sorted({v for link in sim.report.links for v in (link.src, link.dst) if v >= n})
    at = {v: v for v in range(n)} | {v: n + k for k, v in enumerate(switches)}
    grid = np.full((n + len(switches), n + len(switches)), np.nan)
    for link in topo.flat().links:
        grid[link.src, link.dst] = 0.0
    for link in sim.report.links:
        grid[at[link.src], at[link.dst]] = link.utilization
    if switches:
        ticks = list(range(n, n + len(switches)))
        labels = [topo.vertex_name(v) for v in switches]
        ax.set_xticks(ticks, labels, rotation=90, fontsize=6)
        ax.set_yticks(ticks, labels, fontsize=6)
    image = ax.imshow(grid, cmap="magma", vmin=0.0, vmax=max(1e-9, float(np.nanmax(grid)) if np.any(~np.isnan(grid)) else 1.0),
                      interpolation="nearest")
    ax.set_xlabel("destination rank")
    ax.set_ylabel("source rank")
    ax.set_title("link utilization (bytes / capacity x time)", fontsize=9)
    fig.colorbar(image, ax=ax, shrink=0.8)


def rank_traffic(sim: Simulation, ax: Any) -> None:
    """Bytes every rank sent and received over links."""
    ranks = sim.report.ranks
    xs = np.arange(len(ranks))
    ax.bar(xs - 0.2, [r.bytes_sent for r in ranks], 0.4, label="sent")
    ax.bar(xs + 0.2, [r.bytes_received for r in ranks], 0.4, label="received")
    ax.set_xlabel("rank")
    ax.set_ylabel("bytes over links")
    ax.set_title("traffic per rank", fontsize=9)
    ax.legend(fontsize=7)


def plot_simulation(sim: Simulation, path: str | os.PathLike[str]) -> None:
    rep = sim.report
    rows = min(MAX_ROWS, sum(sim.resource_lanes)) or 1
    fig = _figure(13, max(2.0, rows * 0.16) + 1.5 + 5.0)
    grid = fig.add_gridspec(2, 2, height_ratios=[max(2.0, rows * 0.16), 5.0])
    timeline(sim, fig.add_subplot(grid[0, :]))
    heatmap(sim, fig.add_subplot(grid[1, 0]), fig)
    rank_traffic(sim, fig.add_subplot(grid[1, 1]))
    versus = "" if rep.bound_binding == NOT_COMPUTED else f", {rep.bound_ratio:.2f}x the lower bound"
    fig.suptitle(f"{rep.algorithm} ({rep.collective} on {rep.topology}): {format_us(rep.time_us)} at "
                 f"{format_bytes(rep.size)}{versus}", fontsize=10)
    _save(fig, path)


LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = "os^vDPX*<>ph"


def curve_styles(names: Sequence[str]) -> dict[str, tuple[Any, str, str]]:
    """A (colour, line style, marker) per curve name, in the order given: colours from the
    qualitative tab20 palette without its greys and black (black is the bound's), dark shades
    first; line styles and markers cycle on different periods, so no two curves look alike
    even when there are more curves than colours."""
    import matplotlib as mpl

    palette = mpl.colormaps["tab20"].colors
    colours = [palette[i] for i in list(range(0, 20, 2)) + list(range(1, 20, 2)) if i not in (14, 15)]
    out = {}
    for i, name in enumerate(names):
        out[name] = (colours[i % len(colours)], LINE_STYLES[(i + i // len(colours)) % len(LINE_STYLES)],
                     MARKERS[i % len(MARKERS)])
    return out


def size_ticks(ax: Any, lo: float, hi: float) -> None:
    """Log-2 size axis with ticks at powers of two labelled 1KiB, 4MiB, 1GiB, at most ~12."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    first, last = int(np.floor(np.log2(max(lo, 1)))), int(np.ceil(np.log2(max(hi, 1))))
    step = next(s for s in (1, 2, 4, 5, 10, 20) if (last - first) // s <= 11)
    first = first - first % step
    ticks = [2.0**k for k in range(first, last + 1, step) if lo / 1.5 <= 2.0**k <= hi * 1.5]
    if not ticks:
        ticks = [float(lo)]
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())

    def label(x: float, _pos: int) -> str:
        return format_size(int(x)) if x >= 1 and x == int(x) else f"{x:g}B"

    ax.xaxis.set_major_formatter(FuncFormatter(label))


def winners(curves: Mapping[str, Sequence[tuple[float, float]]]) -> list[tuple[float, str, float]]:
    """Per size: (size, name of the fastest curve there, its time); ties go to the first name
    in sorted order."""
    best: dict[float, tuple[float, str]] = {}
    for name in sorted(curves):
        for x, y in curves[name]:
            if x not in best or y < best[x][0]:
                best[x] = (y, name)
    return [(x, best[x][1], best[x][0]) for x in sorted(best)]


def plot_sizes(curves: Mapping[str, Sequence[tuple[float, float]]], bound: Sequence[tuple[float, float]],
               path: str | os.PathLike[str], *, title: str = "", bus_factor: float = 1.0) -> None:
    """Time (log-log) and bus bandwidth against size, one curve per name, plus the bound
    (black, dashed). Every curve has its own colour, line style and marker; the fastest curve
    at each size is ringed, and a strip under the plots shows the winner's colour per size.
    The size axis is in powers of two labelled 1KiB, 1MiB, 1GiB."""
    fig = _figure(10, 8.6)
    grid = fig.add_gridspec(3, 1, height_ratios=[4.0, 3.0, 0.45])
    top = fig.add_subplot(grid[0])
    bottom = fig.add_subplot(grid[1], sharex=top)
    strip = fig.add_subplot(grid[2], sharex=top)
    names = [name for name in sorted(curves) if curves[name]]
    styles = curve_styles(names)
    for name in names:
        xs, ys = zip(*sorted(curves[name]))
        colour, line, marker = styles[name]
        kw = dict(color=colour, linestyle=line, marker=marker, markersize=4, linewidth=1.4, label=name)
        top.plot(xs, ys, **kw)
        bottom.plot(xs, [x / y / 1e3 * bus_factor for x, y in zip(xs, ys)], **kw)
    if bound:
        xs, ys = zip(*sorted(bound))
        kw = dict(color="black", linestyle=(0, (6, 3)), linewidth=2.2, label="lower bound")
        top.plot(xs, ys, **kw)
        bottom.plot(xs, [x / y / 1e3 * bus_factor for x, y in zip(xs, ys)], **kw)
    best = winners({name: curves[name] for name in names})
    if best:
        top.scatter([x for x, _, _ in best], [y for _, _, y in best], s=110, facecolors="none", linewidths=1.6,
                    edgecolors=[styles[name][0] for _, name, _ in best], zorder=5, label="fastest at the size")
        xs = sorted({x for x, _, _ in best})
        edges = [xs[0] / 1.4] + [float(np.sqrt(a * b)) for a, b in zip(xs, xs[1:])] + [xs[-1] * 1.4]
        for k, (_x, name, _y) in enumerate(best):
            strip.axvspan(edges[k], edges[k + 1], color=styles[name][0], linewidth=0)
        k = 0
        while k < len(best):  # the winner's name over each run of sizes it wins
            end = k
            while end + 1 < len(best) and best[end + 1][1] == best[k][1]:
                end += 1
            strip.text(float(np.sqrt(edges[k] * edges[end + 1])), 0.5, best[k][1], ha="center", va="center",
                       fontsize=7, clip_on=True, bbox=dict(facecolor="white", alpha=0.7, linewidth=0, pad=1))
            k = end + 1
        lo, hi = edges[0], edges[-1]
    else:
        lo, hi = 1.0, 2.0
    if bound:
        lo, hi = min(lo, min(x for x, _ in bound)), max(hi, max(x for x, _ in bound))
    top.set_yscale("log")
    top.set_ylabel("time (us)")
    top.grid(True, which="both", alpha=0.3)
    top.legend(fontsize=7, ncol=2 if len(names) > 8 else 1)
    top.tick_params(labelbottom=False)
    bottom.set_ylabel("bus bandwidth (GB/s)")
    bottom.grid(True, which="both", alpha=0.3)
    bottom.tick_params(labelbottom=False)
    strip.set_yticks([])
    strip.set_ylabel("fastest", fontsize=8, rotation=0, ha="right", va="center")
    strip.set_xlabel("size (nccl-tests convention)")
    size_ticks(strip, min(x for x, _, _ in best) if best else lo, max(x for x, _, _ in best) if best else hi)
    strip.set_xlim(lo, hi)
    if title:
        fig.suptitle(title, fontsize=10)
    _save(fig, path)
