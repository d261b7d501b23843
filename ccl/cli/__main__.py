"""``python -m ccl.cli``."""

import sys

from . import main

sys.exit(main())
