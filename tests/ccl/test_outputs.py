"""No lost files (issue 15, deliverable 2): no command overwrites one of its inputs, writes two
outputs to one file, replaces a device, pipe or folder, or lets two requests share a file; an
existing file keeps its permissions; several outputs are written all or none.

Every case runs the CLI in-process (``ccl.cli.main``) in ``tmp_path`` and checks the exit code,
the one-line message and that the files involved are exactly as they were.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
from pathlib import Path

import pytest

from ccl.cli import build_parser, main
from ccl.core.errors import InputError
from ccl.core.files import batch, write_all, write_text_atomic

RING = """from basic import ring
algorithm rg(n = 4) implements allgather on ring(n) {
  for s in 0..n-1, r in 0..n {
    copy output[(r - s) % n] from r to (r + 1) % n at step s
  }
}
"""


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(*paths: Path) -> list[tuple[bytes, int, int]]:
    """Contents, mode and inode of each file: all must survive a refused command."""
    out = []
    for p in paths:
        st = os.lstat(p)
        out.append((p.read_bytes(), stat.S_IMODE(st.st_mode), st.st_ino))
    return out


def refused(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert err.startswith("ccl: bad input: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


@pytest.fixture(scope="module")
def schedule_text(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("alg") / "in.json"
    assert main(["synthesize", "-t", "ring:4", "-c", "allgather", "-s", "ring", "-o", str(path), "-q"]) == 0
    return path.read_bytes()


@pytest.fixture
def work(tmp_path, schedule_text, monkeypatch):
    """A folder with a schedule (in.json, mode 640), a description with a hand-written
    algorithm (rg.ccl), one with a request (req.ccl) and measurements (m.json); the cwd."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.json").write_bytes(schedule_text)
    (tmp_path / "rg.ccl").write_text(RING + "verify rg(4)\n")
    (tmp_path / "req.ccl").write_text("from basic import ring\nsynthesize allgather on ring(4) with ring\n")
    (tmp_path / "m.json").write_text("{}\n")
    for name in ("in.json", "rg.ccl", "req.ccl", "m.json"):
        os.chmod(tmp_path / name, 0o640)
    return tmp_path


# ---------------------------------------------------------------------- an output is an input
SELF_OVERWRITES = [
    ("emit", "torch", "in.json", "-o", "in.json"),
    ("emit", "msccl", "in.json", "-o", "in.json"),
    ("simulate", "in.json", "--size", "1MiB", "--trace", "in.json"),
    ("simulate", "in.json", "--size", "1MiB", "--plot", "in.json"),
    ("simulate", "in.json", "--size", "1KiB,1MiB", "--plot", "in.json"),
    ("check", "rg.ccl", "-o", "rg.ccl"),
    ("synthesize", "req.ccl", "-o", "req.ccl"),
    ("synthesize", "-t", "in.json", "-c", "allgather", "-s", "ring", "-o", "in.json"),
    ("synthesize", "-t", "rg.ccl:ring:4", "-c", "allgather", "-s", "ring", "-o", "rg.ccl"),
    ("compare", "-t", "in.json", "-c", "allgather", "--size", "1MiB", "--plot", "in.json"),
    ("probe", "--from", "m.json", "-o", "m.json"),
    ("probe", "--from", "m.json", "--measurements", "m.json"),
]


@pytest.mark.parametrize("argv", SELF_OVERWRITES, ids=lambda a: " ".join(a))
def test_an_output_that_is_an_input_is_refused(capsys, work, argv):
    files = [work / n for n in ("in.json", "rg.ccl", "req.ccl", "m.json")]
    before = snapshot(*files)
    code, out, err = run(capsys, *argv, "-q")
    refused(code, err, "is the input file", "would overwrite the input")
    assert out == ""
    assert snapshot(*files) == before
    assert sorted(p.name for p in work.iterdir()) == ["in.json", "m.json", "req.ccl", "rg.ccl"]


def test_import_msccl_refuses_to_overwrite_its_xml(capsys, work):
    assert run(capsys, "emit", "msccl", "in.json", "-o", "x.xml", "-q")[0] == 0
    before = snapshot(work / "x.xml")
    code, _, err = run(capsys, "import", "msccl", "x.xml", "-o", "x.xml")
    refused(code, err, "-o 'x.xml' is the input file 'x.xml'")
    assert snapshot(work / "x.xml") == before


@pytest.mark.parametrize("alias", ["./in.json", "abs", "link", "hard"])
def test_every_name_of_the_input_counts(capsys, work, alias):
    if alias == "abs":
        name = str(work / "in.json")
    elif alias == "link":
        name = "link.json"
        os.symlink("in.json", work / name)
    elif alias == "hard":
        name = "hard.json"
        os.link(work / "in.json", work / name)
    else:
        name = alias
    before = snapshot(work / "in.json")
    code, _, err = run(capsys, "emit", "torch", "in.json", "-o", name)
    refused(code, err, "the input", "in.json")
    assert snapshot(work / "in.json") == before
    if alias == "link":
        assert os.path.islink(work / name)


def test_a_description_s_imports_are_inputs(capsys, work):
    (work / "lib.ccl").write_text(RING)
    (work / "main.ccl").write_text('from "lib.ccl" import rg\nverify rg(4)\n')
    before = snapshot(work / "lib.ccl")
    code, _, err = run(capsys, "check", "main.ccl", "-o", "lib.ccl")
    refused(code, err, "-o 'lib.ccl' is the input file")
    assert snapshot(work / "lib.ccl") == before


# ---------------------------------------------------------------------- two outputs, one file
@pytest.mark.parametrize("argv, words", [
    (("simulate", "in.json", "--size", "1MiB", "--trace", "t.json", "--plot", "t.json"),
     ("--trace and --plot both write 't.json'",)),
    (("simulate", "in.json", "--size", "1MiB", "--trace", "t.json", "--plot", "./t.json"),
     ("--trace and --plot both write",)),
    (("probe", "--from", "m.json", "-o", "p.ccl", "--measurements", "p.ccl"),
     ("-o and --measurements both write 'p.ccl'",)),
], ids=["trace=plot", "trace=./plot", "probe"])
def test_two_outputs_that_are_one_file_are_refused(capsys, work, argv, words):
    code, _, err = run(capsys, *argv)
    refused(code, err, *words)
    assert not (work / "t.json").exists() and not (work / "p.ccl").exists()


def test_trace_and_plot_through_a_symlink_are_one_file(capsys, work):
    (work / "t.json").write_text("keep\n")
    os.symlink("t.json", work / "alias.png")
    code, _, err = run(capsys, "simulate", "in.json", "--size", "1MiB", "--trace", "t.json", "--plot", "alias.png")
    refused(code, err, "both write 'alias.png' (the same file as 't.json')")
    assert (work / "t.json").read_text() == "keep\n"


def test_two_requests_mapping_to_one_file_are_refused_before_solving(capsys, work):
    (work / "two.ccl").write_text('from basic import ring\nsynthesize allgather on ring(4) with ring as "a/b"\n'
                                  'synthesize allgather on ring(4) with ring as "a_b"\n')
    (work / "out").mkdir()
    code, _, err = run(capsys, "synthesize", "two.ccl", "-o", "out")
    refused(code, err, "request 'a/b' and request 'a_b' both write", "a_b.json")
    assert list((work / "out").iterdir()) == []
    code, out, err = run(capsys, "synthesize", "two.ccl", "-o", "out", "--request", "a/b", "--json")
    assert code == 2 and "is a folder" in err  # one request: -o names its file


def test_a_save_dir_file_that_is_the_input_is_refused(capsys, work):
    (work / "d").mkdir()
    topo = work / "d" / "ring.json"  # `compare --save-dir d` names the ring solver's schedule d/ring.json
    assert main(["topology", "show", "ring:4", "--json"]) == 0
    topo.write_text(capsys.readouterr().out)
    before = snapshot(topo)
    code, _, err = run(capsys, "compare", "-t", topo, "-c", "allgather", "--size", "1MiB", "--save-dir", "d", "-q")
    refused(code, err, "--save-dir file", "is the input file", "give another --save-dir")
    assert snapshot(topo) == before
    assert [p.name for p in (work / "d").iterdir()] == ["ring.json"]


# ---------------------------------------------------------------------- not a regular file
@pytest.mark.parametrize("device", ["/dev/full", "/dev/null"])
def test_a_device_is_refused_and_left_a_device(capsys, work, device):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    code, _, err = run(capsys, "emit", "torch", "in.json", "-o", device)
    refused(code, err, f"-o '{device}'", "character device, not a regular file")
    assert stat.S_ISCHR(os.stat(device).st_mode)
    code, _, err = run(capsys, "simulate", "in.json", "--size", "1MiB", "--trace", device)
    refused(code, err, "--trace", "character device")
    assert stat.S_ISCHR(os.stat(device).st_mode)


def test_a_pipe_a_folder_and_a_missing_folder_are_refused(capsys, work):
    os.mkfifo(work / "fifo")
    code, _, err = run(capsys, "synthesize", "-t", "ring:4", "-c", "allgather", "-s", "ring", "-o", "fifo")
    refused(code, err, "is a pipe")
    assert stat.S_ISFIFO(os.stat(work / "fifo").st_mode)
    (work / "dir").mkdir()
    code, _, err = run(capsys, "emit", "torch", "in.json", "-o", "dir")
    refused(code, err, "-o 'dir': it is a folder")
    code, _, err = run(capsys, "emit", "torch", "in.json", "-o", "nowhere/x.py")
    refused(code, err, "does not exist")


@pytest.mark.parametrize("name, words", [
    ("a\0b", "NUL character"),
    ("x" * 300, "File name too long"),
    ("loop", "Too many levels of symbolic links"),
    ("in.json/x", "Not a directory"),
], ids=["nul", "long", "loop", "under-a-file"])
def test_impossible_output_names_are_refused_before_work(capsys, work, name, words):
    os.symlink("loop", work / "loop")
    code, _, err = run(capsys, "emit", "torch", "in.json", "-o", name)
    refused(code, err, words)


def test_save_dir_naming_a_file_is_exit_2(capsys, work):
    before = snapshot(work / "in.json")
    for argv in (("pareto", "-t", "ring:4", "-c", "allgather", "--max-chunks", "1"),
                 ("pareto", "-s", "packing", "-t", "ring:4", "-c", "allgather"),
                 ("compare", "-t", "ring:4", "-c", "allgather", "--size", "1MiB")):
        code, _, err = run(capsys, *argv, "--save-dir", "in.json")
        refused(code, err, "--save-dir 'in.json' is a regular file, not a folder")
    assert snapshot(work / "in.json") == before


def test_the_core_writer_never_replaces_a_device(tmp_path):
    os.symlink("/dev/full", tmp_path / "full")
    for target in ("/dev/full", tmp_path / "full"):
        with pytest.raises(InputError, match="character device"):
            write_text_atomic(target, "x")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode) and os.path.islink(tmp_path / "full")


# ---------------------------------------------------------------------- permissions
def test_a_replaced_file_keeps_its_mode(capsys, work):
    out = work / "out.json"
    out.write_text("old\n")
    os.chmod(out, 0o600)
    code, _, err = run(capsys, "synthesize", "-t", "ring:4", "-c", "allgather", "-s", "ring", "-o", out, "-q")
    assert code == 0, err
    assert json.loads(out.read_text())["format"] == "ccl-algorithm"
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    os.chmod(out, 0o751)
    write_text_atomic(out, "new\n")
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o751 and out.read_text() == "new\n"


def test_a_new_file_gets_the_umask_s_mode(tmp_path):
    old = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "new.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.txt").st_mode) == 0o640


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a file away")
def test_a_replaced_file_keeps_its_owner(tmp_path):
    path = tmp_path / "owned.txt"
    path.write_text("old")
    os.chown(path, 65534, 65534)
    write_text_atomic(path, "new")
    st = os.stat(path)
    assert (st.st_uid, st.st_gid) == (65534, 65534) and path.read_text() == "new"


def test_a_symlink_is_written_through(capsys, work):
    (work / "real.json").write_text("old\n")
    os.chmod(work / "real.json", 0o600)
    os.symlink("real.json", work / "link.json")
    code, _, err = run(capsys, "emit", "torch", "in.json", "-o", "link.json", "-q")
    assert code == 0, err
    assert os.path.islink(work / "link.json")
    assert (work / "real.json").read_text().startswith("#!")
    assert stat.S_IMODE(os.stat(work / "real.json").st_mode) == 0o600


# ---------------------------------------------------------------------- all or none
def test_a_failed_write_leaves_every_file_as_it_was(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")

    def fail(fh):
        fh.write("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(InputError, match="No space left on device; nothing written"):
        write_all([(a, lambda fh: fh.write("new a")), (b, fail)])
    assert a.read_text() == "old a" and not b.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]  # no temporary file left
    with pytest.raises(InputError, match="are the same file"):
        write_all([(a, lambda fh: fh.write("1")), (tmp_path / "." / "a.txt", lambda fh: fh.write("2"))])
    assert a.read_text() == "old a"


def test_a_batch_commits_on_success_and_discards_on_error(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    with pytest.raises(RuntimeError):
        with batch():
            write_text_atomic(a, "a")
            assert not a.exists()  # staged, not yet in place
            raise RuntimeError("the plot failed")
    assert list(tmp_path.iterdir()) == []
    with batch():
        write_text_atomic(a, "a")
        write_text_atomic(b, "b")
        with pytest.raises(InputError, match="same file"):
            write_text_atomic(a, "again")
    assert a.read_text() == "a" and b.read_text() == "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_several_requests_are_written_together(capsys, work):
    (work / "two.ccl").write_text('from basic import ring\nsynthesize allgather on ring(4) with ring as "x"\n'
                                  'synthesize allgather on ring(4) with ring as "y"\n')
    (work / "out").mkdir()
    code, _, err = run(capsys, "synthesize", "two.ccl", "-o", "out", "-q")
    assert code == 0, err
    assert sorted(p.name for p in (work / "out").iterdir()) == ["x.json", "y.json"]


# ---------------------------------------------------------------------- every command is guarded
OUTPUT_DESTS = {"output", "trace", "plot", "save_dir", "measurements"}
INPUT_DESTS = {"file", "files", "topology", "source", "sketch"}


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))
    if parser.get_default("func") is not None:
        yield path, parser


def test_every_option_that_writes_is_declared_with_the_command_s_inputs():
    checked = 0
    for path, parser in _commands(build_parser()):
        dests = {a.dest for a in parser._actions}
        writes = dests & OUTPUT_DESTS
        if not writes:
            continue
        spec = parser.get_default("_outputs")
        assert spec is not None, f"ccl {' '.join(path)} writes files but declares none (ccl.cli.outputs.declare)"
        declared = {d for group in (spec.files, spec.folders, spec.either) for d, _ in group}
        assert writes <= declared, (path, writes - declared)
        assert dests & INPUT_DESTS <= {d for d, _ in spec.inputs}, (path, dests & INPUT_DESTS)
        checked += 1
    assert checked >= 8
