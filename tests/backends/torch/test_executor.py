"""The executor on real gloo process groups: every template schedule, lowered by the driver
(``ccl.compiler``) and run as the Program it lowers to, gives exactly torch's result (several
sizes, including 1 element and primes; in place and out of place; several dtypes and
reductions; fused and unfused lowerings), the torch calling conventions, and clean failures."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")

import dsl  # noqa: E402
import solvers  # noqa: E402
import topologies as T  # noqa: E402
from backends.torch.launch import Call, Job, run_jobs  # noqa: E402
from backends.torch.plain import to_plain  # noqa: E402
from ccl import InfeasibleError, InputError, Problem, Request, compiler, verify  # noqa: E402
from ccl.core.collective import ROOTED_KINDS, builtin  # noqa: E402

SIZES = (1, 13, 1031)  # elements per part: one, a small prime, a prime above every slot count
EXTRA = [("int64", "max"), ("int32", "sum"), ("bfloat16", "avg"), ("float64", "min"), ("int16", "band"),
         ("float16", "prod")]


TWO_LEVEL = """
from basic import ring
topology two_level(local, nodes) {      # rings joined through one NIC per node, on local rank 0
  name "ring{local}x{nodes}"
  node ring(local) x nodes { nic 0 : 10 GB/s, 2.6 us, host 20 GB/s }
  fabric switch
}
"""


def two_level(local: int, nodes: int):
    return dsl.load_string(TWO_LEVEL, "two_level.ccl").topology("two_level", local, nodes)


TOPOLOGIES = {2: [T.ring(2)], 3: [T.ring(3)], 4: [T.ring(4), two_level(2, 2)], 8: [T.build("dgx1"), two_level(4, 2)]}


def template_jobs(n: int, chunk_factors=(3,), extra: bool = False, modes=None) -> tuple[list[str], list[Job]]:
    """Every registered template on the topologies for n ranks, every collective it implements
    (rooted ones at the last rank), sizes of 1 element, a small prime and a prime above every
    slot count, in and out of place (``modes``: the (size, in place) pairs; default all six);
    with ``extra``, other dtypes and reductions."""
    modes = modes or [(unit, in_place) for unit in SIZES for in_place in (False, True)]
    labels, jobs = [], []
    for topo in TOPOLOGIES[n]:
        for name in solvers.TEMPLATES:
            info = solvers.SOLVERS[name]
            for kind in info.kinds:
                root = n - 1 if kind in ROOTED_KINDS else None
                for k in chunk_factors:
                    try:  # the driver's stages: synthesize (and verify), then lower (and verify)
                        result = compiler.synthesize(Problem(topo, builtin(kind, n, root), Request(name, chunks=k)))
                    except (InputError, InfeasibleError):
                        continue  # hierarchical on one node
                    spec = to_plain(compiler.program(result))
                    # in place: the Program lowered for in-place calls (what `ccl run --in-place`
                    # runs), correct in place with the runtimes' aliasing, so run without a copy
                    spec_ip = to_plain(compiler.program(result, in_place=True))
                    assert spec_ip["in_place_safe"], f"{name} {kind} k={k} on {topo.name}"
                    for unit, in_place in modes:
                        labels.append(f"{name} {kind} k={k} on {topo.name}, {unit} elements"
                                      f"{' in place' if in_place else ''}")
                        jobs.append(Job(spec_ip if in_place else spec, unit, in_place=in_place, seed=len(jobs),
                                        label=labels[-1]))
                    if extra and kind in ("allreduce", "reducescatter", "reduce"):
                        for dtype, op in EXTRA:
                            labels.append(f"{name} {kind} k={k} on {topo.name}, {dtype} {op}")
                            jobs.append(Job(spec, 29, dtype, op, seed=len(jobs), label=labels[-1]))
    return labels, jobs


def random_jobs(n: int, count: int) -> tuple[list[str], list[Job]]:
    """Random schedules (the Hypothesis generators of the lowering tests): scratch relays, inputs
    accumulated in place, staged receives, uneven pieces; lowered as they are by default and
    with every piece its own message on two channels (``fuse=False, channels=2``)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "ccl",
                        "test_lower.py")
    spec = importlib.util.spec_from_file_location("lowering_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    labels, jobs = [], []
    for seed in range(count):
        for make in (module.random_allgather, module.random_reducescatter):
            alg = make(n, 1 + seed % 3, seed)
            verify(alg)
            fused, split = to_plain(compiler.program(alg)), to_plain(compiler.program(alg, fuse=False, channels=2))
            for spec, unit, in_place, how in ((fused, 1, False, ""), (fused, 17, True, ""), (fused, 101, False, ""),
                                              (split, 17, False, ", unfused on 2 channels")):
                labels.append(f"{alg.name} k={1 + seed % 3}{how}, {unit} elements{' in place' if in_place else ''}")
                jobs.append(Job(spec, unit, in_place=in_place, seed=seed, label=labels[-1]))
    return labels, jobs


def assert_all_match(labels: list[str], results: list) -> None:
    wrong = [f"{label}: ranks {r.wrong_ranks} differ by {r.max_error:.3g}"
             for label, r in zip(labels, results) if r.correct is not True]
    assert not wrong, "\n".join(wrong[:20])
    assert len(results) > 100


SCENARIOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scenarios.py")


def test_templates_on_2_ranks_and_a_peer_that_dies():
    labels, jobs = template_jobs(2, chunk_factors=(1, 3))
    *results, died = run_jobs(2, jobs + [Call(f"{SCENARIOS}:dies", final=True)], timeout=60)
    assert_all_match(labels, results)
    assert died[1]["message"] == "exiting"
    assert died[0]["error"] == "BackendError" and "lost rank 1" in died[0]["message"], died[0]
    assert died[0]["seconds"] < 10


def test_templates_on_3_ranks_torch_conventions_and_clean_failures(tmp_path):
    labels, jobs = template_jobs(3, extra=True)
    more_labels, more_jobs = random_jobs(3, 6)
    labels, jobs = labels + more_labels, jobs + more_jobs
    calls = [Call(f"{SCENARIOS}:api", (str(tmp_path),)), Call(f"{SCENARIOS}:mismatches"),
             Call(f"{SCENARIOS}:absent", final=True)]
    *results, api, mismatches, absent = run_jobs(3, jobs + calls, timeout=60)
    assert_all_match(labels, results)
    assert list(api) == [[], [], []]
    for row in mismatches:
        assert row["world"]["error"] == "InputError"
        assert "is for 4 ranks but the process group has 3" in row["world"]["message"]
        assert row["dtype"]["error"] == "InputError" and "torch.float64" in row["dtype"]["message"]
        assert "rank 2" in row["dtype"]["message"]
        assert row["size"]["error"] == "InputError" and "13 elements per part" in row["size"]["message"]
        assert row["schedule"]["error"] == "InputError" and "run different schedules" in row["schedule"]["message"]
        assert row["after"]["ok"]
    for rank, row in enumerate(absent[:2]):
        assert row["error"] == "BackendError" and "timed out after 3 s" in row["message"], row
        assert "rank 2" in row["message"] and row["message"].startswith(f"rank {rank}:") and row["seconds"] < 15
    assert any("receive into" in row["message"] for row in absent[:2])


@pytest.mark.slow
def test_templates_on_4_ranks():
    labels, jobs = template_jobs(4, chunk_factors=(1, 3), modes=[(1, False), (13, True), (1031, False)])
    assert_all_match(labels, run_jobs(4, jobs, timeout=60))


@pytest.mark.slow
@pytest.mark.parametrize("n", [3, 4, 8])
def test_templates_with_every_chunk_factor(n):
    labels, jobs = template_jobs(n, chunk_factors=(1, 2, 3), extra=True)
    assert_all_match(labels, run_jobs(n, jobs, timeout=120))


def searched_jobs() -> tuple[list[str], list[Job]]:
    """Schedules from the searching solvers (exact z3, MILP, tree packing) on 4 ranks: the same check as the
    templates, on schedules no template produces (relays, uneven steps, merged transfers)."""
    ring, nodes = T.ring(4), two_level(2, 2)
    requests = [(ring, kind, Request("smt", chunks=k)) for kind in ("allgather", "reducescatter", "allreduce",
                                                                      "alltoall", "broadcast", "reduce")
                for k in (1, 2)]
    requests += [(topo, kind, Request(name, size=1 << 16, time_limit=10)) for name in ("milp", "teccl", "packing")
                 for topo in (ring, nodes) for kind in solvers.SOLVERS[name].kinds]
    labels, jobs = [], []
    for topo, kind, request in requests:
        root = 3 if kind in ROOTED_KINDS else None
        result = compiler.synthesize(Problem(topo, builtin(kind, 4, root), request))  # milp, teccl: judged
        spec = to_plain(compiler.program(result))
        for unit, in_place in ((1, False), (13, True), (1031, False)):
            labels.append(f"{request.solver} {kind} k={request.chunks} on {topo.name}, {unit} elements"
                          f"{' in place' if in_place else ''}")
            jobs.append(Job(spec, unit, in_place=in_place, seed=len(jobs), label=labels[-1]))
    return labels, jobs


@pytest.mark.slow
def test_searched_schedules_on_4_ranks():
    labels, jobs = searched_jobs()
    results = run_jobs(4, jobs, timeout=60)
    wrong = [f"{label}: ranks {r.wrong_ranks} differ by {r.max_error:.3g}"
             for label, r in zip(labels, results) if r.correct is not True]
    assert not wrong, "\n".join(wrong[:20])
    assert len(results) == len(labels) >= 3 * (12 + 20)
