"""`python -m fastkwire ...` runs the `fastkwire` command line."""

import sys

from .cli import main

sys.exit(main())
