"""``python -m benchmarks``: the benchmark suite (see ``benchmarks.suite``)."""

import sys

from benchmarks.suite import main

if __name__ == "__main__":
    sys.exit(main())
