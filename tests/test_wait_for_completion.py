"""`gpu-stack:upgrade.waitForCompletion`: the config key, its bad values, and the node agent's init container it
renders first in every driver pod (node_images/node-agent, `wait-for-completion`)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.config import ConfigError, load_config
from components.config.cluster import MIN_NODE_AGENT_VERSION
from gpustack import inventory  # noqa: F401  (puts the node agent on sys.path)
from gpustack_agent import __version__ as agent_version
from gpustack_agent.wait import completion
from stacktest import bag, container, env_of, objects, render, stack_config

KEY = "gpu-stack:upgrade.waitForCompletion"
AGENT = "gpu-stack:nodeAgent.image"
WAIT = {"podSelector": "workload-class in (training,batch),gpu-stack/no-wait!=true", "timeoutSeconds": 900}


def with_wait(wait: Any = None, *, agent: str | None = "harbor.platform.internal/gpu-stack/node-agent:0.10.0",
              **upgrade: Any) -> dict[str, Any]:
    config = stack_config("prod-managed")
    config["gpu-stack:upgrade"].pop("waitForCompletion", None)
    if wait is not None:
        config["gpu-stack:upgrade"]["waitForCompletion"] = copy.deepcopy(wait)
    config["gpu-stack:upgrade"].update(upgrade)
    if agent is not None:
        config["gpu-stack:nodeAgent"]["image"] = agent
    return config


def problems(config: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    return caught.value.problems


LONG = "a=" + "b" * 1100

BAD = [
    ("no selector", {"timeoutSeconds": 60}, {}, f"{KEY}.podSelector", "required"),
    ("empty selector", {"podSelector": " "}, {}, f"{KEY}.podSelector", "waits for nothing"),
    ("bad term", {"podSelector": "app=batch,=x"}, {}, f"{KEY}.podSelector", "not a selector term"),
    ("bad key", {"podSelector": "-app=batch"}, {}, f"{KEY}.podSelector", "not a label key"),
    ("bad set value", {"podSelector": "app in (a b)"}, {}, f"{KEY}.podSelector", "not a label value"),
    ("too long", {"podSelector": LONG}, {}, f"{KEY}.podSelector", "at most 1024"),
    ("negative timeout", {**WAIT, "timeoutSeconds": -1}, {}, f"{KEY}.timeoutSeconds", "greater than or equal to 0"),
    ("timeout over a day", {**WAIT, "timeoutSeconds": 86_401}, {}, f"{KEY}.timeoutSeconds", "less than or equal to 86400"),
    ("duration string", {**WAIT, "timeoutSeconds": "15m"}, {}, f"{KEY}.timeoutSeconds", "whole number"),
    ("typo", {**WAIT, "timeout": 60}, {}, f"{KEY}.timeout", "did you mean 'timeoutSeconds'"),
    ("manual upgrades", WAIT, {"strategy": "manual", "waves": []}, KEY, "use 'rolling'"),
]


@pytest.mark.parametrize(("wait", "upgrade", "path", "fragment"), [case[1:] for case in BAD], ids=[c[0] for c in BAD])
def test_bad_values_name_the_key_and_what_is_allowed(wait, upgrade, path, fragment):
    found = problems(with_wait(wait, **upgrade))
    assert any(p == path and fragment in m for p, m in found), found


def test_a_huge_selector_is_not_echoed_back():
    assert all(LONG not in message for _, message in problems(with_wait({"podSelector": LONG})))


def test_an_agent_without_the_subcommand_is_refused_by_its_key():
    # 0.4.0 has no wait-for-completion step; every agent the image check admits (0.6.0 and later) has it.
    found = problems(with_wait(WAIT, agent="harbor.platform.internal/gpu-stack/node-agent:0.4.0"))
    assert [p for p, _ in found] == [AGENT] and "use 0.10.0 or later" in found[0][1]


def test_good_values_and_unknowable_agent_versions_are_accepted():
    for wait in ({"podSelector": "app"}, {"podSelector": "!spot,app notin (web)", "timeoutSeconds": 86_400}, WAIT):
        cfg = load_config(bag(with_wait(wait)))
        assert cfg.upgrade.wait_for_completion.pod_selector == wait["podSelector"]
    assert load_config(bag(with_wait({"podSelector": "app=x"}))).upgrade.wait_for_completion.timeout_seconds == 0
    digest = "harbor.platform.internal/gpu-stack/node-agent@sha256:" + "a" * 64
    load_config(bag(with_wait(WAIT, agent=digest)))


def test_a_stack_without_driver_daemonsets_has_nothing_to_wait_in():
    config = stack_config("onprem-host-driver")
    config["gpu-stack:nodeAgent"]["image"] = "registry.dc2.corp:5000/gpu-stack/node-agent:0.10.0"
    config.setdefault("gpu-stack:upgrade", {})["waitForCompletion"] = WAIT
    assert any(p == KEY and "no pool gets a driver DaemonSet" in m for p, m in problems(config))


def test_the_agent_release_is_one_the_image_check_admits_and_the_toolkits_own():
    import gpustack

    assert tuple(int(part) for part in agent_version.split(".")) >= MIN_NODE_AGENT_VERSION
    # One release: the SARIF log names the toolkit's version, the stacks pin the agent's.
    assert gpustack.__version__ == agent_version


def _drivers(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: ds for name, ds in objects(render(config, stack="prod-managed"), "DaemonSet").items()
            if name.startswith("nvidia-driver-daemonset")}


def test_driver_pods_wait_first_and_nothing_else_changes():
    with_key, without = render(with_wait(WAIT), stack="prod-managed"), render(with_wait(None), stack="prod-managed")
    drivers = {n: d for n, d in objects(with_key, "DaemonSet").items() if n.startswith("nvidia-driver-daemonset")}
    before = {n: d for n, d in objects(without, "DaemonSet").items() if n.startswith("nvidia-driver-daemonset")}
    assert sorted(drivers) == sorted(before) and drivers
    for name, ds in drivers.items():
        spec, old = ds["spec"]["template"]["spec"], before[name]["spec"]["template"]["spec"]
        assert [c["name"] for c in spec["initContainers"]] == ["wait-for-completion", "k8s-driver-manager"]
        assert [c["name"] for c in old["initContainers"]] == ["k8s-driver-manager"]
        wait = container(ds, "wait-for-completion")
        assert wait["image"] == "harbor.platform.internal/gpu-stack/node-agent:0.10.0"
        assert wait["args"] == ["wait-for-completion"] and "command" not in wait
        assert env_of(wait) == {
            "NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
            "WAIT_POD_SELECTOR": WAIT["podSelector"],
            "WAIT_TIMEOUT_SECONDS": "900",
            "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
            "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        }
        security = wait["securityContext"]
        assert security["runAsNonRoot"] and not security["allowPrivilegeEscalation"] and "privileged" not in security
        assert security["capabilities"] == {"drop": ["ALL"]} and "volumeMounts" not in wait
        # The pods tolerate the wait's own hold (a driver pod recreated mid-wait must land to lift it), and the
        # agent holds with exactly that taint.
        hold = {"key": completion.HOLD_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
        assert spec["tolerations"] == [*old["tolerations"], hold]
        # The rest of the pod, the driver's config digest included, is as without the key.
        assert spec["initContainers"][1:] == old["initContainers"]
        assert spec["containers"] == old["containers"]
        assert {k: v for k, v in spec.items() if k not in ("initContainers", "tolerations")} == {
            k: v for k, v in old.items() if k not in ("initContainers", "tolerations")}
    # The gates are the same Jobs; only the stack digest they carry (every setting's) tells the two apart.
    jobs, old_jobs = objects(with_key, "Job"), objects(without, "Job")
    for job in (*jobs.values(), *old_jobs.values()):
        job["metadata"].get("annotations", {}).pop("gpu-stack/stack-digest", None)
    assert jobs == old_jobs
    # The driver ServiceAccount already may do what the agent does: get and patch its node, list pods anywhere.
    rules = objects(with_key, "ClusterRole")["nvidia-driver"]["rules"]
    assert any(r["resources"] == ["nodes"] and {"get", "patch"} <= set(r["verbs"]) for r in rules)
    assert any(r["resources"] == ["pods"] and "list" in r["verbs"] for r in rules)
