"""Calling a definition: ``ring(8)`` builds a topology (memoized by its arguments),
``shift(8)`` names a custom collective, ``leafspine(nodes_per_leaf = 2)`` binds a fabric and
``ring_allgather(8)`` builds a hand-written algorithm."""

from __future__ import annotations

from typing import Any

from ccl.core.errors import DslError, Span

from .algorithm import build_algorithm
from .evaluate import Evaluator, relocate
from .topology import BoundFabric, build_topology, topology_name
from .values import CollectiveSpec, Definition, show


def invoke(ev: Evaluator, definition: Definition, args: tuple, kwargs: dict[str, tuple[Any, Span]],
           span: Span) -> Any:
    where = f"{definition.kind} {definition.name}"
    ev.enter(span)
    try:
        scope, values = ev.bind(definition, args, kwargs, span)
        if definition.kind == "fabric":
            return BoundFabric(definition, scope)
        if definition.kind == "collective":
            label = "-".join([definition.name, *(show(v).replace(" ", "") for v in values)])
            return CollectiveSpec("custom", definition, values, label=label,
                                  name=topology_name(definition, values))
        key = _key(values)
        if key is not None and key in definition.cache:
            return definition.cache[key]
        if definition.kind == "topology":
            result = build_topology(ev, definition, scope, values, span)
        elif definition.kind == "algorithm":
            result = build_algorithm(ev, definition, scope, values, span)
        else:  # pragma: no cover - every kind is handled above
            raise DslError(f"cannot call {where}", span)
        if key is not None:
            definition.cache[key] = result
        return result
    except DslError as exc:
        raise relocate(exc, where, span) from None
    finally:
        ev.leave()


def _key(values: tuple) -> tuple | None:
    try:
        hash(values)
    except TypeError:
        return None
    # 1 and 1.0 and true hash alike; keep them apart so `ring(8)` and `ring(8.0)` differ.
    return tuple((type(v).__name__, v) for v in values)
