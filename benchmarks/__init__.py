"""Benchmarks of the compiler. ``python -m benchmarks`` runs the suite (``benchmarks.suite``)
and writes ``benchmarks/RESULTS.md``; the other modules are standalone scripts
(``python benchmarks/scale.py`` and so on), each documented in its own docstring."""
