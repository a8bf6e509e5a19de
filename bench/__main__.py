"""``python -m bench``: the benchmark scenarios in one entry point (see :mod:`suite`).

The scripts in this folder are run as scripts (``python bench/claim_latency.py``), so they import
each other as top-level modules (``from common import ...``); this puts the folder on the path
first, as running a script does, and then hands over to :mod:`suite`.
"""

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from suite import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
