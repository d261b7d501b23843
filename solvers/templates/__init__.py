"""The template solvers: instant constructive algorithms, also the baselines every search is
held against. Each module's ``synthesize(problem)`` reads the variant from
``problem.request.solver``; ``solvers.SOLVERS`` registers them.

* ``ring``: ring, multi-ring (NCCL-style channels), rail-rings; pipelined chains for rooted kinds
* ``trees``: binomial and double binary trees
* ``direct``: all-pairs
* ``recursive``: recursive doubling (Bruck) and halving
* ``hierarchical``: intra-node, inter-node, intra-node phases on multi-node machines
* ``cascade``: decompositions over grids of ranks (2D torus, BlueConnect, pipelined hierarchical)
* ``phases``: the communication phases the templates are assembled from
"""
