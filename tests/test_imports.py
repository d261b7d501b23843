"""The dependency rule of DESIGN.md, checked on every import statement of every module
(function-local ones included, relative ones resolved):

==============================================  ==============================================
package                                         may import (of ours)
==============================================  ==============================================
``ccl`` core (all of ``ccl`` but the driver)    the core only; ``ccl/__init__.py`` may reach
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


def imports(path: Path, module: str | None = None) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import of ours in a file (of
    ``module``, by default the one its path names)."""
    module = module or module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[:len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                names = [f"{target}.{alias.name}" for alias in child.names] if not child.module else []
                found.extend((t, child.lineno, in_function) for t in [target, *names])
            visit(child, inner)

    visit(tree, False)
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
        if module == "ccl" and to == "driver" and in_function:
            continue  # the lazy public functions of ccl/__init__.py
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
