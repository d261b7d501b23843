"""``gc_paused()``: no cyclic garbage collection inside a block, re-enabled after as it was.

The compiler's large stages (building a schedule, lowering it, verifying it, simulating it,
building a MILP) make millions of small tuples and objects and no reference cycles worth
finding: every full collection walks all of them, a pause of seconds at 128 ranks (and on
large models, during which neither a deadline nor Ctrl-C is seen). Memory is still freed by
reference counting.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
