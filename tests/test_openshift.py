"""OpenShift as a platform (`cluster.platform: openshift`): bad values name their key and never echo a proxy
credential; the shipped `openshift` stack renders what NVIDIA's OpenShift goldens render (the GPU Operator's
internal/state/testdata/golden/driver-openshift-drivertoolkit.yaml and driver-gdrcopy-openshift.yaml, facts in
docs/openshift.md): one driver DaemonSet per RHCOS build with the Driver Toolkit sidecar, the proxy env and trusted
CA bundle, and NVIDIA's SCC per operand, which the policy pack holds to NVIDIA's shape."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.catalogs import openshift as facts
from components.config import load_config
from components.states.driver.targets import config_digest, plan_targets
from gpustack import apiserver, schema
from policytest import edited, messages, registration
from stacktest import bag, config_problems, container, env_of, objects, render, render_stack, setter, stack_config

STACK = "openshift"
C = "gpu-stack:cluster"
OLD, NEW = "416.94.202410211619-0", "416.94.202411261619-0"
TRAINING_NEW = f"nvidia-driver-daemonset-training-{NEW}"


def openshift(*path: Any, value: Any):
    return setter(C, "openshift", *path, value=value)


BAD = [
    ("unknown platform", setter(C, "platform", value="okd"), f"{C}.platform", "'kubernetes', 'openshift'"),
    ("openshift block off OpenShift", setter(C, "platform", value="kubernetes"), f"{C}.openshift", "only with cluster.platform: openshift"),
    ("OpenShift on containerd", setter(C, "containerRuntime", value="containerd"), f"{C}.containerRuntime", "cri-o"),
    ("version not major.minor", openshift("version", value="4.16.3"), f"{C}.openshift.version", "major.minor"),
    ("version not a string", openshift("version", value=4.16), f"{C}.openshift.version", "expected a string"),
    ("DTK OS tag", openshift("driverToolkit", "images", value={"rhcos": {OLD: "quay.io/a/b@sha256:" + "a" * 64}}), f"{C}.openshift.driverToolkit.images", "not an OS tag"),
    ("DTK build", openshift("driverToolkit", "images", value={"rhcos4.16": {"latest": "quay.io/a/b@sha256:" + "a" * 64}}), f"{C}.openshift.driverToolkit.images", "not an RHCOS build"),
    ("DTK image unpinned", openshift("driverToolkit", "images", value={"rhcos4.16": {OLD: "quay.io/a/b:latest"}}), f"{C}.openshift.driverToolkit.images", "not pinned"),
    ("DTK image not an image", openshift("driverToolkit", "images", value={"rhcos4.16": {OLD: "Not An Image"}}), f"{C}.openshift.driverToolkit.images", "not an image reference"),
    ("DTK OS without builds", openshift("driverToolkit", "images", value={"rhcos4.16": {}}), f"{C}.openshift.driverToolkit.images", "1 to 4 RHCOS builds"),
    ("pool OS without a DTK build", openshift("driverToolkit", "images", value={"rhcos4.17": {OLD: "quay.io/a/b@sha256:" + "a" * 64}}), f"{C}.openshift.driverToolkit.images", "pool 'training' runs rhcos4.16"),
    ("DTK enabled not a bool", openshift("driverToolkit", "enabled", value="yes"), f"{C}.openshift.driverToolkit.enabled", "true, false"),
    ("proxy scheme", openshift("proxy", "httpProxy", value="socks5://proxy:1080"), f"{C}.openshift.proxy.httpProxy", "scheme http or https"),
    ("noProxy with spaces", openshift("proxy", "noProxy", value=".svc, .local"), f"{C}.openshift.proxy.noProxy", "without spaces"),
    ("trustedCA not a bool", openshift("proxy", "trustedCA", value="true"), f"{C}.openshift.proxy.trustedCA", "true, false"),
    ("pinned name on a DTK pool", setter("gpu-stack:nodePools", 0, "driver", value={"daemonSetName": "nvidia-driver-daemonset-training"}), "gpu-stack:nodePools[0].driver.daemonSetName", "one DaemonSet per RHCOS build"),
    ("unknown proxy key", openshift("proxy", "trustedCa", value=True), f"{C}.openshift.proxy.trustedCa", "did you mean 'trustedCA'"),
]


@pytest.mark.parametrize("case, change, key, needle", BAD, ids=[c[0] for c in BAD])
def test_a_bad_openshift_value_is_refused_by_key(case, change, key, needle):
    config = stack_config(STACK)
    change(config)
    problems = config_problems(config)
    assert any(k == key and needle in m for k, m in problems), problems


def test_openshift_without_its_block_says_what_to_add():
    config = stack_config(STACK)
    del config[C]["openshift"]
    assert (f"{C}.openshift", "required with platform openshift: at least version (oc get clusterversion)") in config_problems(config)


@pytest.mark.parametrize("field", ["httpProxy", "httpsProxy"])
def test_a_proxy_url_with_credentials_is_refused_and_never_echoed(field):
    config = stack_config(STACK)
    openshift("proxy", field, value="http://svc-gpu:S3cr3tPassw0rd@proxy.corp.example:3128")(config)
    problems = config_problems(config)
    assert any(k == f"{C}.openshift.proxy.{field}" and "driver.secretEnv" in m for k, m in problems), problems
    assert "S3cr3tPassw0rd" not in repr(problems) and "svc-gpu" not in repr(problems)


# --- the shipped stack ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered():
    return render_stack(STACK)


def test_one_driver_daemonset_per_pool_and_rhcos_build_each_selecting_its_build(rendered):
    driver_sets = {n: o for n, o in objects(rendered, "DaemonSet").items() if n.startswith("nvidia-driver-daemonset")}
    assert sorted(driver_sets) == sorted(f"nvidia-driver-daemonset-{pool}-{build}" for pool in ("training", "inference") for build in (OLD, NEW))
    ds = driver_sets[TRAINING_NEW]
    spec = ds["spec"]["template"]["spec"]
    # The build is in the node selector for every node, assigned or not: a DTK build serves its kernel alone.
    assert spec["nodeSelector"] == {facts.NFD_OSTREE_VERSION: NEW, "nvidia.com/gpu.deploy.driver": "true"}
    unassigned = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][1]
    assert {e["key"]: e["values"] for e in unassigned["matchExpressions"] if e["operator"] == "In"} == {
        "gpu-stack/pool": ["training"],
        "feature.node.kubernetes.io/system-os_release.ID": ["rhcos"],
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": ["4.16"],
    }
    # The operator's DTK labels: the build on the DaemonSet only, the toolkit flag on both.
    assert ds["metadata"]["labels"][facts.DTK_RHCOS_LABEL] == NEW and ds["metadata"]["labels"][facts.DTK_LABEL] == "true"
    assert ds["spec"]["template"]["metadata"]["labels"][facts.DTK_LABEL] == "true"
    assert facts.DTK_RHCOS_LABEL not in ds["spec"]["template"]["metadata"]["labels"]


def test_the_driver_pod_is_nvidias_dtk_pod(rendered):
    ds = objects(rendered, "DaemonSet")[TRAINING_NEW]
    spec = ds["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["nvidia-driver-ctr", "nvidia-gdrcopy-ctr", "openshift-driver-toolkit-ctr"]
    driver = container(ds, "nvidia-driver-ctr")
    assert (driver["command"], driver["args"]) == (["ocp_dtk_entrypoint"], ["nv-ctr-run-with-dtk"])
    assert driver["image"] == "nvcr.io/nvidia/driver:595.91.07-rhcos4.16"
    env = env_of(driver)
    assert env["OPENSHIFT_VERSION"] == "4.16"
    names = [e["name"] for e in driver["env"]]
    assert names[names.index("OPENSHIFT_VERSION"):] == ["OPENSHIFT_VERSION", "HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"]
    assert driver["volumeMounts"][-2:] == [
        {"name": "shared-nvidia-driver-toolkit", "mountPath": "/mnt/shared-nvidia-driver-toolkit"},
        {"name": "gpu-operator-trusted-ca", "mountPath": "/etc/pki/ca-trust/extracted/pem", "readOnly": True},
    ]
    dtk = container(ds, "openshift-driver-toolkit-ctr")
    assert dtk["image"].endswith("@sha256:1a6d2c3e1f0b9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a0")
    assert dtk["command"] == ["bash", "-xc"] and dtk["args"][0].endswith("ocp_dtk_entrypoint dtk-build-driver")
    assert "/mnt/shared-nvidia-driver-toolkit/dir_prepared" in dtk["args"][0]
    assert [e["name"] for e in dtk["env"]] == ["RHCOS_VERSION", "NVIDIA_VISIBLE_DEVICES", "DRIVER_CONFIG_DIGEST", "GDRCOPY_ENABLED"]
    assert env_of(dtk)["RHCOS_VERSION"] == NEW and env_of(dtk)["DRIVER_CONFIG_DIGEST"] == env["DRIVER_CONFIG_DIGEST"]
    assert [m["mountPath"] for m in dtk["volumeMounts"]] == [
        "/mnt/shared-nvidia-driver-toolkit", "/var/log", "/run/mellanox/drivers/usr/src", "/host-etc/os-release",
        "/sys/module/firmware_class/parameters/path", "/lib/firmware",
    ]
    assert dtk["securityContext"] == {"privileged": True, "seLinuxOptions": {"level": "s0"}}
    gdrcopy = container(ds, "nvidia-gdrcopy-ctr")
    assert (gdrcopy["command"], gdrcopy["args"]) == (["ocp_dtk_entrypoint"], ["gdrcopy-ctr-run-with-dtk"])
    assert gdrcopy["image"].endswith("-rhcos4.16")
    assert {"name": "shared-nvidia-driver-toolkit", "mountPath": "/mnt/shared-nvidia-driver-toolkit"} in gdrcopy["volumeMounts"]
    assert "HTTP_PROXY" not in env_of(container(ds, "k8s-driver-manager"))
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["shared-nvidia-driver-toolkit"] == {"name": "shared-nvidia-driver-toolkit", "emptyDir": {}}
    assert volumes["gpu-operator-trusted-ca"]["configMap"] == {"name": "gpu-operator-trusted-ca", "items": [{"key": "ca-bundle.crt", "path": "tls-ca-bundle.pem"}]}


def test_the_trusted_ca_configmap_is_left_for_openshift_to_fill(rendered):
    (cm,) = [r for r in rendered.registrations if r.inputs.get("kind") == "ConfigMap" and r.inputs["metadata"]["name"] == facts.TRUSTED_CA_CONFIGMAP]
    assert cm.inputs["metadata"]["labels"][facts.TRUSTED_CA_INJECT_LABEL] == "true"
    assert "data" not in cm.inputs


def test_every_operand_with_an_nvidia_scc_gets_it_for_its_own_account(rendered):
    sccs = objects(rendered, "SecurityContextConstraints")
    service_accounts = set(objects(rendered, "ServiceAccount"))
    assert set(sccs) == {facts.SCCS[sa].name for sa in service_accounts if sa in facts.SCCS}
    assert set(sccs) >= {"nvidia-driver", "nvidia-operator-validator", "nvidia-gpu-feature-discovery", "nvidia-dcgm-exporter"}
    driver = sccs["nvidia-driver"]
    assert driver["users"] == ["system:serviceaccount:nvidia-gpu-operator:nvidia-driver"]
    # NVIDIA's state-driver SCC, field by field (null where NVIDIA writes null becomes [] / 0, which mean the same)
    assert {k: driver[k] for k in ("allowHostDirVolumePlugin", "allowHostIPC", "allowHostNetwork", "allowHostPID", "allowHostPorts",
                                   "allowPrivilegeEscalation", "allowPrivilegedContainer", "allowedCapabilities", "allowedUnsafeSysctls",
                                   "readOnlyRootFilesystem", "volumes", "groups", "seccompProfiles")} == {
        "allowHostDirVolumePlugin": True, "allowHostIPC": False, "allowHostNetwork": False, "allowHostPID": True,
        "allowHostPorts": False, "allowPrivilegeEscalation": True, "allowPrivilegedContainer": True,
        "allowedCapabilities": ["*"], "allowedUnsafeSysctls": ["*"], "readOnlyRootFilesystem": False, "volumes": ["*"],
        "groups": ["system:cluster-admins", "system:nodes", "system:masters"], "seccompProfiles": ["*"],
    }
    assert sccs["nvidia-dcgm-exporter"]["allowHostPorts"] is True and sccs["nvidia-mig-manager"]["allowHostIPC"] is True


def test_the_operands_take_openshifts_paths(rendered):
    daemonsets = objects(rendered, "DaemonSet")
    assert env_of(container(daemonsets["gpu-feature-discovery"], "gpu-feature-discovery"))["USE_NODE_FEATURE_API"] == "false"
    hooks = next(v for v in daemonsets["nvidia-container-toolkit-daemonset"]["spec"]["template"]["spec"]["volumes"] if v["name"] == "crio-hooks")
    assert hooks["hostPath"]["path"] == "/run/containers/oci/hooks.d"


def test_the_render_passes_the_schemas_and_the_api_servers_rules(rendered):
    from gpustack.render import kubernetes_object

    objs = [kubernetes_object(r) for r in rendered.registrations if r.is_kubernetes_object]
    assert [str(p) for p in apiserver.validate_all(objs)] == []
    assert [p for o in objs for p in schema.validate(o, "1.29")] == []


# --- what a build, the proxy and the toolkit switch change --------------------------------------------------------


def test_a_builds_dtk_image_is_part_of_its_config_digest_and_no_other_builds():
    base = stack_config(STACK)
    moved = copy.deepcopy(base)
    moved[C]["openshift"]["driverToolkit"]["images"]["rhcos4.16"][NEW] = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:" + "b" * 64
    before = {t.daemonset: config_digest(t) for t in plan_targets(load_config(bag(base)), "r/driver")}
    after = {t.daemonset: config_digest(t) for t in plan_targets(load_config(bag(moved)), "r/driver")}
    assert {n for n in before if before[n] != after[n]} == {f"nvidia-driver-daemonset-{p}-{NEW}" for p in ("training", "inference")}


def test_without_the_driver_toolkit_one_daemonset_per_pool_compiles_as_elsewhere_and_keeps_openshifts_env():
    config = stack_config(STACK)
    openshift("driverToolkit", "enabled", value=False)(config)
    del config[C]["openshift"]["proxy"]
    recording = render(config, stack=STACK)
    driver_sets = {n: o for n, o in objects(recording, "DaemonSet").items() if n.startswith("nvidia-driver-daemonset")}
    assert sorted(driver_sets) == ["nvidia-driver-daemonset-inference", "nvidia-driver-daemonset-training"]
    ds = driver_sets["nvidia-driver-daemonset-training"]
    assert [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]] == ["nvidia-driver-ctr", "nvidia-gdrcopy-ctr"]
    driver = container(ds, "nvidia-driver-ctr")
    assert driver["command"] == ["nvidia-driver"] and env_of(driver)["OPENSHIFT_VERSION"] == "4.16"
    assert "HTTP_PROXY" not in env_of(driver) and facts.TRUSTED_CA_CONFIGMAP not in objects(recording, "ConfigMap")
    assert "nvidia-driver" in objects(recording, "SecurityContextConstraints")


def test_off_openshift_nothing_of_it_is_rendered():
    recording = render_stack("prod-managed")
    assert objects(recording, "SecurityContextConstraints") == {}
    assert not any(facts.DTK_LABEL in o["metadata"].get("labels", {}) for o in objects(recording, "DaemonSet").values())


# --- the policy pack -----------------------------------------------------------------------------------------------


def _scc(recording, name):
    return registration(recording, "SecurityContextConstraints", name)


def test_the_shipped_sccs_pass_the_scc_policy(rendered):
    assert messages(rendered, "scc-as-nvidia-ships-them") == []


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda r: _scc(r, "nvidia-driver").inputs["metadata"].update(name="gpu-anything"), "none of NVIDIA's operand SCCs"),
        (lambda r: _scc(r, "nvidia-driver").inputs["users"].append("system:serviceaccount:default:builder"), "admits the nvidia-driver ServiceAccount alone"),
        (lambda r: _scc(r, "nvidia-driver").inputs.update(users=["system:serviceaccount:nvidia-gpu-operator:nvidia-dcgm"]), "admits the nvidia-driver ServiceAccount alone"),
        (lambda r: _scc(r, "nvidia-driver").inputs["groups"].append("system:authenticated"), "system:authenticated"),
        (lambda r: _scc(r, "nvidia-operator-validator").inputs.update(allowHostNetwork=True), "allowHostNetwork: true"),
    ],
    ids=["unknown SCC", "second user", "another operand's account", "every authenticated user", "host network"],
)
def test_an_scc_wider_than_nvidias_is_refused(rendered, edit, needle):
    found = messages(edited(rendered, edit), "scc-as-nvidia-ships-them")
    assert any(needle in m for m in found), found


def test_the_dtk_container_is_the_only_new_privileged_container(rendered):
    assert messages(rendered, "privileged-only-where-needed") == []

    def smuggle(r):
        ds = registration(r, "DaemonSet", TRAINING_NEW)
        ds.inputs["spec"]["template"]["spec"]["containers"][-1]["name"] = "debug-shell"

    assert any("debug-shell" in m for m in messages(edited(rendered, smuggle), "privileged-only-where-needed"))


# --- the importer ------------------------------------------------------------------------------------------------

DTK_IMAGE = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:" + "c" * 64


def _node(name: str, build: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "feature.node.kubernetes.io/pci-10de.present": "true", "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "NVIDIA-L4", "node.kubernetes.io/instance-type": "g6.12xlarge",
            "feature.node.kubernetes.io/system-os_release.ID": "rhcos",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": "4.16",
            facts.NFD_OSTREE_VERSION: build,
        }},
        "status": {"nodeInfo": {"containerRuntimeVersion": "cri-o://1.29.10", "kubeletVersion": "v1.29.10"}},
    }


IMAGESTREAM = {
    "apiVersion": "image.openshift.io/v1", "kind": "ImageStream",
    "metadata": {"name": "driver-toolkit", "namespace": "openshift"},
    "spec": {"tags": [
        {"name": OLD, "from": {"kind": "DockerImage", "name": DTK_IMAGE}},
        {"name": NEW, "from": {"kind": "DockerImage", "name": DTK_IMAGE.replace("c", "d")}},
        {"name": "latest", "from": {"kind": "DockerImage", "name": DTK_IMAGE.replace("c", "d")}},
        {"name": "413.92.202304252344-0", "from": {"kind": "DockerImage", "name": DTK_IMAGE.replace("c", "e")}},
    ]},
}
PROXY = {
    "apiVersion": "config.openshift.io/v1", "kind": "Proxy", "metadata": {"name": "cluster"},
    "spec": {"httpProxy": "http://proxy.corp.example:3128", "httpsProxy": "http://proxy.corp.example:3128",
             "trustedCA": {"name": "user-ca-bundle"}},
    "status": {"noProxy": ".cluster.local,.svc"},
}


def _import(policy_spec: dict, *, proxy=PROXY, builds=(OLD, NEW)):
    from gpustack import importer
    from gpustack.importer import ClusterFacts

    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "gpu-cluster-policy"},
              "spec": policy_spec, "status": {"namespace": "nvidia-gpu-operator"}}
    nodes = {"apiVersion": "v1", "kind": "List", "items": [_node(f"gpu-{i}", b) for i, b in enumerate(builds)]}
    facts_ = ClusterFacts("ocp-admin", "harbor.platform.internal/gpu-stack/node-agent:0.10.0", openshift_version="4.16",
                          imagestream=IMAGESTREAM, proxy=proxy)
    return importer.import_cluster_policy(importer.cluster_policy_of(policy, "test"), facts_, nodes=importer.nodes_of(nodes, "--nodes"))


def test_an_openshift_cluster_imports_with_its_dtk_builds_proxy_and_cri_o():
    result = _import({"driver": {"enabled": True}})
    cluster = result.config["gpu-stack:cluster"]
    assert cluster["platform"] == "openshift" and cluster["containerRuntime"] == "cri-o"
    # only the builds GPU nodes run, grouped by the OS NFD reports for them
    assert cluster["openshift"] == {
        "version": "4.16",
        "driverToolkit": {"images": {"rhcos4.16": {OLD: DTK_IMAGE, NEW: DTK_IMAGE.replace("c", "d")}}},
        "proxy": {"httpProxy": "http://proxy.corp.example:3128", "httpsProxy": "http://proxy.corp.example:3128",
                  "noProxy": ".cluster.local,.svc", "trustedCA": True},
    }
    cfg = load_config(bag(result.config))
    assert sorted(t.daemonset for t in plan_targets(cfg, "r/driver")) == [f"nvidia-driver-daemonset-{cfg.node_pools[0].name}-{b}" for b in (OLD, NEW)]
    assert not any(item.path == "spec.operator.use_ocp_driver_toolkit" for item in result.not_carried)


def test_use_ocp_driver_toolkit_false_is_carried():
    result = _import({"driver": {"enabled": True}, "operator": {"use_ocp_driver_toolkit": False}}, proxy=None)
    assert result.config["gpu-stack:cluster"]["openshift"] == {"version": "4.16", "driverToolkit": {"enabled": False}}
    load_config(bag(result.config))


def test_a_node_on_a_build_the_imagestream_lacks_or_a_proxy_credential_is_refused_without_echo():
    from gpustack.importer import ImportInputError

    with pytest.raises(ImportInputError, match="416.94.209912310000-0, which the ImageStream has no image for"):
        _import({"driver": {"enabled": True}}, builds=("416.94.209912310000-0",))
    secret = copy.deepcopy(PROXY)
    secret["spec"]["httpsProxy"] = "http://gpu:Hunter2Secret@proxy.corp.example:3128"
    with pytest.raises(ImportInputError) as caught:
        _import({"driver": {"enabled": True}}, proxy=secret)
    assert "driver.secretEnv" in str(caught.value) and "Hunter2Secret" not in str(caught.value)
    broken = copy.deepcopy(PROXY)
    broken["spec"]["httpProxy"] = "http://[proxy.corp.example"
    with pytest.raises(ImportInputError, match="spec.httpProxy is not a URL"):
        _import({"driver": {"enabled": True}}, proxy=broken)
    with pytest.raises(ImportInputError, match="expected the cluster Proxy"):
        _import({"driver": {"enabled": True}}, proxy={"kind": "ConfigMap"})


# --- the vGPU manager on OpenShift -------------------------------------------------------------------------------


def test_the_vgpu_manager_is_built_per_rhcos_build_with_the_driver_toolkit():
    """NVIDIA's golden driver-vgpu-host-manager-openshift.yaml: the vGPU manager container prepares the sources
    (`ocp_dtk_entrypoint nv-ctr-run-with-dtk`), the build's DTK container builds them, OPENSHIFT_VERSION set."""
    config = stack_config(STACK)
    config["gpu-stack:sandboxWorkloads"] = {"mode": "kubevirt", "defaultWorkload": "container"}
    config["gpu-stack:vgpu"] = {"managerImage": "image-registry.openshift-image-registry.svc:5000/nvidia-gpu-operator/vgpu-manager:580.82.07-rhcos4.16"}
    config["gpu-stack:nodePools"].append({
        "name": "vgpu-a10", "nodeSelector": {"node.kubernetes.io/instance-type": "g5.12xlarge"}, "gpuModel": "A10",
        "os": "rhcos4.16", "workloadType": "vm-vgpu", "vgpuConfig": "A10-12Q",
    })
    recording = render(config, stack=STACK)
    managers = {n: o for n, o in objects(recording, "DaemonSet").items() if n.startswith("nvidia-vgpu-manager-daemonset")}
    assert sorted(managers) == [f"nvidia-vgpu-manager-daemonset-{OLD}", f"nvidia-vgpu-manager-daemonset-{NEW}"]
    ds = managers[f"nvidia-vgpu-manager-daemonset-{NEW}"]
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {facts.NFD_OSTREE_VERSION: NEW, "nvidia.com/gpu.deploy.vgpu-manager": "true"}
    assert [c["name"] for c in spec["containers"]] == ["nvidia-driver-ctr", "openshift-driver-toolkit-ctr"]
    manager = container(ds, "nvidia-driver-ctr")
    assert (manager["command"], manager["args"]) == (["ocp_dtk_entrypoint"], ["nv-ctr-run-with-dtk"])
    assert env_of(manager)["OPENSHIFT_VERSION"] == "4.16"
    assert env_of(container(ds, "openshift-driver-toolkit-ctr"))["RHCOS_VERSION"] == NEW
    assert ds["metadata"]["labels"][facts.DTK_RHCOS_LABEL] == NEW
    assert {"name": "shared-nvidia-driver-toolkit", "emptyDir": {}} in spec["volumes"]
    assert "nvidia-vgpu-manager" in objects(recording, "SecurityContextConstraints")
    from gpustack.render import kubernetes_object

    objs = [kubernetes_object(r) for r in recording.registrations if r.is_kubernetes_object]
    assert [str(p) for p in apiserver.validate_all(objs)] == []
    assert messages(recording, "privileged-only-where-needed") == []
