"""sbctld: the sbctl daemon (installed from the repository's ``daemon/`` folder).

Layers, outermost first: :mod:`sbctld.main` (process), :mod:`sbctld.server` (socket,
dispatch, group commit), :mod:`sbctld.broker` (pure domain logic with an injected clock),
:mod:`sbctld.storage` (append-only partition logs).
"""
