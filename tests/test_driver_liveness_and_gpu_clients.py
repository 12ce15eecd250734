"""`gpu-stack:driver.livenessProbe` and `gpu-stack:migManager.gpuClientsConfig`: bad values name their key, the
render adds the driver container's liveness probe only when asked and swaps the MIG manager's gpu-clients ConfigMap
for the user's (rendering no default then, as the operator), and the import carries both from a ClusterPolicy."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import yaml

from components.config import load_config, stack_file_config
from gpustack import apiserver, importer, schema
from gpustack.importer import ClusterFacts, ImportResult
from gpustack.render import kubernetes_object
from stacktest import ROOT, config_problems, container, objects, render, render_stack, setter, stack_config

FIXTURES = ROOT / "tests" / "fixtures" / "clusterpolicy"
AGENT = "harbor.platform.internal/gpu-stack/node-agent:0.10.0"
D, M = "gpu-stack:driver", "gpu-stack:migManager"
STARTUP_SCRIPT = ["sh", "/usr/local/bin/startup-probe.sh"]


# --- bad values -------------------------------------------------------------------------------------------------

BAD = [
    ("liveness successThreshold 2", setter(D, "livenessProbe", value={"successThreshold": 2}),
     "gpu-stack:driver.livenessProbe.successThreshold", "liveness probe's successThreshold must be 1"),
    ("liveness period 0", setter(D, "livenessProbe", value={"periodSeconds": 0}),
     "gpu-stack:driver.livenessProbe.periodSeconds", "greater than or equal to 1"),
    ("liveness timeout too long", setter(D, "livenessProbe", value={"timeoutSeconds": 3601}),
     "gpu-stack:driver.livenessProbe.timeoutSeconds", "less than or equal to 3600"),
    ("liveness negative delay", setter(D, "livenessProbe", value={"initialDelaySeconds": -1}),
     "gpu-stack:driver.livenessProbe.initialDelaySeconds", "greater than or equal to 0"),
    ("liveness unknown key", setter(D, "livenessProbe", value={"command": ["true"]}),
     "gpu-stack:driver.livenessProbe.command", ""),
    ("liveness not a mapping", setter(D, "livenessProbe", value=30), "gpu-stack:driver.livenessProbe", ""),
    ("gpu clients name not DNS", setter(M, "gpuClientsConfig", value={"name": "GPU_Clients"}),
     "gpu-stack:migManager.gpuClientsConfig.name", "DNS-1123 subdomain"),
    ("gpu clients name too long", setter(M, "gpuClientsConfig", value={"name": "c" * 254}),
     "gpu-stack:migManager.gpuClientsConfig.name", "at most 253"),
    ("gpu clients name is gpu-stack's", setter(M, "gpuClientsConfig", value={"name": "default-gpu-clients"}),
     "gpu-stack:migManager.gpuClientsConfig.name", "gpu-stack renders itself"),
    ("gpu clients without a name", setter(M, "gpuClientsConfig", value={}),
     "gpu-stack:migManager.gpuClientsConfig.name", "required"),
    ("gpu clients unknown key", setter(M, "gpuClientsConfig", value={"name": "c", "default": "x"}),
     "gpu-stack:migManager.gpuClientsConfig.default", ""),
]


@pytest.mark.parametrize("change,key,words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_values_are_refused_naming_the_key(change, key, words):
    config = stack_config("prod-managed")
    change(config)
    found = [(k, m) for k, m in config_problems(config) if k == key]
    assert found, config_problems(config)
    assert words in found[0][1]


def test_a_huge_bad_name_is_not_echoed_whole():
    config = stack_config("prod-managed")
    config.setdefault(M, {})["gpuClientsConfig"] = {"name": "X" * 100_000}
    message = dict(config_problems(config))["gpu-stack:migManager.gpuClientsConfig.name"]
    assert len(message) < 400


# --- render: the driver's liveness probe ----------------------------------------------------------------------


def driver_daemonsets(recording) -> list[dict[str, Any]]:
    return [ds for name, ds in objects(recording, "DaemonSet").items() if name.startswith("nvidia-driver-daemonset")]


def test_unset_renders_no_liveness_probe():
    for ds in driver_daemonsets(render_stack("prod-managed")):
        assert "livenessProbe" not in container(ds, "nvidia-driver-ctr")


@functools.lru_cache(maxsize=None)
def with_liveness(stack: str, probe: tuple[tuple[str, int], ...]):
    config = stack_config(stack)
    config.setdefault(D, {})["livenessProbe"] = dict(probe)
    return render(config, stack=stack)


def test_the_liveness_probe_runs_the_startup_check_with_its_defaults_for_unset_timings():
    recording = with_liveness("prod-managed", (("periodSeconds", 30), ("failureThreshold", 3)))
    (ds, *_) = driver_daemonsets(recording)
    ctr = container(ds, "nvidia-driver-ctr")
    assert ctr["livenessProbe"] == {
        "exec": {"command": STARTUP_SCRIPT},
        "initialDelaySeconds": 60,
        "periodSeconds": 30,
        "timeoutSeconds": 60,
        "failureThreshold": 3,
        "successThreshold": 1,
    }
    # the startup probe is its own key: untouched by the liveness timings
    assert ctr["startupProbe"]["periodSeconds"] == 10 and ctr["startupProbe"]["failureThreshold"] == 120
    objs = [kubernetes_object(r) for r in recording.registrations if r.is_kubernetes_object]
    assert [str(p) for p in apiserver.validate_all(objs)] == []
    assert schema.validate(ds, "1.33") == []


def test_an_empty_liveness_probe_takes_every_startup_default_and_precompiled_starts_sooner():
    recording = with_liveness("prod-precompiled", ())
    for ds in driver_daemonsets(recording):
        probe = container(ds, "nvidia-driver-ctr")["livenessProbe"]
        assert probe == {**container(ds, "nvidia-driver-ctr")["startupProbe"], "initialDelaySeconds": 5}
        assert probe["exec"]["command"] == STARTUP_SCRIPT


def test_other_containers_of_the_driver_pod_keep_their_probes():
    plain = {c["name"]: c for ds in driver_daemonsets(render_stack("prod-managed")) for c in ds["spec"]["template"]["spec"]["containers"]}
    tuned = {c["name"]: c for ds in driver_daemonsets(with_liveness("prod-managed", (("periodSeconds", 30),)))
             for c in ds["spec"]["template"]["spec"]["containers"]}
    for name, ctr in tuned.items():
        if name != "nvidia-driver-ctr":
            assert ctr == plain[name]


# --- render: the MIG manager's gpu-clients ConfigMap ----------------------------------------------------------


def test_unset_renders_and_mounts_nvidias_default_gpu_clients():
    recording = render_stack("prod-managed")
    ds = objects(recording, "DaemonSet")["nvidia-mig-manager"]
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert volumes["gpu-clients"]["configMap"]["name"] == "default-gpu-clients"
    assert "default-gpu-clients" in objects(recording, "ConfigMap")


def test_a_named_gpu_clients_configmap_is_mounted_and_the_default_is_not_rendered():
    config = stack_config("prod-managed")
    config.setdefault(M, {})["gpuClientsConfig"] = {"name": "site-gpu-clients"}
    recording = render(config, stack="prod-managed")
    ds = objects(recording, "DaemonSet")["nvidia-mig-manager"]
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert volumes["gpu-clients"] == {"name": "gpu-clients", "configMap": {"name": "site-gpu-clients"}}
    manager = container(ds, "nvidia-mig-manager")
    assert {"name": "gpu-clients", "mountPath": "/gpu-clients"} in manager["volumeMounts"]
    configmaps = objects(recording, "ConfigMap")
    assert "default-gpu-clients" not in configmaps and "site-gpu-clients" not in configmaps
    # the rest of the MIG manager's ConfigMaps stay
    assert {"default-mig-parted-config", "nvidia-mig-manager-entrypoint"} <= set(configmaps)
    objs = [kubernetes_object(r) for r in recording.registrations if r.is_kubernetes_object]
    assert [str(p) for p in apiserver.validate_all(objs)] == []
    assert schema.validate(ds, "1.33") == []


# --- import -------------------------------------------------------------------------------------------------------


def import_with(changes: dict[str, Any]) -> ImportResult:
    policy = copy.deepcopy(importer.read_yaml(str(FIXTURES / "differential-base.yaml"), "--clusterpolicy"))
    spec = policy["spec"]
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = spec
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    configmaps = [("differential-configmaps.yaml", importer.read_yaml(str(FIXTURES / "differential-configmaps.yaml"), "--configmap"))]
    return importer.import_cluster_policy(
        importer.cluster_policy_of(policy, "differential-base.yaml"),
        ClusterFacts("diff-admin", AGENT),
        nodes=importer.nodes_of(importer.read_yaml(str(FIXTURES / "nodes-default.yaml"), "--nodes"), "nodes-default.yaml"),
        configmaps=importer.configmaps_of(configmaps),
    )


def not_carried(result: ImportResult) -> dict[str, str]:
    return {item.path: item.reason for item in result.not_carried}


def test_the_gpu_clients_configmap_is_carried():
    result = import_with({"migManager.gpuClientsConfig": {"name": "site-gpu-clients"}})
    cfg = load_config(stack_file_config(result.document()))
    assert cfg.mig_manager.gpu_clients_config.name == "site-gpu-clients"
    assert not [p for p in not_carried(result) if "gpuClientsConfig" in p]


def test_the_default_gpu_clients_name_is_gpu_stacks_own():
    result = import_with({"migManager.gpuClientsConfig": {"name": "default-gpu-clients"}})
    assert load_config(stack_file_config(result.document())).mig_manager.gpu_clients_config is None
    assert not [p for p in not_carried(result) if "gpuClientsConfig" in p]


def test_liveness_timings_are_reported_never_turned_into_a_probe_the_cluster_did_not_have():
    result = import_with({"driver.livenessProbe": {"initialDelaySeconds": 90, "periodSeconds": 20,
                                                   "successThreshold": 1}})
    assert load_config(stack_file_config(result.document())).driver.liveness_probe is None
    reasons = not_carried(result)
    assert {p for p in reasons if "livenessProbe" in p} == {
        "spec.driver.livenessProbe.initialDelaySeconds", "spec.driver.livenessProbe.periodSeconds",
        "spec.driver.livenessProbe.successThreshold"}
    assert "the operator never applied these timings" in reasons["spec.driver.livenessProbe.periodSeconds"]


def test_the_imported_stack_mounts_the_users_gpu_clients_configmap():
    result = import_with({"migManager.gpuClientsConfig": {"name": "site-gpu-clients"}})
    recording = render(result.config)
    ds = objects(recording, "DaemonSet")["nvidia-mig-manager"]
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert volumes["gpu-clients"]["configMap"]["name"] == "site-gpu-clients"
    assert "default-gpu-clients" not in objects(recording, "ConfigMap")
    assert yaml.safe_dump(result.config)  # the stack file writes out
