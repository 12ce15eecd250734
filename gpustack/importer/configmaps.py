"""The ConfigMaps the ClusterPolicy names (`kubectl get cm -o yaml`): device-plugin configs become pool sharing,
mig-parted configs MIG layouts, the DCGM exporter's metrics CSV extra metrics; unread ones go into the report."""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence

from components.catalogs import catalog
from components.catalogs import consts
from components.catalogs import dcgm_metrics
from components.catalogs import mig_catalog
from components.catalogs import vgpu_catalog
from components.config.base import DNS_SUBDOMAIN_MAX, SHOWN_MAX
from components.kit import naming
from gpustack.importer.common import ImportInputError, embedded_yaml, objects_of
from gpustack.importer.mig import layout_from_mig_parted
from gpustack.importer.nodes import _Group
from gpustack.importer.shapes import (BOOLEAN, INTEGER, MAPPING, STRING, STRING_MAP, STRING_OR_STRINGS, Kind, check_input,
                                      fields_of, item_path, list_of)

# What the import reads of a ConfigMap (core/v1): its name and its data, string -> string.
CONFIGMAP_META: dict[str, Kind] = {"metadata": MAPPING, "metadata.name": STRING}
CONFIGMAP_DATA: dict[str, Kind] = {"data": STRING_MAP}
# What it reads of a device-plugin config (DP:api/config/v1, fact sheet §6.1) and of a mig-parted layout's entries
# (MP:api/spec/v1; their values mig_parted.entry_from_mig_parted checks).
_REPLICATED = list_of(fields_of({"name": STRING, "replicas": INTEGER}, "a replicated resource {name, replicas}"),
                      "a list of replicated resources")
PLUGIN_CONFIG_FIELDS: dict[str, Kind] = {
    "version": STRING,
    "flags": MAPPING,
    "flags.migStrategy": STRING,
    "resources": MAPPING,
    "sharing": MAPPING,
    **{f"sharing.{kind}.{field}": k for kind in ("timeSlicing", "mps") for field, k in
       (("renameByDefault", BOOLEAN), ("failRequestsGreaterThanOne", BOOLEAN), ("resources", _REPLICATED))},
}
# What it reads of a vGPU device manager config's entries (NVIDIA/vgpu-device-manager api/spec/v1); their values are
# the stack's to check (gpu-stack:vgpu.configs), which names the ConfigMap as their origin.
VGPU_DEVICES_ENTRIES = list_of(fields_of({"device-filter": STRING_OR_STRINGS, "vgpu-devices": MAPPING}, "a vgpu-devices entry"),
                               "a list of vgpu-devices entries")
VGPU_DEVICES_KEY = "config.yaml"  # the file CONFIG_FILE names in the operator's and gpu-stack's vGPU device manager
MIG_PARTED_LAYOUT = list_of(fields_of({"device-filter": STRING_OR_STRINGS, "mig-enabled": BOOLEAN, "mig-devices": MAPPING},
                                      "a mig-parted entry"), "a list of mig-parted entries")

# GFD's count of one MIG profile's instances on a node (mixed strategy): nvidia.com/mig-1g.10gb.count.
MIG_COUNT_LABEL = re.compile(r"nvidia\.com/mig-[0-9a-z.+-]+\.count")


def configmaps_of(documents: Sequence[tuple[str, Any]]) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for path, document in documents:
        for i, obj in enumerate(objects_of(document, ("ConfigMap",), path)):
            at = item_path(obj, document, i)
            check_input(obj, CONFIGMAP_META, path, at)
            name = (obj.get("metadata") or {}).get("name")
            if not name or len(name) > DNS_SUBDOMAIN_MAX:
                raise ImportInputError(f"{path}: {at + '.' if at else ''}metadata.name: a ConfigMap has a name of "
                                       f"1-{DNS_SUBDOMAIN_MAX} characters")
            # The API server holds ConfigMap data as strings; anything else is not a dump kubectl printed.
            check_input(obj, CONFIGMAP_DATA, f"{path}: {at + ': ' if at else ''}ConfigMap {name}")
            found[name] = dict(obj.get("data") or {})
    return found


class ConfigMapsMixin:
    """Mixed into build._Importer: what the named ConfigMaps hold, and the keys no imported node uses."""

    def _named_configmap(self, field: str, name: str, what: str, key: str) -> Optional[dict[str, str]]:
        """The ConfigMap a field names, marked read; None, reported, when --configmap did not give it."""
        data = self.configmaps.get(name)
        if data is None:
            self.report(f"spec.{field}", name, f"{what} live in ConfigMap {name}, not in the ClusterPolicy; pass it with "
                                               f"--configmap to carry them as {key}")
            return None
        self.used_configmaps.add(name)
        return data

    def _dcgm_metrics(self, name: str) -> None:
        data = self._named_configmap("dcgmExporter.config.name", name, "the custom metrics", "dcgmExporter.extraMetrics")
        if data is None:
            return
        csv = data.get("dcgm-metrics.csv")
        where = f"configmap:{name}/dcgm-metrics.csv"
        if csv is None:
            self.report(f"configmap:{name}", sorted(data), "has no dcgm-metrics.csv key, which the exporter reads")
            return
        defaults = {m.field: m for m in dcgm_metrics.DEFAULT_METRICS}
        listed, extra = set(), []
        for number, line in enumerate(csv.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(",", 2)]
            if len(parts) != 3:
                self.report(f"{where}:{number}", line, "not a `FIELD, type, help` line")
                continue
            name_, kind, help_ = parts
            listed.add(name_)
            if name_ in defaults:
                if defaults[name_].type != kind:
                    self.report(f"{where}:{number}", line, f"gpu-stack exports {name_} as a {defaults[name_].type}")
                continue
            help_ = help_.replace(",", ";").replace('"', "") or name_
            extra.append({"field": name_, "type": kind, "help": help_})
        if extra:
            self.put("dcgmExporter.extraMetrics", extra, origin=where)
        missing = [f for f in defaults if f not in listed]
        if missing:
            self.report(where, missing, "left out by the custom file, but gpu-stack always exports its default metrics "
                                        "(components/catalogs/dcgm_metrics.py), these included")

    def _vgpu_devices(self) -> None:
        """vgpuDeviceManager.config.name: the named vGPU configs of a ConfigMap of the user's, into vgpu.configs where
        they differ from gpu-stack's built-in ones of the same name."""
        name = self.spec.get("vgpuDeviceManager.config.name")
        data = self._named_configmap("vgpuDeviceManager.config.name", name, "the vGPU configs", "vgpu.configs") if name else None
        if data is None:
            return
        where = f"configmap {name}, key {VGPU_DEVICES_KEY}"
        if VGPU_DEVICES_KEY not in data:
            raise ImportInputError(f"{where}: missing; the vGPU device manager reads its configs from this key")
        document = embedded_yaml(data[VGPU_DEVICES_KEY], where) or {}
        if not isinstance(document, dict) or not isinstance(document.get("vgpu-configs"), dict):
            raise ImportInputError(f"{where}: expected a vGPU device manager config with a `vgpu-configs` mapping")
        builtin = vgpu_catalog.vgpu_configs()
        carried: dict[str, list[dict]] = {}
        for config, entries in document["vgpu-configs"].items():
            check_input({"entries": entries}, {"entries": VGPU_DEVICES_ENTRIES}, f"{where}: vgpu-configs.{config}")
            ours = [_vgpu_entry(e) for e in entries]
            if config in builtin and ours == [_vgpu_entry(e) for e in builtin[config]]:
                continue
            carried[str(config)] = ours
        if carried:
            self.put("vgpu.configs", dict(sorted(carried.items())), origin=f"configmap:{name}/{VGPU_DEVICES_KEY}")

    def _plugin_config(self, key: Optional[str], where: str) -> Optional[dict]:
        name = self.spec.get("devicePlugin.config.name")
        if not name:
            self.spec.without_effect("devicePlugin.config.default", "no devicePlugin.config.name: there is no config to select")
            return None
        self.spec.use("devicePlugin.config.default")
        if not key:
            return None
        data = self.configmaps.get(name)
        if data is None:
            return None
        self.used_configmaps.add(name)
        self.used_plugin_keys.add(key)
        if key not in data:
            self.report(f"configmap:{name}/{key}", None,
                        f"{where} selects config {key}, which the ConfigMap lacks; the device plugin then falls back to "
                        "an empty config (FALLBACK_STRATEGIES=empty): imported without sharing")
            return None
        document = embedded_yaml(data[key], f"configmap {name}, key {key}") or {}
        if not isinstance(document, dict):
            raise ImportInputError(f"configmap {name}, key {key}: expected a device-plugin config mapping")
        check_input(document, PLUGIN_CONFIG_FIELDS, f"configmap {name}, key {key}")
        return document

    def _sharing(self, model: str, mig_label: Optional[str], plugin_label: Optional[str], group: _Group) -> Optional[dict]:
        where = f"nodes {', '.join(n.name for n in group.nodes)}" if group.nodes else "the default config"
        key = plugin_label or self.spec.peek("devicePlugin.config.default") or None
        document = self._plugin_config(key, where)
        cm = self.spec.get("devicePlugin.config.name")
        flags = (document or {}).get("flags") or {}
        mig_strategy = flags.get("migStrategy") or self.mig_strategy
        if document is not None:
            for flag in sorted(set(flags) - {"migStrategy"}):
                self.report(f"configmap:{cm}/{key}.flags.{flag}", flags[flag],
                            "gpu-stack's per-pool device-plugin configs set migStrategy only")
            for top in sorted(set(document) - {"version", "flags", "sharing", "resources"}):
                self.report(f"configmap:{cm}/{key}.{top}", document[top], "gpu-stack's per-pool device-plugin configs set no such section")
        shared = self._time_sharing(document, f"configmap:{cm}/{key}") if document is not None else None
        model_info = catalog.GPU_MODELS[model]
        if mig_label and mig_label != mig_catalog.ALL_DISABLED and group.nodes:
            label_path = f"node:{group.nodes[0].name}/{consts.MIG_CONFIG}"
            if not model_info.mig_capable:
                self.report(label_path, mig_label, f"the {model} has no MIG; gpu-stack writes no nvidia.com/mig.config on its nodes")
                return shared
            nodes = ", ".join(n.name for n in group.nodes)
            if mig_strategy == "none":
                raise ImportInputError(
                    f"--nodes: {nodes} run MIG layout {mig_label} ({consts.MIG_CONFIG}) with mig.strategy none; gpu-stack's "
                    "MIG pools use single or mixed and would label these nodes all-disabled, which wipes their MIG "
                    "partitions. Set the ClusterPolicy's mig.strategy (or the device-plugin config's migStrategy) to the "
                    "strategy the workloads use, or relabel the nodes all-disabled first, and import again")
            if shared:
                self.report(f"configmap:{cm}/{key}.sharing", shared,
                            "gpu-stack does not combine MIG with time-slicing or MPS on one pool; the pool keeps its MIG layout")
            layout = self._mig_layout(model, mig_label, nodes)
            self._keep_instances(model, layout, group)
            return {"strategy": f"mig-{mig_strategy}", "migLayout": layout}
        if group.nodes and not mig_label and model_info.mig_capable and self._labels_mig():
            if self.spec.get("migManager.config.default") == "":
                nodes = ", ".join(n.name for n in group.nodes)
                raise ImportInputError(
                    f"--nodes: {nodes} have no {consts.MIG_CONFIG} label and migManager.config.default is empty, so the "
                    "operator left their MIG mode as it was; gpu-stack labels such nodes all-disabled, which would wipe "
                    "any MIG partitions on them. Label them with the layout they run (or all-disabled) and import again")
        return shared

    def _keep_instances(self, model: str, layout: str, group: _Group) -> None:
        """Refuse nodes on a MIG-mode-only layout (`all-enabled`) that hold instances: gpu-stack's MIG manager, like
        the operator's, asserts its node's layout whenever its pod starts and applies it when the GPUs differ, which
        deletes instances the layout does not list. GFD's `nvidia.com/mig-<profile>.count` labels show them."""
        value = self.mig_layouts.get(layout)
        builtin = mig_catalog.builtin_layouts(model).get(layout)
        mode_only = (builtin is not None and builtin.enables_mig and not builtin.devices) or (
            isinstance(value, list) and not any(e.get("migDevices") for e in value)
        )
        if not mode_only:
            return
        holding = sorted({n.name for n in group.nodes for key, count in n.labels.items()
                          if MIG_COUNT_LABEL.fullmatch(key) and count not in ("", "0")})
        if holding:
            raise ImportInputError(
                f"--nodes: {', '.join(holding)} run MIG layout {layout} (MIG mode on, no instances listed) but hold MIG "
                "instances (GFD's nvidia.com/mig-<profile>.count labels); the MIG manager re-applies the layout when its "
                "pod starts, which deletes them. Write the instances the nodes hold into a mig-parted layout, relabel the "
                "nodes with it, and import again")

    def _labels_mig(self) -> bool:
        """Whether gpu-stack's MIG manager acts on the MIG label of MIG-capable nodes (it is deployed)."""
        return bool(self.spec.get("migManager.enabled"))

    def _time_sharing(self, document: dict, where: str) -> Optional[dict]:
        sharing = document.get("sharing") or {}
        chosen = None
        for kind, strategy in (("mps", "mps"), ("timeSlicing", "time-slicing")):
            block = sharing.get(kind)
            if not isinstance(block, dict):
                continue
            resources = block.get("resources") or []
            replicas = [r for r in resources if isinstance(r, dict) and r.get("name") == "nvidia.com/gpu"]
            for resource in resources:
                if resource not in replicas:
                    self.report(f"{where}.sharing.{kind}.resources", resource,
                                "gpu-stack replicates nvidia.com/gpu only (no MIG device sharing)")
            count = replicas[0].get("replicas", 1) if replicas else 1
            # The plugin picks MPS when it has replicas > 1, else time-slicing (fact sheet §6.1).
            if chosen is None and isinstance(count, int) and count > 1:
                chosen = {"strategy": strategy, "replicas": count}
                if block.get("renameByDefault"):
                    chosen["renameByDefault"] = True
                if strategy == "time-slicing" and block.get("failRequestsGreaterThanOne"):
                    chosen["failRequestsGreaterThanOne"] = True
            elif isinstance(count, int) and count > 1:
                self.report(f"{where}.sharing.{kind}", block, "the device plugin uses MPS when both are set; so does gpu-stack")
        return chosen

    def _mig_layout(self, model: str, name: str, nodes: str) -> str:
        """The layout a node label names, as a gpu-stack layout name (custom ones into migLayouts). A layout that
        cannot be carried stops the import: a pool without it would label its nodes all-disabled and wipe them."""
        where = f"--nodes: {nodes} run MIG layout {name}"
        custom_name = self.spec.get("migManager.config.name")
        builtin = mig_catalog.builtin_layouts(model)
        if not custom_name:
            if name in builtin:
                return name
            raise ImportInputError(f"{where}, which no built-in layout of the {model} is (the operator's MIG manager "
                                   "generated it from the hardware); write it into a mig-parted ConfigMap, set "
                                   "migManager.config.name, and import with --configmap")
        data = self.configmaps.get(custom_name)
        if data is None:
            if name in builtin:
                self.notes.append(f"MIG layout {name}: assumed to be the built-in one (ConfigMap {custom_name} was not given)")
                return name
            raise ImportInputError(f"{where}, defined in ConfigMap {custom_name}, which was not given; pass it with --configmap")
        self.used_configmaps.add(custom_name)
        configs = self._mig_configs(custom_name, data)
        self.used_mig_layouts.add(name)
        entries = configs.get(name)
        if not isinstance(entries, list) or not entries:
            raise ImportInputError(f"{where}, which ConfigMap {custom_name} has no mig-configs entry for")
        filters = {f.upper() for f in mig_catalog.device_filter(model)}

        def applies(entry: dict) -> bool:
            wanted = entry.get("device-filter")
            if wanted is None:
                return True
            wanted = [wanted] if isinstance(wanted, str) else wanted
            return any(str(w).upper() in filters for w in wanted)

        applicable = [e for e in entries if isinstance(e, dict) and applies(e)]
        if not applicable:
            raise ImportInputError(f"{where}: its entries in ConfigMap {custom_name} apply to no {model} (device-filter)")
        layout = self._carried_layout(applicable, f"configmap:{custom_name}/config.yaml", name)
        if name in builtin and _same_as_builtin(layout, builtin[name]):
            return name
        enables_mig = bool(layout) if isinstance(layout, dict) else any(e.get("migEnabled") for e in layout)
        if not enables_mig:
            raise ImportInputError(f"{where}: it enables MIG on no GPU, and gpu-stack labels a pool without MIG "
                                   "all-disabled; relabel the nodes all-disabled first if that is what they run")
        if name.startswith("all-") or name in builtin:
            # gpu-stack keeps built-in names for its own layouts, so the cluster's meaning moves under a name of its
            # own, per model. The node labeller then writes that name; the MIG manager finds the GPUs already
            # partitioned as it says (mig-parted asserts before it applies) and repartitions nothing.
            carried = naming.bounded(f"{custom_name}-{name.removeprefix('all-')}-{model.lower()}")
            self.notes.append(f"MIG layout {name} of ConfigMap {custom_name} redefines a built-in name for the {model}: "
                              f"carried as {carried}; its nodes are relabelled {consts.MIG_CONFIG}={carried}, which "
                              "holds the same devices, so no GPU is repartitioned")
            self.used_mig_layouts.add(name)
            self.mig_layouts[carried] = layout
            return carried
        known = self.mig_layouts.get(name)
        if known is not None and known != layout:
            raise ImportInputError(f"{where}: it gives the {model} other devices than another model's nodes under the "
                                   "same name; gpu-stack layouts are per name, so split it into one layout per model")
        self.mig_layouts[name] = layout
        return name

    @staticmethod
    def _carried_layout(entries: list[dict], where: str, name: str) -> Any:
        """mig-parted entries as a migLayouts value: {profile: count} when every GPU gets the same devices, else the
        per-GPU list (gpustack.importer.mig)."""
        layout, why = layout_from_mig_parted(entries)
        if layout is None:
            # mig_parted's reasons quote the entry's values: a line, not a dump.
            why = why if len(why) <= SHOWN_MAX else f"{why[: SHOWN_MAX - 1]}\u2026"
            raise ImportInputError(f"{where}: layout {name} cannot be carried: {why}")
        return layout

    def _mig_configs(self, name: str, data: Mapping[str, str]) -> dict:
        if "config.yaml" not in data:
            raise ImportInputError(f"configmap {name}: a mig-parted ConfigMap holds its document under config.yaml")
        document = embedded_yaml(data["config.yaml"], f"configmap {name}, key config.yaml") or {}
        configs = document.get("mig-configs") if isinstance(document, dict) else None
        if not isinstance(configs, dict):
            raise ImportInputError(f"configmap {name}, key config.yaml: no mig-configs mapping")
        check_input(configs, {str(layout): MIG_PARTED_LAYOUT for layout in configs}, f"configmap {name}, key config.yaml: mig-configs")
        return configs

    def _unread_configmaps(self) -> None:
        plugin = self.spec.raw("devicePlugin.config.name")
        if plugin and plugin not in self.configmaps:
            self.report("spec.devicePlugin.config.name", plugin,
                        f"time-slicing/MPS replicas live in ConfigMap {plugin}, not in the ClusterPolicy; pass it with "
                        "--configmap to carry them onto the pools whose nodes select its keys (nvidia.com/device-plugin.config)")
        elif plugin:
            for key in self.configmaps[plugin]:
                if key not in self.used_plugin_keys:
                    self.report(f"configmap:{plugin}/{key}", None,
                                "no imported node selects this config (nvidia.com/device-plugin.config) and it is not the default"
                                if self.nodes is not None else "without --nodes only the default config is read")
        mig = self.spec.raw("migManager.config.name")
        if mig and mig in self.configmaps and self.spec.get("migManager.enabled"):
            try:
                configs = self._mig_configs(mig, self.configmaps[mig])
            except ImportInputError:
                configs = {}
            for name in configs:
                if name not in self.used_mig_layouts and not name.startswith("all-"):
                    self.report(f"configmap:{mig}/config.yaml", name, "a MIG layout no imported node uses; gpu-stack renders used layouts only")
        elif mig and self.spec.get("migManager.enabled") and not any(
            p.get("sharing", {}).get("strategy", "").startswith("mig-") for p in self.pools
        ):
            self.report("spec.migManager.config.name", mig,
                        f"custom MIG layouts live in ConfigMap {mig}; no imported node uses one (pass --nodes and --configmap to carry them)")
        self.spec.use("migManager.config.name", "devicePlugin.config.name", "dcgmExporter.config.name")
        for name in sorted(set(self.configmaps) - self.used_configmaps - {plugin, mig}):
            self.notes.append(f"ConfigMap {name} (--configmap) is not one the ClusterPolicy names; it was not read")


def _same_as_builtin(layout: Any, builtin: mig_catalog.Layout) -> bool:
    """Whether a carried layout (migLayouts value) means exactly what gpu-stack's built-in layout of that name does."""
    if builtin.per_gpu:
        return False
    if isinstance(layout, dict):
        return builtin.mig_enabled and builtin.devices == layout
    return (
        len(layout) == 1
        and layout[0].get("devices") == "all"
        and bool(layout[0].get("migEnabled")) == builtin.mig_enabled
        and (layout[0].get("migDevices") or {}) == builtin.devices
    )


def _vgpu_entry(entry: dict) -> dict:
    """A vGPU device manager entry as gpu-stack:vgpu.configs writes it (camelCase, filters as a list)."""
    written: dict = {"devices": entry.get("devices")}
    filters = entry.get("device-filter")
    if filters is not None:
        written["deviceFilter"] = [f.upper().replace("0X", "0x") for f in ([filters] if isinstance(filters, str) else filters)]
    written["vgpuDevices"] = dict(entry.get("vgpu-devices") or {})
    return written
