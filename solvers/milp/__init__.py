"""MILP synthesis (TACCL and TE-CCL class), on open solvers: PuLP with HiGHS (default) or CBC.

``synthesize(problem)`` runs, in memory, in one call:

1. the logical topology the sketch leaves, with alpha-beta costs at the target size
   (``logical``);
2. routing: the routing MILP (``routing``; solver ``milp``) or the time-expanded model
   (``teccl``; solver ``teccl``), warm-started from routing heuristics;
3. the ordering heuristic, a list schedule of the routes (``ordering``);
4. the scheduling / contiguity MILP that may batch consecutive slots on a lane (``contiguity``);
5. conversion to the Algorithm IR (``emit``), verified by the caller.

Every candidate set of routes (the MILP's, the heuristics', the templates' where they can be
read off, ``seeds``) goes through stages 3 and 5 and is judged at the target size by the cost
judge the driver passes in (``ccl.core.judge``: the simulator timing the lowered Program); the
fastest is batched by stage 4 and kept if batching makes it faster still. Progress lines on
stderr say how each candidate did.

Collectives: allgather, alltoall, broadcast directly; reducescatter as the time reversal of an
allgather on the reversed topology; allreduce as reducescatter then allgather.

Request fields used: ``size`` (bytes, nccl-tests convention, default 1 MiB), ``chunks`` (pieces
per part; the sketch's ``chunk_partition`` overrides), ``time_limit`` (seconds for the whole
synthesis, default 60), ``sketch`` (default: every link, rotational symmetry by the node size),
option ``backend`` ("highs" or "cbc"). When a MILP stops at its time limit the best schedule
found is returned through ``SolverTimeout`` with the largest MILP gap.

Time: the stages share one deadline, kept short of the limit by what the end takes; Ctrl-C
acts as a deadline reached now, and ``Interrupted`` carries the schedule the stages had
(``solve``).
"""

from __future__ import annotations

from .solve import KINDS, synthesize

__all__ = ["KINDS", "synthesize"]
