"""The nodes (`kubectl get nodes -o yaml`): GPU models, OS, workload types and kernels from the GPU nodes' labels,
grouped into node pools with the fewest selector labels that tell them apart (one pool without --nodes)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from components.catalogs import catalog
from components.catalogs import consts
from components.config import node_images
from components.config.base import label_value_problem, qualified_name_problem
from gpustack.importer.common import ImportInputError, _slug, objects_of
from gpustack.importer.shapes import MAPPING, STRING, STRING_MAP, Kind, check_input, item_path
from node_images import catalog as node_image_catalog

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ARCH_LABEL = "kubernetes.io/arch"
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_MEMORY = "nvidia.com/gpu.memory"
NFD_OS_VERSION_MAJOR = "feature.node.kubernetes.io/system-os_release.VERSION_ID.major"
# Labels the gpu-stack node agent writes; a pool selecting on one would never settle (node-agent labels.py).
AGENT_WRITTEN = (consts.POOL_LABEL, consts.GPU_PRESENT, consts.WORKLOAD_CONFIG, consts.DEVICE_PLUGIN_CONFIG,
                 consts.MIG_CONFIG, consts.VGPU_CONFIG)


def model_from_product(product: str, memory_mib: Optional[str] = None) -> Optional[str]:
    """The catalog model of a GFD `nvidia.com/gpu.product` value, e.g. NVIDIA-A100-SXM4-80GB -> A100-80GB."""
    base = re.sub(r"-(SHARED|MIG-.*)$", "", product, flags=re.IGNORECASE)
    tokens = {t.upper() for t in re.split(r"[-_ ]+", base)}
    gib = None
    for token in tokens:
        if re.fullmatch(r"[0-9]{1,6}GB", token):
            gib = int(token[:-2])
    if gib is None and memory_mib and re.fullmatch(r"[0-9]{1,9}", memory_mib):
        gib = round(int(memory_mib) / 1024)
    for name in ("GB300", "GB200", "B300", "B200", "GH200", "H200", "L40S", "L4", "A30", "A10", "T4", "V100"):
        if name in tokens:
            return name
    if "H100" in tokens:
        if "NVL" in tokens:
            return "H100-NVL"
        return "H100-96GB" if gib is not None and gib >= 90 else "H100-80GB"
    if "A100" in tokens and gib is not None:
        return "A100-80GB" if gib >= 60 else "A100-40GB"
    if {"RTX", "PRO", "6000"} <= tokens:
        return "RTX-PRO-6000"
    return None


def os_of(labels: Mapping[str, str]) -> Optional[str]:
    os_id = labels.get(consts.NFD_OS_ID)
    version = labels.get(consts.NFD_OS_VERSION_ID)
    if not os_id or not version:
        return None
    if os_id in node_image_catalog.MAJOR_ONLY_OS:
        version = labels.get(NFD_OS_VERSION_MAJOR) or version.split(".")[0]
    return f"{os_id}{version}"


@dataclass(frozen=True)
class _Node:
    name: str
    labels: dict[str, str]
    runtime: Optional[str]
    kubelet: Optional[str]

    @property
    def is_gpu(self) -> bool:
        return self.labels.get(consts.GPU_PRESENT) == "true" or any(self.labels.get(l) == "true" for l in consts.NFD_GPU_LABELS)


# What the import reads of a Node (core/v1): its name, labels (string -> string) and the versions it reports.
NODE_FIELDS: dict[str, Kind] = {
    "metadata": MAPPING,
    "metadata.name": STRING,
    "metadata.labels": STRING_MAP,
    "status": MAPPING,
    "status.nodeInfo": MAPPING,
    "status.nodeInfo.containerRuntimeVersion": STRING,
    "status.nodeInfo.kubeletVersion": STRING,
}
# A node carries dozens of NFD and GFD labels, never thousands: a dump with more is not one kubectl printed.
MAX_NODE_LABELS = 1024


def nodes_of(document: Any, path: str) -> list[_Node]:
    nodes = []
    for i, obj in enumerate(objects_of(document, ("Node",), path)):
        at = item_path(obj, document, i)
        check_input(obj, NODE_FIELDS, path, at)
        meta = obj.get("metadata") or {}
        where = f"{path}: {at}." if at else f"{path}: "
        if not meta.get("name"):
            raise ImportInputError(f"{where}metadata.name: a Node has a name")
        _check_labels(meta.get("labels") or {}, f"{where}metadata.labels")
        info = (obj.get("status") or {}).get("nodeInfo") or {}
        nodes.append(_Node(meta["name"], dict(meta.get("labels") or {}), info.get("containerRuntimeVersion"),
                           info.get("kubeletVersion")))
    return nodes


def _check_labels(labels: Mapping[str, str], where: str) -> None:
    """Label keys and values as the API server takes them (bounded lengths), so no label of a dump is garbage."""
    if len(labels) > MAX_NODE_LABELS:
        raise ImportInputError(f"{where}: {len(labels)} labels; at most {MAX_NODE_LABELS} (nodes.MAX_NODE_LABELS)")
    for key, value in labels.items():
        problem = qualified_name_problem(key)
        if problem:
            raise ImportInputError(f"{where}: key {problem}")
        problem = label_value_problem(value)
        if problem:
            raise ImportInputError(f"{where}.{key}: {problem}")


@dataclass
class _Group:
    signature: tuple
    selector: dict[str, str]
    nodes: list[_Node] = field(default_factory=list)


class NodePoolsMixin:
    """Mixed into build._Importer: the node pools, and the container runtime the GPU nodes report."""

    def _pools(self) -> list[dict[str, Any]]:
        if self.nodes is None:
            return self._nvd_pools_without_nodes() if self.crd_mode else [self._single_pool()]
        gpu_nodes = [n for n in self.nodes if n.is_gpu]
        if not gpu_nodes:
            raise ImportInputError("--nodes: no GPU node (nvidia.com/gpu.present=true or an NFD NVIDIA PCI label) in the dump")
        signatures = {n.name: self._signature(n) for n in gpu_nodes}
        groups = self._group(gpu_nodes, signatures)
        pools = [self._pool(group) for group in groups]
        names: dict[str, int] = {}
        base_names = [pool["name"] for pool in pools]
        for pool, group in zip(pools, groups):
            if base_names.count(pool["name"]) > 1 and group.selector:
                pool["name"] = f"{pool['name']}-{_slug('-'.join(group.selector.values()))}"[:40].strip("-")
        for pool in pools:
            count = names.get(pool["name"], 0)
            names[pool["name"]] = count + 1
            if count:
                pool["name"] = f"{pool['name'][:37]}-{count + 1}"
        if self.mig_layouts:
            self.put("migLayouts", dict(sorted(self.mig_layouts.items())),
                     origin=f"configmap:{self.spec.get('migManager.config.name')}")
        return sorted(pools, key=lambda p: (len(p["nodeSelector"]) == 0, p["name"]))

    def _model(self, node: _Node) -> str:
        for selector, model in self.facts.gpu_models:
            if selector is not None and node.labels.get(selector[0]) == selector[1]:
                return model
        product = node.labels.get(GPU_PRODUCT)
        if product:
            model = model_from_product(product, node.labels.get(GPU_MEMORY))
            if model is None:
                raise ImportInputError(f"--nodes: node {node.name} has {GPU_PRODUCT}={product}, which maps to no gpu-stack "
                                       f"model ({', '.join(catalog.GPU_MODELS)}); name it with --gpu-model KEY=VALUE:MODEL")
            return model
        default = [model for selector, model in self.facts.gpu_models if selector is None]
        if default:
            return default[0]
        raise ImportInputError(f"--nodes: node {node.name} has no {GPU_PRODUCT} label (GFD does not run on VM nodes); "
                               "name its model with --gpu-model KEY=VALUE:MODEL or --gpu-model MODEL")

    def _workload(self, node: _Node) -> str:
        label = node.labels.get(consts.WORKLOAD_CONFIG)
        if not self.sandbox:
            if label and label != "container":
                self.report(f"node:{node.name}/{consts.WORKLOAD_CONFIG}", label,
                            "sandboxWorkloads are disabled, so the operator treats every node as a container node")
            return "container"
        return label if label in consts.WORKLOAD_TYPES else self.default_workload

    def _signature(self, node: _Node) -> tuple:
        workload = self._workload(node)
        model = self._model(node)
        os_tag = os_of(node.labels) or self.facts.os
        if os_tag is None:
            raise ImportInputError(f"--nodes: node {node.name} has no NFD OS labels ({consts.NFD_OS_ID}, "
                                   f"{consts.NFD_OS_VERSION_ID}); give the OS with --os")
        owner = self._owner(node)
        precompiled = owner.precompiled if self.crd_mode and owner is not None else not self.crd_mode and self.driver_mode == "precompiled"
        kernel = node.labels.get(consts.NFD_KERNEL_FULL) if precompiled and workload == "container" else None
        if precompiled and workload == "container" and not kernel:
            raise ImportInputError(f"--nodes: node {node.name} has no {consts.NFD_KERNEL_FULL} label, which precompiled drivers need")
        container = workload == "container"
        return (
            model,
            os_tag,
            workload,
            node.labels.get(consts.MIG_CONFIG) if container else None,
            node.labels.get(consts.DEVICE_PLUGIN_CONFIG) if container else None,
            node.labels.get(consts.VGPU_CONFIG) if workload == "vm-vgpu" else None,
            kernel,
            node.labels.get(ARCH_LABEL, "amd64") if kernel else None,
            owner.name if owner is not None else None,
        )

    def _group(self, nodes: list[_Node], signatures: Mapping[str, tuple]) -> list[_Group]:
        if len(set(signatures.values())) == 1:
            return [_Group(signatures[nodes[0].name], {}, list(nodes))]
        for key in self.facts.pool_labels:
            if key in AGENT_WRITTEN or key.startswith(consts.DEPLOY_PREFIX):
                raise ImportInputError(f"--pool-label {key}: the gpu-stack node agent writes this label, so pools cannot select by it")
        owner_labels = self._nvd_candidates() if self.crd_mode else []
        candidates = [*self.facts.pool_labels, *owner_labels, INSTANCE_TYPE, consts.NFD_OS_ID, consts.NFD_OS_VERSION_ID]
        if self.driver_mode == "precompiled" or any(s[6] for s in signatures.values()):
            candidates.append(consts.NFD_KERNEL_FULL)
        usable = [k for k in dict.fromkeys(candidates) if all(k in n.labels for n in nodes)]

        def separates(keys: Sequence[str]) -> bool:
            seen: dict[tuple, tuple] = {}
            for node in nodes:
                values = tuple(node.labels[k] for k in keys)
                if seen.setdefault(values, signatures[node.name]) != signatures[node.name]:
                    return False
            return True

        chosen: list[str] = []
        for key in usable:
            if separates(chosen):
                break
            chosen.append(key)
        if not separates(chosen):
            raise ImportInputError(
                "--nodes: GPU nodes that need different pools share every selector label "
                f"({', '.join(usable) or 'none usable'}); label them apart and name the label with --pool-label KEY")
        for key in list(chosen):
            fewer = [k for k in chosen if k != key]
            if fewer and separates(fewer):
                chosen = fewer
        groups: dict[tuple, _Group] = {}
        for node in nodes:
            selector = {k: node.labels[k] for k in chosen}
            key = (signatures[node.name], tuple(selector.values()))
            groups.setdefault(key, _Group(signatures[node.name], selector)).nodes.append(node)
        return list(groups.values())

    def _single_pool(self) -> dict[str, Any]:
        default = [model for selector, model in self.facts.gpu_models if selector is None]
        if not default:
            raise ImportInputError("--gpu-model MODEL is required without --nodes (the ClusterPolicy names no GPU model)")
        if self.driver_mode == "precompiled":
            raise ImportInputError("spec.driver.usePrecompiled is true: precompiled drivers are chosen per kernel, so pass "
                                   "--nodes (their kernel-version.full labels pick node_images/catalog.yaml entries)")
        if self.facts.os is None:
            raise ImportInputError("--os is required without --nodes (the driver image tag carries the OS, e.g. ubuntu22.04)")
        workload = self.default_workload if self.sandbox else "container"
        self._refuse_mig_without_nodes(default[0], workload)
        self.notes.append("without --nodes: one pool with an empty nodeSelector serves every GPU node; node labels "
                          "(nvidia.com/mig.config, nvidia.com/device-plugin.config, nvidia.com/gpu.workload.config) were not read")
        plugin_key = self.spec.peek("devicePlugin.config.default") or None
        signature = (default[0], self.facts.os, workload, None, plugin_key, None, None, None, None)
        return self._pool(_Group(signature, {}, []))

    def _refuse_mig_without_nodes(self, model: str, workload: str) -> None:
        """Without --nodes a MIG-capable pool gets no layout, and gpu-stack labels such nodes all-disabled: stop
        where the operator may have left them partitioned."""
        if (workload == "container" and catalog.GPU_MODELS[model].mig_capable and self.spec.get("migManager.enabled")
                and (self.mig_strategy in ("single", "mixed") or self.spec.get("migManager.config.default") == "")):
            why = (f"mig.strategy {self.mig_strategy}" if self.mig_strategy != "none" else "an empty migManager.config.default")
            raise ImportInputError(
                f"{why} on {model} nodes: pass --nodes, whose {consts.MIG_CONFIG} labels say "
                "which MIG layout each node runs. Without them the pool would have no MIG layout, and gpu-stack labels "
                "the MIG-capable nodes of such a pool all-disabled, which wipes their MIG partitions")

    def _pool(self, group: _Group) -> dict[str, Any]:
        model, os_tag, workload, mig_label, plugin_label, vgpu_label, kernel, arch, owner = group.signature
        nodes = ", ".join(n.name for n in group.nodes) or "every GPU node"
        name = _slug(model)
        if workload != "container":
            name += "-vm" if workload == "vm-passthrough" else "-vgpu"
        pool: dict[str, Any] = {"name": name[:40], "nodeSelector": dict(group.selector), "gpuModel": model}
        if kernel:
            pool["nodeImage"] = self._node_image(kernel, os_tag, arch, nodes)
        else:
            pool["os"] = os_tag
        if workload != "container":
            pool["workloadType"] = workload
        if vgpu_label:
            pool["vgpuConfig"] = vgpu_label
        if workload == "container":
            sharing = self._sharing(model, mig_label, plugin_label, group)
            if sharing:
                pool["sharing"] = sharing
        if self.crd_mode:
            driver = next((d for d in self.nvidia_drivers if d.name == owner), None)
            self._nvd_pool_driver(pool, driver, os_tag, kernel)
        return pool

    def _node_image(self, kernel: str, os_tag: str, arch: str, nodes: str) -> str:
        for image in node_images():
            if image.kernel == kernel and image.os_tag == os_tag and image.arch == arch:
                return image.name
        raise ImportInputError(f"--nodes: {nodes} run kernel {kernel} on {os_tag} ({arch}), which node_images/catalog.yaml "
                               "has no entry for; precompiled pools name one (add it, then import again)")

    def _runtime_from_nodes(self) -> Optional[str]:
        if self.nodes is None:
            return None
        runtimes = {(n.runtime or "").split(":")[0] for n in self.nodes if n.is_gpu and n.runtime}
        # The operator's getRuntime: containerd wins when any GPU node runs it.
        if "containerd" in runtimes:
            return "containerd"
        if "cri-o" in runtimes:
            return "cri-o"
        if runtimes:
            raise ImportInputError(f"--nodes: GPU nodes run {', '.join(sorted(runtimes))}; gpu-stack supports containerd and cri-o")
        return None
