"""Client channels to gpufair services: TLS and bearer tokens from config."""

from __future__ import annotations

from pathlib import Path

import grpc

#: Clients ping an idle connection this often, so a command stream that carries
#: nothing for minutes (a held job's) notices a dead peer. Servers must accept it
#: (`SERVER_OPTIONS`): gRPC's default lets a server answer a ping more often than
#: every 5 minutes with GOAWAY "too_many_pings", which dropped held jobs' streams.
KEEPALIVE_MS = 20_000


def keepalive_options(keepalive_ms: int) -> list[tuple[str, int]]:
    """A client's side: ping every `keepalive_ms`, also on a stream quiet for long."""
    return [("grpc.keepalive_time_ms", keepalive_ms), ("grpc.http2.max_pings_without_data", 0)]


def server_keepalive_options(keepalive_ms: int) -> list[tuple[str, int]]:
    """A server's side: accept pings every `keepalive_ms` / 2 or slower, with or
    without calls. (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS is
    spelt `min_ping_interval_without_data_ms`.)"""
    return [("grpc.http2.min_ping_interval_without_data_ms", keepalive_ms // 2),
            ("grpc.keepalive_permit_without_calls", 1)]


_OPTIONS = [
    ("grpc.max_receive_message_length", 8 * 1024 * 1024),
    *keepalive_options(KEEPALIVE_MS),
    ("grpc.enable_retries", 1),
]

#: What a gpufair server accepts of its clients' keepalive pings.
SERVER_OPTIONS = server_keepalive_options(KEEPALIVE_MS)


def _credentials(ca_file: str, token: str, cert_file: str = "", key_file: str = "") -> grpc.ChannelCredentials:
    root = Path(ca_file).read_bytes() if ca_file else None
    # A client certificate, for servers that require mutual TLS.
    key = Path(key_file).read_bytes() if cert_file and key_file else None
    cert = Path(cert_file).read_bytes() if cert_file and key_file else None
    creds = grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=cert)
    if token:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
    return creds


def aio_channel(address: str, *, tls_ca: str = "", tls: bool = False, token: str = "", client_cert: str = "",
                client_key: str = "") -> grpc.aio.Channel:
    """An asyncio channel; TLS when `tls` or a CA is given."""
    if tls or tls_ca:
        return grpc.aio.secure_channel(address, _credentials(tls_ca, token, client_cert, client_key), options=_OPTIONS)
    return grpc.aio.insecure_channel(address, options=_OPTIONS)


def sync_channel(address: str, *, tls_ca: str = "", tls: bool = False, token: str = "", client_cert: str = "",
                 client_key: str = "") -> grpc.Channel:
    """A blocking channel (trainer threads, the CLI)."""
    if tls or tls_ca:
        return grpc.secure_channel(address, _credentials(tls_ca, token, client_cert, client_key), options=_OPTIONS)
    return grpc.insecure_channel(address, options=_OPTIONS)


def token_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Per-call metadata carrying a bearer token on an insecure channel (loopback, tests)."""
    return (("authorization", f"Bearer {token}"),) if token else ()
