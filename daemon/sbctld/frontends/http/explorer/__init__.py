"""The Service Bus Explorer: a web page served by the daemon (daemon/README.md §33).

Routes (on the HTTP port and on every AMQP port, which answer HTTP too):

- ``GET /explorer``: the page (``GET /`` from a browser, without a SAS token, redirects
  there); ``GET /explorer/static/<file>``: its scripts and styles, shipped in the package
  (``static/``: a plain ES-module app, no build step, nothing fetched from elsewhere);
- ``POST /explorer/api/op/<name>``: one service operation (:mod:`.api`).

Every route checks the ``Host:`` (:mod:`.guard`); the API also checks ``Origin:`` and the
Authorization. The page gets its token from the URL's fragment (``#token=...``).
"""

from __future__ import annotations

import logging
import traceback
from importlib import resources
from pathlib import Path
from typing import Any

from sbctld.frontends.http.explorer import api, guard
from sbctld.frontends.http.request import Request, Respond
from sbctld.service import Service
from sbctld.service.keys import Keys

log = logging.getLogger("sbctld")
STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
PAGE_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'none'",
    ),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
]


def wants_page(req: Request) -> bool:
    """Whether the request is the explorer's: ``/explorer...``, or a browser's ``GET /``."""
    parts = req.segments()
    if parts and parts[0] == "explorer":
        return True
    browser = "text/html" in req.headers.get("accept", "")
    return not parts and req.method == "GET" and browser and "authorization" not in req.headers


class Explorer:
    def __init__(self, service: Service, data_dir: Path, host: str, keys: Keys) -> None:
        self.service = service
        self.host = host  # the address the daemon listens on (besides loopback)
        self.keys = keys
        self.token = guard.new_token(data_dir)

    def handle(self, req: Request, respond: Respond, alive: Any) -> None:
        why = guard.host_refusal(req, self.host)
        if why is not None:
            api.answer_json(respond, 403, {"error": {"code": "Forbidden", "message": why}})
            return
        parts = req.segments()
        if parts[:1] != ["explorer"]:
            respond(302, [("Location", "/explorer"), *PAGE_HEADERS], b"")
        elif parts[1:3] == ["api", "op"] and len(parts) == 4:
            self._api(req, parts[3], respond, alive)
        elif req.method not in ("GET", "HEAD"):
            self._refuse(respond, 405, "MethodNotAllowed", f"{req.method} is not allowed here")
        elif len(parts) == 1:
            self._static("index.html", respond)
        elif len(parts) == 3 and parts[1] == "static":
            self._static(parts[2], respond)
        else:
            self._refuse(respond, 404, "NotFound", f"no explorer resource {req.path!r}")

    @staticmethod
    def _refuse(respond: Respond, status: int, code: str, why: str) -> None:
        api.answer_json(respond, status, {"error": {"code": code, "message": why}})

    def _static(self, name: str, respond: Respond) -> None:
        suffix = name[name.rfind(".") :] if "." in name else ""
        files = resources.files(__package__).joinpath("static")
        if suffix not in STATIC_TYPES or "/" in name or not files.joinpath(name).is_file():
            self._refuse(respond, 404, "NotFound", f"no explorer file {name!r}")
            return
        body = files.joinpath(name).read_bytes()
        headers = [("Content-Type", STATIC_TYPES[suffix]), ("Cache-Control", "no-cache")]
        respond(200, [*headers, *PAGE_HEADERS], body)

    def _api(self, req: Request, name: str, respond: Respond, alive: Any) -> None:
        if req.method != "POST":
            self._refuse(respond, 405, "MethodNotAllowed", "the explorer's API takes POST")
            return
        why = guard.origin_refusal(req)
        if why is not None:
            self._refuse(respond, 403, "Forbidden", why)
            return
        key_name, key = self.keys.get(req.namespace)
        granted, why = guard.authorise(req, self.token, key_name, key)
        if granted is None:
            self._refuse(respond, 401, "Unauthorized", f"unauthorized: {why}")
            return
        scope = req.namespace if granted == guard.SAS else None
        call = (req.sender or self.service.new_sender(), alive)
        try:
            api.run(self.service, name, req.body, call, scope, respond)
        except Exception as exc:
            log.error("explorer %s failed:\n%s", name, traceback.format_exc())
            api.internal(respond, exc)
