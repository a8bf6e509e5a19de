"""What tests share, whatever their directory: import it from here, never from a test module or a
conftest (tests/unit/test_test_layout.py checks that no module does).

``waiting``
    :func:`~tests.support.waiting.until`: poll a check (plain or async) until it holds, within a
    deadline, else fail saying what was awaited. The one way tests wait for another actor.
``samples``
    :func:`~tests.support.samples.stamp` (a datetime as a Kubernetes timestamp); reading
    conditions back (``condition``, ``condition_status``, ``conditions_by_type``, ``is_ready``,
    on :mod:`api.objects`); ``NS``, ``Json``; sample objects several directories build
    (``obj``, ``sandbox_body``).
``plans``
    :func:`~tests.support.plans.actions_of`: a plan's actions with its ``Together`` groups
    opened, optionally of one type. Assertions about what a plan does use it, so that an
    action inside a group cannot slip past them.
``fakeapi``
    :class:`~tests.support.fakeapi.FakeApiServer`, the one fake API server the planner tests
    apply plans to (each world of tests/unit adds its hooks);
    :func:`~tests.support.fakeapi.apply_merge_patch` (RFC 7386, written out independently);
    :class:`~tests.support.fakeapi.ScriptedApi`, the worker shell's async stand-in whose
    answers a test scripts.
``fakebus``
    :class:`~tests.support.fakebus.FakeJetStream` and
    :class:`~tests.support.fakebus.MemoJetStream`: what a worker publishes, kept in memory.
``stack``
    The in-process stack of the component and end-to-end tests: the development cluster, NATS
    with the bus, the watcher and the sandbox and pool workers, each started and stopped within
    a bound (:func:`~tests.support.stack.running_stack`, :class:`~tests.support.stack.Stack`,
    :func:`~tests.support.stack.cluster_and_watcher`, ...), and what a test reads back from it.
``kubectl``
    :class:`~tests.support.kubectl.Kubectl`: a real kubectl binary run against a cluster.

Fixtures are not here: they live in conftest.py files, which pytest finds by itself. Helpers that
only one directory uses live in a plain module of that directory (tests/unit/runtime/toys.py,
tests/component/devcluster/samples.py, tests/e2e/world.py, ...).
"""
