"""States 13 and 14 (vm-vgpu nodes), object by object: the vGPU manager against NVIDIA's NVIDIADriver form
(GO:manifests/state-driver/0500_daemonset.yaml with driverType vgpu-host-manager, golden
internal/state/testdata/golden/driver-vgpu-host-manager.yaml), the device manager against
GO:assets/state-vgpu-device-manager with `TransformVGPUDeviceManager` (fact sheet §1.2,
§2.11, §4.4, §7, Appendix B and C): names, images, init order and env, host paths, security contexts, RBAC,
deploy labels, the licensing mount, and the vGPU devices document with its catalog.

The components are rendered on their own (vm-vgpu pools are not configurable yet), through a program that builds
them from the stack's operand settings against the stack's Kubernetes provider, as `__main__.py` does."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from components.catalogs import catalog
from components.catalogs import consts
from components.catalogs import vgpu_catalog
from components.states import vgpu_device_manager
from components.config import load_config
from components.catalogs.vgpu_catalog import BOARDS, parse_type
from gpustack import schema
from gpustack.mockrun import run_program
from gpustack.policyrun import pack_config
from policytest import violations
from operandtest import (
    NAMESPACE_FIELD,
    NODE_NAME,
    SCC,
    VALIDATIONS,
    VALIDATOR_IMAGE,
    assert_vm_driver_manager,
    host_paths,
    names,
    pod_spec,
    rbac,
)
from stacktest import bag, container, env_of, objects, stack_config

# Helm values.yaml `vgpuDeviceManager` (v26.7.0 and HEAD)
DEVICE_MANAGER_IMAGE = "nvcr.io/nvidia/cloud-native/vgpu-device-manager:v0.5.0"
# NVIDIA publishes none: the user builds it, `-<osTag>` included (a registry the kubevirt pack config allows)
VGPU_MANAGER_IMAGE = "harbor.platform.internal/gpu-stack/vgpu-manager:580.95.02-ubuntu22.04"

VGPU_MANAGER = "nvidia-vgpu-manager-daemonset"
VGPU_MANAGER_SA = "nvidia-vgpu-manager"
DEVICE_MANAGER = "nvidia-vgpu-device-manager"

# The entries policies/gpu_stack_policies/privileged.py ALLOWANCES needs for these DaemonSets (asset host access).
PROPOSED_ALLOWANCES = {
    VGPU_MANAGER: (
        {"k8s-driver-manager", "nvidia-driver-ctr"},
        {
            "/", "/dev/log", "/dev/vfio", "/etc/os-release", "/run/mellanox/drivers", "/run/mellanox/drivers/usr/src",
            "/run/nvidia", "/run/nvidia-fabricmanager", "/run/nvidia-topologyd", "/run/nvidia/driver/lib/firmware",
            "/sys", "/sys/devices/system", "/sys/fs/cgroup", "/sys/module/firmware_class/parameters/path", "/var/log",
        },
        {"hostPID"},
    ),
    DEVICE_MANAGER: (
        {"vgpu-manager-validation", "nvidia-vgpu-device-manager"},
        {"/", "/run/nvidia/driver", "/run/nvidia/validations", "/sys"},
        set(),
    ),
}

PROGRAM = """
import pulumi
from components.config import load_config, program_config
from components.kit.stack_inputs import kubernetes_provider, operands
from components.states.vgpu_device_manager import VgpuDeviceManager
from components.states.driver.vgpu_manager import VgpuManager, plan_vgpu_managers

cfg = load_config(program_config())
ops = operands(cfg)
opts = pulumi.ResourceOptions(providers=[kubernetes_provider(cfg)])
planned = plan_vgpu_managers(ops, image={image!r}, upgrade=cfg.upgrade)
manager = VgpuManager("state-vgpu-manager", ops=ops, image={image!r}, upgrade=cfg.upgrade, planned=planned, opts=opts)
VgpuDeviceManager("state-vgpu-device-manager", ops=ops, default_config={default!r}, depends_on=[manager], opts=opts)
"""


def config() -> dict:
    return copy.deepcopy(stack_config("kubevirt"))


_renders: dict[tuple, object] = {}


def render_vgpu(tmp_path_factory, *, default_config="default"):
    key = default_config
    if key not in _renders:
        program = tmp_path_factory.mktemp("vgpu-operands")
        (program / "__main__.py").write_text(
            PROGRAM.format(image=VGPU_MANAGER_IMAGE, default=default_config)
        )
        _renders[key] = run_program("test", bag(config()), program_dir=Path(program))
    return _renders[key]


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return render_vgpu(tmp_path_factory)


@pytest.fixture(scope="module")
def daemonsets(recording):
    return objects(recording, "DaemonSet")


def mounts(c: dict) -> list[tuple]:
    return [
        (m["name"], m["mountPath"], m.get("readOnly", False), m.get("mountPropagation"), m.get("subPath"))
        for m in c.get("volumeMounts", [])
    ]


# --- both DaemonSets ------------------------------------------------------------------------------------------


def test_each_daemonset_lands_only_on_nodes_the_labeller_marks_for_vm_vgpu(daemonsets):
    for ds_name, component in ((VGPU_MANAGER, "vgpu-manager"), (DEVICE_MANAGER, "vgpu-device-manager")):
        ds = daemonsets[ds_name]
        spec = pod_spec(ds)
        # k8s-driver-manager finds the device manager's pods by this label before it unloads a driver
        assert ds["spec"]["selector"]["matchLabels"] == {"app": ds_name}
        assert ds["metadata"]["labels"]["app"] == ds_name
        assert spec["nodeSelector"] == {f"nvidia.com/gpu.deploy.{component}": "true"}, ds_name
        assert component in consts.DEPLOY_COMPONENTS_BY_WORKLOAD["vm-vgpu"]
        assert component not in consts.DEPLOY_COMPONENTS_BY_WORKLOAD["vm-passthrough"]
        assert component not in consts.DEPLOY_COMPONENTS_BY_WORKLOAD["container"]
        assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert spec["priorityClassName"] == "system-node-critical"
        assert spec["imagePullSecrets"] == [{"name": "ngc-pull"}]
        # VM nodes have no container toolkit, so nothing may ask for the nvidia runtime
        assert "runtimeClassName" not in spec, ds_name
        assert ds["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
        assert "openshift.io/scc" not in ds["metadata"]["annotations"]
    # the device manager rolls as the stack's operands do; the vGPU manager waits for each pod's deletion
    assert daemonsets[DEVICE_MANAGER]["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}


# --- state-vgpu-manager ---------------------------------------------------------------------------------------


def test_vgpu_manager_pod(daemonsets):
    ds = daemonsets[VGPU_MANAGER]
    spec = pod_spec(ds)
    assert spec["serviceAccountName"] == VGPU_MANAGER_SA
    # the NVIDIADriver form: hostPID only
    assert spec["hostPID"] is True and "hostIPC" not in spec
    # shutting down disables the SR-IOV VFs and unloads the driver: 120 s, not the default 30
    assert spec["terminationGracePeriodSeconds"] == 120
    assert ds["spec"]["template"]["metadata"]["annotations"] == {"kubectl.kubernetes.io/default-container": "nvidia-driver-ctr"}
    assert names(spec["initContainers"]) == ["k8s-driver-manager"]
    assert names(spec["containers"]) == ["nvidia-driver-ctr"]
    # a restart takes every VM of the node down: a new template waits for the pod's deletion
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "nvidia-vgpu-host-manager" and labels["nvidia.com/precompiled"] == "false"
    (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchExpressions"] == [
        {"key": "app.kubernetes.io/component", "operator": "In", "values": ["nvidia-driver", "nvidia-vgpu-host-manager"]}
    ]


def test_vgpu_manager_init_takes_the_stacks_upgrade_policy_as_the_driver_does(daemonsets):
    manager = container(daemonsets[VGPU_MANAGER], "k8s-driver-manager")
    assert [e["name"] for e in manager["env"]] == [
        "NODE_NAME", "NVIDIA_VISIBLE_DEVICES", "ENABLE_GPU_POD_EVICTION", "ENABLE_AUTO_DRAIN", "DRAIN_USE_FORCE",
        "DRAIN_POD_SELECTOR_LABEL", "DRAIN_TIMEOUT_SECONDS", "DRAIN_DELETE_EMPTYDIR_DATA", "OPERATOR_NAMESPACE",
        "DRIVER_CONFIG_DIGEST",
    ]
    upgrade = load_config(bag(config())).upgrade
    # The policy's env, as before, so that no vGPU manager (and no VM) restarts for this: its token cannot evict
    # (test_vgpu_manager_rbac_is_the_drivers), and the agents' upgrades supersede it with the node annotation.
    assert env_of(manager)["ENABLE_GPU_POD_EVICTION"] == ("true" if upgrade.gpu_pod_eviction else "false")
    assert env_of(manager)["DRAIN_TIMEOUT_SECONDS"] == f"{upgrade.drain.timeout_seconds}s"
    assert [m[:2] for m in mounts(manager)] == [
        ("run-nvidia", "/run/nvidia"), ("host-root", "/host"), ("host-sys", "/sys"), ("run-mellanox-drivers", "/run/mellanox/drivers"),
    ]


def test_vgpu_manager_container_runs_the_user_image(daemonsets):
    main = container(daemonsets[VGPU_MANAGER], "nvidia-driver-ctr")
    # used verbatim: the OS tag is already in it
    assert main["image"] == VGPU_MANAGER_IMAGE and main["imagePullPolicy"] == "IfNotPresent"
    assert main["command"] == ["nvidia-driver"] and main["args"] == ["init"]
    assert [e["name"] for e in main["env"]] == ["NVIDIA_VISIBLE_DEVICES", "NODE_NAME", "NODE_IP", "DRIVER_CONFIG_DIGEST"]
    manager = container(daemonsets[VGPU_MANAGER], "k8s-driver-manager")
    assert env_of(main)["DRIVER_CONFIG_DIGEST"] == env_of(manager)["DRIVER_CONFIG_DIGEST"]
    assert main["securityContext"] == {"privileged": True, "seLinuxOptions": {"level": "s0"}}
    # NVIDIA renders no probe and no preStop for the vGPU manager; the sandbox validator judges the node
    assert not {"startupProbe", "readinessProbe", "livenessProbe", "lifecycle"} & set(main)
    assert mounts(main) == [
        ("run-nvidia", "/run/nvidia", False, "Bidirectional", None),
        ("run-nvidia-fabricmanager", "/run/nvidia-fabricmanager", False, None, None),
        ("run-nvidia-topologyd", "/run/nvidia-topologyd", False, None, None),
        ("var-log", "/var/log", False, None, None),
        ("dev-log", "/dev/log", False, None, None),
        ("host-os-release", "/host-etc/os-release", True, None, None),
        ("cgroup", "/sys/fs/cgroup", False, None, None),
        ("vfio", "/dev/vfio", False, None, None),
        ("mlnx-ofed-usr-src", "/run/mellanox/drivers/usr/src", False, "HostToContainer", None),
        ("run-mellanox-drivers", "/run/mellanox/drivers", False, "HostToContainer", None),
        ("firmware-search-path", "/sys/module/firmware_class/parameters/path", False, None, None),
        ("host-sys-devices-system", "/sys/devices/system", False, None, None),
        ("nv-firmware", "/lib/firmware", False, None, None),
    ]


def test_vgpu_manager_host_paths(daemonsets):
    assert host_paths(daemonsets[VGPU_MANAGER]) == {
        "run-nvidia": ("/run/nvidia", "DirectoryOrCreate"),
        "var-log": ("/var/log", None),
        "dev-log": ("/dev/log", None),
        "host-os-release": ("/etc/os-release", None),
        "cgroup": ("/sys/fs/cgroup", None),
        "vfio": ("/dev/vfio", None),
        "run-nvidia-fabricmanager": ("/run/nvidia-fabricmanager", "DirectoryOrCreate"),
        "run-nvidia-topologyd": ("/run/nvidia-topologyd", "DirectoryOrCreate"),
        "mlnx-ofed-usr-src": ("/run/mellanox/drivers/usr/src", "DirectoryOrCreate"),
        "run-mellanox-drivers": ("/run/mellanox/drivers", "DirectoryOrCreate"),
        "host-root": ("/", None),
        "host-sys": ("/sys", "Directory"),
        "firmware-search-path": ("/sys/module/firmware_class/parameters/path", None),
        "host-sys-devices-system": ("/sys/devices/system", "Directory"),
        "nv-firmware": ("/run/nvidia/driver/lib/firmware", "DirectoryOrCreate"),
    }


def test_no_licence_reaches_the_vgpu_manager(recording, daemonsets):
    """Licensing belongs to the guest driver in each VM; the host driver reads no licensing file."""
    ds = daemonsets[VGPU_MANAGER]
    assert not [v for v in pod_spec(ds)["volumes"] if "secret" in v]
    assert len(pod_spec(ds)["volumes"]) == 15
    assert not objects(recording, "Secret")


def test_vgpu_manager_rbac_is_the_drivers(recording):
    role, cluster_role = rbac(recording, VGPU_MANAGER_SA)
    assert role == {SCC}
    assert cluster_role == {
        (("config.openshift.io",), ("clusterversions",), ("get", "list"), ()),
        (("",), ("nodes",), ("get", "list", "patch", "update", "watch"), ()),
        (("",), ("pods",), ("get", "list", "watch"), ()),
        # no `pods/eviction` with rolling upgrades (components/states/driver/manager.py manager_evicts).
        # k8s-driver-manager finds GPU pods allocated through DRA before it unloads the driver
        (("resource.k8s.io",), ("resourceclaims",), ("get", "list"), ()),
        (("apps",), ("daemonsets",), ("get",), ()),
    }


# --- state-vgpu-device-manager --------------------------------------------------------------------------------


def test_device_manager_waits_for_either_vgpu_manager(daemonsets):
    ds = daemonsets[DEVICE_MANAGER]
    spec = pod_spec(ds)
    assert spec["serviceAccountName"] == DEVICE_MANAGER
    assert "hostPID" not in spec and "hostIPC" not in spec and "terminationGracePeriodSeconds" not in spec
    assert names(spec["initContainers"]) == ["vgpu-manager-validation"]
    gate = container(ds, "vgpu-manager-validation")
    assert gate["image"] == VALIDATOR_IMAGE and gate["imagePullPolicy"] == "IfNotPresent"
    assert gate["command"] == ["sh", "-c"]
    script = gate["args"][0]
    # a containerized vGPU manager or one installed on the host
    assert script.startswith(
        "until [ -f /run/nvidia/validations/vgpu-manager-ready ] || [ -f /run/nvidia/validations/host-vgpu-manager-ready ]; do"
    )
    assert "sleep 5" in script and script.endswith("done")
    assert "env" not in gate
    assert gate["securityContext"] == {"privileged": True, "runAsUser": 0}
    assert mounts(gate) == [(*VALIDATIONS, False, "Bidirectional", None)]


def test_device_manager_container(daemonsets):
    ds = daemonsets[DEVICE_MANAGER]
    assert names(pod_spec(ds)["containers"]) == [DEVICE_MANAGER]
    main = container(ds, DEVICE_MANAGER)
    assert main["image"] == DEVICE_MANAGER_IMAGE and main["imagePullPolicy"] == "IfNotPresent"
    assert "command" not in main and "args" not in main
    assert [e["name"] for e in main["env"]] == ["NAMESPACE", "NODE_NAME", "CONFIG_FILE", "DEFAULT_VGPU_CONFIG"]
    assert env_of(main) == {
        "NAMESPACE": NAMESPACE_FIELD,
        "NODE_NAME": NODE_NAME,
        "CONFIG_FILE": "/vgpu-config/config.yaml",
        "DEFAULT_VGPU_CONFIG": "default",
    }
    assert main["securityContext"] == {"privileged": True}
    assert mounts(main) == [
        ("vgpu-config", "/vgpu-config", False, None, None),
        ("host-sys", "/sys", False, None, None),
        ("host-root", "/host", False, "HostToContainer", None),
        ("driver-install-dir", "/driver-root", False, "HostToContainer", None),
    ]
    volumes = pod_spec(ds)["volumes"]
    assert volumes[0] == {"name": "vgpu-config", "configMap": {"name": "default-vgpu-devices-config"}}
    assert host_paths(ds) == {
        "host-sys": ("/sys", "Directory"),
        "host-root": ("/", None),
        "driver-install-dir": ("/run/nvidia/driver", "DirectoryOrCreate"),
        "run-nvidia-validations": ("/run/nvidia/validations", "DirectoryOrCreate"),
    }


def test_default_config_reaches_the_device_manager(tmp_path_factory):
    ds = objects(render_vgpu(tmp_path_factory, default_config="A100D-40C"), "DaemonSet")[DEVICE_MANAGER]
    assert env_of(container(ds, DEVICE_MANAGER))["DEFAULT_VGPU_CONFIG"] == "A100D-40C"


def test_an_unknown_default_config_is_refused(tmp_path_factory):
    with pytest.raises(Exception, match="not a config of default-vgpu-devices-config"):
        render_vgpu(tmp_path_factory, default_config="A100-80C")


def test_device_manager_rbac_watches_pods_and_updates_nodes(recording):
    role, cluster_role = rbac(recording, DEVICE_MANAGER)
    assert role == {SCC, (("",), ("pods",), ("get", "list", "watch"), ())}
    assert cluster_role == {
        (("config.openshift.io",), ("clusterversions",), ("get", "list"), ()),
        (("",), ("nodes",), ("get", "list", "update", "watch"), ()),
    }


@pytest.fixture(scope="module")
def devices_document(recording):
    config_map = objects(recording, "ConfigMap")["default-vgpu-devices-config"]
    assert config_map["metadata"]["namespace"] == "gpu-operator"
    assert list(config_map["data"]) == ["config.yaml"]
    return yaml.safe_load(config_map["data"]["config.yaml"])


def test_config_map_holds_the_operators_document(devices_document):
    assert devices_document == vgpu_catalog.devices_config()
    assert devices_document["version"] == "v1"
    assert len(devices_document["vgpu-configs"]) == 711  # 710 single-type configs and `default`


@pytest.mark.parametrize(
    "pci_id, expected",
    [
        # PCI ids of catalog models (components/catalogs/catalog.py)
        ("0x20B5", [{"A100D-40C": 2}]),  # A100-80GB PCIe
        ("0x20B2", [{"A100DX-40C": 2}]),  # A100-80GB SXM4
        ("0x1EB8", [{"T4-8Q": 2}]),
        ("0x27B8", [{"L4-12Q": 2}]),
        ("0x2330", [{"H100XM-40C": 2}]),
        ("0x2342", [{"GH200-96C": 1}]),  # catalog H100-96GB
        ("0x2901", [{"B200X-180C": 1}]),
        ("0x2BB5", [{"DC-48Q": 2}]),  # RTX-PRO-6000
        # and others: one id shared by two boards, a second id of a board
        ("0x1E78", [{"RTX8000P-24Q": 2}, {"RTX6000P-12Q": 2}]),
        ("0x2336", [{"H100XM-40C": 2}]),
        ("0x2C3A", [{"DC-16Q": 2}]),
    ],
)
def test_default_config_per_pci_id(devices_document, pci_id, expected):
    entries = [e for e in devices_document["vgpu-configs"]["default"] if e["device-filter"] == f"{pci_id}10DE"]
    assert [e["vgpu-devices"] for e in entries] == expected
    assert all(e["devices"] == "all" for e in entries)


def test_named_configs_create_one_type_on_every_gpu(devices_document):
    configs = devices_document["vgpu-configs"]
    assert configs["A100D-1-10C"] == [{"devices": "all", "vgpu-devices": {"A100D-1-10C": 7}}]
    assert configs["L40S-24Q"] == [{"devices": "all", "vgpu-devices": {"L40S-24Q": 2}}]
    assert configs["DC-4-96QGFX"] == [{"devices": "all", "vgpu-devices": {"DC-4-96QGFX": 1}}]


# --- ordering, policy and schema ------------------------------------------------------------------------------


def dependency_names(recording, kind: str, name: str) -> set[str]:
    by_urn = recording.by_urn()
    registration = recording.find(f"kubernetes:{kind}", name)
    return {by_urn[d].name for d in registration.dependencies}


def test_each_daemonset_waits_for_its_rbac_its_config_and_the_previous_state(recording):
    manager = dependency_names(recording, "apps/v1:DaemonSet", VGPU_MANAGER)
    assert {VGPU_MANAGER_SA} <= manager
    device_manager = dependency_names(recording, "apps/v1:DaemonSet", DEVICE_MANAGER)
    assert {DEVICE_MANAGER, "default-vgpu-devices-config", VGPU_MANAGER} <= device_manager


def test_the_privileged_policy_needs_exactly_the_proposed_allow_list(recording, monkeypatch):
    from gpu_stack_policies import privileged

    for ds_name, (containers, paths, namespaces) in PROPOSED_ALLOWANCES.items():
        # what the DaemonSets do on the host, from their assets; an entry the lead adds must say the same
        ds = objects(recording, "DaemonSet")[ds_name]
        spec = pod_spec(ds)
        privileged_containers = {
            c["name"] for c in [*spec.get("initContainers", []), *spec["containers"]] if c["securityContext"].get("privileged")
        }
        assert privileged_containers == containers, ds_name
        assert {path for path, _ in host_paths(ds).values()} == paths, ds_name
        assert {flag for flag in ("hostPID", "hostIPC", "hostNetwork") if spec.get(flag)} == namespaces, ds_name
        if ds_name in privileged.ALLOWANCES:
            allowance = privileged.ALLOWANCES[ds_name]
            # the vGPU manager's entry also admits the Driver Toolkit container it runs on OpenShift
            dtk = {"openshift-driver-toolkit-ctr"} if ds_name == VGPU_MANAGER else set()
            assert (set(allowance.privileged_containers), set(allowance.host_paths), set(allowance.host_namespaces)) == (
                containers | dtk,
                paths,
                namespaces,
            )
        else:
            proposed = privileged.Allowance(frozenset(containers), frozenset(paths), frozenset(namespaces))
            monkeypatch.setitem(privileged.ALLOWANCES, ds_name, proposed)
    found = violations(recording, "privileged-only-where-needed", pack_config("kubevirt"))
    found = [v for v in found if v.enforcement == "mandatory"]
    assert found == [], [v.message for v in found]


@pytest.mark.parametrize("policy", ["one-workload-type-per-node", "rbac-least-privilege", "images-pinned"])
def test_the_vgpu_operands_pass_the_policy_pack(recording, policy):
    found = [v for v in violations(recording, policy, pack_config("kubevirt")) if v.enforcement == "mandatory"]
    assert found == [], [v.message for v in found]


def test_every_vgpu_object_is_schema_valid(recording):
    versions = load_config(bag(config())).cluster.kubernetes_versions
    checked = 0
    for kind in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet"):
        for name, obj in objects(recording, kind).items():
            checked += 1
            for version in versions:
                assert schema.validate(obj, version) == [], (kind, name, version)
    assert checked == 2 * 5 + 1 + 2


# --- the vGPU catalog -----------------------------------------------------------------------------------------

LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
DEVICE_FILTER = re.compile(r"^0x[0-9A-F]{4}10DE$")


def test_rendered_yaml_round_trips():
    text = vgpu_device_manager.render_config()
    assert yaml.safe_load(text) == vgpu_catalog.devices_config()
    # hex device filters stay strings (unquoted, YAML 1.1 would read them as integers)
    assert "device-filter: '0x20B510DE'" in text


def config_problems(name: str, entries: list) -> list[str]:
    """What the device manager would refuse in one config (api/spec/v1, pkg/types), or [] when it is well formed."""
    problems = []
    if not LABEL_VALUE.match(name):  # the node label nvidia.com/vgpu.config selects it
        problems.append("name is no label value")
    if not entries:
        problems.append("no entries")
    for entry in entries:
        if not ({"devices", "vgpu-devices"} <= set(entry) <= {"device-filter", "devices", "vgpu-devices"}):
            problems.append(f"fields {sorted(entry)}")
            continue
        if entry["devices"] != "all" and not all(isinstance(i, int) and i >= 0 for i in entry["devices"]):
            problems.append(f"devices {entry['devices']!r}")
        if "device-filter" in entry and not DEVICE_FILTER.match(entry["device-filter"]):
            problems.append(f"device-filter {entry['device-filter']!r}")
        devices = entry["vgpu-devices"]
        if not devices or not all(isinstance(c, int) and c > 0 for c in devices.values()):
            problems.append(f"vgpu-devices {devices!r}")
        try:
            # a GPU never gets time-sliced and MIG-backed types at once
            if len({parse_type(t).mig_backed for t in devices}) != 1:
                problems.append(f"mixes time-sliced and MIG-backed types: {devices!r}")
        except ValueError as error:
            problems.append(str(error))
    return problems


def test_every_config_is_well_formed():
    configs = vgpu_catalog.vgpu_configs()
    problems = {name: p for name, entries in configs.items() if (p := config_problems(name, entries))}
    assert problems == {}
    counts = vgpu_catalog.single_type_counts()
    # every config but `default` puts its one type, at the board's count, on every GPU of the node
    assert {name: entries for name, entries in configs.items() if name != "default"} == {
        name: [{"devices": "all", "vgpu-devices": {name: count}}] for name, count in counts.items()
    }
    # the checker catches what it is meant to
    assert config_problems("x", [{"devices": "all", "vgpu-devices": {"A100-40C": 1, "A100-1-5C": 7}}])
    assert config_problems("x", [{"devices": "some", "device-filter": "0x20B5", "vgpu-devices": {"A100-4C": 0}}]) == [
        "devices 'some'",
        "device-filter '0x20B5'",
        "vgpu-devices {'A100-4C': 0}",
    ]


def test_default_config_has_one_entry_per_board_and_pci_id_in_order():
    default = vgpu_catalog.vgpu_configs()["default"]
    expected = [(f"{i}10DE", b.default_type, b.default_count) for b in BOARDS for i in b.pci_device_ids]
    assert [(e["device-filter"], *next(iter(e["vgpu-devices"].items()))) for e in default] == expected
    assert len(default) == 56


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: f"{b.family}-{b.pci_device_ids[0]}")
def test_every_board_is_consistent(board):
    assert board.pci_device_ids and all(vgpu_catalog.normalize_pci_id(i) == i for i in board.pci_device_ids)
    assert board.default_type in board.types
    # the default is two devices per GPU, or the whole GPU on boards whose middle type is the full board
    assert board.default_count in (1, 2)
    for name, count in board.types.items():
        parsed = parse_type(name)
        assert parsed.family == board.family and count >= 1, name
        if parsed.mig_backed:
            assert 1 <= parsed.slices <= 7
            if parsed.attribute == "ME":
                assert count == 1, name  # one media-extension instance per GPU


def test_type_names_parse_as_the_device_manager_reads_them():
    assert parse_type("RTX6000-Ada-24Q") == vgpu_catalog.VgpuType("RTX6000-Ada-24Q", "RTX6000-Ada", 0, 24, "Q")
    assert parse_type("A100D-1-10CME") == vgpu_catalog.VgpuType("A100D-1-10CME", "A100D", 1, 10, "C", "ME")
    assert parse_type("6000D-2-84QGFX").mig_backed and parse_type("6000D-84Q").family == "6000D"
    for bad in ("A100-40X", "A100-0-40C", "a100-40C", "A100-40", "A100-1-5CMX"):
        with pytest.raises(ValueError):
            parse_type(bad)


def test_per_gpu_counts_from_the_operators_document():
    counts = vgpu_catalog.single_type_counts()
    assert len(counts) == 710
    assert counts["A100-1-5C"] == 7 and counts["A100-1-5CME"] == 1 and counts["A100-7-40C"] == 1
    assert counts["H200-8C"] == 16  # not 141 // 8
    assert counts["RTX8000P-4C"] == 8 and counts["RTX8000P-4Q"] == 12
    assert counts["L40S-1Q"] == 32 and counts["T4-16Q"] == 1
    # the named DC-16Q config keeps the 96 GB board's count
    assert counts["DC-16Q"] == 6 and vgpu_catalog.types_for_pci_id("0x2C3A")["DC-16Q"] == 2
    assert counts["6000D-1-42CGFX"] == 2 and counts["DC-4-96QGFX"] == 1


def test_vgpu_types_of_catalog_models():
    a100 = vgpu_catalog.model_types("A100-80GB")
    assert list(a100) == list(catalog.GPU_MODELS["A100-80GB"].pci_device_ids)
    assert {i: {parse_type(t).family for t in types} for i, types in a100.items()} == {
        "0x20B2": {"A100DX"},
        "0x20B5": {"A100D"},
        "0x20F3": {"A800DX"},
        "0x20F5": {"A800D"},
    }
    assert vgpu_catalog.model_types("L4") == {"0x27B8": vgpu_catalog.types_for_pci_id("0x27b8")}
    assert vgpu_catalog.model_types("A100-40GB")["0x20B1"] == {}  # an id the vGPU software does not list
    # GB300 is the only catalog model without vGPU types
    assert set(catalog.GPU_MODELS) - set(vgpu_catalog.vgpu_capable_models()) == {"GB300"}
    # 0x1E78 is the Quadro RTX 6000 and 8000: both boards' types
    assert {parse_type(t).family for t in vgpu_catalog.types_for_pci_id("0x1E78")} == {"RTX8000P", "RTX6000P"}


@pytest.mark.parametrize("model", vgpu_catalog.vgpu_capable_models())
def test_the_default_config_serves_every_vgpu_capable_model(model):
    assert vgpu_catalog.config_problem("default", model) is None
    assert vgpu_catalog.served_pci_ids("default", catalog.GPU_MODELS[model].pci_device_ids)


def test_config_checks_for_a_pool():
    ids = catalog.GPU_MODELS["A100-80GB"].pci_device_ids
    # a single-type config serves the board it is named after
    assert vgpu_catalog.config_problem("A100D-40C", "A100-80GB") is None
    assert vgpu_catalog.served_pci_ids("A100D-40C", ids) == ("0x20B5",)
    problem = vgpu_catalog.config_problem("A100-40C", "A100-80GB")
    assert "serves no A100-80GB GPU" in problem and "0x20B5 offers no A100-40C" in problem
    assert "A100D (0x20B5)" in problem and "'default'" in problem
    assert vgpu_catalog.config_problem("L4-48Q", "L4").startswith("no vGPU config named 'L4-48Q'; L4 GPUs take")
    assert "has no vGPU types" in vgpu_catalog.config_problem("default", "GB300")
    # more devices than the board holds
    assert vgpu_catalog.config_problem_for_pci_id("DC-16Q", "0x2C3A") == "0x2C3A holds 2 x DC-16Q, not 6"
    assert vgpu_catalog.config_problem_for_pci_id("DC-16Q", "0x2BB5") is None
    assert vgpu_catalog.config_problem_for_pci_id("L4-12Q", "0x27B8") is None
    # `default` on an id it has no entry for creates nothing
    assert vgpu_catalog.config_problem_for_pci_id("default", "0x20B1") == "0x20B1 is no vGPU-capable GPU"


def test_a_new_vgpu_manager_image_is_a_safe_update_the_agents_roll_within_the_budget():
    from gpustack import changes
    from stacktest import render

    before = render(config(), stack="kubevirt")
    edited_config = config()
    edited_config["gpu-stack:vgpu"]["managerImage"] = "harbor.platform.internal/gpu-stack/vgpu-manager:580.105.08-ubuntu22.04"
    plan = changes.plan(before, render(edited_config, stack="kubevirt"))
    assert not plan.dangers and not plan.blocked
    assert [c.label for c in plan.changes if c.action == changes.UPDATE and c.kind == "DaemonSet"] == [
        "DaemonSet/gpu-operator/nvidia-vgpu-manager-daemonset"
    ]
    # The node-pools document names the new template digest, which is what the agents roll to.
    assert "ConfigMap/gpu-operator/gpu-stack-node-pools" in [c.label for c in plan.changes if c.action == changes.UPDATE]
    (note,) = [message for topic, message in plan.notes if topic == "vm-manager-rolled"]
    assert "within upgrade.maxUnavailable" in note and "live-migrates" in note and "kubectl" not in note


def test_with_manual_upgrades_the_vgpu_manager_note_says_no_agent_rolls_it():
    from gpustack import changes
    from stacktest import render

    manual = config()
    manual.setdefault("gpu-stack:upgrade", {})["strategy"] = "manual"
    before = render(manual, stack="kubevirt")
    manual["gpu-stack:vgpu"]["managerImage"] = "harbor.platform.internal/gpu-stack/vgpu-manager:580.105.08-ubuntu22.04"
    plan = changes.plan(before, render(manual, stack="kubevirt"))

    (note,) = [message for topic, message in plan.notes if topic == "vm-manager-rolled"]
    assert "no agent rolls it" in note and "move each node's VMs" in note
