"""GpuStack: instantiates the enabled states in `order.STATE_ORDER` and threads the `depends_on` edges.

Each state is built by one method below, named after the state's module in order.py, which hands its component only
the slice of configuration it needs. What is planned before anything registers (every driver-like DaemonSet and its
template digest) is components/plan.py's.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.catalogs import dcgm_metrics
from components.config import ServiceMonitorSettings, StackConfig
from components.kit import sharing, sources
from components.kit.deferred import Later
from components.kit.dra_api import example_claim_templates, resource_api_version
from components.kit.sources import decided_by, decides
from components.kit.stack_digest import stack_digest
from components.kit.stack_inputs import operands
from components.plan import plan_stack
from components.states.cc_manager import CcManager
from components.states.dcgm import DRA_REMOTE_HOSTENGINE, REMOTE_HOSTENGINE, Dcgm
from components.states.dcgm_exporter import DcgmExporter, DraTarget
from components.states.device_plugin import DevicePlugin
from components.states.dra_driver import DraDriver
from components.states.dra_validator import NAMESPACE_LABELS as DRA_NAMESPACE_LABELS
from components.states.dra_validator import DraValidator
from components.states.driver.state import Driver
from components.states.driver.vgpu_manager import VgpuManager
from components.states.gfd import GpuFeatureDiscovery
from components.states.kata_device_plugin import KataDevicePlugin
from components.states.kubevirt import KubeVirtHostDevices, permitted_mediated_devices, permitted_pci_devices
from components.states.mig_manager import MigManager
from components.states.monitoring import StackMonitoring
from components.states.mps import MpsControlDaemon
from components.states.nfd import NodeFeatureDiscovery
from components.states.node_inventory import NodeInventory
from components.states.node_labeler import NodeLabeler, Removal
from components.states.node_status_exporter import NodeStatusExporter
from components.states.node_write_policy import GpuNodeAccounts, NodeBoundWrites, node_bound_writes
from components.states.order import STATE_ORDER
from components.states.prerequisites import PreRequisites, RegistryLogin
from components.states.sandbox_device_plugin import SandboxDevicePlugin
from components.states.sandbox_validator import SandboxValidator
from components.states.toolkit import ContainerToolkit, runtime_files
from components.states.validation_gate import ValidationGate
from components.states.validator import NODE_CHECK_VOLUMES, OperatorValidator, node_checks
from components.states.vfio_manager import VfioManager
from components.states.vgpu_device_manager import VgpuDeviceManager
from components.states.waves import DriverWaves


class GpuStack(pulumi.ComponentResource):
    """Every enabled operator state as a child component, in state order."""

    states: dict[str, pulumi.ComponentResource]

    def __init__(self, name: str, cfg: StackConfig, opts: Optional[pulumi.ResourceOptions] = None):
        # The source map of this render (components/kit/sources.py): recorded as every object below is built, never
        # changing one.
        self.sources = sources.start()
        # The ServiceAccounts whose pods run on GPU nodes, noted as their DaemonSets register (the node-bound
        # admission policies name them; components/states/node_write_policy.py).
        self._gpu_node_accounts = GpuNodeAccounts()
        noted = sources.noting_on("DaemonSet", sources.NODE_BOUND, cfg.cluster, "kubernetes_versions")
        opts = pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(transformations=[sources.record, noted, self._gpu_node_accounts.record]))
        super().__init__("gpu-stack:index:GpuStack", name, None, opts)
        self._cfg = cfg
        self._stack = pulumi.get_stack()
        self._ops = operands(cfg)
        # Planned (not registered) up front: `node-labeling`, earlier in the state order, names each driver-like
        # DaemonSet's template digest in its document, and the later states register exactly what was digested.
        self._plan = plan_stack(cfg, self._ops)
        self.states = {}
        # The gates the later upgrade waves' driver DaemonSets wait for; `state-driver` creates those DaemonSets
        # before `driver-waves` creates the gates.
        self._gates: dict[str, Later] = {
            pool: Later(f"the gate of pool {pool}") for wave in cfg.upgrade.waves[:-1] for pool in wave.pools
        }
        previous: list[pulumi.Resource] = []
        for state in STATE_ORDER:
            with sources.scope():
                # order.py names each state's module; the method building it here is named after that module
                component = getattr(self, f"_{state.component}")(previous)
            if component is not None:
                self.states[state.name] = component
                # A state waits for the one before it, except for what that one leaves to later states
                # (`state-driver`'s later upgrade waves, which wait for gates at the end of the order).
                previous = list(getattr(component, "ordering", [component]))
        unresolved = [later.what for later in self._gates.values() if not later.resolved]
        if unresolved:
            raise RuntimeError(f"never created: {', '.join(unresolved)}; the DaemonSets waiting for them would never register")
        self.gpu_resources = sharing.resources_by_pool(cfg.node_pools, cfg.device_plugin.mig_strategy, cfg.mig_layouts)
        self.register_outputs({"states": list(self.states), "gpuResources": self.gpu_resources})

    def _opts(self) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self)

    def _prerequisites(self, after: list[pulumi.Resource]) -> PreRequisites:
        cfg = self._cfg
        login = None
        if cfg.registry.credentials is not None and cfg.registry_password is not None:
            credentials = cfg.registry.credentials
            login = RegistryLogin(credentials.server, credentials.username, cfg.registry_password.get_secret_value())
        return PreRequisites(
            "pre-requisites",
            namespace=self._ops.namespace,
            registry_login=login,
            # the DRA validator's adminAccess claim is admitted only in a namespace labelled for it
            namespace_labels=DRA_NAMESPACE_LABELS if cfg.dra_pools else None,
            runtime_class=cfg.toolkit.runtime_class,
            opts=self._opts(),
        )

    def _nfd(self, after: list[pulumi.Resource]) -> Optional[NodeFeatureDiscovery]:
        cfg = self._cfg
        deploy = decides(cfg.components, "nfd") and cfg.nfd.mode == "deploy"
        # Without NFD in the cluster (`components.nfd: false`) there is no NodeFeatureRule kind to create.
        kernel_module_labels = cfg.components.nfd and bool(cfg.gpudirect.validated_components)
        if not (deploy or kernel_module_labels):
            return None
        return NodeFeatureDiscovery(
            "node-feature-discovery",
            namespace=self._ops.namespace,
            daemonsets=cfg.daemonsets,
            registry_override=cfg.registry.override,
            pull_secrets=self._ops.pull_secrets,
            deploy=deploy,
            kernel_module_labels=kernel_module_labels,
            depends_on=after,
            opts=self._opts(),
        )

    def _node_labeler(self, after: list[pulumi.Resource]) -> Optional[NodeLabeler]:
        cfg = self._cfg
        if not decides(cfg.components, "node_labeler"):
            return None
        assert cfg.node_agent.image is not None  # load_config guarantees it
        return NodeLabeler(
            "node-labeling",
            ops=self._ops,
            image=cfg.node_agent.image,
            pools=cfg.node_pools,
            # pool -> its driver DaemonSets, one per node image; the agent writes the one of the image a node runs
            # as the node's gpu-stack/driver label
            driver_images=self._plan.driver_like_images(self._cfg),
            driver_digests=self._plan.driver_like_digests(),
            sandbox_mode=cfg.sandbox_workloads.mode,
            device_plugin_configs=cfg.components.device_plugin and bool(cfg.shared_pools),
            removal=Removal.of(cfg.upgrade, cfg.cluster.namespace),
            resync_seconds=cfg.node_agent.resync_seconds,
            depends_on=after,
            opts=self._opts(),
        )

    def _driver(self, after: list[pulumi.Resource]) -> Optional[Driver]:
        if not self._plan.drivers:
            return None
        waves = self._cfg.upgrade.waves
        wave_of = {pool: i for i, wave in enumerate(waves) for pool in wave.pools}
        waits_for = {}
        for target in self._plan.driver_targets:
            wave = wave_of.get(target.pools[0], 0)
            if wave > 0:
                waits_for[target.daemonset] = [self._gates[pool].output for pool in waves[wave - 1].pools]
        return Driver(
            "state-driver",
            ops=self._ops,
            planned=self._plan.drivers,
            waits_for=waits_for,
            pools={p.name: p for p in self._cfg.node_pools},
            upgrade=self._cfg.upgrade,
            depends_on=after,
            opts=self._opts(),
        )

    def _waves(self, after: list[pulumi.Resource]) -> Optional[DriverWaves]:
        cfg = self._cfg
        driver = self.states.get("state-driver")
        if not self._gates or not isinstance(driver, Driver):
            return None
        decided_by(cfg.upgrade, "waves")
        assert cfg.node_agent.image is not None
        pools = {p.name: p for p in cfg.node_pools}
        waves = cfg.upgrade.waves
        return DriverWaves(
            "driver-waves",
            ops=self._ops,
            gate_image=cfg.node_agent.image,
            gated_pools=[pools[name] for wave in waves[:-1] for name in wave.pools],
            targets=self._plan.driver_targets,
            daemonsets=driver.daemonsets,
            upgrade=cfg.upgrade,
            timeout_of={name: wave.timeout_seconds for wave in waves for name in wave.pools},
            gates=self._gates,
            depends_on=after,
            opts=self._opts(),
        )

    def _toolkit(self, after: list[pulumi.Resource]) -> Optional[ContainerToolkit]:
        cfg = self._cfg
        if not decides(cfg.components, "toolkit"):
            return None
        files = runtime_files(
            cfg.cluster.container_runtime,
            config=cfg.toolkit.runtime_config,
            drop_in=cfg.toolkit.runtime_drop_in_config,
            socket=cfg.toolkit.runtime_socket,
        )
        return ContainerToolkit("state-container-toolkit", ops=self._ops, files=files, depends_on=after, opts=self._opts())

    def _validator(self, after: list[pulumi.Resource]) -> OperatorValidator:
        cfg = self._cfg
        return OperatorValidator(
            "state-operator-validation",
            ops=self._ops,
            device_plugin=cfg.components.device_plugin,
            mig_strategy=cfg.device_plugin.mig_strategy,
            settings=cfg.validator,
            gpudirect=cfg.gpudirect.validated_components,
            depends_on=after,
            opts=self._opts(),
        )

    def _device_plugin(self, after: list[pulumi.Resource]) -> Optional[DevicePlugin]:
        cfg = self._cfg
        if not decides(cfg.components, "device_plugin"):
            return None
        return DevicePlugin(
            "state-device-plugin",
            ops=self._ops,
            mig_strategy=cfg.device_plugin.mig_strategy,
            shared_pools=cfg.shared_pools,
            toolkit_enabled=cfg.components.toolkit,
            gds=cfg.gpudirect.gds,
            gdrcopy=cfg.gpudirect.gdrcopy,
            mps_root=cfg.device_plugin.mps_root,
            depends_on=after,
            opts=self._opts(),
        )

    def _dra_driver(self, after: list[pulumi.Resource]) -> Optional[DraDriver]:
        cfg = self._cfg
        if not cfg.dra_pools:
            return None
        decided_by(cfg.dra_pools[0], "allocation")
        return DraDriver(
            "state-dra-driver",
            ops=self._ops,
            image=self._ops.images.dra_driver,
            resource_api_version=resource_api_version(cfg.cluster.kubernetes_versions),
            pools=[p.name for p in cfg.dra_pools],
            compute_domains=cfg.dra.compute_domains,
            feature_gates=cfg.dra.feature_gates,
            plugin=cfg.dra.kubelet_plugin,
            depends_on=after,
            opts=self._opts(),
        )

    def _dra_validator(self, after: list[pulumi.Resource]) -> Optional[DraValidator]:
        cfg = self._cfg
        if not cfg.dra_pools:
            return None
        decided_by(cfg.dra_pools[0], "allocation")
        return DraValidator(
            "state-dra-validation",
            ops=self._ops,
            resource_api_version=resource_api_version(cfg.cluster.kubernetes_versions),
            pools=[p.name for p in cfg.dra_pools],
            node_checks=node_checks(self._ops.images.validator, cfg.gpudirect.validated_components),
            node_check_volumes=NODE_CHECK_VOLUMES,
            depends_on=after,
            opts=self._opts(),
        )

    @property
    def dra_examples(self) -> list[dict]:
        """ResourceClaimTemplates a workload team can start from (a stack output), at the stack's API version."""
        cfg = self._cfg
        if not cfg.dra_pools:
            return []
        return example_claim_templates(resource_api_version(cfg.cluster.kubernetes_versions), cfg.dra.compute_domains)

    def _plugin_configs(self) -> Optional[k8s.core.v1.ConfigMap]:
        plugin = self.states.get("state-device-plugin")
        return plugin.config_map if isinstance(plugin, DevicePlugin) else None

    def _service_monitors(self) -> Optional[ServiceMonitorSettings]:
        monitoring = self._cfg.monitoring
        return monitoring.service_monitor if monitoring.prometheus_operator else None

    def _mps(self, after: list[pulumi.Resource]) -> Optional[MpsControlDaemon]:
        configs = self._plugin_configs()
        if configs is None or not self._cfg.pools_sharing_by("mps"):
            return None
        decided_by(self._cfg.pools_sharing_by("mps")[0].sharing, "strategy")
        return MpsControlDaemon(
            "state-mps-control-daemon",
            ops=self._ops,
            plugin_configs=configs,
            mps_root=self._cfg.device_plugin.mps_root,
            depends_on=after,
            opts=self._opts(),
        )

    def _device_plugin_nodes(self) -> bool:
        """Whether any GPU node runs the device-plugin flavour of DCGM and its exporter: every stack without DRA
        pools (as before pools had an allocation), or one with container pools besides its DRA pools."""
        cfg = self._cfg
        return not cfg.dra_pools or len(cfg.container_pools) > len(cfg.dra_pools)

    def _dcgm(self, after: list[pulumi.Resource]) -> Optional[Dcgm]:
        cfg = self._cfg
        if not decides(cfg.components, "dcgm"):
            return None
        return Dcgm(
            "state-dcgm",
            ops=self._ops,
            device_plugin_nodes=self._device_plugin_nodes(),
            dra_pools=[p.name for p in cfg.dra_pools],
            depends_on=after,
            opts=self._opts(),
        )

    def _dcgm_exporter(self, after: list[pulumi.Resource]) -> Optional[DcgmExporter]:
        cfg = self._cfg
        if not decides(cfg.components, "dcgm_exporter"):
            return None
        settings = cfg.dcgm_exporter
        extra = tuple(dcgm_metrics.Metric(m.field, m.type, m.help) for m in settings.extra_metrics)
        dra = None
        if cfg.dra_pools:
            dra_engine = settings.remote_hostengine or (DRA_REMOTE_HOSTENGINE if cfg.components.dcgm else None)
            dra = DraTarget(pools=tuple(p.name for p in cfg.dra_pools), remote_hostengine=dra_engine)
        return DcgmExporter(
            "state-dcgm-exporter",
            ops=self._ops,
            settings=settings,
            metrics=dcgm_metrics.DEFAULT_METRICS + extra,
            remote_hostengine=settings.remote_hostengine or (REMOTE_HOSTENGINE if cfg.components.dcgm else None),
            service_monitor_settings=self._service_monitors(),
            device_plugin_nodes=self._device_plugin_nodes(),
            dra=dra,
            depends_on=after,
            opts=self._opts(),
        )

    def _gfd(self, after: list[pulumi.Resource]) -> Optional[GpuFeatureDiscovery]:
        if not decides(self._cfg.components, "gfd"):
            return None
        return GpuFeatureDiscovery(
            "gpu-feature-discovery",
            ops=self._ops,
            mig_strategy=self._cfg.device_plugin.mig_strategy,
            plugin_configs=self._plugin_configs(),
            depends_on=after,
            opts=self._opts(),
        )

    def _mig_manager(self, after: list[pulumi.Resource]) -> Optional[MigManager]:
        cfg = self._cfg
        if not decides(cfg.components, "mig_manager") or not any(p.model.mig_capable for p in cfg.container_pools):
            return None
        return MigManager(
            "state-mig-manager",
            ops=self._ops,
            custom_layouts=sharing.mig_parted_layouts(cfg.node_pools, cfg.mig_layouts),
            with_reboot=cfg.mig_manager.with_reboot,
            toolkit_enabled=cfg.components.toolkit,
            gpu_clients_config_map=clients.name if (clients := cfg.mig_manager.gpu_clients_config) else None,
            depends_on=after,
            opts=self._opts(),
        )

    def _node_inventory(self, after: list[pulumi.Resource]) -> Optional[NodeInventory]:
        cfg = self._cfg
        labeler = self.states.get("node-labeling")
        if not decides(cfg.components, "node_inventory") or not isinstance(labeler, NodeLabeler) or not cfg.container_pools:
            return None
        assert cfg.node_agent.image is not None  # the labeller needs it too
        return NodeInventory(
            "node-inventory",
            ops=self._ops,
            image=cfg.node_agent.image,
            resync_seconds=cfg.node_agent.resync_seconds,
            pools_config=labeler.config_map,
            depends_on=after,
            opts=self._opts(),
        )

    def _node_status_exporter(self, after: list[pulumi.Resource]) -> Optional[NodeStatusExporter]:
        if not decides(self._cfg.components, "node_status_exporter"):
            return None
        return NodeStatusExporter(
            "state-node-status-exporter",
            ops=self._ops,
            service_monitor_settings=self._service_monitors(),
            depends_on=after,
            opts=self._opts(),
        )

    def _node_write_policy(self, after: list[pulumi.Resource]) -> Optional[NodeBoundWrites]:
        # after every state with pods on GPU nodes: it names the ServiceAccount of every DaemonSet they registered
        return node_bound_writes(self._cfg, self._ops.namespace, self._gpu_node_accounts, self.states, after, self._opts())

    def _monitoring(self, after: list[pulumi.Resource]) -> Optional[StackMonitoring]:
        monitoring = self._cfg.monitoring
        exporter = self._cfg.components.dcgm_exporter
        dashboard = monitoring.dashboard_on(exporter)
        if not (monitoring.prometheus_operator or dashboard):
            return None
        decided_by(monitoring, "prometheus_operator" if monitoring.prometheus_operator else "dashboard")
        return StackMonitoring(
            "stack-monitoring",
            namespace=self._ops.namespace,
            settings=monitoring,
            alerts=monitoring.alerts_on(exporter),
            dashboard=dashboard,
            stack=self._stack,
            config_digest=stack_digest(self._cfg),
            depends_on=after,
            opts=self._opts(),
        )

    def _validation_gate(self, after: list[pulumi.Resource]) -> Optional[ValidationGate]:
        cfg = self._cfg
        if decides(cfg.validation, "mode") == "off":
            return None
        assert cfg.node_agent.image is not None
        return ValidationGate(
            "stack-validation",
            ops=self._ops,
            image=cfg.node_agent.image,
            mode=cfg.validation.mode,
            timeout_seconds=cfg.validation.timeout_seconds,
            stack_digest=stack_digest(cfg),
            driver_daemonsets=list(self._plan.driver_like_digests()),
            pools=cfg.node_pools,
            sandbox_validator="state-sandbox-validation" in self.states,
            dra_validator="state-dra-validation" in self.states,
            # after every state, not only the previous one: it judges the whole stack
            depends_on=list(self.states.values()),
            opts=self._opts(),
        )

    # --- the VM-workload states (pools running VMs: vm-passthrough, vm-vgpu) ---------------------------------------

    def _vm_pools(self) -> bool:
        return bool(self._cfg.pools_of("vm-passthrough", "vm-vgpu"))

    def _vgpu_manager(self, after: list[pulumi.Resource]) -> Optional[VgpuManager]:
        if not self._plan.vgpu_managers:
            return None
        assert self._cfg.vgpu.manager_image is not None
        return VgpuManager(
            "state-vgpu-manager",
            ops=self._ops,
            image=self._cfg.vgpu.manager_image,
            upgrade=self._cfg.upgrade,
            planned=self._plan.vgpu_managers,
            depends_on=after,
            opts=self._opts(),
        )

    def _vgpu_device_manager(self, after: list[pulumi.Resource]) -> Optional[VgpuDeviceManager]:
        if not self._cfg.pools_of("vm-vgpu"):
            return None
        return VgpuDeviceManager(
            "state-vgpu-device-manager",
            ops=self._ops,
            default_config=self._cfg.vgpu.default_config,
            configs=self._cfg.vgpu.custom_configs,
            depends_on=after,
            opts=self._opts(),
        )

    def _sandbox_validator(self, after: list[pulumi.Resource]) -> Optional[SandboxValidator]:
        if not self._vm_pools():
            return None
        sandbox = self._cfg.sandbox_workloads
        return SandboxValidator(
            "state-sandbox-validation",
            ops=self._ops,
            cc_manager=sandbox.mode == "kata" and sandbox.cc_manager.enabled,
            vgpu=bool(self._cfg.pools_of("vm-vgpu")),
            default_workload=self._cfg.sandbox_workloads.default_workload,
            depends_on=after,
            opts=self._opts(),
        )

    def _vfio_manager(self, after: list[pulumi.Resource]) -> Optional[VfioManager]:
        if not self._plan.vfio_managers:
            return None
        return VfioManager("state-vfio-manager", ops=self._ops, planned=self._plan.vfio_managers[0], depends_on=after, opts=self._opts())

    def _sandbox_device_plugin(self, after: list[pulumi.Resource]) -> Optional[SandboxDevicePlugin]:
        if not self._vm_pools() or self._cfg.sandbox_workloads.mode != "kubevirt":
            return None
        return SandboxDevicePlugin("state-sandbox-device-plugin", ops=self._ops, depends_on=after, opts=self._opts())

    def _kata_device_plugin(self, after: list[pulumi.Resource]) -> Optional[KataDevicePlugin]:
        if not self._vm_pools() or self._cfg.sandbox_workloads.mode != "kata":
            return None
        return KataDevicePlugin("state-kata-device-plugin", ops=self._ops, depends_on=after, opts=self._opts())

    def _cc_manager(self, after: list[pulumi.Resource]) -> Optional[CcManager]:
        sandbox = self._cfg.sandbox_workloads
        if not self._vm_pools() or sandbox.mode != "kata" or not sandbox.cc_manager.enabled:
            return None
        return CcManager(
            "state-cc-manager", ops=self._ops, default_mode=sandbox.cc_manager.default_mode, depends_on=after, opts=self._opts()
        )

    def _kubevirt(self, after: list[pulumi.Resource]) -> Optional[KubeVirtHostDevices]:
        cfg = self._cfg
        sandbox = cfg.sandbox_workloads
        models = [p.gpu_model for p in cfg.pools_of("vm-passthrough")]
        vgpu_pools = [(p.gpu_model, p.vgpu_config or cfg.vgpu.default_config) for p in cfg.pools_of("vm-vgpu")]
        if not (models or vgpu_pools) or sandbox.mode != "kubevirt" or not sandbox.kubevirt.permit_host_devices:
            return None
        return KubeVirtHostDevices(
            "kubevirt-host-devices",
            kubevirt_name=sandbox.kubevirt.name,
            kubevirt_namespace=sandbox.kubevirt.namespace,
            devices=permitted_pci_devices(models),
            mediated_devices=permitted_mediated_devices(vgpu_pools, cfg.vgpu.custom_configs),
            depends_on=after,
            opts=self._opts(),
        )
