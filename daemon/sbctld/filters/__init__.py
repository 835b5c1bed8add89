"""Subscription-rule filters and rule actions (daemon/README.md §10.4-10.9).

The broker compiles a rule once, when it is created or loaded, and evaluates it per message::

    view = MessageView(message, sequence_number=seq, enqueued_time_ms=now, size=size)
    for rule in rules:                       # one view per message, shared by every rule
        if rule.filter.matches(view):        # may raise FilterEvaluationError
            copy = rule.action.apply(view) if rule.action else message

A :class:`FilterEvaluationError` dead-letters the message with ``reason = type_name`` and
``description`` (daemon/README.md §4.4, §10.7). Anything wrong with the rule itself (syntax, keys,
limits, read-only targets) is a :class:`~sbctl.core.errors.BadRequest` from the ``compile_*``
functions, naming the 1-based character position where there is one.

How SQL is compiled: tokenizer, recursive-descent parser, a small tree, then Python source
(one function per filter: straight-line statements over temporaries, nested ``if`` only for
AND/OR short-circuits) handed to ``compile()``. The source holds only identifiers made here
and numeric literals from ``repr(int)``/``repr(float)``; every string, name and pattern
from the user reaches it through the function's namespace, never spliced into source.

Semantics. Sources: learn.microsoft.com "Subscription Rule SQL Filter Syntax" and "SQL Action
Syntax", the .NET SDK; * marks this project's decisions where they are silent.

- Three-valued logic: a missing user property, a null value and NULL are *unknown*.
  F AND U = F, T OR U = T, any other operation with U gives U, NOT U = U; only TRUE
  selects. AND and OR evaluate left to right and stop at the first F (AND) or T (OR)*,
  so an error in a skipped operand is not raised. ``x IS NULL`` is TRUE for missing or null;
  ``EXISTS(x)`` is TRUE when the user property is present, even with a null value*.
- Types: integers are Int64, decimals and scientific numbers Double, 'text' String,
  TRUE/FALSE Boolean. Int64 with Double promotes to Double (C#). Arithmetic on Int64 that
  leaves the Int64 range raises ``OverflowException``*; Int64 ``/`` truncates toward zero and
  ``%`` takes the dividend's sign (C#); Int64 ``/`` or ``%`` by 0 raises
  ``DivideByZeroException``; Double follows IEEE (1.0/0 = infinity). ``+`` with a String
  operand concatenates, printing numbers and booleans as .NET does ("True", "1E+20")*.
  Any other arithmetic on a String or Boolean raises ``InvalidOperationException``.
- Comparisons: numbers numerically; strings ordinally and case-sensitively; booleans only
  with ``=``/``<>``. Values of incompatible types (String with number, Boolean with
  anything else) are never equal: ``=`` is FALSE and ``<>`` TRUE*, while ``<``, ``<=``,
  ``>``, ``>=`` and LIKE on them are unknown* (no dead letter; the message just does not
  match). Correlation filters compare with the same typed equality, so 5 does not match "5".
- ``IN``: unknown when the left operand is unknown (doc); otherwise TRUE if any item is equal
  as for ``=``, else FALSE* (unknown items do not make the result unknown).
- ``LIKE``: ``%`` any run, ``_`` one character, the ESCAPE character makes the next one
  literal; case-sensitive*; no ``[...]`` classes*. Constant patterns are matched without
  regular expressions where they are plain prefixes, suffixes or infixes.
- Names are case-insensitive: an exact-case user property wins, else the first property in
  the message whose lower-cased name matches*. ``property(name)``/``p(name)`` read a user
  property, or a system one when the name starts with ``sys.``*. ``newid()`` is a String
  GUID*.
- System properties (``sys.`` names, see :data:`SYSTEM_PROPERTIES`): an unset one is NULL.
  TimeToLive is Int64 milliseconds, times (EnqueuedTimeUtc, ScheduledEnqueueTimeUtc) are Int64
  milliseconds since the Unix epoch, DeliveryCount is 0 while filtering*. A ``sys.`` name
  that is not a system property compiles but raises ``FilterException`` when evaluated
  (doc), except inside EXISTS, which is then FALSE*.
- Grammar strictness*: a bare value is not a condition (``WHERE flag`` needs ``flag = TRUE``),
  IS NULL and EXISTS take a property, and expressions nest at most :data:`MAX_NESTING`
  levels (parentheses, NOT, signs).
- Parameters: ``@name`` in a filter or action is the value the rule's parameters give it
  (``{"@name": value}``; names match case-insensitively, with or without the ``@``), taken
  as a literal when the rule is compiled; an ``@name`` without a value is refused then.
- Filters: ``None``/``{"type": "true"}`` and ``{"type": "false"}`` are the TrueFilter (SQL
  ``1=1``) and FalseFilter. A correlation filter with no condition at all is refused*: the
  .NET SDK would send it (its parameterless constructor), but the Terraform/Pulumi providers
  reject it ("at least one property must be set") and a match-everything rule is better
  written as a TrueFilter. Correlation system fields must be non-empty strings*.
- Actions: statements run in order, each seeing the earlier ones' effects*. SET on a user
  property keeps an existing Double a Double when given an Int64 (C# implicit conversion)*;
  REMOVE of a missing user property does nothing (doc). SET on a String system property
  converts numbers and booleans as above; TimeToLive and ScheduledEnqueueTimeUtc take
  numbers (milliseconds). Read-only system properties are refused at compile time; so is
  REMOVE sys.MessageId*. Setting MessageId to NULL or "", an id over 128 characters, a
  TimeToLive <= 0, or SessionId and PartitionKey to different values raises at runtime*.

Modules, each importing only those listed before it (tests/unit/test_architecture.py checks
that the import graph has no cycle)::

    values    limits, FilterEvaluationError, MessageView, system properties, .NET text
    runtime   three-valued operators, arithmetic, IN, LIKE, property(): what compiled code calls
    lexer     text -> tokens
    tree      the syntax tree's node classes
    parser    tokens -> a checked tree; parse() raises BadRequest with the position
    codegen   tree -> Python source -> a function of a MessageView
    rules     compile_filter, normalize_filter, compile_action: the entry points

This package's own namespace is its public API; the broker and the CLI's config import use
nothing else.
"""

from sbctld.filters.rules import (
    CORRELATION_FIELDS,
    CompiledAction,
    CompiledFilter,
    check_parameters,
    compile_action,
    compile_filter,
    normalize_filter,
)
from sbctld.filters.runtime import MAX_TEXT, like_plan
from sbctld.filters.values import (
    INT64_MAX,
    INT64_MIN,
    MAX_ACTION_STATEMENTS,
    MAX_EXPRESSION_LENGTH,
    MAX_NESTING,
    SYSTEM_PROPERTIES,
    FilterEvaluationError,
    MessageView,
    SystemProperty,
    format_double,
    to_text,
)

__all__ = [
    "CORRELATION_FIELDS",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_ACTION_STATEMENTS",
    "MAX_EXPRESSION_LENGTH",
    "MAX_NESTING",
    "MAX_TEXT",
    "SYSTEM_PROPERTIES",
    "CompiledAction",
    "CompiledFilter",
    "FilterEvaluationError",
    "MessageView",
    "SystemProperty",
    "check_parameters",
    "compile_action",
    "compile_filter",
    "format_double",
    "like_plan",
    "normalize_filter",
    "to_text",
]
