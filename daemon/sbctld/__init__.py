"""sbctld: the sbctl daemon (installed from the repository's ``daemon/`` folder).

Layers, outermost first: :mod:`sbctld.main` (process, settings), the front-ends
:mod:`sbctld.frontends` (Unix socket, AMQP, HTTP), the service :mod:`sbctld.service` (group
commit, parked requests, fault delay, metrics, timers), the domain :mod:`sbctld.broker`
(pure logic with an injected clock), :mod:`sbctld.storage` (append-only partition logs).
"""
