"""The one dispatch over gRPC's four handler kinds, for server interceptors.

An interceptor that changes what a method does (map errors, deny, check the
caller's job) gives `rebuild` a function from the old behaviour to the new
one; `rebuild` picks the behaviour and the handler factory for the method's
kind, so no interceptor writes that four-way branch again.
"""

from __future__ import annotations

from collections.abc import Callable
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


def rebuild(handler: grpc.RpcMethodHandler, make: MakeBehavior) -> grpc.RpcMethodHandler:
    """`handler` with its behaviour replaced by `make(behaviour, request_streaming, response_streaming)`."""
    kind = (bool(handler.request_streaming), bool(handler.response_streaming))
    behavior = getattr(handler, _ATTR[kind])
    return _FACTORY[kind](make(behavior, *kind), request_deserializer=handler.request_deserializer,
                          response_serializer=handler.response_serializer)
