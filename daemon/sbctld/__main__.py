"""``python -m sbctld``: run the daemon in the foreground."""

import sys

from sbctld.main import main

sys.exit(main())
