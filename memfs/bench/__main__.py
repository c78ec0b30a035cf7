"""``python -m memfs.bench``: same as ``scripts/bench``."""

import sys

from memfs.bench.run import main

sys.exit(main())
