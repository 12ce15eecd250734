"""The driver pod's extensions (`gpu-stack:driver.licensingConfig`, `repoConfig`, `certConfig`, `kernelModuleConfig`,
`secretEnv`, `extraVolumes`, probe timings, `hostNetwork`): bad values name their key, and one render with all of them
shows the volumes, mounts and env NVIDIA's driver DaemonSet gets for them."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from components.config import ConfigError, load_config
from components.states.driver.extensions import CERT_DIRS, REPO_DIRS, os_id, pod_extensions
from components.states.driver.targets import config_digest, plan_targets
from gpustack import apiserver, schema
from gpustack.render import kubernetes_object
from stacktest import bag, container, render, stack_config

D = "gpu-stack:driver"
BASE = stack_config("vgpu-guest")


def problems(change: Callable[[dict[str, Any]], None]) -> list[tuple[str, str]]:
    config = copy.deepcopy(BASE)
    change(config)
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    return caught.value.problems


def driver(**keys: Any) -> Callable[[dict[str, Any]], None]:
    return lambda config: config[D].update(keys)


BAD = [
    ("licence from two sources", driver(licensingConfig={"secretName": "a", "configMapName": "b"}), "licensingConfig", "exactly one of secretName"),
    ("licence from none", driver(licensingConfig={"nlsEnabled": False}), "licensingConfig", "exactly one of secretName"),
    ("licence Secret name", driver(licensingConfig={"secretName": "NLS"}), "licensingConfig.secretName", "DNS-1123 subdomain"),
    ("nlsEnabled not a bool", driver(licensingConfig={"secretName": "a", "nlsEnabled": "yes"}), "licensingConfig.nlsEnabled", "true, false"),
    ("repo ConfigMap name not a volume name", driver(repoConfig={"configMapName": "apt.mirror", "files": ["a.list"]}), "repoConfig.configMapName", "DNS-1123 label"),
    ("repo files missing", driver(repoConfig={"configMapName": "apt"}), "repoConfig.files", "required"),
    ("repo files empty", driver(repoConfig={"configMapName": "apt", "files": []}), "repoConfig.files", "at least 1"),
    ("repo file not a key", driver(repoConfig={"configMapName": "apt", "files": ["a/b.list"]}), "repoConfig.files", "not a ConfigMap key"),
    ("repo file twice", driver(repoConfig={"configMapName": "apt", "files": ["a", "a"]}), "repoConfig.files", "twice"),
    ("cert and repo share a ConfigMap", driver(certConfig={"name": "apt-mirror", "files": ["ca.crt"]}), "certConfig", "already used by repoConfig"),
    ("module config named like a driver volume", driver(kernelModuleConfig={"name": "host-root", "files": ["nvidia.conf"]}), "kernelModuleConfig", "already used by the driver pod"),
    ("secretEnv name", driver(secretEnv="Proxy_Env"), "secretEnv", "DNS-1123 subdomain"),
    ("topology ConfigMap name", driver(virtualTopologyConfig="Topology.Conf"), "virtualTopologyConfig", "DNS-1123 subdomain"),
    ("topology ConfigMap not a string", driver(virtualTopologyConfig={"name": "t"}), "virtualTopologyConfig", "expected a string"),
    ("extra volume named like the topology volume", driver(virtualTopologyConfig="t", extraVolumes=[{"name": "topology-config", "mountPath": "/x", "secret": {"name": "s"}}]), "extraVolumes[0].name", "virtualTopologyConfig"),
    ("hostNetwork not a bool", driver(hostNetwork="true"), "hostNetwork", "true, false"),
    ("startup successThreshold", driver(startupProbe={"successThreshold": 2}), "startupProbe.successThreshold", "must be 1"),
    ("probe period 0", driver(readinessProbe={"periodSeconds": 0}), "readinessProbe.periodSeconds", "greater than or equal to 1"),
    ("probe unknown key", driver(startupProbe={"initialDelay": 5}), "startupProbe.initialDelay", ""),
    ("extra volume with two sources", driver(extraVolumes=[{"name": "x", "mountPath": "/x", "secret": {"name": "s"}, "configMap": {"name": "c"}}]), "extraVolumes[0]", "exactly one of hostPath"),
    ("extra volume named like a driver volume", driver(extraVolumes=[{"name": "var-log", "mountPath": "/x", "secret": {"name": "s"}}]), "extraVolumes[0].name", "reserved"),
    ("extra volume named like a ConfigMap volume", driver(extraVolumes=[{"name": "internal-ca", "mountPath": "/x", "secret": {"name": "s"}}]), "extraVolumes[0].name", "certConfig"),
    ("extra volume over a driver mount", driver(extraVolumes=[{"name": "x", "mountPath": "/run/nvidia", "secret": {"name": "s"}}]), "extraVolumes[0].mountPath", "driver container"),
    ("extra volume relative path", driver(extraVolumes=[{"name": "x", "mountPath": "etc/x", "secret": {"name": "s"}}]), "extraVolumes[0].mountPath", "absolute"),
    ("extra volume subPath absolute", driver(extraVolumes=[{"name": "x", "mountPath": "/x", "subPath": "/etc", "secret": {"name": "s"}}]), "extraVolumes[0].subPath", "relative path"),
    ("extra volume subPath escapes", driver(extraVolumes=[{"name": "x", "mountPath": "/x", "subPath": "a/../../b", "secret": {"name": "s"}}]), "extraVolumes[0].subPath", "no '..'"),
    ("extra volume subPath empty", driver(extraVolumes=[{"name": "x", "mountPath": "/x", "subPath": "", "secret": {"name": "s"}}]), "extraVolumes[0].subPath", "relative path"),
    ("extra hostPath type", driver(extraVolumes=[{"name": "x", "mountPath": "/x", "hostPath": {"path": "/x", "type": "Dir"}}]), "extraVolumes[0].hostPath.type", "'DirectoryOrCreate'"),
]


@pytest.mark.parametrize("change,key,fragment", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_value_names_key_and_allowed_values(change, key, fragment):
    found = problems(change)
    assert any(path == f"{D}.{key}" and fragment in message for path, message in found), found


def test_repo_and_cert_config_are_refused_when_no_pool_runs_a_managed_driver():
    def precompiled(config: dict[str, Any]) -> None:
        config[D]["mode"] = "precompiled"
        config["gpu-stack:nodePools"][0].update(nodeImage="ubuntu24.04-6.8.0-79-generic-amd64")
        del config["gpu-stack:nodePools"][0]["os"]

    found = problems(precompiled)
    for key in ("repoConfig", "certConfig"):
        assert any(path == f"{D}.{key}" and "no pool of this stack runs a managed driver" in m for path, m in found), found


def test_a_licence_secret_is_never_echoed():
    secret = "eyJhbGciOiJSUzI1NiJ9" * 30
    assert not any(secret in message for _, message in problems(driver(licensingConfig={"secretName": secret})))


def test_every_os_tag_has_a_repository_and_a_ca_directory():
    for tag in ("ubuntu24.04", "debian12", "rhel9", "rocky9", "ol8", "rhcos4.16", "sles15.6", "sl-micro6.0"):
        assert os_id(tag) in REPO_DIRS and os_id(tag) in CERT_DIRS, tag
    assert os_id("sl-micro6.0") == "sl-micro" and REPO_DIRS["rhel"] == "/etc/yum.repos.d"


def test_precompiled_drivers_get_no_repository_or_ca_files():
    cfg = load_config(bag(BASE))
    ext = pod_extensions(cfg.driver, "ubuntu24.04", precompiled=True)
    assert {v.name for v in ext.volumes} == {"licensing-config"}
    assert not ext.sidecar_mounts


def test_the_extensions_change_the_config_digest_and_their_absence_keeps_it():
    with_ext = load_config(bag(BASE))
    plain_config = copy.deepcopy(BASE)
    for key in ("licensingConfig", "repoConfig", "certConfig"):
        del plain_config[D][key]
    plain = load_config(bag(plain_config))
    (a,), (b,) = plan_targets(with_ext, "r/driver"), plan_targets(plain, "r/driver")
    assert b.extensions is None and a.extensions is not None
    assert config_digest(a) != config_digest(b)


# --- one render with every extension ----------------------------------------------------------------------------

EVERYTHING = {
    "licensingConfig": {"configMapName": "gridd", "nlsEnabled": False},
    "virtualTopologyConfig": "vgpu-topology",
    "repoConfig": {"configMapName": "apt-mirror", "files": ["z.list", "a.list"]},
    "certConfig": {"name": "internal-ca", "files": ["root.crt"]},
    "kernelModuleConfig": {"name": "module-params", "files": ["nvidia.conf"]},
    "secretEnv": "driver-proxy",
    "extraVolumes": [
        {"name": "host-keys", "mountPath": "/etc/keys", "hostPath": {"path": "/etc/platform/keys", "type": "Directory"}},
        {"name": "tuning", "mountPath": "/etc/tuning", "readOnly": False, "configMap": {"name": "tuning"}},
        {"name": "creds", "mountPath": "/etc/creds/token", "subPath": "token", "secret": {"name": "creds"}},
    ],
    "startupProbe": {"initialDelaySeconds": 120, "failureThreshold": 240},
    "readinessProbe": {"periodSeconds": 30, "successThreshold": 2},
    "hostNetwork": True,
}


@pytest.fixture(scope="module")
def everything() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    config = stack_config("gpudirect-training")  # managed, RDMA, GDS and GDRCopy: every sidecar
    config[D] = {**config.get(D, {}), **EVERYTHING}
    recording = render(config, stack="gpudirect-training")
    objs = [kubernetes_object(r) for r in recording.registrations if r.is_kubernetes_object]
    (ds,) = [o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "nvidia-driver-daemonset-h100"]
    return ds, objs


def mounts(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in c.get("volumeMounts", [])}


def test_the_driver_container_gets_every_extension_in_the_operators_shape(everything):
    ds, _ = everything
    spec = ds["spec"]["template"]["spec"]
    ctr = container(ds, "nvidia-driver-ctr")
    assert ctr["env"][0] == {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
    assert ctr["envFrom"] == [{"secretRef": {"name": "driver-proxy"}}]
    found = mounts(ctr)
    # nlsEnabled false: gridd.conf alone, no client token
    assert found["/drivers/gridd.conf"] == {"name": "licensing-config", "mountPath": "/drivers/gridd.conf", "readOnly": True, "subPath": "gridd.conf"}
    assert not any("ClientConfigToken" in path for path in found)
    assert found["/drivers/nvidia.conf"]["subPath"] == "nvidia.conf"
    # ClusterPolicy's driver.virtualTopology.config, as transformDriverContainer mounts it
    assert found["/etc/nvidia/nvidia-topologyd.conf"] == {"name": "topology-config", "mountPath": "/etc/nvidia/nvidia-topologyd.conf", "readOnly": True, "subPath": "nvidia-topologyd.conf"}
    assert found["/etc/apt/sources.list.d/a.list"] == {"name": "apt-mirror", "mountPath": "/etc/apt/sources.list.d/a.list", "readOnly": True, "subPath": "a.list"}
    assert "/etc/apt/sources.list.d/z.list" in found
    assert found["/usr/local/share/ca-certificates/root.crt"]["name"] == "internal-ca"
    assert found["/etc/keys"] == {"name": "host-keys", "mountPath": "/etc/keys", "readOnly": True}
    assert "readOnly" not in found["/etc/tuning"]
    assert found["/etc/creds/token"] == {"name": "creds", "mountPath": "/etc/creds/token", "readOnly": True, "subPath": "token"}
    # the operator's order: licence, module parameters, repositories, CAs; then the extra volumes
    order = [m["name"] for m in ctr["volumeMounts"]]
    tail = order[order.index("licensing-config"):]
    assert tail == ["licensing-config", "topology-config", "module-params", "apt-mirror", "apt-mirror", "internal-ca", "host-keys", "tuning", "creds"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["licensing-config"] == {"name": "licensing-config", "configMap": {"name": "gridd", "items": [{"key": "gridd.conf", "path": "gridd.conf"}]}}
    assert volumes["apt-mirror"]["configMap"]["items"] == [{"key": "a.list", "path": "a.list"}, {"key": "z.list", "path": "z.list"}]
    assert volumes["host-keys"]["hostPath"] == {"path": "/etc/platform/keys", "type": "Directory"}
    assert volumes["creds"] == {"name": "creds", "secret": {"secretName": "creds"}}


def test_sidecars_get_what_the_operator_gives_each(everything):
    ds, _ = everything
    extra = ["host-keys", "tuning", "creds"]
    # the extra volumes go where the NVIDIADriver form mounts its additional volumes: every container of the driver
    # pod but k8s-driver-manager, each in the driver container's order and with its subPath
    for name in ("nvidia-peermem-ctr", "nvidia-fs-ctr", "nvidia-gdrcopy-ctr"):
        found = container(ds, name)["volumeMounts"]
        assert [m["name"] for m in found if m["name"] in extra] == extra
        assert {"name": "creds", "mountPath": "/etc/creds/token", "readOnly": True, "subPath": "token"} in found
    assert not {m["name"] for m in container(ds, "k8s-driver-manager")["volumeMounts"]} & set(extra)
    peermem = container(ds, "nvidia-peermem-ctr")
    assert peermem["env"][0] == {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
    assert "/drivers/nvidia.conf" in mounts(peermem) and "/etc/apt/sources.list.d/a.list" not in mounts(peermem)
    assert "envFrom" not in peermem
    for name in ("nvidia-fs-ctr", "nvidia-gdrcopy-ctr"):
        sidecar = container(ds, name)
        assert sidecar["envFrom"] == [{"secretRef": {"name": "driver-proxy"}}]
        assert {"/etc/apt/sources.list.d/a.list", "/usr/local/share/ca-certificates/root.crt"} <= set(mounts(sidecar))
        assert "/drivers/gridd.conf" not in mounts(sidecar)


def test_probe_timings_and_host_network(everything):
    ds, _ = everything
    spec = ds["spec"]["template"]["spec"]
    ctr = container(ds, "nvidia-driver-ctr")
    startup, readiness = ctr["startupProbe"], ctr["readinessProbe"]
    assert (startup["initialDelaySeconds"], startup["failureThreshold"], startup["periodSeconds"], startup["timeoutSeconds"]) == (120, 240, 10, 60)
    assert startup["exec"]["command"] == ["sh", "/usr/local/bin/startup-probe.sh"]
    assert (readiness["periodSeconds"], readiness["successThreshold"], readiness["timeoutSeconds"]) == (30, 2, 5)
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_the_render_passes_the_schema_and_the_api_servers_rules(everything):
    ds, objs = everything
    assert [str(p) for p in apiserver.validate_all(objs)] == []
    assert schema.validate(ds, "1.33") == []


def test_the_driver_manager_keeps_runc_and_the_upgrade_env(everything):
    ds, _ = everything
    env = container(ds, "k8s-driver-manager")["env"]
    names = [e["name"] for e in env]
    assert names[:8] == [
        "NODE_NAME", "NVIDIA_VISIBLE_DEVICES", "ENABLE_GPU_POD_EVICTION", "ENABLE_AUTO_DRAIN", "DRAIN_USE_FORCE",
        "DRAIN_POD_SELECTOR_LABEL", "DRAIN_TIMEOUT_SECONDS", "DRAIN_DELETE_EMPTYDIR_DATA",
    ]
    assert env[1]["value"] == "void"
