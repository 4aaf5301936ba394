"""`python -m fastkwire ...` and the `fastkwire` console script: the command line.

`fastkwire broker ...` runs with the broker's modules only (it listens sooner); every
other command, help and usage errors go through fastkwire.cli.
"""

import os
import sys


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["broker"] and "_ARGCOMPLETE" not in os.environ:
        from ._broker_cli import quick_main

        code = quick_main(args[1:])
        if code is not None:
            return code
    from .cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
