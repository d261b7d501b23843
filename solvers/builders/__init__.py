"""What the solvers share to build schedules, apart from any one solver.

* ``schedule``: ``ScheduleBuilder``, logical transfers mapped onto the links (routing through
  ranks where two are not linked)
* ``common``: the chunked collective a solver works on and its slot layout
* ``coalesce``: the pieces one rank sends another in one step as one message
* ``rings``: rings that follow the topology's links (one, or several side by side)
* ``grids``: grids of ranks found from the nodes or the links
* ``symmetry``: rank symmetries of a topology (one rank per orbit suffices for many bounds)
"""
