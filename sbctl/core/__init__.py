"""The shared core: what the client/CLI side and the daemon both use.

Errors and their wire form, limits, names, the data-dir layout and paths, durations,
partitioning, send rules, the record codec (:mod:`sbctl.core.records`), the AMQP codec
(:mod:`sbctl.core.amqp`), typed values, the Unix wire protocol and the operation
declarations, lock tokens, the JSON view of a message, SAS tokens and certificates.

Rule (tests/unit/test_architecture.py): this package imports nothing else from ``sbctl``
and nothing from ``sbctld``; the daemon imports nothing from ``sbctl`` but this package.
"""

__version__ = "0.1.0"
