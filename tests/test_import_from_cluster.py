"""`gpustack import --from-cluster`: the inputs read through the kubeconfig from a fake API server (an HTTP server in
this process answering the paths the real kubernetes client requests), so the client's own code path is what is
tested: the kubeconfig, its context and token, paging, 403s, 404s, an unreachable server."""

from __future__ import annotations

import json

import pytest
import yaml

import gpustack.__main__ as cli
from kubefake import CP, TOKEN, FakeApiServer, kubeconfig, operator_cluster

AGENT = "harbor.platform.internal/gpu-stack/node-agent:0.10.0"


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
