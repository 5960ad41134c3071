"""``python -m bench.cache``: the cache benchmark (see the package's docstring)."""

import sys

from bench.cache.cli import main

if __name__ == "__main__":
    sys.exit(main())
