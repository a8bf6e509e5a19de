"""``python -m services.cli``: the ``sandbus`` command without its console script."""

import sys

from services.cli import main

sys.exit(main())
