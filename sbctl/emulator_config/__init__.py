"""The official Azure Service Bus emulator's ``Config.json``, read and written by sbctl.

``sbctl import-config`` and ``sbctl export-config`` (README, "Moving from the official
emulator") are thin wrappers over the three steps here:

- :func:`load_config` / :func:`parse_config` check a document against the emulator's schema
  (``UserConfig.Namespaces[].Queues[]`` and ``.Topics[].Subscriptions[].Rules[]``, each with
  its ``Properties``; ``UserConfig.Logging`` is accepted and ignored) plus sbctl's extras
  (:data:`QUEUE_PROPS` and friends mark them), and return a typed :class:`ConfigPlan`.
  Every refusal is a :class:`~sbctl.core.errors.BadRequest` that starts with the JSON path of the
  offending value: ``UserConfig.Namespaces[0].Queues[1].Properties.LockDuration: ...``.
- :func:`apply_config` makes the daemon hold what a plan describes, idempotently: it
  creates what is missing, updates the properties that differ and leaves equal ones alone.
  It reads everything first and refuses, before it changes anything (and in a dry run),
  whatever the daemon would: a property fixed at creation that differs, a value out of
  range or not for the tier, a forward target that exists nowhere, SQL that does not
  compile (with the daemon's own ``sbctld.config`` and ``sbctld.filters`` checks).
- :func:`export_config` writes namespaces back in the same schema; its output parses, and
  imports into a fresh data directory give the same export again.

Sources: the installer's ``ServiceBus-Emulator/Schema/Config-schema.json`` and
``Config/Config.json`` (github.com/Azure/azure-service-bus-emulator-installer) and the
config in learn.microsoft.com's "Test locally by using the Azure Service Bus emulator".

Module map (imports run one way): :mod:`~sbctl.emulator_config.schema` →
:mod:`~sbctl.emulator_config.parse` → :mod:`~sbctl.emulator_config.apply` →
:mod:`~sbctl.emulator_config.export`.
"""

from __future__ import annotations

from sbctl.emulator_config.apply import apply_config
from sbctl.emulator_config.export import export_config
from sbctl.emulator_config.parse import load_config, parse_config
from sbctl.emulator_config.schema import (
    CORRELATION_KEYS,
    FILTER_TYPES,
    FORWARD_KEYS,
    IMMUTABLE,
    INT64_MAX,
    LOGGING_DEFAULT,
    NAMESPACE_PROPS,
    NOT_ON_BASIC,
    QUEUE_PROPS,
    SKUS,
    STATUSES,
    SUBSCRIPTION_PROPS,
    TOPIC_PROPS,
    ConfigPlan,
    EntityPlan,
    Kind,
    NamespacePlan,
    Prop,
    RulePlan,
    SubscriptionPlan,
    TopicPlan,
)

__all__ = [
    "CORRELATION_KEYS",
    "FILTER_TYPES",
    "FORWARD_KEYS",
    "IMMUTABLE",
    "INT64_MAX",
    "LOGGING_DEFAULT",
    "NAMESPACE_PROPS",
    "NOT_ON_BASIC",
    "QUEUE_PROPS",
    "SKUS",
    "STATUSES",
    "SUBSCRIPTION_PROPS",
    "TOPIC_PROPS",
    "ConfigPlan",
    "EntityPlan",
    "Kind",
    "NamespacePlan",
    "Prop",
    "RulePlan",
    "SubscriptionPlan",
    "TopicPlan",
    "apply_config",
    "export_config",
    "load_config",
    "parse_config",
]
