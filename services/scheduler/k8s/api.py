"""The admission controller's Kubernetes calls, on the official `kubernetes`
client: list Nodes, list Pods, patch a Pod. Nothing else.

`CALLS` declares each call once, with the RBAC verb, resource and scope it
needs; the adapter makes its calls through that table, and
`tests/deploy` checks the scheduler's Role and ClusterRole grant exactly
these, no more and no less. Pods and Nodes are listed (cluster-wide: the
GPUs a node has free depend on every pod there); pods are patched only in
the namespace whose jobs gpufair admits.

Lists are paged and return the API's own JSON (`_preload_content=False`),
the form the pure core reads. The client is synchronous: the controller
runs these calls in a worker thread. The `kubernetes` package is imported
only by `connect()`, when `GPUFAIR_K8S` is on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from urllib3.exceptions import HTTPError

from gpufair.common.errors import FailedPrecondition, Unavailable
from gpufair.scheduler.k8s.objects import Obj
from gpufair.scheduler.k8s.patch import Op

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApiCall:
    """One `CoreV1Api` method and the RBAC rule it needs (core API group)."""

    method: str
    verb: str
    resource: str
    namespaced: bool  # True: granted in the managed namespace (Role); False: cluster-wide (ClusterRole)


LIST_NODES = ApiCall("list_node", "list", "nodes", namespaced=False)
LIST_PODS = ApiCall("list_pod_for_all_namespaces", "list", "pods", namespaced=False)
PATCH_POD = ApiCall("patch_namespaced_pod", "patch", "pods", namespaced=True)
#: Every call the adapter makes: the scheduler's RBAC in deploy/ is exactly these.
CALLS = (LIST_NODES, LIST_PODS, PATCH_POD)

#: Pods that hold nothing any more are not listed at all.
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
#: Patch refusals that mean "the pod changed or went away": the next round reads it again.
_STALE = {404: "gone", 409: "conflict", 422: "refused"}


def _status(exc: BaseException) -> int | None:
    """The HTTP status of the client's ApiException (duck-typed: the client is not imported here)."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) and status > 0 else None


def _message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    try:
        return str(json.loads(body)["message"])
    except (TypeError, ValueError, KeyError):
        return str(getattr(exc, "reason", None) or exc)


class KubeApi:
    """The calls of `CALLS` on a `kubernetes.client.CoreV1Api` (or a stand-in)."""

    def __init__(self, core: Any, *, page: int = 500, timeout_s: float = 30.0) -> None:
        self._core, self._page, self._timeout = core, page, timeout_s

    def _call(self, call: ApiCall, **kwargs: Any) -> Any:
        try:
            return getattr(self._core, call.method)(**kwargs, _request_timeout=self._timeout)
        except Exception as exc:  # noqa: BLE001 - filtered below: the API's refusals and transport errors only
            if not (hasattr(exc, "status") or isinstance(exc, (OSError, HTTPError))):
                raise  # a bug of ours, not the cluster's answer
            status = _status(exc)
            if call is PATCH_POD and status in _STALE:
                raise _Refused(f"{_STALE[status]} ({status}): {_message(exc)}") from None
            what = f"HTTP {status}: {_message(exc)}" if status else f"{type(exc).__name__}: {exc}"
            raise Unavailable(f"Kubernetes API {call.method}: {what}") from None

    def _list(self, call: ApiCall, **kwargs: Any) -> list[Obj]:
        items: list[Obj] = []
        token = ""
        while True:
            page = {"_continue": token} if token else {}
            raw = self._call(call, limit=self._page, _preload_content=False, **page, **kwargs)
            try:
                body = json.loads(raw.data)
                items.extend(body.get("items") or [])
                token = (body.get("metadata") or {}).get("continue") or ""
            except (ValueError, AttributeError, TypeError) as exc:
                raise Unavailable(f"Kubernetes API {call.method}: unreadable reply: {exc}") from None
            if not token:
                return items

    def list_nodes(self) -> list[Obj]:
        """Every Node, as the API's JSON."""
        return self._list(LIST_NODES)

    def list_pods(self) -> list[Obj]:
        """Every Pod of every namespace that has not finished, as the API's JSON."""
        return self._list(LIST_PODS, field_selector=LIVE_PODS)

    def patch_pod(self, namespace: str, name: str, ops: Sequence[Op]) -> str:
        """Apply a JSON Patch; "" when applied, else why the API refused it
        (the pod changed or is gone). Other failures raise Unavailable."""
        try:
            # The reply (the patched pod) is not needed: the next round lists again.
            self._call(PATCH_POD, name=name, namespace=namespace, body=list(ops),
                       _content_type="application/json-patch+json", _preload_content=False)
        except _Refused as refused:
            return str(refused)
        return ""


class _Refused(Exception):
    """The API refused a patch because the pod is not as read."""


def connect(*, page: int = 500, timeout_s: float = 30.0) -> KubeApi:
    """A `KubeApi` with the pod's service account (in a cluster), else the
    kubeconfig (`KUBECONFIG`, ~/.kube/config); FailedPrecondition if neither."""
    from kubernetes import client, config  # only when GPUFAIR_K8S is on

    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException as in_cluster:
        try:
            config.load_kube_config(client_configuration=cfg)
        except (config.ConfigException, OSError) as kubeconfig:
            raise FailedPrecondition(f"GPUFAIR_K8S is on but the Kubernetes API is not configured: no service "
                                     f"account ({in_cluster}) and no kubeconfig ({kubeconfig})") from None
    logger.info("Kubernetes API at %s", cfg.host)
    return KubeApi(client.CoreV1Api(client.ApiClient(cfg)), page=page, timeout_s=timeout_s)
