"""The management API (Atom XML): routes → the broker operations the CLI calls.

``GET|PUT|DELETE /{queue-or-topic}``, ``/{topic}/subscriptions/{name}``,
``/{topic}/subscriptions/{sub}/rules/{name}``; lists at ``/$Resources/queues|topics``,
``/{topic}/subscriptions`` and ``…/rules`` (``$skip``, ``$top``, a ``next`` link while more
remain); ``GET /$namespaceinfo``. ``PUT`` creates (409 when it exists) unless it carries
``If-Match: *``, which updates (404 when missing). Changes are answered once durable.
Every error is the service's ``<Error><Code>…</Code><Detail>…</Detail></Error>`` with the
HTTP status of the error (daemon/README.md §30).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from sbctl.core.durations import format_instant
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessagingEntityNotFound,
    SbctlError,
    ServiceCommunicationProblem,
    ServiceTimeout,
)
from sbctld.frontends.http import atom
from sbctld.frontends.http.request import Request, Respond
from sbctld.frontends.statuses import status_of
from sbctld.results import QueueInfo, RuleInfo, SubscriptionInfo, TopicInfo

if TYPE_CHECKING:
    from sbctld.frontends.http.host import HttpHost

ATOM_TYPE = "application/atom+xml;type=entry;charset=utf-8"
FEED_TYPE = "application/atom+xml;type=feed;charset=utf-8"
MAX_TOP = 100


class MethodNotAllowed(InvalidOperation):
    """A method the resource does not take: 405."""


def error(
    respond: Respond, status: int, detail: str, headers: list[tuple[str, str]] | None = None
) -> None:
    body = atom.document(atom.error_xml(status, detail))
    respond(status, [("Content-Type", "application/xml; charset=utf-8"), *(headers or [])], body)


def fail(respond: Respond, err: SbctlError) -> None:
    """An error as the service answers it: throttling and unavailable stores are 503."""
    status = 503 if isinstance(err, ServiceCommunicationProblem) else status_of(err)
    if isinstance(err, MethodNotAllowed):
        status = 405
    headers = []
    if err.retry_after is not None:
        headers.append(("Retry-After", str(max(1, math.ceil(err.retry_after)))))
    error(respond, status, err.message, headers)


def _now() -> str:
    return format_instant(int(time.time() * 1000))


class Management:
    def __init__(self, frontend: HttpHost) -> None:
        self.frontend = frontend
        self.broker = frontend.service.broker

    # ------------------------------------------------------------ dispatch

    def handle(self, req: Request, respond: Respond) -> None:
        parts = req.segments()
        lowered = [p.lower() for p in parts]
        try:
            if lowered == ["$namespaceinfo"] or not parts:
                self._only(req, "GET")
                self._namespace(req, respond)
            elif parts[0].lower() == "$resources" and len(parts) == 2:
                self._only(req, "GET")
                self._list_entities(req, parts[1].lower(), respond)
            elif "subscriptions" in lowered[1:]:
                i = lowered.index("subscriptions", 1)  # the JavaScript SDK says Subscriptions
                topic, rest = "/".join(parts[:i]), parts[i + 1 :]
                self._subscription_route(req, topic, rest, respond)
            else:
                self._entity(req, "/".join(parts), respond)
        except SbctlError as err:
            fail(respond, err)

    @staticmethod
    def _only(req: Request, *methods: str) -> None:
        if req.method not in methods:
            raise MethodNotAllowed(f"{req.method} is not allowed on {req.path}")

    def _subscription_route(
        self, req: Request, topic: str, rest: list[str], respond: Respond
    ) -> None:
        if not rest:
            self._only(req, "GET")
            self._list(req, respond, "Subscriptions", self._sub_entries(req, topic))
        elif len(rest) == 1:
            self._subscription(req, topic, rest[0], respond)
        elif len(rest) == 2 and rest[1].lower() == "rules":
            self._only(req, "GET")
            rules = self.broker.management.rule_list(req.namespace, topic, rest[0])
            base = f"/{topic}/Subscriptions/{rest[0]}/Rules/"
            entries = [self._rule_entry(req, base + r.name, r) for r in rules]
            self._list(req, respond, "Rules", entries)
        elif len(rest) == 3 and rest[1].lower() == "rules":
            self._rule(req, topic, rest[0], rest[2], respond)
        else:
            raise MessagingEntityNotFound(f"no such resource {req.path!r}")

    # ------------------------------------------------------------ answers

    def _durable(self, respond: Respond, status: int, body: bytes) -> None:
        def done(err: SbctlError | None) -> None:
            if err is not None:
                fail(respond, err)
            else:
                headers = [("Content-Type", ATOM_TYPE)] if body else []
                respond(status, headers, body)

        self.frontend.service.after_durable(done)

    def _entry(self, req: Request, path: str, title: str, content: str) -> str:
        return atom.entry(req.url(path), title, _now(), content, req.namespace)

    def _forward_base(self, req: Request) -> str:
        return f"sb://{req.host}/"

    def _queue_entry(self, req: Request, path: str, desc: QueueInfo) -> str:
        xml = atom.description_xml("QueueDescription", desc, self._forward_base(req))
        return self._entry(req, path, desc.name, xml)

    def _topic_entry(self, req: Request, path: str, desc: TopicInfo) -> str:
        xml = atom.description_xml("TopicDescription", desc, self._forward_base(req))
        return self._entry(req, path, desc.name, xml)

    def _sub_entry(self, req: Request, path: str, desc: SubscriptionInfo) -> str:
        xml = atom.description_xml("SubscriptionDescription", desc, self._forward_base(req))
        return self._entry(req, path, desc.name, xml)

    def _rule_entry(self, req: Request, path: str, rule: RuleInfo) -> str:
        return self._entry(req, path, rule.name, atom.rule_xml(rule))

    def _sub_entries(self, req: Request, topic: str) -> list[str]:
        subs = self.broker.management.subscription_list(req.namespace, topic)
        return [self._sub_entry(req, f"/{topic}/Subscriptions/{s.name}", s) for s in subs]

    def _list(self, req: Request, respond: Respond, title: str, entries: list[str]) -> None:
        try:
            skip = int(req.query.get("$skip", "0") or 0)
            top = int(req.query.get("$top", str(MAX_TOP)) or MAX_TOP)
        except ValueError:
            raise BadRequest("$skip and $top must be integers") from None
        if skip < 0 or top < 1:
            raise BadRequest("$skip must be at least 0 and $top at least 1")
        top = min(top, MAX_TOP)
        page = entries[skip : skip + top]
        next_url = None
        if skip + top < len(entries):
            query = {k: v for k, v in req.query.items() if k not in ("$skip", "$top")}
            query.update({"$skip": str(skip + top), "$top": str(top)})
            next_url = req.url(query=urlencode(query))
        body = atom.feed(req.url(query=urlencode(req.query)), title, _now(), page, next_url)
        respond(200, [("Content-Type", FEED_TYPE)], atom.document(body))

    def _ok(self, respond: Respond, xml: str) -> None:
        respond(200, [("Content-Type", ATOM_TYPE)], atom.document(xml))

    # ------------------------------------------------------------ namespace

    def _namespace(self, req: Request, respond: Respond) -> None:
        ns = self.broker.management.namespace_get(req.namespace)
        self._ok(respond, self._entry(req, "/$namespaceinfo", ns.name, atom.namespace_xml(ns)))

    def _list_entities(self, req: Request, kind: str, respond: Respond) -> None:
        ns = req.namespace
        if kind == "queues":
            entries = [self._queue_entry(req, "/" + q.name, q) for q in self._queues(ns)]
            self._list(req, respond, "Queues", entries)
        elif kind == "topics":
            topics = self.broker.management.topic_list(ns)
            entries = [self._topic_entry(req, "/" + t.name, t) for t in topics]
            self._list(req, respond, "Topics", entries)
        else:
            raise BadRequest(f"unknown resource collection {kind!r}: use queues or topics")

    def _queues(self, ns: str) -> list[QueueInfo]:
        # The list omits runtime counts the SDK reads with enrich=true: describe each.
        return [
            self.broker.management.queue_get(ns, q.name)
            for q in self.broker.management.queue_list(ns)
        ]

    # ------------------------------------------------------------ queues and topics

    def _kind_of(self, ns: str, name: str) -> str | None:
        try:
            self.broker.queue(ns, name)
            return "queue"
        except SbctlError:
            pass
        try:
            self.broker.topic(ns, name)
            return "topic"
        except SbctlError:
            return None

    def _entity(self, req: Request, name: str, respond: Respond) -> None:
        ns = req.namespace
        if req.method == "GET":
            kind = self._kind_of(ns, name)
            if kind == "queue":
                self._ok(
                    respond,
                    self._queue_entry(req, req.path, self.broker.management.queue_get(ns, name)),
                )
            elif kind == "topic":
                self._ok(
                    respond,
                    self._topic_entry(req, req.path, self.broker.management.topic_get(ns, name)),
                )
            else:
                raise MessagingEntityNotFound(f"queue or topic {name!r} does not exist")
        elif req.method == "DELETE":
            kind = self._kind_of(ns, name)
            if kind is None:
                raise MessagingEntityNotFound(f"queue or topic {name!r} does not exist")
            if kind == "queue":
                keys = [self.broker.resolve(ns, name)[0].key]
                self.broker.management.queue_delete(ns, name)
            else:
                keys = self.broker.management.subscription_keys(ns, name)
                self.broker.management.topic_delete(ns, name)
            self._gone(keys, f"{kind} {name!r} was deleted")
            self._durable(respond, 200, b"")
        elif req.method == "PUT":
            desc = atom.description_of(atom.parse(req.body))
            kind_tag = atom._local(desc.tag)
            update = req.headers.get("if-match", "").strip() == "*"
            if kind_tag == "QueueDescription":
                options = atom.options_from(desc, kind_tag)
                op = (
                    self.broker.management.queue_update
                    if update
                    else self.broker.management.queue_create
                )
                queue = op(ns, name, options)
                xml = self._queue_entry(
                    req, req.path, self.broker.management.queue_get(ns, queue.name)
                )
            elif kind_tag == "TopicDescription":
                options = atom.options_from(desc, kind_tag)
                top = (
                    self.broker.management.topic_update
                    if update
                    else self.broker.management.topic_create
                )
                topic = top(ns, name, options)
                xml = self._topic_entry(
                    req, req.path, self.broker.management.topic_get(ns, topic.name)
                )
            else:
                raise BadRequest(f"expected a QueueDescription or TopicDescription, not {kind_tag}")
            self._durable(respond, 200 if update else 201, atom.document(xml))
        else:
            raise MethodNotAllowed(f"{req.method} is not allowed on {req.path}")

    def _gone(self, keys: list[tuple[str, str]], why: str) -> None:
        """After a delete: end the receives waiting on the entity, on every front-end."""
        self.frontend.service.gone(keys, ServiceTimeout(why))

    # ------------------------------------------------------------ subscriptions

    def _subscription(self, req: Request, topic: str, name: str, respond: Respond) -> None:
        # The JavaScript SDK reads the names from the entry's id: Azure's capitals.
        path = f"/{topic}/Subscriptions/{name}"
        ns = req.namespace
        if req.method == "GET":
            desc = self.broker.management.subscription_get(ns, topic, name)
            self._ok(respond, self._sub_entry(req, path, desc))
        elif req.method == "DELETE":
            key = self.broker.resolve(ns, f"{topic}/subscriptions/{name}")[0].key
            self.broker.management.subscription_delete(ns, topic, name)
            self._gone([key], f"subscription {name!r} was deleted")
            self._durable(respond, 200, b"")
        elif req.method == "PUT":
            desc_el = atom.description_of(atom.parse(req.body))
            options = atom.options_from(desc_el, "SubscriptionDescription")
            default_rule = atom.default_rule_of(desc_el)
            update = req.headers.get("if-match", "").strip() == "*"
            if update:
                self.broker.management.subscription_update(ns, topic, name, options)
            else:
                rule = atom.rule_from(default_rule) if default_rule is not None else None
                self.broker.management.subscription_create(ns, topic, name, options)
                if rule is not None:
                    self._replace_default_rule(ns, topic, name, rule)
            desc = self.broker.management.subscription_get(ns, topic, name)
            xml = self._sub_entry(req, path, desc)
            self._durable(respond, 200 if update else 201, atom.document(xml))
        else:
            raise MethodNotAllowed(f"{req.method} is not allowed on {req.path}")

    def _replace_default_rule(self, ns: str, topic: str, sub: str, rule: atom.RuleSpec) -> None:
        try:
            self.broker.management.rule_delete(ns, topic, sub, "$Default")
            self.broker.management.rule_create(
                ns, topic, sub, rule.name or "$Default", rule.filter, rule.action,
                rule.action_parameters,
            )  # fmt: skip
        except SbctlError:
            self.broker.management.subscription_delete(ns, topic, sub)  # all or nothing
            raise

    # ------------------------------------------------------------ rules

    def _rule(self, req: Request, topic: str, sub: str, name: str, respond: Respond) -> None:
        path = f"/{topic}/Subscriptions/{sub}/Rules/{name}"
        ns = req.namespace
        if req.method == "GET":
            rule = self.broker.management.rule_get(ns, topic, sub, name)
            self._ok(respond, self._rule_entry(req, path, rule))
        elif req.method == "DELETE":
            self.broker.management.rule_delete(ns, topic, sub, name)
            self._durable(respond, 200, b"")
        elif req.method == "PUT":
            spec = atom.rule_from(atom.description_of(atom.parse(req.body)))
            update = req.headers.get("if-match", "").strip() == "*"
            if update:
                self._update_rule(ns, topic, sub, name, spec)
            else:
                self.broker.management.rule_create(
                    ns, topic, sub, name, spec.filter, spec.action, spec.action_parameters
                )
            rule = self.broker.management.rule_get(ns, topic, sub, name)
            xml = self._rule_entry(req, path, rule)
            self._durable(respond, 200 if update else 201, atom.document(xml))
        else:
            raise MethodNotAllowed(f"{req.method} is not allowed on {req.path}")

    def _update_rule(self, ns: str, topic: str, sub: str, name: str, spec: atom.RuleSpec) -> None:
        """Replace a rule's filter and action; the old rule stays when the new one is bad."""
        old = self.broker.management.rule_get(ns, topic, sub, name)
        self.broker.management.rule_delete(ns, topic, sub, name)
        try:
            self.broker.management.rule_create(
                ns, topic, sub, name, spec.filter, spec.action, spec.action_parameters
            )
        except SbctlError:
            self.broker.management.rule_create(
                ns, topic, sub, name, old.filter, old.action, old.action_params
            )
            raise
