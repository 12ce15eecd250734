"""Stack configuration: defaults, and for every bad value a message that names the key and what is allowed."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from components.catalogs import catalog
from components.config import ConfigError, load_config
from stacktest import bag, config_problems, render, setter, stack_config

BASE = stack_config("prod-managed")


def mutated(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    config = copy.deepcopy(BASE)
    change(config)
    return config


problems = config_problems


def deleter(*path: Any) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        node = config
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return change


C = "gpu-stack:cluster"
P = "gpu-stack:nodePools"
U = "gpu-stack:upgrade"

BAD = [
    ("missing cluster", deleter(C), "gpu-stack:cluster", "required"),
    ("missing context", deleter(C, "context"), "gpu-stack:cluster.context", "required"),
    ("context with a newline", setter(C, "context", value="prod-eu1-admin\n"), "gpu-stack:cluster.context", "control character"),
    ("context with an escape", setter(C, "context", value="prod\x1b[31m"), "gpu-stack:cluster.context", "control character"),
    ("context too long", setter(C, "context", value="c" * 1025), "gpu-stack:cluster.context", "at most 1024"),
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
    ("agent without the upgrade coordinator", setter("gpu-stack:nodeAgent", "image", value="harbor.internal/agent:0.3.0"), "gpu-stack:nodeAgent.image", "use 0.10.0 or later"),
    ("agent that evicts by itself", setter("gpu-stack:nodeAgent", "image", value="harbor.internal/agent:0.8.0"), "gpu-stack:nodeAgent.image", "use 0.10.0 or later"),
    ("registry", setter("gpu-stack:registry", "override", value="https://mirror"), "gpu-stack:registry.override", "host[:port]"),
    ("pull secret", setter("gpu-stack:registry", "pullSecrets", value=["Bad_Name"]), "gpu-stack:registry.pullSecrets", "Secret name"),
    ("strategy", setter("gpu-stack:daemonsets", "updateStrategy", value="Recreate"), "gpu-stack:daemonsets.updateStrategy", "'RollingUpdate', 'OnDelete'"),
    ("max unavailable", setter("gpu-stack:daemonsets", "maxUnavailable", value="0"), "gpu-stack:daemonsets.maxUnavailable", "a string only as a percentage"),
    # The API server refuses the string "1" in an IntOrString field: a count is a number.
    ("max unavailable digit string", setter("gpu-stack:daemonsets", "maxUnavailable", value="1"), "gpu-stack:daemonsets.maxUnavailable", "as a number (1, unquoted)"),
    ("max unavailable bare zero", setter("gpu-stack:daemonsets", "maxUnavailable", value=0), "gpu-stack:daemonsets.maxUnavailable", "positive count"),
    ("max unavailable word", setter("gpu-stack:daemonsets", "maxUnavailable", value="one"), "gpu-stack:daemonsets.maxUnavailable", "'25%'"),
    ("max unavailable over 100%", setter("gpu-stack:daemonsets", "maxUnavailable", value="101%"), "gpu-stack:daemonsets.maxUnavailable", "from 1% to 100%"),
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
    (
        "sharing strategy",
        setter(P, 1, "sharing", "strategy", value="vgpu"),
        "gpu-stack:nodePools[1].sharing.strategy",
        "'none', 'time-slicing', 'mps', 'mig-single', 'mig-mixed'",
    ),
    ("replicas missing", deleter(P, 1, "sharing", "replicas"), "gpu-stack:nodePools[1].sharing.replicas", "required when"),
    ("replicas", setter(P, 1, "sharing", "replicas", value=1), "gpu-stack:nodePools[1].sharing.replicas", "greater than or equal to 2"),
    ("kernel is not a pool key", setter(P, 0, "kernel", value="5.15.0-139-generic"), "gpu-stack:nodePools[0].kernel", "allowed keys: allocation, driver, expectedNodes, gpuModel, name, nodeImage"),
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
    ("resync over an hour", setter("gpu-stack:nodeAgent", "resyncSeconds", value=3601), "gpu-stack:nodeAgent.resyncSeconds", "less than or equal to 3600"),
    ("agent before the fleet budget", setter("gpu-stack:nodeAgent", "image", value="harbor.platform.internal/gpu-stack/node-agent:0.5.0"), "gpu-stack:nodeAgent.image", "grants the fleet's disruption budget in the order nodes need it and carries out the drains"),
    # gone with the Helm release (components/states/nfd.py): refused by name, whatever the value
    ("chart repo", setter("gpu-stack:nfd", "chartRepository", value="oci://registry.k8s.io/nfd/charts"), "gpu-stack:nfd.chartRepository", "this key is gone"),
    ("chart repo null", setter("gpu-stack:nfd", "chartRepository", value=None), "gpu-stack:nfd.chartRepository", "remove it"),
    ("priority class", setter("gpu-stack:daemonsets", "priorityClassName", value="GPU Critical"), "gpu-stack:daemonsets.priorityClassName", "PriorityClass"),
    ("ds labels", setter("gpu-stack:daemonsets", "labels", value={"team": "a b"}), "gpu-stack:daemonsets.labels", "valid Kubernetes label"),
    ("ds annotations", setter("gpu-stack:daemonsets", "annotations", value={"bad key!": "x"}), "gpu-stack:daemonsets.annotations", "annotation key"),
    ("drop-in path", setter("gpu-stack:toolkit", "runtimeDropInConfig", value="etc/x.toml"), "gpu-stack:toolkit.runtimeDropInConfig", "absolute"),
    ("rename", setter(P, 1, "sharing", "renameByDefault", value="yes"), "gpu-stack:nodePools[1].sharing.renameByDefault", "true, false"),
    ("selector", setter(P, 0, "nodeSelector", value={"bad key!": "x"}), "gpu-stack:nodePools[0].nodeSelector", "label selector"),
    ("pool name", setter(P, 0, "name", value="Training"), "gpu-stack:nodePools[0].name", "DNS-1123"),
    ("component switch", setter("gpu-stack:components", "toolkit", value="off"), "gpu-stack:components.toolkit", "true, false"),
    # --- issue 3: sharing per pool, MIG layouts, new components, monitoring
    ("fail requests", setter(P, 1, "sharing", "failRequestsGreaterThanOne", value="always"), "gpu-stack:nodePools[1].sharing.failRequestsGreaterThanOne", "true, false"),
    ("mig layout type", setter(P, 0, "sharing", value={"strategy": "mig-mixed", "migLayout": 7}), "gpu-stack:nodePools[0].sharing.migLayout", "expected a string"),
    ("mps replicas missing", setter(P, 1, "sharing", value={"strategy": "mps"}), "gpu-stack:nodePools[1].sharing.replicas", "required when sharing.strategy is 'mps' (2..48)"),
    ("mps replicas above MPS limit", setter(P, 1, "sharing", value={"strategy": "mps", "replicas": 60}), "gpu-stack:nodePools[1].sharing.replicas", "at most 48"),
    (
        "mps takes no failRequestsGreaterThanOne",
        setter(P, 1, "sharing", value={"strategy": "mps", "replicas": 4, "failRequestsGreaterThanOne": True}),
        "gpu-stack:nodePools[1].sharing.failRequestsGreaterThanOne",
        "it takes: renameByDefault, replicas",
    ),
    ("mps needs gfd", lambda c: c.update({"gpu-stack:components": {"gfd": False}}) or c[P][1].update(sharing={"strategy": "mps", "replicas": 4}), "gpu-stack:nodePools[1].sharing.strategy", "components.gfd: true"),
    ("replicas without sharing", setter(P, 0, "sharing", value={"replicas": 2}), "gpu-stack:nodePools[0].sharing.replicas", "other than 'none'"),
    ("layout with time-slicing", setter(P, 1, "sharing", "migLayout", value="all-balanced"), "gpu-stack:nodePools[1].sharing.migLayout", "not used by strategy 'time-slicing'"),
    ("mig on a GPU without MIG", setter(P, 1, "sharing", value={"strategy": "mig-mixed", "migLayout": "all-balanced"}), "gpu-stack:nodePools[1].sharing.strategy", "L4 has no MIG support; MIG-capable models: A30"),
    ("mig layout missing", setter(P, 0, "sharing", value={"strategy": "mig-mixed"}), "gpu-stack:nodePools[0].sharing.migLayout", "usable layouts for A100-80GB: all-1g.10gb"),
    ("mig layout unknown", setter(P, 0, "sharing", value={"strategy": "mig-mixed", "migLayout": "all-1g.5gb"}), "gpu-stack:nodePools[0].sharing.migLayout", "layouts that fit A100-80GB"),
    ("mig replicas", setter(P, 0, "sharing", value={"strategy": "mig-mixed", "migLayout": "all-balanced", "replicas": 2}), "gpu-stack:nodePools[0].sharing.replicas", "it takes: migLayout"),
    ("mig single needs one profile", setter(P, 0, "sharing", value={"strategy": "mig-single", "migLayout": "all-balanced"}), "gpu-stack:nodePools[0].sharing.migLayout", "use the mixed strategy or a single-profile layout"),
    ("mig layout with MIG off", setter(P, 0, "sharing", value={"strategy": "mig-mixed", "migLayout": "all-disabled"}), "gpu-stack:nodePools[0].sharing.migLayout", "enables MIG on no GPU"),
    ("MIG mode alone under single", setter(P, 0, "sharing", value={"strategy": "mig-single", "migLayout": "all-enabled"}), "gpu-stack:nodePools[0].sharing.migLayout", "without MIG devices"),
    ("mig switched off", setter(P, 0, "sharing", value={"strategy": "mig-single", "migLayout": "all-disabled"}), "gpu-stack:nodePools[0].sharing.migLayout", "sharing.strategy 'none' for whole GPUs"),
    ("scrape timeout above interval", setter("gpu-stack:monitoring", "serviceMonitor", "interval", value="5s"), "gpu-stack:monitoring.serviceMonitor", "scrapeTimeout 10s is longer than interval 5s"),
    ("duration units out of order", setter("gpu-stack:monitoring", "alerts", "utilizationFor", value="30m1h"), "gpu-stack:monitoring.alerts.utilizationFor", "Prometheus duration"),
    ("zero duration", setter("gpu-stack:monitoring", "alerts", "validatorNotReadyFor", value="0m"), "gpu-stack:monitoring.alerts.validatorNotReadyFor", "positive duration"),
    ("mig without mig manager", lambda c: c.update({"gpu-stack:components": {"migManager": False}}) or c[P][0].update(sharing={"strategy": "mig-mixed", "migLayout": "all-balanced"}), "gpu-stack:nodePools[0].sharing.strategy", "components.migManager: true"),
    ("custom layout too big", lambda c: c.update({"gpu-stack:migLayouts": {"big": {"3g.40gb": 3}}}) or c[P][0].update(sharing={"strategy": "mig-mixed", "migLayout": "big"}), "gpu-stack:nodePools[0].sharing.migLayout", "layouts that fit A100-80GB"),
    ("custom layout unused", setter("gpu-stack:migLayouts", value={"spare": {"1g.10gb": 2}}), "gpu-stack:migLayouts.spare", "used by no nodePools"),
    ("custom layout named like a builtin", setter("gpu-stack:migLayouts", value={"all-mine": {"1g.10gb": 2}}), "gpu-stack:migLayouts.all-mine", "built-in layouts"),
    ("custom layout name", setter("gpu-stack:migLayouts", value={"Big Layout": {"1g.10gb": 2}}), "gpu-stack:migLayouts", "usable layout name"),
    ("custom layout count", setter("gpu-stack:migLayouts", value={"x": {"1g.10gb": "two"}}), "gpu-stack:migLayouts.x.1g.10gb", "whole number"),
    ("gfd version", setter("gpu-stack:versions", "gfd", value="latest"), "gpu-stack:versions.gfd", "pin a tag"),
    ("dcgm version", setter("gpu-stack:versions", "dcgm", value="4.6 beta"), "gpu-stack:versions.dcgm", "image tag"),
    ("exporter version", setter("gpu-stack:versions", "dcgmExporter", value="latest"), "gpu-stack:versions.dcgmExporter", "pin a tag"),
    ("mig manager version", setter("gpu-stack:versions", "migManager", value=""), "gpu-stack:versions.migManager", "image tag"),
    ("dcgm switch", setter("gpu-stack:components", "dcgm", value="yes"), "gpu-stack:components.dcgm", "true, false"),
    ("exporter switch", setter("gpu-stack:components", "dcgmExporter", value=1), "gpu-stack:components.dcgmExporter", "true, false"),
    ("gfd switch", setter("gpu-stack:components", "gfd", value="on"), "gpu-stack:components.gfd", "true, false"),
    ("mig manager switch", setter("gpu-stack:components", "migManager", value="no"), "gpu-stack:components.migManager", "true, false"),
    ("status exporter switch", setter("gpu-stack:components", "nodeStatusExporter", value="off"), "gpu-stack:components.nodeStatusExporter", "true, false"),
    ("mps is not a switch", setter("gpu-stack:components", "mps", value=True), "gpu-stack:components.mps", "allowed keys"),
    ("reboot", setter("gpu-stack:migManager", "withReboot", value="sometimes"), "gpu-stack:migManager.withReboot", "true, false"),
    ("traffic policy", setter("gpu-stack:dcgmExporter", "internalTrafficPolicy", value="Node"), "gpu-stack:dcgmExporter.internalTrafficPolicy", "'Cluster', 'Local'"),
    ("metric field", setter("gpu-stack:dcgmExporter", "extraMetrics", value=[{"field": "POWER", "type": "gauge", "help": "p"}]), "gpu-stack:dcgmExporter.extraMetrics[0].field", "DCGM field name"),
    ("metric type", setter("gpu-stack:dcgmExporter", "extraMetrics", value=[{"field": "DCGM_FI_DEV_POWER_VIOLATION", "type": "histogram", "help": "p"}]), "gpu-stack:dcgmExporter.extraMetrics[0].type", "'gauge', 'counter', 'label'"),
    ("metric help", setter("gpu-stack:dcgmExporter", "extraMetrics", value=[{"field": "DCGM_FI_DEV_POWER_VIOLATION", "type": "counter", "help": "a, b"}]), "gpu-stack:dcgmExporter.extraMetrics[0].help", "without commas"),
    ("metric already default", setter("gpu-stack:dcgmExporter", "extraMetrics", value=[{"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge", "help": "t"}]), "gpu-stack:dcgmExporter.extraMetrics[0].field", "already exported"),
    (
        "metric twice",
        setter("gpu-stack:dcgmExporter", "extraMetrics", value=[{"field": "DCGM_FI_DEV_POWER_VIOLATION", "type": "counter", "help": "p"}] * 2),
        "gpu-stack:dcgmExporter.extraMetrics[1].field",
        "listed twice",
    ),
    ("prometheus operator", setter("gpu-stack:monitoring", "prometheusOperator", value="maybe"), "gpu-stack:monitoring.prometheusOperator", "true, false"),
    ("scrape interval", setter("gpu-stack:monitoring", "serviceMonitor", "interval", value="15 seconds"), "gpu-stack:monitoring.serviceMonitor.interval", "Prometheus duration"),
    ("scrape timeout", setter("gpu-stack:monitoring", "serviceMonitor", "scrapeTimeout", value="10"), "gpu-stack:monitoring.serviceMonitor.scrapeTimeout", "Prometheus duration"),
    ("monitor labels", setter("gpu-stack:monitoring", "serviceMonitor", "additionalLabels", value={"release": "kube prometheus"}), "gpu-stack:monitoring.serviceMonitor.additionalLabels", "valid Kubernetes label"),
    ("alerts without the operator", lambda c: c.update({"gpu-stack:monitoring": {"alerts": {"enabled": True}}}), "gpu-stack:monitoring.alerts.enabled", "prometheusOperator: true"),
    ("alerts without exporter", lambda c: c["gpu-stack:monitoring"]["alerts"].update(enabled=True) or c.update({"gpu-stack:components": {"dcgmExporter": False}}), "gpu-stack:monitoring.alerts.enabled", "components.dcgmExporter: true"),
    ("dashboard without exporter", lambda c: c["gpu-stack:monitoring"]["dashboard"].update(enabled=True) or c.update({"gpu-stack:components": {"dcgmExporter": False}}), "gpu-stack:monitoring.dashboard.enabled", "components.dcgmExporter: true"),
    ("warning above critical", setter("gpu-stack:monitoring", "alerts", "gpuTemperatureWarningCelsius", value=95), "gpu-stack:monitoring.alerts.gpuTemperatureWarningCelsius", "must be below gpuTemperatureCriticalCelsius (90)"),
    ("temperature", setter("gpu-stack:monitoring", "alerts", "gpuTemperatureCriticalCelsius", value=200), "gpu-stack:monitoring.alerts.gpuTemperatureCriticalCelsius", "less than or equal to 120"),
    ("framebuffer", setter("gpu-stack:monitoring", "alerts", "framebufferUsedPercent", value=120), "gpu-stack:monitoring.alerts.framebufferUsedPercent", "less than or equal to 100"),
    ("utilisation", setter("gpu-stack:monitoring", "alerts", "utilizationPercent", value=10), "gpu-stack:monitoring.alerts.utilizationPercent", "greater than or equal to 50"),
    ("utilisation for", setter("gpu-stack:monitoring", "alerts", "utilizationFor", value="half an hour"), "gpu-stack:monitoring.alerts.utilizationFor", "Prometheus duration"),
    ("validator for", setter("gpu-stack:monitoring", "alerts", "validatorNotReadyFor", value="15"), "gpu-stack:monitoring.alerts.validatorNotReadyFor", "Prometheus duration"),
    ("rule labels", setter("gpu-stack:monitoring", "alerts", "ruleLabels", value={"bad key!": "x"}), "gpu-stack:monitoring.alerts.ruleLabels", "valid Kubernetes label"),
    ("dashboard switch", setter("gpu-stack:monitoring", "dashboard", "enabled", value="on"), "gpu-stack:monitoring.dashboard.enabled", "true, false"),
    ("dashboard labels", setter("gpu-stack:monitoring", "dashboard", "labels", value={"grafana_dashboard": "a b"}), "gpu-stack:monitoring.dashboard.labels", "valid Kubernetes label"),
    ("dashboard folder", setter("gpu-stack:monitoring", "dashboard", "folder", value=""), "gpu-stack:monitoring.dashboard.folder", "at least 1"),
    ("monitoring typo", setter("gpu-stack:monitoring", "serviceMonitors", value={}), "gpu-stack:monitoring.serviceMonitors", "did you mean 'serviceMonitor'"),
    ("socket on cri-o", lambda c: c[C].update(containerRuntime="cri-o") or c.setdefault("gpu-stack:toolkit", {}).update(runtimeSocket="/run/x.sock"), "gpu-stack:toolkit.runtimeSocket", "cri-o"),
    # --- issue 4: node images, per-pool drivers, upgrade policy and waves
    ("unknown node image", setter(P, 0, "nodeImage", value="ubuntu22.04-9.9.9-generic-amd64"), "gpu-stack:nodePools[0].nodeImage", "entries of node_images/catalog.yaml: ubuntu22.04-5.15.0-139-generic-amd64"),
    ("os contradicts node image", setter(P, 0, "nodeImage", value="ubuntu24.04-6.8.0-79-generic-amd64"), "gpu-stack:nodePools[0].os", "'ubuntu22.04' contradicts nodeImage ubuntu24.04-6.8.0-79-generic-amd64 (ubuntu24.04); remove os"),
    ("no os and no node image", deleter(P, 0, "os"), "gpu-stack:nodePools[0].os", "required unless nodeImage names an entry"),
    ("os null", setter(P, 0, "os", value=None), "gpu-stack:nodePools[0].os", "required unless nodeImage names an entry"),
    ("pool driver mode", setter(P, 0, "driver", "mode", value="dkms"), "gpu-stack:nodePools[0].driver.mode", "'managed', 'host', 'precompiled'"),
    ("pool driver version", setter(P, 0, "driver", "version", value="580"), "gpu-stack:nodePools[0].driver.version", "not a driver version such as 595.91.07"),
    ("pool driver branch", setter(P, 0, "driver", value={"mode": "precompiled", "branch": "r580"}), "gpu-stack:nodePools[0].driver.branch", "not a driver branch"),
    ("pool module type", setter(P, 0, "driver", "kernelModuleType", value="closed"), "gpu-stack:nodePools[0].driver.kernelModuleType", "'auto', 'open', 'proprietary'"),
    ("pool driver typo", setter(P, 0, "driver", "verison", value="580.126.20"), "gpu-stack:nodePools[0].driver.verison", "did you mean 'version'"),
    ("branch on a managed pool", setter(P, 0, "driver", "branch", value="580"), "gpu-stack:nodePools[0].driver.branch", "not used by driver mode 'managed'; it takes: daemonSetName, daemonSetNames, kernelModuleType, mode, version"),
    ("version on a precompiled pool", setter(P, 0, "driver", value={"mode": "precompiled", "version": "580.126.20"}), "gpu-stack:nodePools[0].driver.version", "not used by driver mode 'precompiled'; it takes: branch, daemonSetName, daemonSetNames, kernelModuleType, mode"),
    ("version on a host pool", setter(P, 0, "driver", value={"mode": "host", "version": "580.126.20"}), "gpu-stack:nodePools[0].driver.version", "not used by driver mode 'host'; it takes: mode"),
    ("precompiled pool without node image", setter(P, 0, "driver", value={"mode": "precompiled"}), "gpu-stack:nodePools[0].nodeImage", "required with driver mode 'precompiled'"),
    (
        "precompiled branch NVIDIA does not build, no private image",
        lambda c: c[P][0].update(driver={"mode": "precompiled", "branch": "560"}, nodeImage="ubuntu22.04-5.15.0-139-generic-amd64"),
        "gpu-stack:nodePools[0].nodeImage",
        "NVIDIA publishes no precompiled driver 560-5.15.0-139-generic-ubuntu22.04 (",
    ),
    ("proprietary on Blackwell", lambda c: c[P][0].update(gpuModel="B200", driver={"kernelModuleType": "proprietary"}), "gpu-stack:nodePools[0].driver.kernelModuleType", "B200 (blackwell) runs only on the open kernel modules"),
    ("stack-wide proprietary on Blackwell", lambda c: c[P][0].update(gpuModel="B200") or c["gpu-stack:driver"].update(kernelModuleType="proprietary"), "gpu-stack:driver.kernelModuleType", "open kernel modules"),
    ("strategy", setter(U, "strategy", value="blue-green"), "gpu-stack:upgrade.strategy", "'rolling', 'manual'"),
    ("max unavailable zero", setter(U, "maxUnavailable", value=0), "gpu-stack:upgrade.maxUnavailable", "positive count or a percentage"),
    ("max unavailable above 100%", setter(U, "maxUnavailable", value="150%"), "gpu-stack:upgrade.maxUnavailable", "from 1% to 100%"),
    ("max unavailable digit string", setter(U, "maxUnavailable", value="2"), "gpu-stack:upgrade.maxUnavailable", "as a number (2, unquoted)"),
    ("eviction flag", setter(U, "gpuPodEviction", value="yes"), "gpu-stack:upgrade.gpuPodEviction", "true, false"),
    ("parallel upgrades negative", setter(U, "maxParallelUpgrades", value=-1), "gpu-stack:upgrade.maxParallelUpgrades", "greater than or equal to 0"),
    ("parallel upgrades too many", setter(U, "maxParallelUpgrades", value=100_001), "gpu-stack:upgrade.maxParallelUpgrades", "less than or equal to 100000"),
    ("parallel upgrades bool", setter(U, "maxParallelUpgrades", value=True), "gpu-stack:upgrade.maxParallelUpgrades", "got True; expected a whole number"),
    ("parallel upgrades string", setter(U, "maxParallelUpgrades", value="2"), "gpu-stack:upgrade.maxParallelUpgrades", "expected a whole number"),
    ("parallel upgrades percentage", setter(U, "maxParallelUpgrades", value="25%"), "gpu-stack:upgrade.maxParallelUpgrades", "expected a whole number"),
    ("parallel upgrades fraction", setter(U, "maxParallelUpgrades", value=1.5), "gpu-stack:upgrade.maxParallelUpgrades", "expected a whole number"),
    ("paused word", setter(U, "paused", value="yes"), "gpu-stack:upgrade.paused", "allowed values: true, false"),
    ("paused number", setter(U, "paused", value=1), "gpu-stack:upgrade.paused", "allowed values: true, false"),
    ("node ready timeout short", setter(U, "nodeReadyTimeoutSeconds", value=60), "gpu-stack:upgrade.nodeReadyTimeoutSeconds", "greater than or equal to 300"),
    ("node ready timeout negative", setter(U, "nodeReadyTimeoutSeconds", value=-1), "gpu-stack:upgrade.nodeReadyTimeoutSeconds", "greater than or equal to 300"),
    ("node ready timeout long", setter(U, "nodeReadyTimeoutSeconds", value=86_401), "gpu-stack:upgrade.nodeReadyTimeoutSeconds", "less than or equal to 86400"),
    ("node ready timeout bool", setter(U, "nodeReadyTimeoutSeconds", value=True), "gpu-stack:upgrade.nodeReadyTimeoutSeconds", "got True; expected a whole number"),
    ("node ready timeout string", setter(U, "nodeReadyTimeoutSeconds", value="1800"), "gpu-stack:upgrade.nodeReadyTimeoutSeconds", "expected a whole number"),
    ("node ready timeout typo", setter(U, "nodeReadyTimeout", value=600), "gpu-stack:upgrade.nodeReadyTimeout", "did you mean 'nodeReadyTimeoutSeconds'"),
    (
        "rolling without the labeller's agents",
        lambda c: c.pop(U) and c.update({"gpu-stack:components": {"nodeLabeler": False}}),
        "gpu-stack:upgrade.strategy",
        "'rolling' upgrades are performed by the node labeller's agents (driver DaemonSets are OnDelete)",
    ),
    ("drain timeout", setter(U, "drain", "timeoutSeconds", value=-5), "gpu-stack:upgrade.drain.timeoutSeconds", "greater than or equal to 0"),
    ("drain pod selector", setter(U, "drain", "podSelector", value="app in (a,b"), "gpu-stack:upgrade.drain.podSelector", "not a selector term"),
    ("drain pod selector value", setter(U, "drain", "podSelector", value="app=not ok"), "gpu-stack:upgrade.drain.podSelector", "not a selector term"),
    ("drain force flag", setter(U, "drain", "force", value=1), "gpu-stack:upgrade.drain.force", "true, false"),
    ("drain typo", setter(U, "drain", "deleteEmptydirData", value=True), "gpu-stack:upgrade.drain.deleteEmptydirData", "did you mean 'deleteEmptyDirData'"),
    ("wave name", setter(U, "waves", value=[{"name": "Canary", "pools": ["training-a100", "inference-l4"]}]), "gpu-stack:upgrade.waves[0].name", "DNS-1123 label"),
    ("wave without pools", setter(U, "waves", value=[{"name": "canary", "pools": []}]), "gpu-stack:upgrade.waves[0].pools", "at least 1"),
    ("wave timeout", setter(U, "waves", value=[{"name": "all", "pools": ["training-a100", "inference-l4"], "timeoutSeconds": 60}]), "gpu-stack:upgrade.waves[0].timeoutSeconds", "greater than or equal to 300"),
    ("wave with unknown pool", setter(U, "waves", value=[{"name": "all", "pools": ["training-a100", "inference-l4", "gpu-a"]}]), "gpu-stack:upgrade.waves[0].pools[2]", "unknown pool 'gpu-a'; pools with a deployed driver: training-a100, inference-l4"),
    ("pool in two waves", setter(U, "waves", value=[{"name": "a", "pools": ["training-a100"]}, {"name": "b", "pools": ["training-a100", "inference-l4"]}]), "gpu-stack:upgrade.waves[1].pools[0]", "already in wave 'a'"),
    ("pool in no wave", setter(U, "waves", value=[{"name": "a", "pools": ["training-a100"]}]), "gpu-stack:upgrade.waves", "pools in no wave: inference-l4"),
    ("duplicate wave", setter(U, "waves", value=[{"name": "a", "pools": ["training-a100"]}, {"name": "a", "pools": ["inference-l4"]}]), "gpu-stack:upgrade.waves[1].name", "duplicate wave name 'a'"),
    ("host pool in a wave", lambda c: c[P][1].update(driver={"mode": "host"}) or c.update({U: {"waves": [{"name": "a", "pools": ["training-a100", "inference-l4"]}]}}), "gpu-stack:upgrade.waves[0].pools[1]", "gets no driver DaemonSet"),
    ("waves with manual strategy", setter(U, value={"strategy": "manual", "waves": [{"name": "a", "pools": ["training-a100", "inference-l4"]}]}), "gpu-stack:upgrade.waves", "with strategy 'manual' nothing rolls"),
    ("waves without node labeller", lambda c: c.update({U: {"waves": [{"name": "a", "pools": ["training-a100", "inference-l4"]}]}, "gpu-stack:components": {"nodeLabeler": False}}), "gpu-stack:upgrade.waves", "components.nodeLabeler: true"),
    ("waves without validation", lambda c: c.update({U: {"waves": [{"name": "a", "pools": ["training-a100", "inference-l4"]}]}, "gpu-stack:validation": {"mode": "off"}}), "gpu-stack:upgrade.waves", "cannot be 'off'"),
    (
        "two driver DaemonSets without node labeller",
        lambda c: c.update({"gpu-stack:components": {"nodeLabeler": False}}),
        "gpu-stack:components.nodeLabeler",
        "the driver pools need 2 driver DaemonSets (nvidia-driver-daemonset-canary, nvidia-driver-daemonset-training)",
    ),
    ("daemonSetName not a name", setter(P, 0, "driver", "daemonSetName", value="Driver_A100"), "gpu-stack:nodePools[0].driver.daemonSetName", "DNS-1123 subdomain, at most 63"),
    ("daemonSetName over 63", setter(P, 0, "driver", "daemonSetName", value="d" * 64), "gpu-stack:nodePools[0].driver.daemonSetName", "at most 63"),
    ("daemonSetName on a host pool", setter(P, 0, "driver", value={"mode": "host", "daemonSetName": "nvidia-driver-x"}), "gpu-stack:nodePools[0].driver.daemonSetName", "not used by driver mode 'host'"),
    (
        "one DaemonSet for two drivers",
        lambda c: c[P][1].update(os="ubuntu24.04", driver={"daemonSetName": "nvidia-driver-daemonset-training"}),
        "gpu-stack:nodePools[1].driver.daemonSetName",
        "pools 'training-a100' and 'inference-l4' share driver DaemonSet 'nvidia-driver-daemonset-training' but run different drivers",
    ),
    (
        "one DaemonSet in two waves",
        lambda c: c[P][1].update(driver={"daemonSetName": "nvidia-driver-daemonset-training"}),
        "gpu-stack:upgrade.waves",
        "share driver DaemonSet 'nvidia-driver-daemonset-training', which rolls in one wave",
    ),
    ("expected nodes negative", setter(P, 0, "expectedNodes", value=-1), "gpu-stack:nodePools[0].expectedNodes", "greater than or equal to 0"),
    ("expected nodes not a count", setter(P, 0, "expectedNodes", value="twelve"), "gpu-stack:nodePools[0].expectedNodes", "whole number"),
    ("expected nodes absurd", setter(P, 0, "expectedNodes", value=10**9), "gpu-stack:nodePools[0].expectedNodes", "less than or equal to 100000"),
    (
        "canary gate shorter than its rollout",
        lambda c: c[P][1].update(expectedNodes=100) or c[U]["waves"][0].update(timeoutSeconds=600),
        "gpu-stack:upgrade.waves[0].timeoutSeconds",
        "wave 'canary' declares 100 expected nodes, which roll 2 at a time: maxUnavailable 2, and needs at least 8000 s",
    ),
    (
        "stack gate shorter than the last wave's rollout",
        lambda c: c[P][0].update(expectedNodes=40),
        "gpu-stack:validation.timeoutSeconds",
        "the last wave, 'training', declare 40 expected nodes, which roll 2 at a time: maxUnavailable 2, and need at least 3200 s",
    ),
    (
        # One budget for the whole fleet: a percentage of every declared node, capped by maxParallelUpgrades.
        "canary gate shorter than its rollout at a capped percentage",
        lambda c: c[P][0].update(expectedNodes=300) or c[P][1].update(expectedNodes=100)
        or c[U].update(maxUnavailable="10%", maxParallelUpgrades=4) or c[U]["waves"][0].update(timeoutSeconds=3600),
        "gpu-stack:upgrade.waves[0].timeoutSeconds",
        "wave 'canary' declares 100 expected nodes, which roll 4 at a time: maxUnavailable 10% of 400 declared nodes, "
        "maxParallelUpgrades 4, and needs at least 4000 s",
    ),
    ("V100 past its last branch", setter(P, 0, "gpuModel", value="V100"), "gpu-stack:versions.driver", "V100 is supported up to driver branch 580 only; this pool's driver is branch 595"),
    ("open modules on Volta", setter(P, 0, "gpuModel", value="V100"), "gpu-stack:driver.kernelModuleType", "V100 (volta) predates Turing, so the open kernel modules do not drive it"),
    ("B200 on a branch before its first", lambda c: c[P][0].update(gpuModel="B200", driver={"version": "550.144.03"}), "gpu-stack:nodePools[0].driver.version", "B200 needs driver branch 570 or later; this pool's driver is branch 550"),
    ("proprietary on Grace Hopper", lambda c: c[P][0].update(gpuModel="GH200", driver={"kernelModuleType": "proprietary"}), "gpu-stack:nodePools[0].driver.kernelModuleType", "GH200 (hopper) runs only on the open kernel modules"),
    ("KubeVirt device plugin version", setter("gpu-stack:versions", "sandboxDevicePlugin", value="latest"), "gpu-stack:versions.sandboxDevicePlugin", "'latest' is not a reviewable version"),
    ("Kata device plugin version", setter("gpu-stack:versions", "kataDevicePlugin", value="v0.0.5 beta"), "gpu-stack:versions.kataDevicePlugin", "neither an image tag nor a sha256"),
    ("CC manager version", setter("gpu-stack:versions", "ccManager", value="sha256:abc"), "gpu-stack:versions.ccManager", "neither an image tag nor a sha256"),
    ("vGPU device manager version", setter("gpu-stack:versions", "vgpuDeviceManager", value=""), "gpu-stack:versions.vgpuDeviceManager", "neither an image tag nor a sha256"),
    ("vGPU pool without a manager image", lambda c: c[P][1].update(workloadType="vm-vgpu", sharing={}), "gpu-stack:vgpu.managerImage", "required with a vm-vgpu pool"),
    ("vGPU config the model cannot take", lambda c: c[P][1].update(workloadType="vm-vgpu", sharing={}, vgpuConfig="A10-12Q") or c.update({"gpu-stack:vgpu": {"managerImage": "harbor.platform.internal/gpu-stack/vgpu-manager:580.82.07-ubuntu22.04"}}), "gpu-stack:nodePools[1].vgpuConfig", "serves no L4 GPU"),
    ("vGPU config on a container pool", setter(P, 1, "vgpuConfig", value="A10-12Q"), "gpu-stack:nodePools[1].vgpuConfig", "only vm-vgpu pools split GPUs"),
    ("unknown default vGPU config", setter("gpu-stack:vgpu", "defaultConfig", value="A10-13Q"), "gpu-stack:vgpu.defaultConfig", "no vGPU config named 'A10-13Q'"),
    ("vGPU manager image without a tag", setter("gpu-stack:vgpu", "managerImage", value="harbor.platform.internal/gpu-stack/vgpu-manager"), "gpu-stack:vgpu.managerImage", "has no tag"),
    ("vGPU in kata mode", lambda c: c[P][1].update(workloadType="vm-vgpu", sharing={}) or c.update({"gpu-stack:sandboxWorkloads": {"mode": "kata"}, "gpu-stack:vgpu": {"managerImage": "harbor.platform.internal/gpu-stack/vgpu-manager:580.82.07-ubuntu22.04"}}), "gpu-stack:nodePools[1].workloadType", "sandboxWorkloads.mode: kubevirt"),
    ("sandbox mode", setter("gpu-stack:sandboxWorkloads", "mode", value="firecracker"), "gpu-stack:sandboxWorkloads.mode", "'kubevirt', 'kata'"),
    ("cc mode", setter("gpu-stack:sandboxWorkloads", "ccManager", value={"defaultMode": "ON"}), "gpu-stack:sandboxWorkloads.ccManager.defaultMode", "'on', 'off', 'devtools'"),
    ("cc switch", setter("gpu-stack:sandboxWorkloads", "ccManager", value={"enabled": "yes"}), "gpu-stack:sandboxWorkloads.ccManager.enabled", "true, false"),
    ("sandbox default workload", setter("gpu-stack:sandboxWorkloads", "defaultWorkload", value="vm"), "gpu-stack:sandboxWorkloads.defaultWorkload", "'container', 'vm-passthrough', 'vm-vgpu'"),
    ("driver keys on a VM pool", lambda c: c[P][1].update(workloadType="vm-passthrough", sharing={}, driver={"mode": "host"}), "gpu-stack:nodePools[1].driver", "vm-passthrough pools take no container driver"),
]


@pytest.mark.parametrize("change,path,fragment", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_value_names_key_and_allowed_values(change, path, fragment):
    found = problems(mutated(change))
    assert any(p == path and fragment in m for p, m in found), found


def test_precompiled_requires_a_node_image_per_container_pool():
    config = mutated(setter("gpu-stack:driver", "mode", value="precompiled"))
    found = dict(problems(config))
    assert found["gpu-stack:nodePools[0].nodeImage"].startswith("required with driver mode 'precompiled' (one image per kernel); entries: ")
    assert "ubuntu22.04-5.15.0-139-generic-amd64" in found["gpu-stack:nodePools[0].nodeImage"]


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


def test_mig_single_suggests_only_layouts_single_can_run():
    config = mutated(setter(P, 0, "sharing", value={"strategy": "mig-single"}))
    [(path, message)] = [p for p in problems(config) if p[0].endswith("migLayout")]
    suggested = message.split(": ", 1)[1].split(", ")
    assert "all-1g.10gb" in suggested and "all-7g.80gb" in suggested
    assert "all-balanced" not in suggested and "all-enabled" not in suggested and "all-disabled" not in suggested


def test_durations_follow_prometheus_grammar():
    from components.config import duration_ms

    assert duration_ms("1h30m") == 5_400_000 and duration_ms("500ms") == 500 and duration_ms("2w") == 14 * 86_400_000
    for bad in ("", "30", "1m1h", "5 m", "1.5h"):
        with pytest.raises(ValueError):
            duration_ms(bad)


def test_daemonset_budgets_render_as_the_api_server_takes_them():
    """A count renders as an integer, a percentage as a string: the two forms of an IntOrString."""
    default = load_config(bag(BASE))
    assert default.daemonsets.max_unavailable == 1 and default.upgrade.max_unavailable == 2
    percent = load_config(bag(mutated(setter("gpu-stack:daemonsets", "maxUnavailable", value="25%"))))
    assert percent.daemonsets.max_unavailable == "25%"
