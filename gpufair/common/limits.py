"""Numeric limits that the services enforce and the CLI checks before it sends
(pure: the CLI imports it without loading service code). One place each, so a
message naming a limit names the one in force."""

from __future__ import annotations

MAX_BATCH = 1 << 24  # a global or local batch, in samples
MAX_RANKS = 4096  # ranks of one job
MAX_RANK = 65_535  # a rank number the metrics service takes
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
#: Steps and samples one rank may count: steps x a global batch, and samples
#: summed over every rank the metrics service takes, stay within int64.
MAX_STEPS = INT64_MAX // MAX_BATCH
MAX_SAMPLES = INT64_MAX // (MAX_RANK + 1)
MAX_HISTORY = 10_000  # split-history entries one GetJob returns
PERIOD_S = (0.05, 3600.0)  # seconds between decision rounds
MIN_CHANGE = (0.0, 0.99)  # fraction of a batch worth re-splitting
MAX_WAIT_S = 3600.0  # how long a cache call may wait for a fetch
