"""The management API (Atom XML): routes → the service's operations, those the CLI runs.

``GET|PUT|DELETE /{queue-or-topic}``, ``/{topic}/subscriptions/{name}``,
``/{topic}/subscriptions/{sub}/rules/{name}``; lists at ``/$Resources/queues|topics``,
``/{topic}/subscriptions`` and ``…/rules`` (``$skip``, ``$top``, a ``next`` link while more
remain); ``GET /$namespaceinfo``. ``PUT`` creates (409 when it exists) unless it carries
``If-Match: *``, which updates (404 when missing). Changes are answered once durable.
A route made of several operations (create, then describe) runs them as one request
(:meth:`sbctld.service.Service.run_steps`).
Every error is the service's ``<Error><Code>…</Code><Detail>…</Detail></Error>`` with the
HTTP status of the error (daemon/README.md §30).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from sbctl.core.durations import format_instant
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessagingEntityNotFound,
    SbctlError,
    ServiceCommunicationProblem,
)
from sbctl.core.protocol import (
    EntityCreate,
    EntityRef,
    NamespaceRef,
    NamespaceScope,
    RuleCreate,
    RuleRef,
    SubscriptionCreate,
    SubscriptionRef,
    TopicScope,
)
from sbctld.frontends.http import atom
from sbctld.frontends.http.request import Request, Respond
from sbctld.frontends.statuses import status_of
from sbctld.results import QueueInfo, RuleInfo, SubscriptionInfo, TopicInfo
from sbctld.service import Reply, Step, replying

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


def answering(respond: Respond, ok: Callable[[Any], None]) -> Reply:
    """A reply that answers an operation's result with ``ok`` (which may raise an SbctlError)
    and its error as the service answers errors."""
    return replying(ok, lambda err: fail(respond, err))


def _now() -> str:
    return format_instant(int(time.time() * 1000))


class Management:
    def __init__(self, frontend: HttpHost) -> None:
        self.frontend = frontend
        self.service = frontend.service

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
        ns = req.namespace
        if not rest:
            self._only(req, "GET")

            def subscriptions(subs: list[SubscriptionInfo]) -> None:
                entries = [
                    self._sub_entry(req, f"/{topic}/Subscriptions/{s.name}", s) for s in subs
                ]
                self._list(req, respond, "Subscriptions", entries)

            self._run(respond, "subscription_list", TopicScope(ns, topic), subscriptions)
        elif len(rest) == 1:
            self._subscription(req, topic, rest[0], respond)
        elif len(rest) == 2 and rest[1].lower() == "rules":
            self._only(req, "GET")
            base = f"/{topic}/Subscriptions/{rest[0]}/Rules/"

            def rules(found: list[RuleInfo]) -> None:
                entries = [self._rule_entry(req, base + r.name, r) for r in found]
                self._list(req, respond, "Rules", entries)

            self._run(respond, "rule_list", SubscriptionRef(ns, topic, rest[0]), rules)
        elif len(rest) == 3 and rest[1].lower() == "rules":
            self._rule(req, topic, rest[0], rest[2], respond)
        else:
            raise MessagingEntityNotFound(f"no such resource {req.path!r}")

    # ------------------------------------------------------------ running and answering

    def _run(self, respond: Respond, name: str, args: Any, ok: Callable[[Any], None]) -> None:
        self.service.run(name, args, answering(respond, ok))

    def _steps(
        self, respond: Respond, steps: Callable[[Step], Any], ok: Callable[[Any], None]
    ) -> None:
        self.service.run_steps(steps, answering(respond, ok))

    @staticmethod
    def _answer_xml(respond: Respond, status: int) -> Callable[[str], None]:
        """Answer ``status`` with the entry the operation's result is made into."""
        return lambda xml: respond(status, [("Content-Type", ATOM_TYPE)], atom.document(xml))

    @staticmethod
    def _answer_empty(respond: Respond) -> Callable[[Any], None]:
        """Answer 200 without a body (a delete)."""
        return lambda _result: respond(200, [], b"")

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

    # ------------------------------------------------------------ namespace

    def _namespace(self, req: Request, respond: Respond) -> None:
        def ok(ns: Any) -> None:
            entry = self._entry(req, "/$namespaceinfo", ns.name, atom.namespace_xml(ns))
            self._answer_xml(respond, 200)(entry)

        self._run(respond, "namespace_get", NamespaceRef(req.namespace), ok)

    def _list_entities(self, req: Request, kind: str, respond: Respond) -> None:
        ns = req.namespace
        if kind == "queues":

            def queues(step: Step) -> list[QueueInfo]:
                # The list omits runtime counts the SDK reads with enrich=true: describe each.
                found = step("queue_list", NamespaceScope(ns))
                return [step("queue_get", EntityRef(ns, q.name)) for q in found]

            def listed_queues(found: list[QueueInfo]) -> None:
                entries = [self._queue_entry(req, "/" + q.name, q) for q in found]
                self._list(req, respond, "Queues", entries)

            self._steps(respond, queues, listed_queues)
        elif kind == "topics":

            def listed_topics(found: list[TopicInfo]) -> None:
                entries = [self._topic_entry(req, "/" + t.name, t) for t in found]
                self._list(req, respond, "Topics", entries)

            self._run(respond, "topic_list", NamespaceScope(ns), listed_topics)
        else:
            raise BadRequest(f"unknown resource collection {kind!r}: use queues or topics")

    # ------------------------------------------------------------ queues and topics

    @staticmethod
    def _describe(step: Step, ns: str, name: str) -> tuple[str, Any]:
        """Whether ``name`` is a queue or a topic, and its description
        (MessagingEntityNotFound: neither)."""
        for kind in ("queue", "topic"):
            try:
                return kind, step(f"{kind}_get", EntityRef(ns, name))
            except MessagingEntityNotFound:
                pass
        raise MessagingEntityNotFound(f"queue or topic {name!r} does not exist")

    def _entity(self, req: Request, name: str, respond: Respond) -> None:
        ns = req.namespace
        entry: dict[str, Callable[[Request, str, Any], str]] = {
            "queue": self._queue_entry,
            "topic": self._topic_entry,
        }
        if req.method == "GET":

            def get(step: Step) -> str:
                kind, desc = self._describe(step, ns, name)
                return entry[kind](req, req.path, desc)

            self._steps(respond, get, self._answer_xml(respond, 200))
        elif req.method == "DELETE":

            def delete(step: Step) -> None:  # (receives parked on it fail: the service's)
                step(f"{self._describe(step, ns, name)[0]}_delete", EntityRef(ns, name))

            self._steps(respond, delete, self._answer_empty(respond))
        elif req.method == "PUT":
            desc = atom.description_of(atom.parse(req.body))
            kind_tag = atom._local(desc.tag)
            update = req.headers.get("if-match", "").strip() == "*"
            kind = {"QueueDescription": "queue", "TopicDescription": "topic"}.get(kind_tag)
            if kind is None:
                raise BadRequest(f"expected a QueueDescription or TopicDescription, not {kind_tag}")
            options = atom.options_from(desc, kind_tag)

            def put(step: Step) -> str:
                made = step(
                    f"{kind}_{'update' if update else 'create'}", EntityCreate(ns, name, options)
                )
                return entry[kind](req, req.path, step(f"{kind}_get", EntityRef(ns, made.name)))

            self._steps(respond, put, self._answer_xml(respond, 200 if update else 201))
        else:
            raise MethodNotAllowed(f"{req.method} is not allowed on {req.path}")

    # ------------------------------------------------------------ subscriptions

    def _subscription(self, req: Request, topic: str, name: str, respond: Respond) -> None:
        # The JavaScript SDK reads the names from the entry's id: Azure's capitals.
        path = f"/{topic}/Subscriptions/{name}"
        ns = req.namespace
        ref = SubscriptionRef(ns, topic, name)
        if req.method == "GET":
            ok = self._answer_xml(respond, 200)
            self._run(respond, "subscription_get", ref, lambda d: ok(self._sub_entry(req, path, d)))
        elif req.method == "DELETE":  # (receives parked on it fail: the service's)
            self._run(respond, "subscription_delete", ref, self._answer_empty(respond))
        elif req.method == "PUT":
            desc_el = atom.description_of(atom.parse(req.body))
            options = atom.options_from(desc_el, "SubscriptionDescription")
            default_rule = atom.default_rule_of(desc_el)
            update = req.headers.get("if-match", "").strip() == "*"
            rule = atom.rule_from(default_rule) if default_rule is not None and not update else None
            args = SubscriptionCreate(ns, topic, name, options)

            def put(step: Step) -> str:
                step("subscription_update" if update else "subscription_create", args)
                if rule is not None:
                    self._replace_default_rule(step, ref, rule)
                return self._sub_entry(req, path, step("subscription_get", ref))

            self._steps(respond, put, self._answer_xml(respond, 200 if update else 201))
        else:
            raise MethodNotAllowed(f"{req.method} is not allowed on {req.path}")

    @staticmethod
    def _replace_default_rule(step: Step, sub: SubscriptionRef, rule: atom.RuleSpec) -> None:
        ns, topic, name = sub.namespace, sub.topic, sub.name
        try:
            step("rule_delete", RuleRef(ns, topic, name, "$Default"))
            step(
                "rule_create",
                RuleCreate(
                    ns,
                    topic,
                    name,
                    rule.name or "$Default",
                    rule.filter,
                    rule.action,
                    rule.action_parameters,
                ),
            )
        except SbctlError:
            step("subscription_delete", sub)  # all or nothing
            raise

    # ------------------------------------------------------------ rules

    def _rule(self, req: Request, topic: str, sub: str, name: str, respond: Respond) -> None:
        path = f"/{topic}/Subscriptions/{sub}/Rules/{name}"
        ref = RuleRef(req.namespace, topic, sub, name)
        if req.method == "GET":
            ok = self._answer_xml(respond, 200)
            self._run(respond, "rule_get", ref, lambda r: ok(self._rule_entry(req, path, r)))
        elif req.method == "DELETE":
            self._run(respond, "rule_delete", ref, self._answer_empty(respond))
        elif req.method == "PUT":
            spec = atom.rule_from(atom.description_of(atom.parse(req.body)))
            update = req.headers.get("if-match", "").strip() == "*"
            new = RuleCreate(
                req.namespace, topic, sub, name, spec.filter, spec.action, spec.action_parameters
            )

            def put(step: Step) -> str:
                if update:
                    self._update_rule(step, ref, new)
                else:
                    step("rule_create", new)
                return self._rule_entry(req, path, step("rule_get", ref))

            self._steps(respond, put, self._answer_xml(respond, 200 if update else 201))
        else:
            raise MethodNotAllowed(f"{req.method} is not allowed on {req.path}")

    @staticmethod
    def _update_rule(step: Step, ref: RuleRef, new: RuleCreate) -> None:
        """Replace a rule's filter and action; the old rule stays when the new one is bad."""
        old = step("rule_get", ref)
        step("rule_delete", ref)
        try:
            step("rule_create", new)
        except SbctlError:
            restore = RuleCreate(
                ref.namespace,
                ref.topic,
                ref.subscription,
                ref.name,
                old.filter,
                old.action,
                old.action_params,
            )
            step("rule_create", restore)
            raise
