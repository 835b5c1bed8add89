"""Management operations: namespaces, queues, topics, subscriptions and rules.

Rule 1: every entity operation is charged as management (daemon/README.md §0.2.1) before it does
anything.
Rule 2: folders are created and removed atomically (rename into place, rename away first).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import msgspec

from sbctl.core import layout
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessagingEntityAlreadyExists,
    MessagingEntityNotFound,
    QuotaExceeded,
)
from sbctl.core.limits import (
    MAX_CORRELATION_FILTERS,
    MAX_PARTITIONED,
    MAX_SQL_FILTERS,
    MAX_SUBSCRIPTIONS,
    PREMIUM_ENTITIES_PER_UNIT,
)
from sbctl.core.names import (
    entity_dir_name,
    entity_key,
    validate_entity_name,
    validate_namespace_name,
    validate_rule_name,
    validate_subscription_name,
)
from sbctld.broker.core import BrokerState
from sbctld.broker.namespace import (
    Namespace,
    check_throttling,
)
from sbctld.config import (
    SKUS,
    NamespaceConfig,
    QueueConfig,
    SubscriptionConfig,
    TopicConfig,
    check_queue,
    merge_options,
    save_toml,
)
from sbctld.credits import (
    DEFAULT_OPS_PER_UNIT,
    MANAGEMENT_COST,
)
from sbctld.queue import Queue
from sbctld.results import (
    Credits,
    NamespaceInfo,
    QueueInfo,
    RuleInfo,
    SubscriptionInfo,
    TopicInfo,
)
from sbctld.storage.files import fsync_dir, write_atomic
from sbctld.topic import (
    DEFAULT_RULE,
    Rule,
    Topic,
)


class Management:
    """Namespaces, queues, topics, subscriptions and rules, over the broker's state."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state

    def namespace_create(
        self,
        name: str,
        sku: str = "standard",
        partitions: int = 1,
        capacity: int = 1,
        credits_per_second: int | None = None,
        ops_per_unit: int | None = None,
    ) -> NamespaceInfo:
        validate_namespace_name(name)
        sku = sku.lower()
        if sku not in SKUS:
            raise BadRequest(f"sku {sku!r} is not one of basic, standard, premium")
        if partitions not in (1, 2, 4):
            raise BadRequest("premium_messaging_partitions must be 1, 2 or 4")
        if sku != "premium" and partitions != 1:
            # daemon/README.md §0.1.2: namespace partitions are a Premium setting.
            raise InvalidOperation("premium_messaging_partitions needs the premium sku")
        if capacity not in (1, 2, 4, 8, 16):
            raise BadRequest("capacity must be 1, 2, 4, 8 or 16 messaging units")
        if credits_per_second is None:
            credits_per_second = self.state.default_credits_per_second
        if ops_per_unit is None:
            ops_per_unit = DEFAULT_OPS_PER_UNIT
        check_throttling(credits_per_second, ops_per_unit)
        key = entity_key(name)
        if key in self.state.namespaces:
            raise MessagingEntityAlreadyExists(f"namespace {name!r} already exists")
        cfg = NamespaceConfig(
            name=name,
            sku=sku,
            premium_messaging_partitions=partitions,
            capacity=capacity,
            credits_per_second=credits_per_second,
            ops_per_unit=ops_per_unit,
            created_at_ms=self.state.clock.now_ms(),
        )
        directory = self.state.root / key
        tmp = layout.work_dir(self.state.root, "tmp")
        tmp.mkdir(mode=0o700)
        save_toml(layout.namespace_file(tmp), cfg)
        os.rename(tmp, directory)
        fsync_dir(self.state.root)
        ns = Namespace(directory, cfg)
        self.state.namespaces[key] = ns
        return ns.describe()

    def namespace_get(self, name: str) -> NamespaceInfo:
        return self.state.namespace(name).describe()

    def namespace_update(
        self,
        name: str,
        credits_per_second: int | None = None,
        capacity: int | None = None,
        ops_per_unit: int | None = None,
    ) -> NamespaceInfo:
        """Change a namespace's throttling at runtime (credits; premium units scale)."""
        ns = self.state.namespace(name)
        cfg = ns.config
        if capacity is not None:
            if capacity not in (1, 2, 4, 8, 16):
                raise BadRequest("capacity must be 1, 2, 4, 8 or 16 messaging units")
            if not ns.premium:
                raise InvalidOperation("capacity (messaging units) needs the premium sku")
            held = ns.entity_count
            if held > PREMIUM_ENTITIES_PER_UNIT * capacity:
                raise QuotaExceeded(
                    f"namespace {ns.name!r} holds {held} entities, more than {capacity} "
                    "messaging units allow"
                )
        if credits_per_second is not None and ns.premium:
            raise InvalidOperation("premium namespaces have no credits: scale them with capacity")
        new = msgspec.structs.replace(
            cfg,
            credits_per_second=cfg.credits_per_second
            if credits_per_second is None
            else credits_per_second,
            capacity=cfg.capacity if capacity is None else capacity,
            ops_per_unit=cfg.ops_per_unit if ops_per_unit is None else ops_per_unit,
        )
        check_throttling(new.credits_per_second, new.ops_per_unit)
        save_toml(layout.namespace_file(ns.directory), new)
        ns.config = new
        ns.meter.limit = ns.credit_limit
        return ns.describe()

    def namespace_credits(self, name: str) -> Credits:
        """Throttling state: budget, what is left of this period, consumption by kind."""
        ns = self.state.namespace(name)
        return ns.credits(self.state.time_of(ns))

    def namespace_list(self) -> list[NamespaceInfo]:
        return [ns.describe() for ns in self.state.namespaces.values()]

    def namespace_delete(self, name: str) -> dict[str, Any]:
        ns = self.state.namespace(name)
        self.state.reach_namespace(ns)
        for entity in [*ns.queues.values(), *ns.topics.values()]:
            entity.reach_all()  # daemon/README.md §0.1.10: deleting needs every store
        for queue in [*ns.queues.values(), *ns.topics.values()]:
            queue.close()
        self.state.remove_dir(ns.directory)
        del self.state.namespaces[entity_key(name)]
        self.state.forget_paths()
        self.state.drop_faults(entity_key(name), None, "its namespace was deleted")
        if self.state.paired:
            self.state.pairings.namespace_deleted(entity_key(name), self.state.clock.now_ms())
        return {"deleted": ns.name}

    def _manage(self, namespace: str) -> Namespace:
        """A management operation (daemon/README.md §0.2.1): charged 10 before anything happens."""
        ns = self.state.namespace(namespace)
        ns.charge("management", MANAGEMENT_COST, self.state.time_of(ns))
        return ns

    def queue_create(self, namespace: str, name: str, options: dict[str, Any]) -> QueueInfo:
        ns = self._manage(namespace)
        key = self._new_entity_key(ns, name, "queue")
        now = self.state.time_of(ns)
        cfg = merge_options(QueueConfig(name=name), options, creating=True)
        partitions = self._check_new_entity(ns, cfg, options)
        self.state.reach_namespace(ns)
        cfg.created_at_ms = cfg.updated_at_ms = now
        parent = layout.queues_dir(ns.directory)
        directory = self._make_dir(parent, name, {layout.QUEUE_FILE: cfg})
        queue = Queue.open(
            directory,
            cfg,
            partitions,
            self.state.syncer,
            max_message_bytes=ns.max_message_bytes,
            segment_bytes=self.state.segment_bytes,
            notes=[],
            now=now,
        )
        queue.key = (entity_key(ns.name), key)
        ns.queues[key] = queue
        if self.state.faults.faults:
            self.state.faults.apply(queue, "queue")  # a namespace-wide slow fault covers it
        return queue.describe()

    def _new_entity_key(self, ns: Namespace, name: str, kind: str) -> str:
        """A queue or topic name that is free: names are one space (daemon/README.md §14.9)."""
        validate_entity_name(name, kind)
        key = entity_key(name)
        if key in ns.queues or key in ns.topics:
            other = "queue" if key in ns.queues else "topic"
            raise MessagingEntityAlreadyExists(
                f"{other} {name!r} already exists in namespace {ns.name!r}"
            )
        return key

    def _make_dir(self, parent: Path, name: str, files: dict[str, Any]) -> Path:
        """Create an entity folder with its description files, atomically."""
        parent.mkdir(mode=0o700, exist_ok=True)
        directory = parent / entity_dir_name(name)
        if directory.exists():  # leftovers of a create that never completed
            shutil.rmtree(directory)
        tmp = layout.work_dir(parent, "tmp")
        tmp.mkdir(mode=0o700)
        for file_name, content in files.items():
            if isinstance(content, bytes):
                write_atomic(tmp / file_name, content)  # synced, with its seal
            else:
                save_toml(tmp / file_name, content)
        os.rename(tmp, directory)
        fsync_dir(parent)
        return directory

    def _check_new_entity(self, ns: Namespace, cfg: QueueConfig, options: dict[str, Any]) -> int:
        """Tier, range, forwarding and quota checks of a new queue or topic; returns its
        partition count."""
        if ns.premium:
            if cfg.enable_partitioning and ns.config.premium_messaging_partitions == 1:
                raise InvalidOperation(
                    "premium namespaces do not partition entities one by one; create the "
                    "namespace with --premium-messaging-partitions 2 or 4"
                )
            cfg.enable_partitioning = ns.config.premium_messaging_partitions > 1
        if ns.config.sku == "basic" and "default_message_time_to_live" not in options:
            cfg.default_message_time_to_live = 14 * 86_400_000  # daemon/README.md §15.1
        check_queue(cfg, ns.config.sku, set(options))
        self._check_forwarding(ns, cfg)
        limit = ns.max_entities
        if ns.entity_count >= limit:
            raise QuotaExceeded(f"namespace {ns.name!r} already holds {limit} entities")
        partitions = ns.partition_count(cfg)
        if partitions > 1 and not ns.premium and ns.partitioned_count >= MAX_PARTITIONED:
            raise QuotaExceeded(
                f"namespace {ns.name!r} already holds {MAX_PARTITIONED} partitioned entities"
            )
        return partitions

    def _check_forwarding(self, ns: Namespace, cfg: QueueConfig) -> None:
        """daemon/README.md §11.1, §4.7: the destination must exist in the same namespace."""
        for field in ("forward_to", "forward_dead_lettered_messages_to"):
            target = getattr(cfg, field)
            if target is None:
                continue
            validate_entity_name(target)
            if not isinstance(cfg, SubscriptionConfig) and entity_key(target) == entity_key(
                cfg.name
            ):
                raise InvalidOperation(f"{field} cannot point an entity at itself")
            if entity_key(target) not in ns.queues and entity_key(target) not in ns.topics:
                raise MessagingEntityNotFound(
                    f"{field} destination {target!r} does not exist in namespace {ns.name!r}"
                )

    def queue_update(self, namespace: str, name: str, options: dict[str, Any]) -> QueueInfo:
        ns = self._manage(namespace)
        queue = self.state.queue(namespace, name)
        queue.reach_all()  # daemon/README.md §0.1.10
        cfg = merge_options(queue.config, options, creating=False)
        check_queue(cfg, ns.config.sku, set(options))
        self._check_forwarding(ns, cfg)
        cfg.updated_at_ms = queue.accessed_at_ms = self.state.time_of(ns)
        queue.config = cfg
        queue.save()
        self.state.flow(queue)  # a new forward_to passes on what the queue holds
        return queue.describe()

    def queue_get(self, namespace: str, name: str) -> QueueInfo:
        self._manage(namespace)
        return self.state.queue(namespace, name).describe()

    def queue_list(self, namespace: str) -> list[QueueInfo]:
        ns = self._manage(namespace)
        return [q.describe(partitions=False) for q in ns.queues.values()]

    def queue_delete(self, namespace: str, name: str) -> dict[str, Any]:
        self._manage(namespace)
        self.state.queue(namespace, name).reach_all()  # daemon/README.md §0.1.10
        return self.state.delete_queue(namespace, name)

    def topic_create(self, namespace: str, name: str, options: dict[str, Any]) -> TopicInfo:
        ns = self._manage(namespace)
        if ns.config.sku == "basic":
            raise InvalidOperation("topics are not supported on the Basic tier")
        key = self._new_entity_key(ns, name, "topic")
        now = self.state.time_of(ns)
        cfg = merge_options(TopicConfig(name=name), options, creating=True)
        partitions = self._check_new_entity(ns, cfg, options)
        self.state.reach_namespace(ns)
        cfg.created_at_ms = cfg.updated_at_ms = now
        directory = self._make_dir(layout.topics_dir(ns.directory), name, {layout.TOPIC_FILE: cfg})
        topic = Topic.open_topic(
            directory,
            cfg,
            partitions,
            self.state.syncer,
            max_message_bytes=ns.max_message_bytes,
            segment_bytes=self.state.segment_bytes,
            notes=[],
            now=now,
            folders=self.state.folders,
            key=(entity_key(ns.name), key),
        )
        ns.topics[key] = topic
        if self.state.faults.faults:
            self.state.faults.apply(topic, "topic")  # a namespace-wide slow fault covers it
        return topic.describe()

    def topic_update(self, namespace: str, name: str, options: dict[str, Any]) -> TopicInfo:
        ns = self._manage(namespace)
        topic = self.state.topic(namespace, name)
        topic.reach_all()  # daemon/README.md §0.1.10
        cfg = merge_options(topic.config, options, creating=False)
        check_queue(cfg, ns.config.sku, set(options))
        cfg.updated_at_ms = topic.accessed_at_ms = self.state.time_of(ns)
        topic.config = cfg
        topic.save()
        return topic.describe()

    def topic_get(self, namespace: str, name: str) -> TopicInfo:
        self._manage(namespace)
        return self.state.topic(namespace, name).describe()

    def topic_list(self, namespace: str) -> list[TopicInfo]:
        ns = self._manage(namespace)
        return [t.describe(partitions=False) for t in ns.topics.values()]

    def topic_delete(self, namespace: str, name: str) -> dict[str, Any]:
        ns = self._manage(namespace)
        topic = self.state.topic(namespace, name)
        topic.reach_all()  # daemon/README.md §0.1.10
        return self.state.delete_topic(ns, topic)

    def subscription_keys(self, namespace: str, topic: str) -> list[tuple[str, str]]:
        """Keys of a topic's subscriptions (the server fails their waiters on deletes)."""
        ns = self.state.namespaces.get(entity_key(namespace))
        found = ns.topics.get(entity_key(topic)) if ns else None
        return [s.key for s in found.subscriptions.values()] if found else []

    def subscription_create(
        self, namespace: str, topic_name: str, name: str, options: dict[str, Any]
    ) -> SubscriptionInfo:
        ns = self._manage(namespace)
        topic = self.state.topic(namespace, topic_name)
        validate_subscription_name(name)
        # daemon/README.md §0.1.10: a subscription lives in every store of its topic
        topic.reach_all()
        if name.lower() in topic.subscriptions:
            raise MessagingEntityAlreadyExists(
                f"subscription {name!r} already exists in topic {topic.name!r}"
            )
        if len(topic.subscriptions) >= MAX_SUBSCRIPTIONS:
            raise QuotaExceeded(
                f"topic {topic.name!r} already has {MAX_SUBSCRIPTIONS} subscriptions"
            )
        self._check_filter_quota(topic, sql=1)  # its $Default rule
        now = self.state.time_of(ns)
        cfg = merge_options(SubscriptionConfig(name=name), options, creating=True)
        check_queue(cfg, ns.config.sku, set(options))
        self._check_forwarding(ns, cfg)
        # Ids are never reused: the topic's description records the next one first.
        cfg.subscription_id = topic.config.next_subscription_id
        topic.config.next_subscription_id += 1
        topic.save()
        cfg.created_at_ms = cfg.updated_at_ms = now
        rules = [Rule(DEFAULT_RULE, None, None, now)]  # daemon/README.md §10.1
        rules_json = json.dumps([r.to_json() for r in rules]).encode()
        directory = self._make_dir(
            layout.subscriptions_dir(topic.directory),
            name,
            {layout.SUBSCRIPTION_FILE: cfg, layout.RULES_FILE: rules_json},
        )
        sub = topic.add_subscription(directory, cfg, self.state.syncer, now)
        sub.rules = rules
        if topic.faulty:
            self.state.faults.apply(topic, "topic", topic.subscriptions.values())
        return sub.describe()

    def subscription_update(
        self, namespace: str, topic_name: str, name: str, options: dict[str, Any]
    ) -> SubscriptionInfo:
        ns = self._manage(namespace)
        sub = self.state.subscription(self.state.topic(namespace, topic_name), name)
        sub.reach_all()  # daemon/README.md §0.1.10
        cfg = merge_options(sub.config, options, creating=False)
        check_queue(cfg, ns.config.sku, set(options))
        self._check_forwarding(ns, cfg)
        cfg.updated_at_ms = sub.accessed_at_ms = self.state.time_of(ns)
        sub.config = cfg
        sub.save()
        self.state.flow(sub)  # a new forward_to passes on what the subscription holds
        return sub.describe()

    def subscription_get(self, namespace: str, topic_name: str, name: str) -> SubscriptionInfo:
        self._manage(namespace)
        return self.state.subscription(self.state.topic(namespace, topic_name), name).describe()

    def subscription_list(self, namespace: str, topic_name: str) -> list[SubscriptionInfo]:
        self._manage(namespace)
        return [
            s.describe() for s in self.state.topic(namespace, topic_name).subscriptions.values()
        ]

    def subscription_delete(self, namespace: str, topic_name: str, name: str) -> dict[str, Any]:
        self._manage(namespace)
        topic = self.state.topic(namespace, topic_name)
        sub = self.state.subscription(topic, name)
        sub.reach_all()  # daemon/README.md §0.1.10
        return self.state.delete_subscription(topic, sub)

    def _check_filter_quota(self, topic: Topic, *, sql: int = 0, correlation: int = 0) -> None:
        """daemon/README.md §10.9, §14.5: 2,000 SQL and 100,000 correlation filters per topic."""
        rules = [r for s in topic.subscriptions.values() for r in s.rules]
        have_sql = sum(r.is_sql for r in rules)
        if sql and have_sql + sql > MAX_SQL_FILTERS:
            raise QuotaExceeded(f"topic {topic.name!r} already has {MAX_SQL_FILTERS} SQL filters")
        if correlation and len(rules) - have_sql + correlation > MAX_CORRELATION_FILTERS:
            raise QuotaExceeded(
                f"topic {topic.name!r} already has {MAX_CORRELATION_FILTERS} correlation filters"
            )

    def rule_create(
        self,
        namespace: str,
        topic_name: str,
        sub_name: str,
        name: str,
        filter_spec: dict[str, Any] | None,
        action: str | None,
        action_parameters: dict[str, Any] | None = None,
    ) -> RuleInfo:
        self._manage(namespace)
        topic = self.state.topic(namespace, topic_name)
        sub = self.state.subscription(topic, sub_name)
        validate_rule_name(name)
        sub.reach_all()  # daemon/README.md §0.1.10, §0.1.11
        if sub.rule(name) is not None:
            raise MessagingEntityAlreadyExists(
                f"rule {name!r} already exists in subscription {sub.name!r}"
            )
        rule = Rule(name, filter_spec, action, self.state.now_in(topic.key[0]), action_parameters)
        if rule.is_sql:
            self._check_filter_quota(topic, sql=1)
        else:
            self._check_filter_quota(topic, correlation=1)
        sub.rules.append(rule)
        sub.save_rules()
        return rule.describe()

    def rule_restore(
        self, namespace: str, topic_name: str, sub_name: str, rule: RuleInfo
    ) -> RuleInfo:
        """Rewrite an existing rule in place (its place and creation time kept) with the
        filter and action of ``rule``: a data dir's upgrade (sbctld.frontends.http.sqlparams)."""
        sub = self.state.subscription(self.state.topic(namespace, topic_name), sub_name)
        old = self._rule(namespace, topic_name, sub_name, rule.name)
        new = Rule(old.name, rule.filter, rule.action, old.created_at_ms, rule.action_params)
        sub.rules[sub.rules.index(old)] = new
        sub.save_rules()
        return new.describe()

    def _rule(self, namespace: str, topic_name: str, sub_name: str, name: str) -> Rule:
        sub = self.state.subscription(self.state.topic(namespace, topic_name), sub_name)
        rule = sub.rule(name)
        if rule is None:
            validate_rule_name(name)
            raise MessagingEntityNotFound(
                f"rule {name!r} does not exist in subscription {sub.name!r}"
            )
        return rule

    def rule_get(self, namespace: str, topic_name: str, sub_name: str, name: str) -> RuleInfo:
        self._manage(namespace)
        return self._rule(namespace, topic_name, sub_name, name).describe()

    def rule_list(self, namespace: str, topic_name: str, sub_name: str) -> list[RuleInfo]:
        self._manage(namespace)
        sub = self.state.subscription(self.state.topic(namespace, topic_name), sub_name)
        return [r.describe() for r in sub.rules]

    def rule_delete(
        self, namespace: str, topic_name: str, sub_name: str, name: str
    ) -> dict[str, Any]:
        """daemon/README.md §10.1: deleting every rule means the subscription receives nothing."""
        self._manage(namespace)
        rule = self._rule(namespace, topic_name, sub_name, name)
        sub = self.state.subscription(self.state.topic(namespace, topic_name), sub_name)
        sub.reach_all()  # daemon/README.md §0.1.10, §0.1.11
        sub.rules.remove(rule)
        sub.save_rules()
        return {"deleted": rule.name, "subscription": sub.name}
