"""The examples every ``ccl ... --help`` ends with, by command path (``""`` is ``ccl`` itself).

Each line is a real command on a shipped topology (or a file an earlier line writes); a
``# ...`` note may follow it. tests/ccl/test_cli_polish.py parses every ``ccl`` line with the
real parser and runs a few, so they cannot drift from the options.
"""

from __future__ import annotations

EXAMPLES: dict[str, str] = {
    "": """
ccl topology list                                       # the shipped machines and families
ccl synthesize -t dgx1 -c allgather -s ring -o ag.json  # synthesize, verify, save
ccl verify ag.json                                      # exit 0: it implements allgather
ccl simulate ag.json --size 64MiB                       # time, bandwidth, bound, NCCL
ccl compare -t ndv2:2 -c allreduce --size 1KiB,64MiB    # every solver side by side
ccl emit msccl ag.json -o ag.xml                        # for the msccl executor or RCCL
eval "$(ccl completion bash)"                           # tab completion
Each command has examples of its own (ccl synthesize --help); -q hides progress lines.
""",
    "topology": """
ccl topology list
ccl topology show dgx1
ccl topology show ndv2:2 --flat
""",
    "topology list": """
ccl topology list         # NAME[:ARGS] usage and a summary of each
ccl topology list --json
""",
    "topology show": """
ccl topology show dgx1                              # ranks, links, lanes, bandwidths
ccl topology show ndv2:2 --flat                     # rank-to-rank view, per-NIC shared limits
ccl topology show ring:8,bw=50GB/s,lat=1us          # a family with its link numbers
ccl topology show dgx-h100:2,fabric=leafspine --json > h100.json   # then -t h100.json
""",
    "solvers": """
ccl solvers               # each solver and the collectives it implements
ccl solvers --json
""",
    "check": """
ccl check dsl/examples/ring_allgather.ccl           # parse, lower, verify its algorithms
ccl check dsl/examples/requests.ccl --emit problem  # the requests, lowered, not solved
ccl check dsl/examples/ring_allgather.ccl --algorithm "ring_allgather(8)" -o ring8.json
""",
    "synthesize": """
ccl synthesize -t dgx1 -c allgather -s multi-ring -o ag.json
ccl synthesize -t ndv2:2 -c allreduce -s hierarchical -k 2 -o ar.json
ccl synthesize -t dgx1 -c allreduce -o ar-set.json         # auto: the best schedule per size range
ccl synthesize -t ndv2:2 -c allgather --sizes 1KiB..1GiB --time-budget 60 -q -o ag-set.json
ccl synthesize -t dgx1 -c allgather -s smt -k 2 --json     # exact (z3): fewest steps
ccl synthesize -t amd8 -c allgather -s packing --size 1GiB -o big.json
ccl synthesize -t ndv2:2 -c alltoall -s milp --size 1MiB --time-limit 30s -o a2a.json
ccl synthesize dsl/examples/requests.ccl --request rs-ring8-k2 -o rs.json
ccl synthesize -t dgx-h100:4 -c allreduce --groups dp --size 64MiB -o dp.json   # every DP group at once
""",
    "verify": """
ccl verify ag.json                  # exit 0 if correct, 4 with rank, step and slot if not
ccl verify ag.json --json
ccl verify ag.json --emit program   # the verified per-rank programs it lowers to
ccl verify ag.xml -t dgx1           # an MSCCL XML file, on the machine it targets
""",
    "simulate": """
ccl simulate ag.json --size 64MiB
ccl simulate ag.json --size 1KiB..1GiB        # a sweep over powers of two
ccl simulate ag.json --size 1KiB,64MiB,1GiB --json
ccl simulate ag.json --size 64MiB --mode step --slices 4
ccl simulate ar.json --size 1GiB --trace ar.trace.json --plot ar.png   # Perfetto trace, PNG
""",
    "bounds": """
ccl bounds -t dgx1 -c allgather --size 64MiB   # latency, bandwidth and the bound
ccl bounds -t ndv2:2 -c allreduce --size 1KiB..1GiB --json
ccl bounds -t dgx-h100:2 -c broadcast --root 3 --size 1GiB
""",
    "compare": """
ccl compare -t ndv2:2 -c allreduce --size 1KiB,64MiB
ccl compare -t dgx1 -c allgather --size 64MiB --solvers ring,multi-ring,packing --only
ccl compare -t amd8 -c allreduce --size 1KiB..1GiB --plot sizes.png   # and a time-vs-size plot
""",
    "emit": """
ccl emit torch ag.json -o ag_torch.py
ccl emit msccl ag.json -o ag.xml
""",
    "emit torch": """
ccl emit torch ag.json -o ag_torch.py
torchrun --nproc-per-node 8 ag_torch.py --size 16MiB --check --repeat 10
""",
    "emit msccl": """
ccl emit msccl ag.json -o ag.xml      # for the msccl executor in NCCL
ccl emit msccl ag.json --target rccl --protocol LL128 -o ag-rccl.xml
ccl emit msccl ag.json --min-bytes 1MiB --max-bytes 1GiB -o ag-large.xml
""",
    "import": """
ccl import msccl ag.xml -t dgx1 -o ag-program.json
""",
    "import msccl": """
ccl import msccl ag.xml -t dgx1 -o ag-program.json   # verified as it is read
ccl simulate ag-program.json --size 64MiB
""",
    "run": """
ccl run ag.json --size 1MiB             # 8 gloo processes, checked against torch
ccl run ag.json --size 1KiB..1MiB -r 2  # a sweep
ccl run ag.json --size 16MiB -r 10 --in-place --json
ccl run ag.xml -t dgx1 --size 1MiB      # an MSCCL XML file
""",
    "pareto": """
ccl pareto -t ring:4 -c allgather --max-chunks 2   # exact steps/rounds frontier (z3)
ccl pareto -t dgx1 -c allgather -s packing --sizes 1KiB,1MiB,1GiB --save-dir frontier
""",
    "place": """
ccl place -t dgx-h100:16 --plan tp=8,dp=16 --comm tp=allreduce:16MiB*64,dp=allreduce:512MiB
ccl place -t dgx-h100:16 --plan tp=8,pp=2,dp=8 --model 7B             # 7B: 32 layers, hidden 4096
ccl place -t dgx-h100:16 --plan tp=8,dp=16 --layers 40 --hidden 5120 --tokens 8192 --microbatches 16
ccl place -t dgx-a100:4 --plan tp=4,dp=8 --comm tp=allreduce:8MiB*32,dp=allreduce:1GiB --all --json
""",
    "probe": """
ccl probe --local 4 -o probed.ccl        # 4 local gloo processes: pairs, fan-out/in, disjoint pairs
ccl probe --local 4 --measurements m.json --json
ccl probe --from m.json -o probed.ccl    # refit saved measurements
ccl synthesize -t probed.ccl -c allreduce -o ar.json   # synthesis on what was measured
""",
    "cache": """
ccl cache info                          # where the tuner's answers are kept, how many, how big
ccl cache clear
""",
    "cache info": """
ccl cache info
ccl cache info --json
""",
    "cache clear": """
ccl cache clear                         # the next `ccl synthesize` (auto) computes afresh
""",
    "completion": """
ccl completion bash > ~/.local/share/bash-completion/completions/ccl
ccl completion fish > ~/.config/fish/completions/ccl.fish
ccl completion zsh --json
""",
}


def epilog(path: str) -> str | None:
    """The ``examples:`` block of a command's --help, or None if it has none."""
    text = EXAMPLES.get(path)
    if not text:
        return None
    return "examples:\n" + "\n".join(f"  {line}" if line else "" for line in text.strip("\n").splitlines())
