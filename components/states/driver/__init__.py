"""The driver room: everything that assembles a driver-like DaemonSet, so a change to the driver pod is made here.

A driver-like DaemonSet puts a host driver on its nodes (the driver, per pool and node image; the vGPU manager,
per RHCOS build with the Driver Toolkit): restarting its pod takes the GPUs from the node's work, so each is
OnDelete and rolled by the node agents within the fleet's one budget. The room, in the order a stack config
travels through it:

- targets.py: which driver DaemonSets a stack renders and what each installs (`plan_targets`: per pool, per
  node image, per pinned name), the GPUDirect sidecars they build, and the config digest that tells
  k8s-driver-manager whether a reinstall is needed;
- images.py: the driver's and the sidecars' image on each node OS (the `-<osTag>` suffix), from the repository
  and version components/config/images.py resolves for every operand;
- extensions.py: what the stack's `driver.*` keys add to the pod (licence, repositories, CAs, module
  parameters, secretEnv, extra volumes, probe timings) and the `upgrade.waitForCompletion` init container;
- sidecars.py: the GPUDirect containers (nvidia-peermem, nvidia-fs, gdrcopy) and their env;
- openshift.py: the Driver Toolkit sidecar, the proxy env and the trusted CA bundle on OpenShift;
- state.py: the driver pod and DaemonSet (`driver_daemonset_parts`), k8s-driver-manager, and `state-driver`
  (`Driver`), which registers the planned DaemonSets with their RBAC and startup probe;
- vgpu_manager.py: the vGPU manager in NVIDIA's NVIDIADriver form and `state-vgpu-manager` (`VgpuManager`);
- rolled.py: what makes a DaemonSet agent-rolled (OnDelete, the `gpu-stack/template-digest` the node agents
  roll to); the VFIO manager (components/states/vfio_manager.py) is rolled the same way.
"""
