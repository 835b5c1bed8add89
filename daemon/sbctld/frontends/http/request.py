"""One HTTP request as the handlers see it, and how they answer it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from sbctld.service import SenderId

Respond = Callable[[int, list[tuple[str, str]], bytes], None]
API_VERSIONS = ("2017-04", "2021-05", "2024-05")


@dataclass
class Request:
    method: str
    target: str  # as sent: path and query
    headers: dict[str, str]  # lower-case names
    raw_headers: list[tuple[str, str]]  # names as sent
    body: bytes
    scheme: str  # "http" or "https"
    namespace: str
    sender: SenderId | None = None  # the connection's (sbctld.pairing)
    path: str = ""  # decoded, without the query
    query: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parts = urlsplit(self.target)
        self.path = unquote(parts.path)
        self.query = {k.lower(): v for k, v in parse_qsl(parts.query, keep_blank_values=True)}

    @property
    def host(self) -> str:
        return self.headers.get("host", "localhost")

    def url(self, path: str | None = None, query: str | None = None) -> str:
        p = self.path if path is None else path
        q = f"?{query}" if query else ""
        return f"{self.scheme}://{self.host}{p}{q}"

    def segments(self) -> list[str]:
        return [s for s in self.path.split("/") if s]
