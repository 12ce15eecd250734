"""`gpustack import --from-cluster`: the inputs read through the kubeconfig from a fake API server (an HTTP server in
this process answering the paths the real kubernetes client requests), so the client's own code path is what is
tested: the kubeconfig, its context and token, paging, 403s, 404s, an unreachable server."""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

import gpustack.__main__ as cli
from gpustack import importer
from stacktest import ROOT

CP = ROOT / "tests" / "fixtures" / "clusterpolicy"
NVD = ROOT / "tests" / "fixtures" / "nvidiadriver"
AGENT = "harbor.platform.internal/gpu-stack/node-agent:0.7.0"
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


def run(tmp_path, config: str, *extra: str) -> int:
    return cli.main(["import", "--from-cluster", "--kubeconfig", config, "--node-agent-image", AGENT,
                     "--stack", "live", "--out", str(tmp_path / "Pulumi.live.yaml"), *extra])


def test_one_command_reads_the_cluster_read_only_and_writes_the_stack_and_the_report(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("gpustack.importer.live.NODE_PAGE", 1)  # so the node list is paged as a big cluster's is
    with FakeApiServer() as api:
        operator_cluster(api)
        code = run(tmp_path, kubeconfig(tmp_path, api.url), "--format", "json", "--report", str(tmp_path / "report.json"))
    assert code == cli.EXIT_OK, capsys.readouterr().err
    # read-only, as the kubeconfig's user, every request
    assert {method for method, _, _ in api.requests} == {"GET"}
    assert {auth for _, _, auth in api.requests} == {f"Bearer {TOKEN}"}
    paths = [path for _, path, _ in api.requests]
    assert paths.count("/api/v1/nodes") == 3  # three nodes, one page each
    assert "/api/v1/namespaces/gpu-operator/configmaps/plugin-config" in paths
    stack = yaml.safe_load((tmp_path / "Pulumi.live.yaml").read_text())["config"]
    assert stack["gpu-stack:cluster"]["context"] == "lab-admin"  # the kubeconfig's current context
    (pool,) = stack["gpu-stack:nodePools"]
    assert pool["driver"]["daemonSetName"].startswith("nvidia-gpu-driver-ubuntu22.04-")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "written" and set(report["counts"]) == {"clusterpolicy", "nvidiadriver:default"}
    assert report["counts"]["nvidiadriver:default"]["silent"] == 0
    fields = {f["path"]: f for f in report["fields"]}
    assert fields["nvidiadriver:default/spec.version"] == {"path": "nvidiadriver:default/spec.version", "status": "carried",
                                                          "value": "595.91.07", "key": "versions.driver"}
    assert fields["spec.devicePlugin.config.name"]["status"] == "carried"


def test_each_missing_permission_is_one_line_naming_verb_resource_and_namespace(tmp_path, capsys):
    with FakeApiServer() as api:
        operator_cluster(api)
        api.forbidden |= {"/api/v1/nodes", "/apis/nvidia.com/v1alpha1/nvidiadrivers",
                          "/api/v1/namespaces/gpu-operator/configmaps/plugin-config"}
        code = run(tmp_path, kubeconfig(tmp_path, api.url))
    assert code == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert "  list nodes cluster-wide\n" in err
    assert "  list nvidiadrivers.nvidia.com cluster-wide\n" in err
    assert "  get configmaps in namespace gpu-operator\n" in err
    assert not (tmp_path / "Pulumi.live.yaml").exists()


def test_a_refusal_is_json_too_with_format_json(tmp_path, capsys):
    with FakeApiServer() as api:
        operator_cluster(api)
        api.forbidden.add("/apis/nvidia.com/v1/clusterpolicies")
        code = run(tmp_path, kubeconfig(tmp_path, api.url), "--format", "json")
    assert code == cli.EXIT_CONFIG
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "refused" and "list clusterpolicies.nvidia.com cluster-wide" in report["reason"]


@pytest.mark.parametrize("case, expected", [
    ("unknown context", "--context 'elsewhere': the kubeconfig has no such context (contexts: lab-admin)"),
    ("no operator", "the cluster has no ClusterPolicy CRD"),
    ("unreachable", "cannot reach the API server"),
    ("files too", "--from-cluster reads --clusterpolicy from the cluster; leave them out"),
])
def test_what_stops_a_live_import_is_one_clear_line(case, expected, tmp_path, capsys):
    with FakeApiServer() as api:
        operator_cluster(api)
        server = api.url
        extra: list[str] = []
        if case == "unknown context":
            extra = ["--context", "elsewhere"]
        if case == "no operator":
            del api.lists["/apis/nvidia.com/v1/clusterpolicies"]
        if case == "files too":
            extra = ["--clusterpolicy", str(CP / "minimal.yaml")]
        if case == "unreachable":
            server = "http://127.0.0.1:9"  # discard port: nothing listens
        code = run(tmp_path, kubeconfig(tmp_path, server), *extra)
    assert code == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
