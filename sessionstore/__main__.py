"""``python -m sessionstore``: the same command line as the ``sessionstore`` script."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    main()
