"""A development stand-in for agent-sandbox's python runtime: the process that answers the
SDK's ``sandbox.commands.run`` and ``sandbox.files.*`` in a sandbox Pod.

The development cluster simulates Pods; nothing in them runs. For the Pods that ask for this
runtime (:mod:`devtools.cluster.controllers.kubelet.executor` says which: agent-sandbox's
``python-runtime-sandbox`` image, or the annotation ``devcluster.sandbus.io/runtime:
agent-sandbox``) its kubelet runs ``python -m devtools.sandboxruntime`` instead, one process
per Pod, listening on the Pod's loopback IP and port 8888, so the SDK (through the router,
:mod:`devtools.router`, or straight at the Pod IP) finds a runtime there, as on a real cluster.

Commands run on the developer's own machine. Each sandbox gets its own working directory (the
Pod's directory under the kubelet's, removed with the Pod), a bare environment, and a process
group per command; where the machine allows it, the whole runtime runs in namespaces of its own
(:mod:`.isolation`), else a warning says that it does not. The HTTP API is in :mod:`.server`,
commands in :mod:`.commands`, paths and uploads in :mod:`.files`.

It stands alone (an import-linter contract in pyproject.toml): the standard library only, so a
process per Pod starts fast and small.
"""
