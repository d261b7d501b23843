"""The command-line driver of generated scripts (``ccl emit torch``).

Generated scripts are: a header, ``SCHEDULE`` (plain data), ``runtime.py`` verbatim, this file
without the import block marked below, and a call of ``main(SCHEDULE)``. Run under torchrun:

    torchrun --nproc-per-node N prog.py --size 16MiB --check --repeat 10

It runs the schedule on random data, checks it against torch.distributed's own collective
(--check), and prints the time, algbw and busbw of every iteration (nccl-tests definitions:
algbw = bytes / time, busbw = algbw x the collective's factor) and their median; --compare
also times torch's own collective in alternation with the schedule.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import sys

import torch
import torch.distributed as dist

# --- script imports: generated scripts drop this block (the runtime defines these names)
from .harness import (
    base_slots,
    bus_factor,
    compare,
    in_place_tensors,
    make_tensors,
    native,
    reference,
    timed,
    unit_for_size,
)
from .runtime import REDUCE_OPS, ScheduleError, ScheduleRunner, first_line, reduce_op_name

# --- end script imports

SIZE_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_BACKEND = 1, 2, 6


def parse_size(text: str) -> int:
    """'16MiB' -> 16777216; a bare number is bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", text)
    if not match or (match.group(2) or "B") not in SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"cannot read size {text!r} (examples: 4096, 64KiB, 16MiB, 1GB)")
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2) or "B"])


def parse_args(spec: dict, argv: list[str] | None) -> argparse.Namespace:
    root = f", root {spec['root']}" if spec.get("root") is not None else ""
    parser = argparse.ArgumentParser(
        description=f"{spec['name']}: {spec['collective']} on {spec['n_ranks']} ranks{root} "
                    f"(run with torchrun --nproc-per-node {spec['n_ranks']})")
    parser.add_argument("--size", type=parse_size, default=parse_size("1MiB"),
                        help="bytes, counted as nccl-tests does (default 1MiB)")
    parser.add_argument("--dtype", default="float32", help="a torch dtype name (default float32)")
    parser.add_argument("--op", default="sum", help=f"reduction: {', '.join(REDUCE_OPS)} (default sum)")
    parser.add_argument("--check", action="store_true", help="compare with torch's own collective")
    parser.add_argument("--compare", action="store_true", help="also time torch's own collective")
    parser.add_argument("--repeat", type=int, default=10, help="timed iterations (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first (default 2)")
    parser.add_argument("--in-place", action="store_true", help="run in place (output aliases input)")
    parser.add_argument("--backend", default=None, help="gloo or nccl (default: nccl with GPUs, else gloo)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds any wait for a peer may take before this rank exits with code 6 (a peer "
                             "died or stalled; default 300)")
    parser.add_argument("--json", action="store_true", help="print one JSON summary line on rank 0")
    args = parser.parse_args(argv)
    if args.repeat < 0 or args.warmup < 0:
        parser.error("--repeat and --warmup must not be negative")
    if not 0 < args.timeout <= 10**7:
        parser.error(f"--timeout must be a number of seconds above 0 and at most 1e7, got {args.timeout:g}")
    return args


def main(spec: dict, argv: list[str] | None = None) -> int:
    code = _main(spec, argv)
    _QUIET_EXIT[0] = code
    return code


def _main(spec: dict, argv: list[str] | None) -> int:
    args = parse_args(spec, argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print(f"error: run this script with torchrun --nproc-per-node {spec['n_ranks']} "
              f"{os.path.basename(sys.argv[0])} ...", file=sys.stderr)
        return EXIT_BAD_INPUT
    dtype = getattr(torch, args.dtype, None)
    if not isinstance(dtype, torch.dtype):
        print(f"error: unknown dtype {args.dtype!r}", file=sys.stderr)
        return EXIT_BAD_INPUT
    backend = args.backend or ("nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo")
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    rank = int(os.environ["RANK"])
    _stop_on_sigterm()
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    except (RuntimeError, ValueError, _Stopped) as exc:
        _error(rank, f"could not join the process group: {first_line(exc)}")
        return EXIT_BACKEND
    try:
        return _run(spec, args, dtype, device, backend)
    except ScheduleError as exc:
        _error(rank, exc.message)
        return EXIT_BAD_INPUT if exc.kind == "input" else EXIT_BACKEND
    except RuntimeError as exc:  # torch's own collectives (check, timing): a timeout or a lost peer
        _error(rank, f"{type(exc).__name__}: {first_line(exc)} (a peer died or stalled, or --timeout "
                     f"{args.timeout:g} s is too short)")
        return EXIT_BACKEND
    except _Stopped:
        _error(rank, "stopped by SIGTERM (torchrun stops every rank when one fails)")
        return EXIT_BACKEND
    finally:
        dist.destroy_process_group()


class _Stopped(Exception):
    """SIGTERM arrived (torchrun stops the other ranks this way when one fails)."""

    def __str__(self) -> str:
        return "stopped by SIGTERM"


_QUIET_EXIT: list[int | None] = [None]  # once set, SIGTERM ends the rank with this code, quietly


def _stop_on_sigterm() -> None:
    """Turn SIGTERM into ``_Stopped`` so the rank says why it ends and leaves the group. Once
    the rank has said why it ends (``_error``) or is done (``main``), a SIGTERM (torchrun
    stopping the job, maybe while the group is torn down or the interpreter shuts down) ends the
    process at once with the code decided, with no traceback from whatever it interrupts."""
    import signal  # here, not at the top: the scripts this file is copied into keep a fixed set of imports

    def stop(_signum: int, _frame: object) -> None:
        code = _QUIET_EXIT[0]
        if code is None:
            raise _Stopped()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)

    try:
        signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: keep the default
        pass


def _error(rank: int, message: str) -> None:
    """One line on stderr: ``rank R: error: ...``."""
    prefix = f"rank {rank}: "
    _QUIET_EXIT[0] = EXIT_BACKEND
    print(f"{prefix}error: {message[len(prefix):] if message.startswith(prefix) else message}", file=sys.stderr,
          flush=True)


def _run(spec: dict, args: argparse.Namespace, dtype: torch.dtype, device: torch.device, backend: str) -> int:
    op = reduce_op_name(args.op)
    runner = ScheduleRunner(spec, timeout=args.timeout)
    rank, n = runner.rank, runner.world
    unit = unit_for_size(spec, args.size, dtype)
    size = unit * base_slots(spec) * torch.empty((), dtype=dtype).element_size()
    data, blank = make_tensors(spec, rank, unit, dtype, device)

    def fresh() -> tuple[torch.Tensor, torch.Tensor]:
        return in_place_tensors(spec, rank, unit, data) if args.in_place else (data.clone(), blank.clone())

    lead = rank == 0 and not args.json
    if lead:
        root = f" root {spec['root']}" if spec.get("root") is not None else ""
        print(f"# {spec['name']}: {spec['collective']}{root} on {n} ranks (solver {spec.get('solver') or '-'}, "
              f"topology {spec.get('topology', '-')}), {backend}, {args.dtype}, {op}")
        print(f"# size {size} B ({unit} elements per part), {'in place' if args.in_place else 'out of place'}")
    summary: dict = {"name": spec["name"], "collective": spec["collective"], "ranks": n, "size_bytes": size,
                     "dtype": args.dtype, "op": op, "in_place": args.in_place, "correct": None}
    status = 0
    if args.check:
        inp, out = fresh()
        runner.run(inp, out, op)
        want = torch.full_like(blank, 7) if blank.numel() else blank.clone()
        reference(spec, data.clone(), want, op)
        ok, err = compare(out.cpu(), want.cpu(), n)
        flags = torch.tensor([1.0 if ok else 0.0, err], dtype=torch.float64, device=device)
        dist.all_reduce(flags[:1], op=dist.ReduceOp.MIN)
        dist.all_reduce(flags[1:], op=dist.ReduceOp.MAX)
        ok, err = bool(flags[0] > 0), float(flags[1])
        summary.update(correct=ok, max_error=err)
        if lead:
            print(f"check: {'ok' if ok else 'WRONG'} (largest difference from torch's {spec['collective']}: {err:.3g})")
        status = 0 if ok else EXIT_CHECK_FAILED
    factor = bus_factor(spec["collective"], n)
    ours, theirs = [], []
    if lead and args.repeat:
        head = f"{'iter':>6} {'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}"
        print(head + (f" {'torch(us)':>12} {'ratio':>7}" if args.compare else ""))
    nin, nout = data.clone(), blank.clone()
    for it in range(args.warmup + args.repeat):
        inp, out = fresh()
        t = timed(lambda inp=inp, out=out: runner.run(inp, out, op))
        t_native = timed(lambda: native(spec, nin, nout, op)) if args.compare else 0.0
        both = torch.tensor([t, t_native], dtype=torch.float64, device=device)
        dist.all_reduce(both, op=dist.ReduceOp.MAX)  # an iteration takes as long as its slowest rank
        t, t_native = float(both[0]), float(both[1])
        if it < args.warmup:
            continue
        ours.append(t)
        theirs.append(t_native)
        if lead:
            algbw = size / t / 1e9
            row = f"{it - args.warmup:>6} {t * 1e6:>12.1f} {algbw:>12.3f} {algbw * factor:>12.3f}"
            print(row + (f" {t_native * 1e6:>12.1f} {t / t_native:>7.2f}" if args.compare else ""))
    if ours:
        med = statistics.median(ours)
        summary.update(seconds=med, algbw_GBps=size / med / 1e9, busbw_GBps=size / med / 1e9 * factor)
        if args.compare:
            summary.update(native_seconds=statistics.median(theirs), ratio=med / statistics.median(theirs))
        if lead:
            algbw = size / med / 1e9
            row = f"{'median':>6} {med * 1e6:>12.1f} {algbw:>12.3f} {algbw * factor:>12.3f}"
            if args.compare:
                nmed = statistics.median(theirs)
                row += f" {nmed * 1e6:>12.1f} {med / nmed:>7.2f}"
            print(row)
    if rank == 0 and args.json:
        print(json.dumps(summary))
    return status
