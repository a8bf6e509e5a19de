"""The task executor's pure decisions: the wire, the records on disk, the state machine, the
rendering, the plan over the set of tasks, the supervisor's decisions, the routes, reading
``/proc`` and the settings. Nothing here does I/O; the shell around it reads the files and the
process table and does what these functions decide."""
