"""``python -m myelin.cli``: the ``myelin`` command."""

import sys

from myelin.cli import main

sys.exit(main())
