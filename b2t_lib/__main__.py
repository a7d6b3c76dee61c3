"""``python -m b2t_lib ...``: see :mod:`b2t_lib.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
