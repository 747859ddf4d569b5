"""``python -m tidelog`` is the ``tidelog`` command."""

import sys

from tidelog.cli.main import main

sys.exit(main())
