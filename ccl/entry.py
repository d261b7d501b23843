"""The ``ccl`` command's entry point (``[project.scripts]``): a module of its own beside the
driver, so that Ctrl-C is handled before the driver loads.

Importing the driver takes most of a second, and a Ctrl-C during an import would end the
program with a KeyboardInterrupt traceback. So the entry point first makes SIGINT end the
program with ``ccl: interrupted`` and exit code 130 (nothing has been computed yet, so nothing
is lost), then imports the driver. The package's face (``ccl/__init__.py``) loads nothing
before it: its names load on first use. A command then handles Ctrl-C its own way (``ccl.core.interrupt``: the best result found so far is saved) and puts this
handler back when it ends.
"""

import os
import signal


def _interrupted(signum, frame):  # noqa: ARG001 - a signal handler's signature
    try:
        os.write(2, b"ccl: interrupted\n")
    finally:
        os._exit(130)


def main():
    signal.signal(signal.SIGINT, _interrupted)
    from ccl.cli import main as run  # the driver, loaded once Ctrl-C is handled

    return run()
