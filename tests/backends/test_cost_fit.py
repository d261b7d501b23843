"""The cost model's fit (``backends.cost.fit``) and a user's calibration: nccl-tests output priced
by a known (perturbed) calibration is fitted back, the parameters that show in the runs are
recovered and the rest stay at the prior; the calibration file round-trips; CCL_CALIBRATION
switches the model every command prices with, and a bad file is a one-line error naming it."""

from __future__ import annotations

import json

import pytest

import topologies
from backends.cost import fit
from backends.cost.calibration import ENVIRONMENT, calibration, from_json, shipped
from backends.cost.machine import Machine
from ccl.compiler.calibrate import PRIOR_WEIGHT, fit_machine, parse_nccl_tests
from ccl.core.errors import InputError
from ccl.core.report import bus_factor

SWEEP = [2**e for e in range(3, 31)]  # 8 B .. 1 GiB, as nccl-tests -b 8 -e 1G -f 2
TESTS = {"allreduce": "all_reduce", "allgather": "all_gather"}


def perturbed(changes: dict[str, float]) -> fit.Calibration:
    """The shipped calibration with ``changes`` (FITTED names -> values)."""
    cal = shipped()
    names = list(changes)
    return fit.with_vector(cal, [changes[n] for n in names], names, cal)


def truth() -> fit.Calibration:
    """A machine unlike the shipped model: slower NVLink and switch, launches 30% slower."""
    cal = shipped()
    return perturbed({"link_efficiency.hopper": 0.70, "nvls_efficiency.hopper": 0.60,
                      **{f"launch_us.{p}": cal.launch_us[p] * 1.3 for p in ("LL", "LL128", "Simple")}})


def nccl_tests(kind: str, spec: str, cal: fit.Calibration, sizes: list[int] = SWEEP) -> str:
    """What nccl-tests prints for ``kind`` on ``spec`` if the machine ran as ``cal`` prices it
    (times rounded to 0.01 us as nccl-tests prints them)."""
    topo = topologies.build(spec)
    machine = Machine.of(topo)
    n = topo.n_ranks
    lines = [f"# Collective test starting: {TESTS[kind]}_perf",
             f"# nThread 1 nGpus {n} minBytes {sizes[0]} maxBytes {sizes[-1]} step: 2(factor) warmup iters: 5 "
             "iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid   4242 on     node01 device {r:2d} [0x{r:02x}] NVIDIA H100 80GB HBM3"
              for r in range(n)]
    lines += ["#", "#                                                              out-of-place                       "
              "in-place", "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
              "time   algbw   busbw #wrong", "#        (B)    (elements)                               (us)  (GB/s)  "
              "(GB/s)            (us)  (GB/s)  (GB/s)"]
    for s in sizes:
        row = fit.Row(id=str(s), group="g", machine=machine, kind=kind, size=float(s), measured_us=1.0)
        t = round(fit.predict(row, cal)[0], 2)
        alg = s / t / 1e3
        bus = alg * bus_factor(kind, n)
        lines.append(f"{s:12d} {s // 4:13d}     float     sum      -1 {t:8.2f} {alg:7.2f} {bus:7.2f}      0 "
                     f"{t:8.2f} {alg:7.2f} {bus:7.2f}      0")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 123.456", "#"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def fitted():
    """Allreduce and allgather sweeps of one DGX H100 priced by ``truth()``, fitted from the
    shipped calibration (the allreduce's large calls run NVLS, the allgather's Ring: together
    they show both efficiencies)."""
    topo = topologies.build("dgx-h100:1")
    sweeps = []
    rows = []
    for kind in ("allreduce", "allgather"):
        sweep = parse_nccl_tests(nccl_tests(kind, "dgx-h100:1", truth()), f"{kind}.txt")
        sweeps.append(sweep)
        rows += [fit.Row(id=f"{kind}:{r.line}", group=kind, machine=Machine.of(topo), kind=kind,
                         size=float(r.size), measured_us=r.time_us) for r in sweep.runs]
    names = fit.applicable(rows)
    cal = fit.fit(rows, shipped(), names=names, prior_weight=PRIOR_WEIGHT)
    return rows, names, cal


def _errors(rows, cal):
    return [abs(fit.predict(r, cal)[0] / r.measured_us - 1) for r in rows]


def test_applicable_parameters_are_the_machines_own(fitted):
    _, names, _ = fitted
    assert "link_efficiency.hopper" in names and "nvls_efficiency.hopper" in names
    assert "launch_us.LL" in names and "fill_bytes" in names
    for other in ("link_efficiency.blackwell", "link_efficiency.ampere", "nvls_efficiency.blackwell",
                  "latency_scale.ampere", "net_efficiency", "fabric_latency_us.aws-efa", "call_us.torch-nccl",
                  "call_us.rccl", "graph_launch_share"):
        assert other not in names


def test_fit_recovers_the_perturbed_parameters(fitted):
    rows, _, cal = fitted
    before, after = _errors(rows, shipped()), _errors(rows, cal)
    assert sorted(before)[len(before) // 2] > 0.10  # the shipped model is off on this machine
    assert sorted(after)[len(after) // 2] < 0.01 and max(after) < 0.06
    assert cal.link_efficiency["hopper"] == pytest.approx(0.70, abs=0.02)
    assert cal.nvls_efficiency["hopper"] == pytest.approx(0.60, abs=0.02)
    # launch and per-hop latency trade off at one GPU count: what a small call costs is recovered,
    # and the LL launch moves most of the way toward the truth
    small = next(r for r in rows if r.kind == "allreduce" and r.size == 8)
    assert fit.predict(small, cal)[0] == pytest.approx(fit.predict(small, truth())[0], rel=0.01)
    launch = shipped().launch_us["LL"]
    assert cal.launch_us["LL"] - launch > 0.5 * (truth().launch_us["LL"] - launch)


def test_parameters_the_rows_do_not_constrain_stay(fitted):
    _, _, cal = fitted
    prior = shipped()
    assert cal.link_efficiency["blackwell"] == prior.link_efficiency["blackwell"]
    assert cal.net_efficiency == prior.net_efficiency
    assert dict(cal.call_us) == dict(prior.call_us)
    assert dict(cal.fabric_latency_us) == dict(prior.fabric_latency_us)
    assert cal.hop_us["pcie"]["LL"] / prior.hop_us["pcie"]["LL"] == pytest.approx(
        cal.hop_us["nvlink"]["LL"] / prior.hop_us["nvlink"]["LL"])  # a hop scale scales every class


def test_prior_holds_a_parameter_the_rows_barely_see():
    """An allreduce sweep on one H100 node runs NVLS at large sizes: the unicast link efficiency
    barely shows; runs the prior prices exactly move no fitted parameter."""
    topo = topologies.build("dgx-h100:1")
    sweep = parse_nccl_tests(nccl_tests("allreduce", "dgx-h100:1", shipped()), "same.txt")
    rows = [fit.Row(id=str(r.line), group="g", machine=Machine.of(topo), kind="allreduce", size=float(r.size),
                    measured_us=r.time_us) for r in sweep.runs]
    cal = fit.fit(rows, shipped(), names=fit.applicable(rows), prior_weight=PRIOR_WEIGHT)
    for name, value in zip(fit.applicable(rows), fit.vector(cal, fit.applicable(rows))):
        prior = fit.vector(shipped(), [name])[0]
        assert value == pytest.approx(prior, rel=0.02), name  # runs the prior prices exactly: nothing moves


def test_fit_machine_reports_before_and_after(tmp_path):
    topo = topologies.build("dgx-h100:1")
    sweep = parse_nccl_tests(nccl_tests("allgather", "dgx-h100:1", truth()), "ag.txt")
    cal, report = fit_machine([sweep], topo, "allgather")
    assert report["generation"] == "hopper" and report["runtime"] == "nccl" and report["prior"] == "shipped"
    assert len(report["rows"]) == len(SWEEP)
    assert report["error"]["after"]["median"] < report["error"]["before"]["median"] / 10
    assert report["parameters"]["link_efficiency.hopper"]["after"] == pytest.approx(0.70, abs=0.02)
    from ccl.compiler.calibrate import calibration_file

    data = calibration_file(cal, report)
    back = from_json(json.loads(json.dumps(data)), "written")
    assert back.link_efficiency["hopper"] == pytest.approx(cal.link_efficiency["hopper"], abs=1e-4)
    assert "ccl probe --nccl-tests" in back.sources["link_efficiency"]
    assert back.sources["net_efficiency"] == shipped().sources["net_efficiency"]  # not fitted: its own source


# ---------------------------------------------------------------------- reading nccl-tests
GOOD_ROW = "        1024           256     float     sum      -1    20.00    0.05    0.09      0    20.00    0.05    0.09      0"


@pytest.mark.parametrize("row, needle", [
    ("        1024           256     float     sum      -1    20.00    0.05    0.09      0", "expected an nccl-tests row of 13 columns"),
    ("        1x24           256     float     sum      -1    20.00    0.05    0.09      0    20.00    0.05    0.09      0", "size (bytes): expected a whole number"),
    ("        1024           256     float     sum      -1      nan    0.05    0.09      0    20.00    0.05    0.09      0", "out-of-place time (us): expected a finite number"),
    ("        1024           256     float     sum      -1    -3.00    0.05    0.09      0    20.00    0.05    0.09      0", "not negative"),
    ("        1024           256     float     sum      -1     0.00    0.05    0.09      0    20.00    0.05    0.09      0", "must be positive"),
    ("        1024           256     float     sum      -1    20.00    0.05    0.09      3    20.00    0.05    0.09      0", "wrong results"),
    ("        1024           256     float     sum      -1    20.00    9.05    0.09      0    20.00    0.05    0.09      0", "is not size / time"),
])
def test_malformed_row_names_file_and_line(row, needle):
    text = "# nThread 1 nGpus 8\n" + GOOD_ROW + "\n" + row + "\n"
    with pytest.raises(InputError) as err:
        parse_nccl_tests(text, "runs.txt")
    message = str(err.value)
    assert message.startswith("runs.txt:3: ") and needle in message and "\n" not in message


def test_reading_tolerates_comments_summary_and_unvalidated_runs():
    text = ("# nccl-tests header\n\n" + GOOD_ROW.replace("      0", "    N/A") + "\n"
            "           0             0     float     sum      -1     5.00    0.00    0.00      0     5.00    0.00    0.00      0\n"
            "Avg bus bandwidth    : 0.09\n# Out of bounds values : 0 OK\n")
    sweep = parse_nccl_tests(text, "runs.txt")
    assert [(r.line, r.size, r.time_us) for r in sweep.runs] == [(3, 1024, 20.0)]  # a 0-byte call is left out
    assert sweep.ranks is None and sweep.collective is None and not sweep.graph


def test_reading_limits_rows_and_needs_one():
    with pytest.raises(InputError, match=r"runs.txt:4: more than"):
        parse_nccl_tests("\n".join([GOOD_ROW] * 5), "runs.txt", budget=3)
    with pytest.raises(InputError, match=r"^runs.txt: no nccl-tests rows"):
        parse_nccl_tests("# only comments\n", "runs.txt")


# ---------------------------------------------------------------------- CCL_CALIBRATION
def test_environment_switches_the_calibration(tmp_path, monkeypatch):
    path = tmp_path / "mine.json"
    data = truth().to_json()
    path.write_text(json.dumps(data))
    monkeypatch.setenv(ENVIRONMENT, str(path))
    assert calibration().link_efficiency["hopper"] == pytest.approx(0.70)
    monkeypatch.delenv(ENVIRONMENT)
    assert calibration() is shipped()


@pytest.mark.parametrize("content, needle", [
    (None, "cannot read the calibration"),
    ("{not json", "invalid JSON"),
    ('{"format": "other"}', "not a cost calibration"),
    ("BAD_EFFICIENCY", "efficiency hopper must be in (0, 1]"),
    ("BAD_LAUNCH", "launch_us.LL must be a finite number"),
])
def test_bad_calibration_file_is_one_line_naming_it(tmp_path, monkeypatch, content, needle):
    path = tmp_path / "bad.json"
    if content is not None:
        data = shipped().to_json()
        if content == "BAD_EFFICIENCY":
            data["parameters"]["link_efficiency"]["hopper"] = 1.5
            content = json.dumps(data)
        elif content == "BAD_LAUNCH":
            data["parameters"]["launch_us"]["LL"] = -1.0
            content = json.dumps(data)
        path.write_text(content)
    monkeypatch.setenv(ENVIRONMENT, str(path))
    with pytest.raises(InputError) as err:
        calibration()
    assert f"{ENVIRONMENT}={path}" in str(err.value) and needle in str(err.value) and "\n" not in str(err.value)
