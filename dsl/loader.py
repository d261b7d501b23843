"""Files, imports and the top level: a loaded file is a ``Module``.

Loading a file parses it, resolves its imports (``import basic`` looks for ``basic.ccl`` next to
the file, then in the shipped library under ``topologies/``; ``import "path.ccl"`` is relative
to the file), registers its definitions (hoisted: their order does not matter) and evaluates its
top-level ``let`` and ``link`` statements in order. Requests (``synthesize``) and algorithm
instances (``verify``) run on demand, so using one topology of a file does not lower the rest.

Every module sees the built-in functions and collectives and the fabrics of the library's
``multinode.ccl`` (switch, leafspine, rail); nothing else is visible without an import.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ccl.core.errors import DslError, InputError, Span
from ccl.core.limits import read_input_text
from ccl.core.topology import Topology

from . import ast
from .algorithm import HandWritten
from .builtins import builtin_names
from .calls import invoke
from .collective import builtin_spec
from .evaluate import PLACES, Evaluator, Scope, describe, suggest
from .parser import parse, parse_expression
from .request import LoweredRequest, lower_request
from .topology import make_link_class
from .values import Definition, ModuleValue

T = TypeVar("T")
KINDS = {ast.TopologyDef: "topology", ast.CollectiveDef: "collective", ast.AlgorithmDef: "algorithm",
         ast.FabricDef: "fabric"}
PRELUDE = "multinode"


def library_dir() -> Path:
    """Where the shipped ``.ccl`` library lives (the ``topologies`` package folder)."""
    spec = importlib.util.find_spec("topologies")
    if spec is None or spec.origin is None:  # pragma: no cover - the package ships with the project
        raise InputError("the topology library (package 'topologies') is not installed")
    return Path(spec.origin).parent


def library_modules() -> list[str]:
    return sorted(p.stem for p in library_dir().glob("*.ccl"))


class Module:
    """One loaded file: its definitions, exports and (on demand) requests and algorithms."""

    def __init__(self, loader: Loader, name: str, display: str, path: Path | None, text: str,
                 parent: Scope) -> None:
        self.loader = loader
        self.name = name
        self.display = display
        self.path = path
        self.text = text
        self.tree: ast.File | None = None
        self.scope = Scope(parent)
        self.exports: dict[str, Any] = {}
        self.definitions: dict[str, Definition] = {}
        self.actions: list[ast.Stmt] = []
        self._requests: list[LoweredRequest] | None = None
        self._algorithms: list[HandWritten] | None = None

    # ------------------------------------------------------------------ queries
    def guard(self, fn: Callable[[], T]) -> T:
        return self.loader.guard(fn)

    def topologies(self) -> dict[str, Definition]:
        """Topology definitions of this file (not of its imports)."""
        return {k: v for k, v in self.definitions.items() if v.kind == "topology"}

    def algorithm_definitions(self) -> dict[str, Definition]:
        return {k: v for k, v in self.definitions.items() if v.kind == "algorithm"}

    def topology(self, name: str, *args: Any, **kwargs: Any) -> Topology:
        """Build a topology visible in this file, by name, with plain Python arguments."""
        def run() -> Topology:
            value = self.lookup(name, "topology")
            span = Span(self.display, 1, 1)
            return self.loader.evaluator.invoke(value, args, {k: (v, span) for k, v in kwargs.items()}, span)

        return self.guard(run)

    def evaluate(self, expression: str) -> Any:
        """Evaluate an expression of the language in this file's scope:
        ``module.evaluate("ring(8, bandwidth = 50 GB/s)")`` returns a Topology."""
        def run() -> Any:
            expr = parse_expression(expression, "<expression>")
            return self.loader.evaluator.eval(expr, Scope(self.scope))

        self.loader.sources.setdefault("<expression>", expression)
        try:
            return self.guard(run)
        finally:
            self.loader.sources.pop("<expression>", None)

    def lookup(self, name: str, kind: str) -> Definition:
        try:
            value = self.scope.lookup(name)
        except KeyError:
            value = None
        if not isinstance(value, Definition) or value.kind != kind:
            known = sorted(k for k in self.scope.visible()
                           if isinstance(self.scope.lookup(k), Definition) and self.scope.lookup(k).kind == kind)
            plural = "topologies" if kind == "topology" else f"{kind}s"
            raise InputError(f"{self.display} has no {kind} '{name}'{suggest(name, known)} "
                             f"({plural}: {', '.join(known) or 'none'})")
        return value

    def requests(self) -> list[LoweredRequest]:
        """The file's ``synthesize`` statements, lowered to Problems."""
        self._run_actions()
        assert self._requests is not None
        return self._requests

    def algorithms(self) -> list[HandWritten]:
        """Hand-written algorithms: every ``verify ALG(args)`` instance, then every algorithm of
        this file whose parameters all have defaults, instantiated with them."""
        self._run_actions()
        assert self._algorithms is not None
        return self._algorithms

    def _run_actions(self) -> None:
        if self._requests is not None:
            return

        def run() -> None:
            ctx = TopLevel(self)
            self.loader.evaluator.run(tuple(self.actions), ctx, Scope(self.scope))
            seen = {id(item) for item in ctx.algorithms}
            ev = self.loader.evaluator
            for definition in self.algorithm_definitions().values():
                if all(p.default is not None for p in definition.params):
                    item = ev.invoke(definition, (), {}, definition.node.span)
                    if id(item) not in seen:
                        ctx.algorithms.append(item)
                        seen.add(id(item))
            self._requests = ctx.requests
            self._algorithms = ctx.algorithms

        self.guard(run)


class TopLevel:
    """The top level of a file, where requests and algorithm instances are collected."""

    describe = "the top level of a file"

    def __init__(self, module: Module) -> None:
        self.module = module
        self.requests: list[LoweredRequest] = []
        self.algorithms: list[HandWritten] = []
        self.names: dict[str, Span] = {}
        self.handlers = {ast.Synthesize: self.synthesize, ast.Verify: self.verify}

    def synthesize(self, stmt: ast.Synthesize, scope: Scope) -> None:
        ev = self.module.loader.evaluator
        request = lower_request(ev, stmt, scope)
        if request.name in self.names:
            raise DslError(f"request '{request.name}' is already defined at line {self.names[request.name].line}; "
                           "name requests apart with `as \"NAME\"`", stmt.span)
        self.names[request.name] = stmt.span
        self.requests.append(request)

    def verify(self, stmt: ast.Verify, scope: Scope) -> None:
        value = self.module.loader.evaluator.eval(stmt.algorithm, scope)
        if isinstance(value, Definition) and value.kind == "algorithm":
            value = self.module.loader.evaluator.invoke(value, (), {}, stmt.algorithm.span)
        if not isinstance(value, HandWritten):
            raise DslError(f"`verify` takes an algorithm, such as ring_allgather(8), got {describe(value)}",
                           stmt.algorithm.span)
        if all(value is not a for a in self.algorithms):
            self.algorithms.append(value)


class Loader:
    """Loads files and their imports once each, and owns the evaluator and the sources used
    to render errors."""

    def __init__(self, max_steps: int | None = None) -> None:
        self.evaluator = Evaluator(max_steps, invoke=invoke, builtin_collective=builtin_spec)
        self.modules: dict[str, Module] = {}
        self.sources: dict[str, str] = {}
        self.loading: list[tuple[str, str]] = []  # (key, display) of files being loaded
        self._prelude_scope: Scope | None = None
        self.builtins = Scope(None, builtin_names())

    # ------------------------------------------------------------------ errors
    def attach(self, exc: DslError) -> DslError:
        if exc.source is None and exc.span is not None:
            exc.source = self.sources.get(exc.span.file)
        return exc

    def guard(self, fn: Callable[[], T]) -> T:
        """Run ``fn``; errors leave as DslError with their source attached."""
        try:
            return fn()
        except DslError as exc:
            raise self.attach(exc) from None
        except (RecursionError, OverflowError, MemoryError) as exc:
            span = self.evaluator.current
            what = {RecursionError: "nests too deeply", OverflowError: "computes a number too large",
                    MemoryError: "needs more memory than there is"}[type(exc)]
            raise self.attach(DslError(f"the description {what}", span)) from None

    # ------------------------------------------------------------------ loading
    def prelude(self) -> Scope:
        if self._prelude_scope is None:
            path = library_dir() / f"{PRELUDE}.ccl"
            module = self._load(path, f"topologies/{PRELUDE}.ccl", PRELUDE, None, self.builtins)
            fabrics = {k: v for k, v in module.exports.items() if isinstance(v, Definition) and v.kind == "fabric"}
            self._prelude_scope = Scope(self.builtins, fabrics)
        return self._prelude_scope

    def load_file(self, path: str | os.PathLike[str]) -> Module:
        display = str(path)
        if "\x00" in display:
            raise InputError(f"{display!r}: a file name cannot contain a NUL character")
        real = Path(path)
        if not real.exists():
            raise InputError(f"{display}: no such file")
        if real.is_dir():
            raise InputError(f"{display}: is a folder, not a description file")
        return self.guard(lambda: self._load(real, display, real.stem, None, None))

    def load_text(self, text: str, filename: str = "<string>", base: str | os.PathLike[str] | None = None) -> Module:
        def run() -> Module:
            key = f"<text>:{filename}:{len(self.modules)}"
            folder = Path(base) if base is not None else Path(".")
            return self._build(key, text, filename, Path(filename).stem, folder / filename, self.prelude())

        return self.guard(run)

    def _read(self, path: Path, display: str, span: Span | None) -> str:
        try:
            return read_input_text(path, "description file", display)
        except InputError as exc:
            if span is not None:
                raise DslError(exc.message, span) from None
            raise

    def _load(self, path: Path, display: str, name: str, span: Span | None, parent: Scope | None) -> Module:
        key = str(path.resolve())
        if key in self.modules:
            return self.modules[key]
        for k, (loading_key, _) in enumerate(self.loading):
            if loading_key == key:
                chain = [d for _, d in self.loading[k:]] + [display]
                raise DslError("import cycle: " + " imports ".join(chain), span)
        text = self._read(path, display, span)
        return self._build(key, text, display, name, path, parent if parent is not None else self.prelude())

    def _build(self, key: str, text: str, display: str, name: str, path: Path, parent: Scope) -> Module:
        self.sources[display] = text
        module = Module(self, name, display, path, text, parent)
        self.loading.append((key, display))
        try:
            module.tree = parse(text, display)
            self._declare(module)
        finally:
            self.loading.pop()
        self.modules[key] = module
        return module

    def _declare(self, module: Module) -> None:
        tree = module.tree
        assert tree is not None
        ev = self.evaluator
        ordered: list[ast.Stmt] = []
        for stmt in tree.body:
            if isinstance(stmt, ast.Import):
                self._import(module, stmt)
            elif type(stmt) in KINDS:
                definition = Definition(KINDS[type(stmt)], stmt, module)
                module.scope.define(stmt.name, definition, stmt.span, KINDS[type(stmt)])
                module.definitions[stmt.name] = definition
                module.exports[stmt.name] = definition
            elif isinstance(stmt, (ast.Let, ast.LinkClass, ast.Require)):
                ordered.append(stmt)
            elif isinstance(stmt, (ast.Synthesize, ast.Verify, ast.For, ast.If)):
                module.actions.append(stmt)
            else:
                what, where = PLACES.get(type(stmt), ("this statement", "a block"))
                raise DslError(f"{what} belongs in {where}, not at the top level of a file", stmt.span)
        for stmt in ordered:
            ev.current = stmt.span
            if isinstance(stmt, ast.Let):
                module.scope.define(stmt.name, ev.eval(stmt.value, module.scope), stmt.span, "variable")
                module.exports[stmt.name] = module.scope.vars[stmt.name]
            elif isinstance(stmt, ast.LinkClass):
                module.scope.define(stmt.name, make_link_class(ev, stmt, module.scope), stmt.span, "link class")
                module.exports[stmt.name] = module.scope.vars[stmt.name]
            else:
                ev.run((stmt,), TopLevel(module), module.scope)

    def _resolve(self, module: Module, stmt: ast.Import) -> tuple[Path, str, str]:
        here = module.path.parent if module.path is not None else Path(".")
        display_dir = os.path.dirname(module.display)
        if stmt.is_path:
            path = here / stmt.module
            display = os.path.normpath(os.path.join(display_dir, stmt.module))
            if not path.is_file():
                raise DslError(f"cannot import \"{stmt.module}\": no such file {display}", stmt.span)
            return path, display, Path(stmt.module).stem
        local = here / f"{stmt.module}.ccl"
        if local.is_file():
            return local, os.path.normpath(os.path.join(display_dir, f"{stmt.module}.ccl")), stmt.module
        shipped = library_dir() / f"{stmt.module}.ccl"
        if shipped.is_file():
            return shipped, f"topologies/{stmt.module}.ccl", stmt.module
        known = library_modules()
        raise DslError(f"no module '{stmt.module}'{suggest(stmt.module, known)}: looked for {stmt.module}.ccl next to "
                       f"this file and in the library ({', '.join(known)})", stmt.span)

    def _import(self, module: Module, stmt: ast.Import) -> None:
        path, display, stem = self._resolve(module, stmt)
        imported = self._load(path, display, stem, stmt.span, None)
        if stmt.names is None:
            alias = stmt.alias or stem
            if not alias.isidentifier():
                raise DslError(f"cannot name module \"{stmt.module}\" '{alias}': add `as NAME`", stmt.span)
            module.scope.define(alias, ModuleValue(imported), stmt.span, "name")
            return
        names = stmt.names or tuple(sorted(imported.exports))
        for name in names:
            if name not in imported.exports:
                known = sorted(imported.exports)
                raise DslError(f"{imported.display} has no '{name}'{suggest(name, known)} "
                               f"(it defines: {', '.join(known) or 'nothing'})", stmt.span)
            module.scope.define(name, imported.exports[name], stmt.span, "name")
