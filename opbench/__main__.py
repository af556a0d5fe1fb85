"""`python -m opbench` is the `opbench` command."""

import sys

from opbench.cli import main

sys.exit(main())
