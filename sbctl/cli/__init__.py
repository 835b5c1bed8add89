"""The ``sbctl`` command line: thin typer commands over :class:`sbctl.client.Client`.

- :mod:`sbctl.cli.app` builds the command tree and is the one error boundary: every
  :class:`~sbctl.core.errors.SbctlError` becomes one line on stderr and its exit status
  (:mod:`sbctl.cli.exit_codes`). The tree is lazy: only the command that runs has its
  module imported and its click command built (the generated ``commands.json`` names them).
  Command modules leave annotations unquoted (no ``from __future__ import annotations``,
  except :mod:`~sbctl.cli.cmd_messages`, whose helpers name client types): typer would
  otherwise evaluate each parameter's annotation string twice while it builds a command.
- ``cmd_<noun>`` modules hold the commands; each command parses its flags, makes one client
  call and hands the result to :mod:`sbctl.cli.render`.
- :mod:`sbctl.cli.render` is the only module that uses rich, and imports it lazily, so that
  ``sbctl --help`` imports neither rich nor the client.
- :mod:`sbctl.cli.docs` and :mod:`sbctl.cli.completions` generate the README reference and
  the shell completion scripts from the same command tree; tests fail when they are stale.
"""
