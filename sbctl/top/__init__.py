"""``sbctl top``: a live view of the daemon (model: data and rates; view: rich screens;
live: the keyboard and refresh loop). The command itself is :mod:`sbctl.cli.cmd_top`."""
