"""Everyday CLI polish: examples in every --help, shell completion, --quiet and the progress line."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccl.cli import build_parser, main
from ccl.cli import progress as progress_mod
from ccl.cli.completion import command_tree, script
from ccl.cli.examples import EXAMPLES
from ccl.cli.progress import Progress, bar_text, format_duration

ROOT = Path(__file__).resolve().parents[2]
SHELL_OPERATORS = (">", ">>", "|", "&&", ";")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def parsers(parser: argparse.ArgumentParser, path: str = ""):
    """(command path, parser) of every command, ``ccl`` itself first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, f"{path} {name}".strip())


def example_commands():
    """(path, line, argv) of every ``ccl`` command in the examples, also inside ``$(...)``."""
    for path, text in EXAMPLES.items():
        for line in text.strip().splitlines():
            commands = re.findall(r"\$\((ccl [^)]*)\)", line)
            if line.startswith("ccl "):
                commands.append(line)
            for cmd in commands:
                yield path, line, words_of(cmd)


def words_of(command: str) -> list[str]:
    """The words of a shell command line, up to a redirection or pipe."""
    words = shlex.split(command, comments=True)
    cut = next((i for i, w in enumerate(words) if w in SHELL_OPERATORS), len(words))
    return words[:cut]


# ---------------------------------------------------------------------- examples
def test_every_help_ends_with_examples():
    paths = []
    for path, parser in parsers(build_parser()):
        paths.append(path)
        assert path in EXAMPLES, f"`ccl {path}` has no examples in ccl/cli/examples.py"
        text = parser.format_help()
        assert "\nexamples:\n" in text, path
        first = next(line for line in EXAMPLES[path].splitlines() if line)
        assert f"  {first}" in text  # kept line for line, not re-wrapped
    assert set(EXAMPLES) <= set(paths), set(EXAMPLES) - set(paths)


def test_every_example_parses_with_the_real_parser():
    parser = build_parser()
    seen = set()
    for path, line, words in example_commands():
        assert words[0] == "ccl", line
        try:
            args = parser.parse_args(words[1:])
        except SystemExit:
            pytest.fail(f"example of `ccl {path}` does not parse: {line}")
        assert callable(args.func), line
        seen.add(path)
    assert seen == set(EXAMPLES), set(EXAMPLES) - seen  # every command has a ccl line


def test_a_chain_of_examples_runs(tmp_path, capsys, monkeypatch):
    """The examples as a user would run them one after another, in a fresh folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dsl").symlink_to(ROOT / "dsl")
    chain = [("synthesize", "ccl synthesize -t dgx1 -c allgather -s multi-ring -o ag.json"),
             ("verify", "ccl verify ag.json "), ("simulate", "ccl simulate ag.json --size 64MiB"),
             ("simulate", "ccl simulate ag.json --size 1KiB..1GiB "),
             ("emit msccl", "ccl emit msccl ag.json -o ag.xml"),
             ("import msccl", "ccl import msccl ag.xml -t dgx1 -o ag-program.json"),
             ("import msccl", "ccl simulate ag-program.json --size 64MiB"),
             ("topology show", "ccl topology show ring:8,bw=50GB/s,lat=1us"),
             ("bounds", "ccl bounds -t dgx1 -c allgather --size 64MiB"),
             ("check", "ccl check dsl/examples/ring_allgather.ccl "),
             ("completion", "ccl completion fish")]
    for path, prefix in chain:
        line = next((x for x in EXAMPLES[path].splitlines() if x.startswith(prefix)), None)
        assert line is not None, f"no example of `ccl {path}` starts with {prefix!r}"
        code, out, err = run(capsys, *words_of(line)[1:])
        assert code == 0, (line, err)
        assert out.strip(), line
    assert (tmp_path / "ag-program.json").exists()


# ---------------------------------------------------------------------- completion
@pytest.fixture(scope="module")
def bash_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("completion") / "ccl.bash"
    path.write_text(script("bash", build_parser()))
    return path


def complete(bash_script: Path, words: list[str], cwd: Path | None = None) -> list[str]:
    """What the bash completion function offers for the command line ``words`` (the last one
    being completed), as bash would call it on <TAB>."""
    line = " ".join(shlex.quote(w) for w in words)
    program = (f"source {shlex.quote(str(bash_script))}\nCOMP_WORDS=({line})\n"
               f"COMP_CWORD={len(words) - 1}\n_ccl\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, cwd=cwd, timeout=30)
    assert done.returncode == 0, done.stderr
    return [x for x in done.stdout.splitlines() if x]


needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


@needs_bash
def test_bash_script_is_valid_and_knows_every_command(bash_script):
    done = subprocess.run(["bash", "-n", str(bash_script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = bash_script.read_text()
    for c in command_tree(build_parser()):
        for name, _ in c.subcommands:
            assert name in text
    assert "complete -F _ccl ccl" in text


@needs_bash
def test_bash_completes_commands_options_choices_and_topologies(bash_script, tmp_path):
    assert complete(bash_script, ["ccl", "syn"]) == ["synthesize"]
    assert complete(bash_script, ["ccl", "emit", "m"]) == ["msccl"]
    assert complete(bash_script, ["ccl", "topology", ""]) == ["list", "show"]
    assert complete(bash_script, ["ccl", "emit", "msccl", "--target", ""]) == ["msccl", "rccl"]
    assert complete(bash_script, ["ccl", "emit", "msccl", "--tar"]) == ["--target"]
    assert "dgx-h100" in complete(bash_script, ["ccl", "synthesize", "-t", "dgx"])
    assert complete(bash_script, ["ccl", "topology", "show", "nd"]) == ["ndv2"]
    assert complete(bash_script, ["ccl", "bounds", "-c", "allr"]) == ["allreduce"]
    assert "multi-ring" in complete(bash_script, ["ccl", "synthesize", "-s", "m"])
    assert complete(bash_script, ["ccl", "completion", ""]) == ["bash", "zsh", "fish"]
    assert "--quiet" in complete(bash_script, ["ccl", "simulate", "ag.json", "--q"])
    (tmp_path / "ag.json").write_text("{}")
    assert complete(bash_script, ["ccl", "verify", "a"], cwd=tmp_path) == ["ag.json"]  # a FILE argument
    assert complete(bash_script, ["ccl", "simulate", "ag.json", "--size", ""], cwd=tmp_path) == []


def test_zsh_and_fish_scripts_name_every_command():
    tree = command_tree(build_parser())
    zsh, fish = script("zsh", build_parser()), script("fish", build_parser())
    assert zsh.startswith("#compdef ccl\n") and "compdef _ccl ccl" in zsh
    assert "complete -c ccl -f" in fish
    for c in tree:
        for name, _ in c.subcommands:
            assert f"'{name}:" in zsh
            assert f"-a {name} -d" in fish
    assert "-l target -r -f -a 'msccl rccl'" in fish
    for shell, text in (("zsh", zsh), ("fish", fish)):
        if shutil.which(shell):
            done = subprocess.run([shell, "-n"], input=text, capture_output=True, text=True)
            assert done.returncode == 0, (shell, done.stderr)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_function_finds_the_command_path(tmp_path):
    """The zsh function with the completion system's builtins stubbed to print what they get."""
    (tmp_path / "_ccl").write_text(script("zsh", build_parser()))
    program = """
compdef() { :; }
_describe() { local -a arr; arr=("${(@P)${@[-1]}}"); print -r -- "${(j: :)${(@)arr%%:*}}"; }
compadd() { [[ $1 == -- ]] && shift; print -r -- "$*"; }
_files() { print -r -- "<files>"; }
source ./_ccl
t() { words=("$@"); CURRENT=$#words; _ccl; }
t ccl emit ''
t ccl emit msccl --target ''
t ccl verify a
t ccl import msccl --
"""
    done = subprocess.run(["zsh", "-f", "-c", program], capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["torch msccl", "msccl rccl", "<files>",
                                        "-h --help --json --quiet -q -o --output --topology -t --in-place"]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_commands_choices_and_topologies(tmp_path):
    (tmp_path / "ccl.fish").write_text(script("fish", build_parser()))

    def complete_fish(line: str) -> list[str]:
        done = subprocess.run(["fish", "--no-config", "-c", f"source ccl.fish; complete -C {shlex.quote(line)}"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=30)
        assert done.returncode == 0, done.stderr
        return [x.split("\t")[0] for x in done.stdout.splitlines()]

    assert complete_fish("ccl syn") == ["synthesize"]
    assert complete_fish("ccl emit msccl --target ") == ["msccl", "rccl"]
    assert "dgx-h100" in complete_fish("ccl synthesize -t dgx")
    assert complete_fish("ccl verify ccl.f") == ["ccl.fish"]


def test_completion_command_is_deterministic(capsys):
    code, out, _ = run(capsys, "completion", "bash")
    assert code == 0 and out == script("bash", build_parser())
    code, out, _ = run(capsys, "completion", "zsh", "--json")
    assert json.loads(out) == {"shell": "zsh", "script": script("zsh", build_parser())}


# ---------------------------------------------------------------------- --quiet
def test_quiet_silences_solver_progress_and_restores_the_environment(capsys, monkeypatch):
    monkeypatch.delenv("CCL_QUIET", raising=False)
    argv = ["synthesize", "-t", "ring:4", "-c", "allgather", "-s", "milp", "--size", "1MiB"]
    code, loud, err = run(capsys, *argv)
    assert code == 0 and "ccl: " in err  # the MILP pipeline says how each stage went
    code, out, err = run(capsys, *argv, "-q")
    assert code == 0 and err == "" and out.splitlines()[0] == loud.splitlines()[0]
    assert "CCL_QUIET" not in os.environ
    monkeypatch.setenv("CCL_QUIET", "1")
    code, _, err = run(capsys, *argv)
    assert code == 0 and err == ""


def test_quiet_silences_packing_progress(capsys, monkeypatch):
    import solvers.packing as packing

    class SlowClock:  # every reading a minute later: the packing solver speaks after a second
        now = 0.0

        def perf_counter(self) -> float:
            SlowClock.now += 60.0
            return SlowClock.now

        def __getattr__(self, name: str):  # deadlines and the rest: the real clock
            import time

            return getattr(time, name)

    monkeypatch.setattr(packing, "time", SlowClock())
    monkeypatch.delenv("CCL_QUIET", raising=False)
    argv = ["synthesize", "-t", "ring:8", "-c", "allgather", "-s", "packing", "--size", "1GiB"]
    code, _, err = run(capsys, *argv)
    assert code == 0 and "ccl: packing: " in err
    code, _, err = run(capsys, *argv, "--quiet")
    assert code == 0 and err == ""


def test_quiet_silences_exact_solver_progress(capsys, monkeypatch):
    monkeypatch.setattr(progress_mod, "PIPE_INTERVAL", 0.0)  # every line, not one a second
    monkeypatch.delenv("CCL_QUIET", raising=False)
    argv = ["synthesize", "-t", "ring:4", "-c", "allgather", "-s", "smt"]
    code, _, err = run(capsys, *argv)
    assert code == 0 and "ccl: smt: " in err
    code, _, err = run(capsys, *argv, "-q")
    assert code == 0 and err == ""


def test_json_output_stays_clean_of_the_milp_solver_banner():
    """HiGHS prints a banner on the process's stdout from C++; --json must still be one object."""
    done = subprocess.run([sys.executable, "-m", "ccl.cli", "synthesize", "-t", "ring:4", "-c", "allgather",
                           "-s", "milp", "--size", "1MiB", "--json"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CCL_QUIET": ""})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "ok"


# ---------------------------------------------------------------------- the progress line
class FakeStream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pipe_prints_plain_lines_at_most_once_a_second():
    stream, clock = FakeStream(tty=False), Clock()
    p = Progress(stream, quiet=False, clock=clock)
    p.update("starting")  # within the first second: quick commands stay silent
    assert stream.getvalue() == ""
    clock.now += 2.0
    p.update("[1/4] synthesizing ring", 0.25)
    clock.now += 0.5
    p.update("[2/4] synthesizing packing", 0.5)  # half a second later: held back
    clock.now += 0.6
    p.update("[3/4] synthesizing smt", 0.75)
    p.close()
    assert stream.getvalue() == ("ccl: [1/4] synthesizing ring (25%, ETA 0:06)\n"
                                 "ccl: [3/4] synthesizing smt (75%, ETA 0:01)\n")
    assert "\x1b" not in stream.getvalue() and "\r" not in stream.getvalue()


def test_terminal_redraws_one_line_with_bar_and_eta():
    stream, clock = FakeStream(tty=True), Clock()
    p = Progress(stream, quiet=False, clock=clock)
    p.update("planning")
    assert stream.getvalue() == "\r\x1b[Kccl: [0:00]  planning"
    clock.now += 10
    p.update("[1/4] synthesizing ring", 0.25)
    assert stream.getvalue().endswith("\r\x1b[Kccl: [#####---------------]  25% ETA 0:30  [1/4] synthesizing ring")
    clock.now += 0.01
    p.update("[2/4] too soon", 0.5)  # redraws at most ten times a second
    assert "too soon" not in stream.getvalue()
    p.close()
    assert stream.getvalue().endswith("\r\x1b[K") and "\n" not in stream.getvalue()


def test_terminal_line_is_cut_to_the_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    stream = FakeStream(tty=True)
    Progress(stream, quiet=False, clock=Clock()).update("x" * 100, 0.5)
    assert len(stream.getvalue().split("\r\x1b[K")[-1]) == 39


def test_quiet_progress_writes_nothing(monkeypatch):
    for tty in (True, False):
        stream, clock = FakeStream(tty), Clock()
        p = Progress(stream, quiet=True, clock=clock)
        clock.now += 5
        p.update("work", 0.5)
        p.close()
        assert stream.getvalue() == ""
    monkeypatch.setenv("CCL_QUIET", "1")
    assert Progress(FakeStream(True)).quiet
    monkeypatch.setenv("CCL_QUIET", "0")
    assert not Progress(FakeStream(True)).quiet


def test_other_stderr_lines_erase_and_redraw_the_bar(monkeypatch):
    err, out = FakeStream(tty=True), FakeStream(tty=True)
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    p = Progress(quiet=False, clock=Clock())
    p.update("tuning", 0.5)
    print("ccl: packing: 4 stages", file=sys.stderr)
    assert err.getvalue().endswith("\r\x1b[Kccl: packing: 4 stages\n\r\x1b[Kccl: [##########----------]  50% "
                                   "ETA -:--  tuning")
    print("ok: the report")  # the report erases the bar first, and it stays erased
    assert err.getvalue().endswith("tuning\r\x1b[K") and out.getvalue() == "ok: the report\n"
    progress_mod.erase_all()
    assert sys.stderr is err and sys.stdout is out


def test_eta_and_durations():
    assert format_duration(7) == "0:07" and format_duration(65) == "1:05" and format_duration(3723) == "1:02:03"
    assert bar_text(0.0, 5.0, width=10) == "[----------]   0% ETA -:--"
    assert bar_text(0.5, 0.5, width=10) == "[#####-----]  50% ETA -:--"  # too early to tell
    assert bar_text(0.5, 30.0, width=10) == "[#####-----]  50% ETA 0:30"
    assert bar_text(1.2, 30.0, width=10) == "[##########] 100% ETA 0:00"
