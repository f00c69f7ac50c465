"""`python -m localcluster`: see localcluster.cli."""

import sys

from localcluster.cli import main

sys.exit(main())
