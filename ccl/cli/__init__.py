"""The ``ccl`` command: a thin layer over ``ccl.compiler``.

One module per command group; each has ``register(subparsers)``. Every command prints a
readable report by default and one JSON object with ``--json``. Errors print one line on stderr
(and a JSON object on stdout with ``--json``) and exit with the code of their class: 0 ok,
1 internal error, 2 bad input, 3 infeasible, 4 verification failed, 5 time limit with no
schedule, 6 backend failure, 130 interrupted (Ctrl-C: the best result so far is saved when there
is one; a second Ctrl-C exits at once). Set CCL_DEBUG=1 to see tracebacks of internal errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from ..core import interrupt
from ..core.display import shown
from ..core.errors import (
    EXIT_INTERNAL,
    CclError,
    InfeasibleError,
    InputError,
    Interrupted,
    SolverTimeout,
)
from . import (
    bounds,
    cache,
    check,
    compare,
    completion,
    emit,
    importer,
    pareto,
    place,
    probe,
    run,
    simulate,
    solvers,
    synthesize,
    topology,
    verify,
)
from .common import Parser

# Command groups in the order `ccl --help` lists them.
COMMANDS = (topology, solvers, check, synthesize, verify, simulate, bounds, compare, emit, importer, run, pareto,
            place, probe, cache, completion)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="ccl", description="Collective-communication synthesis compiler.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for module in COMMANDS:
        module.register(sub)
    # `ccl completion` describes the whole parser it belongs to
    sub.choices["completion"].set_defaults(root_parser=parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    code, command = _main(argv)
    if argv is None and (code == interrupt.EXIT_INTERRUPTED or command in QUICK_EXIT):
        # the program itself (not a caller in-process): after Ctrl-C, or once a command that
        # starts no process and leaves no file open has ended, end now rather than wait for the
        # interpreter to free a large model (seconds for a big MILP; 2 s after a 128-GPU
        # synthesis with its half a million transfers)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


QUICK_EXIT = ("synthesize", "verify", "simulate", "compare", "bounds")  # commands main may end at once


def _main(argv: Sequence[str] | None) -> tuple[int, str | None]:
    """The exit code and the command run (None when the arguments were refused first)."""
    for arg in sys.argv[1:] if argv is None else argv:
        if isinstance(arg, str) and "\x00" in arg:  # only a caller in-process can pass one
            print(f"ccl: {InputError(f'argument {arg!r} contains a NUL character (no file name or value can)').render()}",
                  file=sys.stderr)
            return InputError.exit_code, None
    args = build_parser().parse_args(argv)
    return _run(args), args.command


def _run(args: argparse.Namespace) -> int:
    try:
        with interrupt.handling():  # Ctrl-C reaches solvers blocked in native code (ccl.core.interrupt)
            return args.func(args)
    except CclError as exc:
        print(f"ccl: {exc.render()}", file=sys.stderr)
        if getattr(args, "json", False):
            status = "infeasible" if isinstance(exc, InfeasibleError) else (
                "timeout" if isinstance(exc, SolverTimeout) else
                "interrupted" if isinstance(exc, Interrupted) else "error")
            print(json.dumps({"status": status, "ok": False, **exc.to_json()}, indent=2))
        return exc.exit_code
    except BrokenPipeError:  # the reader went away (e.g. `ccl topology show T | head`): not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:  # Ctrl-C outside a solver's cooperative region: nothing to save
        print("ccl: interrupted", file=sys.stderr)
        if getattr(args, "json", False):
            print(json.dumps({"status": "interrupted", "ok": False, **Interrupted().to_json()}, indent=2))
        return interrupt.EXIT_INTERRUPTED
    except MemoryError:  # the input or the work asked for more memory than the machine gives
        print("ccl: out of memory (the input or the options ask for more memory than is available; "
              "try a smaller input or a larger memory limit)", file=sys.stderr)
        return EXIT_INTERNAL
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback for users
        if os.environ.get("CCL_DEBUG"):
            raise
        print(f"ccl: internal error: {type(exc).__name__}: {shown(exc)} (set CCL_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL
