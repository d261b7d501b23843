"""Output files of the simulator (traces, plots): written whole or not at all."""

from __future__ import annotations

from ccl.core.serialize import write_atomic

__all__ = ["write_atomic"]
