"""The import graph, drawn from the source: the dependency rule of DESIGN.md, no circle, and
function-local imports only where they defer a heavy library.

The dependency rule is checked on every import statement of every module (function-local ones
and typing-only ones included, relative ones resolved):

==============================================  ==============================================
package                                         may import (of ours)
==============================================  ==============================================
``ccl`` core (all of ``ccl`` but the driver)    the core only; ``ccl/api.py`` (the face's names) may reach
                                                the driver inside functions (the lazy public
                                                functions ``ccl.synthesize``, ``ccl.simulate``...)
``dsl``                                         the core
``topologies``                                  the core and ``dsl`` (the library is .ccl files)
``solvers``                                     the core
``backends``                                    the core
the driver (``ccl.compiler``, ``ccl.cli``,     everything
``ccl.torch``: the training job's entry point,
loaded on first use)
==============================================  ==============================================

The graph of the imports that run (module-level and function-local; ``if TYPE_CHECKING``
blocks left out) has no circle. A function-local import must defer something heavy: a
library in ``HEAVY``, or a module of ours that loads one when imported (z3, PuLP/HiGHS,
torch, matplotlib, numpy, scipy, networkx, lark: ``import ccl``, ``import topologies`` and
``import solvers.smt`` stay cheap, and torch loads only to run), a name a package serves
lazily (its module ``__getattr__``), the driver from the public face ``ccl``, or one of the
few standard-library imports in ``LOCAL_STDLIB`` with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ccl", "dsl", "topologies", "solvers", "backends")
ALLOWED = {
    "core": {"core"},
    "dsl": {"core"},
    "topologies": {"core", "dsl"},
    "solvers": {"core"},
    "backends": {"core"},
    "driver": {"core", "dsl", "topologies", "solvers", "backends", "driver"},
}


def area(module: str) -> str:
    """Which side of the rule a module is on."""
    if module == "ccl.core" or module.startswith("ccl.core."):
        return "core"
    top = module.split(".")[0]
    return "driver" if top == "ccl" else top


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_statements(path: Path, module: str, typing_blocks: bool = True):
    """(statement, the module it imports from, inside a function) for every import statement of
    a file, relative ones resolved (``from . import x`` gives its package); ``typing_blocks``
    False leaves out ``if TYPE_CHECKING`` blocks."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if not typing_blocks and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[:len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                found.append((child, target, in_function))
            elif isinstance(child, ast.Import):
                found.append((child, None, in_function))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), False)
    return found


def imports(path: Path, module: str | None = None) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import of ours in a file (of
    ``module``, by default the one its path names)."""
    found: list[tuple[str, int, bool]] = []
    for node, target, local in import_statements(path, module or module_name(path)):
        if target is None:
            found.extend((alias.name, node.lineno, local) for alias in node.names)
        else:
            names = [f"{target}.{alias.name}" for alias in node.names] if not node.module else []
            found.extend((t, node.lineno, local) for t in [target, *names])
    return [(name, line, local) for name, line, local in found if name.split(".")[0] in PACKAGES]


FILES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_every_package_is_seen():
    assert {module_name(p).split(".")[0] for p in FILES} == set(PACKAGES)
    assert any(area(module_name(p)) == "driver" for p in FILES)


def violations(path: Path, module: str | None = None) -> list[str]:
    module = module or module_name(path)
    side = area(module)
    out = []
    for target, line, in_function in imports(path, module):
        to = area(target)
        if to == side or to in ALLOWED[side]:
            continue
        if module == "ccl.api" and to == "driver" and in_function:
            continue  # the lazy public functions behind the face (ccl/api.py)
        out.append(f"{path.name}:{line}: {side} module {module} imports {target} ({to}); {side} may import "
                   f"{sorted(ALLOWED[side])} (DESIGN.md, 'Dependency rule')")
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_dependency_rule(path):
    assert violations(path) == []


def test_the_checker_catches_local_relative_and_aliased_imports(tmp_path):
    sample = tmp_path / "judge.py"
    sample.write_text(
        "from ccl.core.algorithm import Algorithm\n"
        "def time_of(alg):\n"
        "    from backends.sim import simulate\n"
        "    import backends.torch as t\n"
        "    return simulate(alg, 1)\n"
        "class Judge:\n"
        "    def run(self):\n"
        "        from ..ccl.compiler import synthesize\n")
    found = violations(sample, "solvers.milp.judge")  # ..ccl.compiler is solvers.ccl.compiler there
    assert len(found) == 2 and all("backends" in f for f in found)
    dsl_side = violations(sample, "dsl.sample")  # ..ccl.compiler is the driver here
    assert len(dsl_side) == 3 and "imports ccl.compiler (driver)" in dsl_side[2]
    upward = tmp_path / "x.py"
    upward.write_text("def f():\n    from ..compiler import synthesize\n")
    assert violations(upward, "ccl.core.report")  # the core never imports the driver
    assert not violations(upward, "ccl.cli.x")
    face = tmp_path / "y.py"
    face.write_text("def f():\n    from .compiler import synthesize\n")
    assert not violations(face, "ccl")


# ---------------------------------------------------------------------- the graph
HEAVY = {"z3", "pulp", "highspy", "torch", "matplotlib", "numpy", "scipy", "networkx", "lark"}
LOCAL_STDLIB = {
    ("ccl.core.limits", "resource"): "POSIX only: elsewhere the address-space limit is unknown",
    ("backends.torch.script", "signal"): "script.py is copied into generated scripts, whose imports are fixed",
}
MAX_LOCAL_IMPORTS = 200
MODULES = {module_name(p): p for p in FILES}


def runtime_imports(path: Path, module: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import that runs (typing-only
    blocks left out), libraries included; ``from package import name`` counts as an import
    of ``package.name`` when that is a module of ours, else of ``package``."""
    found: list[tuple[str, int, bool]] = []
    for node, target, local in import_statements(path, module, typing_blocks=False):
        if target is None:
            found.extend((alias.name, node.lineno, local) for alias in node.names)
        else:
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub if sub in MODULES else target, node.lineno, local))
    return found


GRAPH = {m: runtime_imports(p, m) for m, p in MODULES.items()}


def circles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    edges = {m: sorted({t for t, _, _ in GRAPH[m] if t in MODULES and t != m}) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(MODULES):
        if v not in index:
            connect(v)
    return out


def test_no_import_circle():
    assert circles() == []


def loads_heavy(module: str, seen: set[str] | None = None) -> bool:
    """Importing ``module`` (with the packages above it) loads a library of ``HEAVY``."""
    seen = set() if seen is None else seen
    if module in seen:
        return False
    seen.add(module)
    parents = [".".join(module.split(".")[:k]) for k in range(1, module.count(".") + 1)]
    for target, _, local in GRAPH[module]:
        if local:
            continue
        if target.split(".")[0] in HEAVY:
            return True
        if target in MODULES and loads_heavy(target, seen):
            return True
    return any(p in MODULES and loads_heavy(p, seen) for p in parents)


def serves_lazily(module: str) -> bool:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    return any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)


def unjustified_local_imports() -> list[str]:
    out = []
    for module, found in GRAPH.items():
        for target, line, local in found:
            if not local or target.split(".")[0] in HEAVY or (module, target) in LOCAL_STDLIB:
                continue
            if target in MODULES and (loads_heavy(target) or serves_lazily(target)):
                continue
            if module == "ccl" and area(target) == "driver":
                continue
            where = MODULES[module]
            where = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where.name
            out.append(f"{where}:{line}: a function-local import of {target} defers "
                       "nothing heavy: import it at module level")
    return out


def test_function_local_imports_defer_something_heavy():
    assert unjustified_local_imports() == []
    count = sum(local for found in GRAPH.values() for _, _, local in found)
    assert count <= MAX_LOCAL_IMPORTS


def test_the_graph_checks_catch_what_they_are_for(tmp_path, monkeypatch):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import json\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x.b\n"
                 "def f():\n    import z3\n    from . import b\n")
    b.write_text("def g():\n    import json\n    from .a import f\n")
    monkeypatch.setitem(MODULES, "x.a", a)
    monkeypatch.setitem(MODULES, "x.b", b)
    monkeypatch.setitem(GRAPH, "x.a", runtime_imports(a, "x.a"))
    monkeypatch.setitem(GRAPH, "x.b", runtime_imports(b, "x.b"))
    assert ("x.b", 7, True) in GRAPH["x.a"] and all(t != "x.b" or local for t, _, local in GRAPH["x.a"])
    assert ["x.a", "x.b"] in circles()  # the typing-only import is no edge; the local ones are
    found = unjustified_local_imports()
    assert any("a.py:7" in f and "x.b" in f for f in found)  # x.b loads nothing heavy
    assert any("b.py:2" in f and "json" in f for f in found)  # the standard library is never lazy
    assert not any("a.py:6" in f for f in found)  # z3 is
