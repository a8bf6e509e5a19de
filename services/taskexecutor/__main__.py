"""``python -m services.taskexecutor``: the executor without the rest of the sandbus CLI."""

import sys

from services.taskexecutor.cli import main

sys.exit(main())
