"""``python -m rillet.cli``: the ``rillet`` command, where the console script is not installed."""

import sys

from rillet.cli import main

sys.exit(main())
