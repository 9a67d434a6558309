"""The one dispatch over gRPC's four handler kinds, for server interceptors.

An interceptor that changes what a method does (map errors, deny, check the
caller's job) gives `rebuild` a function from the old behaviour to the new
one; `rebuild` picks the behaviour and the handler factory for the method's
kind, so no interceptor writes that four-way branch again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

Behavior = Callable[..., Any]
#: (old behaviour, request streaming?, response streaming?) -> new behaviour
MakeBehavior = Callable[[Behavior, bool, bool], Behavior]

_FACTORY = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}
_ATTR = {(False, False): "unary_unary", (False, True): "unary_stream", (True, False): "stream_unary",
         (True, True): "stream_stream"}


@dataclass(frozen=True)
class Undecodable:
    """What a request whose bytes do not parse becomes: the caller's mistake, answered
    INVALID_ARGUMENT by the error interceptor (gRPC would answer UNKNOWN and log a
    traceback if the deserializer raised)."""

    message_type: str
    error: str


def tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """`deserializer`, returning an `Undecodable` instead of raising on bad bytes."""
    if deserializer is None:
        return None
    name = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)
    type_name = name.full_name if name is not None else "the request message"

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and anything else a parser raises
            return Undecodable(type_name, str(exc) or type(exc).__name__)

    return parse


def rebuild(handler: grpc.RpcMethodHandler, make: MakeBehavior,
            deserializer: Callable[[bytes], Any] | None = None) -> grpc.RpcMethodHandler:
    """`handler` with its behaviour replaced by `make(behaviour, request_streaming, response_streaming)`
    (and its request deserializer by `deserializer`, if given)."""
    kind = (bool(handler.request_streaming), bool(handler.response_streaming))
    behavior = getattr(handler, _ATTR[kind])
    return _FACTORY[kind](make(behavior, *kind), request_deserializer=deserializer or handler.request_deserializer,
                          response_serializer=handler.response_serializer)
