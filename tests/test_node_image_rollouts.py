"""Node image rollouts: a pool keeps a working driver on every node while its nodes move to a new kernel (precompiled)
or OS (managed), in three ordinary edits whose `gpustack diff` output the runbook shows (docs/runbook.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

import gpustack.__main__ as cli
from components.config import load_config
from stacktest import ROOT, bag, config_problems, objects, render, stack_config, stack_files

OLD_KERNEL, NEW_KERNEL = "ubuntu22.04-5.15.0-139-generic-amd64", "ubuntu22.04-6.5.0-45-generic-amd64"
CANARY_DS = "nvidia-driver-daemonset-canary-5.15.0-139-generic-ubuntu22.04"
NEW_CANARY_DS = "nvidia-driver-daemonset-canary-6.5.0-45-generic-ubuntu22.04"
TRAINING_DS = "nvidia-driver-daemonset-training"
NEW_TRAINING_DS = "nvidia-driver-daemonset-training-a100-ubuntu24.04"
KERNEL = "feature.node.kubernetes.io/kernel-version.full"
OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"


def pool(config: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in config["gpu-stack:nodePools"] if p["name"] == name)


def canary_kernels(config: dict[str, Any], *images: str) -> None:
    canary = pool(config, "canary")
    canary["nodeImage"] = list(images)
    canary["driver"] = {"daemonSetNames": {OLD_KERNEL: CANARY_DS}} if OLD_KERNEL in images else {}


def training_oses(config: dict[str, Any], *oses: str) -> None:
    training = pool(config, "training-a100")
    training["os"] = list(oses)
    training["driver"] = {"daemonSetNames": {"ubuntu22.04": TRAINING_DS}} if "ubuntu22.04" in oses else {}


def step(stack: str, edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    config = stack_config(stack)
    edit(config)
    return config


def drivers(config: dict[str, Any], stack: str) -> dict[str, dict[str, Any]]:
    return {n: d for n, d in objects(render(config, stack=stack), "DaemonSet").items() if n.startswith("nvidia-driver-daemonset")}


def unassigned_term(ds: dict[str, Any]) -> dict[str, Any]:
    terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return {e["key"]: e.get("values") for e in terms[1]["matchExpressions"]}


def diff(tmp_path: Path, capsys, stack: str, before: dict[str, Any], after: dict[str, Any], *allow: str) -> tuple[int, str]:
    base, head = stack_files(tmp_path, stack, before, after)
    code = cli.main(["diff", "--stack", str(head), "--base", str(base), *(f"--allow={a}" for a in allow)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def documented(out: str, stack: str, marker: str) -> None:
    """The runbooks show this very output (docs/drivers.md, docs/runbook.md), for `--base main` on the stack file."""
    shown = re.sub(r"^diff (\S+): \S+ -> \S+:", rf"diff \1: main -> stacks/Pulumi.{stack}.yaml:", out.strip())
    pages = (ROOT / "docs" / "drivers.md").read_text() + (ROOT / "docs" / "runbook.md").read_text()
    block = pages.split(f"<!-- diff: {marker} -->", 1)[1].split("```console\n", 1)[1].split("```", 1)[0]
    assert block.strip() == f"$ python -m gpustack diff --stack {stack} --base main\n{shown}", (
        f"the '{marker}' diff in docs/ is stale; it now reads:\n{shown}")


# --- a kernel rollout on prod-precompiled -------------------------------------------------------------------


def test_a_second_kernel_gets_a_daemonset_of_its_own_built_for_it_and_nothing_else_moves(tmp_path, capsys):
    base = stack_config("prod-precompiled")
    listed = step("prod-precompiled", lambda c: canary_kernels(c, OLD_KERNEL, NEW_KERNEL))

    before, after = drivers(base, "prod-precompiled"), drivers(listed, "prod-precompiled")
    assert set(after) - set(before) == {NEW_CANARY_DS}
    # The canary's DaemonSet is the one it ran before, object for object: no driver pod restarts.
    assert after[CANARY_DS] == before[CANARY_DS]
    old_spec, new_spec = after[CANARY_DS]["spec"]["template"]["spec"], after[NEW_CANARY_DS]["spec"]["template"]["spec"]
    assert old_spec["nodeSelector"][KERNEL] == "5.15.0-139-generic" and new_spec["nodeSelector"][KERNEL] == "6.5.0-45-generic"
    driver_image = {c["name"]: c["image"] for c in new_spec["containers"]}["nvidia-driver-ctr"]
    # The 6.5 HWE kernel's driver is the platform team's private build (node_images/catalog.yaml).
    assert driver_image == "harbor.platform.internal/gpu-stack/driver:580-6.5.0-45-generic-ubuntu22.04"

    code, out = diff(tmp_path, capsys, "prod-precompiled", base, listed)
    assert code == 0 and "SAFE" in out, out
    documented(out, "prod-precompiled", "kernel step 1")
    assert f"+ create  DaemonSet/gpu-operator/{NEW_CANARY_DS}" in out
    assert "~ update  DaemonSet/" not in out


def test_changing_the_one_kernel_in_place_is_dangerous_and_says_to_list_the_new_one(tmp_path, capsys):
    base = stack_config("prod-precompiled")
    in_place = step("prod-precompiled", lambda c: pool(c, "canary").update(nodeImage=NEW_KERNEL))

    code, out = diff(tmp_path, capsys, "prod-precompiled", base, in_place)
    documented(out, "prod-precompiled", "kernel in place")

    assert code == 1 and "DANGEROUS" in out and "--allow node-image-changed" in out
    assert f"!! dangerous [node-image-changed]: DaemonSet/gpu-operator/{CANARY_DS} is built for ubuntu22.04 kernel " \
           "5.15.0-139-generic and would serve ubuntu22.04 kernel 6.5.0-45-generic instead" in out
    assert "`nodeImage: [old, new]`" in out
    assert diff(tmp_path, capsys, "prod-precompiled", base, in_place, "node-image-changed")[0] == 0


def test_unlisting_the_old_kernel_deletes_its_daemonset_and_says_how_to_count_its_nodes(tmp_path, capsys):
    listed = step("prod-precompiled", lambda c: canary_kernels(c, OLD_KERNEL, NEW_KERNEL))
    unlisted = step("prod-precompiled", lambda c: canary_kernels(c, NEW_KERNEL))

    code, out = diff(tmp_path, capsys, "prod-precompiled", listed, unlisted)
    documented(out, "prod-precompiled", "kernel step 3")

    assert code == 0 and "SAFE" in out, out
    assert f"- delete  DaemonSet/gpu-operator/{CANARY_DS}" in out and "~ update  DaemonSet/" not in out
    assert f"kubectl get nodes -l gpu-stack/driver={CANARY_DS}" in out
    assert drivers(unlisted, "prod-precompiled")[NEW_CANARY_DS] == drivers(listed, "prod-precompiled")[NEW_CANARY_DS]


# --- an OS rollout on prod-managed ---------------------------------------------------------------------------


def test_a_second_os_gets_a_daemonset_selecting_only_its_nodes(tmp_path, capsys):
    base = stack_config("prod-managed")
    listed = step("prod-managed", lambda c: training_oses(c, "ubuntu22.04", "ubuntu24.04"))

    before, after = drivers(base, "prod-managed"), drivers(listed, "prod-managed")
    assert set(after) - set(before) == {NEW_TRAINING_DS}
    assert after[TRAINING_DS] == before[TRAINING_DS]
    assert unassigned_term(after[TRAINING_DS])[OS_VERSION] == ["22.04"]
    assert unassigned_term(after[NEW_TRAINING_DS])[OS_VERSION] == ["24.04"]
    assert unassigned_term(after[NEW_TRAINING_DS])[OS_ID] == ["ubuntu"]
    image = {c["name"]: c["image"] for c in after[NEW_TRAINING_DS]["spec"]["template"]["spec"]["containers"]}["nvidia-driver-ctr"]
    assert image.endswith("-ubuntu24.04")

    code, out = diff(tmp_path, capsys, "prod-managed", base, listed)
    assert code == 0 and "SAFE" in out, out
    assert f"+ create  DaemonSet/gpu-operator/{NEW_TRAINING_DS}" in out and "~ update  DaemonSet/" not in out
    documented(out, "prod-managed", "os step 1")

    unlisted = step("prod-managed", lambda c: training_oses(c, "ubuntu24.04"))
    code, out = diff(tmp_path, capsys, "prod-managed", listed, unlisted)
    assert code == 0 and f"- delete  DaemonSet/gpu-operator/{TRAINING_DS}" in out
    documented(out, "prod-managed", "os step 3")


def test_changing_the_one_os_in_place_is_dangerous(tmp_path, capsys):
    base = stack_config("prod-managed")
    code, out = diff(tmp_path, capsys, "prod-managed", base,
                     step("prod-managed", lambda c: pool(c, "training-a100").update(os="ubuntu24.04")))
    documented(out, "prod-managed", "os in place")
    assert code == 1 and "[node-image-changed]" in out and "`os: [old, new]`" in out


def test_every_driver_daemonset_selects_only_unassigned_nodes_of_its_os():
    for stack in ("prod-managed", "prod-precompiled"):
        for name, ds in drivers(stack_config(stack), stack).items():
            assert OS_ID in unassigned_term(ds) and OS_VERSION in unassigned_term(ds), name


# --- bad values ----------------------------------------------------------------------------------------------

P = "gpu-stack:nodePools[0]"


def edited(edit: Callable[[dict[str, Any]], None], stack: str = "prod-precompiled") -> list[tuple[str, str]]:
    return config_problems(step(stack, edit))


@pytest.mark.parametrize(
    ("edit", "key", "fragment"),
    [
        (lambda c: pool(c, "canary").update(nodeImage=[]), f"{P}.nodeImage", "a pool runs 1 to 4 at once"),
        (lambda c: pool(c, "canary").update(nodeImage=[OLD_KERNEL] * 2), f"{P}.nodeImage", "more than once"),
        (lambda c: pool(c, "canary").update(nodeImage=[OLD_KERNEL, 7]), f"{P}.nodeImage", "entry 1 is 7, not a string"),
        (lambda c: pool(c, "canary").update(nodeImage=[OLD_KERNEL, "ubuntu22.04-9.9"]), f"{P}.nodeImage", "entry 1: unknown node image"),
        (lambda c: pool(c, "canary").update(nodeImage=[OLD_KERNEL, NEW_KERNEL, "a", "b", "c"]), f"{P}.nodeImage", "1 to 4"),
        (lambda c: pool(c, "canary").update(nodeImage={"a": 1}), f"{P}.nodeImage", "neither one entry nor a list"),
        (lambda c: pool(c, "canary").update(nodeImage=[OLD_KERNEL, NEW_KERNEL]), f"{P}.driver.daemonSetName",
         "keep 'nvidia-driver-daemonset-canary-5.15.0-139-generic-ubuntu22.04' for the entry it already serves"),
        (lambda c: pool(c, "canary")["driver"].update(daemonSetNames={OLD_KERNEL: "x"}), f"{P}.driver.daemonSetNames",
         "a pool with one keeps its name with daemonSetName"),
        (lambda c: canary_kernels(c, OLD_KERNEL, NEW_KERNEL) or pool(c, "canary")["driver"].update(
            daemonSetNames={"ubuntu24.04-6.8.0-79-generic-amd64": "x"}), f"{P}.driver.daemonSetNames", "is not an entry of the pool"),
        (lambda c: canary_kernels(c, OLD_KERNEL, NEW_KERNEL) or pool(c, "canary")["driver"].update(
            daemonSetNames={OLD_KERNEL: "Not_A_Name"}), f"{P}.driver.daemonSetNames", "is not a DaemonSet name"),
        (lambda c: canary_kernels(c, OLD_KERNEL, NEW_KERNEL) or pool(c, "canary")["driver"].update(
            daemonSetNames={OLD_KERNEL: NEW_CANARY_DS}), f"{P}.driver.daemonSetNames", "both name driver DaemonSet"),
    ],
    ids=["empty", "repeated", "not a string", "unknown entry", "too many", "a map", "scalar name with a list",
         "names without a list", "names an unlisted entry", "bad name", "two entries one name"],
)
def test_bad_node_image_lists_name_the_key_and_what_it_takes(edit, key, fragment):
    found = edited(edit)
    assert any(k == key and fragment in m for k, m in found), found


def test_a_list_of_oses_is_checked_entry_by_entry():
    found = edited(lambda c: pool(c, "training-a100").update(os=["ubuntu22.04", "windows11"]), "prod-managed")
    assert any(k.endswith(".os") and "entry 1: 'windows11' is not an OS tag" in m for k, m in found), found


def test_a_list_needs_the_node_labeller():
    def without_labeller(c: dict[str, Any]) -> None:
        training_oses(c, "ubuntu22.04", "ubuntu24.04")
        c.setdefault("gpu-stack:components", {})["nodeLabeler"] = False

    found = edited(without_labeller, "prod-managed")
    assert any(k.endswith(".os") and "components.nodeLabeler: true" in m for k, m in found), found


def test_the_listed_configs_load():
    for stack, edit in (("prod-precompiled", lambda c: canary_kernels(c, OLD_KERNEL, NEW_KERNEL)),
                        ("prod-managed", lambda c: training_oses(c, "ubuntu22.04", "ubuntu24.04"))):
        cfg = load_config(bag(step(stack, edit)))
        assert any(p.listed for p in cfg.node_pools)
