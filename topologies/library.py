"""The shipped ``.ccl`` files, evaluated through ``dsl``: the one source of the topology library.

The Python functions of ``topologies`` call the definitions of ``basic.ccl`` and
``machines.ccl`` through ``call``, and ``hardware_numbers`` reads the ``let`` values of
``hardware.ccl``. ``dsl`` is imported on first use, so ``import topologies`` stays cheap. Each
file is parsed once per process; a definition called again with the same arguments returns the
topology it built before (the language's memo), until the memo holds more than
``MEMO_LINKS`` links, when the files are loaded afresh.

Arguments are Python values: integers, reals, strings, booleans, lists (as tuples), and
bandwidths and latencies, which the language keeps with their units, as plain numbers in GB/s
and microseconds passed through ``gbps`` and ``microseconds``; ``None`` leaves a parameter at
the default its definition gives. An error raised while the description runs is a
``TopologyError`` with the description's own message.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ccl.core.errors import DslError, TopologyError
from ccl.core.topology import Topology

if TYPE_CHECKING:  # pragma: no cover - typing only; dsl is imported on first use
    from dsl import Loader, Module

MEMO_LINKS = 4_000_000  # links kept in memoized topologies before the files are loaded afresh


def gbps(value: float | None, what: str) -> Any:
    """``value`` GB/s as the language's bandwidth (``None``: the definition's default)."""
    if value is None:
        return None
    from dsl.values import BANDWIDTH, Quantity

    return Quantity(_real(value, what, "a finite number of GB/s"), BANDWIDTH)


def microseconds(value: float | None, what: str) -> Any:
    """``value`` microseconds as the language's time (``None``: the definition's default)."""
    if value is None:
        return None
    from dsl.values import TIME, Quantity

    return Quantity(_real(value, what, "a finite number of microseconds"), TIME)


def integer(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(f"{what} must be an integer, got {value!r}")
    return value


def integers(values: Sequence[int], what: str) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise TopologyError(f"{what} must be a non-empty list of integers, got {values!r}")
    return tuple(integer(v, f"{what} [{k}]") for k, v in enumerate(values))


def text(value: str | None, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TopologyError(f"{what} must be a string, got {value!r}")
    return value


def flag(value: bool, what: str) -> bool:
    if not isinstance(value, bool):
        raise TopologyError(f"{what} must be True or False, got {value!r}")
    return value


def real(value: float, what: str) -> float:
    return _real(value, what, "a finite number")


def _real(value: float, what: str, expected: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TopologyError(f"{what} must be {expected}, got {value!r}")
    return value


class Library:
    """The loaded ``.ccl`` files of the library, shared by every call in the process."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._loader: Loader | None = None
        self._modules: dict[str, Module] = {}
        self._memo: set[int] = set()
        self._memo_links = 0
        self._hardware: Mapping[str, Any] | None = None

    def module(self, name: str) -> Module:
        """``topologies/<name>.ccl``, loaded once (with the files it imports)."""
        with self._lock:
            if name not in self._modules:
                from dsl import Loader, library_dir

                if self._loader is None:
                    self._loader = Loader()
                self._modules[name] = self._loader.load_file(library_dir() / f"{name}.ccl")
            return self._modules[name]

    def call(self, file: str, name: str, arguments: Mapping[str, Any]) -> Topology:
        """Topology ``name`` of ``topologies/<file>.ccl`` called with keyword ``arguments``."""
        with self._lock:
            module = self.module(file)
            kwargs = {key: _dsl_value(value) for key, value in arguments.items() if value is not None}
            evaluator = module.loader.evaluator
            evaluator.steps_left = evaluator.max_steps  # each build has the whole budget
            try:
                topo = module.topology(name, **kwargs)
            except DslError as exc:
                raise TopologyError(exc.message) from None
            self._remember(topo)
            return topo

    def _remember(self, topo: Topology) -> None:
        if id(topo) in self._memo:
            return
        self._memo.add(id(topo))
        self._memo_links += len(topo.links)
        if self._memo_links > MEMO_LINKS:  # let the memo go: the next call loads the files again
            self._loader = None
            self._modules = {}
            self._memo = set()
            self._memo_links = 0

    def hardware_numbers(self) -> Mapping[str, Any]:
        """The ``let`` values of ``hardware.ccl`` as Python values (GB/s, us, tuples)."""
        with self._lock:
            if self._hardware is None:
                from dsl.values import Definition

                exports = self.module("hardware").exports
                self._hardware = MappingProxyType({
                    key: _python_value(value) for key, value in exports.items() if not isinstance(value, Definition)
                })
            return self._hardware


def _dsl_value(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_dsl_value(v) for v in value)
    return value


def _python_value(value: Any) -> Any:
    from dsl.values import Quantity

    if isinstance(value, Quantity):
        return value.value
    if isinstance(value, tuple):
        return tuple(_python_value(v) for v in value)
    return value


LIBRARY = Library()
