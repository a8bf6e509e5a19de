"""The event contract of sandbus: what travels on the bus, where, and how to read it.

Pure (no I/O): import it to produce or consume events. The modules, bottom up:

- :mod:`events.ids`: deterministic event ids (``<uid>:<resourceVersion>:<change>``).
- :mod:`events.subjects`: the NATS subject scheme, token encoding and wildcard filters.
- :mod:`events.envelope`: the CloudEvents 1.0 envelope and its attributes.
- :mod:`events.types`: the versioned event types and their data.
- :mod:`events.headers`: NATS headers of events and dead letters.
- :mod:`events.codec`: encoding, strict decoding with precise errors, routing to subjects.
- :mod:`events.schema_gen`: the generator of ``schemas/`` (JSON Schemas, AsyncAPI).

Subscribers that do not use Python need none of this: ``schemas/`` describes the same
contract.
"""

from events.codec import EventDecodeError, UnknownEventType, decode_event, encode_event
from events.types import EVENT_CLASSES, Event

__all__ = [
    "EVENT_CLASSES",
    "Event",
    "EventDecodeError",
    "UnknownEventType",
    "decode_event",
    "encode_event",
]
