"""The DCGM exporter's ClusterPolicy options (`gpu-stack:dcgmExporter`), as NVIDIA's `TransformDCGMExporter` renders
them: every bad value refused by key, the rules across keys, and one render that turns most options on at once."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from components.config import ConfigError, load_config
from stacktest import bag, container, env_of, objects, render, render_stack, stack_config

BASE = stack_config("prod-managed")
E = "gpu-stack:dcgmExporter"


def problems(config: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    return caught.value.problems


def exporter(**keys: Any) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        config.setdefault(E, {}).update(keys)

    return change


def also(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        for one in changes:
            one(config)

    return change


def section(name: str, **keys: Any) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        node = config.setdefault(f"gpu-stack:{name.split('.')[0]}", {})
        for part in name.split(".")[1:]:
            node = node.setdefault(part, {})
        node.update(keys)

    return change


NO_READERS = also(section("monitoring.dashboard", enabled=False), section("monitoring.alerts", enabled=False))
LABELS_ON = exporter(enablePodLabels=True)

BAD = [
    ("pod labels not a bool", exporter(enablePodLabels="yes"), f"{E}.enablePodLabels", "allowed values: true, false"),
    ("pod uid not a bool", exporter(enablePodUid=1), f"{E}.enablePodUid", "allowed values: true, false"),
    ("host network not a bool", exporter(hostNetwork="true"), f"{E}.hostNetwork", "allowed values: true, false"),
    ("host pid not a bool", exporter(hostPid="on"), f"{E}.hostPid", "allowed values: true, false"),
    ("listen without colon", exporter(listenAddress="9400"), f"{E}.listenAddress", "such as :9400"),
    ("listen on one interface", exporter(listenAddress="127.0.0.1:9400"), f"{E}.listenAddress", "any address of the pod"),
    ("listen port zero", exporter(listenAddress=":0"), f"{E}.listenAddress", "port 1-65535"),
    ("listen port too high", exporter(listenAddress=":70000"), f"{E}.listenAddress", "port 1-65535"),
    ("engine without port", exporter(remoteHostengine="nvidia-dcgm"), f"{E}.remoteHostengine", "host:port"),
    ("engine as url", exporter(remoteHostengine="http://dcgm:5555"), f"{E}.remoteHostengine", "localhost:5555"),
    ("engine port too high", exporter(remoteHostengine="dcgm:99999"), f"{E}.remoteHostengine", "host:port"),
    ("collectors relative", also(NO_READERS, exporter(collectorsFile="etc/x.csv")), f"{E}.collectorsFile", "absolute"),
    ("collectors dotdot", also(NO_READERS, exporter(collectorsFile="/etc/../x.csv")), f"{E}.collectorsFile", "normalised"),
    ("job dir relative", exporter(hpcJobMapping={"enabled": True, "directory": "var/jobs"}), f"{E}.hpcJobMapping.directory", "absolute"),
    ("job mapping typo", exporter(hpcJobMapping={"enable": True}), f"{E}.hpcJobMapping.enable", "did you mean 'enabled'"),
    ("regex with comma", also(LABELS_ON, exporter(podLabelAllowlistRegex=["^a{1,3}$"])), f"{E}.podLabelAllowlistRegex", "comma"),
    ("regex broken", also(LABELS_ON, exporter(podLabelAllowlistRegex=["team("])), f"{E}.podLabelAllowlistRegex", "not a regular expression"),
    ("regex lookahead", also(LABELS_ON, exporter(podLabelAllowlistRegex=["^(?!kubernetes)"])), f"{E}.podLabelAllowlistRegex", "RE2"),
    ("regex too long", also(LABELS_ON, exporter(podLabelAllowlistRegex=["a" * 257])), f"{E}.podLabelAllowlistRegex", "1 to 256"),
    ("regex twice", also(LABELS_ON, exporter(podLabelAllowlistRegex=["^team$", "^team$"])), f"{E}.podLabelAllowlistRegex", "twice"),
    ("too many regexes", also(LABELS_ON, exporter(podLabelAllowlistRegex=[f"^l{i}$" for i in range(33)])), f"{E}.podLabelAllowlistRegex", "at most 32"),
    # rules across keys
    ("allowlist without labels", exporter(podLabelAllowlistRegex=["^team$"]), f"{E}.podLabelAllowlistRegex", "set enablePodLabels: true"),
    ("engine twice", also(section("components", dcgm=True), exporter(remoteHostengine="localhost:5555")), f"{E}.remoteHostengine", "components.dcgm"),
    (
        "collectors with extra metrics",
        also(NO_READERS, exporter(collectorsFile="/etc/dcgm-exporter/default-counters.csv", extraMetrics=[{"field": "DCGM_FI_DEV_POWER_VIOLATION", "type": "counter", "help": "p"}])),
        f"{E}.collectorsFile",
        "remove one of the two",
    ),
    (
        "collectors under the dashboard",
        exporter(collectorsFile="/etc/dcgm-exporter/default-counters.csv"),
        f"{E}.collectorsFile",
        "monitoring.dashboard.enabled: false",
    ),
]


@pytest.mark.parametrize(("change", "path", "fragment"), [pytest.param(c, p, f, id=i) for i, c, p, f in BAD])
def test_bad_value_names_key_and_allowed_values(change, path, fragment):
    config = copy.deepcopy(BASE)
    change(config)
    found = problems(config)
    assert any(p == path and fragment in m for p, m in found), found


def test_an_overlong_regex_is_not_echoed_whole():
    config = copy.deepcopy(BASE)
    also(LABELS_ON, exporter(podLabelAllowlistRegex=["(" * 300]))(config)
    assert all(len(message) < 400 for _, message in problems(config))


def test_defaults_keep_the_exporter_off_the_api_and_the_host():
    recording = render_stack("prod-managed")
    spec = objects(recording, "DaemonSet")["nvidia-dcgm-exporter"]["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert "hostNetwork" not in spec and "hostPID" not in spec
    env = env_of(container(objects(recording, "DaemonSet")["nvidia-dcgm-exporter"], "nvidia-dcgm-exporter"))
    assert env["DCGM_EXPORTER_LISTEN"] == ":9400"
    assert env["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcgm-metrics.csv"
    assert not {k for k in env if "POD_LABEL" in k or "POD_UID" in k or k in ("DCGM_REMOTE_HOSTENGINE_INFO", "DCGM_HPC_JOB_MAPPING_DIR")}
    assert "nvidia-dcgm-exporter" not in objects(recording, "ClusterRole")


@pytest.fixture(scope="module")
def options():
    """One render with most options on: pod metadata, a moved port, the image's own CSV, the host's engine, hostPID
    and a job-mapping directory."""
    config = copy.deepcopy(BASE)
    NO_READERS(config)
    config[E] = {
        "enablePodLabels": True,
        "enablePodUid": True,
        "podLabelAllowlistRegex": ["^team$", "^app\\.kubernetes\\.io/name$"],
        "listenAddress": ":9500",
        "collectorsFile": "/etc/dcgm-exporter/dcp-metrics-included.csv",
        "remoteHostengine": "localhost:5555",
        "hostPid": True,
        "hpcJobMapping": {"enabled": True, "directory": "/var/spool/slurm/gpu-jobs"},
    }
    return render(config)


def test_options_set_the_operators_env(options):
    ds = objects(options, "DaemonSet")["nvidia-dcgm-exporter"]
    env = [(e["name"], e.get("value")) for e in container(ds, "nvidia-dcgm-exporter")["env"] if "value" in e]
    assert env == [
        ("DCGM_EXPORTER_LISTEN", ":9500"),
        ("DCGM_EXPORTER_KUBERNETES", "true"),
        ("DCGM_EXPORTER_COLLECTORS", "/etc/dcgm-exporter/dcp-metrics-included.csv"),
        ("DCGM_REMOTE_HOSTENGINE_INFO", "localhost:5555"),
        ("DCGM_HPC_JOB_MAPPING_DIR", "/var/spool/slurm/gpu-jobs"),
        ("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", "true"),
        ("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", "true"),
        ("DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX", "^team$,^app\\.kubernetes\\.io/name$"),
    ]


def test_port_probes_and_service_move_together(options):
    ds = objects(options, "DaemonSet")["nvidia-dcgm-exporter"]
    ctr = container(ds, "nvidia-dcgm-exporter")
    assert ctr["ports"] == [{"name": "metrics", "containerPort": 9500}]
    assert ctr["livenessProbe"]["httpGet"]["port"] == ctr["readinessProbe"]["httpGet"]["port"] == 9500
    service = objects(options, "Service")["nvidia-dcgm-exporter"]
    assert service["spec"]["ports"] == [{"name": "gpu-metrics", "port": 9500, "targetPort": 9500, "protocol": "TCP"}]


def test_host_engine_on_localhost_joins_the_host_network_and_pid(options):
    spec = objects(options, "DaemonSet")["nvidia-dcgm-exporter"]["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["hostPID"] is True


def test_pod_metadata_reads_pods_with_the_exporters_own_token(options):
    spec = objects(options, "DaemonSet")["nvidia-dcgm-exporter"]["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is True
    assert objects(options, "ClusterRole")["nvidia-dcgm-exporter"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    binding = objects(options, "ClusterRoleBinding")["nvidia-dcgm-exporter"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "nvidia-dcgm-exporter", "namespace": "gpu-operator"}]


def test_job_mapping_and_the_images_csv_replace_the_configmap(options):
    ds = objects(options, "DaemonSet")["nvidia-dcgm-exporter"]
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert "metrics-config" not in volumes and "nvidia-dcgm-exporter-metrics" not in objects(options, "ConfigMap")
    assert volumes["hpc-job-mapping"]["hostPath"] == {"path": "/var/spool/slurm/gpu-jobs", "type": "DirectoryOrCreate"}
    mounts = {m["name"]: m for m in container(ds, "nvidia-dcgm-exporter")["volumeMounts"]}
    assert mounts["hpc-job-mapping"] == {"name": "hpc-job-mapping", "mountPath": "/var/spool/slurm/gpu-jobs", "readOnly": True}


def test_options_of_an_exporter_that_is_off_are_refused():
    config = copy.deepcopy(BASE)
    also(section("components", dcgmExporter=False), NO_READERS, exporter(hostPid=True, listenAddress=":9500"))(config)
    assert (E, "hostPid, listenAddress configure the exporter, which components.dcgmExporter: false leaves out; remove them") in problems(config)
