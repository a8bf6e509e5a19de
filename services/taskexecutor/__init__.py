"""``sandbus task-executor``: OpenSandbox's in-pod task executor (docs/opensandbox.md §5).

A controller reaches it at ``<podIP>:5758`` over plain HTTP and gives it the tasks the Pod
should run (``POST /setTasks``), then reads their state back (``GET /getTasks``). It starts each
task's process, reports it as a container state (waiting, running, terminated), stops it when
it runs past its timeout or is no longer wanted, and keeps everything in a data dir, so that a
restarted executor reports the tasks it had. Upstream's Go executor is the contract; on top of
it, the preStart and postStop hooks that OpenSandbox documents and upstream never built
(``lifecycleStatus`` reports them).

Two processes per task, neither of them the executor's workload:

- the **executor** (this package's :mod:`.service`): the HTTP server (:mod:`.server`), the tasks
  in memory (:mod:`.executor`), a reconcile loop every 0.5 s, the data dir (:mod:`.store`);
- one **supervisor** per task (:mod:`.supervisor`), launched detached in a session of its own
  (:mod:`.processes`), which runs the preStart hook, the process and the postStop hook, and
  writes how each ended. It outlives the executor: killing or restarting the executor stops
  no task, and the next executor finds the supervisor through the files it keeps.

Functional core, imperative shell: every decision is a pure function in :mod:`.core` (the wire,
the records, the state machine, the rendering, the plan over the tasks, the supervisor's
decisions, the routes, the settings), and the modules above it read files and the process
table, launch and signal processes and answer HTTP.

The executor runs in every sandbox Pod (and in the development cluster, as one process per
simulated Pod), so it is kept light: the standard library's HTTP server and msgspec, and no
other part of sandbus (an import-linter contract says so).
"""
