"""The watcher's shared checks live in tests.component.watcher.harness; its asserts are
rewritten so that a failing comparison shows what differed."""

import pytest

pytest.register_assert_rewrite("tests.component.watcher.harness")
