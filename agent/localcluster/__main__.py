"""`python -m agent.localcluster`: see agent.localcluster.cli."""

import sys

from agent.localcluster.cli import main

sys.exit(main())
