"""The import's NVIDIADriver part (see nvidiadriver.py for the objects): which object owns each GPU node, the pools
each object drives and their drivers, what each object's fields became (the ledger), and the report naming them
by object."""

from __future__ import annotations

import copy
from typing import Any, Optional, Sequence

from components.catalogs import consts
from gpustack.importer.common import ImportInputError, NotCarried, _slug, shown_input
from gpustack.importer.ledger import CARRIED, RENDERED_ANYWAY, REPORTED, WITHOUT_EFFECT, FieldOutcome, empty, leaves, under
from gpustack.importer.nodes import _Group
from gpustack.importer.nvidiadriver import (KEPT_DRIVER_FIELDS, PER_POOL, POD_FIELDS, REPLACED_REASON, REPLACED_SECTIONS,
                                            REPORTED_FIELDS, RESERVED_LABEL, RESERVED_LABEL_PREFIX, TEMPLATE_PRIORITY_CLASS,
                                            TEMPLATE_TOLERATION, VGPU_UNCARRIED, WITHOUT_EFFECT_FIELDS, NvidiaDriver, _agree,
                                            _get, _nvd_path, _translate, operator_daemonset_name, translated_path)


class NvidiaDriverMixin:
    """Mixed into build._Importer: the NVIDIADriver objects, their nodes and what each carries."""

    def _nvidia_driver_spec(self, effective: dict[str, Any], drivers: Sequence[NvidiaDriver]) -> dict[str, Any]:
        """The effective spec the mapping reads: in NVIDIADriver mode the driver sections come from the objects."""
        self.nvidia_drivers = list(drivers)
        self.replaced: dict[str, Any] = {}
        self.replaced_no_effect: list[NotCarried] = []
        self._nvd_owned: dict[str, list[dict[str, Any]]] = {}  # object name -> the pools it drives (their dicts)
        self.nvd_primary: Optional[NvidiaDriver] = None
        crd = (effective.get("driver") or {}).get("useNvidiaDriverCRD") is True
        self.crd_mode = crd
        if not crd:
            return effective
        if not drivers:
            raise ImportInputError(
                "spec.driver.useNvidiaDriverCRD is true: the operator deploys the drivers from NVIDIADriver objects, "
                "so the ClusterPolicy's driver section says nothing of them. Pass them with --nvidiadriver FILE "
                "(kubectl get nvidiadrivers -o yaml), or import with --from-cluster")
        gpu = [d for d in drivers if not d.host_manager]
        managers = [d for d in drivers if d.host_manager]
        _agree(gpu, "driver (gpu and vgpu NVIDIADrivers)")
        _agree(managers, "vGPU manager (vgpu-host-manager NVIDIADrivers)")
        for driver in managers:
            if driver.spec.get("version") != managers[0].spec.get("version"):
                raise ImportInputError(
                    f"NVIDIADrivers {managers[0].name} and {driver.name} run vGPU manager versions "
                    f"{shown_input(managers[0].spec.get('version'))} and {shown_input(driver.spec.get('version'))}: "
                    "gpu-stack runs one vGPU manager image (vgpu.managerImage) on every vm-vgpu pool")
        spec = copy.deepcopy(effective)
        for section in REPLACED_SECTIONS:
            if section in spec:
                self.replaced[section] = spec.pop(section)
        kept = {k: v for k, v in (self.replaced.get("driver") or {}).items() if k in KEPT_DRIVER_FIELDS}
        primary = self.nvd_primary = self._primary(gpu)
        sections = _translate(primary.spec, host_manager=False) if primary else {}
        if managers:
            sections.update(_translate(managers[0].spec, host_manager=True))
        sections.setdefault("driver", {}).update(kept)
        spec.update(sections)
        return spec

    def _primary(self, gpu: Sequence[NvidiaDriver]) -> Optional[NvidiaDriver]:
        """The gpu/vgpu object whose version and mode become the stack's own (the others' differ per pool): the one
        owning the most nodes, else the default, else the first by name."""
        if not gpu:
            return None
        owned = {d.name: 0 for d in gpu}
        for node in self.nodes or ():
            owner = self._owner(node)
            if owner is not None and owner.name in owned:
                owned[owner.name] += 1
        return max(gpu, key=lambda d: (owned[d.name], d.default, [-ord(c) for c in d.name]))

    # -- owners

    def _owner(self, node: Any) -> Optional[NvidiaDriver]:
        """AssignOwners: the one non-default object whose selector matches the node, else the default one."""
        if not getattr(self, "crd_mode", False) or not node.is_gpu:
            return None
        matching = [d for d in self.nvidia_drivers if not d.default and d.selects(node.labels)]
        if len(matching) > 1:
            raise ImportInputError(
                f"--nodes: node {node.name} is selected by NVIDIADrivers {', '.join(d.name for d in matching)}: their "
                "nodeSelectors overlap, which the operator refuses too (it assigns no owner). Make the selectors "
                "disjoint and import again")
        if matching:
            return matching[0]
        return next((d for d in self.nvidia_drivers if d.default), None)

    def _nvd_driver_mode(self) -> str:
        primary = getattr(self, "nvd_primary", None)
        self.spec.use("driver.enabled")
        if primary is None:
            return "host"
        return "precompiled" if primary.precompiled else "managed"

    def _nvd_candidates(self) -> list[str]:
        """Node labels the NVIDIADrivers select by: the first candidates to tell their pools apart."""
        keys = sorted({k for d in self.nvidia_drivers for k in (d.spec.get("nodeSelector") or {})})
        return [k for k in keys if k != consts.GPU_PRESENT]

    # -- pools

    def _nvd_pools_without_nodes(self) -> list[dict[str, Any]]:
        """Without --nodes: one pool per object, named after it and selecting what it selects."""
        if self.facts.os is None:
            raise ImportInputError("--os is required without --nodes (the driver image tag carries the OS, e.g. ubuntu22.04)")
        drivers = self.nvidia_drivers
        if len(drivers) > 1 and any(d.default for d in drivers):
            raise ImportInputError(
                "a default NVIDIADriver owns the GPU nodes no other one selects: pass --nodes, so the import sees which "
                "nodes those are (a pool cannot select 'every other node')")
        for i, first in enumerate(drivers):
            for other in drivers[i + 1:]:
                a, b = first.selector(), other.selector()
                if all(a[k] == b[k] for k in set(a) & set(b)):
                    raise ImportInputError(
                        f"NVIDIADrivers {first.name} and {other.name} may select the same nodes (their nodeSelectors "
                        "do not exclude each other): pass --nodes, so the import sees which nodes each owns")
        pools = []
        for driver in drivers:
            if driver.precompiled:
                raise ImportInputError(f"NVIDIADriver {driver.name}: spec.usePrecompiled is true: precompiled drivers are "
                                       "chosen per kernel, so pass --nodes (their kernel-version.full labels pick "
                                       "node_images/catalog.yaml entries)")
            model = self._model_for_selector(driver)
            workload = "vm-vgpu" if driver.host_manager else "container"
            self._refuse_mig_without_nodes(model, workload)
            selector = dict(driver.spec.get("nodeSelector") or {})
            plugin_key = self.spec.peek("devicePlugin.config.default") or None if workload == "container" else None
            signature = (model, self.facts.os, workload, None, plugin_key, None, None, None, driver.name)
            pool = self._pool(_Group(signature, selector, []))
            pool["name"] = _slug(driver.name)[:40].strip("-") or pool["name"]
            pools.append(pool)
        self.notes.append("without --nodes: one pool per NVIDIADriver, selecting what its nodeSelector selects; node "
                          "labels (nvidia.com/mig.config, nvidia.com/device-plugin.config, nvidia.com/gpu.workload.config) were not read")
        return pools

    def _model_for_selector(self, driver: NvidiaDriver) -> str:
        selector = driver.selector()
        for chosen, model in self.facts.gpu_models:
            if chosen is not None and selector.get(chosen[0]) == chosen[1]:
                return model
        default = [model for chosen, model in self.facts.gpu_models if chosen is None]
        if not default:
            raise ImportInputError(f"NVIDIADriver {driver.name}: --gpu-model MODEL (or KEY=VALUE:MODEL naming one of its "
                                   "nodeSelector labels) is required without --nodes")
        return default[0]

    def _nvd_pool_driver(self, pool: dict[str, Any], owner: Optional[NvidiaDriver], os_tag: str, kernel: Optional[str]) -> None:
        """The pool's driver from the object owning its nodes: mode, version or branch, kernel module type where they
        differ from the stack's, and the DaemonSet name the operator runs it under."""
        workload = pool.get("workloadType", "container")
        if workload != "container":
            if workload == "vm-vgpu" and owner is not None and owner.host_manager:
                pool["nodeSelector"].update({k: v for k, v in (owner.spec.get("nodeSelector") or {}).items() if k != consts.GPU_PRESENT})
                self._nvd_owned.setdefault(owner.name, []).append(pool)
            elif workload == "vm-vgpu":
                self.notes.append(f"pool {pool['name']}: no vgpu-host-manager NVIDIADriver owns its nodes, so the operator "
                                  "ran no vGPU manager there; gpu-stack's vm-vgpu pools run one (vgpu.managerImage)")
            return
        if owner is None or owner.host_manager:
            why = "no NVIDIADriver owns its nodes" if owner is None else f"NVIDIADriver {owner.name} is a vgpu-host-manager"
            if self.driver_mode != "host":
                pool.setdefault("driver", {})["mode"] = "host"
            self.notes.append(f"pool {pool['name']}: {why}, so the operator deployed no driver there: driver mode host")
            return
        # The operator's DaemonSet selects the object's nodeSelector (and the OS, kernel): so does the pool.
        pool["nodeSelector"].update({k: v for k, v in (owner.spec.get("nodeSelector") or {}).items() if k != consts.GPU_PRESENT})
        driver: dict[str, Any] = {}
        mode = "precompiled" if owner.precompiled else "managed"
        if mode != self.driver_mode:
            driver["mode"] = mode
        version = owner.spec.get("version")
        primary = self.nvd_primary
        if version and (version != primary.spec.get("version") or mode != self.driver_mode):
            driver["branch" if mode == "precompiled" else "version"] = str(version)
        kernel_module_type = owner.spec.get("kernelModuleType") or "auto"
        if kernel_module_type != (primary.spec.get("kernelModuleType") or "auto"):
            driver["kernelModuleType"] = kernel_module_type
        if not self.facts.openshift_version or mode == "precompiled":
            # (The Driver Toolkit's DaemonSets are one per RHCOS build, named by gpu-stack.)
            name = operator_daemonset_name(owner, os_tag, kernel)
            if name:
                driver["daemonSetName"] = name
        if driver:
            pool["driver"] = {**pool.get("driver", {}), **driver}
        self._nvd_owned.setdefault(owner.name, []).append(pool)

    # -- what each object carries

    def _nvidia_drivers(self) -> None:
        """Per object: the per-pool fields and the pod settings, each recorded in the ledger; the rest were read
        as the ClusterPolicy's driver sections."""
        if not self.nvidia_drivers:
            return
        if not self.crd_mode:
            for driver in self.nvidia_drivers:
                self.no_effect.append(NotCarried(f"{driver.where}/spec", sorted(driver.spec),
                                                 "spec.driver.useNvidiaDriverCRD is not true: the operator disables every NVIDIADriver"))
            return
        for section, original in self.replaced.items():
            fields = {k: v for k, v in original.items() if not (section == "driver" and k in (*KEPT_DRIVER_FIELDS, "enabled"))}
            moot = [p[len(section) + 1:] for p, v in leaves(fields, section) if not empty(p, v)]
            if moot:
                self.replaced_no_effect.append(NotCarried(f"spec.{section}", moot, REPLACED_REASON))
        if "enabled" in (self.replaced.get("driver") or {}):
            self.explicit["spec.driver.enabled"] = FieldOutcome(
                "spec.driver.enabled", self.replaced["driver"]["enabled"], WITHOUT_EFFECT,
                reason="driver.useNvidiaDriverCRD is true: the NVIDIADriver objects deploy the drivers whatever it says")
        self.explicit["spec.driver.useNvidiaDriverCRD"] = FieldOutcome(
            "spec.driver.useNvidiaDriverCRD", True, CARRIED, key="nodePools[].driver (from the NVIDIADriver objects)")
        for driver in self.nvidia_drivers:
            if self._nvd_owned.get(driver.name):
                self._nvd_pod_settings(driver)
            self._nvd_own_fields(driver)
        primary = self.nvd_primary
        if primary is not None and self._nvd_owned.get(primary.name) and (primary.spec.get("rdma") or {}).get("enabled") \
                and isinstance(primary.spec.get("resources"), dict):
            self.put("operands.peermem.resources", copy.deepcopy(primary.spec["resources"]), origin=f"{primary.where}/spec.resources")
        self._nvd_differences()

    def _nvd_own_fields(self, driver: NvidiaDriver) -> None:
        pools = [pool["name"] for pool in self._nvd_owned.get(driver.name, [])]
        where = driver.where
        pools_key = f"nodePools[{', '.join(pools)}]" if pools else None

        def record(field: str, status: str, key: Optional[str] = None, reason: Optional[str] = None) -> None:
            for path, value in leaves(driver.spec.get(field), f"spec.{field}") if field in driver.spec else ():
                if not empty(path, value):
                    self.explicit[f"{where}/{path}"] = FieldOutcome(f"{where}/{path}", value, status, key=key, reason=reason)

        if not pools:
            reason = ("it owns no node of the imported pools, so the operator rendered no DaemonSet for it"
                      if self.nodes is not None else "it owns no imported pool")
            for path, value in leaves(driver.spec, "spec"):
                if not empty(path, value):
                    self.explicit[f"{where}/{path}"] = FieldOutcome(f"{where}/{path}", value, WITHOUT_EFFECT, reason=reason)
            self.no_effect.append(NotCarried(f"{where}/spec", sorted(driver.spec), reason))
            return
        record("default", CARRIED, key=f"{pools_key}.nodeSelector (the nodes no other NVIDIADriver selects)")
        record("nodeSelector", CARRIED, key=f"{pools_key}.nodeSelector")
        record("driverType", CARRIED, key=f"{pools_key}.workloadType")
        for field, reason, types in WITHOUT_EFFECT_FIELDS:
            if driver.driver_type in types:
                record(field, WITHOUT_EFFECT, reason=reason)
        for field, reason in REPORTED_FIELDS:
            if field in driver.spec and not empty(f"spec.{field}", driver.spec[field]):
                self.report(f"{where}/spec.{field}", driver.spec[field], reason)
        if driver.host_manager:
            # The vGPU manager image picks its kernel modules itself (gpu-stack sets no KERNEL_MODULE_TYPE there).
            if (driver.spec.get("kernelModuleType") or "auto") == "auto":
                record("kernelModuleType", CARRIED, key=RENDERED_ANYWAY)
            else:
                record("kernelModuleType", REPORTED, reason=VGPU_UNCARRIED)
                self.report(f"{where}/spec.kernelModuleType", driver.spec["kernelModuleType"], VGPU_UNCARRIED)
            for path, value in leaves(driver.spec, "spec"):
                field = path[len("spec."):]
                if empty(path, value) or f"{where}/{path}" in self.explicit or any(under(field, f) for f in (*PER_POOL, *POD_FIELDS)):
                    continue
                if translated_path(field.split("[", 1)[0], host_manager=True) is None:
                    self.report(f"{where}/{path}", value, VGPU_UNCARRIED)
            record("version", CARRIED, key="vgpu.managerImage")
            return
        stack = "driver.branch" if self.driver_mode == "precompiled" else "versions.driver"
        pool_key = "nodePools[].driver.branch" if driver.precompiled else "nodePools[].driver.version"
        differs = driver is not self.nvd_primary and (driver.spec.get("version") != self.nvd_primary.spec.get("version")
                                                       or driver.precompiled != self.nvd_primary.precompiled)
        record("version", CARRIED, key=f"{pools_key}.driver.{pool_key.rsplit('.', 1)[-1]}" if differs else stack)
        record("usePrecompiled", CARRIED, key=f"{pools_key}.driver.mode" if driver.precompiled != self.nvd_primary.precompiled
               else "driver.mode")
        record("kernelModuleType", CARRIED, key=f"{pools_key}.driver.kernelModuleType"
               if (driver.spec.get("kernelModuleType") or "auto") != (self.nvd_primary.spec.get("kernelModuleType") or "auto")
               else "driver.kernelModuleType")

    def _nvd_pod_settings(self, driver: NvidiaDriver) -> None:
        """labels, annotations, tolerations and priorityClassName of the object's DaemonSet, onto the operand's
        overrides (what the stack's daemonsets settings already give is left out)."""
        operand = "vgpuManager" if driver.host_manager else "driver"
        where = driver.where
        spec = driver.spec
        labels = dict(spec.get("labels") or {})
        for key in sorted(labels):
            if key == RESERVED_LABEL or key.startswith(RESERVED_LABEL_PREFIX):
                path = f"{where}/spec.labels.{key}"
                self.explicit[path] = FieldOutcome(path, labels.pop(key), WITHOUT_EFFECT,
                                                   reason="the operator drops app and app.kubernetes.io/ labels from spec.labels")
        self._nvd_put(driver, "labels", f"operands.{operand}.labels", {k: str(v) for k, v in labels.items()} or None)
        annotations = spec.get("annotations") or {}
        self._nvd_put(driver, "annotations", f"operands.{operand}.annotations",
                      {k: str(v) for k, v in annotations.items()} or None)
        stack = [dict(t) for t in (self.config.get("gpu-stack:daemonsets", {}).get("tolerations") or [TEMPLATE_TOLERATION])]
        extra = []
        for i, toleration in enumerate(spec.get("tolerations") or []):
            entry = {k: toleration[k] for k in ("key", "operator", "value", "effect", "tolerationSeconds") if toleration.get(k) not in (None, "")}
            for field in sorted(set(toleration) - set(entry) - {"key", "operator", "value", "effect", "tolerationSeconds"}):
                self.report(f"{where}/spec.tolerations[{i}].{field}", toleration[field],
                            "gpu-stack tolerations take key, operator, value, effect and tolerationSeconds only")
            if entry not in stack and entry != TEMPLATE_TOLERATION and entry not in extra:
                extra.append(entry)
        self._nvd_put(driver, "tolerations", f"operands.{operand}.tolerations", extra or None,
                      covered="daemonsets.tolerations")
        priority = spec.get("priorityClassName") or TEMPLATE_PRIORITY_CLASS
        stack_priority = self.config.get("gpu-stack:daemonsets", {}).get("priorityClassName") or TEMPLATE_PRIORITY_CLASS
        self._nvd_put(driver, "priorityClassName", f"operands.{operand}.priorityClassName",
                      priority if priority != stack_priority else None, covered="daemonsets.priorityClassName")

    def _nvd_put(self, driver: NvidiaDriver, field: str, key: str, value: Any, covered: Optional[str] = None) -> None:
        """Put one pod setting (all objects of a kind agree on it) and record the object's fields as carried."""
        if value is not None:
            self.put(key, value, origin=f"{driver.where}/spec.{field}")
        target = key if value is not None else (covered or key)
        for path, leaf in leaves(driver.spec.get(field), f"spec.{field}") if field in driver.spec else ():
            full = f"{driver.where}/{path}"
            if not empty(path, leaf) and full not in self.explicit:
                self.explicit[full] = FieldOutcome(full, leaf, CARRIED, key=target.split(":", 1)[-1])

    def _nvd_differences(self) -> None:
        """What the stack's DaemonSet settings add to every driver DaemonSet that an NVIDIADriver's did not have."""
        daemonsets = self.config.get("gpu-stack:daemonsets", {})
        extra_tolerations = [t for t in daemonsets.get("tolerations") or [] if t != TEMPLATE_TOLERATION]
        if extra_tolerations or daemonsets.get("labels") or daemonsets.get("annotations"):
            self.notes.append("the driver DaemonSets also get daemonsets.tolerations, labels and annotations (from the "
                              "ClusterPolicy's daemonsets section), which the operator did not put on NVIDIADriver DaemonSets")

    def _nvd_report_paths(self) -> None:
        """The report names an NVIDIADriver field by the object, not by the ClusterPolicy path it was read as."""
        if not getattr(self, "crd_mode", False):
            return
        self.not_carried = self._rewritten(self.not_carried)
        self.no_effect = self._rewritten(self.no_effect) + self.replaced_no_effect

    def _rewritten(self, items: list[NotCarried]) -> list[NotCarried]:
        """Report items about a field read from the objects, named by each object that sets it (the first of its
        kind when none does, as for a section naming no image)."""
        result: dict[tuple[str, str], NotCarried] = {}
        for item in items:
            cp_path = item.path[len("spec."):] if item.path.startswith("spec.") else ""
            section = cp_path.split(".", 1)[0].split("[", 1)[0]
            if section not in REPLACED_SECTIONS:
                result[(item.path, item.reason)] = item
                continue
            kind = [d for d in self.nvidia_drivers if d.host_manager == (section == "vgpuManager")]
            named = [(d, path) for d in kind for path in [_nvd_path(cp_path, d.host_manager)]
                     if path == "" or _get(d.spec, path.split("[", 1)[0]) is not None]
            if not named and kind:
                named = [(kind[0], _nvd_path(cp_path, kind[0].host_manager))]
            if not named:
                result[(item.path, item.reason)] = item
            for driver, path in named:
                full = f"{driver.where}/spec" + (f".{path}" if path else "")
                result[(full, item.reason)] = NotCarried(full, item.value, item.reason)
        return list(result.values())

    def _nvd_ledger(self, classifier: Any) -> list[FieldOutcome]:
        """Every non-empty leaf of each object's spec."""
        outcomes = []
        for driver in self.nvidia_drivers:
            for path, value in leaves(driver.spec, "spec"):
                if empty(path, value):
                    continue
                full = f"{driver.where}/{path}"
                field = path[len("spec."):]
                translated = translated_path(field, driver.host_manager) if self.crd_mode else None
                outcomes.append(classifier.outcome(full, value, spec_path=f"spec.{translated}" if translated else None))
        return outcomes
