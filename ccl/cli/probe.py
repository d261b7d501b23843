"""``ccl probe``: measure the links of a live job and write the topology they fit (Blink class).

    torchrun --nproc-per-node 4 -m ccl.cli probe -o probed.ccl    # every rank of the job
    ccl probe --local 4 -o probed.ccl                              # 4 local gloo processes
    ccl probe --from probe.json -o probed.ccl                      # refit saved measurements
    ccl probe --nccl-tests ar.txt -t dgx-h100:1 -c allreduce -o cal.json   # fit the cost model
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from typing import Any

from backends.torch.launch import Call, run_jobs
from dsl.printer import check_identifier

from ..compiler.calibrate import calibration_file, fit_machine, read_nccl_tests
from ..compiler.probe import fit, to_ccl
from ..compiler.stages import load_topology
from ..core.display import shown
from ..core.errors import InputError
from ..core.limits import LOCAL_PROCESSES, read_input_json
from ..core.serialize import write_all
from ..core.units import format_size, parse_sizes
from .common import command, emit, positive_int, seconds_arg
from .outputs import declare
from .progress import Progress

MAX_REPEAT = 1000  # timed repetitions of one measurement (every pair of ranks, every size)


def _check_probe_memory(n: int, sizes: list[int]) -> None:
    """Refuse sizes whose buffers cannot fit in this machine's memory before any process starts
    (each rank holds a buffer per size and a landing buffer of the largest per peer)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX system
        return
    need = n * (sum(sizes) + n * max(sizes))
    if need > total:
        raise InputError(f"--sizes up to {format_size(max(sizes))} on {n} local processes need about "
                         f"{need / 2**30:.3g} GiB of memory; this machine has {total / 2**30:.3g} GiB")


def _measure_local(n: int, sizes: list[int], repeat: int, concurrent: bool, timeout: float) -> dict[str, Any]:
    [rows] = run_jobs(n, [Call("backends.torch.probe:measure_job", (tuple(sizes), repeat, concurrent))],
                      timeout=timeout)
    return rows[0]


def _measure_here(args: argparse.Namespace, sizes: list[int]) -> dict[str, Any] | None:
    """Under torchrun: every rank measures; rank 0 gets the result, the others None."""
    # torch is imported where it is used: `import ccl.cli` must not load it
    import torch.distributed as dist

    from backends.torch.probe import measure  # imports torch

    started = False
    if not dist.is_initialized():
        if args.backend == "nccl":
            import torch

            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=args.timeout))
        started = True
    try:
        data = measure(None, sizes=tuple(sizes), repeat=args.repeat, concurrent=not args.no_concurrent)
        return data if dist.get_rank() == 0 else None
    finally:
        if started:
            dist.destroy_process_group()


def cmd_calibrate(args: argparse.Namespace) -> int:
    """--nccl-tests: fit the cost model's parameters to the runs (``ccl.compiler.calibrate``)."""
    if not args.topology or not args.collective:
        raise InputError("--nccl-tests needs -t TOPOLOGY (the machine the runs were on) and -c COLLECTIVE")
    if args.source is not None or args.local is not None or args.measurements:
        raise InputError("--nccl-tests fits the cost model to nccl-tests runs: it takes no --from, --local or "
                         "--measurements")
    topology = load_topology(args.topology)
    sweeps = read_nccl_tests(args.nccl_tests, topology, args.collective)
    with Progress() as progress:
        progress(f"probe: fitting the cost model to {sum(len(s.runs) for s in sweeps)} runs")
        fitted, report = fit_machine(sweeps, topology, args.collective)
    if args.output:
        body = json.dumps(calibration_file(fitted, report), indent=2) + "\n"
        write_all([(args.output, lambda fh: fh.write(body))])
        report["output"] = args.output
    before, after = report["error"]["before"], report["error"]["after"]
    prior = "the shipped calibration" if report["prior"] == "shipped" else f"{shown(report['prior'])} (CCL_CALIBRATION)"
    lines = [f"fitted the cost model to {len(report['rows'])} {args.collective} runs on {shown(topology.name)} "
             f"({topology.n_ranks} ranks, {report['generation']}, {report['runtime']}); prior: {prior}",
             f"  {'size':>8} {'measured us':>12} {'before us':>10} {'after us':>10}  file:line"]
    for r in report["rows"]:
        lines.append(f"  {format_size(r['size_bytes']):>8} {r['measured_us']:>12.4g} {r['before_us']:>10.4g} "
                     f"{r['after_us']:>10.4g}  {shown(r['file'])}:{r['line']}")
    lines.append(f"  error: median {before['median']:.1%} -> {after['median']:.1%}, worst {before['worst']:.1%} -> "
                 f"{after['worst']:.1%}")
    moved = [f"{n} {p['before']:.4g} -> {p['after']:.4g}" for n, p in report["parameters"].items()
             if abs(p["after"] - p["before"]) > 0.01 * abs(p["before"])]
    lines.append(f"  moved: {', '.join(moved)}" if moved else "  moved: none (the runs agree with the prior)")
    if args.output:
        lines.append(f"wrote {shown(args.output)} (use it: CCL_CALIBRATION={shown(args.output)} ccl compare ...)")
    emit(args, report, "\n".join(lines))
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    if args.nccl_tests:
        return cmd_calibrate(args)
    if args.topology or args.collective:
        raise InputError("-t and -c name the machine and collective of --nccl-tests runs; give --nccl-tests FILE")
    check_identifier(args.name, "--name")  # before anything is measured: the name goes into the file
    if args.repeat > MAX_REPEAT:
        raise InputError(f"--repeat {args.repeat}: at most {MAX_REPEAT} timed repetitions per measurement")
    sizes = parse_sizes(args.sizes)
    if len(sizes) < 2:
        raise InputError("--sizes needs at least two sizes to fit a latency and a bandwidth")
    if args.source is not None:
        data = read_input_json(args.source)
    elif args.local is not None:
        if args.local < 2:
            raise InputError(f"--local needs at least 2 processes, got {args.local}")

        LOCAL_PROCESSES.check(args.local, f"--local {args.local} asks for too many processes")
        _check_probe_memory(args.local, sizes)
        with Progress() as progress:
            progress(f"probe: timing {args.local} local gloo processes (pairs, fan-out and fan-in, disjoint "
                     "pairs at once)")
            data = _measure_local(args.local, sizes, args.repeat, not args.no_concurrent, args.timeout)
    elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        data = _measure_here(args, sizes)
        if data is None:
            return 0  # rank 0 reports
    else:
        raise InputError("run under torchrun (torchrun --nproc-per-node N -m ccl.cli probe ...), or give --local N "
                         "or --from FILE")
    probed = fit(data, args.name)
    text = to_ccl(probed, args.name)
    measured = json.dumps(data, indent=1, sort_keys=True) + "\n"
    write_all([(path, lambda fh, body=body: fh.write(body))  # both or neither
               for path, body in ((args.measurements, measured), (args.output, text)) if path])
    result = probed.to_json()
    topo = probed.topology
    lines = [f"probed {topo.n_ranks} ranks on {max(1, topo.n_nodes)} host(s) "
             f"({shown(data.get('backend', '?'))}; sizes {', '.join(format_size(s) for s in data['sizes'])}, "
             f"best of {shown(data.get('repeat'))})",
             f"  {'pair':<10} {'latency':>10} {'bandwidth':>12} {'fit error':>10}"]
    for p in probed.pairs:
        lines.append(f"  {f'{p.a} <-> {p.b}':<10} {p.latency_us:>7g} us {p.bandwidth_gbps:>7g} GB/s "
                     f"{p.max_error():>10.1%}")
    for lim in topo.limits:
        lines.append(f"  shared: {lim.name}: {lim.bandwidth:g} GB/s over {len(lim.links)} link(s)")
    if not topo.limits:
        lines.append("  shared: none found (every transfer ran as fast with the others as alone)")
    fit_ = result["fit"]
    lines.append(f"  the model predicts the {fit_['measurements']} measurements within {fit_['median_error']:.1%} "
                 f"(median), {fit_['max_error']:.1%} (largest)")
    worst = sorted(probed.checks, key=lambda c: -c["error"])[:3]
    for c in worst:
        lines.append(f"    {shown(c['what'])}: measured {c['measured_us']:g} us, model {c['predicted_us']:g} us")
    if args.output:
        lines.append(f"wrote {shown(args.output)} (ccl check {shown(args.output)}; ccl synthesize -t "
                     f"{shown(args.output)} ...)")
        result["output"] = args.output
    warning = probed.warning()
    if warning:  # on stderr too, so that it is seen with --json or the report piped away
        print(f"ccl: warning: {warning}", file=sys.stderr)
    emit(args, result, "\n".join(lines))
    return 0


def register(sub: Any) -> None:
    p = command(sub, "probe", "measure the links of a live job and write the topology they fit (Blink)", cmd_probe)
    p.description = ("measure every pair of ranks at a few sizes, every rank sending to and receiving from all "
                     "others at once, and disjoint transfers at once; fit latency, bandwidth and shared "
                     "bottlenecks; write a .ccl topology. Run it on every rank under torchrun "
                     "(torchrun --nproc-per-node N -m ccl.cli probe -o probed.ccl), or on local processes "
                     "with --local N. With --nccl-tests FILE... -t TOPOLOGY -c COLLECTIVE: fit the cost model's "
                     "parameters to nccl-tests runs of that machine and write the calibration (-o), which "
                     "CCL_CALIBRATION=FILE makes every command use")
    p.add_argument("-o", "--output", help="the .ccl topology to write (with --nccl-tests: the calibration JSON)")
    p.add_argument("--nccl-tests", nargs="+", metavar="FILE",
                   help="fit the cost model's parameters to these nccl-tests outputs instead (with -t and -c)")
    p.add_argument("--topology", "-t", help="with --nccl-tests: the machine the runs were on (a spec or file)")
    p.add_argument("--collective", "-c", help="with --nccl-tests: the collective the runs timed")
    p.add_argument("--name", default="probed", help="the topology's name in the file (default probed)")
    p.add_argument("--local", type=positive_int, metavar="N", help="measure N local gloo processes instead")
    p.add_argument("--from", dest="source", metavar="FILE", help="fit measurements saved with --measurements")
    p.add_argument("--measurements", metavar="FILE", help="also write the raw measurements (JSON)")
    p.add_argument("--sizes", default="4KiB,256KiB,4MiB", help="message sizes to time (default 4KiB,256KiB,4MiB)")
    p.add_argument("--repeat", type=positive_int, default=5, help="timed repetitions per measurement (the least time counts; default 5)")
    p.add_argument("--no-concurrent", action="store_true", help="skip the disjoint-transfers tests")
    p.add_argument("--backend", default="gloo", choices=("gloo", "nccl"),
                   help="process-group backend under torchrun when none is initialized (default gloo)")
    p.add_argument("--timeout", type=seconds_arg, default=120.0, help="seconds any wait may take (default 120)")
    declare(p, inputs=("source", "nccl_tests", "topology"), files=("output", "measurements"))
