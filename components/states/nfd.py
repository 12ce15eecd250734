"""Node Feature Discovery: the labels (`feature.node.kubernetes.io/pci-10de.present`, kernel, OS) that tell the
rest of the stack which nodes carry NVIDIA GPUs.

The operator ships NFD as a Helm subchart (GO:deployments/gpu-operator/Chart.yaml, chart 0.19.0) with values that
whitelist PCI display/network classes and let GFD publish `nvidia.com` labels. gpu-stack renders what that chart
renders with those values as first-class objects, like every other state, so the policy pack and the strict schema
check see each of them and a preview needs no chart repository. Facts from kubernetes-sigs/node-feature-discovery
at tag v0.19.0 (NFD:), deployment/helm/node-feature-discovery/templates/*.yaml and values.yaml, for a release
named `node-feature-discovery` (the chart's `fullname`) with GO:deployments/gpu-operator/values.yaml
`node-feature-discovery:` as values:

* master: Deployment `node-feature-discovery-master` (1 replica, `-port=8080`, probes on /healthz, prefers and
  tolerates control-plane nodes), ConfigMap `node-feature-discovery-master-conf` (`extraLabelNs: [nvidia.com]`),
  ServiceAccount `node-feature-discovery` with ClusterRole/ClusterRoleBinding `node-feature-discovery`.
* worker: DaemonSet `node-feature-discovery-worker` (`-owner-refs=pod,ds`, read-only host paths /boot,
  /etc/os-release, /sys, /usr/lib, /lib, /proc/swaps and the features.d hook directory, control-plane and GPU
  tolerations, `maxUnavailable: 10%`), ConfigMap `node-feature-discovery-worker-conf` (PCI classes 02, 0200, 0207,
  0300, 0302 labelled by vendor), ServiceAccount and Role/RoleBinding `node-feature-discovery-worker`. No worker
  ClusterRole: the chart renders one only for `node` owner references.
* gc: Deployment `node-feature-discovery-gc` (`-gc-interval=1h`), ServiceAccount and ClusterRole/ClusterRoleBinding
  `node-feature-discovery-gc`.
* One difference from the operator's values: they give master, worker and gc one ServiceAccount,
  `node-feature-discovery`, so every worker (on every node, GPU nodes with tenants' code included) carried the
  master's cluster-wide `nodes` and `nodes/status` writes. gpu-stack gives each its own, as the chart does by
  default. On a live stack the first `pulumi up` creates the two new ServiceAccounts, moves the worker RoleBinding's
  and the gc ClusterRoleBinding's subject to them (updates in place: a binding is replaced only when its roleRef
  changes), and rolls the worker DaemonSet and the gc Deployment onto them; nothing is replaced. Old workers get 403
  on their NodeFeature writes until their pod is replaced; the NFD labels they published stay meanwhile.
* The CRDs nodefeatures, nodefeaturegroups and nodefeaturerules (nfd.k8s-sigs.io), from the chart's crds/ folder
  (components/catalogs/nfd_crds.yaml), protected like every CRD (`kept`).

Names, selectors, labels (but `app.kubernetes.io/managed-by: gpu-stack`, like every object of the stack), args,
ports, probes, security contexts, mounts and resources are the chart's; so is the pod template's
`checksum/config`, Helm's sha256 of the rendered ConfigMap template (`helm_config_text`). Left out: the chart's
post-delete hook (a Job running `nfd-master -prune`, which strips NFD's labels from every node when the release
is uninstalled) and everything the values leave off (topology updater, network policies, PDBs, PodMonitor).
With `registry.override` the image is pulled from `<override>/nfd/node-feature-discovery`, with the registry's pull
secrets as the chart's `imagePullSecrets` (the operator's values set none, as its NFD image is public). The chart
version and image are pinned (components/catalogs/catalog.py); `versions.nfdChart` can only name that version.
The chart's names, labels, pod defaults, CRD file and Helm rendering (`helm_config_text`) are in
components/kit/nfd_chart.py.

Clusters that already run NFD (often via the Network Operator) set `nfd.mode: existing` and nothing of the above
is rendered, so NFD is never duplicated. With GPUDirect on, the operator chart's NodeFeatureRule
`nvidia-kernel-modules` (GO:deployments/gpu-operator/templates/nodefeaturerules.yaml) is rendered in either mode:
it labels nodes `nvidia.com/{gds,gdrcopy,peermem}.capable` from the kernel modules NFD sees loaded, and waits for
the NodeFeatureRule CRD when gpu-stack deploys it.

Migrating a live stack from the Helm release (day 2)
----------------------------------------------------
Earlier versions installed this chart as a `kubernetes:helm.sh/v3:Release` named `node-feature-discovery`. On
`pulumi up` the engine creates what the program declares first and deletes what it no longer declares last, and a
Release's delete is `helm uninstall`: it would delete every object of the release, which this module now owns
under the same names, and run the chart's prune hook, stripping the NFD labels that place the driver, the node
agent and every operand. The objects therefore keep the chart's names and selectors (an immutable selector would
otherwise force a replace) and carry `pulumi.com/patchForce: "true"`, so server-side apply takes over the fields
Helm's field manager owned, now and on every later change to them; and the Release must leave the state without
an uninstall. `pulumi state delete` refuses that (the node-labelling component and the NodeFeatureRule depend on
the Release in the state), so the Release is marked retained instead. Once per live stack with `nfd.mode: deploy`:

1. Drop `gpu-stack:nfd.chartRepository` from the stack file (the program refuses the key).
2. `pulumi stack export --file state.json`, then
   `python -m gpustack.nfd_migration state.json` (sets `retainOnDelete` on the Release in the file; it says when
   there is none), then `pulumi stack import --file state.json`.
3. `PULUMI_K8S_UPSERT_EXISTING_OBJECTS=true pulumi up`: the native objects adopt the release's objects in place
   (server-side apply onto what exists instead of AlreadyExists), and the retained Release is dropped from the
   state without `helm uninstall`. Preview first: it must show no NFD object replaced, and the Release deleted.
4. `kubectl -n <namespace> delete secret -l owner=helm,name=node-feature-discovery`: Helm's release records, so
   no later `helm uninstall` can delete the objects or prune the labels; the objects stay.

Step 2 must come before step 3: step 3 without it adopts the objects and then uninstalls the release over them.
Without the environment variable of step 3 the objects the release holds cannot be created (AlreadyExists), so the
update stops before its deletes, which come last, and the Release stays. `gpustack diff` against a commit of the
old program reports the Release's deletion as `helm-release-deleted`: it cannot see the state, so allow it once
step 2 is done. Stacks created with this version, and stacks with `nfd.mode: existing`, need none of this.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.apiextensions.v1 import (
    CustomResourceDefinitionNamesArgs,
    CustomResourceDefinitionSpecArgs,
    CustomResourceDefinitionVersionArgs,
    CustomResourceValidationArgs,
)
from pulumi_kubernetes.apps.v1 import (
    DaemonSetSpecArgs,
    DaemonSetUpdateStrategyArgs,
    DeploymentSpecArgs,
    RollingUpdateDaemonSetArgs,
)
from pulumi_kubernetes.core.v1 import (
    AffinityArgs,
    ContainerArgs,
    NodeAffinityArgs,
    NodeSelectorRequirementArgs,
    PreferredSchedulingTermArgs,
    NodeSelectorTermArgs,
    TolerationArgs,
)
from pulumi_kubernetes.rbac.v1 import RoleRefArgs, SubjectArgs

from components.catalogs import catalog
from components.config.images import image_path
from components.catalogs.consts import SKIP_AWAIT
from components.config import DaemonSets
from components.kit.builders import (
    NODE_NAME_ENV,
    also_after,
    child_opts,
    config_map_volume,
    env_from_field,
    host_path,
    kept,
    meta,
    mount,
)
from components.kit.nfd_chart import (
    CONFIG_DIR,
    GC,
    GC_INTERVAL,
    MASTER,
    MASTER_CONF,
    MASTER_CONF_KEY,
    PATCH_FORCE,
    PORT,
    RELEASE,
    RESTRICTED,
    ROLE_LABEL,
    SERVICE_ACCOUNTS,
    WORKER,
    WORKER_CONF,
    WORKER_CONF_KEY,
    WORKER_HOST_MOUNTS,
    WORKER_MAX_UNAVAILABLE,
    WORKER_OWNER_REFS,
    Pods,
    chart_meta,
    config_checksum,
    config_yaml,
    container_resources,
    crd_documents,
    health_probe,
    http_ports,
    pod_spec,
    pod_template,
    role_selector,
)
from components.kit.rbac import rule

CRD_GROUP = "nfd.k8s-sigs.io"
NODE_FEATURE_RULE_CRD = f"nodefeaturerules.{CRD_GROUP}"
KERNEL_MODULES_RULE = "nvidia-kernel-modules"
# module -> the label a node gets while it is loaded
CAPABLE_LABELS = {
    "gdrdrv": "nvidia.com/gdrcopy.capable",
    "nvidia_fs": "nvidia.com/gds.capable",
    "nvidia_peermem": "nvidia.com/peermem.capable",
}

# --- the operator's values (GO:deployments/gpu-operator/values.yaml `node-feature-discovery:`) -------------------

MASTER_CONFIG: dict[str, Any] = {"extraLabelNs": ["nvidia.com"]}
# PCI classes that get a `pci-<class>_<vendor>.present` label: network (02, 0200, 0207 InfiniBand) and display
# (0300 VGA, 0302 3D controller); labelled by vendor only, hence `pci-10de.present` on every NVIDIA GPU node.
WORKER_CONFIG: dict[str, Any] = {
    "sources": {"pci": {"deviceClassWhitelist": ["02", "0200", "0207", "0300", "0302"], "deviceLabelFields": ["vendor"]}}
}
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
CONTROL_PLANE_TOLERATION = TolerationArgs(key=CONTROL_PLANE, operator="Equal", value="", effect="NoSchedule")

# --- RBAC (NFD:templates/clusterrole.yaml, role.yaml) -------------------------------------------------------------

MASTER_RULES = (
    rule([""], ["namespaces"], ["watch", "list"]),
    rule([""], ["nodes", "nodes/status"], ["get", "patch", "update", "list"]),
    rule([CRD_GROUP], ["nodefeatures", "nodefeaturerules", "nodefeaturegroups"], ["get", "list", "watch"]),
    rule([CRD_GROUP], ["nodefeaturegroups/status"], ["patch", "update"]),
    rule(["coordination.k8s.io"], ["leases"], ["create"]),
    rule(["coordination.k8s.io"], ["leases"], ["get", "update"], ["nfd-master.nfd.kubernetes.io"]),
)
GC_RULES = (
    rule([""], ["nodes"], ["list", "watch"]),
    rule(["topology.node.k8s.io"], ["noderesourcetopologies"], ["delete", "list"]),
    rule([CRD_GROUP], ["nodefeatures"], ["delete", "list"]),
)
WORKER_RULES = (
    rule([CRD_GROUP], ["nodefeatures"], ["create", "get", "update", "delete"]),
    rule([""], ["pods"], ["get"]),
)


def kernel_module_rules() -> list[dict]:
    return [
        {
            "name": f"kernel-module-{module}",
            "labels": {label: "true"},
            "matchFeatures": [{"feature": "kernel.loadedmodule", "matchExpressions": {module: {"op": "Exists"}}}],
        }
        for module, label in CAPABLE_LABELS.items()
    ]


def nfd_image(registry_override: Optional[str]) -> str:
    path, tag = catalog.NFD_IMAGE
    return image_path(registry_override or catalog.NFD_REGISTRY, path, tag)


class NodeFeatureDiscovery(pulumi.ComponentResource):
    crds: dict[str, k8s.apiextensions.v1.CustomResourceDefinition]
    workloads: list[pulumi.Resource]

    def __init__(
        self,
        name: str,
        *,
        namespace: str,
        daemonsets: DaemonSets,
        registry_override: Optional[str],
        pull_secrets: Sequence[str] = (),
        deploy: bool = True,
        kernel_module_labels: bool = False,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:NodeFeatureDiscovery", name, None, opts)
        child = child_opts(self, depends_on)
        self.crds = {}
        self.workloads = []
        if deploy:
            self._deploy(namespace, Pods(daemonsets, nfd_image(registry_override), tuple(pull_secrets)), child)
        if kernel_module_labels:
            # The rule's CRD is one of NFD's: gpu-stack's own when it deploys NFD, the cluster's otherwise.
            rule_crd = [self.crds[NODE_FEATURE_RULE_CRD]] if deploy else []
            k8s.apiextensions.CustomResource(
                KERNEL_MODULES_RULE,
                api_version=f"{CRD_GROUP}/v1alpha1",
                kind="NodeFeatureRule",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=KERNEL_MODULES_RULE),
                spec={"rules": kernel_module_rules()},
                opts=also_after(child, *rule_crd),
            )
        self.register_outputs(
            {
                "chartVersion": catalog.NFD_CHART_VERSION if deploy else None,
                "crds": sorted(self.crds),
                "kernelModuleLabels": kernel_module_labels,
            }
        )

    def _deploy(self, namespace: str, pods: Pods, opts: pulumi.ResourceOptions) -> None:
        for doc in crd_documents():
            self.crds[doc["metadata"]["name"]] = self._crd(doc, opts)
        crds = list(self.crds.values())

        # a ServiceAccount per role, each bound to its own rights (NFD:templates/serviceaccount.yaml, *role*.yaml). The
        # master's keeps the name the operator's values gave all three, so a live stack keeps it as it is; the worker
        # and gc ones are new, and their pods roll onto them (the rights move with the bindings' subjects, in place).
        accounts = {role: k8s.core.v1.ServiceAccount(name, metadata=chart_meta(name, namespace), opts=opts)
                    for role, name in SERVICE_ACCOUNTS.items()}
        subjects = {role: [SubjectArgs(kind="ServiceAccount", name=name, namespace=namespace)]
                    for role, name in SERVICE_ACCOUNTS.items()}
        master_binding = self._cluster_rbac(RELEASE, MASTER_RULES, subjects["master"], also_after(opts, accounts["master"]))
        gc_binding = self._cluster_rbac(GC, GC_RULES, subjects["gc"], also_after(opts, accounts["gc"]))
        worker_role = k8s.rbac.v1.Role(WORKER, metadata=chart_meta(WORKER, namespace), rules=list(WORKER_RULES), opts=opts)
        worker_binding = k8s.rbac.v1.RoleBinding(
            WORKER,
            metadata=chart_meta(WORKER, namespace),
            role_ref=RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=WORKER),
            subjects=subjects["worker"],
            opts=also_after(opts, accounts["worker"], worker_role),
        )

        master_conf = self._config_map(MASTER_CONF, namespace, MASTER_CONF_KEY, MASTER_CONFIG, opts)
        worker_conf = self._config_map(WORKER_CONF, namespace, WORKER_CONF_KEY, WORKER_CONFIG, opts)
        self.workloads = [
            self._master(namespace, pods, also_after(opts, master_binding, master_conf, *crds)),
            self._worker(namespace, pods, also_after(opts, worker_binding, worker_conf, *crds)),
            self._gc(namespace, pods, also_after(opts, gc_binding, *crds)),
        ]

    @staticmethod
    def _crd(doc: dict[str, Any], opts: pulumi.ResourceOptions) -> k8s.apiextensions.v1.CustomResourceDefinition:
        spec, names = doc["spec"], doc["spec"]["names"]
        name = doc["metadata"]["name"]
        return k8s.apiextensions.v1.CustomResourceDefinition(
            name,
            metadata=meta(name, annotations={**doc["metadata"].get("annotations", {}), **PATCH_FORCE}),
            spec=CustomResourceDefinitionSpecArgs(
                group=spec["group"],
                scope=spec["scope"],
                names=CustomResourceDefinitionNamesArgs(
                    kind=names["kind"],
                    list_kind=names.get("listKind"),
                    plural=names["plural"],
                    singular=names.get("singular"),
                    short_names=names.get("shortNames"),
                ),
                versions=[
                    CustomResourceDefinitionVersionArgs(
                        name=version["name"],
                        served=version["served"],
                        storage=version["storage"],
                        subresources=version.get("subresources"),
                        # plain wire-form data: openAPIV3Schema's field names pass through as they are
                        schema=CustomResourceValidationArgs(open_apiv3_schema=version["schema"]["openAPIV3Schema"]),
                    )
                    for version in spec["versions"]
                ],
            ),
            opts=kept(opts),
        )

    @staticmethod
    def _cluster_rbac(
        name: str, rules: Sequence[Any], subjects: list[SubjectArgs], opts: pulumi.ResourceOptions
    ) -> k8s.rbac.v1.ClusterRoleBinding:
        role = k8s.rbac.v1.ClusterRole(name, metadata=chart_meta(name), rules=list(rules), opts=opts)
        return k8s.rbac.v1.ClusterRoleBinding(
            name,
            metadata=chart_meta(name),
            role_ref=RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name),
            subjects=subjects,
            opts=also_after(opts, role),
        )

    @staticmethod
    def _config_map(
        name: str, namespace: str, key: str, config: dict[str, Any], opts: pulumi.ResourceOptions
    ) -> k8s.core.v1.ConfigMap:
        return k8s.core.v1.ConfigMap(name, metadata=chart_meta(name, namespace), data={key: config_yaml(config)}, opts=opts)

    @staticmethod
    def _master(namespace: str, pods: Pods, opts: pulumi.ResourceOptions) -> k8s.apps.v1.Deployment:
        container = ContainerArgs(
            name="master",
            image=pods.image,
            image_pull_policy="IfNotPresent",
            command=["nfd-master"],
            args=[f"-port={PORT}"],
            env=[NODE_NAME_ENV],
            ports=http_ports(),
            startup_probe=health_probe(failure_threshold=30),
            liveness_probe=health_probe(),
            readiness_probe=health_probe(failure_threshold=10),
            resources=container_resources("master"),
            security_context=RESTRICTED,
            volume_mounts=[mount("nfd-master-conf", CONFIG_DIR, read_only=True)],
        )
        prefer_control_plane = PreferredSchedulingTermArgs(
            weight=1,
            preference=NodeSelectorTermArgs(
                match_expressions=[NodeSelectorRequirementArgs(key=CONTROL_PLANE, operator="In", values=[""])]
            ),
        )
        spec = pod_spec(
            pods,
            "master",
            container,
            enable_service_links=False,
            affinity=AffinityArgs(node_affinity=NodeAffinityArgs(preferred_during_scheduling_ignored_during_execution=[prefer_control_plane])),
            tolerations=[CONTROL_PLANE_TOLERATION],
            volumes=[config_map_volume("nfd-master-conf", config_map=MASTER_CONF, items=[(MASTER_CONF_KEY, MASTER_CONF_KEY)])],
        )
        checksum = config_checksum(MASTER_CONF, namespace, MASTER_CONF_KEY, MASTER_CONFIG)
        return k8s.apps.v1.Deployment(
            MASTER,
            metadata=chart_meta(MASTER, namespace, {ROLE_LABEL: "master"}),
            spec=DeploymentSpecArgs(replicas=1, selector=role_selector("master"), template=pod_template("master", spec, checksum)),
            opts=opts,
        )

    @staticmethod
    def _worker(namespace: str, pods: Pods, opts: pulumi.ResourceOptions) -> k8s.apps.v1.DaemonSet:
        container = ContainerArgs(
            name="worker",
            image=pods.image,
            image_pull_policy="IfNotPresent",
            command=["nfd-worker"],
            args=[f"-owner-refs={','.join(WORKER_OWNER_REFS)}", f"-port={PORT}"],
            env=[NODE_NAME_ENV, env_from_field("POD_NAME", "metadata.name"), env_from_field("POD_UID", "metadata.uid")],
            ports=http_ports(),
            liveness_probe=health_probe(initial_delay_seconds=10),
            readiness_probe=health_probe(initial_delay_seconds=5, failure_threshold=10),
            resources=container_resources("worker"),
            security_context=RESTRICTED,
            volume_mounts=[
                *(mount(volume, path, read_only=True) for volume, (_, path) in WORKER_HOST_MOUNTS.items()),
                mount("nfd-worker-conf", CONFIG_DIR, read_only=True),
            ],
        )
        gpu_tolerations = [
            TolerationArgs(key=t.key, operator=t.operator, value=t.value, effect=t.effect, toleration_seconds=t.toleration_seconds)
            for t in pods.daemonsets.tolerations
        ]
        spec = pod_spec(
            pods,
            "worker",
            container,
            tolerations=[CONTROL_PLANE_TOLERATION, *gpu_tolerations],
            volumes=[
                *(host_path(volume, path) for volume, (path, _) in WORKER_HOST_MOUNTS.items()),
                config_map_volume("nfd-worker-conf", config_map=WORKER_CONF, items=[(WORKER_CONF_KEY, WORKER_CONF_KEY)]),
            ],
        )
        checksum = config_checksum(WORKER_CONF, namespace, WORKER_CONF_KEY, WORKER_CONFIG)
        return k8s.apps.v1.DaemonSet(
            WORKER,
            # like every DaemonSet of the stack, not awaited: a sick node must not hang `pulumi up`
            metadata=chart_meta(WORKER, namespace, {ROLE_LABEL: "worker"}, {SKIP_AWAIT: "true"}),
            spec=DaemonSetSpecArgs(
                selector=role_selector("worker"),
                update_strategy=DaemonSetUpdateStrategyArgs(rolling_update=RollingUpdateDaemonSetArgs(max_unavailable=WORKER_MAX_UNAVAILABLE)),
                template=pod_template("worker", spec, checksum),
            ),
            opts=opts,
        )

    @staticmethod
    def _gc(namespace: str, pods: Pods, opts: pulumi.ResourceOptions) -> k8s.apps.v1.Deployment:
        container = ContainerArgs(
            name="gc",
            image=pods.image,
            image_pull_policy="IfNotPresent",
            command=["nfd-gc"],
            args=[f"-gc-interval={GC_INTERVAL}"],
            env=[NODE_NAME_ENV],
            ports=http_ports(),
            liveness_probe=health_probe(initial_delay_seconds=10),
            readiness_probe=health_probe(initial_delay_seconds=5),
            resources=container_resources("gc"),
            security_context=RESTRICTED,
        )
        return k8s.apps.v1.Deployment(
            GC,
            metadata=chart_meta(GC, namespace, {ROLE_LABEL: "gc"}),
            spec=DeploymentSpecArgs(replicas=1, selector=role_selector("gc"), template=pod_template("gc", pod_spec(pods, "gc", container))),
            opts=opts,
        )
