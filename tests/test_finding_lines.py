"""Every finding lands on the line of the stack key that caused it, read from the render's own source map
(components/kit/sources.py), so that a pull request's annotation sits on the line the reviewer changed.

The property: for every key of docs/stack.schema.json that can cause a finding, an edit of that key in a shipped
stack that makes a policy, schema or API-server rule fail puts a result on that key's line, start and end line
and column as an independent YAML parser (ruamel) places the key, in every shipped stack where the key applies
(the key sets a field of the edited render). Results of one rule on one line are one result listing each object.

EDITS holds one failing edit per key (operands' keys for every operand the schema has). Which keys can cause a
finding is derived as far as it can be: every key the shipped stacks' source maps show setting a field is either
edited here or named in UNREACHABLE with the reason no accepted value of it makes a rule fail, and a test fails on
a key that is neither. The edits run in two batches per stack (BATCHES: edits that would mask each other's
findings run apart); the first batch on prod-managed and dev runs in `make test`, every batch on every stack in
`make test-all`.
"""

from __future__ import annotations

import argparse
import functools
import re
from pathlib import Path
from typing import Any, Optional

import pytest

from components.catalogs import operand_overrides as operand_targets
from components.config import deployed_operands
from gpustack import findings, sarif
from gpustack.checking import check_one, load_stack
from gpustack.keylines import KeyLines
from gpustack.policyrun import pack_config
from findinglines import (
    NAMESPACE,
    STACK_SCHEMA,
    Edit,
    Path_,
    dump,
    first,
    get,
    key_path,
    load,
    pools_where,
    put,
    region,
    schema_key,
)
from stacktest import REPRESENTATIVE, ROOT, STACKS, render_stack

OPERANDS = sorted(STACK_SCHEMA["properties"]["config"]["properties"]["gpu-stack:operands"]["properties"])
# operands whose image another key sets (vgpu.managerImage; peermem runs from the driver's image)
WITH_IMAGE = [op for op in OPERANDS if operand_targets.OPERANDS[op].image is not None]
# the driver and its sidecars take an image name only (the node's OS is appended to the tag)
OS_TAGGED = {op: operand_targets.OPERANDS[op].os_tagged for op in OPERANDS}
OUTSIDE_REGISTRY = "docker.io/someone"


def _set(path: Path_, value: Any, applies=lambda cfg: True):
    def make(config, cfg, stack) -> Optional[Path_]:
        return put(config, path, value) if applies(cfg) else None
    return make


def _extra_volume(config, cfg, stack) -> Optional[Path_]:
    if not cfg.driver_pools:
        return None
    put(config, ("gpu-stack:driver", "extraVolumes"), [{"name": "vendor-tools", "mountPath": "/opt/vendor",
                                                        "hostPath": {"path": "/opt/vendor-tools"}}])
    return ("gpu-stack:driver", "extraVolumes", 0, "hostPath", "path")


def _job_mapping(config, cfg, stack) -> Optional[Path_]:
    if not cfg.components.dcgm_exporter:
        return None
    put(config, ("gpu-stack:dcgmExporter", "hpcJobMapping"), {"enabled": True, "directory": "/var/lib/job-files"})
    return ("gpu-stack:dcgmExporter", "hpcJobMapping", "directory")


def _replicas(config, cfg, stack) -> Optional[Path_]:
    index = first(pools_where(cfg, lambda p: p.sharing.strategy in ("time-slicing", "mps")))
    return None if index is None else put(config, ("gpu-stack:nodePools", index, "sharing", "replicas"), 40)


def _no_eviction(config, cfg, stack) -> Optional[Path_]:
    if not cfg.driver_pools:
        return None
    if cfg.upgrade.drain.enabled:
        put(config, ("gpu-stack:upgrade", "drain", "enabled"), False)
    return put(config, ("gpu-stack:upgrade", "gpuPodEviction"), False)


def _no_waves(config, cfg, stack) -> Optional[Path_]:
    return put(config, ("gpu-stack:upgrade", "waves"), []) if len(cfg.driver_pools) > 1 else None


def _shared_selector(config, cfg, stack) -> Optional[Path_]:
    """A later pool of another workload type selects by a label of its own, which an earlier pool's nodes may carry
    too: one node could then be either type."""
    pools = cfg.node_pools
    for later in range(1, len(pools)):
        if any(pools[earlier].workload_type != pools[later].workload_type for earlier in range(later)):
            return put(config, ("gpu-stack:nodePools", later, "nodeSelector"), {"gpu-stack.test/pool": "overlapping"})
    return None


def _gpu_namespace_moved(config, cfg, stack) -> Optional[Path_]:
    # only where the policy config names the GPU namespace; elsewhere the provider's namespace is the GPU one
    configured = pack_config(stack).get("privileged-only-where-needed", {})
    if not isinstance(configured, dict) or not configured.get("gpuNamespace"):
        return None
    return put(config, ("gpu-stack:cluster", "namespace"), "gpu-elsewhere")


def _toolkit_image(config, cfg, stack) -> Optional[Path_]:
    """The Driver Toolkit image of one RHCOS build, pulled from outside the registries OpenShift's stack allows."""
    images = get(config, ("gpu-stack:cluster", "openshift", "driverToolkit", "images")) or {}
    for os_tag, builds in images.items():
        for build in builds:
            return put(config, ("gpu-stack:cluster", "openshift", "driverToolkit", "images", os_tag, build),
                       f"{OUTSIDE_REGISTRY}/driver-toolkit@sha256:{'0' * 64}")
    return None


def _runtime_file(key: str, path: str, containerd_only: bool = False):
    """A runtime file in /etc itself: the toolkit would mount all of /etc read-write."""
    def applies(cfg) -> bool:
        return cfg.components.toolkit and (not containerd_only or cfg.cluster.container_runtime == "containerd")
    return _set(("gpu-stack:toolkit", key), path, applies)


def _deployed(operand: str):
    # the config refuses an override of an operand the stack does not deploy
    return lambda cfg: operand in deployed_operands(cfg)


def _operand_repository(operand: str):
    # each its own: two containers pulling one image are one finding (images-pinned reports an image once per object)
    return _set((f"{NAMESPACE}operands", operand, "repository"), f"{OUTSIDE_REGISTRY}/{operand.lower()}", _deployed(operand))


def _operand_image(operand: str):
    return _set((f"{NAMESPACE}operands", operand, "image"), f"{OUTSIDE_REGISTRY}/{operand.lower()}-image:1.0", _deployed(operand))


def _operand_gpu(operand: str, section: str):
    def make(config, cfg, stack) -> Optional[Path_]:
        if not _deployed(operand)(cfg):
            return None
        # a GPU is never overcommitted: a request comes with the same limit (the request is what is reported)
        put(config, (f"{NAMESPACE}operands", operand, "resources"),
            {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}} if section == "requests" else {section: {"nvidia.com/gpu": 1}})
        return (f"{NAMESPACE}operands", operand, "resources", section, "nvidia.com/gpu")
    return make


def _operand_image_env(operand: str):
    """A variable named *_IMAGE, which images-pinned reads as an image the pod pulls (the validator's workload)."""
    def make(config, cfg, stack) -> Optional[Path_]:
        if not _deployed(operand)(cfg):
            return None
        put(config, (f"{NAMESPACE}operands", operand, "env"), [{"name": "EXTRA_IMAGE", "value": f"{OUTSIDE_REGISTRY}/{operand.lower()}-env:1"}])
        return (f"{NAMESPACE}operands", operand, "env", 0, "value")
    return make


PINNED, PRIVILEGED, SHARING, UPGRADE, QUOTA, WORKLOADS, TOKENS = (
    "policy/images-pinned", "policy/privileged-only-where-needed", "policy/sharing-sane", "policy/upgrade-safety",
    "policy/gpu-quota", "policy/one-workload-type-per-node", "policy/gpu-node-token-reach")

# Three batches per stack: an operand's full image reference would take the place of the repository edited in the
# first; one container's GPU request is one quota finding, whether pluginWorkload, its limits or its requests make
# it; and the GPU namespace moved makes every privileged object's namespace the finding.
BATCHES: tuple[tuple[Edit, ...], ...] = (
    (
        Edit("gpu-stack:driver.extraVolumes[].hostPath.path", PRIVILEGED, _extra_volume),
        Edit("gpu-stack:dcgmExporter.hpcJobMapping.directory", PRIVILEGED, _job_mapping),
        Edit("gpu-stack:registry.override", PINNED, _set(("gpu-stack:registry", "override"), "docker.io/mirror")),
        Edit("gpu-stack:nodeAgent.image", PINNED,
             _set(("gpu-stack:nodeAgent", "image"), f"{OUTSIDE_REGISTRY}/node-agent:0.10.0", lambda cfg: cfg.node_agent.image)),
        Edit("gpu-stack:vgpu.managerImage", PINNED,
             _set(("gpu-stack:vgpu", "managerImage"), f"{OUTSIDE_REGISTRY}/vgpu-manager:570.172.07",
                  lambda cfg: cfg.vgpu.manager_image)),
        Edit("gpu-stack:nodePools[].sharing.replicas", SHARING, _replicas),
        Edit("gpu-stack:upgrade.maxUnavailable", UPGRADE,
             _set(("gpu-stack:upgrade", "maxUnavailable"), "50%", lambda cfg: cfg.driver_pools and cfg.components.node_labeler)),
        Edit("gpu-stack:upgrade.gpuPodEviction", UPGRADE, _no_eviction),
        Edit("gpu-stack:upgrade.waves", UPGRADE, _no_waves),
        # 1.29 does not stamp the node claim in tokens: no node-bound policy, every GPU-node write unconfined
        Edit("gpu-stack:cluster.kubernetesVersions", TOKENS,
             _set(("gpu-stack:cluster", "kubernetesVersions"), ["1.29", "1.33"], lambda cfg: not cfg.dra_pools)),
        Edit("gpu-stack:validator.pluginWorkload", QUOTA,
             _set(("gpu-stack:validator", "pluginWorkload"), True, lambda cfg: cfg.components.device_plugin)),
        Edit("gpu-stack:nodePools[].nodeSelector", WORKLOADS, _shared_selector),
        Edit("gpu-stack:toolkit.runtimeConfig", PRIVILEGED, _runtime_file("runtimeConfig", "/etc/config.toml")),
        Edit("gpu-stack:toolkit.runtimeDropInConfig", PRIVILEGED, _runtime_file("runtimeDropInConfig", "/etc/99-nvidia.toml")),
        Edit("gpu-stack:toolkit.runtimeSocket", PRIVILEGED, _runtime_file("runtimeSocket", "/etc/containerd.sock", containerd_only=True)),
        Edit("gpu-stack:cluster.openshift.driverToolkit.images{}{}", PINNED, _toolkit_image),
        *(Edit(f"gpu-stack:operands.{op}.repository", PINNED, _operand_repository(op)) for op in WITH_IMAGE),
        *(Edit(f"gpu-stack:operands.{op}.env[].value", PINNED, _operand_image_env(op)) for op in OPERANDS),
    ),
    (
        Edit("gpu-stack:cluster.namespace", PRIVILEGED, _gpu_namespace_moved),
        *(Edit(f"gpu-stack:operands.{op}.image", PINNED, _operand_image(op)) for op in WITH_IMAGE if not OS_TAGGED[op]),
        *(Edit(f"gpu-stack:operands.{op}.resources.limits{{}}", QUOTA, _operand_gpu(op, "limits")) for op in OPERANDS),
    ),
    tuple(Edit(f"gpu-stack:operands.{op}.resources.requests{{}}", QUOTA, _operand_gpu(op, "requests")) for op in OPERANDS),
)
EDITS = tuple(edit for batch in BATCHES for edit in batch)

@functools.lru_cache(maxsize=None)
def _loaded(stack: str):
    return load_stack(stack)[2]


def edited_stack(stack: str, batch: int, folder: Path) -> tuple[Path, str, dict[str, tuple[Edit, Path_]]]:
    """The shipped stack file with every edit of `batch` that applies to it: (file, its text, key -> (edit, path))."""
    text = (ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text()
    document = load(text)
    cfg = _loaded(stack)
    made: dict[str, tuple[Edit, Path_]] = {}
    for edit in BATCHES[batch]:
        path = edit.make(document["config"], cfg, stack)
        if path is not None:
            made[key_path(path)] = (edit, path)
    path = folder / f"Pulumi.{stack}.yaml"
    edited = dump(document)
    path.write_text(edited)
    return path, edited, made


def checked_log(path: Path) -> tuple[dict[str, Any], set[str]]:
    """`gpustack check --format sarif` of one stack file, as the CLI builds it, and the keys its render records as
    setting a field (from the same render)."""
    checked = check_one(str(path), argparse.Namespace(preview=False, policy_config=None))
    found = findings.from_check(checked.stack, checked.recording, checked.problems, checked.refused, checked.violations)
    log = sarif.log([(f, path, KeyLines.of_file(path)) for f in found])
    objects = (checked.recording.sources or {}).get("objects", {})
    return log, {source["key"] for entry in objects.values() for source in entry["fields"].values()}


def _regions(result: dict[str, Any]) -> tuple[int, int, int, int]:
    region_ = result["locations"][0]["physicalLocation"]["region"]
    return region_["startLine"], region_["startColumn"], region_["endLine"], region_["endColumn"]


# The first batch (every policy but the operands' images and GPU requests) on prod-managed and dev (the extraVolumes
# host path of the issue) in make test; every batch on every stack in make test-all.
IN_MAKE_TEST = {("prod-managed", 0), ("dev", 0)}
CASES = [pytest.param(stack, batch, marks=() if (stack, batch) in IN_MAKE_TEST else pytest.mark.matrix, id=f"{stack}-{batch}")
         for stack in STACKS for batch in range(len(BATCHES))]


@pytest.mark.parametrize("stack, batch", CASES)
def test_an_edit_that_makes_a_rule_fail_is_annotated_on_the_edited_key(stack, batch, tmp_path):
    path, text, made = edited_stack(stack, batch, tmp_path)
    log, sources = checked_log(path)
    results = log["runs"][0]["results"]
    # every result has a full region, and one rule has one result per line
    placed = [(r["ruleId"], _regions(r)) for r in results]
    assert len(placed) == len(set(placed)), "two results of one rule on one line"
    missed = []
    for key, (edit, key_at) in made.items():
        if not _applies(sources, key):
            continue
        want = region(text, key_at)
        if (edit.rule, want) not in placed:
            got = [(r["ruleId"], r["properties"].get("key"), _regions(r)) for r in results if r["ruleId"] == edit.rule]
            missed.append(f"{key} ({edit.rule}) not annotated at {want}; {edit.rule} results: {got}")
    assert not missed, "\n".join(missed)


def _applies(keys: set[str], key: str) -> bool:
    return any(k == key or k.startswith(key + ".") or k.startswith(key + "[") for k in keys)


def keys_setting_fields(stacks) -> dict[str, set[str]]:
    """Schema key -> the shipped stacks whose render records it setting a field."""
    found: dict[str, set[str]] = {}
    for stack in stacks:
        objects = (render_stack(stack).sources or {}).get("objects", {})
        for entry in objects.values():
            for source in entry["fields"].values():
                key = schema_key(source["key"])
                assert key is not None, f"{stack}: the source map names {source['key']}, which docs/stack.schema.json lacks"
                found.setdefault(key, set()).add(stack)
    return found


# Keys that set a field of a shipped stack's render but that no accepted value of makes a policy, schema or
# API-server rule fail, and why; `test_every_key_that_sets_a_field_is_edited_or_cannot_cause_a_finding` holds
# this and EDITS to every key the source maps name.
VALIDATED = "load_config takes only what the API server takes here, and no policy judges the field"
PINNED_BY_CONFIG = ("load_config takes only a pinned tag or digest, never latest: all images-pinned asks of a version "
                    "(the registry is its repository's key)")
DRIVER_FITS = "load_config refuses a driver branch or kernel module type a pool's GPUs cannot run, what driver-supports-gpu judges"
MIG_FITS = "load_config refuses a MIG layout a pool's GPUs cannot hold, what mig-layout-fits-gpu judges"
MOVED_AND_TOLD = ("privileged-only-where-needed follows a moved directory where the containers are told it, which "
                  "gpu-stack always does, and load_config refuses the system directories")
CATALOGUED = "load_config takes only what components/catalogs lists, and checks it against the pool's GPU model"
UNREACHABLE: dict[str, str] = {
    **{f"gpu-stack:cluster.openshift.{key}": VALIDATED for key in ("proxy.httpProxy", "proxy.httpsProxy", "proxy.noProxy", "version")},
    **{f"gpu-stack:daemonsets.{key}": VALIDATED for key in (
        "maxUnavailable", "priorityClassName", "tolerations[].effect", "tolerations[].key", "tolerations[].operator")},
    "gpu-stack:cluster.containerRuntime": ("containerd or cri-o: the toolkit's files and every operand's CDI settings "
                                           "follow it together, which is what cdi-consistency judges"),
    "gpu-stack:dcgmExporter.internalTrafficPolicy": VALIDATED,
    "gpu-stack:dcgmExporter.listenAddress": VALIDATED,
    "gpu-stack:devicePlugin.migStrategy": "load_config refuses a strategy a pool's GPUs cannot take; sharing-sane and "
                                          "mig-layout-fits-gpu judge the per-pool documents it feeds",
    **{f"gpu-stack:driver.{key}": VALIDATED for key in (
        "certConfig.files[]", "certConfig.name", "licensingConfig.secretName", "repoConfig.configMapName", "repoConfig.files[]")},
    "gpu-stack:driver.kernelModuleType": DRIVER_FITS,
    "gpu-stack:nodePools[].driver.kernelModuleType": DRIVER_FITS,
    "gpu-stack:nodePools[].driver.version": DRIVER_FITS,
    "gpu-stack:versions.driver": DRIVER_FITS,
    "gpu-stack:hostPaths.kubeletRootDir": MOVED_AND_TOLD,
    "gpu-stack:toolkit.installDir": MOVED_AND_TOLD,
    "gpu-stack:devicePlugin.mpsRoot": MOVED_AND_TOLD,
    "gpu-stack:toolkit.runtimeClass": VALIDATED,
    "gpu-stack:migLayouts{}{}": MIG_FITS,
    "gpu-stack:nodePools[].sharing.migLayout": MIG_FITS,
    **{f"gpu-stack:monitoring.{key}": VALIDATED for key in (
        "alerts.ruleLabels{}", "alerts.utilizationFor", "alerts.validatorNotReadyFor", "dashboard.folder", "dashboard.labels{}",
        "serviceMonitor.additionalLabels{}", "serviceMonitor.interval", "serviceMonitor.relabelings[].sourceLabels[]",
        "serviceMonitor.relabelings[].targetLabel", "serviceMonitor.scrapeTimeout")},
    "gpu-stack:nodePools[].driver.daemonSetName": VALIDATED,
    "gpu-stack:nodePools[].name": VALIDATED,
    "gpu-stack:nodePools[].os": CATALOGUED,
    "gpu-stack:nodePools[].gpuModel": CATALOGUED,
    "gpu-stack:nodePools[].vgpuConfig": CATALOGUED,
    "gpu-stack:vgpu.defaultConfig": CATALOGUED,
    "gpu-stack:nodePools[].workloadType": ("two pools one node could match are one-workload-type-per-node's finding, "
                                           "annotated on the later pool's nodeSelector, where its fix goes"),
    **{f"gpu-stack:operands.{op}.env[].name": ("a variable's name says what its value is; a finding about the variable "
                                               "(an image in *_IMAGE) is annotated at its value") for op in OPERANDS},
    **{f"gpu-stack:operands.{op}.priorityClassName": VALIDATED for op in OPERANDS},
    "gpu-stack:registry.pullSecrets[]": VALIDATED,
    **{f"gpu-stack:sandboxWorkloads.{key}": VALIDATED for key in (
        "ccManager.defaultMode", "defaultWorkload", "kubevirt.name", "kubevirt.namespace")},
    "gpu-stack:upgrade.drain.enabled": ("with GPU pods evicted, draining too or not breaks no rule; the finding that "
                                        "neither happens is annotated at gpuPodEviction, the fix its message names first"),
    **{f"gpu-stack:upgrade.{key}": VALIDATED for key in (
        "drain.deleteEmptyDirData", "drain.force", "drain.podSelector", "drain.timeoutSeconds", "maxParallelUpgrades",
        "nodeReadyTimeoutSeconds", "strategy", "waitForCompletion.podSelector")},
    "gpu-stack:validation.mode": VALIDATED,
    **{f"gpu-stack:versions.{name}": PINNED_BY_CONFIG for name in (
        STACK_SCHEMA["properties"]["config"]["properties"]["gpu-stack:versions"]["properties"]) if name != "driver"},
}


def _edited(key: str, edited: set[str]) -> bool:
    return any(key == e or key.startswith((e + ".", e + "[", e + "{")) for e in edited)


# The representative stacks (already rendered by other tests) in make test; every stack in make test-all.
@pytest.mark.parametrize("stacks", [pytest.param(REPRESENTATIVE, id="representative"),
                                    pytest.param(tuple(STACKS), id="every-stack", marks=pytest.mark.matrix)])
def test_every_key_that_sets_a_field_is_edited_or_cannot_cause_a_finding(stacks):
    found = keys_setting_fields(stacks)
    edited = {edit.key for edit in EDITS}
    assert sorted(k for k in found if not _edited(k, edited) and k not in UNREACHABLE) == []
    assert sorted(k for k in UNREACHABLE if _edited(k, edited)) == []
    if len(stacks) == len(STACKS):
        # a key named here that no shipped stack's render sets any more is a stale entry (the families written for
        # every operand and every version are left out: not every one is deployed by a shipped stack)
        assert sorted(k for k in UNREACHABLE if k not in found and not k.startswith(("gpu-stack:operands.", "gpu-stack:versions."))) == []
    # every key named is one of the schema's
    assert sorted(k for k in [*UNREACHABLE, *edited] if schema_key(k.replace("[]", "[0]").replace("{}", ".x")) is None) == []


def test_every_edit_applies_to_a_shipped_stack():
    taken: set[str] = set()
    for stack in STACKS:
        config = load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
        taken |= {edit.key for edit in EDITS if edit.make(config, _loaded(stack), stack) is not None}
    assert sorted({edit.key for edit in EDITS} - taken) == [], "edits no shipped stack takes: name a stack that can, or drop them"
