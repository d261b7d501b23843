"""The project's one error hierarchy.

Every failure a user can cause or meet is a ``CclError`` subclass; each class carries the
process exit code the CLI uses for it. Exceptions of dependencies (lark, z3, pulp, torch) are
translated into these at the package boundary and never reach a user as a traceback.

Exit codes: 0 ok, 1 internal error, 2 bad input (file, DSL, topology, collective, options),
3 infeasible, 4 verification failed, 5 time limit reached with no schedule, 6 backend failure,
130 interrupted (Ctrl-C; the best result found so far is saved when there is one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .display import shown

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_VERIFICATION = 4
EXIT_TIMEOUT = 5
EXIT_BACKEND = 6
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a process ended by Ctrl-C


@dataclass(frozen=True)
class Span:
    """A region of source text: 1-based line and column, end exclusive."""

    file: str
    line: int
    column: int
    end_line: int | None = None
    end_column: int | None = None

    def __str__(self) -> str:
        return f"{shown(self.file)}:{self.line}:{self.column}"


class CclError(Exception):
    """Base of every error the project raises on purpose."""

    exit_code: int = EXIT_INTERNAL
    kind: str = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def render(self) -> str:
        """The text the CLI prints on stderr (one line unless the error has source context).
        Whatever the message quotes from an input is escaped (``ccl.core.display.shown``): it
        stays on its line and prints as itself."""
        return f"{self.kind}: {shown(self.message)}"

    def to_json(self) -> dict[str, Any]:
        return {"error": type(self).__name__, "message": self.message, "exit_code": self.exit_code}


class InputError(CclError):
    """Bad input that is not DSL text: a missing or malformed file, a bad option value."""

    exit_code = EXIT_BAD_INPUT
    kind = "bad input"


class DslError(InputError):
    """An error in DSL source, located by a Span and rendered with the line and a caret."""

    kind = "error"

    def __init__(self, message: str, span: Span | None = None, source: str | None = None) -> None:
        super().__init__(message)
        self.span = span
        self.source = source

    def render(self) -> str:
        if self.span is None:
            return f"error: {shown(self.message)}"
        head = f"{self.span}: {shown(self.message)}"
        if not self.source:
            return head
        lines = self.source.splitlines()
        if not 1 <= self.span.line <= len(lines):
            return head
        text = lines[self.span.line - 1].expandtabs(1)
        width = 1
        if self.span.end_line == self.span.line and self.span.end_column:
            width = max(1, self.span.end_column - self.span.column)
        column = self.span.column
        if len(text) > 160:  # a long line: show 160 characters around the column, marked "..."
            start = max(0, min(column - 1 - 60, len(text) - 160))
            text = ("..." if start else "") + text[start:start + 160] + ("..." if start + 160 < len(text) else "")
            column = column - start + (3 if start else 0)
            width = max(1, min(width, len(text) - column + 1))
        # the excerpt printed escaped: the caret moves with the escapes before and under it
        before, under = shown(text[:column - 1]), shown(text[column - 1:column - 1 + width])
        caret = " " * len(before) + "^" * max(1, len(under))
        return f"{head}\n    {shown(text)}\n    {caret}"

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.span is not None:
            out.update(file=self.span.file, line=self.span.line, column=self.span.column)
        return out


class TopologyError(InputError):
    """A topology that is malformed or cannot be built (bad parameters, bad links)."""

    kind = "topology error"


class CollectiveError(InputError):
    """A collective that is malformed, or a request that does not fit the collective."""

    kind = "collective error"


class InfeasibleError(CclError):
    """The request has no solution. ``bound`` names the lower bound that proves it, if any."""

    exit_code = EXIT_INFEASIBLE
    kind = "infeasible"

    def __init__(self, message: str, bound: str | None = None) -> None:
        super().__init__(message)
        self.bound = bound

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["bound"] = self.bound
        return out


class SolverTimeout(CclError):
    """A solver's time limit was reached. ``best`` is the best schedule found (or None)."""

    exit_code = EXIT_TIMEOUT
    kind = "time limit"

    def __init__(self, message: str, best: Any = None, gap: float | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.best = best
        self.gap = gap
        self.details = details or {}

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["gap"] = self.gap
        out["has_schedule"] = self.best is not None
        return out


class Interrupted(CclError):
    """Ctrl-C stopped the computation (``ccl.core.interrupt``). ``best`` is the best result found so
    far (a schedule, a frontier, a schedule set; verified once the driver has it) or None."""

    exit_code = EXIT_INTERRUPTED
    kind = "interrupted"

    def __init__(self, message: str = "stopped by Ctrl-C", best: Any = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.best = best
        self.details = details or {}

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["has_schedule"] = self.best is not None
        return out


class VerificationError(CclError):
    """A schedule does not implement its collective. Names where and what went wrong."""

    exit_code = EXIT_VERIFICATION
    kind = "verification failed"

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        step: int | None = None,
        buffer: str | None = None,
        index: int | None = None,
        transfer: int | None = None,
        expected: str | None = None,
        found: str | None = None,
        switch: str | None = None,
    ) -> None:
        super().__init__(message)
        self.switch = switch  # the switch whose slot ``index`` is meant, when one is
        self.rank = rank
        self.step = step
        self.buffer = buffer
        self.index = index
        self.transfer = transfer
        self.expected = expected
        self.found = found

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out.update(
            rank=self.rank,
            step=self.step,
            buffer=self.buffer,
            index=self.index,
            transfer=self.transfer,
            expected=self.expected,
            found=self.found,
        )
        if self.switch is not None:
            out["switch"] = self.switch
        return out


class BackendError(CclError):
    """A backend could not run or emit a schedule (runtime failure, peer lost, format limit)."""

    exit_code = EXIT_BACKEND
    kind = "backend error"


class Z3Error(CclError):
    """z3 failed in a way that is not a timeout: it rejected an encoding or failed inside a
    check (translated at the smt solver's boundary). Neither the request nor a backend is at
    fault, so it is an internal error (exit code 1), not bad input or a backend failure."""

    exit_code = EXIT_INTERNAL
    kind = "z3 error"
