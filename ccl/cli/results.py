"""How synthesis results read on the command line: a schedule's or a schedule set's summary, the
tuner's progress line, and the exit after Ctrl-C (with what was saved)."""

from __future__ import annotations

import sys
from typing import Any

from ..core.errors import EXIT_INTERRUPTED
from ..core.report import format_us
from ..core.units import format_size
from .progress import Progress


def interrupted_exit(output: str | None, what: str, missing: str = "no -o given") -> int:
    """After Ctrl-C stopped a solver that had a result: one line on stderr saying what was kept,
    and exit code 130."""
    kept = f"written to {output}" if output else f"not written: {missing}"
    print(f"ccl: interrupted: the best {what} found so far was verified and {kept}", file=sys.stderr)
    return EXIT_INTERRUPTED


def tuner_progress() -> Any:
    """The tuner's progress on stderr: a bar with the time left on a terminal, lines in a pipe,
    nothing with --quiet."""
    return Progress()


def set_summary(result: Any, where: str) -> str:
    """The readable report of a tuned schedule set: which schedule serves which sizes (NCCL's
    own algorithm for a native entry), the table per swept size (time, distance to the bound,
    against NCCL's pick: exactly 1.0 where NCCL itself won, the best template) and what was
    tried."""
    sset = result.schedule_set
    how = "from the cache, " if result.cached else ""
    status = "ok" if sset.complete else "incomplete"
    target = f" for {sset.target}" if sset.target else ""
    lines = [f"{status}: {sset.collective.kind} on {sset.topology.name} ({sset.topology.n_ranks} ranks){target}: "
             f"{_count(sset)} by size, verified, {how}{result.seconds:.1f} s{where}"]
    for e in sset.entries:  # a native entry: NCCL's own algorithm serves its sizes
        what = e.served_by if e.is_native else f"{e.label:<22} {e.protocol or ''}"
        lines.append(f"  {e.range_text():<26} {what}".rstrip())
    ref_key = next((k for k in ("nccl_us", "nccl-ring_us", "nccl-tree_us", "nccl-p2p_us") if sset.table and k in sset.table[0]),
                   None)
    ref = ref_key[:-3] if ref_key else ""
    lines.append(f"  {'size':>8}  {'winner':<22}{'time':>11}{'/bound':>8}  {('vs ' + ref) if ref else '':<16}"
                 f"{'vs best template':<18}")
    for row in sset.table:
        versus = ""
        if ref_key == "nccl_us" and row["winner"] == "nccl":  # NCCL itself serves this size: exactly 1.0
            versus = "1.00x (is NCCL)"
        elif ref_key and row.get(ref_key):
            x = row[ref_key] / row["time_us"]
            versus = f"{x:.2f}x faster" if x >= 1 else f"{1 / x:.2f}x slower"
        tmpl = ""
        if row.get("best_template_us"):
            x = row["best_template_us"] / row["time_us"]
            tmpl = "is the best" if row["best_template"] == row["winner"] else f"{x:.2f}x faster"
        ratio = "-" if row.get("bound_ratio") is None else f"{row['bound_ratio']:.3f}"
        lines.append(f"  {format_size(row['size']):>8}  {row['winner']:<22}{format_us(row['time_us']):>11}"
                     f"{ratio:>8}  {versus:<16}{tmpl:<18}")
    tried = [c for c in sset.candidates if "times_us" in c]
    dup = [c for c in sset.candidates if "same_as" in c]
    failed = [c for c in sset.candidates if "error" in c]
    skipped = [c for c in failed if c["error"].startswith("skipped")]
    stopped = [c for c in failed if c["error"].startswith("stopped")]
    text = f"  tried {len(tried)} distinct schedule{'s' if len(tried) != 1 else ''}"
    if dup:
        text += f" ({len(dup)} duplicate{'s' if len(dup) != 1 else ''} dropped)"
    n_failed = len(failed) - len(skipped) - len(stopped)
    if n_failed:
        text += f"; {n_failed} solver{'s' if n_failed != 1 else ''} not applicable"
    if skipped:
        text += f"; {len(skipped)} skipped when the work budget ran out: " + ", ".join(c["label"] for c in skipped)
    timings = getattr(result, "timings", {}) or {}
    if timings:
        label, seconds = max(timings.items(), key=lambda kv: (kv[1], kv[0]))
        text += f"; slowest synthesis {label} {seconds:.1f} s"
    lines.append(text)
    for c in sset.candidates:
        if c.get("unfit"):
            lines.append(f"  not chosen: {c['label']} does not export for {sset.target}: {c['unfit']}")
    if not sset.complete:
        cut = [c["label"] for c in sset.candidates if c.get("cut_by_clock")]
        lines.append(f"  incomplete: the wall-clock limit stopped or cut {', '.join(cut) or 'the run'}; the set depends "
                     "on this machine's speed and was not cached (raise --deadline or drop it)")
    return "\n".join(lines)


def _count(sset: Any) -> str:
    """"3 schedules", or "2 schedules and 1 range left to NCCL" when some entries are native."""
    ours, native = len(sset.schedules), len(sset.entries) - len(sset.schedules)
    text = f"{ours} schedule{'s' if ours != 1 else ''}"
    return text if not native else f"{text} and {native} range{'s' if native != 1 else ''} left to NCCL"


def summary(result: Any, label: str, where: str) -> str:
    """The readable lines for one synthesis: status, size of the schedule, and what the solver
    reported (gap at a time limit, a template chosen instead, simulated time against the bound)."""
    alg = result.algorithm
    rounds = f"{alg.total_rounds} rounds, " if alg.rounds is not None else ""
    text = (f"{result.status}: {label}: {alg.collective} on {alg.topology.name}\n"
            f"  solver {alg.solver}, {alg.n_steps} steps, {rounds}{len(alg.transfers)} transfers, "
            f"verified, {result.seconds:.3f} s{where}")
    details = result.details
    if result.gap is not None:
        text += f"\n  time limit reached: gap {100 * result.gap:.1f}% to the solver's own bound"
    if details.get("schedule", "MILP pipeline") != "MILP pipeline":
        text += f"\n  schedule: the {details['schedule']}'s, which simulates faster than the MILP pipeline's"
    if "simulated_us" in details and "bound_us" in details:
        text += (f"\n  simulated {details['simulated_us']:.4g} us at {details['size']} bytes, lower bound "
                 f"{details['bound_us']:.4g} us (ratio {details['simulated_us'] / details['bound_us']:.3f})")
    return text
