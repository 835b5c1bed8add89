"""The ``com.microsoft:session-filter`` of a session receiver's source (daemon/README.md §29).

The SDKs send it in two forms: a plain value (Python, .NET, Java, JS) or a described value
(Go's go-amqp, which describes every filter; its descriptor is a ulong, or the filter's
symbol). The value is the session id (string, or binary holding UTF-8), or null for "next
available". The attach reply echoes the filter in the form it came, with the session id
the broker locked.
"""

from __future__ import annotations

from typing import Any

from sbctl.core.amqp.types import Described, Symbol
from sbctl.core.errors import BadRequest

SESSION_FILTER = Symbol("com.microsoft:session-filter")


def requested_session(raw: Any) -> str | None:
    """The session id a filter value asks for (None: the next available session)."""
    value = raw.value if isinstance(raw, Described) else raw
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise BadRequest("the session filter's session id is not UTF-8") from None
    if value is None or isinstance(value, str):
        return value
    raise BadRequest(
        f"the session filter must be a session id (string) or null, not {type(value).__name__}"
    )


def echoed(raw: Any, session_id: str) -> Any:
    """The filter value for the attach reply: the locked session id, in the form sent."""
    if isinstance(raw, Described):
        return Described(raw.descriptor, session_id)
    return session_id
