"""A stand-in Kubernetes API server over HTTP on a free loopback port, for the
official client to talk to: it serves `FakeCluster`'s Nodes and Pods as
paged lists, applies JSON Patches as `FakeCluster` does, answers anything
else with 404, and records every request, so tests see exactly which calls
the scheduler makes (and so which RBAC it needs)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from k8s_support import FakeCluster


class FakeApiServer:
    """`with FakeApiServer(cluster) as api:` serves on `api.url` until the block ends."""

    def __init__(self, cluster: FakeCluster, page: int = 2) -> None:
        self.cluster, self.page = cluster, page
        self.requests: list[tuple[str, str, dict[str, list[str]], str]] = []  # method, path, query, content type
        self.patched = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-apiserver", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig that points the client here (plain HTTP, no credentials)."""
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "nobody", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "nobody"}}]}), encoding="utf-8")
        return path

    def wait_for(self, check, timeout: float) -> bool:
        """Wait until `check()` holds after some patch (or already does)."""
        with self.patched:
            return self.patched.wait_for(check, timeout)

    def _page(self, items: list[Any], query: dict[str, list[str]]) -> dict[str, Any]:
        start = int(query.get("continue", ["0"])[0])
        limit = min(int(query.get("limit", ["500"])[0]), self.page)
        rest = start + limit < len(items)
        return {"apiVersion": "v1", "kind": "List", "items": items[start:start + limit],
                "metadata": {"resourceVersion": "950000", **({"continue": str(start + limit)} if rest else {})}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self) -> tuple[str, dict[str, list[str]]]:
                url = urlparse(self.path)
                query = parse_qs(url.query)
                api.requests.append((self.command, url.path, query, self.headers.get("Content-Type", "")))
                return url.path, query

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path, query = self._record()
                if path == "/api/v1/nodes":
                    return self._reply(200, api._page(api.cluster.list_nodes(), query))
                if path == "/api/v1/pods":
                    return self._reply(200, api._page(api.cluster.list_pods(), query))
                self._reply(404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404})

            def do_PATCH(self) -> None:  # noqa: N802
                path, _ = self._record()
                ops = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                parts = path.split("/")
                if len(parts) != 7 or parts[:4] != ["", "api", "v1", "namespaces"] or parts[5] != "pods":
                    return self._reply(404, {"kind": "Status", "code": 404})
                with api.patched:
                    refused = api.cluster.patch_pod(parts[4], parts[6], ops)
                    api.patched.notify_all()
                if refused:
                    return self._reply(422, {"kind": "Status", "status": "Failure", "code": 422, "message": refused})
                self._reply(200, {"kind": "Pod", "metadata": {"name": parts[6], "namespace": parts[4]}})

            do_POST = do_PUT = do_DELETE = do_GET  # recorded, and answered 404

        return Handler
