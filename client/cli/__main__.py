"""`python -m gpufair.client.cli`."""

import sys

from gpufair.client.cli.main import main

sys.exit(main())
