"""The torch.distributed backend: run verified Programs on process groups.

    import ccl
    allreduce = ccl.executor("allreduce.json")    # after torch.distributed.init_process_group
    allreduce(grad)                               # in place, like torch.distributed.all_reduce

Everything here runs the Program ``ccl.lower`` made (the driver, ``ccl.compiler``, lowers and
verifies; this package never lowers):

* ``Executor`` (executor.py): a Program as a collective on a live process group;
* ``Collectives`` (dropin.py): torch.distributed's calling conventions with ``async_op`` over
  one schedule or a set picked by size, and ``allreduce_hook`` for DDP (``ccl.torch``);
* ``emit_script`` (codegen.py): a standalone torchrun script with no dependency on this project;
* ``run_local`` (launch.py): spawn local gloo processes, check against torch's collective, time
  both side by side (``ccl run``).

torch is optional: this package imports it only when something needs it, and says how to
install it when it is missing. ``emit_script`` works without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from ccl.core.errors import BackendError

INSTALL_HINT = ("torch is not installed; install the CPU build with `pip install torch` "
                "(or the project's extra: `pip install -e \".[torch]\"`)")

_LAZY = {
    "Executor": "executor",
    "Collectives": "dropin",
    "Work": "dropin",
    "allreduce_hook": "dropin",
    "to_plain": "plain",
    "emit_script": "codegen",
    "run_local": "launch",
    "RunReport": "launch",
}

__all__ = sorted(_LAZY) + ["INSTALL_HINT", "require_torch"]


def require_torch() -> None:
    """Raise BackendError with the install command when torch cannot be imported."""
    try:
        importlib.import_module("torch")
        importlib.import_module("torch.distributed")
    except ImportError:
        raise BackendError(INSTALL_HINT) from None


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'backends.torch' has no attribute {name!r}")
    if module not in ("codegen", "plain"):
        require_torch()
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
