"""Exact synthesis with z3 (SCCL class): instances, least steps, least rounds, Pareto frontiers.

Entry point ``synthesize(problem)`` (the registry's), reading the request:

* ``steps`` and ``rounds``: the instance (S, R, C) - a schedule, or InfeasibleError naming the
  bound or z3's proof;
* ``steps`` only: the fewest rounds with exactly S steps;
* ``rounds`` only: the fewest steps within R rounds (then the fewest rounds at those steps);
* neither: the fewest steps (then the fewest rounds at those steps).

``chunks`` is C. ``time_limit`` (seconds, counted from the driver's clock: the formulation's
building included) is honoured; on expiry SolverTimeout carries the best schedule found, if any.
Ctrl-C (``ccl.core.interrupt``) interrupts z3's check at once; ``Interrupted`` then carries the best
schedule found, if any (``pareto``: the frontier so far, ``interrupted`` set). Options
(``Request.options``):

* ``method``: ``auto`` (default: routing for copies, the dual for reduce/reducescatter-like sums,
  the combining encoding otherwise), ``routing``, ``dual``, ``combining``, or ``compose``
  (allreduce = reducescatter + allgather);
* ``scratch``: at most this many scratch slots per rank;
* ``symmetry``: symmetry breaking (default True; exact either way);
* ``max_steps``: where least-steps and Pareto searches give up (default step bound + 2n + 2).
* ``conflicts``: the SAT conflicts the whole search may spend (every check capped by what is
  left); reached, it stops as at a time limit, but at the same point on every machine.

``pareto(topology, collective, max_chunks)`` returns the frontier. z3 is imported only when one
of these runs (``solve``).
"""

from __future__ import annotations

from .solve import pareto, searcher, synthesize

__all__ = ["pareto", "searcher", "synthesize"]
