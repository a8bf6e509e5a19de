"""The tests: unit/ (pure code, no I/O), component/ (real NATS and the development cluster in
this process), e2e/ (services as processes), and support/, what they share.

A helper module (anything but a ``test_*`` module or a conftest.py) gets its asserts rewritten
like a test module, so that a failing comparison in shared code shows what differed.
"""

import pytest

pytest.register_assert_rewrite("tests.support", "tests.unit", "tests.component", "tests.e2e")
