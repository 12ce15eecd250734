"""States 7-12 and stack monitoring, object by object, against NVIDIA's assets (fact sheet §2, §6, §10,
Appendix B and C): names, env, host paths, gates, RBAC, ports, and when each state is rendered at all."""

from __future__ import annotations

import copy
import json

import yaml

from components.catalogs import dcgm_metrics
from components.catalogs import mig_catalog
from components.catalogs import grafana_dashboard
from stacktest import container, env_of, objects, render, render_stack, stack_config


def pod_spec(ds: dict) -> dict:
    return ds["spec"]["template"]["spec"]


def host_paths(ds: dict) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in pod_spec(ds)["volumes"] if "hostPath" in v}


def mounts(c: dict) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}


def names(items: list[dict]) -> list[str]:
    return [i["name"] for i in items]


def rules(role: dict) -> set[tuple]:
    return {
        (tuple(r.get("apiGroups", [])), tuple(r["resources"]), tuple(sorted(r["verbs"])))
        for r in role["rules"]
        if "security.openshift.io" not in r.get("apiGroups", [])
    }


def waits_for_toolkit(c: dict) -> bool:
    return c["name"] == "toolkit-validation" and "/run/nvidia/validations/toolkit-ready" in c["args"][0]


def with_changes(stack: str, **sections) -> dict:
    config = copy.deepcopy(stack_config(stack))
    for key, value in sections.items():
        config[f"gpu-stack:{key}"] = value
    return config


# --- state-mps-control-daemon -------------------------------------------------------------------------------


def test_mps_daemon_lands_only_on_mps_capable_device_plugin_nodes():
    ds = objects(render_stack("onprem-host-driver"), "DaemonSet")["nvidia-device-plugin-mps-control-daemon"]
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/mps.capable": "true"}
    assert spec["hostPID"] is True and "shareProcessNamespace" not in spec
    assert names(spec["initContainers"]) == ["toolkit-validation", "mps-control-daemon-mounts", "config-manager-init"]
    assert waits_for_toolkit(spec["initContainers"][0])
    assert names(spec["containers"]) == ["mps-control-daemon-ctr", "config-manager"]
    daemon = env_of(container(ds, "mps-control-daemon-ctr"))
    assert daemon["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility" and daemon["CONFIG_FILE"] == "/config/config.yaml"
    assert env_of(container(ds, "config-manager"))["PROCESS_TO_SIGNAL"] == "/usr/bin/mps-control-daemon"
    shm = container(ds, "mps-control-daemon-mounts")
    assert shm["command"] == ["mps-control-daemon", "mount-shm"]
    assert shm["volumeMounts"] == [{"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}]
    assert host_paths(ds) == {"run-nvidia": "/run/nvidia", "mps-root": "/run/nvidia/mps", "mps-shm": "/run/nvidia/mps/shm"}
    assert spec["serviceAccountName"] == "nvidia-device-plugin-mps-control-daemon"
    role = objects(render_stack("onprem-host-driver"), "ClusterRole")["nvidia-device-plugin-mps-control-daemon"]
    assert rules(role) == {(("",), ("nodes",), ("get", "list", "watch"))}


def test_no_mps_daemon_without_an_mps_pool():
    for stack in ("dev", "prod-managed", "a100-mig"):
        assert "nvidia-device-plugin-mps-control-daemon" not in objects(render_stack(stack), "DaemonSet"), stack


# --- state-dcgm / state-dcgm-exporter -------------------------------------------------------------------------


def test_standalone_hostengine_and_the_exporter_that_uses_it():
    recording = render_stack("a100-mig")
    engine = objects(recording, "DaemonSet")["nvidia-dcgm"]
    ctr = container(engine, "nvidia-dcgm-ctr")
    assert ctr["image"] == "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"
    assert ctr["ports"] == [{"name": "dcgm", "containerPort": 5555}]
    assert ctr["livenessProbe"] == ctr["readinessProbe"] == {"tcpSocket": {"port": 5555}, "initialDelaySeconds": 15}
    assert pod_spec(engine)["nodeSelector"] == {"nvidia.com/gpu.deploy.dcgm": "true"}
    assert waits_for_toolkit(pod_spec(engine)["initContainers"][0])
    service = objects(recording, "Service")["nvidia-dcgm"]["spec"]
    assert service["internalTrafficPolicy"] == "Local" and service["ports"] == [{"name": "dcgm", "port": 5555, "protocol": "TCP"}]
    exporter = env_of(container(objects(recording, "DaemonSet")["nvidia-dcgm-exporter"], "nvidia-dcgm-exporter"))
    assert exporter["DCGM_REMOTE_HOSTENGINE_INFO"] == "nvidia-dcgm:5555"


def test_exporter_runs_an_embedded_hostengine_by_default():
    recording = render_stack("prod-managed")
    assert "nvidia-dcgm" not in objects(recording, "DaemonSet")
    exporter = env_of(container(objects(recording, "DaemonSet")["nvidia-dcgm-exporter"], "nvidia-dcgm-exporter"))
    assert "DCGM_REMOTE_HOSTENGINE_INFO" not in exporter


def test_dcgm_exporter_daemonset_service_and_service_monitor():
    recording = render_stack("prod-managed")
    ds = objects(recording, "DaemonSet")["nvidia-dcgm-exporter"]
    spec = pod_spec(ds)
    assert spec["automountServiceAccountToken"] is False
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.dcgm-exporter": "true"}
    assert spec["runtimeClassName"] == "nvidia"
    exporter = container(ds, "nvidia-dcgm-exporter")
    assert exporter["image"] == "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"
    env = env_of(exporter)
    assert env["DCGM_EXPORTER_LISTEN"] == ":9400" and env["DCGM_EXPORTER_KUBERNETES"] == "true"
    assert env["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcgm-metrics.csv"
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert exporter["ports"] == [{"name": "metrics", "containerPort": 9400}]
    assert exporter["livenessProbe"]["httpGet"] == {"path": "/health", "port": 9400}
    assert exporter["livenessProbe"]["initialDelaySeconds"] == 45
    assert mounts(exporter)["/var/lib/kubelet/pod-resources"] == "pod-gpu-resources"
    assert host_paths(ds)["pod-gpu-resources"] == "/var/lib/kubelet/pod-resources"

    service = objects(recording, "Service")["nvidia-dcgm-exporter"]
    assert service["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/port": "9400"}
    assert service["spec"]["ports"] == [{"name": "gpu-metrics", "port": 9400, "targetPort": 9400, "protocol": "TCP"}]
    monitor = objects(recording, "ServiceMonitor")["nvidia-dcgm-exporter"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"] == [{
        "port": "gpu-metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s",
        "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}],
    }]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-operator"]}
    assert rules(objects(recording, "Role")["nvidia-dcgm-exporter"]) == {(("",), ("configmaps",), ("get", "list"))}


def test_exporter_reads_the_stacks_own_metrics_csv_with_ecc_counters():
    recording = render_stack("prod-managed")
    csv = objects(recording, "ConfigMap")["nvidia-dcgm-exporter-metrics"]["data"]["dcgm-metrics.csv"]
    exported = dcgm_metrics.exported_metric_names(dcgm_metrics.parse_metrics_csv(csv))
    assert {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS"} <= exported
    exporter = container(objects(recording, "DaemonSet")["nvidia-dcgm-exporter"], "nvidia-dcgm-exporter")
    mount = next(m for m in exporter["volumeMounts"] if m["name"] == "metrics-config")
    assert mount == {"name": "metrics-config", "mountPath": "/etc/dcgm-exporter/dcgm-metrics.csv", "subPath": "dcgm-metrics.csv", "readOnly": True}


def test_extra_metrics_are_appended_to_the_csv():
    extra = {"extraMetrics": [{"field": "DCGM_FI_DEV_POWER_VIOLATION", "type": "counter", "help": "Power throttling in ns"}]}
    recording = render(with_changes("prod-managed", dcgmExporter=extra))
    csv = objects(recording, "ConfigMap")["nvidia-dcgm-exporter-metrics"]["data"]["dcgm-metrics.csv"]
    parsed = dcgm_metrics.parse_metrics_csv(csv)
    assert parsed[-1] == dcgm_metrics.Metric("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Power throttling in ns")


def test_no_service_monitors_without_the_prometheus_operator():
    recording = render_stack("onprem-host-driver")
    assert not objects(recording, "ServiceMonitor") and not objects(recording, "PrometheusRule")
    assert "nvidia-node-status-exporter" in objects(recording, "Service")


# --- gpu-feature-discovery ------------------------------------------------------------------------------------


def test_gfd_as_nvidia_renders_it():
    recording = render_stack("prod-managed")
    ds = objects(recording, "DaemonSet")["gpu-feature-discovery"]
    assert ds["spec"]["selector"]["matchLabels"] == {"app": "gpu-feature-discovery", "app.kubernetes.io/part-of": "nvidia-gpu"}
    spec = pod_spec(ds)
    assert spec["serviceAccountName"] == "nvidia-gpu-feature-discovery"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.gpu-feature-discovery": "true"}
    gfd = container(ds, "gpu-feature-discovery")
    assert gfd["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0" and gfd["command"] == ["gpu-feature-discovery"]
    env = env_of(gfd)
    assert env["GFD_SLEEP_INTERVAL"] == "60s" and env["GFD_FAIL_ON_INIT_ERROR"] == "true"
    assert env["NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert "MIG_STRATEGY" not in env and env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"  # the pool's config file decides
    assert mounts(gfd)["/etc/kubernetes/node-feature-discovery/features.d"] == "output-dir"
    assert {"name": "host-sys", "mountPath": "/sys", "readOnly": True} in gfd["volumeMounts"]
    assert host_paths(ds) == {
        "output-dir": "/etc/kubernetes/node-feature-discovery/features.d",
        "host-sys": "/sys",
        "run-nvidia": "/run/nvidia",
    }
    # prod-managed shares a pool, so GFD follows the same per-node config as the plugin
    assert env["CONFIG_FILE"] == "/config/config.yaml" and spec["shareProcessNamespace"] is True
    assert env_of(container(ds, "config-manager"))["PROCESS_TO_SIGNAL"] == "gpu-feature-discovery"
    assert rules(objects(recording, "Role")["nvidia-gpu-feature-discovery"]) == {
        (("nfd.k8s-sigs.io",), ("nodefeatures",), ("create", "get", "list", "update", "watch")),
        (("",), ("pods",), ("get",)),
    }


def test_gfd_without_shared_pools_has_no_config_manager():
    ds = objects(render_stack("dev"), "DaemonSet")["gpu-feature-discovery"]
    assert names(pod_spec(ds)["containers"]) == ["gpu-feature-discovery"]
    assert names(pod_spec(ds)["initContainers"]) == ["toolkit-validation"]


# --- state-mig-manager ----------------------------------------------------------------------------------------


def test_mig_manager_daemonset_rbac_and_configmaps():
    recording = render_stack("prod-managed")
    ds = objects(recording, "DaemonSet")["nvidia-mig-manager"]
    spec = pod_spec(ds)
    assert spec["hostPID"] is True and spec["hostIPC"] is True
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.mig-manager": "true"}
    manager = container(ds, "nvidia-mig-manager")
    assert manager["image"] == "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0"
    env = env_of(manager)
    assert env["GPU_CLIENTS_FILE"] == "/gpu-clients/clients.yaml"
    assert env["CONFIG_FILE"] == "/mig-parted-config/config.yaml" and env["WITH_REBOOT"] == "false"
    assert env["CDI_ENABLED"] == "true" and env["NVIDIA_CDI_HOOK_PATH"] == "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
    assert {"NODE_NAME", "POD_NAME", "POD_NAMESPACE", "DEFAULT_GPU_CLIENTS_NAMESPACE"} <= set(env)
    assert host_paths(ds) == {
        "host-sys": "/sys",
        "run-nvidia-validations": "/run/nvidia/validations",
        "driver-install-dir": "/run/nvidia/driver",
        "host-root": "/",
        "cdi-root": "/var/run/cdi",
    }
    assert mounts(manager)["/driver-root"] == "driver-install-dir"
    configmaps = objects(recording, "ConfigMap")
    clients = yaml.safe_load(configmaps["default-gpu-clients"]["data"]["clients.yaml"])
    assert clients["version"] == "v1" and "nvidia-dcgm.service" in clients["systemd-services"]
    assert "IS_HOST_DRIVER" in configmaps["nvidia-mig-manager-entrypoint"]["data"]["entrypoint.sh"]
    parted = yaml.safe_load(configmaps["default-mig-parted-config"]["data"]["config.yaml"])
    assert parted == mig_catalog.mig_parted_config()
    assert rules(objects(recording, "ClusterRole")["nvidia-mig-manager"]) == {
        (("",), ("nodes",), ("get", "list", "patch", "update", "watch")),
        (("",), ("pods",), ("list",)),
    }


def test_custom_layouts_get_their_own_mig_parted_config_with_the_pool_models_filter():
    recording = render_stack("onprem-host-driver")
    configmaps = objects(recording, "ConfigMap")
    assert "default-mig-parted-config" not in configmaps
    parted = yaml.safe_load(configmaps["gpu-stack-mig-parted-config"]["data"]["config.yaml"])
    [entry] = parted["mig-configs"]["three-2g"]
    assert entry["mig-devices"] == {"2g.10gb": 3}
    assert entry["device-filter"] == mig_catalog.device_filter("A100-40GB")
    assert "all-balanced" in parted["mig-configs"]  # built-ins stay available
    volume = next(v for v in pod_spec(objects(recording, "DaemonSet")["nvidia-mig-manager"])["volumes"] if v["name"] == "mig-parted-config")
    assert volume["configMap"]["name"] == "gpu-stack-mig-parted-config"


def test_no_mig_manager_where_no_pool_has_a_mig_capable_gpu():
    assert "nvidia-mig-manager" not in objects(render_stack("dev"), "DaemonSet")


# --- state-node-status-exporter -------------------------------------------------------------------------------


def test_node_status_exporter_as_nvidia_renders_it():
    recording = render_stack("onprem-host-driver")
    ds = objects(recording, "DaemonSet")["nvidia-node-status-exporter"]
    exporter = container(ds, "nvidia-node-status-exporter")
    assert exporter["image"] == "registry.dc2.corp:5000/nvidia/gpu-operator:v26.7.0"
    assert exporter["imagePullPolicy"] == "IfNotPresent" and exporter["command"] == ["nvidia-validator"]
    env = env_of(exporter)
    assert env["COMPONENT"] == "metrics" and env["METRICS_PORT"] == "8000" and env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert exporter["ports"] == [{"name": "node-status", "containerPort": 8000}]
    assert "initContainers" not in pod_spec(ds) and "runtimeClassName" not in pod_spec(ds)
    assert host_paths(ds) == {"run-nvidia": "/run/nvidia", "host-root": "/"}
    assert objects(recording, "Service")["nvidia-node-status-exporter"]["spec"]["ports"][0]["port"] == 8000


def test_node_status_exporter_is_off_by_default_and_monitored_when_the_operator_is_there():
    assert "nvidia-node-status-exporter" not in objects(render_stack("prod-managed"), "DaemonSet")
    recording = render(with_changes("prod-managed", components={"nodeStatusExporter": True}))
    monitor = objects(recording, "ServiceMonitor")["nvidia-node-status-exporter"]
    assert monitor["spec"]["endpoints"][0]["port"] == "node-status"


# --- stack monitoring -----------------------------------------------------------------------------------------


def test_prometheus_rule_holds_stack_health_and_the_alerts_with_configured_thresholds():
    config = stack_config("prod-managed")
    config["gpu-stack:monitoring"]["alerts"]["gpuTemperatureWarningCelsius"] = 80
    rule = objects(render(config), "PrometheusRule")["gpu-stack"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    records = {r["record"] for g in rule["spec"]["groups"] for r in g["rules"] if "record" in r}
    assert "> 80" in alerts["GpuStackTemperatureWarning"]["expr"]
    assert alerts["GpuStackValidatorNotReady"]["for"] == "15m"
    assert {"gpu_stack:gpu_nodes:count", "gpu_stack_info"} <= records
    info = next(r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("record") == "gpu_stack_info")
    assert info["labels"]["stack"] == "test" and info["labels"]["release"] == "v26.7.0"


def test_alerts_off_keeps_the_health_rules():
    config = stack_config("prod-managed")
    config["gpu-stack:monitoring"]["alerts"]["enabled"] = False
    rule = objects(render(config), "PrometheusRule")["gpu-stack"]
    assert not [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert [r for g in rule["spec"]["groups"] for r in g["rules"] if "record" in r]


def test_dashboard_configmap_is_discoverable_by_the_grafana_sidecar():
    board = objects(render_stack("prod-managed"), "ConfigMap")["gpu-stack-dashboard"]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert board["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    model = json.loads(board["data"]["gpu-stack.json"])
    assert model == grafana_dashboard.dashboard(namespace="gpu-operator")


def test_no_dashboard_without_an_exporter_to_read():
    recording = render(with_changes("dev", components={"dcgmExporter": False}))
    assert "gpu-stack-dashboard" not in objects(recording, "ConfigMap")
    assert "stack-monitoring" not in recording.outputs["states"]
