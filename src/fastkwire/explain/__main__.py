"""python -m fastkwire.explain: the explain command line, which lives in cli. (A module
of its own, so that explain itself never imports cli, which imports explain.)"""

import sys

from ..cli import explain_main

sys.exit(explain_main())
