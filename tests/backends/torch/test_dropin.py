"""``ccl.torch``, the drop-in executor, on real gloo process groups: async calls on data-parallel
subgroups of a larger world equal torch.distributed's, a schedule set serves each size with its
entry, and a tiny model trained with the DDP hook ends with the parameters plain DDP gives."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from backends.torch.launch import Call, run_jobs  # noqa: E402

SCENARIOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dropin_scenarios.py")


def check_subgroups(rows: tuple, n: int) -> None:
    for rank, row in enumerate(rows):
        assert row["problems"] == [], row["problems"]
        assert row["group_rank"] == rank // 2
        assert "implements allreduce, not broadcast" in row["errors"]["kind"]
        assert "no reducescatter schedule registered" in row["errors"]["unregistered"]
        assert "bound to another process group" in row["errors"]["group"]
        assert "must be contiguous" in row["errors"]["wait"]  # raised by the worker, on wait()


def check_ddp(rows: tuple) -> None:
    for row in rows:
        assert row["moved"] > 1e-3  # training changed the weights
        assert row["max_diff"] < 1e-5, row
        assert row["entries_run"] == [0, 1]  # buckets on both sides of the split


@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_ddp_hook_trains_like_plain_ddp(n: int) -> None:
    [rows] = run_jobs(n, [Call(f"{SCENARIOS}:ddp")], timeout=60)
    check_ddp(rows)


def test_async_calls_on_subgroups_of_4_ranks() -> None:
    [rows] = run_jobs(4, [Call(f"{SCENARIOS}:subgroups")], timeout=60)
    check_subgroups(rows, 4)


@pytest.mark.slow
def test_8_ranks_subgroups_and_ddp() -> None:
    sub, ddp = run_jobs(8, [Call(f"{SCENARIOS}:subgroups"), Call(f"{SCENARIOS}:ddp")], timeout=120)
    check_subgroups(sub, 8)
    check_ddp(ddp)


def test_import_ccl_does_not_import_torch() -> None:
    code = ("import sys, ccl; assert 'torch' not in sys.modules; import ccl.torch; "
            "assert 'torch' not in sys.modules; ccl.torch.Work; assert 'torch' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_set_entry_left_to_nccl_runs_torchs_own_collective() -> None:
    [rows] = run_jobs(2, [Call(f"{SCENARIOS}:native_entries")], timeout=60)
    for row in rows:
        assert row["problems"] == [], row["problems"]
        assert row["served"] == {kind: ["Executor", "Native"] for kind in ("allreduce", "allgather", "broadcast")}
