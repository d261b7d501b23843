"""Faults on real gloo process groups: a peer killed mid-collective, a stalled peer (inside a
collective, between collectives, before the first one), ranks running mismatched schedules,
sizes or collectives. Every surviving rank raises a clear error naming itself and a peer
within the timeout (plus a little), nothing hangs, later calls fail at once with the first
error, and the group is destroyed cleanly (a new one works). ``ccl run`` with a worker killed
or stopped: exit 6 naming the rank, every process gone. The emitted torchrun script: a killed
worker ends it with an error within its ``--timeout``."""

from __future__ import annotations

import os
import signal
import time

import pytest

pytest.importorskip("torch")

from backends.torch.launch import Call, run_jobs  # noqa: E402
from ccl.core.errors import BackendError  # noqa: E402

SCENARIOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_scenarios.py")
TIMEOUT = 2.0
SLACK = 2.0  # seconds over the timeout a rank may take to report it
FAST = 1.0  # seconds a rank may take to see a peer die, or to fail a call on a failed group


def assert_clear(row: dict, rank: int, *, within: float) -> None:
    """A BackendError that names this rank and a peer, and what happened, in time."""
    assert row["error"] == "BackendError", row
    message = row["message"]
    assert message.startswith(f"rank {rank}:"), message
    assert "rank " in message[len(f"rank {rank}:"):], message  # the peer (or the group's check)
    assert any(word in message for word in ("timed out after", "lost rank", "waited", "failed in an earlier call")), \
        message
    assert row["seconds"] < within, row


def assert_renewed(row: dict) -> None:
    assert row["destroy"]["error"] is None and row["destroy"]["seconds"] < 5, row["destroy"]
    assert row["new_group"]["error"] is None and row["new_group_correct"], row


@pytest.mark.timeout(60)
def test_mismatches_stall_and_death_on_3_ranks(tmp_path) -> None:
    n, stalled = 3, 2
    calls = [Call(f"{SCENARIOS}:mismatches"),
             Call(f"{SCENARIOS}:stalled_dropin", (TIMEOUT, str(tmp_path / "store-b"))),
             Call(f"{SCENARIOS}:killed", (TIMEOUT,), final=True)]
    start = time.monotonic()
    with pytest.raises(BackendError) as info:
        run_jobs(n, calls, timeout=TIMEOUT, grace=5.0, deadline=40)
    elapsed = time.monotonic() - start
    error = info.value
    # the launcher names the rank that died, and what a survivor saw
    assert error.failed_rank == 2
    assert error.message.startswith("rank 2 died (exit code 3)"), error.message
    reports = error.reports
    assert reports[2][0] == "died"
    rows = {r: reports[r][1] for r in (0, 1)}
    assert all(reports[r][0] == "ok" for r in (0, 1)), {r: (k, str(v)[:2000]) for r, (k, v) in reports.items()}

    for rank, (mismatch, stall, death) in rows.items():
        # mismatched collectives, schedules, sizes: InputError at once, naming both sides; group usable
        assert mismatch["collective"]["error"] == "InputError"
        assert "run different schedules" in mismatch["collective"]["message"]
        assert "rank 0 runs an allreduce, rank 2 an allgather" in mismatch["collective"]["message"]
        assert mismatch["schedule"]["error"] == "InputError"
        assert "run different schedules" in mismatch["schedule"]["message"]
        assert mismatch["size"]["error"] == "InputError"
        assert "rank 2: 7 elements per part" in mismatch["size"]["message"]
        assert all(mismatch[k]["seconds"] < FAST for k in ("collective", "schedule", "size"))
        assert mismatch["after"]["error"] is None and mismatch["after_correct"]

        # a peer stalled inside an async call of ccl.torch: Work.wait raises; queued and later calls fail fast
        assert_clear(stall["first"], rank, within=TIMEOUT + SLACK)
        assert_clear(stall["queued"], rank, within=FAST)
        assert "failed in an earlier call" in stall["queued"]["message"]
        assert stall["queued_state"] == [True, False, "BackendError"]
        assert_clear(stall["later"], rank, within=FAST)
        assert "failed in an earlier call" in stall["later"]["message"]
        assert_renewed(stall)

        # a peer killed mid-collective: lost at once; later calls fail fast; the group is destroyed cleanly
        assert_clear(death["call"], rank, within=FAST + 1)
        assert "lost rank" in death["call"]["message"]
        assert_clear(death["later"], rank, within=FAST)
        assert death["destroy"]["error"] is None and death["destroy"]["seconds"] < 5
    # a survivor names the stalled rank it waited for
    assert any("timed out after 2 s" in rows[r][1]["first"]["message"] and f"rank {stalled}" in
               rows[r][1]["first"]["message"] for r in rows)
    assert elapsed < 45


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["inside", "between", "first"])
def test_stalled_peer_with_the_executor(tmp_path, where: str) -> None:
    n = 3
    [rows] = run_jobs(n, [Call(f"{SCENARIOS}:stalled_executor", (TIMEOUT, str(tmp_path / "store"), where))],
                      timeout=TIMEOUT)
    for rank in range(n - 1):
        row = rows[rank]
        assert_clear(row["call"], rank, within=TIMEOUT + SLACK)
        if where == "first":
            assert "the check before" in row["call"]["message"] and "did not join" in row["call"]["message"]
        assert_clear(row["later"], rank, within=FAST)
        assert "failed in an earlier call" in row["later"]["message"]
        assert_renewed(row)
    if where != "first":
        assert any("timed out after 2 s" in rows[r]["call"]["message"] and "rank 2" in rows[r]["call"]["message"]
                   for r in range(n - 1))
    assert_renewed(rows[n - 1])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_unchecked_sizes_that_differ_time_out_instead_of_aborting(tmp_path) -> None:
    """validate="never": gloo would abort the receiver on a message of the wrong size; the
    salted tags keep such messages from pairing, so every rank times out cleanly."""
    n = 3
    [rows] = run_jobs(n, [Call(f"{SCENARIOS}:unchecked_sizes", (TIMEOUT, str(tmp_path / "store")))],
                      timeout=TIMEOUT)
    for rank, row in enumerate(rows):
        assert_clear(row["call"], rank, within=TIMEOUT + SLACK)
        assert_clear(row["again"], rank, within=FAST)
        assert "failed in an earlier call" in row["again"]["message"]
        assert_renewed(row)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_size_changed_on_one_rank_after_validation(tmp_path) -> None:
    n = 3
    [rows] = run_jobs(n, [Call(f"{SCENARIOS}:size_changed_on_one_rank", (TIMEOUT, str(tmp_path / "store")))],
                      timeout=TIMEOUT)
    for rank, row in enumerate(rows):
        assert_clear(row["call"], rank, within=TIMEOUT + SLACK)
        assert_renewed(row)


# ---------------------------------------------------------------------- ccl run, the emitted script
def _children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(name))
    return out


def _descendants(pid: int) -> list[int]:
    out = []
    for child in _children(pid):
        out += [child, *_descendants(child)]
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _ranks_of(pid: int, n: int, pattern, limit: float = 60.0) -> dict[int, int]:
    """rank -> pid of the worker processes under ``pid``, found by ``pattern(child pid)``."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        found = {}
        for child in _descendants(pid):
            rank = pattern(child)
            if rank is not None:
                found[rank] = child
        if len(found) == n:
            return found
        time.sleep(0.1)
    raise AssertionError(f"the {n} workers did not start")


def _rank_by_log(pid: int) -> int | None:
    """``ccl run`` workers write to ``rank<r>.log``."""
    try:
        base = os.path.basename(os.readlink(f"/proc/{pid}/fd/1"))
    except OSError:
        return None
    return int(base[4:-4]) if base.startswith("rank") and base.endswith(".log") else None


def _ccl_run_with_a_fault(tmp_path, capsys, sig: int) -> tuple[int, str, float, list[int]]:
    """``ccl run`` in this process (its ranks come from the fork server earlier tests started);
    a thread sends ``sig`` to rank 1 a second into the timed iterations."""
    import threading

    import ccl
    from ccl.cli import main

    path = tmp_path / "ar.json"
    ccl.save(ccl.synthesize(ccl.problem("ring:3", "allreduce", solver="ring")).algorithm, str(path))
    seen: dict = {}

    def strike() -> None:
        try:
            ranks = _ranks_of(os.getpid(), 3, _rank_by_log)
            seen["ranks"] = list(ranks.values())
            time.sleep(1.0)
            seen["hit"] = time.monotonic()
            os.kill(ranks[1], sig)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            seen["error"] = exc

    thread = threading.Thread(target=strike, daemon=True)
    thread.start()
    code = main(["run", str(path), "--size", "64KiB", "--repeat", "1000000", "--timeout", str(TIMEOUT)])
    done = time.monotonic()
    thread.join(5)
    assert "error" not in seen, seen
    return code, capsys.readouterr().err, done - seen["hit"], seen["ranks"]


@pytest.mark.timeout(90)
def test_ccl_run_with_a_worker_killed(tmp_path, capsys) -> None:
    code, err, seconds, everyone = _ccl_run_with_a_fault(tmp_path, capsys, signal.SIGKILL)
    assert code == 6, err
    assert err.startswith("ccl: backend error: rank 1 died (killed by signal SIGKILL)"), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert seconds < TIMEOUT + 5
    time.sleep(0.2)
    assert not [p for p in everyone if _alive(p)]  # every rank is gone


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_ccl_run_with_a_worker_stopped(tmp_path, capsys) -> None:
    code, err, seconds, everyone = _ccl_run_with_a_fault(tmp_path, capsys, signal.SIGSTOP)
    assert code == 6, err
    assert err.startswith("ccl: backend error: rank 1 stalled"), err
    assert "timed out after 2 s" in err and "Traceback" not in err
    assert seconds < TIMEOUT + 3 + 5  # the survivors' timeout, the launcher's grace, start-up slack
    time.sleep(0.2)
    assert not [p for p in everyone if _alive(p)]


def _rank_by_env(pid: int) -> int | None:
    """torchrun workers have RANK in their environment."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read().split(b"\0")
    except OSError:
        return None
    return next((int(e[5:]) for e in env if e.startswith(b"RANK=")), None)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "stopped"])
def test_emitted_script_with_a_worker_killed_or_stopped(tmp_path, sig: int) -> None:
    """Under torchrun, the surviving rank of a generated script prints one error line and exits
    6 within --timeout (then torchrun stops the job: it gives a stopped worker 30 s)."""
    import subprocess
    import sys
    import threading

    import ccl
    from ccl import compiler

    script = tmp_path / "prog.py"
    alg = ccl.synthesize(ccl.problem("ring:2", "allreduce", solver="ring")).algorithm
    script.write_text(compiler.torch_script(alg, source="ar.json"))
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                             str(script), "--size", "64KiB", "--repeat", "1000000", "--timeout", str(TIMEOUT)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    timing = threading.Event()

    def drain() -> None:  # rank 0's table, read as it comes (a full pipe would block rank 0)
        for line in proc.stdout:
            if line.split()[:1] == ["1"]:
                timing.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        ranks = _ranks_of(proc.pid, 2, _rank_by_env, limit=120)
        assert timing.wait(120), "the script never reached its timed iterations"
        hit = time.monotonic()
        os.kill(ranks[1], sig)
        while _alive(ranks[0]) and time.monotonic() < hit + 60:
            time.sleep(0.05)
        survivor_done = time.monotonic() - hit
        if sig == signal.SIGSTOP:
            os.kill(ranks[1], signal.SIGKILL)  # spare torchrun its 30 s of SIGTERM grace
        proc.wait(timeout=90)
        reader.join(10)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(10)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode != 0
    assert survivor_done < TIMEOUT + 3, survivor_done
    lines = [line for line in err.splitlines() if line.startswith("rank 0:")]
    assert len(lines) == 1 and lines[0].startswith("rank 0: error: "), err
    assert "rank 1" in lines[0] or "peer" in lines[0], lines
    assert "[rank0]" not in err  # no traceback from the worker


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ccl_run_killed_outright_leaves_no_rank_running(tmp_path) -> None:
    """SIGKILL to the launcher itself (no cleanup code runs): the ranks see it and exit."""
    import subprocess
    import sys

    import ccl

    path = tmp_path / "ar.json"
    ccl.save(ccl.synthesize(ccl.problem("ring:3", "allreduce", solver="ring")).algorithm, str(path))
    proc = subprocess.Popen([sys.executable, "-m", "ccl.cli", "run", str(path), "--size", "64KiB", "--repeat",
                             "1000000", "--timeout", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _ranks_of(proc.pid, 3, _rank_by_log)
        everyone = _descendants(proc.pid)
        time.sleep(1.0)
    finally:
        proc.kill()
        proc.wait()
    end = time.monotonic() + 10
    while any(_alive(p) for p in everyone) and time.monotonic() < end:
        time.sleep(0.1)
    assert not [p for p in everyone if _alive(p)]


def test_the_launcher_blames_the_cause() -> None:
    """Which rank a failed launch names: one that died, else bad input, else (every failure a
    timeout) the stalled one, else the first to fail."""
    from backends.torch.processes import _launch_error

    timeout = "rank 0: timed out after 2 s waiting for the step 1 receive (4 B) from rank 2 (tag 1): ..."
    lost = "rank 1: lost rank 2 during the step 0 send (4 B) to rank 2 (tag 0): Connection reset by peer"
    died = ("died", "rank 2 died (killed by signal SIGKILL) without finishing")
    stalled = ("stalled", "rank 2 stalled: it did not finish or fail within 3 s of the first failure; stopped it")
    when = {0: 2.0, 1: 1.0, 2: 0.5}
    error = _launch_error({0: ("backend", timeout), 1: ("backend", lost), 2: died}, when)
    assert isinstance(error, BackendError) and error.failed_rank == 2
    assert error.message.startswith("rank 2 died (killed by signal SIGKILL)") and lost in error.message
    error = _launch_error({0: ("backend", timeout), 1: ("ok", []), 2: stalled}, when)
    assert error.failed_rank == 2 and error.message.startswith("rank 2 stalled") and timeout in error.message
    error = _launch_error({0: ("backend", timeout), 1: ("backend", lost), 2: stalled}, when)
    assert error.failed_rank == 1 and error.message.startswith(lost)  # a real failure, not only waiting
    error = _launch_error({0: ("backend", timeout), 1: ("input", "rank 1: bad size"), 2: stalled}, when)
    assert type(error).__name__ == "InputError" and error.failed_rank == 1
    assert error.reports[2] == stalled
    # rank 1 stalled; rank 2 timed out waiting for it and closed its connections, and rank 0,
    # losing rank 2, reported first: the cause is still the stalled rank
    waited = "rank 2: timed out after 2 s waiting for the step 0 receive (4 B) from rank 1 (tag 0): ..."
    follow = "rank 0: lost rank 2 during the step 1 receive (4 B) from rank 2 (tag 1): Connection closed by peer"
    error = _launch_error({0: ("backend", follow), 1: ("stalled", stalled[1].replace("rank 2", "rank 1")),
                           2: ("backend", waited)}, {0: 1.0, 2: 1.1})
    assert error.failed_rank == 1 and error.message.startswith("rank 1 stalled") and waited in error.message
