"""`gpustack import` with NVIDIADriver objects (`--nvidiadriver`): NVIDIA's sample, the `default` object its Helm
chart renders with nvidiaDriverCRD.enabled, and the NVIDIADriver inputs of its golden driver scenarios
(GO:internal/state/driver_test.go, a22dbf6) each import to a stack that passes `gpustack check`, and the driver
DaemonSet gpu-stack renders carries what NVIDIA's template renders from that object (names aside).

`template_facts` is a model of NVIDIA's state-driver template (GO:manifests/state-driver/0500_daemonset.yaml), not
its code: the facts an NVIDIADriver spec decides there (images, pull policies, args, env, resources, probes, pod
settings, GPUDirect sidecars, licence mounts), which `rendered_facts` reads back from gpu-stack's render."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest
import yaml

import gpustack.__main__ as cli
from components.config import load_config, stack_file_config
from gpustack import apiserver, importer, schema
from gpustack.importer import ClusterFacts, ImportInputError, ImportResult
from gpustack.importer.ledger import SILENT, counts
from gpustack.importer.nvidiadriver import operator_daemonset_name
from gpustack.importer.stackfile import policy_config, validate
from gpustack.policyrun import pack_policies, run_policies
from gpustack.render import objects_in_order
from stacktest import ROOT, env_of, objects, render

CP = ROOT / "tests" / "fixtures" / "clusterpolicy"
NVD = ROOT / "tests" / "fixtures" / "nvidiadriver"
AGENT = "harbor.platform.internal/gpu-stack/node-agent:0.10.0"
ROLE = "virt.platform.internal/gpu-role"
INSTANCE = "node.kubernetes.io/instance-type"


def read(folder, name: str) -> Any:
    return importer.read_yaml(str(folder / name), name)


def crd_policy(name: str = "default-install.yaml") -> dict:
    """A fixture ClusterPolicy as the chart renders it with driver.nvidiaDriverCRD.enabled."""
    policy = copy.deepcopy(read(CP, name))
    policy["spec"].setdefault("driver", {})["useNvidiaDriverCRD"] = True
    return policy


def run_import(objects_: list[dict], *, policy: str = "default-install.yaml", nodes: Optional[str] = "nodes-default.yaml",
               facts: Optional[ClusterFacts] = None) -> ImportResult:
    drivers = importer.nvidia_drivers_of([("nvidiadrivers.yaml", {"apiVersion": "v1", "kind": "List", "items": objects_})])
    return importer.import_cluster_policy(
        importer.cluster_policy_of(crd_policy(policy), policy),
        facts or ClusterFacts("lab-admin", AGENT),
        nodes=importer.nodes_of(read(CP, nodes), nodes) if nodes else None,
        nvidia_drivers=drivers,
    )


def nvidia_driver(name: str, spec: dict, uid: str = "bfac7359-6033-45ce-88d6-53db0078526e") -> dict:
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": name, "uid": uid},
            "spec": {"default": False, "kernelModuleType": "auto", **copy.deepcopy(spec)}}


# --- NVIDIA's golden scenarios as NVIDIADriver objects ------------------------------------------------------------
# getMinimalDriverRenderData: the driver image nvcr.io/nvidia/driver:525.85.03-<os>, the driver manager's devel
# tag, the three probes at 60/60/10/1/120 and the resources every container of the pod gets.
PROBE = {"initialDelaySeconds": 60, "timeoutSeconds": 60, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 120}
MINIMAL = {
    "driverType": "gpu", "repository": "nvcr.io/nvidia", "image": "driver", "version": "525.85.03",
    "manager": {"repository": "nvcr.io/nvidia/cloud-native", "image": "k8s-driver-manager", "version": "devel"},
    "startupProbe": PROBE, "livenessProbe": PROBE, "readinessProbe": PROBE,
    "resources": {"requests": {"cpu": "200m", "memory": "100Mi"}, "limits": {"cpu": "500m", "memory": "300Mi"}},
}
# TestDriverSpec sets every field; its placeholder manager repository (/path/to/repository) is no image reference
# the API server or a kubelet takes, so it gets a registry host here.
FULL_SPEC = {
    **MINIMAL,
    "manager": {"repository": "registry.example.com/path/to/repository", "image": "image", "version": "version",
                "imagePullPolicy": "Always", "imagePullSecrets": ["manager-secret"],
                "env": [{"name": "FOO", "value": "foo"}, {"name": "BAR", "value": "bar"}]},
    "usePrecompiled": False, "imagePullPolicy": "Always", "imagePullSecrets": ["secret-a", "secret-b"],
    "resources": {"requests": {"cpu": "200m", "memory": "100Mi"}, "limits": {"memory": "200Mi", "cpu": "500m"}},
    "args": ["--foo", "--bar"], "env": [{"name": "FOO", "value": "foo"}, {"name": "BAR", "value": "bar"}],
    "nodeSelector": {"example.com/foo": "foo", "example.com/bar": "bar"},
    "labels": {"custom-label-1": "custom-value-1", "custom-label-2": "custom-value-2", "app": "foo", "app.kubernetes.io/part-of": "foo"},
    "annotations": {"custom-annotation-1": "custom-value-1", "custom-annotation-2": "custom-value-2"},
    "tolerations": [{"key": "foo", "operator": "Equal", "value": "bar", "effect": "NoSchedule"}],
    "priorityClassName": "custom-priority-class-name", "kernelModuleType": "open",
}
GDS = {"enabled": True, "repository": "nvcr.io/nvidia/cloud-native", "image": "nvidia-fs", "version": "2.16.1"}
GDRCOPY = {"enabled": True, "repository": "nvcr.io/nvidia/cloud-native", "image": "gdrdrv", "version": "v2.4.1"}
SANDBOX_FACTS = ClusterFacts("virt-admin", AGENT, pool_labels=(ROLE,),
                             gpu_models=(((ROLE, "vm-passthrough"), "A100-80GB"), ((ROLE, "vm-vgpu"), "A10")))


@dataclass(frozen=True)
class Scenario:
    spec: dict
    nodes: Optional[str] = "nodes-default.yaml"
    policy: str = "default-install.yaml"
    facts: ClusterFacts = ClusterFacts("lab-admin", AGENT)
    os_tag: str = "ubuntu22.04"
    kernel: Optional[str] = None
    extra: tuple[dict, ...] = field(default_factory=tuple)


SCENARIOS: dict[str, Scenario] = {
    "driver-minimal": Scenario(MINIMAL),
    # Its nodeSelector labels no fixture node carries: imported without --nodes, a pool of its own.
    "driver-full-spec": Scenario(FULL_SPEC, nodes=None, facts=ClusterFacts("lab-admin", AGENT, kubernetes_versions=("1.32",),
                                                                        gpu_models=((None, "A10"),), os="ubuntu22.04")),
    "driver-gds": Scenario({**MINIMAL, "gds": {**GDS, "imagePullSecrets": ["ngc-secrets"]}}),
    "driver-gdrcopy": Scenario({**MINIMAL, "gdrcopy": {**GDRCOPY, "imagePullSecrets": ["ngc-secrets"]}}),
    "driver-rdma": Scenario({**MINIMAL, "rdma": {"enabled": True}}),
    "driver-rdma-hostmofed": Scenario({**MINIMAL, "rdma": {"enabled": True, "useHostMofed": True}}),
    "driver-hostnetwork": Scenario({**MINIMAL, "hostNetwork": True}),
    "driver-secret-env": Scenario({**MINIMAL, "secretEnv": "test-secret-env", "gds": GDS, "gdrcopy": GDRCOPY}),
    "driver-vgpu-licensing": Scenario({**MINIMAL, "licensingConfig": {"name": "licensing-config-configmap", "nlsEnabled": True}}),
    "driver-vgpu-licensing-secret": Scenario({**MINIMAL, "licensingConfig": {"secretName": "licensing-config-secret", "nlsEnabled": True}}),
    # NVIDIA's precompiled golden runs branch 535 on 5.4.0-150-generic; the fixture nodes' A100s run 5.15.0-139.
    "driver-precompiled": Scenario({**MINIMAL, "usePrecompiled": True, "version": "535", "nodeSelector": {INSTANCE: "bm.gpu.a100-8"}},
                                   nodes="nodes-precompiled.yaml", kernel="5.15.0-139-generic"),
    "driver-vgpu-host-manager": Scenario(
        {**{k: v for k, v in MINIMAL.items() if k not in ("startupProbe", "livenessProbe", "readinessProbe")},
         "driverType": "vgpu-host-manager", "image": "vgpu-manager", "nodeSelector": {ROLE: "vm-vgpu"}},
        nodes="nodes-sandbox.yaml", policy="sandbox-kubevirt.yaml", facts=SANDBOX_FACTS),
}
# Scenarios make test renders (the others in make test-all): no nodes and every field, the vGPU host manager.
REPRESENTATIVE = ("driver-full-spec", "driver-vgpu-host-manager")


@functools.lru_cache(maxsize=None)
def imported_only(name: str) -> ImportResult:
    scenario = SCENARIOS[name]
    return run_import([nvidia_driver(name, scenario.spec), *scenario.extra], policy=scenario.policy,
                      nodes=scenario.nodes, facts=scenario.facts)


def imported(name: str) -> tuple[ImportResult, Any]:
    result = imported_only(name)
    return result, render(result.config)


# --- a model of NVIDIA's template: what an NVIDIADriver decides in its DaemonSet -----------------------------------


def _path(repository: str, image: str, version: str) -> str:
    return f"{repository.rstrip('/')}/{image}:{version}"


def template_facts(spec: dict, os_tag: str, kernel: Optional[str]) -> dict[str, Any]:
    host_manager = spec.get("driverType") == "vgpu-host-manager"
    base = _path(spec.get("repository", ""), spec["image"], spec["version"])
    manager = spec.get("manager") or {}
    resources = spec.get("resources")
    facts: dict[str, Any] = {
        "driver image": f"{base}-{kernel}-{os_tag}" if spec.get("usePrecompiled") else f"{base}-{os_tag}",
        "driver pull policy": spec.get("imagePullPolicy") or "IfNotPresent",
        "manager image": _path(manager["repository"], manager["image"], manager["version"]),
        "manager pull policy": manager.get("imagePullPolicy") or "IfNotPresent",
        "driver args": ["init", *spec.get("args", [])],
        "driver env": {e["name"]: e.get("value", "") for e in spec.get("env", [])},
        "manager env": {e["name"]: e.get("value", "") for e in manager.get("env", [])},
        "resources": {c: resources for c in ("nvidia-driver-ctr", "k8s-driver-manager")},
        "priority class": spec.get("priorityClassName") or "system-node-critical",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, *spec.get("tolerations", [])],
        "labels": {k: v for k, v in (spec.get("labels") or {}).items() if k != "app" and not k.startswith("app.kubernetes.io/")},
        "annotations": spec.get("annotations") or {},
        "pull secrets": [*spec.get("imagePullSecrets", []), *manager.get("imagePullSecrets", []),
                         *(spec.get("gds") or {}).get("imagePullSecrets", []), *(spec.get("gdrcopy") or {}).get("imagePullSecrets", [])],
        "host network": bool(spec.get("hostNetwork")),
        "component": "nvidia-vgpu-host-manager" if host_manager else "nvidia-driver",
    }
    if host_manager:
        return facts
    gds, gdrcopy, rdma = (bool((spec.get(k) or {}).get("enabled")) for k in ("gds", "gdrcopy", "rdma"))
    host_mofed = rdma and bool(spec["rdma"].get("useHostMofed"))
    env = facts["driver env"]
    if spec.get("kernelModuleType"):
        env["KERNEL_MODULE_TYPE"] = spec["kernelModuleType"]
    env.update({"GDS_ENABLED": "true"} if gds else {})
    env.update({"GDRCOPY_ENABLED": "true"} if gdrcopy else {})
    env.update({"GPU_DIRECT_RDMA_ENABLED": "true"} if rdma else {})
    env.update({"USE_HOST_MOFED": "true"} if host_mofed else {})
    facts["sidecars"] = {
        **({"nvidia-fs-ctr": f"{_path(GDS['repository'], 'nvidia-fs', spec['gds']['version'])}-{os_tag}"} if gds else {}),
        **({"nvidia-gdrcopy-ctr": f"{_path(GDRCOPY['repository'], 'gdrdrv', spec['gdrcopy']['version'])}-{os_tag}"} if gdrcopy else {}),
        **({"nvidia-peermem-ctr": facts["driver image"]} if rdma else {}),
    }
    facts["resources"].update({c: resources for c in facts["sidecars"]})
    probe = spec.get("startupProbe") or {**PROBE, "initialDelaySeconds": 5 if spec.get("usePrecompiled") else 60}
    facts["startup probe"] = {k: probe.get(k, 1) for k in PROBE}
    facts["secret env"] = spec.get("secretEnv")
    licensing = spec.get("licensingConfig") or {}
    facts["licence"] = (licensing.get("secretName") or licensing.get("name") or None,
                        ["/drivers/gridd.conf", *(["/drivers/ClientConfigToken/client_configuration_token.tok"]
                                                   if licensing.get("nlsEnabled", True) else [])] if licensing else [])
    return facts


def _resources(c: dict) -> Optional[dict]:
    found = c.get("resources") or None
    return {k: dict(v) for k, v in found.items() if v} if found else None


def rendered_facts(ds: dict, wanted: dict[str, Any]) -> dict[str, Any]:
    pod = ds["spec"]["template"]["spec"]
    by_name = {c["name"]: c for c in [*pod.get("initContainers", []), *pod["containers"]]}
    driver, manager = by_name["nvidia-driver-ctr"], by_name["k8s-driver-manager"]
    driver_env, manager_env = env_of(driver), env_of(manager)
    facts: dict[str, Any] = {
        "driver image": driver["image"],
        "driver pull policy": driver["imagePullPolicy"],
        "manager image": manager["image"],
        "manager pull policy": manager["imagePullPolicy"],
        "driver args": driver.get("args"),
        "driver env": {k: driver_env.get(k) for k in wanted["driver env"]},
        "manager env": {k: manager_env.get(k) for k in wanted["manager env"]},
        "resources": {c: _resources(by_name[c]) if c in by_name else "absent" for c in wanted["resources"]},
        "priority class": pod.get("priorityClassName"),
        "tolerations": [t for t in pod.get("tolerations", []) if t in wanted["tolerations"]],
        "labels": {k: ds["metadata"]["labels"].get(k) for k in wanted["labels"]},
        "annotations": {k: pod_annotations.get(k) for k in wanted["annotations"]}
        if (pod_annotations := ds["spec"]["template"]["metadata"].get("annotations") or {}) is not None else {},
        "pull secrets": [s["name"] for s in pod.get("imagePullSecrets", []) if s["name"] in wanted["pull secrets"]],
        "host network": bool(pod.get("hostNetwork")) and pod.get("dnsPolicy") == "ClusterFirstWithHostNet",
        "component": ds["metadata"]["labels"].get("app.kubernetes.io/component"),
    }
    if "sidecars" not in wanted:
        return facts
    facts["sidecars"] = {name: by_name[name]["image"] for name in by_name if name in wanted["sidecars"]}
    facts["startup probe"] = {k: (driver.get("startupProbe") or {}).get(k) for k in PROBE}
    env_from = [e["secretRef"]["name"] for e in driver.get("envFrom", []) if "secretRef" in e]
    facts["secret env"] = env_from[0] if env_from else None
    licence = next((v for v in pod["volumes"] if v["name"] == "licensing-config"), None)
    facts["licence"] = ((licence.get("secret") or {}).get("secretName") or (licence.get("configMap") or {}).get("name") if licence else None,
                        [m["mountPath"] for m in driver["volumeMounts"] if m["name"] == "licensing-config"])
    return facts


def driver_daemonsets(recording, host_manager: bool) -> dict[str, dict]:
    component = "nvidia-vgpu-host-manager" if host_manager else "nvidia-driver"
    return {name: ds for name, ds in objects(recording, "DaemonSet").items()
            if ds["metadata"]["labels"].get("app.kubernetes.io/component") == component}


def _param(name: str):
    return name if name in REPRESENTATIVE else pytest.param(name, marks=pytest.mark.matrix)


@pytest.mark.parametrize("name", [_param(n) for n in SCENARIOS])
def test_each_golden_scenario_renders_the_driver_daemonset_its_nvidiadriver_would_have_made_and_passes_check(name):
    """The facts of NVIDIA's template, then what `gpustack check` runs on the same render: the API server's rules,
    the schemas and the policy pack (the CLI's own check: the sample and the Helm default below)."""
    scenario = SCENARIOS[name]
    result, recording = imported(name)
    host_manager = scenario.spec["driverType"] == "vgpu-host-manager"
    (ds,) = driver_daemonsets(recording, host_manager).values()
    wanted = template_facts(scenario.spec, scenario.os_tag, scenario.kernel)
    assert rendered_facts(ds, wanted) == wanted
    # the nodes the object selected are its pool's (the node agent labels them for this DaemonSet)
    (pool,) = [p for p in result.config["gpu-stack:nodePools"] if p.get("workloadType", "container") ==
               ("vm-vgpu" if host_manager else "container") and p.get("driver", {}).get("mode") != "host"]
    assert (scenario.spec.get("nodeSelector") or {}).items() <= pool["nodeSelector"].items()
    cfg = validate(result)
    rendered = [obj for _, obj in objects_in_order(recording)]
    assert [str(p) for p in apiserver.validate_all(rendered)] == []
    assert [p for obj in rendered for p in schema.validate(obj, "1.32")] == []
    found = run_policies(recording, pack_policies(), policy_config(cfg))
    # autoUpgrade off imports as `manual`: the driver manager keeps its cluster-wide eviction, which check warns of
    evicting = [v for v in found if v.policy == "gpu-node-token-reach" and "may evict any pod" in v.message]
    assert bool(evicting) == (cfg.upgrade.strategy == "manual")
    assert [v.message for v in found if v not in evicting] == []
    assert not [f.render() for f in result.fields if f.status == SILENT]


def test_the_daemonset_keeps_the_name_the_operator_gave_it_so_adoption_takes_over_its_pods():
    """getDriverAppName: nvidia-<driverType>-driver-<os>-<hash of the UID> (and the kernel, precompiled); NVIDIA's own
    test's UID gives these names."""
    result = imported_only("driver-precompiled")
    kernel_hash = operator_daemonset_name(importer.nvidia_drivers_of([("x", nvidia_driver("x", {}))])[0], "ubuntu22.04", "5.15.0-139-generic")
    (pool,) = [p for p in result.config["gpu-stack:nodePools"] if p.get("driver", {}).get("mode") != "host"]
    assert pool["driver"]["daemonSetName"] == kernel_hash and pool["nodeImage"] == "ubuntu22.04-5.15.0-139-generic-amd64"
    # the precompiled golden's node selection: the object's selector and its nodes' kernel
    assert pool["nodeSelector"]["node.kubernetes.io/instance-type"] == "bm.gpu.a100-8"
    driver = importer.nvidia_drivers_of([("x", nvidia_driver("x", {"usePrecompiled": True}))])[0]
    assert operator_daemonset_name(driver, "ubuntu20.04", "5.15.0-70-generic") == "nvidia-gpu-driver-ubuntu20.04-59b779bcc5"
    long_os = "redhatCoreOS4.14-414.92.2023092822"
    assert operator_daemonset_name(driver, "redhatCoreOS4.14-414.92.202309282257", "5.15.0-70-generic") == f"nvidia-gpu-driver-{long_os}-59b779bcc5"


# --- NVIDIA's sample and the Helm chart's default object, through the CLI and `check` ------------------------------


@pytest.mark.parametrize("fixture", ["sample.yaml", "helm-default.yaml"])
def test_nvidias_sample_and_the_charts_default_import_and_pass_check(fixture, tmp_path, capsys):
    policy = tmp_path / "cp.yaml"
    policy.write_text(yaml.safe_dump(crd_policy()))
    out = tmp_path / "Pulumi.nvd.yaml"
    args = ["import", "--context", "lab-admin", "--node-agent-image", AGENT, "--clusterpolicy", str(policy),
            "--nodes", str(CP / "nodes-default.yaml"), "--nvidiadriver", str(NVD / fixture), "--stack", "nvd", "--out", str(out)]
    assert cli.main(args) == cli.EXIT_OK, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert f"nvidiadriver:{'default' if fixture == 'helm-default.yaml' else 'nvidiadriver-sample'}/spec.version" in printed
    pool = yaml.safe_load(out.read_text())["config"]["gpu-stack:nodePools"][0]
    assert pool["driver"]["daemonSetName"].startswith("nvidia-gpu-driver-ubuntu22.04-")
    check = ["check", "--stack", str(out)]
    policy_file = tmp_path / "nvd.policy.json"
    if policy_file.exists():
        check += ["--policy-config", str(policy_file)]
    assert cli.main(check) == cli.EXIT_OK, capsys.readouterr().out


# --- several objects: per-pool drivers, owners, refusals ------------------------------------------------------------

A100 = nvidia_driver("a100", {"driverType": "gpu", "repository": "nvcr.io/nvidia", "image": "driver", "version": "580.95.05",
                              "nodeSelector": {INSTANCE: "bm.gpu.a100-8"}}, uid="0b5ea2c6-8c1f-4a57-9d0e-3f4b6e21a9c7")
L40S = nvidia_driver("l40s", {"driverType": "gpu", "repository": "nvcr.io/nvidia", "image": "driver", "version": "580",
                              "usePrecompiled": True, "nodeSelector": {INSTANCE: "bm.gpu.l40s-4"}}, uid="5d7c0a21-6e3b-4f88-b1c2-7a9e0d3f4b16")


def pools_by_name(result: ImportResult) -> dict[str, dict]:
    return {p["name"]: p for p in result.config["gpu-stack:nodePools"]}


def test_each_object_drives_the_pools_of_the_nodes_it_owns_in_its_own_mode_and_version():
    result = run_import([A100, L40S], nodes="nodes-precompiled.yaml")
    cfg = load_config(stack_file_config(result.document()))
    pools = pools_by_name(result)
    a100, l40s = pools["a100-80gb"], pools["l40s"]
    assert a100["nodeSelector"] == {INSTANCE: "bm.gpu.a100-8"} and l40s["nodeSelector"] == {INSTANCE: "bm.gpu.l40s-4"}
    # the object owning most nodes is the stack's driver; the other differs per pool
    assert result.config["gpu-stack:driver"]["mode"] == "managed" and result.config["gpu-stack:versions"]["driver"] == "580.95.05"
    assert l40s["driver"]["mode"] == "precompiled" and l40s["driver"]["branch"] == "580"
    assert l40s["nodeImage"] == "ubuntu24.04-6.8.0-79-generic-amd64"
    assert a100["driver"]["daemonSetName"] == operator_daemonset_name(importer.nvidia_drivers_of([("x", A100)])[0], "ubuntu22.04", None)
    assert l40s["driver"]["daemonSetName"] == operator_daemonset_name(
        importer.nvidia_drivers_of([("x", L40S)])[0], "ubuntu24.04", "6.8.0-79-generic")
    assert {cfg.pool_driver(p).mode for p in cfg.node_pools} == {"managed", "precompiled"}
    ledger = {f.path: f for f in result.fields}
    assert ledger["nvidiadriver:l40s/spec.version"].key == "nodePools[l40s].driver.branch"
    assert ledger["nvidiadriver:a100/spec.version"].key == "versions.driver"
    assert not [f.render() for f in result.fields if f.status == SILENT]


def test_nodes_no_object_selects_run_no_driver_as_under_the_operator():
    result = run_import([A100], nodes="nodes-precompiled.yaml")
    pools = pools_by_name(result)
    assert pools["l40s"]["driver"] == {"mode": "host"}
    assert any("no NVIDIADriver owns its nodes" in note for note in result.notes)


def test_the_default_object_owns_the_nodes_no_other_one_selects():
    default = nvidia_driver("fallback", {"driverType": "gpu", "default": True, "repository": "nvcr.io/nvidia", "image": "driver",
                                         "version": "580.95.05"}, uid="77c2b1e0-3a4d-4f5e-9b6a-1c2d3e4f5a6b")
    a100 = copy.deepcopy(A100)
    a100["spec"]["version"] = "580.82.07"
    result = run_import([a100, default], nodes="nodes-precompiled.yaml")
    pools = pools_by_name(result)
    # the A100 object owns two nodes, so its version is the stack's; the default one owns the L40S node
    assert result.config["gpu-stack:versions"]["driver"] == "580.82.07"
    assert pools["l40s"]["driver"]["version"] == "580.95.05" and "mode" not in pools["l40s"]["driver"]


REFUSED = [
    ("overlapping selectors", lambda: run_import([A100, {**copy.deepcopy(A100), "metadata": {"name": "a100-again"}}], nodes="nodes-precompiled.yaml"),
     "node bm-a100-0 is selected by NVIDIADrivers a100, a100-again"),
    ("objects disagree on a field gpu-stack sets once",
     lambda: run_import([A100, nvidia_driver("l40s", {**L40S["spec"], "usePrecompiled": False, "version": "580.95.05",
                                                     "env": [{"name": "X", "value": "1"}]})], nodes="nodes-precompiled.yaml"),
     "NVIDIADrivers a100 and l40s set spec.env[X] differently"),
    ("two defaults", lambda: run_import([nvidia_driver("a", {"default": True}), nvidia_driver("b", {"default": True})]),
     "NVIDIADrivers a, b are each `default: true`"),
    ("a default with a selector", lambda: run_import([nvidia_driver("a", {"default": True, "nodeSelector": {"x": "y"}})]),
     "NVIDIADriver a: spec.nodeSelector: a default NVIDIADriver must not use nodeSelector"),
    ("the owner label in a selector", lambda: run_import([nvidia_driver("a", {"nodeSelector": {"nvidia.com/gpu-operator.driver.owner": "a"}})]),
     "NVIDIADriver a: spec.nodeSelector: nvidia.com/gpu-operator.driver.owner"),
    ("a driver type", lambda: run_import([nvidia_driver("a", {"driverType": "cuda"})]),
     "NVIDIADriver a: spec.driverType: got 'cuda'; allowed values: gpu, vgpu, vgpu-host-manager"),
    ("a field's type", lambda: run_import([nvidia_driver("a", {"env": {"FOO": "1"}})]),
     "NVIDIADriver a: spec.env: expected a list of {name, value}, got mapping"),
    ("NVIDIADriver mode without the objects", lambda: run_import([]), "Pass them with --nvidiadriver FILE"),
    ("a default beside others without --nodes",
     lambda: run_import([A100, nvidia_driver("d", {**{k: v for k, v in A100["spec"].items() if k != "nodeSelector"}, "default": True})], nodes=None,
                                                                    facts=ClusterFacts("a", AGENT, kubernetes_versions=("1.32",), gpu_models=((None, "A10"),), os="ubuntu22.04")),
     "pass --nodes"),
    ("vGPU managers of two versions",
     lambda: run_import([nvidia_driver("v1", {"driverType": "vgpu-host-manager", "image": "vgpu-manager", "version": "1", "nodeSelector": {"a": "1"}}),
                         nvidia_driver("v2", {"driverType": "vgpu-host-manager", "image": "vgpu-manager", "version": "2", "nodeSelector": {"a": "2"}})]),
     "one vGPU manager image"),
]


@pytest.mark.parametrize("build, expected", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_what_the_operator_refuses_or_gpu_stack_cannot_hold_stops_the_import_naming_object_and_field(build, expected):
    with pytest.raises(ImportInputError) as caught:
        build()
    assert expected in str(caught.value)


def test_objects_the_clusterpolicy_does_not_use_are_reported_as_without_effect():
    drivers = importer.nvidia_drivers_of([("x", read(NVD, "sample.yaml"))])
    result = importer.import_cluster_policy(importer.cluster_policy_of(read(CP, "default-install.yaml"), "cp"),
                                            ClusterFacts("lab-admin", AGENT), nodes=importer.nodes_of(read(CP, "nodes-default.yaml"), "n"),
                                            nvidia_drivers=drivers)
    (item,) = [i for i in result.no_effect if i.path.startswith("nvidiadriver:")]
    assert item.path == "nvidiadriver:nvidiadriver-sample/spec" and "disables every NVIDIADriver" in item.reason


def test_every_field_of_the_sample_and_the_helm_default_is_carried_reported_or_without_effect(capsys):
    totals = {"carried": 0, "reported": 0, "without-effect": 0, "silent": 0}
    for fixture in ("sample.yaml", "helm-default.yaml"):
        document = read(NVD, fixture)
        objects_ = document["items"] if document.get("kind") == "List" else [document]
        result = run_import(objects_)
        fields = [f for f in result.fields if f.path.startswith("nvidiadriver:")]
        assert not [f.render() for f in fields if f.status == SILENT]
        for status, n in counts(fields).items():
            totals[status] += n
    with capsys.disabled():
        print(f"\nNVIDIADriver fields (sample, Helm default): {totals}")
    assert totals["silent"] == 0 and totals["carried"] > totals["reported"]


# --- every field of the NVIDIADriver spec (GO:api/nvidia/v1alpha1/nvidiadriver_types.go NVIDIADriverSpec) ----------
SPEC_FIELDS = ("default", "driverType", "usePrecompiled", "useOpenKernelModules", "kernelModuleType", "startupProbe",
               "livenessProbe", "readinessProbe", "rdma", "gds", "gdrcopy", "repository", "image", "version",
               "imagePullPolicy", "imagePullSecrets", "manager", "resources", "args", "env", "repoConfig", "certConfig",
               "licensingConfig", "virtualTopologyConfig", "kernelModuleConfig", "secretEnv", "upgradePolicy",
               "nodeSelector", "nodeAffinity", "labels", "annotations", "tolerations", "priorityClassName",
               "podSecurityContext", "hostNetwork")
EVERY_FIELD = {
    **FULL_SPEC, "nodeSelector": {"example.com/foo": "foo"}, "useOpenKernelModules": True,
    "rdma": {"enabled": True, "useHostMofed": True},
    "gds": {**GDS, "imagePullPolicy": "Always", "imagePullSecrets": ["ngc"], "args": ["-v"], "env": [{"name": "GDS_X", "value": "1"}]},
    "gdrcopy": {**GDRCOPY, "imagePullPolicy": "Always", "imagePullSecrets": ["ngc"], "args": ["-v"], "env": [{"name": "GDR_X", "value": "1"}]},
    "repoConfig": {"name": "repo-config"}, "certConfig": {"name": "cert-config"},
    "licensingConfig": {"secretName": "licence", "nlsEnabled": False}, "virtualTopologyConfig": {"name": "topology"},
    "kernelModuleConfig": {"name": "module-params"}, "secretEnv": "driver-env", "hostNetwork": True,
    "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 2, "maxUnavailable": "10%",
                      "waitForCompletion": {"podSelector": "app=train", "timeoutSeconds": 600},
                      "podDeletion": {"force": True, "timeoutSeconds": 120, "deleteEmptyDir": True},
                      "drain": {"enable": True, "force": True, "podSelector": "x=y", "timeoutSeconds": 300, "deleteEmptyDir": True}},
    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "x", "operator": "Exists"}]}]}},
    "podSecurityContext": {"runAsUser": 0},
}


def test_every_field_of_the_nvidiadriver_spec_has_a_rule():
    from gpustack.importer import nvidiadriver as nvd

    ruled = {*nvd.PER_POOL, *nvd.POD_FIELDS, *(f for f, _, _ in nvd.WITHOUT_EFFECT_FIELDS), *(f for f, _ in nvd.REPORTED_FIELDS)}
    translated = {ours.split(".")[0] for ours, _ in nvd.TRANSLATED}
    assert [f for f in SPEC_FIELDS if f not in ruled | translated] == []
    assert set(SPEC_FIELDS) == set(EVERY_FIELD) | {"default", "driverType"}


@pytest.mark.parametrize("kind", ["gpu", "vgpu-host-manager"])
def test_an_object_with_every_field_set_leaves_none_silent(kind):
    spec = {**EVERY_FIELD, "driverType": kind}
    if kind == "vgpu-host-manager":
        spec.update(image="vgpu-manager", nodeSelector={ROLE: "vm-vgpu"})
        result = run_import([nvidia_driver("every", spec)], policy="sandbox-kubevirt.yaml", nodes="nodes-sandbox.yaml", facts=SANDBOX_FACTS)
    else:
        result = run_import([nvidia_driver("every", spec)], nodes=None, facts=ClusterFacts(
            "lab-admin", AGENT, kubernetes_versions=("1.32",), gpu_models=((None, "A10"),), os="ubuntu22.04"))
    fields = {f.path: f for f in result.fields if f.path.startswith("nvidiadriver:")}
    assert not [f.render() for f in fields.values() if f.status == SILENT]
    assert {path.split("/spec.", 1)[1].split(".")[0].split("[")[0] for path in fields} == set(SPEC_FIELDS)
    validate(result)
