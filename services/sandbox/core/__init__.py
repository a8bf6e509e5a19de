"""The sandbox worker's functional core: the planners and the pure decisions they share.

Everything here is a function of what it is given: no I/O, no clock, no randomness. The
import-linter contract "Planners are pure" (pyproject.toml) covers every ``services.*.core``
package, so an import of the bus, the Kubernetes client, asyncio or a socket here fails the lint.
The shell that runs these decisions is :mod:`services.sandbox.worker`.
"""
