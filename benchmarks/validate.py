"""The cost model against published measurements: fit on part, validate on the rest.

    python benchmarks/validate.py            # predicted / measured per row, the error summary
    python benchmarks/validate.py --fit      # refit the parameters, write backends/cost/data/calibration.json
    python benchmarks/validate.py --json     # the same as one JSON object

Rows (``benchmarks/data/measurements.json``, a source per row) are published nccl-tests,
rccl-tests and torch benchmark runs on real machines. Each row that names a machine the
library has (``MACHINES`` maps the source's machine to a library spec) is predicted: NCCL's
(or RCCL's) pick for the collective, size and GPU count, priced by the calibrated model
(``backends.cost.nccl``), plus the runtime's per-call cost (torch's dispatch for the torch
benchmarks). Rows of a machine the library does not model, vendor slides and maintainers'
rough figures are listed as left out, with the reason.

The split is fixed: within each (machine, GPU count, tool) group the rows sorted by size
alternate between fitting and validation (the first fits). ``--fit`` minimizes the squared
log error over the fitting rows (each group weighs the same, so one long sweep does not drown
the rest) and writes the parameters; the validation rows' times are never seen by the fit. The
algorithms NCCL picked, where a source says (Ring/LL up to 1 MiB then NVLS on 8x H200, Ring at
4 GPUs), are facts of NCCL's behaviour the model must reproduce: every row's reported pick is a
constraint of the fit.
Results: ``benchmarks/results/validate.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import topologies  # noqa: E402
from backends.cost import fit as fit_  # noqa: E402
from backends.cost.calibration import CALIBRATION_FILE, Calibration, shipped  # noqa: E402
from backends.cost.machine import Machine  # noqa: E402
from ccl.core.collective import builtin  # noqa: E402
from ccl.core.report import bus_factor  # noqa: E402
from solvers.bounds import lower_bound  # noqa: E402

DATA = os.path.join(HERE, "data", "measurements.json")
RESULTS = os.path.join(HERE, "results")
GIB_PER_GB = 2**30 / 1e9

# Source machine -> (library spec with {gpus} for the GPUs in use, note). Specs approximate a
# machine the library does not ship by the nearest one with the same GPUs and network rate.
MACHINES: dict[str, tuple[str, str]] = {
    "dgx-h100:1": ("dgx-h100:1,gpus={gpus}", ""),
    "dgx-a100:1": ("dgx-a100:1,gpus={gpus}", ""),
    "hgx-h200:1": ("hgx-h200:1,gpus={gpus}", ""),
    "hgx-b200:1": ("hgx-b200:1,gpus={gpus}", ""),
    "hgx-b200:4": ("hgx-b200:4,netlat={aws-efa}", "AWS p6-b200: 8 x 400 Gb/s EFA per node, taken as a rail fabric"),
    "hgx-h200:4": ("hgx-h200:4,netlat={aws-efa}", "AWS p5en: 16 x 200 Gb/s EFA per node, taken as 8 x 400 Gb/s"),
    "gcp-a3mega:2": ("dgx-h100:2,nic=200Gbps,netlat={gcp-tcpxo}", "GCP A3 Mega: 8 x 200 Gb/s GPUDirect-TCPXO NICs per node"),
    "hgx-a100-4xhdr:2": ("dgx-a100:2,nic=100Gbps", "4 HDR (200 Gb/s) NICs per node, taken as 8 x 100 Gb/s"),
    "hgx-a100-4xhdr:3": ("dgx-a100:3,nic=100Gbps", "4 HDR (200 Gb/s) NICs per node, taken as 8 x 100 Gb/s"),
    "mi300x:1": ("mi300x:gpus={gpus}", "RCCL's Ring and Tree priced as NCCL's"),
}
NOT_MODELLED = {
    "mi350x:1": "no MI350X machine in the library",
    "h100-cluster:4": "the source does not say what network joins the nodes",
    "cx7-ndr400-nic": "a NIC, not a machine",
}
KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce")



@dataclass(frozen=True)
class Row(fit_.Row):
    """A measured call (``backends.cost.fit.Row``) with where it comes from: the library spec
    of its machine (``{fabric}`` for a fitted network latency), its GPU count and source."""

    spec: str = ""
    gpus: int = 0
    source: str = ""
    note: str = ""


def measured_time(row: dict) -> float | None:
    """The row's time (us), from its busbw when only that is printed (nccl-tests definitions)."""
    if row.get("time_us"):
        return float(row["time_us"])
    busbw = row.get("busbw_GBps")
    if not busbw or not row.get("size_bytes"):
        return None
    if str(row.get("bw_unit", "")).startswith("GiB"):
        busbw *= GIB_PER_GB
    algbw = busbw / bus_factor(row["collective"], row["gpus"])
    return row["size_bytes"] / algbw / 1e3


def load_rows(path: str = DATA) -> tuple[list[Row], list[tuple[str, str]]]:
    """The rows the model predicts, and (id, reason) for the ones left out."""
    cal = shipped()  # builds the machines; a fabric's latency is the calibration's at each price
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    rows, left = [], []
    for r in data["rows"]:
        why = None
        if r.get("kind") != "measurement":
            why = f"a {r.get('kind')} figure, not a measured run"
        elif r["machine"] in NOT_MODELLED:
            why = NOT_MODELLED[r["machine"]]
        elif r["machine"] not in MACHINES:
            why = f"machine {r['machine']} is not mapped"
        elif r["collective"] not in KINDS:
            why = f"collective {r['collective']} is not modelled"
        t = measured_time(r) if why is None else None
        if why is None and t is None:
            why = "no size or time"
        if why is not None:
            left.append((r["id"], why))
            continue
        spec = MACHINES[r["machine"]][0].replace("{gpus}", str(r["gpus"]))
        if r["nodes"] and r["nodes"] > 1 and "gpus=" in spec:
            spec = spec.replace(",gpus=8", "")
        tool = (r.get("tool") or "").lower()
        runtime = "torch-nccl" if tool.startswith(("torch", "unstated")) or not tool else \
            "rccl" if "rccl" in tool else "nccl"
        forbid, only, known = algorithm_of(r)
        label = str(r.get("algorithm") or "")
        protocol = label.split("/")[1].split()[0] if known and "/" in label else None
        note = str(r.get("note") or "")
        group = f"{r['machine']} {r['gpus']}gpu {r['collective']} {runtime}" + \
            (" nvls-off" if forbid else f" {only.lower()}-forced" if only else "")
        graph = " -G 1" in note or "graph mode" in note.lower()
        if graph:
            group += " graph"
        fabric = re.search(r"\{([a-z0-9-]+)\}", spec)
        rows.append(Row(id=r["id"], group=group, machine=Machine.of(_topology(machine_spec(spec, cal))),
                        kind=r["collective"], size=float(r["size_bytes"]), measured_us=t, runtime=runtime,
                        forbid=forbid, only=only, graph=graph, known=known, protocol=protocol,
                        fabric=fabric.group(1) if fabric else None, spec=spec, gpus=r["gpus"],
                        source=r["source"].get("url") or r["source"].get("repo", ""), note=note))
    return rows, left


ALGORITHM_NAMES = {"nvlstree": "NVLSTree", "nvls": "NVLS", "ring": "Ring", "tree": "Tree", "pat": "PAT",
                   "collnetdirect": "CollNetDirect", "collnetchain": "CollNetChain"}


def algorithm_of(row: dict) -> tuple[tuple[str, ...], str | None, str | None]:
    """(algorithms the run disabled, the one it forced, the one NCCL picked by default) from
    the row's ``algorithm`` and ``note``, as far as the source says."""
    label = str(row.get("algorithm") or "").lower()
    text = label + " " + str(row.get("note") or "").lower()
    if "nvls_enable=0" in text or "nvls off" in text or "nvls disabled" in text:
        return ("NVLS", "NVLSTree"), None, None
    if "nccl_algo=" in label:
        forced = label.split("nccl_algo=")[1].split(")")[0].split(":")[-1].strip()
        return (), ALGORITHM_NAMES.get(forced), None
    head = label.split("/")[0].split("(")[0].strip().replace(" ", "")
    if label and ("slide" in label or "sharp" in label and "nvls" not in label):
        return (), None, None
    return (), None, ALGORITHM_NAMES.get(head)


def split(rows: list[Row]) -> tuple[list[Row], list[Row]]:
    """Within each group, sorted by size, rows alternate: fit, validate, fit, ..."""
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.group, []).append(r)
    fit, check = [], []
    for name in sorted(groups):
        for k, r in enumerate(sorted(groups[name], key=lambda x: (x.size, x.id))):
            (fit if k % 2 == 0 else check).append(r)
    return fit, check


def machine_spec(spec: str, cal: Calibration) -> str:
    """``spec`` with its fabric latencies (``{aws-efa}``) filled from the calibration."""
    for name, value in cal.fabric_latency_us.items():
        spec = spec.replace("{" + name + "}", f"{float(value)!r}us")
    return spec


_TOPOLOGIES: dict[str, object] = {}


def _topology(spec: str):
    if spec not in _TOPOLOGIES:
        _TOPOLOGIES[spec] = topologies.build(spec)
    return _TOPOLOGIES[spec]


# ---------------------------------------------------------------------- report
def bound_of(row: Row, cal: Calibration) -> float:
    """The lower bound (physics at nominal rates) of the row's call: never above a measurement."""
    topo = _topology(machine_spec(row.spec, cal))
    return lower_bound(topo, builtin(row.kind, topo.n_ranks), row.size).bound_us


def evaluate(rows: list[Row], cal: Calibration) -> list[dict]:
    out = []
    for r in rows:
        time, pick = fit_.predict(r, cal)
        bound = bound_of(r, cal)
        out.append({"id": r.id, "group": r.group, "size_bytes": r.size, "measured_us": r.measured_us,
                    "predicted_us": time, "ratio": time / r.measured_us, "pick": pick, "known_pick": r.known,
                    "bound_us": bound, "bound_over_measured": bound / r.measured_us,
                    "spec": machine_spec(r.spec, cal)})
    return out


def summary(results: list[dict]) -> dict:
    errors = [abs(x["ratio"] - 1) for x in results]
    return {"rows": len(results), "bounds_above_measured": sum(x["bound_over_measured"] > 1 for x in results), "median_error": statistics.median(errors) if errors else None,
            "worst_error": max(errors) if errors else None,
            "worst_row": max(results, key=lambda x: abs(x["ratio"] - 1))["id"] if results else None}


def table(results: list[dict], title: str) -> list[str]:
    lines = [f"### {title}", "", "| row | machine | size | measured us | predicted us | pred/meas | NCCL's pick (model) |",
             "|---|---|---|---|---|---|---|"]
    for x in sorted(results, key=lambda x: (x["group"], x["size_bytes"])):
        lines.append(f"| {x['id']} | {x['spec']} | {_size(x['size_bytes'])} | {x['measured_us']:.4g} | "
                     f"{x['predicted_us']:.4g} | {x['ratio']:.3f} | {x['pick']} |")
    return lines + [""]


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{int(n // scale)} {unit}"
    return f"{n:.0f} B"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true", help="refit the parameters on the fitting rows and write them")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--data", default=DATA, help="the measurements file")
    args = ap.parse_args(argv)
    rows, left = load_rows(args.data)
    fit_rows, check_rows = split(rows)
    cal = shipped()
    if args.fit:
        cal = fit_.fit(fit_rows, cal, picks=rows)  # times of the fitting rows; the picks every source reports
        _write_calibration(cal, fit_rows)
    fitted, checked = evaluate(fit_rows, cal), evaluate(check_rows, cal)
    result = {"fit": summary(fitted), "validate": summary(checked), "left_out": len(left),
              "rows": {"fit": fitted, "validate": checked}, "left": [{"id": i, "why": w} for i, w in left]}
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "validate.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1, sort_keys=True)
        fh.write("\n")
    lines = _markdown(result)
    with open(os.path.join(RESULTS, "validate.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2, sort_keys=True))
    else:
        print("\n".join(lines[:lines.index("### Validation rows")]))
    return 0


def _markdown(result: dict) -> list[str]:
    v, f = result["validate"], result["fit"]
    lines = ["# The cost model against published measurements", "",
             "Generated by `python benchmarks/validate.py` from `benchmarks/data/measurements.json` (a source per row).",
             "Targets: median error at most 10%, worst at most 25%, on rows the fit never saw.", "",
             f"- validation rows (never fitted): {v['rows']}, median error {v['median_error']:.1%}, worst "
             f"{v['worst_error']:.1%} ({v['worst_row']})",
             f"- fitting rows: {f['rows']}, median error {f['median_error']:.1%}, worst {f['worst_error']:.1%} "
             f"({f['worst_row']})",
             f"- left out: {result['left_out']} rows (machines the library does not model, slides, rough figures)",
             f"- lower bounds above a measurement: {v['bounds_above_measured'] + f['bounds_above_measured']} of "
             f"{v['rows'] + f['rows']} rows (the bound is the links' physics at nominal rates)", "",
             "## By group (validation rows)", "",
             "| group | rows | median error | worst | pred/meas from the smallest size to the largest |",
             "|---|---|---|---|---|"]
    groups: dict[str, list[dict]] = {}
    for x in result["rows"]["validate"]:
        groups.setdefault(x["group"], []).append(x)
    for name in sorted(groups):
        xs = sorted(groups[name], key=lambda x: x["size_bytes"])
        errors = [abs(x["ratio"] - 1) for x in xs]
        ratios = " ".join(f"{x['ratio']:.2f}" for x in xs[:: max(1, len(xs) // 8)])
        lines.append(f"| {name} | {len(xs)} | {statistics.median(errors):.1%} | {max(errors):.1%} | {ratios} |")
    lines.append("")
    lines += table(result["rows"]["validate"], "Validation rows")
    lines += table(result["rows"]["fit"], "Fitting rows")
    lines += ["### Left out", "", "| row | why |", "|---|---|"]
    lines += [f"| {x['id']} | {x['why']} |" for x in result["left"]]
    return lines


def _write_calibration(cal: Calibration, rows: list[Row]) -> None:
    groups = len({r.group for r in rows})
    fitted = (f"fitted by `python benchmarks/validate.py --fit` on {len(rows)} rows of "
              f"benchmarks/data/measurements.json ({groups} groups)")
    with open(CALIBRATION_FILE, "w", encoding="utf-8") as fh:
        json.dump(fit_.to_json(cal, fit_.NAMES, fitted), fh, indent=2)
        fh.write("\n")


if __name__ == "__main__":
    sys.exit(main())
