"""``python -m selfplay ...``: the same command line as the ``selfplay`` script."""

import sys

from selfplay.cli.main import main

sys.exit(main())
