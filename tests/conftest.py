"""Shared fixtures: real etcd and a real S3 endpoint, started on free loopback ports."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from hypothesis import settings

# In CI property tests explore the same examples on every run (a red build is
# then reproducible); locally they keep drawing new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

from gpufair.local import EtcdServer, S3Server

# Started in the background by a shell without job control (`make test &` in a
# script), pytest inherits SIGINT ignored, and so would every process it starts:
# the tests that press Ctrl-C on `make demo` or `gpufair submit` would signal
# processes that ignore it. Caught here, it is back to default in children (exec
# resets caught signals, not ignored ones).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """One real etcd for the session; tests isolate themselves by key root."""
    server = EtcdServer().start()
    yield server
    server.close()


@pytest.fixture
def etcd_endpoint(etcd_server: EtcdServer) -> str:
    """`host:port` of the session's etcd (restarted if a fault test killed it)."""
    if not etcd_server.child or not etcd_server.child.alive():
        etcd_server.start()
    return etcd_server.endpoint


@pytest.fixture
def etcd_root(request: pytest.FixtureRequest) -> str:
    """A key root unique to the test, so tests never see each other's keys."""
    import re
    import uuid

    name = re.sub(r"[^A-Za-z0-9]", "-", request.node.name)[:40]
    return f"/gpufair-test/{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = S3Server().start()
    yield server
    server.close()


@pytest.fixture
def s3_client(s3_server: S3Server):
    """A `minio` SDK client talking to the session's S3 endpoint."""
    from minio import Minio

    return Minio(s3_server.endpoint, access_key=s3_server.access_key, secret_key=s3_server.secret_key, secure=False)
