"""Start real local dependencies (etcd, an S3 endpoint) as child processes.

Used by the test fixtures, `make demo` and the benchmarks: every process binds
loopback ports chosen at run time and stops with its handle.
"""

from gpufair.local.procs import ChildProcess, EtcdServer, S3Server, free_port

__all__ = ["ChildProcess", "EtcdServer", "S3Server", "free_port"]
