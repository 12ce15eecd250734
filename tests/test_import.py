"""`python -m gpustack import`: a ClusterPolicy (plus Helm values, nodes, ConfigMaps) becomes a stack file that
loads, renders what the operator ran, and reports exactly what it could not carry over."""

from __future__ import annotations

import functools
import json
from typing import Optional, Sequence

import jsonschema
import pytest
import yaml

import gpustack.__main__ as cli
from components.catalogs import catalog, mig_catalog
from components.kit import sharing
from components.config import load_config, stack_file_config
from gpustack import apiserver, importer, stack_schema
from gpustack.render import objects_in_order as render_objects_in_order
from gpustack.importer import ClusterFacts, ImportInputError, ImportResult
from gpustack.importer.mig import layout_from_mig_parted
from stacktest import ROOT, container, env_of, objects, render

FIXTURES = ROOT / "tests" / "fixtures" / "clusterpolicy"
AGENT = "harbor.platform.internal/gpu-stack/node-agent:0.10.0"


def fixture(name: str) -> str:
    return str(FIXTURES / name)


def run_import(
    policy: str,
    facts: ClusterFacts,
    *,
    helm: Optional[str] = None,
    nodes: Optional[str] = None,
    configmaps: Sequence[str] = (),
) -> ImportResult:
    return importer.import_cluster_policy(
        importer.cluster_policy_of(importer.read_yaml(fixture(policy), "--clusterpolicy"), policy),
        facts,
        helm_values=importer.read_yaml(fixture(helm), "--helm-values") if helm else None,
        nodes=importer.nodes_of(importer.read_yaml(fixture(nodes), "--nodes"), nodes) if nodes else None,
        configmaps=importer.configmaps_of([(c, importer.read_yaml(fixture(c), "--configmap")) for c in configmaps]),
    )


# One import and one render per scenario, shared by the tests that look at it.


@functools.lru_cache(maxsize=None)
def default_install():
    # MIG-capable nodes: their nvidia.com/mig.config labels (all-disabled) are read, never assumed.
    result = run_import("default-install.yaml", ClusterFacts("prod-admin", AGENT), nodes="nodes-default.yaml")
    return result, render(result.config)


@functools.lru_cache(maxsize=None)
def host_driver():
    facts = ClusterFacts("dc2-admin", AGENT, kubernetes_versions=("1.31",), gpu_models=((None, "L40S"),), os="rhel9")
    result = run_import("host-driver.yaml", facts, configmaps=["configmap-host.yaml"])
    return result, render(result.config)


@functools.lru_cache(maxsize=None)
def mig_mixed():
    facts = ClusterFacts("train-admin", AGENT, pool_labels=("platform.internal/gpu-pool",))
    result = run_import("mig-mixed.yaml", facts, nodes="nodes-mig.yaml", configmaps=["configmaps-mig.yaml"])
    return result, render(result.config)


ROLE = "virt.platform.internal/gpu-role"


@functools.lru_cache(maxsize=None)
def sandbox():
    facts = ClusterFacts(
        "virt-admin",
        AGENT,
        pool_labels=(ROLE,),
        gpu_models=(((ROLE, "vm-passthrough"), "A100-80GB"), ((ROLE, "vm-vgpu"), "A10")),
    )
    result = run_import("sandbox-kubevirt.yaml", facts, nodes="nodes-sandbox.yaml")
    return result, render(result.config)


@functools.lru_cache(maxsize=None)
def precompiled():
    result = run_import("precompiled.yaml", ClusterFacts("dc1-admin", AGENT), nodes="nodes-precompiled.yaml")
    return result, render(result.config)


def paths(result: ImportResult) -> set[str]:
    return {item.path for item in result.not_carried}


def daemonsets(recording) -> dict:
    return objects(recording, "DaemonSet")


def section(result: ImportResult, name: str) -> dict:
    return result.config[f"gpu-stack:{name}"]


def loads(result: ImportResult):
    return load_config(stack_file_config(result.document()))


# --- round trips -----------------------------------------------------------------------------------------------


def test_default_install_renders_the_helm_defaults():
    result, recording = default_install()
    cfg = loads(result)
    assert cfg.driver.mode == "managed" and cfg.versions.driver == "595.91.07"
    ds = daemonsets(recording)
    assert container(ds["nvidia-device-plugin-daemonset"], "nvidia-device-plugin")["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
    plugin_env = env_of(container(ds["nvidia-device-plugin-daemonset"], "nvidia-device-plugin"))
    assert plugin_env["MIG_STRATEGY"] == "single"
    assert plugin_env["DEVICE_LIST_STRATEGY"] == "cdi-annotations,cdi-cri"
    assert container(ds["nvidia-driver-daemonset"], "nvidia-driver-ctr")["image"] == "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04"
    # autoUpgrade becomes the node agent's rolling upgrade within the operator's own budget: the chart's 25% of
    # the GPU nodes, one node upgrading at a time. The DaemonSet is OnDelete: the agents replace its pods.
    assert (cfg.upgrade.strategy, cfg.upgrade.max_unavailable, cfg.upgrade.max_parallel_upgrades) == ("rolling", "25%", 1)
    assert ds["nvidia-driver-daemonset"]["spec"]["updateStrategy"] == {"type": "OnDelete"}
    # ClusterPolicy's daemonsets budget "1" meant one node (the operator parses it with intstr.Parse); a DaemonSet
    # says so with the number, since the API server refuses the string "1".
    assert ds["nvidia-device-plugin-daemonset"]["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1
    assert section(result, "daemonsets")["maxUnavailable"] == 1
    toolkit_env = env_of(container(ds["nvidia-container-toolkit-daemonset"], "nvidia-container-toolkit-ctr"))
    assert toolkit_env["ROOT"] == "/usr/local/nvidia" and toolkit_env["CDI_ENABLED"] == "true"
    assert "nvidia-dcgm" not in ds  # Helm's dcgm.enabled=false: the exporter embeds the host engine
    assert "nvidia-mig-manager" in ds and "nvidia-vfio-manager" not in ds
    assert objects(recording, "ServiceMonitor")["nvidia-dcgm-exporter"]["spec"]["endpoints"][0]["interval"] == "15s"
    assert ds["nvidia-device-plugin-daemonset"]["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical"


def test_default_install_reports_what_still_differs_in_upgrades_and_the_charts_labels():
    result, _ = default_install()
    assert paths(result) == {
        # a failed node halts gpu-stack's rollout; the operator counts nodes down for other reasons as unavailable
        "spec.driver.upgradePolicy.autoUpgrade",
        "spec.driver.upgradePolicy.maxUnavailable",
        "spec.daemonsets.labels.helm.sh/chart",
        "spec.daemonsets.labels.app.kubernetes.io/managed-by",
        # the operator left the namespace unlabelled; gpu-stack labels it pod-security privileged
        "spec.psa.enabled",
    }
    versions = section(result, "versions")
    # Pinned even where equal to the catalog, so a newer gpu-stack release does not upgrade the cluster on import.
    assert versions["devicePlugin"] == "v0.20.0" and versions["validator"] == "v26.7.0"
    assert "dcgm" not in versions and "sandboxDevicePlugin" not in versions


def test_host_driver_renders_no_driver_and_keeps_mirror_runtime_paths_and_sharing():
    result, recording = host_driver()
    cfg = loads(result)
    assert cfg.driver.mode == "host" and cfg.registry.override == "registry.dc2.corp:5000"
    ds = daemonsets(recording)
    assert not [name for name in ds if name.startswith("nvidia-driver-daemonset")]
    plugin = ds["nvidia-device-plugin-daemonset"]
    assert container(plugin, "nvidia-device-plugin")["image"] == "registry.dc2.corp:5000/nvidia/k8s-device-plugin:v0.19.3"
    assert plugin["metadata"]["namespace"] == "nvidia-gpu-operator"
    pod = plugin["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "gpu-critical"
    assert {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute",
            "tolerationSeconds": 3600} in pod["tolerations"]
    assert pod["imagePullSecrets"] == [{"name": "dc2-mirror"}]
    assert plugin["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "20%"
    toolkit = ds["nvidia-container-toolkit-daemonset"]
    toolkit_env = env_of(container(toolkit, "nvidia-container-toolkit-ctr"))
    assert toolkit_env["CONTAINERD_SOCKET"] == "/runtime/sock-dir/containerd.sock"
    host_paths = {v["hostPath"]["path"] for v in toolkit["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
    assert {"/run/k3s/containerd", "/var/lib/rancher/rke2/agent/etc/containerd"} <= host_paths
    configs = objects(recording, "ConfigMap")["nvidia-device-plugin-configs"]["data"]
    shared = yaml.safe_load(configs["l40s"])["sharing"]["timeSlicing"]
    assert shared["renameByDefault"] is True and shared["resources"] == [{"name": "nvidia.com/gpu", "replicas": 2}]
    validator_env = env_of(container(ds["nvidia-operator-validator"], "plugin-validation"))
    assert validator_env["WITH_WORKLOAD"] == "true"
    assert "nvidia-node-status-exporter" in ds and "nvidia-mig-manager" not in ds


def test_host_driver_reports_what_gpu_stack_cannot_express():
    result, _ = host_driver()
    assert paths(result) == {
        "spec.nodeStatusExporter",
        "configmap:device-plugin-config/ts-8",
    }
    assert {item.path for item in result.no_effect} == {"spec.driver"}  # driver.enabled false: its licensing unused


def test_host_driver_carries_the_operand_knobs_the_operator_had():
    result, recording = host_driver()
    operands = section(result, "operands")
    # A non-NVIDIA repository path is that operand's own image; its tag is never pinned onto NVIDIA's exporter.
    assert operands["dcgmExporter"] == {"repository": "registry.dc2.corp:5000/monitoring", "image": "dcgm-exporter",
                                        "version": "4.6.0-4.8.3-distroless"}
    assert "dcgmExporter" not in section(result, "versions")
    assert operands["toolkit"]["env"] == [{"name": "RUNTIME_CONFIG_SOURCE", "value": "file=/var/lib/rancher/rke2/agent/etc/containerd/config.toml"}]
    assert operands["toolkit"]["resources"] == {"limits": {"memory": "512Mi"}}
    assert operands["devicePlugin"]["env"] == [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}]
    assert section(result, "hostPaths") == {"rootFS": "/host-root"}
    assert section(result, "dcgmExporter")["hostPid"] is True
    ds = daemonsets(recording)
    exporter = ds["nvidia-dcgm-exporter"]
    assert container(exporter, "nvidia-dcgm-exporter")["image"] == "registry.dc2.corp:5000/monitoring/dcgm-exporter:4.6.0-4.8.3-distroless"
    assert exporter["spec"]["template"]["spec"]["hostPID"] is True
    toolkit = container(ds["nvidia-container-toolkit-daemonset"], "nvidia-container-toolkit-ctr")
    assert env_of(toolkit)["RUNTIME_CONFIG_SOURCE"].startswith("file=") and toolkit["resources"]["limits"]["memory"] == "512Mi"


def test_mig_mixed_carries_layouts_sharing_gpudirect_and_the_driver_managers_drain():
    result, recording = mig_mixed()
    cfg = loads(result)
    pools = {p.name: p for p in cfg.node_pools}
    assert set(pools) == {"a100-80gb-a100-balanced", "a100-80gb-a100-mig", "h100-80gb"}
    assert pools["a100-80gb-a100-mig"].node_selector == {"platform.internal/gpu-pool": "a100-mig"}
    assert (pools["a100-80gb-a100-mig"].sharing.strategy, pools["a100-80gb-a100-mig"].sharing.mig_layout) == ("mig-mixed", "two-3g")
    assert pools["a100-80gb-a100-balanced"].sharing.mig_layout == "all-balanced"
    assert cfg.mig_layouts == {"two-3g": {"3g.40gb": 2}}
    assert cfg.cluster.kubernetes_versions == ["1.32", "1.33"]
    configs = objects(recording, "ConfigMap")
    plugin = {k: yaml.safe_load(v) for k, v in configs["nvidia-device-plugin-configs"]["data"].items()}
    assert plugin["a100-80gb-a100-mig"]["flags"]["migStrategy"] == "mixed"
    assert plugin["h100-80gb"]["sharing"]["timeSlicing"] == {
        "renameByDefault": False,
        "failRequestsGreaterThanOne": True,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
    }
    parted = yaml.safe_load(configs["gpu-stack-mig-parted-config"]["data"]["config.yaml"])["mig-configs"]
    assert [entry["mig-devices"] for entry in parted["two-3g"]] == [{"3g.40gb": 2}]
    assert "DCGM_FI_DEV_POWER_VIOLATION, counter" in configs["nvidia-dcgm-exporter-metrics"]["data"]["dcgm-metrics.csv"]
    ds = daemonsets(recording)
    driver = ds["nvidia-driver-daemonset"]
    assert [c["name"] for c in driver["spec"]["template"]["spec"]["containers"]] == ["nvidia-driver-ctr", "nvidia-peermem-ctr", "nvidia-fs-ctr"]
    assert container(driver, "nvidia-driver-ctr")["image"] == "nvcr.io/nvidia/driver:580.105.08-ubuntu22.04"
    assert driver["spec"]["updateStrategy"] == {"type": "OnDelete"}  # autoUpgrade false
    manager = env_of(container(driver, "k8s-driver-manager"))
    assert (manager["ENABLE_AUTO_DRAIN"], manager["DRAIN_TIMEOUT_SECONDS"], manager["DRAIN_DELETE_EMPTYDIR_DATA"]) == ("true", "600s", "true")
    assert env_of(container(ds["nvidia-mig-manager"], "nvidia-mig-manager"))["WITH_REBOOT"] == "true"
    assert "nvidia-dcgm" in ds
    monitor = objects(recording, "ServiceMonitor")["nvidia-dcgm-exporter"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"][0]["interval"] == "30s"


def test_mig_mixed_reports_unused_configs_and_the_metrics_gpu_stack_adds():
    result, _ = mig_mixed()
    assert paths(result) == {
        "configmap:dcgm-custom-metrics/dcgm-metrics.csv",
        "configmap:device-plugin-config/mps-2",
        "configmap:custom-mig-parted-config/config.yaml",
    }
    unused = next(i for i in result.not_carried if i.path == "configmap:custom-mig-parted-config/config.yaml")
    assert unused.value == "seven-1g"


def test_sandbox_workloads_deploy_the_vm_operands_per_pool_and_turn_auto_upgrade_off():
    result, recording = sandbox()
    cfg = loads(result)
    workloads = {p.name: p.workload_type for p in cfg.node_pools}
    assert workloads == {"l40s": "container", "a100-80gb-vm": "vm-passthrough", "a10-vgpu": "vm-vgpu"}
    assert next(p for p in cfg.node_pools if p.name == "a10-vgpu").vgpu_config == "A10-12Q"
    ds = daemonsets(recording)
    for name in ("nvidia-vfio-manager", "nvidia-sandbox-device-plugin-daemonset", "nvidia-vgpu-manager-daemonset",
                 "nvidia-vgpu-device-manager", "nvidia-sandbox-validator"):
        assert name in ds
    assert "nvidia-kata-sandbox-device-plugin-daemonset" not in ds and "nvidia-cc-manager" not in ds
    assert container(ds["nvidia-vgpu-manager-daemonset"], "nvidia-driver-ctr")["image"] == (
        "harbor.platform.internal/gpu-stack/vgpu-manager:580.82.07-ubuntu22.04"
    )
    assert ds["nvidia-driver-daemonset"]["spec"]["updateStrategy"] == {"type": "OnDelete"}
    # The operator never patched the KubeVirt CR; the import keeps it that way.
    assert not any("KubeVirt" in r.type for r in recording.registrations)
    assert paths(result) == {"spec.driver.upgradePolicy.autoUpgrade"}


def test_precompiled_gets_a_driver_per_kernel_and_the_upgrade_policy_as_a_rolling_update():
    result, recording = precompiled()
    cfg = loads(result)
    assert {p.node_image for p in cfg.node_pools} == {"ubuntu22.04-5.15.0-139-generic-amd64", "ubuntu24.04-6.8.0-79-generic-amd64"}
    assert cfg.driver.branch == "580" and cfg.upgrade.strategy == "rolling"
    assert (cfg.upgrade.max_unavailable, cfg.upgrade.max_parallel_upgrades) == ("10%", 2)
    ds = daemonsets(recording)
    driver = ds["nvidia-driver-daemonset-5.15.0-139-generic-ubuntu22.04"]
    assert container(driver, "nvidia-driver-ctr")["image"] == "nvcr.io/nvidia/driver:580-5.15.0-139-generic-ubuntu22.04"
    assert "nvidia-driver-daemonset-6.8.0-79-generic-ubuntu24.04" in ds
    manager = env_of(container(driver, "k8s-driver-manager"))
    # The drain is the node agents' (the coordinator evicting); the driver manager's own stays off with `rolling`.
    assert cfg.upgrade.drain.enabled and manager["ENABLE_AUTO_DRAIN"] == "false" and manager["DRAIN_TIMEOUT_SECONDS"] == "900s"
    assert manager["DRAIN_POD_SELECTOR_LABEL"] == "gpu-stack.io/drain!=never"
    assert paths(result) == {
        "spec.driver.upgradePolicy.maxUnavailable",
        "spec.driver.upgradePolicy.autoUpgrade",
        "spec.driver.upgradePolicy.podDeletion.timeoutSeconds",
        "spec.driver.upgradePolicy.podDeletion.deleteEmptyDir",
        # gpu-stack mounts the ConfigMap key by key and renders offline: its keys come with --configmap.
        "spec.driver.repoConfig.configMapName",
    }
    assert cfg.upgrade.wait_for_completion.pod_selector == "app=training"
    assert cfg.driver.licensing_config.secret_name == "licensing-config" and cfg.driver.licensing_config.nls_enabled
    assert cfg.driver.startup_probe.initial_delay_seconds == 60  # the operator's, not gpu-stack's precompiled 5 s


# --- Helm values against CRD defaults (no render) --------------------------------------------------------------

MINIMAL_FACTS = ClusterFacts("lab-admin", AGENT, kubernetes_versions=("1.32",), gpu_models=((None, "L4"),), os="ubuntu22.04")


@pytest.mark.parametrize("scenario", [default_install, host_driver, mig_mixed, sandbox, precompiled], ids=lambda f: f.__name__)
def test_every_imported_stack_renders_objects_the_api_server_accepts(scenario):
    _, recording = scenario()
    refused = apiserver.validate_all([obj for _, obj in render_objects_in_order(recording)])
    assert [str(p) for p in refused] == []


def test_fields_absent_from_the_dump_take_the_helm_values_when_given():
    with_helm = run_import("minimal.yaml", MINIMAL_FACTS, helm="helm-values.yaml")
    assert section(with_helm, "components")["dcgm"] is False
    assert section(with_helm, "devicePlugin")["migStrategy"] == "single"
    assert section(with_helm, "upgrade")["strategy"] == "rolling"
    assert section(with_helm, "nfd") == {"mode": "existing"}
    assert section(with_helm, "versions")["toolkit"] == "v1.20.0"
    loads(with_helm)


def test_without_helm_values_the_crd_defaults_apply_and_image_less_sections_are_reported():
    crd = run_import("minimal.yaml", MINIMAL_FACTS)
    assert section(crd, "components")["dcgm"] is True
    assert section(crd, "devicePlugin")["migStrategy"] == "none"
    assert section(crd, "upgrade")["strategy"] == "manual"
    assert "gpu-stack:nfd" not in crd.config
    assert paths(crd) == {f"spec.{s}" for s in ("driver", "driver.manager", "toolkit", "devicePlugin", "gfd", "validator", "dcgm", "dcgmExporter")}
    loads(crd)


@pytest.mark.parametrize(
    ("product", "memory", "model"),
    [
        ("NVIDIA-A100-SXM4-80GB", None, "A100-80GB"),
        ("NVIDIA-A100-PCIE-40GB", None, "A100-40GB"),
        ("NVIDIA-A100-SXM4", "40960", "A100-40GB"),
        ("NVIDIA-H100-80GB-HBM3-SHARED", None, "H100-80GB"),
        ("NVIDIA-H100-NVL", None, "H100-NVL"),
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", None, "A100-80GB"),
        ("NVIDIA-A10", None, "A10"),
        ("NVIDIA-L40S", None, "L40S"),
        ("Tesla-T4", None, "T4"),
        ("NVIDIA-GH200-480GB", None, "GH200"),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", None, "RTX-PRO-6000"),
        ("NVIDIA-A100-SXM4", None, None),
        ("NVIDIA-L40", None, None),
    ],
)
def test_gfd_products_map_to_catalog_models(product, memory, model):
    assert importer.model_from_product(product, memory) == model


def test_pools_that_share_every_selector_label_are_refused_with_a_hint():
    with pytest.raises(ImportInputError, match="--pool-label"):
        run_import("mig-mixed.yaml", ClusterFacts("train-admin", AGENT), nodes="nodes-mig.yaml", configmaps=["configmaps-mig.yaml"])


def test_a_pool_label_the_node_agent_writes_is_refused():
    facts = ClusterFacts("train-admin", AGENT, pool_labels=("nvidia.com/mig.config",))
    with pytest.raises(ImportInputError, match="node agent writes"):
        run_import("mig-mixed.yaml", facts, nodes="nodes-mig.yaml")


# --- the command line ------------------------------------------------------------------------------------------

BASE_ARGS = ["--context", "lab-admin", "--node-agent-image", AGENT, "--kubernetes-version", "1.32", "--gpu-model", "L4", "--os", "ubuntu22.04"]


def cli_import(*args: str) -> int:
    return cli.main(["import", *BASE_ARGS, *args])


def test_cli_writes_a_stack_file_that_loads_and_prints_the_report(tmp_path, capsys):
    out = tmp_path / "Pulumi.lab.yaml"
    code = cli_import("--clusterpolicy", fixture("host-driver.yaml"), "--configmap", fixture("configmap-host.yaml"),
                      "--stack", "lab", "--out", str(out))
    assert code == cli.EXIT_OK
    printed = capsys.readouterr().out
    assert "spec.nodeStatusExporter" in printed and "not carried (2)" in printed
    assert "without effect in the operator (1):" in printed
    document = yaml.safe_load(out.read_text())
    assert load_config(stack_file_config(document)).driver.mode == "host"
    assert "#   spec.nodeStatusExporter" in out.read_text()  # the report travels with the file
    _, _, cfg = cli.load_stack(str(out))  # and `render`/`check` take it as a stack
    assert cfg.cluster.namespace == "nvidia-gpu-operator"


def test_cli_writes_into_stacks_by_default_and_refuses_to_overwrite_without_force(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(importer, "PROJECT_DIR", tmp_path)
    args = ("--clusterpolicy", fixture("minimal.yaml"), "--stack", "lab")
    assert cli_import(*args) == cli.EXIT_OK
    written = tmp_path / "stacks" / "Pulumi.lab.yaml"
    before = written.read_text()
    written.write_text(before + "# edited by hand\n")
    capsys.readouterr()
    assert cli_import(*args) == cli.EXIT_CONFIG
    assert "--force" in capsys.readouterr().err
    assert written.read_text().endswith("# edited by hand\n")
    assert cli_import(*args, "--force") == cli.EXIT_OK
    assert written.read_text() == before


def test_an_imported_stack_starts_with_the_schema_line_and_holds_to_the_schema(tmp_path, monkeypatch, capsys):
    """Committed as written, the import passes what tests/test_stack_schema.py asks of every stack in stacks/."""
    monkeypatch.setattr(importer, "PROJECT_DIR", tmp_path)
    assert cli_import("--clusterpolicy", fixture("host-driver.yaml"), "--configmap", fixture("configmap-host.yaml"),
                      "--stack", "lab") == cli.EXIT_OK
    text = (tmp_path / "stacks" / "Pulumi.lab.yaml").read_text()
    assert text.splitlines()[0] == stack_schema.MODELINE
    validator = jsonschema.Draft7Validator(json.loads(stack_schema.SCHEMA_PATH.read_text()))
    assert [error.message for error in validator.iter_errors(yaml.safe_load(text))] == []


def test_an_import_written_elsewhere_names_the_schema_by_a_path_that_finds_it_from_there(tmp_path, capsys):
    out = tmp_path / "review" / "cluster" / "Pulumi.lab.yaml"
    assert cli_import("--clusterpolicy", fixture("minimal.yaml"), "--stack", "lab", "--out", str(out)) == cli.EXIT_OK
    first = out.read_text().splitlines()[0]
    assert first.startswith(stack_schema.MODELINE_PREFIX) and first != stack_schema.MODELINE
    assert (out.parent / first.removeprefix(stack_schema.MODELINE_PREFIX)).resolve() == stack_schema.SCHEMA_PATH


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: gpu-operator}\n", "kind 'Deployment' is not ClusterPolicy"),
        ("apiVersion: v1\nkind: List\nitems:\n- apiVersion: nvidia.com/v1\n  kind: NVIDIADriver\n", "items[0] is kind 'NVIDIADriver'"),
        ("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nspec: {driver: [unclosed\n", "not valid YAML"),
        ("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata: {name: cp}\nspec:\n  mig: {strategy: foo}\n", "spec.mig.strategy: got 'foo'"),
        ("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata: {name: cp}\nspec:\n  driver: {enabled: 'yes'}\n", "spec.driver.enabled: got 'yes'"),
        ("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata: {name: cp}\n", "has no `spec` mapping"),
        # gpu-stack's own validation refuses the value; the message names the ClusterPolicy field it came from.
        (
            "apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata: {name: cp}\nspec:\n"
            "  devicePlugin: {repository: nvcr.io/nvidia, image: k8s-device-plugin, version: latest}\n",
            "gpu-stack:versions.devicePlugin (from spec.devicePlugin.version)",
        ),
    ],
)
def test_bad_input_exits_2_names_the_problem_and_writes_nothing(tmp_path, capsys, content, expected):
    source = tmp_path / "cp.yaml"
    source.write_text(content)
    out = tmp_path / "Pulumi.bad.yaml"
    assert cli_import("--clusterpolicy", str(source), "--stack", "bad", "--out", str(out)) == cli.EXIT_CONFIG
    assert expected in capsys.readouterr().err
    assert not out.exists()


def test_a_missing_input_file_exits_2(tmp_path, capsys):
    out = tmp_path / "Pulumi.bad.yaml"
    code = cli_import("--clusterpolicy", str(tmp_path / "absent.yaml"), "--stack", "bad", "--out", str(out))
    assert code == cli.EXIT_CONFIG
    assert "absent.yaml does not exist" in capsys.readouterr().err
    assert not out.exists()


def test_without_nodes_a_gpu_model_is_required(tmp_path, capsys):
    out = tmp_path / "Pulumi.bad.yaml"
    args = ["import", "--context", "x", "--node-agent-image", AGENT, "--kubernetes-version", "1.32", "--os", "ubuntu22.04",
            "--clusterpolicy", fixture("minimal.yaml"), "--stack", "bad", "--out", str(out)]
    assert cli.main(args) == cli.EXIT_CONFIG
    assert "--gpu-model MODEL is required without --nodes" in capsys.readouterr().err
    assert not out.exists()


# --- MIG: never a stack that labels MIG nodes all-disabled -----------------------------------------------------

MIG_FACTS = ClusterFacts("train-admin", AGENT, pool_labels=("platform.internal/gpu-pool",))


def _mig_import(layouts: dict, *, policy_changes: Optional[dict] = None, label: Optional[str] = None) -> ImportResult:
    """The mig-mixed cluster with its mig-parted ConfigMap's layouts replaced, the two-3g nodes relabelled `label`."""
    policy = importer.read_yaml(fixture("mig-mixed.yaml"), "--clusterpolicy")
    for key, value in (policy_changes or {}).items():
        section_name, field = key.split(".")
        policy["spec"][section_name][field] = value
    configmaps = importer.read_yaml(fixture("configmaps-mig.yaml"), "--configmap")
    parted = next(i for i in configmaps["items"] if i["metadata"]["name"] == "custom-mig-parted-config")
    parted["data"]["config.yaml"] = yaml.safe_dump({"version": "v1", "mig-configs": layouts})
    nodes = importer.nodes_of(importer.read_yaml(fixture("nodes-mig.yaml"), "--nodes"), "nodes-mig.yaml")
    if label is not None:
        nodes = [type(n)(n.name, {**n.labels, "nvidia.com/mig.config": label} if n.labels.get("nvidia.com/mig.config") == "two-3g"
                         else n.labels, n.runtime, n.kubelet) for n in nodes]
    return importer.import_cluster_policy(importer.cluster_policy_of(policy, "mig-mixed.yaml"), MIG_FACTS, nodes=nodes,
                                          configmaps=importer.configmaps_of([("configmaps-mig.yaml", configmaps)]))


BALANCED = [{"device-filter": ["0x20B210DE"], "devices": "all", "mig-enabled": True,
             "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}]


def test_per_gpu_mig_layouts_are_carried_in_mig_parteds_shape():
    per_gpu = [{"devices": [0, 1, 2, 3], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
               {"devices": [4, 5, 6, 7], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    result = _mig_import({"all-balanced": BALANCED, "split": per_gpu}, label="split")
    assert section(result, "migLayouts")["split"] == [
        {"devices": [0, 1, 2, 3], "migEnabled": True, "migDevices": {"3g.40gb": 2}},
        {"devices": [4, 5, 6, 7], "migEnabled": True, "migDevices": {"1g.10gb": 7}},
    ]
    cfg = loads(result)
    assert next(p for p in cfg.node_pools if p.name == "a100-80gb-a100-mig").sharing.mig_layout == "split"


@pytest.mark.parametrize(
    ("layouts", "label", "changes", "expected"),
    [
        ({"all-balanced": BALANCED, "two-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]},
         None, {"mig.strategy": "none", "devicePlugin.config": {}}, "with mig.strategy none"),
        ({"all-balanced": BALANCED}, None, None, "no mig-configs entry"),
        ({"all-balanced": BALANCED, "two-3g": [{"devices": "all", "mig-enabled": False}]},
         None, None, "enables MIG on no GPU"),
    ],
    ids=["strategy-none", "missing-layout", "mig-off"],
)
def test_a_mig_layout_that_cannot_be_carried_stops_the_import(layouts, label, changes, expected):
    with pytest.raises(ImportInputError, match=expected) as refused:
        _mig_import(layouts, policy_changes=changes, label=label)
    assert "train-a100-0" in str(refused.value)  # names the nodes


def test_a_layout_redefining_a_builtin_name_is_carried_under_a_name_of_its_own_with_the_same_devices():
    # the cluster's all-3g.40gb is one 3g.40gb per GPU; gpu-stack's is two
    redefined = [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 1}}]
    result = _mig_import({"all-balanced": BALANCED, "all-3g.40gb": redefined}, label="all-3g.40gb")
    carried = "custom-mig-parted-config-3g.40gb-a100-80gb"
    assert section(result, "migLayouts")[carried] == {"3g.40gb": 1}
    cfg = loads(result)
    pool = next(p for p in cfg.node_pools if p.name == "a100-80gb-a100-mig")
    # the nodes are relabelled with the new name, whose devices are those the GPUs already hold
    assert pool.sharing.mig_layout == carried
    assert any(carried in note and "no GPU is repartitioned" in note for note in result.notes)


def test_nodes_on_all_enabled_import_as_a_mig_mixed_pool_that_advertises_what_exists():
    enabled = [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]
    for layouts in ({"all-balanced": BALANCED, "all-enabled": enabled}, {"all-balanced": BALANCED, "mig-on": enabled}):
        label = next(name for name in layouts if name != "all-balanced")
        result = _mig_import(layouts, label=label)
        cfg = loads(result)
        pool = next(p for p in cfg.node_pools if p.name == "a100-80gb-a100-mig")
        assert pool.sharing.mig_layout == label and pool.sharing.strategy == "mig-mixed"
        assert sharing.resources_by_pool(cfg.node_pools, "mixed", cfg.mig_layouts)[pool.name]["perGpu"] == {}


def test_mig_strategies_without_nodes_and_empty_mig_defaults_are_refused(tmp_path, capsys):
    facts = ClusterFacts("lab-admin", AGENT, kubernetes_versions=("1.32",), gpu_models=((None, "A100-80GB"),), os="ubuntu22.04")
    with pytest.raises(ImportInputError, match="mig.strategy mixed on A100-80GB nodes: pass --nodes"):
        importer.import_cluster_policy({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cp"},
                                        "spec": {"mig": {"strategy": "mixed"}}}, facts)
    policy = importer.read_yaml(fixture("default-install.yaml"), "--clusterpolicy")
    policy["spec"]["migManager"]["config"]["default"] = ""
    nodes = [type(n)(n.name, {k: v for k, v in n.labels.items() if k != "nvidia.com/mig.config"}, n.runtime, n.kubelet)
             for n in importer.nodes_of(importer.read_yaml(fixture("nodes-default.yaml"), "--nodes"), "nodes")]
    with pytest.raises(ImportInputError, match="no nvidia.com/mig.config label and migManager.config.default is empty"):
        importer.import_cluster_policy(importer.cluster_policy_of(policy, "cp"), ClusterFacts("prod-admin", AGENT), nodes=nodes)
    # On the command line: exit 2, nothing written.
    out = tmp_path / "Pulumi.mig.yaml"
    source = tmp_path / "cp.yaml"
    source.write_text("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata: {name: cp}\nspec:\n  mig: {strategy: single}\n")
    args = ["import", "--context", "x", "--node-agent-image", AGENT, "--kubernetes-version", "1.32", "--gpu-model", "H100-80GB",
            "--os", "ubuntu22.04", "--clusterpolicy", str(source), "--stack", "mig", "--out", str(out)]
    assert cli.main(args) == cli.EXIT_CONFIG
    assert "wipes their MIG partitions" in capsys.readouterr().err and not out.exists()


# --- images that are not NVIDIA's --------------------------------------------------------------------------------


def test_a_vgpu_guest_driver_from_a_private_registry_is_the_driver_operands_own_image():
    policy = importer.read_yaml(fixture("minimal.yaml"), "--clusterpolicy")
    policy["spec"]["driver"] = {"repository": "registry.corp.internal/vgpu", "image": "vgpu-guest-driver", "version": "550.90.07",
                                "licensingConfig": {"secretName": "nls-token"}}
    policy["spec"]["toolkit"] = {"repository": "ghcr.io/nvidia", "image": "container-toolkit", "version": "a1b2c3d4-ubi8"}
    result = importer.import_cluster_policy(importer.cluster_policy_of(policy, "cp"), MINIMAL_FACTS)
    operands = section(result, "operands")
    assert operands["toolkit"] == {"repository": "ghcr.io/nvidia", "image": "container-toolkit", "version": "a1b2c3d4-ubi8"}
    versions = result.config.get("gpu-stack:versions", {})
    # No foreign tag on NVIDIA's image: the toolkit's goes with its own image, the driver's is the driver version
    # gpu-stack reads for the pools, pulled from the driver operand's own repository and image.
    assert "toolkit" not in versions and versions["driver"] == "550.90.07"
    assert operands["driver"] == {"repository": "registry.corp.internal/vgpu", "image": "vgpu-guest-driver"}
    # The operator's nil nlsEnabled is false; gpu-stack's default is true, so the import says it.
    assert section(result, "driver")["licensingConfig"] == {"secretName": "nls-token", "nlsEnabled": False}
    loads(result)


# --- the imported stack passes `gpustack check` --------------------------------------------------------------------


def test_an_imported_stack_with_every_carried_knob_passes_check(tmp_path, capsys):
    """The differential test's base ClusterPolicy (every component on, every carried field set), through the CLI
    and then `check` on what it wrote: schema, API-server rules and the policy pack."""
    out = tmp_path / "Pulumi.everything.yaml"
    args = ["import", "--context", "lab-admin", "--node-agent-image", AGENT, "--clusterpolicy", fixture("differential-base.yaml"),
            "--nodes", fixture("nodes-default.yaml"), "--configmap", fixture("differential-configmaps.yaml"),
            "--stack", "everything", "--out", str(out)]
    policy = importer.read_yaml(fixture("differential-base.yaml"), "--clusterpolicy")
    # Moved host paths: the pack follows the toolkit's and hostPaths' by itself, the job-mapping directory is listed.
    policy["spec"]["dcgmExporter"]["hpcJobMapping"]["directory"] = "/var/lib/slurm/gpu-jobs"
    policy["spec"]["toolkit"]["installDir"] = "/opt/nvidia"
    policy["spec"]["hostPaths"].update(rootFS="/host-root", kubeletRootDir="/var/snap/microk8s/common/var/lib/kubelet")
    source = tmp_path / "cp.yaml"
    source.write_text(yaml.safe_dump(policy))
    args[args.index(fixture("differential-base.yaml"))] = str(source)
    assert cli.main(args) == cli.EXIT_OK
    policy_file = tmp_path / "everything.policy.json"
    assert json.loads(policy_file.read_text()) == {
        "images-pinned": {"allowedRegistries": ["nvcr.io", "registry.k8s.io", "harbor.platform.internal/gpu-stack"]},
        "privileged-only-where-needed": {"additionalHostPaths": {"nvidia-dcgm-exporter": ["/var/lib/slurm/gpu-jobs"]}},
    }
    capsys.readouterr()
    assert cli.main(["check", "--stack", str(out), "--policy-config", str(policy_file)]) == cli.EXIT_OK, capsys.readouterr().out


# --- every catalog layout round-trips through the importer -------------------------------------------------------


def _applying_to(model: str, entries: list[dict]) -> list[dict]:
    ours = {f.upper() for f in mig_catalog.device_filter(model)}
    return [e for e in entries if "device-filter" not in e or {str(f).upper() for f in e["device-filter"]} & ours]


@pytest.mark.parametrize("model", sorted(m for m, spec in catalog.GPU_MODELS.items() if spec.mig_capable))
def test_every_catalog_layout_reads_back_from_the_mig_parted_config_gpu_stack_renders(model):
    """The importer reads a cluster's mig-parted ConfigMap through layout_from_mig_parted: the operator's own
    document (which gpu-stack renders) must give back each model's layout exactly, so an imported pool keeps the
    partitions its nodes run."""
    rendered = mig_catalog.mig_parted_config()["mig-configs"]
    for name, layout in mig_catalog.builtin_layouts(model).items():
        if not layout.devices:
            continue
        carried, why = layout_from_mig_parted(_applying_to(model, rendered[name]))
        assert why == "" and carried == layout.devices, (model, name)


def test_every_a100_layout_a_node_runs_is_carried_by_its_builtin_name():
    """Nodes labelled with any built-in layout, the operator's default ConfigMap given: the pool names that layout
    (never all-disabled) and the stack loads."""
    rendered = mig_catalog.mig_parted_config()["mig-configs"]
    for name, layout in mig_catalog.builtin_layouts("A100-80GB").items():
        if not layout.devices:
            continue
        result = _mig_import(rendered, label=name)
        pools = {p.name: p for p in loads(result).node_pools}
        assert pools["a100-80gb-a100-mig"].sharing.mig_layout == name
        assert name not in result.config.get("gpu-stack:migLayouts", {})  # a built-in stays gpu-stack's, not a copy


def test_nodes_on_all_enabled_holding_instances_stop_the_import_before_a_mig_manager_deletes_them():
    enabled = [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]
    policy = importer.read_yaml(fixture("mig-mixed.yaml"), "--clusterpolicy")
    configmaps = importer.read_yaml(fixture("configmaps-mig.yaml"), "--configmap")
    parted = next(i for i in configmaps["items"] if i["metadata"]["name"] == "custom-mig-parted-config")
    parted["data"]["config.yaml"] = yaml.safe_dump({"version": "v1", "mig-configs": {"all-balanced": BALANCED, "all-enabled": enabled}})
    nodes = [type(n)(n.name, {**n.labels, "nvidia.com/mig.config": "all-enabled", "nvidia.com/mig-1g.10gb.count": "7"}
                     if n.labels.get("nvidia.com/mig.config") == "two-3g" else n.labels, n.runtime, n.kubelet)
             for n in importer.nodes_of(importer.read_yaml(fixture("nodes-mig.yaml"), "--nodes"), "nodes-mig.yaml")]
    with pytest.raises(ImportInputError, match="hold MIG instances") as refused:
        importer.import_cluster_policy(importer.cluster_policy_of(policy, "mig-mixed.yaml"), MIG_FACTS, nodes=nodes,
                                       configmaps=importer.configmaps_of([("configmaps-mig.yaml", configmaps)]))
    assert "train-a100-0" in str(refused.value)
