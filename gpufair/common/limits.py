"""Numeric limits that the services enforce and the CLI checks before it sends
(pure: the CLI imports it without loading service code). One place each, so a
message naming a limit names the one in force."""

from __future__ import annotations

MAX_BATCH = 1 << 24  # a global or local batch, in samples
MAX_RANKS = 4096  # ranks of one job
#: Steps and samples one rank may count: steps x a global batch, and samples
#: summed over every rank a job may report (65,536), stay within int64.
MAX_STEPS = 1 << 39
MAX_SAMPLES = 1 << 47
MAX_HISTORY = 10_000  # split-history entries one GetJob returns
PERIOD_S = (0.05, 3600.0)  # seconds between decision rounds
MIN_CHANGE = (0.0, 0.99)  # fraction of a batch worth re-splitting
MAX_WAIT_S = 3600.0  # how long a cache call may wait for a fetch
INT32_MAX = 2**31 - 1
