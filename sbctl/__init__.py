"""sbctl: a local, durable emulator of Azure Service Bus.

The public Python surface: :class:`Client`, :class:`AsyncClient`, :class:`Message`,
:class:`ReceivedMessage` and the error tree in :mod:`sbctl.errors`.
"""

from sbctl.client import AsyncClient, Client
from sbctl.codec import Message
from sbctl.messages import ReceivedMessage

__version__ = "0.1.0"
__all__ = ["AsyncClient", "Client", "Message", "ReceivedMessage", "__version__"]
