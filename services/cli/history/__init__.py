"""The event log as a product feature: ``sandbus events tail|replay``, ``state``, ``explain`` and
``queue ls``, the commands that read the bus.

A functional core and a thin NATS shell, like every service:

- pure, in :mod:`.core`: :mod:`.core.instants` (the times users type), :mod:`.core.folding`
  (the objects at an instant), :mod:`.core.diffing` (what changed between two versions),
  :mod:`.core.timeline` (one object's changes and the decisions that touched it);
- pure, outside :mod:`.core`: :mod:`.selection` (kinds and subject filters), :mod:`.records`
  (one message of the log, read without ever raising), :mod:`.summaries` (one phrase about an
  object's status), :mod:`.render` (the printed forms);
- I/O: :mod:`.reading` (ephemeral JetStream consumers over the event log), :mod:`.database`
  (the SQLite export), :mod:`.commands` (the four commands), :mod:`.arguments` (arguments, signals);
- both, being small: :mod:`.queues` (``sandbus queue ls``: the warm queues beside the adoptable
  members the state table says they should hold).

Everything here only reads the bus; nothing here writes to it.
"""
