"""The ClusterPolicy sections of the other operands: toolkit, device plugin, validator, DaemonSet settings, the DCGM
exporter's monitoring, the component switches, sandbox workloads (VFIO, vGPU, Kata, CC) and GPUDirect."""

from __future__ import annotations

from gpustack.importer.clusterpolicy import CRD_DEFAULTS
from gpustack.importer.common import ImportInputError, int_or_percent, shown_input, truthy
from gpustack.importer.shapes import RELABEL_FIELDS

# The chart stamps these on every operand to mark it as its own (gpu-operator.operand-labels helper).
HELM_OPERAND_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
# The fields of a Kubernetes toleration, all of which daemonsets.tolerations takes.
TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")


class OperandsMixin:
    """Mixed into build._Importer: the operand sections after the driver, in stack-file order."""

    def _toolkit(self) -> None:
        s = self.spec
        # CDI also decides the device plugin's device-list strategy, toolkit or not.
        self.put("toolkit.cdi", bool(s.get("cdi.enabled")), origin="spec.cdi.enabled")
        if not s.get("toolkit.enabled"):
            s.without_effect("toolkit", "toolkit.enabled is false: the operator deployed no toolkit")
            return
        install_dir = s.get("toolkit.installDir")
        if install_dir != CRD_DEFAULTS["toolkit.installDir"]:
            self.put("toolkit.installDir", install_dir, origin="spec.toolkit.installDir")
        env = s.env("toolkit.env")
        crio = self.runtime == "cri-o"
        names = {
            "runtimeConfig": ("CRIO_CONFIG", "RUNTIME_CONFIG") if crio else ("CONTAINERD_CONFIG", "RUNTIME_CONFIG"),
            "runtimeDropInConfig": ("RUNTIME_DROP_IN_CONFIG",),
            "runtimeSocket": () if crio else ("CONTAINERD_SOCKET", "RUNTIME_SOCKET"),
        }
        for key, candidates in names.items():
            chosen = None
            for name in candidates:
                if name not in env:
                    continue
                s.use_env("toolkit.env", name)
                if chosen is None:
                    chosen = name
                    self.put(f"toolkit.{key}", env[name], origin=f"spec.toolkit.env[{name}]")
                elif env[name] != env[chosen]:
                    self.report(f"spec.toolkit.env[{name}]", env[name], f"contradicts {chosen}; gpu-stack took {chosen} as toolkit.{key}")

    def _device_plugin(self) -> None:
        s = self.spec
        self.put("devicePlugin.migStrategy", self.mig_strategy, origin="spec.mig.strategy")
        if not s.get("devicePlugin.enabled"):
            s.without_effect("devicePlugin", "devicePlugin.enabled is false: the operator deployed no device plugin")

    def _validator(self) -> None:
        s = self.spec
        env = s.env("validator.plugin.env")
        if "WITH_WORKLOAD" in env:
            s.use_env("validator.plugin.env", "WITH_WORKLOAD")
            self.put("validator.pluginWorkload", truthy(str(env["WITH_WORKLOAD"])),
                     origin="spec.validator.plugin.env[WITH_WORKLOAD]")
        if not s.get("toolkit.enabled"):
            # gpu-stack's validation gate waits for toolkit-ready, which nothing writes without the toolkit.
            self.put("validation.mode", "off", origin="spec.toolkit.enabled")
            self.notes.append("validation.mode off: the toolkit is disabled, so gpu-stack's validation gate could never pass")

    def _daemonsets(self) -> None:
        s = self.spec
        priority = s.get("daemonsets.priorityClassName")
        if priority:
            self.put("daemonsets.priorityClassName", priority, origin="spec.daemonsets.priorityClassName")
        tolerations = s.raw("daemonsets.tolerations")
        if isinstance(tolerations, list):
            s.use("daemonsets.tolerations")
            carried = []
            for i, toleration in enumerate(tolerations):
                if not isinstance(toleration, dict):
                    raise ImportInputError(f"spec.daemonsets.tolerations[{i}]: expected a toleration mapping, got {shown_input(toleration)}")
                entry = {k: toleration[k] for k in TOLERATION_FIELDS if toleration.get(k) not in (None, "")}
                if "tolerationSeconds" in entry and entry.get("effect") != "NoExecute":
                    # The API server refuses it there (validateTolerations), so the operator's DaemonSets never had it.
                    self.report(f"spec.daemonsets.tolerations[{i}].tolerationSeconds", entry.pop("tolerationSeconds"),
                                "tolerationSeconds applies to effect NoExecute only; the API server refused it here")
                for extra in sorted(set(toleration) - set(TOLERATION_FIELDS)):
                    self.report(f"spec.daemonsets.tolerations[{i}].{extra}", toleration[extra],
                                "gpu-stack tolerations take key, operator, value, effect and tolerationSeconds only")
                carried.append(entry)
            self.put("daemonsets.tolerations", carried, origin="spec.daemonsets.tolerations")
        self.put("daemonsets.updateStrategy", s.get("daemonsets.updateStrategy"), origin="spec.daemonsets.updateStrategy")
        unavailable = s.get("daemonsets.rollingUpdate.maxUnavailable")
        if unavailable not in (None, ""):
            value = int_or_percent(unavailable)
            self.put("daemonsets.maxUnavailable", value, origin="spec.daemonsets.rollingUpdate.maxUnavailable")
        labels = dict(s.raw("daemonsets.labels") or {})
        for key in list(labels):
            if key not in HELM_OPERAND_LABELS:
                s.use(f"daemonsets.labels.{key}")
        carried_labels = {k: str(v) for k, v in labels.items() if k not in HELM_OPERAND_LABELS}
        if carried_labels:
            self.put("daemonsets.labels", carried_labels, origin="spec.daemonsets.labels")
        annotations = s.get("daemonsets.annotations")
        if annotations:
            self.put("daemonsets.annotations", {k: str(v) for k, v in annotations.items()}, origin="spec.daemonsets.annotations")

    def _monitoring(self) -> None:
        s = self.spec
        if not s.get("dcgmExporter.enabled"):
            s.without_effect("dcgmExporter", "dcgmExporter.enabled is false: the operator deployed no DCGM exporter")
            return
        policy = s.get("dcgmExporter.service.internalTrafficPolicy")
        if policy:
            self.put("dcgmExporter.internalTrafficPolicy", policy, origin="spec.dcgmExporter.service.internalTrafficPolicy")
        if s.get("dcgmExporter.serviceMonitor.enabled"):
            self.put("monitoring.prometheusOperator", True, origin="spec.dcgmExporter.serviceMonitor.enabled")
            settings = {}
            for key in ("interval", "scrapeTimeout"):
                value = s.get(f"dcgmExporter.serviceMonitor.{key}")
                if value:
                    settings[key] = str(value)
            labels = s.get("dcgmExporter.serviceMonitor.additionalLabels")
            if labels:
                settings["additionalLabels"] = {k: str(v) for k, v in labels.items()}
            if s.get("dcgmExporter.serviceMonitor.honorLabels"):
                settings["honorLabels"] = True
            relabelings = self._relabelings()
            if relabelings:
                settings["relabelings"] = relabelings
            if settings:
                self.put("monitoring.serviceMonitor", settings, origin="spec.dcgmExporter.serviceMonitor")
            self.notes.append("monitoring.prometheusOperator true (dcgmExporter.serviceMonitor.enabled): the operator "
                              "skipped the ServiceMonitor when the CRD was missing, gpu-stack renders it, and adds its "
                              "PrometheusRule alerts; set monitoring.alerts.enabled false to leave them out")
        else:
            s.without_effect("dcgmExporter.serviceMonitor", "serviceMonitor.enabled is false: the operator created no ServiceMonitor")
        name = s.get("dcgmExporter.config.name")
        if name:
            self._dcgm_metrics(name)

    def _relabelings(self) -> list[dict]:
        """The DCGM exporter endpoint's relabelings, field by field (the types' check ran before the mapping)."""
        s = self.spec
        entries = s.get("dcgmExporter.serviceMonitor.relabelings") or []
        carried = []
        for i, entry in enumerate(entries):
            # modulus is a uint64 with omitempty in the operator's RelabelConfig: 0 never reached the ServiceMonitor.
            kept = {k: v for k, v in entry.items() if k in RELABEL_FIELDS and v is not None and not (k == "modulus" and v == 0)}
            for extra in sorted(set(entry) - set(RELABEL_FIELDS)):
                self.report(f"spec.dcgmExporter.serviceMonitor.relabelings[{i}].{extra}", entry[extra],
                            "not a field of the Prometheus Operator's RelabelConfig; the API server pruned it")
            carried.append(kept)
        if carried and s.peek("nodeStatusExporter.enabled"):
            self.notes.append("monitoring.serviceMonitor.relabelings: gpu-stack applies them to the node status exporter's "
                              "ServiceMonitor too, which the operator left without relabelings")
        return carried

    def _components(self) -> None:
        s = self.spec
        for key, path in (("toolkit", "toolkit.enabled"), ("devicePlugin", "devicePlugin.enabled"), ("dcgm", "dcgm.enabled"),
                          ("dcgmExporter", "dcgmExporter.enabled"), ("gfd", "gfd.enabled"), ("migManager", "migManager.enabled"),
                          ("nodeStatusExporter", "nodeStatusExporter.enabled")):
            self.put(f"components.{key}", bool(s.get(path)), origin=f"spec.{path}")
        for section in ("dcgm", "gfd", "nodeStatusExporter"):
            if not s.get(f"{section}.enabled"):
                s.without_effect(section, f"{section}.enabled is false: the operator did not deploy it")
        if s.get("migManager.enabled"):
            env = s.env("migManager.env")
            if "WITH_REBOOT" in env:
                s.use_env("migManager.env", "WITH_REBOOT")
                self.put("migManager.withReboot", truthy(str(env["WITH_REBOOT"])), origin="spec.migManager.env[WITH_REBOOT]")
            # Read by the node pools: an empty default (the operator left unlabelled nodes' MIG mode alone) stops the
            # import where gpu-stack would label a MIG-capable node all-disabled.
            s.use("migManager.config.default")
        else:
            s.without_effect("migManager", "migManager.enabled is false: the operator deployed no MIG manager")

    def _sandbox(self) -> None:
        s = self.spec
        sandbox_sections = ("sandboxWorkloads", "vfioManager", "sandboxDevicePlugin", "kataSandboxDevicePlugin",
                            "vgpuManager", "vgpuDeviceManager", "ccManager")
        if not self.sandbox:
            for section in sandbox_sections:
                s.without_effect(section, "sandboxWorkloads.enabled is false: the operator deployed no VM operands")
            return
        s.use("sandboxWorkloads")
        self.put("sandboxWorkloads.mode", self.sandbox_mode, origin="spec.sandboxWorkloads.mode")
        self.put("sandboxWorkloads.defaultWorkload", self.default_workload, origin="spec.sandboxWorkloads.defaultWorkload")
        # The operator never touched the KubeVirt CR: whatever permits the GPUs today keeps doing so.
        if self.sandbox_mode == "kubevirt" and self.workloads & {"vm-passthrough", "vm-vgpu"}:
            self.put("sandboxWorkloads.kubevirt.permitHostDevices", False)
            self.notes.append("sandboxWorkloads.kubevirt.permitHostDevices false: the operator left the KubeVirt CR's "
                              "permittedHostDevices to you; set it true to let gpu-stack manage them")
        needed = {
            "vfioManager": "vm-passthrough" in self.workloads,
            "sandboxDevicePlugin": bool(self.workloads & {"vm-passthrough", "vm-vgpu"}) and self.sandbox_mode == "kubevirt",
            "kataSandboxDevicePlugin": "vm-passthrough" in self.workloads and self.sandbox_mode == "kata",
            "vgpuManager": "vm-vgpu" in self.workloads,
            "vgpuDeviceManager": "vm-vgpu" in self.workloads,
        }
        for section, need in needed.items():
            if not need:
                s.without_effect(section, f"no imported pool has the workload type or sandbox mode that runs {section}")
            elif not s.get(f"{section}.enabled"):
                self.report(f"spec.{section}.enabled", False,
                            "gpu-stack deploys this component on every node of a pool whose workload type needs it")
        if self.sandbox_mode == "kata" and needed["kataSandboxDevicePlugin"]:
            self.put("sandboxWorkloads.ccManager.enabled", bool(s.get("ccManager.enabled")), origin="spec.ccManager.enabled")
            mode = s.get("ccManager.defaultMode")
            if mode:
                self.put("sandboxWorkloads.ccManager.defaultMode", mode, origin="spec.ccManager.defaultMode")
        else:
            s.without_effect("ccManager", "the CC manager runs on vm-passthrough pools in kata mode only, and there are none")
        if needed["vgpuManager"]:
            self._vgpu_manager()
        if needed["vgpuDeviceManager"]:
            self._vgpu_devices()
            default = s.get("vgpuDeviceManager.config.default")
            if default:
                self.put("vgpu.defaultConfig", default, origin="spec.vgpuDeviceManager.config.default")

    def _vgpu_manager(self) -> None:
        s = self.spec
        repository, image, version = (s.get(f"vgpuManager.{k}") or "" for k in ("repository", "image", "version"))
        oses = sorted({p.get("os") for p in self.pools if p.get("workloadType") == "vm-vgpu" and p.get("os")})
        if not (repository and image and version):
            self.report("spec.vgpuManager", {"repository": repository, "image": image, "version": version},
                        "no complete vGPU manager image (repository, image and version): set gpu-stack:vgpu.managerImage")
            return
        if not oses:
            self.report("spec.vgpuManager.version", version, "the vm-vgpu pools' OS is unknown, so the image's -<osTag> suffix is too")
            return
        if len(oses) > 1:
            self.report("spec.vgpuManager.version", version,
                        f"gpu-stack runs one vGPU manager image; the vm-vgpu pools boot {', '.join(oses)}, it takes {oses[0]}")
        self.put("vgpu.managerImage", f"{repository.rstrip('/')}/{image}:{version}-{oses[0]}", origin="spec.vgpuManager.repository")

    def _gpudirect_on(self) -> bool:
        s = self.spec
        return bool(s.get("gds.enabled") or s.get("gdrcopy.enabled") or s.get("driver.rdma.enabled"))

    def _gpudirect(self) -> None:
        s = self.spec
        gds, gdrcopy, rdma = bool(s.get("gds.enabled")), bool(s.get("gdrcopy.enabled")), bool(s.get("driver.rdma.enabled"))
        # The operator reads useHostMofed only with RDMA on (IsHostMOFED).
        host_mofed = bool(s.get("driver.rdma.useHostMofed")) and rdma
        for section, on in (("gds", gds), ("gdrcopy", gdrcopy)):
            if not on:
                s.without_effect(section, f"{section}.enabled is false: the operator did not deploy it")
        if not (gds or gdrcopy or rdma):
            return
        self.put("gpudirect", {"gds": gds, "gdrcopy": gdrcopy, "rdma": {"enabled": rdma, "useHostMofed": host_mofed}},
                 origin="spec.gds.enabled")
