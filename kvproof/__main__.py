"""`python -m kvproof`: the `verify` command line."""

import sys

from kvproof.cli.main import main

sys.exit(main())
