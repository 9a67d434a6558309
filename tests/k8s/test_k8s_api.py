"""The adapter on the official `kubernetes` client: the calls it makes, with
which arguments, over which HTTP requests; and what a refusal or an outage
becomes. `CALLS` (the scheduler's RBAC) is pinned to the HTTP traffic the
real client sends, both ways."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from gpufair.common.errors import Unavailable
from gpufair.scheduler.k8s.api import CALLS, LIVE_PODS, KubeApi
from k8s_support import recorded

OPS = [{"op": "test", "path": "/metadata/resourceVersion", "value": "913101"},
       {"op": "remove", "path": "/spec/schedulingGates/0"}]


class _Raw:
    """What the client returns with `_preload_content=False` (a urllib3 response)."""

    status = 200

    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()


class FakeCoreV1:
    """Stands in for `CoreV1Api`: answers from recorded lists in pages of 2, records every call."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail
        self.lists = {"list_node": recorded("nodes"), "list_pod_for_all_namespaces": recorded("pods")}

    def __getattr__(self, method: str):
        def call(**kwargs: Any) -> Any:
            self.calls.append((method, kwargs))
            if self.fail:
                raise self.fail
            if method not in self.lists:
                return None
            start = int(kwargs.get("_continue") or 0)
            more = start + 2 < len(self.lists[method])
            return _Raw({"items": self.lists[method][start:start + 2],
                         "metadata": {"continue": str(start + 2)} if more else {}})
        return call


def test_lists_page_through_and_return_the_apis_json() -> None:
    core = FakeCoreV1()
    api = KubeApi(core, page=2, timeout_s=7.0)
    assert api.list_nodes() == recorded("nodes")
    assert [kw.get("_continue") for _, kw in core.calls] == [None, "2", "4"]
    assert all(kw["limit"] == 2 and kw["_preload_content"] is False and kw["_request_timeout"] == 7.0
               for _, kw in core.calls)
    core.calls.clear()
    assert [p["metadata"]["name"] for p in api.list_pods()] == [p["metadata"]["name"] for p in recorded("pods")]
    assert {m for m, _ in core.calls} == {"list_pod_for_all_namespaces"}
    assert all(kw["field_selector"] == "status.phase!=Succeeded,status.phase!=Failed" for _, kw in core.calls)


def test_a_patch_is_a_json_patch_on_one_named_pod() -> None:
    core = FakeCoreV1()
    assert KubeApi(core).patch_pod("gpufair", "resnet-a-0-x7k2p", OPS) == ""
    (method, kw), = core.calls
    assert method == "patch_namespaced_pod"
    assert kw == {"name": "resnet-a-0-x7k2p", "namespace": "gpufair", "body": OPS,
                  "_content_type": "application/json-patch+json", "_preload_content": False,
                  "_request_timeout": 30.0}


def test_the_adapter_calls_exactly_its_declared_methods() -> None:
    core = FakeCoreV1()
    api = KubeApi(core)
    api.list_nodes(), api.list_pods(), api.patch_pod("gpufair", "p", OPS)
    assert {m for m, _ in core.calls} == {c.method for c in CALLS}
    assert all(hasattr(client.CoreV1Api, c.method) for c in CALLS)


def _status(code: int, message: str, raw: bool = False) -> ApiException:
    """The client's exception for an error reply (`raw`: as its HTTP layer raises it, body undecoded)."""
    exc = ApiException(status=code, reason="x")
    body = json.dumps({"kind": "Status", "code": code, "message": message})
    exc.body = body.encode() if raw else body
    return exc


@pytest.mark.parametrize("code, said", [(409, "conflict (409): the object has been modified"),
                                        (404, "gone (404): the object has been modified"),
                                        (422, "refused (422): the object has been modified")])
def test_a_refused_patch_says_why_and_does_not_raise(code, said) -> None:
    core = FakeCoreV1(fail=_status(code, "the object has been modified"))
    assert KubeApi(core).patch_pod("gpufair", "p", OPS) == said


@pytest.mark.parametrize("fail, said", [
    (_status(403, 'pods is forbidden: User "system:serviceaccount:gpufair:gpufair-scheduler" cannot list'),
     'Kubernetes API list_pod_for_all_namespaces: HTTP 403: pods is forbidden: User '
     '"system:serviceaccount:gpufair:gpufair-scheduler" cannot list'),
    (MaxRetryError(None, "/api/v1/pods", "connection refused"),
     "Kubernetes API list_pod_for_all_namespaces: MaxRetryError: None: Max retries exceeded with url: "
     "/api/v1/pods (Caused by 'connection refused')"),
    (ConnectionResetError("reset by peer"),
     "Kubernetes API list_pod_for_all_namespaces: ConnectionResetError: reset by peer"),
])
def test_an_api_failure_is_unavailable_with_the_apis_message(fail, said) -> None:
    with pytest.raises(Unavailable) as err:
        KubeApi(FakeCoreV1(fail=fail)).list_pods()
    assert str(err.value) == said


def test_a_bug_of_ours_is_not_disguised_as_an_outage() -> None:
    with pytest.raises(TypeError):
        KubeApi(FakeCoreV1(fail=TypeError("unexpected keyword argument"))).list_nodes()


class _Wire:
    """The official client end to end, with its HTTP layer replaced by a recorder."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, Any], dict[str, str], Any]] = []
        api_client = client.ApiClient(client.Configuration(host="https://k8s.test:6443"))
        api_client.rest_client.request = self._request  # type: ignore[method-assign]
        self.api = KubeApi(client.CoreV1Api(api_client), page=500)

    def _request(self, method: str, url: str, query_params=None, headers=None, body=None, **_: Any) -> Any:
        self.sent.append((method, url, dict(query_params or []), dict(headers or {}), body))
        if method == "PATCH" and body and body[0].get("value") == "stale":
            raise _status(422, "the server rejected our request due to an error in our request", raw=True)
        return _Raw({"items": [], "metadata": {}})


def rbac_of(method: str, url: str) -> tuple[str, str, bool]:
    """The RBAC (verb, resource, namespaced) an HTTP request to the core API needs."""
    path = url.split("://", 1)[1].split("/", 1)[1].split("/")
    assert path[:2] == ["api", "v1"], url
    rest = path[2:]
    namespaced = rest[0] == "namespaces"
    if namespaced:
        rest = rest[2:]
    resource, named = rest[0], len(rest) > 1
    verb = {("GET", False): "list", ("GET", True): "get", ("PATCH", True): "patch"}[(method, named)]
    return verb, resource, namespaced


def test_the_declared_calls_are_the_http_requests_the_client_sends() -> None:
    wire = _Wire()
    wire.api.list_nodes(), wire.api.list_pods(), wire.api.patch_pod("gpufair", "resnet-a-0-x7k2p", OPS)
    (nodes, pods, patch) = wire.sent
    assert nodes[:3] == ("GET", "https://k8s.test:6443/api/v1/nodes", {"limit": 500})
    assert pods[:3] == ("GET", "https://k8s.test:6443/api/v1/pods", {"fieldSelector": LIVE_PODS, "limit": 500})
    assert patch[:2] == ("PATCH", "https://k8s.test:6443/api/v1/namespaces/gpufair/pods/resnet-a-0-x7k2p")
    assert patch[3]["Content-Type"] == "application/json-patch+json" and patch[4] == OPS
    assert {rbac_of(m, u) for m, u, *_ in wire.sent} == {(c.verb, c.resource, c.namespaced) for c in CALLS}


def test_a_refusal_through_the_real_client_is_reported() -> None:
    wire = _Wire()
    stale = [{"op": "test", "path": "/metadata/resourceVersion", "value": "stale"}]
    assert wire.api.patch_pod("gpufair", "p", stale).startswith("refused (422): the server rejected")


def test_the_kubernetes_client_loads_only_when_admission_is_switched_on() -> None:
    code = ("import sys, gpufair.scheduler.__main__, gpufair.scheduler.app, gpufair.scheduler.k8s.api, "
            "gpufair.scheduler.k8s.controller\nprint('kubernetes' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
