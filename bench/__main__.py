"""``python -m bench``: same as ``scripts/bench``."""

import sys

from bench.run import main

sys.exit(main())
