"""State `state-dcgm-exporter`: GPU telemetry for Prometheus, its Service and ServiceMonitor, on device-plugin
nodes and, in its DRA flavour, on DRA nodes.

Objects as in GO:assets/state-dcgm-exporter with `TransformDCGMExporter` applied (GO:controllers/object_controls.go
at a22dbf6 / v26.7.0), plus the operator's custom metrics path (`dcgmExporter.config.name`) taken by default: the
stack renders its own metrics CSV (components/catalogs/dcgm_metrics.py) because the image's built-in list leaves
the ECC counters out, and the alerts and dashboard are checked against what this CSV exports. `collectorsFile`
points the exporter at a CSV in the image instead (no ConfigMap).

The operator's options, as `TransformDCGMExporter` renders them: `remoteHostengine` (DCGM_REMOTE_HOSTENGINE_INFO;
a `localhost:` engine is the host's own, so the pod joins the host network), `hostNetwork`, `hostPid`,
`hpcJobMapping` (DCGM_HPC_JOB_MAPPING_DIR, hostPath DirectoryOrCreate mounted read-only), and the pod metadata
options `enablePodLabels` / `enablePodUid` / `podLabelAllowlistRegex`. Pod metadata is read from the API, so only
with them does the ServiceAccount get a ClusterRole reading pods (GO:assets/state-dcgm-exporter/0210_clusterrole.yaml,
which the operator's `rbacGates` create only then) and the pod its token; otherwise the pod keeps
`automountServiceAccountToken: false`. gpu-stack names that ClusterRole and its binding after the ServiceAccount,
as every component's (components/kit/rbac.py `rbac_set`), not `nvidia-dcgm-exporter-read-pods`. `listenAddress` moves the container port, the
probes and the Service port together, so they cannot disagree.

DRA flavour (GO:manifests/state-dcgm-exporter, GO:internal/state/dcgm_exporter.go, the GPUCluster state): on DRA
nodes GPUs reach a pod only through a claim, so DaemonSet `nvidia-dcgm-exporter-dra` (deploy label
`dcgm-exporter-dra`) claims every GPU of its node with adminAccess from ResourceClaimTemplate
`nvidia-dcgm-exporter-admin` (allocationMode All: non-exclusive, reserves nothing) instead of taking the NVIDIA
runtime class. The kubelet reports DRA-allocated devices by pool and device name rather than GPU UUID, so
KUBERNETES_ENABLE_DRA=true makes the exporter resolve them through ResourceSlices: its ClusterRole (NVIDIA's
`nvidia-dcgm-exporter-dra-read-pods`, named after the ServiceAccount here) reads pods and resourceslices, its Role
resourceclaims and configmaps, and the token is always mounted. Its own Service `nvidia-dcgm-exporter-dra` and ServiceMonitor follow. gpu-stack adds
the `gpu-stack/pool In [...]` affinity of the DRA pools, as on the DRA driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    ContainerArgs,
    ContainerPortArgs,
    HTTPGetActionArgs,
    PodResourceClaimArgs,
    ProbeArgs,
    ResourceClaimArgs,
    ResourceRequirementsArgs,
)

from components.catalogs import dcgm_metrics
from components.config import DcgmExporter as ExporterSettings
from components.config import ServiceMonitorSettings
from components.kit.builders import (
    NODE_NAME_ENV,
    PRIVILEGED,
    Operands,
    also_after,
    child_opts,
    config_map_volume,
    env,
    host_path,
    meta,
    metrics_endpoint,
    mount,
    operand_daemonset,
    wait_for_validation,
)
from components.kit.dra_api import RESOURCE_GROUP, admin_claim_template
from components.kit.dra_plugin import pool_affinity
from components.kit.rbac import SCC_USE, rbac_set, rule

NAME = "nvidia-dcgm-exporter"
DRA_NAME = f"{NAME}-dra"
DEPLOY_COMPONENT = "dcgm-exporter"
DRA_DEPLOY_COMPONENT = "dcgm-exporter-dra"
PORT_NAME = "gpu-metrics"
METRICS_CONFIGMAP = "nvidia-dcgm-exporter-metrics"
METRICS_FILE = "dcgm-metrics.csv"
METRICS_PATH = f"/etc/dcgm-exporter/{METRICS_FILE}"
POD_RESOURCES = "/var/lib/kubelet/pod-resources"
HPC_JOB_MAPPING_VOLUME = "hpc-job-mapping"
# The DRA flavour's adminAccess claim on every GPU of its node (GO:manifests/state-dcgm-exporter/0400_*).
DRA_CLAIM_TEMPLATE = "nvidia-dcgm-exporter-admin"
DRA_CLAIM = "admin-gpus"

LISTEN_ENV = "DCGM_EXPORTER_LISTEN"
COLLECTORS_ENV = "DCGM_EXPORTER_COLLECTORS"
REMOTE_HOSTENGINE_ENV = "DCGM_REMOTE_HOSTENGINE_INFO"
POD_LABELS_ENV = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"
POD_UID_ENV = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"
POD_LABEL_ALLOWLIST_ENV = "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"
HPC_JOB_MAPPING_ENV = "DCGM_HPC_JOB_MAPPING_DIR"
DRA_ENV = "KUBERNETES_ENABLE_DRA"
READ_PODS_RULE = rule([""], ["pods"], ["get", "list", "watch"])


@dataclass(frozen=True)
class DraTarget:
    """The DRA pools the DRA flavour serves and the host engine it talks to there."""

    pools: tuple[str, ...]
    remote_hostengine: Optional[str]


def _health_probe(port: int, period: Optional[int] = None) -> ProbeArgs:
    return ProbeArgs(
        http_get=HTTPGetActionArgs(port=port, path="/health"), initial_delay_seconds=45, period_seconds=period
    )


def exporter_env(settings: ExporterSettings, remote_hostengine: Optional[str], *, collectors: str, dra: bool = False) -> list:
    """The exporter container's env, in the operator's order: the asset's four, then what the options add."""
    values = [
        env(LISTEN_ENV, settings.listen_address),
        env("DCGM_EXPORTER_KUBERNETES", "true"),
        env(COLLECTORS_ENV, collectors),
        NODE_NAME_ENV,
    ]
    if remote_hostengine:
        values.append(env(REMOTE_HOSTENGINE_ENV, remote_hostengine))
    if settings.hpc_job_mapping.enabled:
        values.append(env(HPC_JOB_MAPPING_ENV, settings.hpc_job_mapping.directory))
    if dra:
        values.append(env(DRA_ENV, "true"))
    if settings.enable_pod_labels:
        values.append(env(POD_LABELS_ENV, "true"))
    if settings.enable_pod_uid:
        values.append(env(POD_UID_ENV, "true"))
    if settings.pod_label_allowlist_regex:
        values.append(env(POD_LABEL_ALLOWLIST_ENV, ",".join(settings.pod_label_allowlist_regex)))
    return values


def host_network(settings: ExporterSettings, remote_hostengine: Optional[str]) -> Optional[bool]:
    """The host's own engine answers on its loopback only, so a `localhost:` engine puts the pod on the host network
    (`TransformDCGMExporter`), as does `hostNetwork`."""
    on = settings.host_network or (remote_hostengine is not None and remote_hostengine.startswith("localhost:"))
    return True if on else None


class DcgmExporter(pulumi.ComponentResource):
    daemonset: Optional[k8s.apps.v1.DaemonSet]
    service: Optional[k8s.core.v1.Service]
    dra_daemonset: Optional[k8s.apps.v1.DaemonSet]
    dra_service: Optional[k8s.core.v1.Service]
    metrics: tuple[dcgm_metrics.Metric, ...]

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        settings: ExporterSettings,
        metrics: Sequence[dcgm_metrics.Metric],
        remote_hostengine: Optional[str],
        service_monitor_settings: Optional[ServiceMonitorSettings],
        device_plugin_nodes: bool = True,
        dra: Optional[DraTarget] = None,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        """`metrics` fill gpu-stack's metrics ConfigMap unless `settings.collectors_file` names a CSV in the image.
        `device_plugin_nodes` renders the exporter of the device-plugin nodes, `dra` the DRA flavour."""
        super().__init__("gpu-stack:index:DcgmExporter", name, None, opts)
        child = child_opts(self, depends_on)
        self._ops, self._settings, self._child = ops, settings, child
        self._monitor = service_monitor_settings
        self.metrics = () if settings.collectors_file else tuple(metrics)
        self._metrics_config: list[pulumi.Resource] = []
        if not settings.collectors_file:
            self._metrics_config = [
                k8s.core.v1.ConfigMap(
                    METRICS_CONFIGMAP,
                    metadata=meta(METRICS_CONFIGMAP, ops.namespace, {"app": NAME}),
                    data={METRICS_FILE: dcgm_metrics.metrics_csv(self.metrics)},
                    opts=child,
                )
            ]
        self.daemonset = self.service = self.dra_daemonset = self.dra_service = None
        if device_plugin_nodes:
            self.daemonset, self.service = self._device_plugin_flavour(remote_hostengine)
        if dra is not None:
            self.dra_daemonset, self.dra_service = self._dra_flavour(dra)
        self.register_outputs(
            {
                "daemonsets": [n for n, ds in ((NAME, self.daemonset), (DRA_NAME, self.dra_daemonset)) if ds is not None],
                "metrics": [m.field for m in self.metrics],
                "collectors": settings.collectors_file or METRICS_PATH,
            }
        )

    # --- pieces both flavours share --------------------------------------------------------------------------

    def _container(self, name: str, remote_hostengine: Optional[str], *, dra: bool) -> ContainerArgs:
        settings = self._settings
        port = settings.port
        mounts = [mount("pod-gpu-resources", POD_RESOURCES, read_only=True)]
        if not settings.collectors_file:
            mounts.append(mount("metrics-config", METRICS_PATH, read_only=True, sub_path=METRICS_FILE))
        if settings.hpc_job_mapping.enabled:
            mounts.append(mount(HPC_JOB_MAPPING_VOLUME, settings.hpc_job_mapping.directory, read_only=True))
        return ContainerArgs(
            name=name,
            image=self._ops.images.dcgm_exporter,
            image_pull_policy="IfNotPresent",
            env=exporter_env(settings, remote_hostengine, collectors=settings.collectors_file or METRICS_PATH, dra=dra),
            ports=[ContainerPortArgs(name="metrics", container_port=port)],
            liveness_probe=_health_probe(port, period=5),
            readiness_probe=_health_probe(port),
            security_context=PRIVILEGED,
            # the claim makes the DRA flavour's GPUs visible to it
            resources=ResourceRequirementsArgs(claims=[ResourceClaimArgs(name=DRA_CLAIM)]) if dra else None,
            volume_mounts=mounts,
        )

    def _volumes(self, *, run_nvidia: bool) -> list:
        settings = self._settings
        volumes = [host_path("pod-gpu-resources", POD_RESOURCES)]
        if run_nvidia:
            # where the toolkit-validation gate finds toolkit-ready
            volumes.append(host_path("run-nvidia", "/run/nvidia"))
        if not settings.collectors_file:
            volumes.append(config_map_volume("metrics-config", config_map=METRICS_CONFIGMAP))
        if settings.hpc_job_mapping.enabled:
            # the workload manager may start writing after the exporter: create the directory rather than fail
            volumes.append(host_path(HPC_JOB_MAPPING_VOLUME, settings.hpc_job_mapping.directory, "DirectoryOrCreate"))
        return volumes

    def _endpoint(self, name: str) -> k8s.core.v1.Service:
        return metrics_endpoint(
            name,
            self._ops.namespace,
            port_name=PORT_NAME,
            port=self._settings.port,
            monitor=self._monitor,
            internal_traffic_policy=self._settings.internal_traffic_policy,
            opts=self._child,
        )

    # --- the flavours ----------------------------------------------------------------------------------------

    def _device_plugin_flavour(self, remote_hostengine: Optional[str]) -> tuple[k8s.apps.v1.DaemonSet, k8s.core.v1.Service]:
        ops, settings, child = self._ops, self._settings, self._child
        rbac = rbac_set(
            NAME,
            ops.namespace,
            openshift=ops.openshift,
            role_rules=[SCC_USE, rule([""], ["configmaps"], ["get", "list"])],
            # pods are read only for pod metadata, as the operator grants it only then (`rbacGates`)
            cluster_role_rules=[READ_PODS_RULE] if settings.reads_pods else (),
            opts=child,
        )
        daemonset = operand_daemonset(
            NAME,
            ops,
            operand="dcgmExporter",
            deploy_component=DEPLOY_COMPONENT,
            service_account=NAME,
            runtime_class=True,
            # the token only where the exporter reads the API (pod metadata), as the operator mounts it
            automount_token=True if settings.reads_pods else False,
            host_network=host_network(settings, remote_hostengine),
            host_pid=True if settings.host_pid else None,
            init_containers=[wait_for_validation(ops.images.validator, "toolkit-ready", volume="run-nvidia")],
            containers=[self._container(NAME, remote_hostengine, dra=False)],
            volumes=self._volumes(run_nvidia=True),
            opts=also_after(child, *rbac.resources, *self._metrics_config),
        )
        return daemonset, self._endpoint(NAME)

    def _dra_flavour(self, dra: DraTarget) -> tuple[k8s.apps.v1.DaemonSet, k8s.core.v1.Service]:
        ops, settings, child = self._ops, self._settings, self._child
        labels = {"app": DRA_NAME}
        rbac = rbac_set(
            DRA_NAME,
            ops.namespace,
            openshift=ops.openshift,
            role_rules=[
                SCC_USE,
                rule([RESOURCE_GROUP], ["resourceclaims"], ["get", "list", "watch"]),
                rule([""], ["configmaps"], ["get", "list"]),
            ],
            cluster_role_rules=[READ_PODS_RULE, rule([RESOURCE_GROUP], ["resourceslices"], ["get", "list", "watch"])],
            labels=labels,
            opts=child,
        )
        claim_template = admin_claim_template(DRA_CLAIM_TEMPLATE, ops.namespace, DRA_CLAIM, labels=labels, opts=child)
        daemonset = operand_daemonset(
            DRA_NAME,
            ops,
            operand="dcgmExporter",
            deploy_component=DRA_DEPLOY_COMPONENT,
            service_account=DRA_NAME,
            affinity=pool_affinity(dra.pools),
            # resolving DRA devices to pods always reads the API
            automount_token=True,
            host_network=host_network(settings, dra.remote_hostengine),
            host_pid=True if settings.host_pid else None,
            containers=[self._container(DRA_NAME, dra.remote_hostengine, dra=True)],
            volumes=self._volumes(run_nvidia=False),
            resource_claims=[PodResourceClaimArgs(name=DRA_CLAIM, resource_claim_template_name=DRA_CLAIM_TEMPLATE)],
            opts=also_after(child, *rbac.resources, claim_template, *self._metrics_config),
        )
        return daemonset, self._endpoint(DRA_NAME)
