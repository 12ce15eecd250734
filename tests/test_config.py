"""Stack configuration: defaults, and for every bad value a message that names the key and what is allowed."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from components import catalog
from components.config import ConfigError, load_config
from stacktest import bag, render, stack_config

BASE = stack_config("prod-managed")


def mutated(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    config = copy.deepcopy(BASE)
    change(config)
    return config


def problems(config: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    return caught.value.problems


def setter(*path: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        node = config
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
        node[path[-1]] = value

    return change


def deleter(*path: Any) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        node = config
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return change


C = "gpu-stack:cluster"
P = "gpu-stack:nodePools"

BAD = [
    ("missing cluster", deleter(C), "gpu-stack:cluster", "required"),
    ("missing context", deleter(C, "context"), "gpu-stack:cluster.context", "required"),
    ("runtime", setter(C, "containerRuntime", value="docker"), "gpu-stack:cluster.containerRuntime", "'containerd', 'cri-o'"),
    ("k8s too old", setter(C, "kubernetesVersions", value=["1.20"]), "gpu-stack:cluster.kubernetesVersions", "allowed values: 1.25"),
    ("k8s none", setter(C, "kubernetesVersions", value=[]), "gpu-stack:cluster.kubernetesVersions", "at least 1"),
    ("cluster name", setter(C, "name", value="Prod_EU"), "gpu-stack:cluster.name", "DNS-1123"),
    ("namespace", setter(C, "namespace", value="gpu" * 30), "gpu-stack:cluster.namespace", "DNS-1123"),
    ("typo in cluster", setter(C, "namspace", value="x"), "gpu-stack:cluster.namspace", "did you mean 'namespace'"),
    ("typo at top", setter("gpu-stack:drivers", value={}), "gpu-stack:drivers", "did you mean 'driver'"),
    ("driver mode", setter("gpu-stack:driver", "mode", value="operator"), "gpu-stack:driver.mode", "'managed', 'host', 'precompiled'"),
    (
        "kernel module type",
        setter("gpu-stack:driver", "kernelModuleType", value="closed"),
        "gpu-stack:driver.kernelModuleType",
        "'auto', 'open', 'proprietary'",
    ),
    ("branch", setter("gpu-stack:driver", "branch", value="r580"), "gpu-stack:driver.branch", "branch such as 580"),
    ("driver version", setter("gpu-stack:versions", "driver", value="595"), "gpu-stack:versions.driver", "595.91.07"),
    ("latest tag", setter("gpu-stack:versions", "toolkit", value="latest"), "gpu-stack:versions.toolkit", "pin a tag"),
    ("cdi", setter("gpu-stack:toolkit", "cdi", value="yes"), "gpu-stack:toolkit.cdi", "true, false"),
    ("install dir", setter("gpu-stack:toolkit", "installDir", value="usr/local"), "gpu-stack:toolkit.installDir", "absolute"),
    ("mig strategy", setter("gpu-stack:devicePlugin", "migStrategy", value="both"), "gpu-stack:devicePlugin.migStrategy", "'none', 'single', 'mixed'"),
    ("validation mode", setter("gpu-stack:validation", "mode", value="warn"), "gpu-stack:validation.mode", "'strict', 'advisory', 'off'"),
    ("timeout", setter("gpu-stack:validation", "timeoutSeconds", value=10), "gpu-stack:validation.timeoutSeconds", "greater than or equal to 60"),
    ("nfd mode", setter("gpu-stack:nfd", "mode", value="auto"), "gpu-stack:nfd.mode", "'deploy', 'existing'"),
    ("agent image missing", deleter("gpu-stack:nodeAgent", "image"), "gpu-stack:nodeAgent.image", "required"),
    ("agent image untagged", setter("gpu-stack:nodeAgent", "image", value="harbor.internal/agent"), "gpu-stack:nodeAgent.image", "no tag"),
    ("registry", setter("gpu-stack:registry", "override", value="https://mirror"), "gpu-stack:registry.override", "host[:port]"),
    ("pull secret", setter("gpu-stack:registry", "pullSecrets", value=["Bad_Name"]), "gpu-stack:registry.pullSecrets", "Secret name"),
    ("strategy", setter("gpu-stack:daemonsets", "updateStrategy", value="Recreate"), "gpu-stack:daemonsets.updateStrategy", "'RollingUpdate', 'OnDelete'"),
    ("max unavailable", setter("gpu-stack:daemonsets", "maxUnavailable", value="0"), "gpu-stack:daemonsets.maxUnavailable", "positive count"),
    (
        "toleration effect",
        setter("gpu-stack:daemonsets", "tolerations", value=[{"key": "k", "effect": "Never"}]),
        "gpu-stack:daemonsets.tolerations[0].effect",
        "'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
    ),
    ("no pools", setter(P, value=[]), "gpu-stack:nodePools", "at least 1"),
    ("gpu model", setter(P, 0, "gpuModel", value="A100"), "gpu-stack:nodePools[0].gpuModel", "A100-80GB"),
    ("os", setter(P, 0, "os", value="Ubuntu 22.04"), "gpu-stack:nodePools[0].os", "ubuntu22.04"),
    ("workload", setter(P, 0, "workloadType", value="vm"), "gpu-stack:nodePools[0].workloadType", "'container', 'vm-passthrough', 'vm-vgpu'"),
    ("pool typo", setter(P, 0, "nodeSelectors", value={}), "gpu-stack:nodePools[0].nodeSelectors", "did you mean 'nodeSelector'"),
    ("duplicate pool", setter(P, 1, "name", value="training-a100"), "gpu-stack:nodePools[1].name", "duplicate pool name"),
    ("catch-all not last", setter(P, 0, "nodeSelector", value={}), "gpu-stack:nodePools[0].nodeSelector", "must be the last pool"),
    ("sharing strategy", setter(P, 1, "sharing", "strategy", value="mps"), "gpu-stack:nodePools[1].sharing.strategy", "'none', 'time-slicing'"),
    ("replicas missing", deleter(P, 1, "sharing", "replicas"), "gpu-stack:nodePools[1].sharing.replicas", "required when"),
    ("replicas", setter(P, 1, "sharing", "replicas", value=1), "gpu-stack:nodePools[1].sharing.replicas", "greater than or equal to 2"),
    ("mixed os", setter(P, 1, "os", value="ubuntu24.04"), "gpu-stack:nodePools[1].os", "one OS"),
    ("kernel", setter(P, 0, "kernel", value="five"), "gpu-stack:nodePools[0].kernel", "full kernel version"),
    ("validator switch", setter("gpu-stack:components", "validator", value=False), "gpu-stack:components.validator", "allowed keys"),
    (
        "sharing without plugin",
        setter("gpu-stack:components", "devicePlugin", value=False),
        "gpu-stack:nodePools[1].sharing.strategy",
        "devicePlugin: true",
    ),
    ("not a mapping", setter(C, value="prod"), "gpu-stack:cluster", "expected a mapping"),
    ("plugin workload", setter("gpu-stack:validator", "pluginWorkload", value="no"), "gpu-stack:validator.pluginWorkload", "true, false"),
    ("resync", setter("gpu-stack:nodeAgent", "resyncSeconds", value=5), "gpu-stack:nodeAgent.resyncSeconds", "greater than or equal to 10"),
    ("chart repo", setter("gpu-stack:nfd", "chartRepository", value="registry.k8s.io/nfd"), "gpu-stack:nfd.chartRepository", "oci://"),
    ("priority class", setter("gpu-stack:daemonsets", "priorityClassName", value="GPU Critical"), "gpu-stack:daemonsets.priorityClassName", "PriorityClass"),
    ("ds labels", setter("gpu-stack:daemonsets", "labels", value={"team": "a b"}), "gpu-stack:daemonsets.labels", "valid Kubernetes label"),
    ("ds annotations", setter("gpu-stack:daemonsets", "annotations", value={"bad key!": "x"}), "gpu-stack:daemonsets.annotations", "annotation key"),
    ("drop-in path", setter("gpu-stack:toolkit", "runtimeDropInConfig", value="etc/x.toml"), "gpu-stack:toolkit.runtimeDropInConfig", "absolute"),
    ("rename", setter(P, 1, "sharing", "renameByDefault", value="yes"), "gpu-stack:nodePools[1].sharing.renameByDefault", "true, false"),
    ("selector", setter(P, 0, "nodeSelector", value={"bad key!": "x"}), "gpu-stack:nodePools[0].nodeSelector", "label selector"),
    ("pool name", setter(P, 0, "name", value="Training"), "gpu-stack:nodePools[0].name", "DNS-1123"),
    ("component switch", setter("gpu-stack:components", "toolkit", value="off"), "gpu-stack:components.toolkit", "true, false"),
    ("socket on cri-o", lambda c: c[C].update(containerRuntime="cri-o") or c.setdefault("gpu-stack:toolkit", {}).update(runtimeSocket="/run/x.sock"), "gpu-stack:toolkit.runtimeSocket", "cri-o"),
]


@pytest.mark.parametrize("change,path,fragment", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_value_names_key_and_allowed_values(change, path, fragment):
    found = problems(mutated(change))
    assert any(p == path and fragment in m for p, m in found), found


def test_precompiled_requires_a_kernel_per_container_pool():
    config = mutated(setter("gpu-stack:driver", "mode", value="precompiled"))
    assert ("gpu-stack:nodePools[0].kernel", "required with gpu-stack:driver.mode 'precompiled' (one driver image per kernel)") in problems(config)


def test_all_problems_are_reported_together():
    config = mutated(setter("gpu-stack:driver", "mode", value="x"))
    config["gpu-stack:cluster"]["containerRuntime"] = "docker"
    config["gpu-stack:nodePools"][0]["gpuModel"] = "Z1"
    config["gpu-stack:typo"] = {}
    paths = {p for p, _ in problems(config)}
    assert {"gpu-stack:driver.mode", "gpu-stack:cluster.containerRuntime", "gpu-stack:nodePools[0].gpuModel", "gpu-stack:typo"} <= paths


def test_error_text_lists_every_problem_with_its_path():
    config = mutated(setter("gpu-stack:driver", "mode", value="x"))
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    assert "gpu-stack:driver.mode: got 'x'; allowed values: 'managed', 'host', 'precompiled'" in str(caught.value)


def test_other_namespaces_are_left_to_their_owners():
    config = mutated(setter("kubernetes:context", value="elsewhere"))
    assert load_config(bag(config)).cluster.context == "prod-eu1-admin"


def test_defaults_are_the_gpu_operator_v26_7_0_image_set():
    cfg = load_config(bag(stack_config("dev")))
    assert cfg.versions.driver == "595.91.07"
    assert cfg.versions.driver_manager == "v0.12.0"
    assert cfg.versions.toolkit == "v1.20.0"
    assert cfg.versions.device_plugin == "v0.20.0"
    assert cfg.versions.validator == catalog.OPERATOR_RELEASE == "v26.7.0"
    assert cfg.versions.nfd_chart == "0.19.0"
    assert cfg.driver.branch == "595"
    assert cfg.device_plugin.mig_strategy == "single"


def test_kubernetes_versions_are_normalised_to_minor():
    config = mutated(setter(C, "kubernetesVersions", value=["v1.33.2", "1.32", "1.33"]))
    assert load_config(bag(config)).cluster.kubernetes_versions == ["1.32", "1.33"]


def test_invalid_config_registers_nothing():
    config = mutated(setter("gpu-stack:driver", "mode", value="x"))
    with pytest.raises(ConfigError):
        render(config, stack="invalid")
