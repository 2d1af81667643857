"""`python -m offload` runs the command line."""

import sys

from offload.cli import main

sys.exit(main())
