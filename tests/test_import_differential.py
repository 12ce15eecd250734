"""The differential import test: for every ClusterPolicy path the importer's mapping table (gpustack/importer/
mapping.py `carried()`) says it carries, changing that one field changes the imported stack, and the stack still
loads; for every other field of the base ClusterPolicy, changing it puts its path (or the subtree holding it) into
the report, as not carried or as without effect. Config level only: an import and load_config per field, no render."""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from typing import Any, Optional

import pytest
import yaml

from components.config import load_config, stack_file_config
from gpustack import importer
from gpustack.importer import ClusterFacts, ImportInputError, ImportResult
from gpustack.importer import tables
from gpustack.importer.mapping import carried
from gpustack.importer.ledger import leaves
from components.catalogs.consts import MIG_CONFIG, WORKLOAD_CONFIG
from stacktest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "clusterpolicy"
AGENT = "harbor.platform.internal/gpu-stack/node-agent:0.10.0"  # with wait-for-completion (upgrade.waitForCompletion)
ROLE = "virt.platform.internal/gpu-role"
SANDBOX_FACTS = ClusterFacts("virt-admin", AGENT, pool_labels=(ROLE,),
                             gpu_models=(((ROLE, "vm-passthrough"), "A100-80GB"), ((ROLE, "vm-vgpu"), "A10")))


@functools.lru_cache(maxsize=None)
def _document(name: str) -> Any:
    return importer.read_yaml(str(FIXTURES / name), name)


# One base per kind of cluster: the container components, and the sandbox (VM) operands in each sandbox mode.
BASES = {
    "container": ("differential-base.yaml", ClusterFacts("diff-admin", AGENT), "nodes-default.yaml", ("differential-configmaps.yaml",)),
    "kubevirt": ("sandbox-kubevirt.yaml", SANDBOX_FACTS, "nodes-sandbox.yaml", ()),
    # Kata serves passthrough VMs only: the sandbox cluster without its vGPU nodes.
    "kata": ("sandbox-kubevirt.yaml", SANDBOX_FACTS, "nodes-sandbox.yaml", ()),
    "precompiled": ("precompiled.yaml", ClusterFacts("dc1-admin", AGENT), "nodes-precompiled.yaml", ()),
}
# Context keys starting with @ change the inputs beside the ClusterPolicy: the facts' runtime, the nodes' labels.
RUNTIME, STRIP_LABEL = "@containerRuntime", "@stripNodeLabel"
KATA_SPEC = {"sandboxWorkloads.mode": "kata"}
# Sandbox fields the shared sandbox fixture leaves unset, added to both sandbox bases (not to test_import.py's).
SANDBOX_EXTRA = {"vgpuDeviceManager.config.name": "custom-vgpu-devices", "vgpuManager.kernelModuleConfig.name": "vgpu-modules",
                 "vfioManager.env": [{"name": "VFIO_EXTRA", "value": "1"}], "sandboxDevicePlugin.hostNetwork": True}
SANDBOX_SECTIONS = ("sandboxWorkloads", "vfioManager", "sandboxDevicePlugin", "vgpuManager", "vgpuDeviceManager")
KATA_SECTIONS = ("kataSandboxDevicePlugin", "ccManager")
# Fields whose change is only visible with another field set as well: (base, {path: value}) applied to both sides.
CONTEXT: dict[str, dict[str, Any]] = {
    # The drain settings count once drain.enable is on; the base drains, so podDeletion's only with the drain off.
    "driver.upgradePolicy.podDeletion.force": {"driver.upgradePolicy.drain.enable": False},
    "driver.upgradePolicy.podDeletion.timeoutSeconds": {"driver.upgradePolicy.drain.enable": False},
    "driver.upgradePolicy.podDeletion.deleteEmptyDir": {"driver.upgradePolicy.drain.enable": False},
    # With autoUpgrade false k8s-driver-manager's env governs the update.
    **{f"driver.manager.env[{name}]": {"driver.upgradePolicy.autoUpgrade": False}
       for name in ("ENABLE_GPU_POD_EVICTION", "ENABLE_AUTO_DRAIN", "DRAIN_USE_FORCE", "DRAIN_POD_SELECTOR_LABEL",
                    "DRAIN_TIMEOUT_SECONDS", "DRAIN_DELETE_EMPTYDIR_DATA")},
    # The alternatives the toolkit reads when the first-named variable is absent.
    "toolkit.env[RUNTIME_CONFIG]": {"toolkit.env[CONTAINERD_CONFIG]": None},
    "toolkit.env[RUNTIME_SOCKET]": {"toolkit.env[CONTAINERD_SOCKET]": None},
    "toolkit.env[CRIO_CONFIG]": {RUNTIME: "cri-o", "toolkit.env[CONTAINERD_CONFIG]": None},
    # An empty MIG default matters on MIG-capable nodes without a nvidia.com/mig.config label.
    "migManager.config.default": {STRIP_LABEL: MIG_CONFIG},
    # A host engine of its own counts without the standalone DCGM, which the exporter uses otherwise.
    "dcgmExporter.env[DCGM_REMOTE_HOSTENGINE_INFO]": {"dcgm.enabled": False},
}
# Paths whose base-relative change needs a value the generic rule cannot guess.
VALUES: dict[str, Any] = {
    "driver.usePrecompiled": False,  # on the precompiled base
    "daemonsets.labels": {"team": "platform", "cost-center": "gpu"},
    "daemonsets.annotations": {"example.com/owner": "ml-team"},
    "dcgmExporter.serviceMonitor.additionalLabels": {"release": "kube-prometheus-stack"},
    "driver.upgradePolicy.podDeletion": None,
    "driver.manager.env[ENABLE_AUTO_DRAIN]": "true",
    "driver.manager.env[DRAIN_USE_FORCE]": "true",
    "driver.manager.env[DRAIN_DELETE_EMPTYDIR_DATA]": "true",
    "migManager.env[WITH_REBOOT]": "true",
    "validator.plugin.env[WITH_WORKLOAD]": "true",
    "driver.kernelModuleType": "proprietary",
    "mig.strategy": "mixed",
    "daemonsets.updateStrategy": "OnDelete",
    "daemonsets.tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    "daemonsets.rollingUpdate.maxUnavailable": "20%",
    "dcgmExporter.service.internalTrafficPolicy": "Local",
    "dcgmExporter.env[DCGM_EXPORTER_LISTEN]": ":9500",
    "dcgmExporter.env[DCGM_REMOTE_HOSTENGINE_INFO]": "localhost:5555",
    "dcgmExporter.env[DCGM_EXPORTER_COLLECTORS]": "/etc/dcgm-exporter/default-counters.csv",
    "dcgmExporter.serviceMonitor.interval": "30s",
    "dcgmExporter.serviceMonitor.scrapeTimeout": "20s",
    "dcgmExporter.serviceMonitor.relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"}],
    "dcgmExporter.podLabelAllowlistRegex": ["^app$", "^team$"],
    "dcgmExporter.hpcJobMapping.directory": "/var/lib/slurm/gpu-jobs",
    "sandboxWorkloads.mode": "kata",
    "sandboxWorkloads.defaultWorkload": "vm-passthrough",
    "ccManager.defaultMode": "devtools",
    "driver.manager.env[DRAIN_TIMEOUT_SECONDS]": "10m",
    "driver.manager.env[DRAIN_POD_SELECTOR_LABEL]": "drain=yes",
    "migManager.config.default": "",
    "hostPaths.rootFS": "/host-root",
    "hostPaths.driverInstallDir": "/home/kubernetes/bin/nvidia",
    "hostPaths.kubeletRootDir": "/var/snap/microk8s/common/var/lib/kubelet",
    "toolkit.installDir": "/opt/nvidia",
    "driver.licensingConfig.secretName": "nls-token-2",
    "driver.licensingConfig.configMapName": "licensing-legacy",
    "driver.secretEnv": "driver-env-2",
    "vgpuDeviceManager.config.default": "A10-12Q",
    "devicePlugin.config.name": "device-plugin-config",
    "devicePlugin.config.default": "default",
    "dcgmExporter.config.name": "dcgm-custom-metrics",
    "migManager.config.name": "custom-mig-parted-config",
}
# Carried rows whose change the container base (a managed driver) reports instead: it needs driver.mode host.
CONTEXT["hostPaths.driverInstallDir"] = {"driver.enabled": False}

# Carried rows a change of which stops the import (exit 2) instead of changing the stack, and why that is right.
REFUSED = {
    # NVIDIADriver mode without the NVIDIADriver objects: the drivers are not in the ClusterPolicy.
    "driver.useNvidiaDriverCRD": "the drivers are NVIDIADriver objects, which the import needs",
    # The A100 nodes carry no label a pool without MIG would keep: gpu-stack would label them all-disabled.
    "migManager.config.default": "an empty default on unlabelled MIG-capable nodes",
    # mixed MIG on nodes labelled all-disabled: fine; mig.strategy is carried (devicePlugin.migStrategy).
}
# Carried rows that read a ConfigMap: changing the name to one not given is reported, not carried.
NEEDS_CONFIGMAP = {"devicePlugin.config.name", "devicePlugin.config.default", "dcgmExporter.config.name", "migManager.config.name",
                   "driver.repoConfig.configMapName", "driver.certConfig.name", "driver.kernelModuleConfig.name",
                   "vgpuManager.kernelModuleConfig.name", "vgpuDeviceManager.config.name"}


def _base_of(path: str) -> str:
    section = path.split(".", 1)[0].split("[", 1)[0]
    if path == "driver.usePrecompiled":
        return "precompiled"
    if section in KATA_SECTIONS:
        return "kata"
    return "kubevirt" if section in SANDBOX_SECTIONS else "container"


def _split(path: str) -> tuple[list[str], Optional[str]]:
    match = re.fullmatch(r"(.*)\[([^\]]+)\]", path)
    if match:
        return match.group(1).split("."), match.group(2)
    return path.split("."), None


def _get(spec: dict, path: str) -> Any:
    keys, env = _split(path)
    node: Any = spec
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    if env is None:
        return node
    return next((e.get("value", "") for e in node or [] if e.get("name") == env), None)


def _set(spec: dict, path: str, value: Any) -> None:
    keys, env = _split(path)
    node = spec
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    if env is None:
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
        return
    entries = [e for e in node.get(keys[-1]) or [] if e.get("name") != env]
    if value is not None:
        entries.append({"name": env, "value": value})
    node[keys[-1]] = entries


def _bump(text: str) -> str:
    """A different value of the same shape: the last number up by one, else a suffix."""
    match = re.search(r"(\d+)(?!.*\d)", text)
    if match:
        return text[: match.start()] + str(int(match.group(1)) + 1) + text[match.end():]
    return text + "-2"


def _changed(path: str, value: Any) -> Any:
    if path in VALUES:
        return VALUES[path]
    field = path.rsplit(".", 1)[-1]
    if field == "imagePullPolicy":
        return "Always"
    if field == "env":
        return [*(value or []), {"name": "GPU_STACK_DIFF", "value": "1"}]
    if field == "args":
        return [*(value or []), "--gpu-stack-diff"]
    if field == "resources":
        return {"limits": {"memory": "321Mi"}}
    if field == "imagePullSecrets":
        return [*(value or []), "extra-pull"]
    if field == "image" and value:
        return f"{value}-fork"
    if field == "repository":
        return "registry.example.com/forks"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 3
    if isinstance(value, str) and value:
        return _bump(value)
    if value is None:
        if field.endswith("Seconds") or field.endswith("Threshold") or field == "maxParallelUpgrades":
            return 7
        return "added-by-test"
    return value


def _import(base: str, overrides: dict[str, Any]) -> ImportResult:
    # The unchanged side of a comparison recurs for many fields: one import per distinct input.
    return _import_cached(base, yaml.safe_dump(overrides, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _import_cached(base: str, key: str) -> ImportResult:
    overrides = yaml.safe_load(key)
    name, facts, nodes, configmaps = BASES[base]
    policy = copy.deepcopy(_document(name))
    base_changes = {**SANDBOX_EXTRA, **KATA_SPEC} if base == "kata" else SANDBOX_EXTRA if base == "kubevirt" else {}
    for path, value in {**base_changes, **overrides}.items():
        if not path.startswith("@"):
            _set(policy["spec"], path, value)
    if RUNTIME in overrides:
        facts = dataclasses.replace(facts, container_runtime=overrides[RUNTIME])
    node_list = importer.nodes_of(_document(nodes), nodes)
    if base == "kata":
        node_list = [n for n in node_list if n.labels.get(WORKLOAD_CONFIG) != "vm-vgpu"]
    if STRIP_LABEL in overrides:
        node_list = [dataclasses.replace(n, labels={k: v for k, v in n.labels.items() if k != overrides[STRIP_LABEL]})
                     for n in node_list]
    return importer.import_cluster_policy(
        importer.cluster_policy_of(policy, name),
        facts,
        nodes=node_list,
        configmaps=importer.configmaps_of([(c, _document(c)) for c in configmaps]),
    )


def _loads(result: ImportResult) -> None:
    load_config(stack_file_config(result.document()))


def _reported(result: ImportResult, path: str) -> bool:
    full = f"spec.{path}"
    return any(full == item.path or full.startswith(item.path + ".") or full.startswith(item.path + "[")
               for item in [*result.not_carried, *result.no_effect])


ROWS = {row.path: row for row in carried()}


@pytest.mark.parametrize("path", sorted(ROWS))
def test_changing_a_carried_field_changes_the_stack(path):
    base = _base_of(path)
    context = dict(CONTEXT.get(path, {}))
    before = _import(base, context)
    _loads(before)
    value = _get(_base_spec(base), path) if path not in context else context[path]
    new = _changed(path, value)
    assert new != value, f"{path}: no different value to try"
    if path in REFUSED:
        with pytest.raises(ImportInputError):
            _import(base, {**context, path: new})
        return
    after = _import(base, {**context, path: new})
    if path in NEEDS_CONFIGMAP and (after.config == before.config or _reported(after, path)):
        assert _reported(after, path), f"{path}: a ConfigMap name the import was not given must be reported"
        return
    assert after.config != before.config, f"{path}: {value!r} -> {new!r} left the imported stack unchanged"
    # Carried, so not in the report (autoUpgrade and maxUnavailable also carry a note on what still differs).
    reported = [i.path for i in [*after.not_carried, *after.no_effect] if i.path == f"spec.{path}"]
    assert not reported or path.endswith(("autoUpgrade", "maxUnavailable")), f"{path} is carried, yet reported"


def _base_spec(base: str) -> dict:
    spec = copy.deepcopy(_document(BASES[base][0])["spec"])
    for path, value in (SANDBOX_EXTRA if base in ("kubevirt", "kata") else {}).items():
        _set(spec, path, value)
    return spec


def _uncarried_leaves(base: str) -> list[str]:
    spec = _base_spec(base)
    found = []
    for leaf, _ in leaves(spec, "spec"):
        path = leaf[len("spec."):]
        if not any(path == p or path.startswith(p + ".") or path.startswith(p + "[") for p in ROWS):
            found.append(path)
    return found


UNCARRIED = sorted({(base, path) for base in BASES for path in _uncarried_leaves(base)})


@pytest.mark.parametrize(("base", "path"), UNCARRIED, ids=[f"{b}:{p}" for b, p in UNCARRIED])
def test_changing_a_field_the_importer_does_not_carry_is_reported(base, path):
    value = _get(_base_spec(base), path)
    new = _changed(path, value)
    result = _import(base, {path: new})
    # A value equal to what gpu-stack renders is carried without a report; then the base's value was reported.
    assert _reported(result, path) or _reported(_import(base, {}), path), f"{path}: {value!r} -> {new!r} is neither carried nor reported"


def test_the_report_names_what_used_to_vanish():
    """The fields issue 16 found dropped without a word, each now carried or named in the report."""
    result = _import("container", {
        "driver.licensingConfig.nlsEnabled": False,
        "kataManager.enabled": True,
        "operator.initContainer.version": "12.9.2-base-ubi9",
        "psp.enabled": True,
    })
    driver = result.config["gpu-stack:driver"]
    assert driver["licensingConfig"] == {"secretName": "nls-token", "nlsEnabled": False}
    assert result.config["gpu-stack:upgrade"]["waitForCompletion"] == {"podSelector": "app=training", "timeoutSeconds": 600}
    for path in ("kataManager.enabled", "operator.initContainer.version", "psp.enabled"):
        assert _reported(result, path), path


def test_every_base_imports_to_a_stack_that_loads():
    for base in BASES:
        _loads(_import(base, {}))


def test_the_migration_guide_tables_are_current():
    text = tables.DOCS.read_text()
    start = text.index(tables.DOCS_BEGIN)
    end = text.index(tables.DOCS_END) + len(tables.DOCS_END)
    assert text[start:end] == tables.markdown(), "docs/migration.md is stale: run python -m gpustack.importer.tables"
