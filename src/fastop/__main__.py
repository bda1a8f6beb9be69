"""``python -m fastop``: the command line (see :mod:`fastop.cli`)."""
import sys

from fastop.cli import main

if __name__ == "__main__":
    sys.exit(main())
