"""Every Atom management route answers, through the service's operations
(sbctld.frontends.http.management → Service.run / run_steps): creates, reads, updates,
lists and deletes of queues, topics, subscriptions and rules, each with its status; a rule
update that fails leaves the old rule. No sockets: the routes' handler is called with a
request, on the real service and group commit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.frontends.http.request import Request
from sbctld.frontends.http.server import HttpFrontend
from sbctld.service import Service

NS = DEFAULT_NAMESPACE
ATOM = (
    '<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">{}</content>'
    "</entry>"
)
SB = 'xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"'
XSI = 'xmlns:i="http://www.w3.org/2001/XMLSchema-instance"'


def rule(sql: str) -> bytes:
    xml = (
        f'<RuleDescription {SB} {XSI}><Filter i:type="SqlFilter"><SqlExpression>{sql}'
        "</SqlExpression></Filter><Name>sql</Name></RuleDescription>"
    )
    return ATOM.format(xml).encode()


def entity(kind: str) -> bytes:
    return ATOM.format(f"<{kind} {SB}/>").encode()


def test_every_route_answers_with_its_status(broker: Broker, tmp_path: Path) -> None:
    async def scenario() -> list[tuple[str, int, bytes]]:
        service = Service(broker, broker.syncer)
        http = HttpFrontend(service, tmp_path, "127.0.0.1", None)
        answers: list[tuple[str, int, bytes]] = []

        async def call(method: str, path: str, body: bytes = b"", **headers: str) -> None:
            got: list[tuple[int, bytes]] = []
            req = Request(method, path, headers, [], body, "http", NS)
            http.management.handle(req, lambda status, _h, out: got.append((status, out)))
            for _ in range(5):  # the group commit's round
                await asyncio.sleep(0)
            assert len(got) == 1, (method, path, got)
            answers.append((f"{method} {path}", *got[0]))

        await call("PUT", "/q", entity("QueueDescription"))
        await call("PUT", "/q", entity("QueueDescription"))
        await call("PUT", "/events", entity("TopicDescription"))
        await call("PUT", "/events/subscriptions/all", entity("SubscriptionDescription"))
        await call("PUT", "/events/subscriptions/all/rules/sql", rule("a = 1"))
        await call("PUT", "/events/subscriptions/all/rules/sql", rule("a = 2"), **{"if-match": "*"})
        await call(
            "PUT", "/events/subscriptions/all/rules/sql", rule("a = = 3"), **{"if-match": "*"}
        )
        await call("GET", "/events/subscriptions/all/rules/sql")
        await call("GET", "/events/subscriptions/all/rules")
        await call("GET", "/events/subscriptions")
        await call("GET", "/q")
        await call("GET", "/events")
        await call("GET", "/$Resources/queues")
        await call("GET", "/$Resources/topics")
        await call("GET", "/$namespaceinfo")
        await call("DELETE", "/events/subscriptions/all/rules/sql")
        await call("DELETE", "/events/subscriptions/all")
        await call("DELETE", "/events")
        await call("DELETE", "/q")
        await call("DELETE", "/q")
        await service.stop()
        return answers

    answers = asyncio.run(scenario())
    assert [(what, status) for what, status, _ in answers] == [
        ("PUT /q", 201),
        ("PUT /q", 409),
        ("PUT /events", 201),
        ("PUT /events/subscriptions/all", 201),
        ("PUT /events/subscriptions/all/rules/sql", 201),
        ("PUT /events/subscriptions/all/rules/sql", 200),
        ("PUT /events/subscriptions/all/rules/sql", 400),
        ("GET /events/subscriptions/all/rules/sql", 200),
        ("GET /events/subscriptions/all/rules", 200),
        ("GET /events/subscriptions", 200),
        ("GET /q", 200),
        ("GET /events", 200),
        ("GET /$Resources/queues", 200),
        ("GET /$Resources/topics", 200),
        ("GET /$namespaceinfo", 200),
        ("DELETE /events/subscriptions/all/rules/sql", 200),
        ("DELETE /events/subscriptions/all", 200),
        ("DELETE /events", 200),
        ("DELETE /q", 200),
        ("DELETE /q", 404),
    ]
    kept = dict((what, body) for what, _, body in answers if what.startswith("GET"))
    assert b"a = 2" in kept["GET /events/subscriptions/all/rules/sql"]  # the failed update
    assert b"<title" in kept["GET /$Resources/queues"] and b">q<" in kept["GET /$Resources/queues"]


def test_a_management_error_is_answered_once(broker: Broker, tmp_path: Path) -> None:
    async def scenario() -> Any:
        service = Service(broker, broker.syncer)
        http = HttpFrontend(service, tmp_path, "127.0.0.1", None)
        got: list[int] = []
        req = Request("DELETE", "/missing/subscriptions/s", {}, [], b"", "http", NS)
        http.management.handle(req, lambda status, _h, _b: got.append(status))
        for _ in range(5):
            await asyncio.sleep(0)
        await service.stop()
        return got

    assert asyncio.run(scenario()) == [404]
