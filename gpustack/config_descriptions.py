"""What each stack configuration key means, for the keys whose model says nothing about them.

The configuration reference (docs/configuration.md) and the stack-file schema (docs/stack.schema.json) take a
key's type, default, allowed values and bounds from the pydantic models in components/config/, and its
description from the model too: a field's `Field(description=...)`, else the docstring of the model the key
holds. Most fields have neither today, so the text below, carried over from the hand-written reference the README
used to hold, fills in; it says what a key does and leaves types, defaults and allowed values to the models.

tests/test_config_docs.py keeps this honest: every key needs a description from one of the two places, an entry
here must name a key the models have, and an entry for a key that gained a model description must go (the model's
text wins, so the entry would be dead).

Keys are written as the program's errors write them, without the `gpu-stack:` prefix: `nodePools[].sharing.strategy`.
"""

from __future__ import annotations

from components.catalogs import catalog

# versions.<key>: which image each tag pins (from the catalog, so the repository is never misnamed), and a note.
_IMAGE_NOTES = {
    "devicePlugin": " for the device plugin and the MPS control daemon",
    "gfd": " for GPU Feature Discovery (versioned apart from the plugin, as in the operator)",
    "validator": ", the validator (also the node status exporter's image)",
    "dcgm": ", the standalone host engine (`components.dcgm`)",
    "sandboxDevicePlugin": ", KubeVirt's GPU device plugin for VM pools",
    "kataDevicePlugin": ", the sandbox device plugin of VM pools in kata mode",
    "gds": " (GPUDirect Storage); the node's `-<osTag>` is appended to a tag, as for the driver",
    "gdrcopy": " (GDRCopy); the node's `-<osTag>` is appended to a tag, as for the driver",
    "draDriver": ", NVIDIA's DRA driver (pools with `allocation: dra`)",
}
_IMAGE_VERSIONS = {
    f"versions.{key}": f"Tag or digest of `{repository}`{_IMAGE_NOTES.get(key, '')}; never `latest`."
    for key, (repository, _) in catalog.IMAGES.items()
    if key != "driver"
}

DESCRIPTIONS: dict[str, str] = {
    # --- cluster ---------------------------------------------------------------------------------------------
    "cluster": "The cluster this stack manages, and how the stack's explicit Kubernetes provider reaches it.",
    "cluster.name": "The cluster's name; also the Kubernetes provider's `clusterIdentifier`, so a rotated kubeconfig never replaces every object. Changing it does: every object of the stack is deleted and re-created, the drivers leaving every node, so `gpustack diff` flags it as `cluster-replaced`. Never rename a live stack's cluster.",
    "cluster.context": "The kubeconfig context of this stack's cluster.",
    "cluster.kubeconfig": "The path of the kubeconfig file; unset, the kubeconfig default. Contents are refused here (they hold credentials): they go in the secret key `kubeconfig`.",
    "cluster.kubernetesVersions": "The Kubernetes versions the cluster runs (and will run); `python -m gpustack check` schema-checks every object against each, and the `resource.k8s.io` version of DRA objects is the newest all of them serve.",
    "cluster.containerRuntime": "The container runtime the toolkit configures.",
    "cluster.namespace": "The namespace of all operands.",
    # --- registry ---------------------------------------------------------------------------------------------
    "registry": "Where images come from, and how operand pods authenticate.",
    "registry.override": "A `host[:port][/path]` replacing `nvcr.io` for every NVIDIA image (and NFD's image); private images such as a vGPU manager or a privately built precompiled driver are never rewritten.",
    "registry.pullSecrets": "Secret names added to every operand pod.",
    "registry.credentials.server": "The registry host (`host[:port]`) the pull Secret authenticates against, e.g. `nvcr.io` or `harbor.internal:8443`.",
    "registry.credentials.username": "The registry user (`$oauthtoken` for an NGC API key on nvcr.io); the password is the secret key `registryPassword`.",
    "kubeconfig": "The contents of the cluster's kubeconfig, instead of the path `cluster.kubeconfig`: `pulumi config set --secret kubeconfig \"$(cat FILE)\"`. The Kubernetes provider gets it as a secret, so it is never stored unencrypted in the stack file or in state.",
    "registryPassword": "The registry password or NGC API key of `registry.credentials`; required with it, and only with it. It is never stored unencrypted in the stack file or in state.",
    # --- versions ----------------------------------------------------------------------------------------------
    "versions.driver": "The full driver version (`595.91.07`) or `sha256:` digest of managed drivers; a pool can pin another with `nodePools[].driver.version`. Precompiled drivers follow `driver.branch`.",
    **_IMAGE_VERSIONS,
    "versions.nfdChart": "The Node Feature Discovery chart whose objects gpu-stack renders itself; pinned, any other version is refused (remove the key).",
    # --- driver ------------------------------------------------------------------------------------------------
    "driver": "The stack's driver; each pool can differ with `nodePools[].driver`. See docs/drivers.md.",
    "driver.mode": "`managed`: a driver container builds and loads the modules; `precompiled`: a per-kernel image only loads them (pools name a `nodeImage`); `host`: the node image ships the driver and no driver DaemonSet is deployed.",
    "driver.branch": "The driver branch of precompiled images (`580`, `595`).",
    "driver.kernelModuleType": "The driver container's `KERNEL_MODULE_TYPE`. Blackwell GPUs run only on the open modules, so `proprietary` is refused for them (`auto` picks open there).",
    # --- toolkit -----------------------------------------------------------------------------------------------
    "toolkit": "The NVIDIA Container Toolkit DaemonSet.",
    "toolkit.installDir": "The absolute host path the toolkit installs into.",
    "toolkit.cdi": "Container Device Interface: CDI specs, the `nvidia-cdi` / `nvidia-legacy` RuntimeClasses and `cdi-*` device lists in the device plugin.",
    "toolkit.runtimeConfig": "Host path of the container runtime's config file, where the distribution moves it; unset, the runtime's default.",
    "toolkit.runtimeDropInConfig": "Host path of the runtime's drop-in config file; unset, the runtime's default.",
    "toolkit.runtimeSocket": "Host path of the runtime's socket (k3s: `/run/k3s/containerd/containerd.sock`); not with cri-o.",
    # --- device plugin, validator, validation, NFD, node agent -------------------------------------------------
    "devicePlugin": "The device plugin's stack-wide settings; per pool, `nodePools[].sharing`.",
    "devicePlugin.migStrategy": "The MIG strategy of pools without a `mig-*` sharing strategy. With per-pool configs it is written into the `default` config and `MIG_STRATEGY` is left unset on the plugin, GFD and MPS daemon, because their env overrides the config file; without, it is the `MIG_STRATEGY` env as in the operator.",
    "validator": "The operator validator (it cannot be switched off: it is the node-level gate).",
    "validator.pluginWorkload": "`true` runs a vectorAdd pod requesting a GPU in plugin-validation.",
    "validation": "The stack validation gate: a Job that waits until every GPU node validated, applied after everything else. See docs/concepts.md.",
    "validation.mode": "`strict`: the Job fails on timeout and `pulumi up` fails with it; `advisory`: the Job always completes and its verdict is the `validation` stack output; `off`: no gate.",
    "validation.timeoutSeconds": "How long the gate waits for every node to validate (the Job's `activeDeadlineSeconds` and Pulumi's timeout are bounded by it).",
    "nfd": "Node Feature Discovery.",
    "nfd.mode": "`deploy` installs NFD; `existing` reuses the cluster's NFD and never installs a second.",
    "nfd.chartRepository": "Gone: gpu-stack renders Node Feature Discovery's objects itself and pulls no chart, so a stack file that still sets this key is refused; an air-gapped cluster mirrors NFD's image under `registry.override` instead.",
    "nodeAgent": "gpu-stack's node agent (node_images/node-agent): node labeller, NVML inventory and drift report, validation gates.",
    "nodeAgent.image": "The pinned image of `node_images/node-agent`, 0.10.0 or later: it reads the version-4 node-pools document (each node's driver DaemonSet chosen by the node image it runs), performs the driver upgrades (and the VM pools' vGPU and VFIO manager upgrades) within the fleet budget `upgrade.maxUnavailable`, and runs the upgrade coordinator that grants that budget in the order nodes need it and carries out the drains the agents ask for (no token on a GPU node evicts); required unless labelling and validation are off.",
    # --- daemonsets --------------------------------------------------------------------------------------------
    "daemonsets": "Settings every operand DaemonSet shares.",
    "daemonsets.priorityClassName": "The priority class of every operand.",
    "daemonsets.tolerations": "The tolerations of every operand (replaces the default).",
    "daemonsets.updateStrategy": "The update strategy of every operand but the driver (see `upgrade`).",
    "daemonsets.maxUnavailable": "The rolling-update budget of every operand but the driver: a count (a number, unquoted) or a percentage; the string `\"1\"` is refused, as the API server refuses it.",
    "daemonsets.labels": "Labels added to every operand DaemonSet and pod.",
    "daemonsets.annotations": "Annotations added to every operand DaemonSet and pod.",
    # --- DCGM exporter, MIG manager ----------------------------------------------------------------------------
    "dcgmExporter": "The DCGM exporter (`components.dcgmExporter`).",
    "dcgmExporter.extraMetrics": "Fields added to the exporter's metrics CSV (components/catalogs/dcgm_metrics.py, which already holds what the alerts and the dashboard read); no field twice, none the stack already exports.",
    "dcgmExporter.extraMetrics[].field": "A `DCGM_FI_...` field name.",
    "dcgmExporter.extraMetrics[].type": "The Prometheus metric type.",
    "dcgmExporter.extraMetrics[].help": "One line of help text, without commas or quotes (it is a CSV column).",
    "dcgmExporter.internalTrafficPolicy": "The `internalTrafficPolicy` of Service `nvidia-dcgm-exporter`.",
    "migManager": "The MIG manager (`components.migManager`), rendered when a container pool has a MIG-capable GPU.",
    "migManager.withReboot": "`true` lets the MIG manager reboot a node when a MIG mode change needs it (`WITH_REBOOT`).",
    # --- monitoring --------------------------------------------------------------------------------------------
    "monitoring": "ServiceMonitors, alerts, recording rules and the Grafana dashboard. See docs/monitoring.md.",
    "monitoring.prometheusOperator": "`true` when the cluster serves the Prometheus Operator CRDs (`monitoring.coreos.com/v1`): only then are ServiceMonitors and the PrometheusRule rendered. Declared, not probed, so an offline preview is the same.",
    "monitoring.serviceMonitor": "Both ServiceMonitors (DCGM exporter, node status exporter).",
    "monitoring.serviceMonitor.interval": "The Prometheus scrape interval (`30s`, `1m`, `1h30m`).",
    "monitoring.serviceMonitor.scrapeTimeout": "The Prometheus scrape timeout; it may not exceed the interval.",
    "monitoring.serviceMonitor.additionalLabels": "Labels added to the ServiceMonitors (what your Prometheus' `serviceMonitorSelector` matches, e.g. `release: kube-prometheus-stack`).",
    "monitoring.alerts": "The GPU and stack-health alerts of PrometheusRule `gpu-stack`.",
    "monitoring.alerts.enabled": "Alerts are rendered only with `prometheusOperator` and the DCGM exporter; set explicitly, `true` needs both.",
    "monitoring.alerts.gpuTemperatureWarningCelsius": "GPU temperature of the warning alert; below the critical one.",
    "monitoring.alerts.gpuTemperatureCriticalCelsius": "GPU temperature of the critical alert.",
    "monitoring.alerts.framebufferUsedPercent": "Framebuffer use (of used + free + reserved) above which a GPU or MIG instance alerts.",
    "monitoring.alerts.utilizationPercent": "GPU utilisation above which a whole GPU counts as saturated.",
    "monitoring.alerts.utilizationFor": "How long a GPU stays saturated before it alerts (a Prometheus duration).",
    "monitoring.alerts.validatorNotReadyFor": "How long a validator pod stays not Ready before it alerts (a Prometheus duration).",
    "monitoring.alerts.ruleLabels": "Labels on the PrometheusRule (what your Prometheus' `ruleSelector` matches).",
    "monitoring.dashboard": "The Grafana dashboard ConfigMap `gpu-stack-dashboard`.",
    "monitoring.dashboard.enabled": "The dashboard is rendered only with the DCGM exporter; set explicitly, `true` needs it.",
    "monitoring.dashboard.labels": "Labels on the dashboard ConfigMap (replaces the default: the Grafana sidecar's default discovery label).",
    "monitoring.dashboard.folder": "Written to the annotation `grafana_folder`.",
    # --- MIG layouts and node pools ----------------------------------------------------------------------------
    "nodePools": "The node pools, in match order: the node agent gives a node the first pool whose selector matches. At least one.",
    "nodePools[].name": "The pool's name (unique); its nodes are labelled `gpu-stack/pool=<name>`.",
    "nodePools[].nodeSelector": "A label map selecting the pool's nodes; `{}` (catch-all) only on the last pool, and no two pools alike.",
    "nodePools[].gpuModel": "The pool's GPU model, from components/catalogs/catalog.py.",
    "nodePools[].os": "The OS as NFD reports it (`ID`+`VERSION_ID`), e.g. `ubuntu22.04`, `rhel9`; required unless `nodeImage` is set, and must agree with it. A list of 1 to 4 while the pool's nodes move to another OS: one driver DaemonSet per OS, each selecting the nodes NFD says run it (docs/runbook.md). Changing a single value in place is a `node-image-changed` danger in `gpustack diff`.",
    "nodePools[].nodeImage": "An entry of node_images/catalog.yaml (OS, exact kernel, architecture); required when the pool's driver is `precompiled`. A list of 1 to 4 entries while the pool's nodes move to another kernel or OS: one driver DaemonSet per entry (precompiled) or OS (managed), named `nvidia-driver-daemonset-<pool>-[<kernel>-]<os>`, each selecting the nodes running it. Changing a single value in place is a `node-image-changed` danger in `gpustack diff`.",
    "nodePools[].workloadType": "`container`, `vm-passthrough` (whole GPUs to VMs) or `vm-vgpu` (GPUs split into vGPUs for KubeVirt VMs).",
    "nodePools[].driver.mode": "Overrides `driver.mode` for this pool (defaults to it); container pools only.",
    "nodePools[].driver.version": "A full version or digest, managed pools only (defaults to `versions.driver`).",
    "nodePools[].driver.branch": "`580`, `595`, ..., precompiled pools only (defaults to `driver.branch`).",
    "nodePools[].driver.kernelModuleType": "Overrides `driver.kernelModuleType` for this pool (defaults to it).",
    "nodePools[].driver.daemonSetNames": "For a pool that lists its node images (`nodeImage` or `os` as a list): the name each entry's driver DaemonSet already runs under, by entry (a catalog entry, or an OS tag for a managed driver), where it is not `nvidia-driver-daemonset-<pool>-[<kernel>-]<os>`. When a pool with one image first lists a second, name its one DaemonSet here for the image it serves, so it keeps running untouched.",
    "nodePools[].driver.daemonSetName": "The pool's driver DaemonSet name when it is not `nvidia-driver-daemonset-<pool>`: the name it already runs under (after a pool rename, or from a stack deployed before names were stable). Pools that name one DaemonSet share it and must run the same driver in the same wave.",
    "nodePools[].sharing": "How the pool's GPUs are shared (container pools only). See docs/sharing.md.",
    "nodePools[].sharing.strategy": "`none`, `time-slicing`, `mps`, `mig-single` or `mig-mixed`; keys other than `strategy` need a strategy other than `none`, and each strategy takes only its own.",
    "nodePools[].sharing.replicas": "How many workloads share one GPU; required with `time-slicing` (up to 64) and `mps` (up to 48).",
    "nodePools[].sharing.renameByDefault": "With `time-slicing` and `mps`: advertise `nvidia.com/gpu.shared` instead of `nvidia.com/gpu`. Unset, `false`.",
    "nodePools[].sharing.failRequestsGreaterThanOne": "With `time-slicing` only: refuse requests for more than one replica (MPS always does). Unset, `false`.",
    "nodePools[].sharing.migLayout": "Required with `mig-single` and `mig-mixed`: a built-in layout of the pool's GPU model or a `migLayouts` name.",
    "nodePools[].vgpuConfig": "vm-vgpu pools: a `default-vgpu-devices-config` entry (`default`, `A10-12Q`, ...) that fits the pool's GPU model, written as `nvidia.com/vgpu.config`; defaults to `vgpu.defaultConfig`.",
    "nodePools[].allocation": "Who hands out a container pool's GPUs: the device plugin (`nvidia.com/gpu`) or NVIDIA's DRA driver (ResourceClaims). `dra` needs Kubernetes 1.34+ on every declared version.",
    "nodePools[].expectedNodes": "How many nodes the pool has: the gates fail while fewer of them are validated, and each wave's `timeoutSeconds` (and `validation.timeoutSeconds` for the last wave) is checked against how long the wave's declared nodes take to roll within the fleet budget (`upgrade.maxUnavailable`, a percentage of all declared nodes, capped by `maxParallelUpgrades`).",
    # --- components --------------------------------------------------------------------------------------------
    "components.nfd": "Node Feature Discovery (with `nfd.mode: deploy`).",
    "components.nodeLabeler": "The node agent's labeller, which gives each node its pool's labels.",
    "components.toolkit": "The NVIDIA Container Toolkit.",
    "components.devicePlugin": "The device plugin.",
    "components.dcgm": "`true` deploys a standalone nv-hostengine the exporter connects to; `false` leaves the exporter its embedded one.",
    "components.dcgmExporter": "The DCGM exporter.",
    "components.gfd": "GPU Feature Discovery (`mps` sharing needs it).",
    "components.migManager": "The MIG manager.",
    "components.nodeStatusExporter": "The node status exporter.",
    "components.nodeInventory": "The node agent's NVML drift report on every container GPU node (annotations `gpu-stack/inventory`, `gpu-stack/drift`); needs `components.nodeLabeler`.",
    # --- upgrade -----------------------------------------------------------------------------------------------
    "upgrade.strategy": "Driver DaemonSets are OnDelete either way. `rolling`: the node agent replaces each node's outdated driver pod within the fleet budget (cordon, evict or drain, new driver, validation, uncordon); `manual`: a node changes when someone deletes its driver pod.",
    "upgrade.maxUnavailable": "The fleet's one disruption budget: how many nodes may be out of service for a change gpu-stack makes at any moment, across all pools, driver DaemonSets and waves. It covers driver upgrades, driver handovers (a pool renamed or moved to another DaemonSet), deploy-label removals and MIG relayouts. A count (a number, unquoted) or a percentage of the stack's GPU nodes with a managed driver (rounded up, at least one); a node counts until its new driver is Ready and validated.",
    "upgrade.gpuPodEviction": "With `rolling`, the node agent evicts a node's GPU pods (each once) once it is cordoned, before its driver pod is replaced; false waits for them to end instead. With `manual`, `ENABLE_GPU_POD_EVICTION` of k8s-driver-manager.",
    "upgrade.drain.enabled": "Drain: the node agent cordons and evicts GPU work a deploy-label removal would otherwise wait for; with `manual`, `ENABLE_AUTO_DRAIN` of k8s-driver-manager (drain when eviction fails or modules stay busy).",
    "upgrade.drain.force": "`DRAIN_USE_FORCE` (also used by the GPU-pod eviction).",
    "upgrade.drain.podSelector": "A label selector (`app=batch,tier!=critical`, `key in (a,b)`) of the pods an eviction may take (the node agent's, and `DRAIN_POD_SELECTOR_LABEL`); pods it does not select are never evicted.",
    "upgrade.drain.timeoutSeconds": "How long evictions may be refused (a PodDisruptionBudget) before the node is marked `upgrade-failed`, halting the rollout; `DRAIN_TIMEOUT_SECONDS`; 0 waits forever.",
    "upgrade.drain.deleteEmptyDirData": "`DRAIN_DELETE_EMPTYDIR_DATA` (also used by the GPU-pod eviction).",
    "upgrade.waves": "Ordered upgrade waves: every pool with a deployed driver in exactly one (host-driver and VM pools in none); a wave's driver DaemonSets change only after the previous wave's nodes validated, and every wave's nodes share the one fleet budget `maxUnavailable`. Empty: one wave. Needs `strategy: rolling`, the node labeller and a validation mode other than `off`.",
    "upgrade.waves[].name": "The wave's name, unique.",
    "upgrade.waves[].pools": "The pools of the wave.",
    "upgrade.waves[].timeoutSeconds": "How long the gate after this wave waits for its nodes' drivers to roll out and validate.",
    # --- VM workloads, vGPU, GPUDirect, DRA --------------------------------------------------------------------
    "sandboxWorkloads.mode": "`kubevirt`: KubeVirt's GPU device plugin serves VM pools; `kata`: NVIDIA's sandbox device plugin for Kata Containers, with the CC manager.",
    "sandboxWorkloads.ccManager.enabled": "The confidential-computing manager on VM nodes in kata mode.",
    "sandboxWorkloads.ccManager.defaultMode": "`DEFAULT_CC_MODE` for CC-capable GPUs without `nvidia.com/cc.mode`.",
    "sandboxWorkloads.defaultWorkload": "What the sandbox validator assumes for a node without `nvidia.com/gpu.workload.config`.",
    "sandboxWorkloads.kubevirt.name": "Name of the cluster's `KubeVirt` CR gpu-stack patches.",
    "sandboxWorkloads.kubevirt.namespace": "Namespace of the cluster's `KubeVirt` CR.",
    "sandboxWorkloads.kubevirt.permitHostDevices": "`false` leaves `permittedHostDevices` to the CR's owner (then add the entries `pulumi preview` shows yourself).",
    "vgpu.managerImage": "The pinned reference of the vGPU manager image the team built (NVIDIA publishes none), `-<osTag>` included; required with a vm-vgpu pool.",
    "vgpu.defaultConfig": "`DEFAULT_VGPU_CONFIG`: the vGPU config of a node whose pool names none.",
    "gpudirect.gds": "GPUDirect Storage: the `nvidia-fs-ctr` sidecar in every driver DaemonSet. With nvidia-fs ≥ 2.17.5 the open kernel modules are required (`auto` renders as `open`, `proprietary` is refused); not with precompiled drivers.",
    "gpudirect.gdrcopy": "GDRCopy: the `nvidia-gdrcopy-ctr` sidecar (gdrdrv); not with precompiled drivers.",
    "gpudirect.rdma.enabled": "GPUDirect RDMA: `nvidia-peermem` built with the driver and kept loaded by `nvidia-peermem-ctr`.",
    "gpudirect.rdma.useHostMofed": "`true` when MOFED is installed on the host (sources under `/usr/src`), `false` when NVIDIA's Network Operator runs it (`/run/mellanox/drivers`); only with `rdma.enabled`.",
    "dra.computeDomains": "ComputeDomains for multi-node NVLink (IMEX): the controller, CRDs and the kubelet plugin's `compute-domains` container; only with a DRA pool.",
}
