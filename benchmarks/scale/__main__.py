"""``python -m benchmarks.scale``: the same as ``python -m benchmarks scale``."""

import sys

from .run import main

sys.exit(main())
