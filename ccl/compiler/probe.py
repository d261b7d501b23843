"""``ccl probe``: the topology a job actually got, fitted to measurements (Blink class).

``backends.torch.probe.measure`` times, on a live process group, every pair of ranks at a few
sizes (ping-pong), every rank sending to and receiving from all the others at once (fan-out,
fan-in) and pairs of disjoint transfers at once. ``fit`` turns that into a ``Topology``:

* a link per ordered pair with the latency and bandwidth of the least-squares fit of
  ``time = latency + bytes / bandwidth`` over the sizes;
* a shared limit on a rank's outgoing (incoming) links when sending to (receiving from) all
  peers at once reaches less than ``SHARED`` of the sum of its links' bandwidths: the limit is
  what the fan-out (fan-in) reached (never below the rank's fastest single link);
* a shared limit over transfers of disjoint pairs that slow each other down below ``SHARED`` of
  their bandwidth alone (a NIC, a PCIe switch, the host's CPU for loopback transports), grouped
  by union-find, at what they reached together;
* nodes from the ranks' host names.

Every measurement is predicted back from the fitted model and the relative errors reported:
how well the model explains what was measured.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import Any

from dsl.printer import check_identifier, format_topology

from ..core import limits, validate
from ..core.display import shown
from ..core.errors import InputError
from ..core.topology import Link, SharedLimit, Topology
from ..core.units import MAX_SIZE, format_size

SHARED = 0.8  # below this fraction of the independent bandwidth, links share a bottleneck
# A fit that misses a measurement by more than POOR_MAX (or half of them by more than
# POOR_MEDIAN) does not describe the machine: the written topology is marked and the command warns.
POOR_MAX = 0.5
POOR_MEDIAN = 0.1


@dataclass(frozen=True)
class PairFit:
    a: int
    b: int
    latency_us: float
    bandwidth_gbps: float
    points: tuple[tuple[int, float], ...]  # (bytes, measured us)

    def predict(self, nbytes: float) -> float:
        return self.latency_us + nbytes / (self.bandwidth_gbps * 1e3)

    def max_error(self) -> float:
        return max(abs(self.predict(s) - t) / t for s, t in self.points)


@dataclass(frozen=True)
class Probed:
    """The fitted topology, the fit of every pair, and every measurement with its prediction."""

    topology: Topology
    pairs: tuple[PairFit, ...]
    checks: tuple[dict[str, Any], ...]  # {"what", "measured_us", "predicted_us", "error"}
    measurements: dict[str, Any]

    def errors(self) -> list[float]:
        return [c["error"] for c in self.checks]

    def warning(self) -> str | None:
        """Why the fitted model should not be trusted, or None: its errors are large (the
        machine was busy, the timer coarse, or the links behave as the model cannot say)."""
        errs = self.errors()
        if not errs:
            return None
        median, largest = statistics.median(errs), max(errs)
        if largest <= POOR_MAX and median <= POOR_MEDIAN:
            return None
        worst = max(self.checks, key=lambda c: c["error"])
        return (f"the fitted topology explains the measurements poorly: errors up to {largest:.1%} "
                f"({shown(worst['what'])}: measured {worst['measured_us']:g} us, model {worst['predicted_us']:g} us), "
                f"median {median:.1%}; measure again on an idle machine or with a larger --repeat before trusting it")

    def to_json(self) -> dict[str, Any]:
        errs = self.errors()
        return {"topology": self.topology.name, "n_ranks": self.topology.n_ranks,
                "nodes": self.topology.n_nodes,
                "pairs": [{"ranks": [p.a, p.b], "latency_us": p.latency_us, "bandwidth_GBps": p.bandwidth_gbps,
                           "fit_max_error": round(p.max_error(), 4)} for p in self.pairs],
                "limits": [{"name": lim.name, "bandwidth_GBps": lim.bandwidth, "links": [list(x) for x in lim.links]}
                           for lim in self.topology.limits],
                "checks": list(self.checks),
                "fit": {"median_error": round(statistics.median(errs), 4) if errs else 0.0,
                        "max_error": round(max(errs), 4) if errs else 0.0, "measurements": len(errs),
                        "poor": self.warning() is not None, "warning": self.warning()},
                "measurements": self.measurements}


def _round(x: float) -> float:
    """Three significant digits: the measurements are not more precise, and files stay stable."""
    if x <= 0 or not math.isfinite(x):
        return 0.0
    return float(f"{x:.3g}")


def _fit_pair(a: int, b: int, points: list[tuple[int, float]]) -> PairFit:
    xs = [float(s) for s, _ in points]
    ys = [t for _, t in points]
    if len(points) >= 2 and len(set(xs)) >= 2:
        # least squares of the relative errors (weights 1 / time^2): a 4 KiB time counts as
        # much as a 4 MiB one, so the latency is fitted where it shows
        w = [1.0 / (y * y) if y > 0 else 0.0 for y in ys]
        sw = sum(w)
        mx = sum(wi * x for wi, x in zip(w, xs)) / sw
        my = sum(wi * y for wi, y in zip(w, ys)) / sw
        sxx = sum(wi * (x - mx) ** 2 for wi, x in zip(w, xs))
        slope = sum(wi * (x - mx) * (y - my) for wi, x, y in zip(w, xs, ys)) / sxx if sxx > 0 else 0.0
        intercept = my - slope * mx
    else:
        slope, intercept = 0.0, 0.0
    if slope <= 0:  # noise flattened the curve: the largest message's rate, no latency
        big, t = max(points)
        slope, intercept = t / big, 0.0
    latency = max(0.0, intercept)
    return PairFit(a, b, _round(latency), _round(1.0 / (slope * 1e3)), tuple(points))


def _bad(what: str) -> InputError:
    return InputError(f"malformed probe measurement: {what}")


def _time(value: Any, what: str) -> float:
    """A measured time: a positive, finite number of microseconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise _bad(f"{what}: expected a positive number of microseconds, got {validate.show(value)}")
    return float(value)


def _rank(value: Any, n: int, what: str) -> int:
    if type(value) is not int or not 0 <= value < n:
        raise _bad(f"{what}: expected a rank in 0..{n - 1}, got {validate.show(value)}")
    return value


def _key(text: Any, what: str, least: int, most: int) -> int:
    """A whole number written as a JSON key ("4096", "3")."""
    if not isinstance(text, str) or not re.fullmatch(r"\d{1,20}", text) or not least <= int(text) <= most:
        raise _bad(f"{what}: expected a whole number in {least}..{most}, got {validate.show(text)}")
    return int(text)


def checked(measurements: Any) -> dict[str, Any]:
    """The measurements with every field checked (InputError naming the first one wrong) and
    put in the shapes ``fit`` uses: a file from ``--measurements`` may have been edited or
    damaged, and ``fit`` runs on what it holds."""
    if not isinstance(measurements, dict) or measurements.get("format") != "ccl-probe":
        raise InputError("not a probe measurement (expected format 'ccl-probe')")
    m = measurements
    n = m.get("n_ranks")
    if type(n) is not int or n < 2:
        raise _bad(f"n_ranks: expected a whole number of at least 2, got {validate.show(n)}")
    limits.RANKS.check(n, "probe measurement n_ranks")
    sizes = m.get("sizes")
    if not isinstance(sizes, list) or not sizes or any(type(s) is not int or not 1 <= s <= MAX_SIZE for s in sizes):
        raise _bad(f"sizes: expected a list of sizes in bytes (1..{MAX_SIZE}), got {validate.show(sizes)}")
    raw = m.get("pairs")
    if not isinstance(raw, dict):
        raise _bad(f"pairs: expected an object of times per pair of ranks, got {validate.show(raw)}")
    if len(raw) < n * (n - 1) // 2:  # every pair is needed: counted before any is read
        raise _bad(f"pairs: {n} ranks need times for {n * (n - 1) // 2} pairs, the file has {len(raw)}")
    pairs: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for a in range(n):
        for b in range(a + 1, n):
            row = raw.get(f"{a},{b}")
            if not isinstance(row, dict) or not row:
                raise _bad(f"no times for ranks {a} and {b} (pairs[\"{a},{b}\"])")
            pairs[(a, b)] = sorted((_key(s, f"pairs[\"{a},{b}\"] size", 1, MAX_SIZE),
                                    _time(t, f"pairs[\"{a},{b}\"][{validate.show(s)}]")) for s, t in row.items())
    fans = {}
    for label in ("fan_out", "fan_in"):
        table = m.get(label) or {}
        if not isinstance(table, dict):
            raise _bad(f"{label}: expected an object of times per rank, got {validate.show(table)}")
        fans[label] = sorted((_key(r, f"{label} rank", 0, n - 1), _time(us, f"{label}[{validate.show(r)}]"))
                             for r, us in table.items())
    concurrent = []
    rows = m.get("concurrent") or []
    if not isinstance(rows, list):
        raise _bad(f"concurrent: expected a list, got {validate.show(rows)}")
    for k, row in enumerate(rows):
        if not isinstance(row, dict):
            raise _bad(f"concurrent[{k}]: expected an object, got {validate.show(row)}")
        links = []
        for side in ("first", "second"):
            pair = row.get(side)
            if not isinstance(pair, list) or len(pair) != 2:
                raise _bad(f"concurrent[{k}].{side}: expected two ranks, got {validate.show(pair)}")
            i, j = (_rank(x, n, f"concurrent[{k}].{side}") for x in pair)
            if i == j:
                raise _bad(f"concurrent[{k}].{side}: a transfer between two different ranks, got {i} and {j}")
            links.append((i, j))
        times = [row.get("first_us"), row.get("second_us")]
        if not all(times):  # not measured: skipped, as measure() leaves it
            continue
        concurrent.append((links[0], links[1], _time(times[0], f"concurrent[{k}].first_us"),
                           _time(times[1], f"concurrent[{k}].second_us")))
    hosts = m.get("hosts") or ["?"] * n
    if not isinstance(hosts, list) or len(hosts) != n or not all(isinstance(h, str) for h in hosts):
        raise _bad(f"hosts: expected a list of {n} host names, got {validate.show(hosts)}")
    return {"n": n, "sizes": sizes, "pairs": pairs, "fan_out": fans["fan_out"], "fan_in": fans["fan_in"],
            "concurrent": concurrent, "hosts": hosts}


def fit(measurements: dict[str, Any], name: str = "probed") -> Probed:
    """The topology the measurements describe (module docstring); InputError naming the field
    when they are malformed (``checked``), or when ``name`` cannot name a description."""
    check_identifier(name, "--name")
    data = checked(measurements)
    n, sizes, hosts = data["n"], data["sizes"], data["hosts"]
    largest = max(sizes)
    fits: dict[tuple[int, int], PairFit] = {}
    for (a, b), points in data["pairs"].items():
        fits[(a, b)] = _fit_pair(a, b, points)

    def pair(a: int, b: int) -> PairFit:
        return fits[(min(a, b), max(a, b))]

    links = [Link(a, b, pair(a, b).bandwidth_gbps, pair(a, b).latency_us) for a in range(n) for b in range(n) if a != b]
    limits: list[SharedLimit] = []
    checks: list[dict[str, Any]] = []

    def check(what: str, measured: float, predicted: float) -> None:
        checks.append({"what": what, "measured_us": round(measured, 3), "predicted_us": round(predicted, 3),
                       "error": round(abs(predicted - measured) / measured, 4) if measured > 0 else 0.0})

    for (a, b), f in sorted(fits.items()):
        for s, t in f.points:
            check(f"{a} <-> {b}, {format_size(s)}", t, f.predict(s))

    # fan-out and fan-in: (n - 1) messages of the largest size at once
    for label, table, direction in (("out", data["fan_out"], 1), ("in", data["fan_in"], -1)):
        for r, us in table:
            others = [q for q in range(n) if q != r]
            independent = sum(pair(r, q).bandwidth_gbps for q in others)
            reached = (n - 1) * largest / (us * 1e3) if us > 0 else independent
            fastest = max(pair(r, q).bandwidth_gbps for q in others)
            cap = None
            if reached < SHARED * independent:
                cap = _round(max(reached, fastest))
                pairs_ = [(r, q) if direction == 1 else (q, r) for q in others]
                limits.append(SharedLimit(f"rank{r}-{label}", tuple(pairs_), cap))
            lat = max(pair(r, q).latency_us for q in others)
            predicted = lat + (n - 1) * largest / (1e3 * (min(cap, independent) if cap else independent))
            check(f"rank {r} fan-{label}, {n - 1} x {format_size(largest)}", us, predicted)

    # disjoint pairs at once: union-find over the directed links that slow each other
    parent: dict[tuple[int, int], tuple[int, int]] = {}

    def find(x: tuple[int, int]) -> tuple[int, int]:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    reached_by: dict[tuple[int, int], list[float]] = {}
    tests = []
    for (i, j), (k, m), t1, t2 in data["concurrent"]:
        alone1 = pair(i, j).predict(largest) + pair(i, j).latency_us  # the one-byte acknowledgement
        alone2 = pair(k, m).predict(largest) + pair(k, m).latency_us
        shared = alone1 / t1 < SHARED and alone2 / t2 < SHARED
        tests.append(((i, j), (k, m), t1, t2, alone1, alone2, shared))
        if shared:
            root_a, root_b = find((i, j)), find((k, m))
            parent[root_a] = root_b
            together = largest / (t1 * 1e3) + largest / (t2 * 1e3)
            reached_by.setdefault((i, j), []).append(together)
            reached_by.setdefault((k, m), []).append(together)
    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for link in sorted(reached_by):
        groups.setdefault(find(link), []).append(link)
    group_cap: dict[tuple[int, int], float] = {}
    for number, members in enumerate(sorted(groups.values(), key=min)):
        cap = _round(statistics.median([x for link in members for x in reached_by[link]]))
        cap = max(cap, max(pair(*link).bandwidth_gbps for link in members))
        limits.append(SharedLimit(f"shared{number}", tuple(members), _round(cap)))
        for link in members:
            group_cap[link] = cap
    for (i, j), (k, m), t1, t2, alone1, alone2, shared in tests:
        for link, t, alone in (((i, j), t1, alone1), ((k, m), t2, alone2)):
            f = pair(*link)
            predicted = alone
            if shared and link in group_cap:  # two transfers share the group's limit
                rate = min(f.bandwidth_gbps, group_cap[link] / 2)
                predicted = 2 * f.latency_us + largest / (rate * 1e3)
            check(f"{link[0]} -> {link[1]} with {(k, m) if link == (i, j) else (i, j)} at once", t, predicted)

    node_ids: dict[str, int] = {}
    node_of = tuple(node_ids.setdefault(h, len(node_ids)) for h in hosts)
    if len(node_ids) == 1:
        node_of = ()
    topo = Topology(f"{name}{n}", n, tuple(links), (), tuple(limits), node_of)
    return Probed(topo, tuple(fits[k] for k in sorted(fits)), tuple(checks), measurements)


def to_ccl(probed: Probed, ident: str = "probed") -> str:
    """A description file: the measurements as comments, then the fitted topology."""
    m = probed.measurements
    errs = probed.errors()
    # every comment line is one line: what the measurements file says is escaped
    lines = [f"# Measured by `ccl probe` on {probed.topology.n_ranks} ranks ({shown(m.get('backend', '?'))}), "
             f"{len(set(m.get('hosts', [])))} host(s); sizes "
             + ", ".join(format_size(s) for s in m.get("sizes", [])) + f", best of {shown(m.get('repeat', '?'))}.",
             "# pair: latency, bandwidth (fit of time = latency + bytes / bandwidth; largest error)"]
    for p in probed.pairs:
        lines.append(f"#   {p.a} <-> {p.b}: {p.latency_us:g} us, {p.bandwidth_gbps:g} GB/s ({p.max_error():.1%})")
    for lim in probed.topology.limits:
        lines.append(f"# shared: {lim.name}: {lim.bandwidth:g} GB/s over {len(lim.links)} links")
    if errs:
        lines.append(f"# the model predicts the {len(errs)} measurements within {statistics.median(errs):.1%} "
                     f"(median), {max(errs):.1%} (largest)")
    warning = probed.warning()
    if warning:
        lines.append(f"# WARNING: {warning}")
    return "\n".join(lines) + "\n" + format_topology(probed.topology, ident)
