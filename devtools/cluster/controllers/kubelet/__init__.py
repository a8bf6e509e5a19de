"""The development cluster's scheduler, kubelet and Job controller, simulated (docs/devcluster.md
§4.4).

No container runs, but for one. What is simulated is what the API shows while containers run:
a Pod moves Pending → scheduled → ContainerCreating → Running → Ready with the status a real
kubelet writes (conditions in upstream order with stable ``lastTransitionTime``,
``containerStatuses``, ``podIP``/``podIPs`` from a per-node CIDR, ``hostIP``, ``startTime``),
and deleting it goes through graceful termination before the final ``DELETE`` with
``gracePeriodSeconds=0``. Jobs run to completion without Pods, except OpenSandbox's
image-committer Jobs, which commit from their source Pod and leave the finished Pod the
controller reads their result from. The one that does run is OpenSandbox's task executor: a
Pod that runs one (its command, args or a container named ``task-executor``) gets a loopback IP
and a real executor process listening on ``<podIP>:5758``, is Ready only once that answers
``/health``, and has it restarted as a crashed container when it dies, so a controller talking
to the executor finds one. agent-sandbox's runtime is run the same way, on ``<podIP>:8888``, for
the Pods that ask for it (its python-runtime image, or an annotation; docs/devcluster.md §4.8),
so the SDK's commands and files find one.

Shape: functional core, imperative shell. The planners get one object as last observed, what
the shell remembers about it, the time and a view of the nodes, and return the writes to make
now and when to look again; they are pure, so every stage and failure mode is unit-tested
without a server. The shell talks to the API server over HTTP exactly as the real components do
and never touches the store. The modules, from the bottom up:

- :mod:`.config` — :class:`~.config.KubeletConfig` (delays, nodes, seed) and the failure modes
  a pod or Job can be given (annotation or :class:`~.config.FailureRule`).
- :mod:`.actions` — what the planners return: bind, patch status, delete, launch a Job action,
  create a Job's Pod; and :class:`~.actions.Instant`, the time a decision is made at.
- :mod:`.nodes` — the simulated nodes: names, addresses, pod IPs, the Node objects registered
  for them, and :class:`~.nodes.ClusterView`, the part of the cluster the planners look at.
- :mod:`.statuses` — the status objects a kubelet writes: conditions and container states (and
  a Job's finished Pod's).
- :mod:`.committer` — OpenSandbox's image-committer: its arguments, and how a commit or
  unpause ends for the source Pod (digests, or the failure it reports).
- :mod:`.jobs` — the Job controller's planner, the pluggable action that decides a Job, and the
  finished Pod a Job gets when its outcome reports one (the kubelet leaves such a Pod alone).
- :mod:`.scheduling` — kube-scheduler's part: pick a node with room, or say why none fits.
- :mod:`.executor` — which Pods run OpenSandbox's task executor or agent-sandbox's runtime,
  which process each should have, and what the shell saw of it.
- :mod:`.stages` — a Pod's life as stages read off the object, and :func:`~.stages.plan_pod`,
  which moves it to the next one.
- :mod:`.supervisor` — :class:`~.supervisor.ExecutorSupervisor`: starts, probes and stops
  those processes (the second imperative module, beside the shell).
- :mod:`.shell` — :class:`~.shell.Kubelet`: informers, the work queue, the scheduler's tally
  of pods per node, and the HTTP writes; :func:`~.shell.run` is the controller entry point.
"""
