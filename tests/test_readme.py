"""README.md stays short and true: its size, its two set-up commands (the test command is the
one CI runs), its quick start (every command run in order in a fresh folder), every relative
link of README.md and docs/*.md (anchors included), and the results headline (generated from the
benchmark data by ``python -m benchmarks.headline``)."""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(ROOT))

README = ROOT / "README.md"
TEXT = README.read_text(encoding="utf-8")
MAX_BYTES = 12 * 1024
FENCE = re.compile(r"^(```+|~~~+)([^\n]*)\n(.*?)^\1[ \t]*$", flags=re.S | re.M)


def fenced(text: str) -> list[tuple[str, str, int]]:
    """(info string, body, offset) of every fenced code block."""
    return [(m.group(2).strip(), m.group(3), m.start()) for m in FENCE.finditer(text)]


def prose(text: str) -> str:
    """The text outside fenced blocks and inline code (where links and headings are read)."""
    text = FENCE.sub("", text)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section."""
    match = re.search(rf"^## {re.escape(title)}[ \t]*\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


# ------------------------------------------------------------------ size and set-up commands
def test_readme_is_at_most_12_kib():
    size = len(README.read_bytes())
    assert size <= MAX_BYTES, f"README.md is {size} bytes, over {MAX_BYTES}: move detail to docs/"


def ci_test_command() -> str:
    """The test command .ci/run runs (the line that runs pytest after installing)."""
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    (line,) = [x for x in lines if x.startswith("pip install") and "pytest" in x]
    return line


def test_setup_commands_come_first():
    info, body, offset = fenced(TEXT)[0]
    assert info == "bash" and offset < 1000, "the README's first block must be the set-up commands"
    lines = [line for line in body.splitlines() if line and not line.startswith("#")]
    assert len(lines) == 2, lines
    install, tests = lines
    assert re.fullmatch(r"pip install -e \. && ccl synthesize --topology \S+ --collective \S+ -o (\S+) && "
                        r"ccl verify \1 && ccl simulate \1 --size \S+", install), install
    assert tests == ci_test_command(), "the README's test command must be the one .ci/run runs, byte for byte"


# ------------------------------------------------------------------ the quick start runs
def quick_start_files(body: str) -> dict[str, str]:
    """Files the quick start asks to save: a ``ccl`` block after 'Save this as `NAME`'."""
    files = {}
    for info, block, offset in fenced(body):
        if info == "ccl":
            said = re.findall(r"[Ss]ave (?:this|it) as `([^`]+)`", body[:offset])
            assert said, "a description in the quick start must say which file to save it as"
            files[said[-1]] = block
    return files


def quick_start_commands(body: str) -> list[str]:
    commands = []
    for info, block, _ in fenced(body):
        if info not in ("bash", "sh", "shell"):
            continue
        for line in block.splitlines():
            line = line.strip()
            if not line or line.startswith("#") or line.startswith("pip install"):
                continue
            assert not line.endswith("\\"), "keep quick-start commands on one line each"
            commands.append(line)
    return commands


@pytest.fixture(scope="module")
def quick_start():
    body = section(TEXT, "Quick start")
    return quick_start_files(body), quick_start_commands(body)


def test_quick_start_covers_the_job(quick_start):
    files, commands = quick_start
    assert files, "the quick start describes a machine in a .ccl file"
    words = [shlex.split(c, comments=True)[:2] for c in commands]
    for step in (["ccl", "check"], ["ccl", "synthesize"], ["ccl", "verify"], ["ccl", "simulate"],
                 ["ccl", "emit"], ["ccl", "run"]):
        assert step in words, f"the quick start should show `{' '.join(step)}`"


def test_quick_start_runs(quick_start, tmp_path):
    """Every command of the quick start, in order, in a fresh folder, with `ccl` this
    interpreter's; each must exit 0."""
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:  # `ccl run` needs torch (the test extras install it); the rest still runs
        have_torch = False
    files, commands = quick_start
    work = tmp_path / "work"
    work.mkdir()
    for name, content in files.items():
        (work / name).write_text(content, encoding="utf-8")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "ccl"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m ccl.cli "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               CCL_CACHE_DIR=str(tmp_path / "cache"), CCL_QUIET="1", PYTHONPATH=str(ROOT))
    timings, skipped = [], []
    for command in commands:
        if not have_torch and shlex.split(command, comments=True)[:2] in (["ccl", "run"], ["torchrun"]):
            skipped.append(command)
            continue
        start = time.perf_counter()
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                              timeout=300)
        timings.append((round(time.perf_counter() - start, 2), command))
        assert done.returncode == 0, (f"quick-start command failed (exit {done.returncode}): {command}\n"
                                      f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    print("\n".join(f"{t:7.2f} s  {c}" for t, c in timings))
    if skipped:
        pytest.skip(f"torch is not installed: did not run {skipped}")


# ------------------------------------------------------------------ links resolve
def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped (hyphens, underscores and
    spaces kept), spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub makes for the headings of a markdown file (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def links(path: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(prose(path.read_text(encoding="utf-8")))]


def test_slug_follows_github():
    assert slug("Schedule sets: the best schedule per size") == "schedule-sets-the-best-schedule-per-size"
    assert slug("The pipeline and `--emit`") == "the-pipeline-and---emit"
    assert slug("Measuring the machine: `ccl probe`") == "measuring-the-machine-ccl-probe"
    assert slug("`ccl.torch` in a training job") == "ccltorch-in-a-training-job"


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` that lead nowhere: a missing file, or a missing heading for
    an ``#anchor`` into a markdown file."""
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):  # http:, https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    return broken


def test_broken_links_are_found(tmp_path):
    (tmp_path / "b.md").write_text("# Title\n\n## A `code` heading: here\n\n```\n# not a heading\n```\n")
    (tmp_path / "a.md").write_text(
        "[ok](b.md) [ok](b.md#a-code-heading-here) [ok](#local) [web](https://example.com/x)\n"
        "[gone](c.md) [bad anchor](b.md#not-a-heading) ![img](missing.png) `[code](skipped.md)`\n\n## Local\n")
    assert broken_links(tmp_path / "a.md") == ["c.md: no such file",
                                               "b.md#not-a-heading: no heading with anchor #not-a-heading in b.md",
                                               "missing.png: no such file"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = broken_links(page)
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


REPO_PATH = re.compile(r"`((?:ccl|dsl|solvers|backends|topologies|tests|benchmarks|docs)/[\w./-]*)`")


def named_paths(page: Path) -> list[str]:
    """The repository paths a page names in inline code (``solvers/bounds/``, ``ccl/core/program.py``)
    that do not exist: the layout moved and the page did not follow."""
    text = page.read_text(encoding="utf-8")
    return [m.group(1) for m in REPO_PATH.finditer(text)
            if "*" not in m.group(1) and not (ROOT / m.group(1).rstrip("/")).exists()]


DOTTED = re.compile(r"`((?:ccl|dsl|solvers|backends|topologies)(?:\.\w+)+)")


def unresolved_names(page: Path) -> list[str]:
    """The dotted names of ours a page writes in inline code (``ccl.core.judge.CostJudge``) that
    no module and attribute answer."""
    out = []
    for name in dict.fromkeys(m.group(1) for m in DOTTED.finditer(page.read_text(encoding="utf-8"))):
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                value = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            try:
                for attr in parts[i:]:
                    value = getattr(value, attr)
            except AttributeError:
                out.append(name)
            break
        else:
            out.append(name)
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_repository_paths_and_modules_exist(page):
    assert named_paths(page) == []
    assert unresolved_names(page) == []


def test_readme_maps_every_docs_page():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README) if t.startswith("docs/")}
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"README.md's map of the docs misses {missing}"


# ------------------------------------------------------------------ the headline is the data's
def test_headline_is_up_to_date():
    from benchmarks import headline

    current, expected = headline.expected(README, headline.DATA)
    assert current == expected, "README.md's results headline is out of date: run `python -m benchmarks.headline`"
