"""An in-process fake of the Kubernetes API server for `gpustack import --from-cluster`: an HTTP server answering the
paths the real kubernetes client requests, so tests go through the client's own code path (kubeconfig, context,
token, paging), plus the operator cluster the import tests read."""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs, urlsplit

import yaml

from gpustack import importer
from stacktest import ROOT

CP = ROOT / "tests" / "fixtures" / "clusterpolicy"
NVD = ROOT / "tests" / "fixtures" / "nvidiadriver"
TOKEN = "fake-reader-token"


def fixture(folder, name: str) -> Any:
    return importer.read_yaml(str(folder / name), name)


class FakeApiServer:
    """Objects by API path; GETs answered as the API server does (lists paged by `limit`), anything else refused.
    `forbidden` paths answer 403; every request is recorded with its method and Authorization header."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.lists: dict[str, list[dict]] = {}
        self.forbidden: set[str] = set()
        self.requests: list[tuple[str, str, Optional[str]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                fake.requests.append(("GET", url.path, self.headers.get("Authorization")))
                if url.path in fake.forbidden:
                    return self._answer(403, {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403})
                if url.path in fake.lists:
                    query = parse_qs(url.query)
                    items = fake.lists[url.path]
                    start = int(query.get("continue", ["0"])[0])
                    limit = int(query.get("limit", [len(items) or 1])[0])
                    page = items[start:start + limit]
                    more = start + limit < len(items)
                    return self._answer(200, {"kind": "List", "metadata": {"continue": str(start + limit) if more else ""}, "items": page})
                if url.path in fake.objects:
                    return self._answer(200, fake.objects[url.path])
                return self._answer(404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404})

            def _refuse(self) -> None:
                fake.requests.append((self.command, self.path, self.headers.get("Authorization")))
                self._answer(405, {"kind": "Status", "code": 405})

            do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeApiServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def kubeconfig(tmp_path, server: str, context: str = "lab-admin") -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "lab", "cluster": {"server": server}}],
        "users": [{"name": "reader", "user": {"token": TOKEN}}],
        "contexts": [{"name": context, "context": {"cluster": "lab", "user": "reader"}}],
    }))
    return str(path)


def without_kind(obj: dict) -> dict:
    """A list item as the API server returns core objects: no apiVersion or kind of its own."""
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def operator_cluster(api: FakeApiServer) -> None:
    """The default install with NVIDIADriver mode on: the chart's default NVIDIADriver, two A100 nodes (paged one by
    one) and a CPU node, a device-plugin ConfigMap the ClusterPolicy names, and no OpenShift."""
    policy = copy.deepcopy(fixture(CP, "default-install.yaml"))
    policy["spec"]["driver"]["useNvidiaDriverCRD"] = True
    policy["spec"]["devicePlugin"]["config"] = {"name": "plugin-config", "default": "default"}
    policy["status"] = {"state": "ready", "namespace": "gpu-operator"}
    api.lists["/apis/nvidia.com/v1/clusterpolicies"] = [policy]
    api.lists["/apis/nvidia.com/v1alpha1/nvidiadrivers"] = fixture(NVD, "helm-default.yaml")["items"]
    nodes = [without_kind(n) for n in fixture(CP, "nodes-default.yaml")["items"]]
    api.lists["/api/v1/nodes"] = [*nodes, {"metadata": {"name": "cpu-0", "labels": {"kubernetes.io/arch": "amd64"}}}]
    api.objects["/api/v1/namespaces/gpu-operator/configmaps/plugin-config"] = {
        "metadata": {"name": "plugin-config", "namespace": "gpu-operator"},
        "data": {"default": yaml.safe_dump({"version": "v1", "flags": {"migStrategy": "single"}})},
    }
