"""The ``$cbs`` node: claims-based security with Shared Access Signature tokens.

A client puts a token (``SharedAccessSignature sr=<url-encoded audience>&sig=<base64
HMAC-SHA256 of "sr\\nse">&se=<expiry epoch s>&skn=<key name>``) for each entity it uses.
The token is accepted (202) when the key name is the namespace's and the signature was
made with its key and has not expired; otherwise refused (401) with a status-description
worded as Service Bus words it (``InvalidSignature: ...``, ``ExpiredToken: ...``,
``MalformedToken: ...``) plus sbctl's reason, which the SDKs raise as their authentication
error. The keys are :class:`sbctld.service.keys.Keys` (one store
for AMQP and HTTP).
"""

from __future__ import annotations

from sbctl.core.sas import DEFAULT_KEY, DEFAULT_KEY_NAME, check_token, make_token, token_problem
from sbctld.service.keys import Keys

__all__ = ["DEFAULT_KEY", "DEFAULT_KEY_NAME", "Keys", "check_token", "make_token", "token_problem"]
