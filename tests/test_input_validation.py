"""Issue 17: the stack configuration validates as the Kubernetes API server does (fullmatch, lengths, label and
annotation keys, tolerations, node selectors, quantities, IntOrString, durations, image references), every count
is bounded by components/config/limits.py, and a key outside the `gpu-stack:` namespace that looks like a mistake
is refused. Config-level and fast: each case loads a bag built from a real stack; one render checks types."""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest

from stacktest import ROOT, bag, config_problems, container, objects, render, setter, stack_config  # noqa: F401  (stacktest sets sys.path)

from components.config.keys import key_of, plain
from components.config import load_config
from components.config import limits
from components.config.base import SHOWN_MAX, parse_image

BASE = stack_config("prod-managed")
P = "gpu-stack:nodePools"
DS = "gpu-stack:daemonsets"
DIGEST64 = "0123456789abcdef" * 4


def mutated(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    config = copy.deepcopy(BASE)
    change(config)
    return config


problems = config_problems
put = setter


def tolerations(*items: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return put(DS, "tolerations", value=list(items))


def pools(count: int) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        template = config[P][0]
        config[P] = [
            {**copy.deepcopy(template), "name": f"pool-{i}", "nodeSelector": {"pool": str(i)}, "driver": {}} for i in range(count)
        ]
        config.pop("gpu-stack:upgrade", None)

    return change


BAD = [
    # Names: fullmatch (Python's `$` lets a trailing newline through) and the API server's lengths.
    ("name with newline", put("gpu-stack:cluster", "name", value="prod\n"), "gpu-stack:cluster.name", "DNS-1123 label"),
    ("namespace 64", put("gpu-stack:cluster", "namespace", value="a" * 64), "gpu-stack:cluster.namespace", "at most 63"),
    ("k8s version newline", put("gpu-stack:cluster", "kubernetesVersions", value=["1.33\n"]), "gpu-stack:cluster.kubernetesVersions", "cannot be validated"),
    ("pull secret 254", put("gpu-stack:registry", "pullSecrets", value=["a" * 254]), "gpu-stack:registry.pullSecrets", "at most 253"),
    ("pull secret newline", put("gpu-stack:registry", "pullSecrets", value=["ngc-pull\n"]), "gpu-stack:registry.pullSecrets", "DNS-1123 subdomain"),
    ("pull secret twice", put("gpu-stack:registry", "pullSecrets", value=["ngc-pull", "ngc-pull"]), "gpu-stack:registry.pullSecrets", "named twice"),
    ("pool name newline", put(P, 0, "name", value="training\n"), "gpu-stack:nodePools[0].name", "DNS-1123 label"),
    ("wave name newline", put("gpu-stack:upgrade", "waves", 0, "name", value="canary\n"), "gpu-stack:upgrade.waves[0].name", "DNS-1123 label"),
    ("priority class 254", put(DS, "priorityClassName", value="a" * 254), "gpu-stack:daemonsets.priorityClassName", "PriorityClass"),
    ("driver version newline", put("gpu-stack:versions", "driver", value="595.91.07\n"), "gpu-stack:versions.driver", "not a driver version"),
    ("os newline", put(P, 0, "os", value="ubuntu22.04\n"), "gpu-stack:nodePools[0].os", "not an OS tag"),
    ("image tag newline", put("gpu-stack:versions", "toolkit", value="v1.17.0\n"), "gpu-stack:versions.toolkit", "neither an image tag"),
    ("env name newline", put("gpu-stack:operands", "toolkit", "env", 0, "name", value="RUNTIME_RESTART_MODE\n"), "gpu-stack:operands.toolkit.env[0].name", "not an env var name"),
    ("host path newline", put("gpu-stack:toolkit", "installDir", value="/usr/local/nvidia\n"), "gpu-stack:toolkit.installDir", "absolute, normalised host path"),
    # Labels, annotations and node selectors.
    ("label value 64", put(DS, "labels", value={"team": "a" * 64}), "gpu-stack:daemonsets.labels", "valid Kubernetes label"),
    ("label value newline", put(DS, "labels", value={"team": "ml\n"}), "gpu-stack:daemonsets.labels", "valid Kubernetes label"),
    ("label key name 64", put(DS, "labels", value={"a" * 64: "x"}), "gpu-stack:daemonsets.labels", "1-63 characters"),
    ("label key prefix 254", put(DS, "labels", value={"a" * 254 + "/team": "x"}), "gpu-stack:daemonsets.labels", "prefix before '/'"),
    ("label key prefix upper", put(DS, "labels", value={"Example.com/team": "x"}), "gpu-stack:daemonsets.labels", "prefix before '/'"),
    ("annotation key", put(DS, "annotations", value={"bad key": "x"}), "gpu-stack:daemonsets.annotations", "annotation key"),
    ("annotation key newline", put(DS, "annotations", value={"example.com/note\n": "x"}), "gpu-stack:daemonsets.annotations", "annotation key"),
    ("annotations 256 KiB", put(DS, "annotations", value={"note": "x" * (limits.ANNOTATIONS_MAX_BYTES + 1)}), "gpu-stack:daemonsets.annotations", "256 KiB"),
    ("selector value newline", put(P, 0, "nodeSelector", value={"pool": "a100\n"}), "gpu-stack:nodePools[0].nodeSelector", "label selector"),
    ("selector value 64", put(P, 0, "nodeSelector", value={"pool": "a" * 64}), "gpu-stack:nodePools[0].nodeSelector", "at most 63"),
    ("selector key prefix", put(P, 0, "nodeSelector", value={"-bad.io/pool": "a"}), "gpu-stack:nodePools[0].nodeSelector", "prefix before '/'"),
    ("pod selector key", put("gpu-stack:upgrade", "waitForCompletion", "podSelector", value="a" * 64 + "=x"), "gpu-stack:upgrade.waitForCompletion.podSelector", "not a label key"),
    # Tolerations, in daemonsets and in operands.
    ("Exists with value", tolerations({"key": "k", "operator": "Exists", "value": "v"}), "gpu-stack:daemonsets.tolerations[0]", "operator Exists takes no value"),
    ("Equal without key", tolerations({"operator": "Equal", "value": "v"}), "gpu-stack:daemonsets.tolerations[0]", "without a key must use operator Exists"),
    ("effect enum", tolerations({"key": "k", "operator": "Exists", "effect": "NoRun"}), "gpu-stack:daemonsets.tolerations[0].effect", "'NoSchedule', 'PreferNoSchedule', 'NoExecute'"),
    ("seconds without NoExecute", tolerations({"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}), "gpu-stack:daemonsets.tolerations[0]", "NoExecute only"),
    ("negative seconds", tolerations({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -1}), "gpu-stack:daemonsets.tolerations[0].tolerationSeconds", "greater than or equal to 0"),
    ("toleration key", tolerations({"key": "bad key", "operator": "Exists"}), "gpu-stack:daemonsets.tolerations[0]", "key 'bad key'"),
    ("toleration value", tolerations({"key": "k", "value": "a b"}), "gpu-stack:daemonsets.tolerations[0]", "value 'a b'"),
    ("operand toleration", put("gpu-stack:operands", "devicePlugin", "tolerations", value=[{"operator": "Exists", "value": "v"}]), "gpu-stack:operands.devicePlugin.tolerations[0]", "operator Exists takes no value"),
    # Quantities.
    ("quantity newline", put("gpu-stack:operands", "devicePlugin", "resources", "limits", value={"memory": "256Mi\n"}), "gpu-stack:operands.devicePlugin.resources.limits", "not a Kubernetes quantity"),
    ("quantity suffix", put("gpu-stack:operands", "devicePlugin", "resources", "limits", value={"memory": "256MB"}), "gpu-stack:operands.devicePlugin.resources.limits", "not a Kubernetes quantity"),
    ("quantity negative", put("gpu-stack:operands", "devicePlugin", "resources", "limits", value={"memory": "-1Gi"}), "gpu-stack:operands.devicePlugin.resources.limits", "negative"),
    # IntOrString.
    ("maxUnavailable huge", put(DS, "maxUnavailable", value=10**9), "gpu-stack:daemonsets.maxUnavailable", f"at most {limits.MAX_UNAVAILABLE_COUNT}"),
    ("maxUnavailable digits", put("gpu-stack:upgrade", "maxUnavailable", value="2"), "gpu-stack:upgrade.maxUnavailable", "as a number (2, unquoted)"),
    ("maxUnavailable 0%", put(DS, "maxUnavailable", value="0%"), "gpu-stack:daemonsets.maxUnavailable", "percentage from 1% to 100%"),
    ("maxUnavailable 0", put(DS, "maxUnavailable", value=0), "gpu-stack:daemonsets.maxUnavailable", "positive count"),
    ("maxUnavailable newline", put(DS, "maxUnavailable", value="25%\n"), "gpu-stack:daemonsets.maxUnavailable", "percentage"),
    # The fleet budget's cap and the upgrade's node timeout: whole numbers in bounds, never a bool or a string.
    ("maxParallelUpgrades huge", put("gpu-stack:upgrade", "maxParallelUpgrades", value=10**9), "gpu-stack:upgrade.maxParallelUpgrades", f"less than or equal to {limits.MAX_UNAVAILABLE_COUNT}"),
    ("maxParallelUpgrades bool", put("gpu-stack:upgrade", "maxParallelUpgrades", value=False), "gpu-stack:upgrade.maxParallelUpgrades", "expected a whole number"),
    ("maxParallelUpgrades null", put("gpu-stack:upgrade", "maxParallelUpgrades", value=None), "gpu-stack:upgrade.maxParallelUpgrades", "expected a whole number"),
    ("maxParallelUpgrades list", put("gpu-stack:upgrade", "maxParallelUpgrades", value=[1]), "gpu-stack:upgrade.maxParallelUpgrades", "expected a whole number"),
    ("paused string", put("gpu-stack:upgrade", "paused", value="true"), "gpu-stack:upgrade.paused", "true, false"),
    ("paused null", put("gpu-stack:upgrade", "paused", value=None), "gpu-stack:upgrade.paused", "true, false"),
    ("nodeReadyTimeoutSeconds huge", put("gpu-stack:upgrade", "nodeReadyTimeoutSeconds", value=10**12), "gpu-stack:upgrade.nodeReadyTimeoutSeconds", "less than or equal to 86400"),
    ("nodeReadyTimeoutSeconds float", put("gpu-stack:upgrade", "nodeReadyTimeoutSeconds", value=600.5), "gpu-stack:upgrade.nodeReadyTimeoutSeconds", "expected a whole number"),
    ("nodeReadyTimeoutSeconds duration", put("gpu-stack:upgrade", "nodeReadyTimeoutSeconds", value="30m"), "gpu-stack:upgrade.nodeReadyTimeoutSeconds", "expected a whole number"),
    # Durations and timeouts.
    ("interval newline", put("gpu-stack:monitoring", "serviceMonitor", "interval", value="30s\n"), "gpu-stack:monitoring.serviceMonitor.interval", "Prometheus duration"),
    ("interval too long", put("gpu-stack:monitoring", "serviceMonitor", "interval", value="2h"), "gpu-stack:monitoring.serviceMonitor.interval", "longer than 1h"),
    ("interval zero", put("gpu-stack:monitoring", "serviceMonitor", "interval", value="0s"), "gpu-stack:monitoring.serviceMonitor.interval", "is zero"),
    ("duration digits", put("gpu-stack:monitoring", "serviceMonitor", "interval", value="9" * 30 + "s"), "gpu-stack:monitoring.serviceMonitor.interval", "Prometheus duration"),
    ("scrape timeout over interval", put("gpu-stack:monitoring", "serviceMonitor", "scrapeTimeout", value="1m"), "gpu-stack:monitoring.serviceMonitor", "longer than interval"),
    ("alert for too long", put("gpu-stack:monitoring", "alerts", "utilizationFor", value="30d"), "gpu-stack:monitoring.alerts.utilizationFor", "longer than 7d"),
    ("negative timeout", put("gpu-stack:upgrade", "waitForCompletion", "timeoutSeconds", value=-5), "gpu-stack:upgrade.waitForCompletion.timeoutSeconds", "greater than or equal to 0"),
    # Image references, parsed by distribution/reference's grammar.
    ("agent upper-case repo", put("gpu-stack:nodeAgent", "image", value="harbor.platform.internal/GPU-stack/node-agent:0.10.0"), "gpu-stack:nodeAgent.image", "must be lowercase"),
    ("agent newline", put("gpu-stack:nodeAgent", "image", value="harbor.platform.internal/gpu-stack/node-agent:0.10.0\n"), "gpu-stack:nodeAgent.image", "whitespace"),
    ("agent short digest", put("gpu-stack:nodeAgent", "image", value="harbor.platform.internal/gpu-stack/node-agent@sha256:abc"), "gpu-stack:nodeAgent.image", "not an image reference"),
    ("agent digest algorithm", put("gpu-stack:nodeAgent", "image", value="harbor.platform.internal/gpu-stack/node-agent@md5:" + "a" * 32), "gpu-stack:nodeAgent.image", "not an image reference"),
    ("agent digest in tag", put("gpu-stack:nodeAgent", "image", value="harbor.platform.internal/gpu-stack/node-agent:x@sha256:" + DIGEST64[:63]), "gpu-stack:nodeAgent.image", "not an image reference"),
    ("agent latest", put("gpu-stack:nodeAgent", "image", value="harbor.platform.internal/gpu-stack/node-agent:latest"), "gpu-stack:nodeAgent.image", "'latest'"),
    ("vgpu manager upper", put("gpu-stack:vgpu", "managerImage", value="harbor.platform.internal/gpu-stack/vGPU:580.82.07-ubuntu22.04"), "gpu-stack:vgpu.managerImage", "must be lowercase"),
    ("registry override upper", put("gpu-stack:registry", "override", value="Registry.internal:5000/mirror"), "gpu-stack:registry.override", "registry host"),
    ("registry override newline", put("gpu-stack:registry", "override", value="registry.internal:5000\n"), "gpu-stack:registry.override", "registry host"),
    ("operand full ref digest length", put("gpu-stack:operands", "devicePlugin", "image", value="harbor.example.com/nvidia/k8s-device-plugin@sha256:" + DIGEST64 + "0"), "gpu-stack:operands.devicePlugin.image", "not an image reference"),
    ("operand full ref no host", put("gpu-stack:operands", "devicePlugin", "image", value="nvidia/k8s-device-plugin:v0.17.0"), "gpu-stack:operands.devicePlugin.image", "names its registry"),
    ("operand repository upper", put("gpu-stack:operands", "devicePlugin", "repository", value="harbor.example.com/NVIDIA"), "gpu-stack:operands.devicePlugin.repository", "not a registry path"),
    # Bounds on counts (components/config/limits.py).
    ("too many pools", pools(limits.MAX_NODE_POOLS + 1), "gpu-stack:nodePools", f"at most {limits.MAX_NODE_POOLS} items"),
    ("too many waves", put("gpu-stack:upgrade", "waves", value=[{"name": f"w{i}", "pools": ["training-a100"]} for i in range(limits.MAX_WAVES + 1)]), "gpu-stack:upgrade.waves", f"at most {limits.MAX_WAVES} items"),
    ("too many pull secrets", put("gpu-stack:registry", "pullSecrets", value=[f"s{i}" for i in range(limits.MAX_PULL_SECRETS + 1)]), "gpu-stack:registry.pullSecrets", f"at most {limits.MAX_PULL_SECRETS} items"),
    ("too many tolerations", tolerations(*({"key": f"k{i}", "operator": "Exists"} for i in range(limits.MAX_TOLERATIONS + 1))), "gpu-stack:daemonsets.tolerations", f"at most {limits.MAX_TOLERATIONS} items"),
    ("too many env", put("gpu-stack:operands", "toolkit", "env", value=[{"name": f"V{i}", "value": "x"} for i in range(limits.MAX_ENV + 1)]), "gpu-stack:operands.toolkit.env", f"at most {limits.MAX_ENV} items"),
    ("too many labels", put(DS, "labels", value={f"l{i}": "x" for i in range(limits.MAX_MAP_ENTRIES + 1)}), "gpu-stack:daemonsets.labels", f"at most {limits.MAX_MAP_ENTRIES}"),
    ("too many selector terms", put(P, 0, "nodeSelector", value={f"l{i}": "x" for i in range(limits.MAX_MAP_ENTRIES + 1)}), "gpu-stack:nodePools[0].nodeSelector", f"at most {limits.MAX_MAP_ENTRIES}"),
    ("too many mig layouts", put("gpu-stack:migLayouts", value={f"l{i}": {"1g.10gb": 7} for i in range(limits.MAX_MIG_LAYOUTS + 1)}), "gpu-stack:migLayouts", f"at most {limits.MAX_MIG_LAYOUTS} items"),
    ("too many extra metrics", put("gpu-stack:dcgmExporter", "extraMetrics", value=[{"field": f"DCGM_FI_X{i}", "type": "gauge", "help": "x"} for i in range(limits.MAX_EXTRA_METRICS + 1)]), "gpu-stack:dcgmExporter.extraMetrics", f"at most {limits.MAX_EXTRA_METRICS} items"),
    ("arg too long", put("gpu-stack:operands", "toolkit", "args", value=["x" * (limits.MAX_ARG_LENGTH + 1)]), "gpu-stack:operands.toolkit.args", f"at most {limits.MAX_ARG_LENGTH}"),
    # Keys outside the project's namespace.
    ("bare key", put("cluster", value={"name": "x"}), "cluster", "without a namespace"),
    ("misspelt namespace", put("gpu_stack:cluster", value={"name": "x"}), "gpu_stack:cluster", "never read"),
    ("misspelt namespace 2", put("gpustack:driver", value={"mode": "host"}), "gpustack:driver", "never read"),
    ("capitalised namespace", put("GPU-Stack:driver", value={"mode": "host"}), "GPU-Stack:driver", "never read"),
]


@pytest.mark.parametrize(("change", "path", "fragment"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_value_is_refused_naming_the_key(change, path, fragment):
    found = problems(mutated(change))
    assert any(p == path and fragment in m for p, m in found), found
    for p, message in found:
        # Short, one line each; no echoed value longer than SHOWN_MAX (a 256 KiB annotation is never printed).
        assert "\n" not in message and len(message) < 4 * SHOWN_MAX + 200, (p, message[:300])


GOOD = [
    ("other projects' namespaces", lambda c: c.update({"kubernetes:context": "x", "pulumi:tags": '{"a": "b"}'})),
    ("NoExecute for a while", tolerations({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})),
    ("tolerate everything", tolerations({"operator": "Exists"})),
    ("Equal with empty value", tolerations({"key": "k", "operator": "Equal", "effect": "NoSchedule"})),
    ("digest-pinned agent", put("gpu-stack:nodeAgent", "image", value="harbor.platform.internal/gpu-stack/node-agent@sha256:" + DIGEST64)),
    ("tag and digest", put("gpu-stack:nodeAgent", "image", value="harbor.platform.internal/gpu-stack/node-agent:0.10.0@sha256:" + DIGEST64)),
    ("registry with port and path", put("gpu-stack:registry", "override", value="registry.dc2.corp:5000/mirror")),
    ("label at the limits", put(DS, "labels", value={"a" * 63 + "." + "b" * 63 + "/" + "c" * 63: "d" * 63})),
    ("percent budget", put(DS, "maxUnavailable", value="100%")),
    ("no cap of its own", put("gpu-stack:upgrade", "maxParallelUpgrades", value=0)),
    ("cap at the count limit", put("gpu-stack:upgrade", "maxParallelUpgrades", value=limits.MAX_UNAVAILABLE_COUNT)),
    ("paused rollout", put("gpu-stack:upgrade", "paused", value=True)),
    ("node ready timeout at its bounds", put("gpu-stack:upgrade", "nodeReadyTimeoutSeconds", value=86_400)),
    ("ms duration", put("gpu-stack:monitoring", "serviceMonitor", "scrapeTimeout", value="500ms")),
]


@pytest.mark.parametrize("change", [case[1] for case in GOOD], ids=[case[0] for case in GOOD])
def test_valid_value_is_accepted(change):
    load_config(bag(mutated(change)))


def test_int_or_string_keeps_its_type():
    cfg = load_config(bag(mutated(lambda c: c.update({DS: {"maxUnavailable": 3}, "gpu-stack:upgrade": {**c["gpu-stack:upgrade"], "maxUnavailable": "25%"}}))))
    # the value as given (a count stays a number), tagged with its key like every config value
    assert cfg.daemonsets.max_unavailable == 3 and type(plain(cfg.daemonsets.max_unavailable)) is int
    assert key_of(cfg.daemonsets.max_unavailable) == "gpu-stack:daemonsets.maxUnavailable"
    assert cfg.upgrade.max_unavailable == "25%" and type(plain(cfg.upgrade.max_unavailable)) is str


def test_bool_is_not_a_count():
    found = problems(mutated(put(DS, "maxUnavailable", value=True)))
    assert any(p == "gpu-stack:daemonsets.maxUnavailable" for p, _ in found), found


def test_image_references_parse_by_the_grammar():
    ref = parse_image("registry.dc2.corp:5000/gpu-stack/node-agent:0.10.0")
    assert (ref.domain, ref.name, ref.tag, ref.digest) == ("registry.dc2.corp:5000", "registry.dc2.corp:5000/gpu-stack/node-agent", "0.10.0", None)
    assert parse_image("gpu-stack/node-agent@sha256:" + DIGEST64).domain is None
    for bad in ("", "a b:1", "x:1\n", "registry.io/UPPER/x:1", "UPPER:1", "x@sha256:" + "a" * 63, "x:" + "t" * 129):
        with pytest.raises(ValueError):
            parse_image(bad)


def test_rendered_budgets_and_tolerations_have_the_api_types():
    """One render: daemonsets.maxUnavailable as an integer and upgrade.maxUnavailable as a percentage reach the
    DaemonSets with those types, and a NoExecute toleration keeps its seconds."""
    config = mutated(
        lambda c: c.update(
            {
                DS: {
                    "maxUnavailable": 3,
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "maintenance", "operator": "Equal", "value": "soon", "effect": "NoExecute", "tolerationSeconds": 600},
                    ],
                },
                "gpu-stack:upgrade": {**c["gpu-stack:upgrade"], "maxUnavailable": "25%"},
            }
        )
    )
    daemonsets = objects(render(config), "DaemonSet")
    plugin = daemonsets["nvidia-device-plugin-daemonset"]
    assert plugin["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 3
    assert type(plugin["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]) in (int, float)
    assert {"key": "maintenance", "operator": "Equal", "value": "soon", "effect": "NoExecute", "tolerationSeconds": 600} in plugin["spec"]["template"]["spec"]["tolerations"]
    # The drivers' budget is the node agents' (their DaemonSets are OnDelete): the percentage stays a string there.
    drivers = [d for name, d in daemonsets.items() if name.startswith("nvidia-driver-daemonset")]
    assert drivers and all(d["spec"]["updateStrategy"] == {"type": "OnDelete"} for d in drivers)
    pools = json.loads(objects(render(config), "ConfigMap")["gpu-stack-node-pools"]["data"]["node-pools.json"])
    assert pools["removal"]["maxUnavailable"] == "25%"


def test_what_the_config_allows_the_node_agent_accepts():
    """The node agent refuses a node-pools document over its own bounds (node_images/node-agent/gpustack_agent):
    every count and timeout the config lets through must fit them, or a valid stack would stop its agents."""
    import sys

    from components.config import Upgrade, Validation
    from components.config.upgrade import WaitForCompletion

    sys.path.insert(0, str(ROOT / "node_images" / "node-agent"))
    from gpustack_agent.model import labels as agent_labels, settings as agent_settings

    def upper_bound(model, field: str) -> int:
        return next(m.le for m in model.model_fields[field].metadata if hasattr(m, "le"))

    assert limits.MAX_NODE_POOLS <= agent_labels.MAX_POOLS
    assert limits.MAX_MAP_ENTRIES <= agent_labels.MAX_ENTRIES
    wave = Upgrade.model_fields["waves"].annotation.__args__[0]
    timeouts = [upper_bound(wave, "timeout_seconds"), upper_bound(Validation, "timeout_seconds"),
                upper_bound(WaitForCompletion, "timeout_seconds")]
    assert max(timeouts) <= agent_settings.MAX_SECONDS


def test_the_fleet_budget_at_the_configs_bounds_is_a_document_the_node_agent_accepts():
    """Every upgrade setting the config lets through, at its bounds, reaches the node agent in a version-3 document
    its parser takes: a valid stack never stops its agents."""
    import sys

    from components.config import Upgrade
    from components.states.node_labeler import DriverImage, Removal, agent_config

    sys.path.insert(0, str(ROOT / "node_images" / "node-agent"))
    from gpustack_agent.model import labels as agent_labels

    cfg = load_config(bag(BASE))
    pool = cfg.node_pools[0]
    for upgrade in (
        Upgrade.model_validate({"maxUnavailable": limits.MAX_UNAVAILABLE_COUNT, "maxParallelUpgrades": limits.MAX_UNAVAILABLE_COUNT,
                                "nodeReadyTimeoutSeconds": 86_400, "paused": True, "drain": {"timeoutSeconds": 86_400}}),
        Upgrade.model_validate({"maxUnavailable": "100%", "maxParallelUpgrades": 0, "nodeReadyTimeoutSeconds": 300,
                                "strategy": "manual"}),
    ):
        document = agent_config(
            [pool],
            driver_images={pool.name: [DriverImage("nvidia-driver-daemonset-" + pool.name,
                                                   {"feature.node.kubernetes.io/system-os_release.ID": "ubuntu"})]},
            driver_digests={"nvidia-driver-daemonset-" + pool.name: "0123456789abcdef"},
            device_plugin_configs=False,
            removal=Removal.of(upgrade, "gpu-operator"),
        )
        parsed = agent_labels.parse_config(document)
        assert parsed.drivers == {"nvidia-driver-daemonset-" + pool.name: "0123456789abcdef"}
