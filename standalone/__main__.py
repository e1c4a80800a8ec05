"""``python -m standalone`` is ``rillet standalone``."""

import sys

from rillet.cli import main

if __name__ == "__main__":
    sys.exit(main(["standalone", *sys.argv[1:]]))
