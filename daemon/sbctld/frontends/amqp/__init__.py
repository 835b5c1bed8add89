"""The AMQP 1.0 front-end: what the Azure Service Bus SDKs speak.

Layers, each importable and testable on its own:

- ``types`` / ``codec``: the AMQP 1.0 type system, performatives and message sections;
- ``framing``: frame headers and splitting a transfer at the peer's max frame size;
- ``connection``: a sans-IO state machine (bytes in, bytes out, callbacks to a handler);
- ``cbs`` / ``management``: the ``$cbs`` and ``$management`` request/response nodes;
- ``server``: the asyncio transport and the adapter that calls the broker.
"""
