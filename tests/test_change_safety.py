"""Change safety: every ordinary edit of every stack changes exactly what a platform engineer would accept.

Each edit (tests/changesafety.py) is applied to each stack it fits, both sides are rendered by the real program,
and `gpustack.changes.plan` says what `pulumi up` would do to the live stack: resources created, updated,
replaced, re-run (gate Jobs) and deleted, by URN with aliases honoured, and what would make the update fail
(a protected object deleted or replaced, a create that collides with an object another URN still holds). The
expected sets below are written from the configuration, as the behaviour the edit should have:

* no ordinary edit replaces anything in place or fails `pulumi up`; the only replacements are gate Jobs
  re-running, which is how a gate judges again;
* every edit re-runs the stack's validation gate (each effective `pulumi up` re-checks the fleet) and updates
  the `gpu_stack_info` recording rule that carries the configuration's digest;
* a driver DaemonSet is created or deleted only when its pool comes or goes (its pods stay then, for the node
  agent to hand over at the upgrade's pace), and updated in place otherwise; renaming, reordering or removing
  waves never touches one;
* nothing an ordinary edit does is dangerous: several driver DaemonSets rolling in one wave share the node agents'
  one fleet budget, and the node-pools document names each driver DaemonSet's new template digest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pytest

from changesafety import EDITS, Config, Edit, driver_version_bump, loaded, waves
from components.kit import naming
from components.states import node_write_policy
from components.states.node_labeler import pool_labels
from gpustack import changes
from stacktest import STACKS, render, stack_config

Expected = dict[str, set[str]]


@dataclass
class Expect:
    create: set[str] = field(default_factory=set)
    update: set[str] = field(default_factory=set)
    rerun: set[str] = field(default_factory=set)
    delete: set[str] = field(default_factory=set)
    dangers: set[str] = field(default_factory=set)

    def __or__(self, other: "Expect") -> "Expect":
        return Expect(*(getattr(self, f) | getattr(other, f) for f in ("create", "update", "rerun", "delete", "dangers")))


# --- what a stack's configuration says its objects are called ---------------------------------------------------


def ns(config: Config) -> str:
    return loaded(config).cluster.namespace


def obj(config: Config, kind: str, name: str) -> str:
    return f"{kind}/{ns(config)}/{name}"


def daemonset_of(config: Config) -> dict[str, frozenset[str]]:
    """Each driver pool's DaemonSets: one per flavour (per OS, node image or, on OpenShift, RHCOS build)."""
    cfg = loaded(config)
    return {p.name: frozenset(f.daemonset for f in cfg.pool_driver(p).flavours) for p in cfg.driver_pools}


def all_daemonsets(config: Config) -> set[str]:
    return {d for names in daemonset_of(config).values() for d in names}


def gated(config: Config) -> set[str]:
    return {pool for wave in waves(config)[:-1] for pool in wave["pools"]}


def gate(config: Config, pool: str) -> str:
    return obj(config, "Job", naming.pool_gate(pool))


def rendered(config: Config, label: str, stack: str) -> bool:
    return label in {changes.identity(r) for r in render(config, stack=stack).registrations}


def echo(before: Config, after: Config, stack: str) -> Expect:
    """Any edit: the stack gate re-runs and the recording rule with the configuration digest is updated; where a
    DaemonSet's ServiceAccount comes or goes, the node-bound admission policies name the accounts anew."""
    expect = Expect()
    if loaded(after).validation.mode != "off":
        expect.rerun.add(obj(after, "Job", "gpu-stack-validation"))
    rule = obj(after, "PrometheusRule", "gpu-stack")
    if rendered(after, rule, stack):
        expect.update.add(rule)
    if gpu_node_accounts(before, stack) != gpu_node_accounts(after, stack):
        expect.update |= {f"ValidatingAdmissionPolicy/{shape.name}" for shape in node_write_policy.SHAPES}
    return expect


def gpu_node_accounts(config: Config, stack: str) -> set[str]:
    return {(((r.inputs.get("spec") or {}).get("template") or {}).get("spec") or {}).get("serviceAccountName")
            for r in render(config, stack=stack).registrations if r.inputs.get("kind") == "DaemonSet"}


WAVE_GATE_RBAC = ("ServiceAccount", "Role", "RoleBinding")
WAVE_GATE_CLUSTER_RBAC = ("ClusterRole", "ClusterRoleBinding")


def gates_changed(before: Config, after: Config) -> Expect:
    """Gates come and go with the pools later waves wait for; the gates' Role names them."""
    old, new = gated(before), gated(after)
    expect = Expect(create={gate(after, p) for p in new - old}, delete={gate(before, p) for p in old - new})
    if not new and old:
        expect.delete |= {obj(before, k, "gpu-stack-wave-gate") for k in WAVE_GATE_RBAC}
        expect.delete |= {f"{k}/gpu-stack-wave-gate" for k in WAVE_GATE_CLUSTER_RBAC} | {"driver-waves"}
    elif new and not old:
        expect.create |= {obj(after, k, "gpu-stack-wave-gate") for k in WAVE_GATE_RBAC}
        expect.create |= {f"{k}/gpu-stack-wave-gate" for k in WAVE_GATE_CLUSTER_RBAC} | {"driver-waves"}
    elif old != new or ({d for p in old for d in daemonset_of(before).get(p, ())}
                         != {d for p in new for d in daemonset_of(after).get(p, ())}):
        expect.update.add(obj(after, "Role", "gpu-stack-wave-gate"))
    return expect


def drivers_rolled(before: Config, after: Config, pools: set[str]) -> Expect:
    """The driver DaemonSets of `pools` roll to a new template: each is updated in place (the node agents replace
    its pods within the one fleet budget, however many roll in a wave), the node-pools document names its new
    template digest, and the gate after each gated pool re-runs."""
    daemonsets = {d for p in pools for d in daemonset_of(after)[p]}
    expect = Expect(update={obj(after, "DaemonSet", d) for d in daemonsets})
    expect.rerun |= {gate(after, p) for p in pools & gated(after)}
    return expect | (pools_document(after) if daemonsets else Expect())


def driver_daemonsets_listed(before: Config, after: Config) -> Expect:
    """The stack gate's Role names every driver DaemonSet, and the node-pools document every pool."""
    expect = Expect()
    if all_daemonsets(before) != all_daemonsets(after) and loaded(after).validation.mode != "off":
        expect.update.add(obj(after, "Role", "gpu-stack-validation"))
    return expect


def pools_document(after: Config) -> Expect:
    return Expect(update={obj(after, "ConfigMap", "gpu-stack-node-pools")}) if loaded(after).components.node_labeler else Expect()


def plugin_config(config: Config, pool: Any) -> tuple:
    """What a pool's key of the plugin configs holds: its name and how it shares (not which MIG layout)."""
    sharing = pool.sharing
    return pool.name, sharing.strategy, sharing.replicas, sharing.rename_by_default, sharing.fail_requests_greater_than_one


def node_labels_changed(before: Config, after: Config) -> Expect:
    """The node-pools document changes when a pool's node labels do (device-plugin.config, mig.config)."""
    def labels(config: Config) -> dict[str, dict[str, str]]:
        cfg = loaded(config)
        shared = cfg.components.device_plugin and bool(cfg.shared_pools)
        return {p.name: pool_labels(p, device_plugin_configs=shared) for p in cfg.node_pools}

    return pools_document(after) if labels(before) != labels(after) else Expect()


def dra_pools_changed(before: Config, after: Config) -> Expect:
    """The DRA kubelet plugin and validator, and the DRA flavours of DCGM and its exporter, name the DRA pools they
    serve."""
    if [p.name for p in loaded(before).dra_pools] == [p.name for p in loaded(after).dra_pools]:
        return Expect()
    names = ["nvidia-dra-driver-kubelet-plugin", "nvidia-dra-validator", "nvidia-dcgm-exporter-dra"]
    if loaded(after).components.dcgm:
        names.append("nvidia-dcgm-dra")
    return Expect(update={obj(after, "DaemonSet", name) for name in names})


DCGM_PLAIN_FLAVOUR = ("nvidia-dcgm", "nvidia-dcgm-exporter")


def dcgm_flavour_changed(before: Config, after: Config, stack: str) -> Expect:
    """DCGM and its exporter run in their plain flavour while some container pool uses the device plugin (DRA pools
    get the -dra flavour): the flavour's objects (DaemonSet, Service, RBAC, ServiceMonitor) come with the first such
    pool and go with the last."""

    def plain(config: Config) -> bool:
        return any(p.allocation != "dra" for p in loaded(config).container_pools)

    def flavour(config: Config) -> set[str]:
        labels = {changes.identity(r) for r in render(config, stack=stack).registrations}
        return {label for label in labels if label and label.rsplit("/", 1)[-1] in DCGM_PLAIN_FLAVOUR}

    if plain(before) and not plain(after):
        return Expect(delete=flavour(before))
    if plain(after) and not plain(before):
        return Expect(create=flavour(after))
    return Expect()


MPS_OBJECTS = ("ServiceAccount", "Role", "RoleBinding", "DaemonSet")
MPS = "nvidia-device-plugin-mps-control-daemon"


def sharing_changed(before: Config, after: Config, stack: str) -> Expect:
    """The plugin configs ConfigMap exists while any pool shares; the plugin and GFD read it through the
    config-manager only then; the MPS control daemon exists while any pool shares by MPS."""
    expect = Expect()
    old_shared, new_shared = loaded(before).shared_pools, loaded(after).shared_pools
    configs = obj(after, "ConfigMap", "nvidia-device-plugin-configs")
    if old_shared and not new_shared:
        expect.delete.add(configs)
    elif new_shared and not old_shared:
        expect.create.add(configs)
    elif [plugin_config(before, p) for p in old_shared] != [plugin_config(after, p) for p in new_shared]:
        expect.update.add(configs)
    if bool(old_shared) != bool(new_shared):
        expect.update |= {obj(after, "DaemonSet", "nvidia-device-plugin-daemonset"), obj(after, "DaemonSet", "gpu-feature-discovery")}
    old_mps, new_mps = loaded(before).pools_sharing_by("mps"), loaded(after).pools_sharing_by("mps")
    mps = {obj(after, k, MPS) for k in MPS_OBJECTS} | {f"{k}/{MPS}" for k in WAVE_GATE_CLUSTER_RBAC} | {"state-mps-control-daemon"}
    if old_mps and not new_mps:
        expect.delete |= mps
    elif new_mps and not old_mps:
        expect.create |= mps
    return expect


# --- the expected effect of each edit -----------------------------------------------------------------------


def _pool_set(config: Config) -> set[str]:
    return {p["name"] for p in config["gpu-stack:nodePools"]}


def expect_driver_bump(before: Config, after: Config, stack: str) -> Expect:
    cfg_b, cfg_a = loaded(before), loaded(after)
    moved = {p.name for p in cfg_a.driver_pools if cfg_a.pool_driver(p) != cfg_b.pool_driver(cfg_b.node_pools[[q.name for q in cfg_b.node_pools].index(p.name)])}
    return drivers_rolled(before, after, moved)


def expect_nothing_but_echo(before: Config, after: Config, stack: str) -> Expect:
    return Expect()


def expect_gates_only(before: Config, after: Config, stack: str) -> Expect:
    return gates_changed(before, after)


def expect_pool_added(before: Config, after: Config, stack: str) -> Expect:
    added = _pool_set(after) - _pool_set(before)
    expect = Expect(create={obj(after, "DaemonSet", d) for p in added for d in daemonset_of(after).get(p, ())})
    return (
        expect | pools_document(after) | driver_daemonsets_listed(before, after) | gates_changed(before, after)
        | dra_pools_changed(before, after) | dcgm_flavour_changed(before, after, stack)
    )


def expect_pool_removed(before: Config, after: Config, stack: str) -> Expect:
    removed = _pool_set(before) - _pool_set(after)
    expect = Expect(delete={obj(before, "DaemonSet", d) for p in removed for d in daemonset_of(before).get(p, ())})
    return (
        expect
        | pools_document(after)
        | driver_daemonsets_listed(before, after)
        | gates_changed(before, after)
        | sharing_changed(before, after, stack)
        | dra_pools_changed(before, after)
        | dcgm_flavour_changed(before, after, stack)
    )


def expect_pool_renamed(before: Config, after: Config, stack: str) -> Expect:
    (old,) = _pool_set(before) - _pool_set(after)
    (new,) = _pool_set(after) - _pool_set(before)
    before_ds, after_ds = daemonset_of(before)[old], daemonset_of(after)[new]
    # a DaemonSet whose name stays: its pool term names the new pool, a rolling update that keeps the loaded driver
    expect = Expect(update={obj(after, "DaemonSet", d) for d in before_ds & after_ds},
                    create={obj(after, "DaemonSet", d) for d in after_ds - before_ds},
                    delete={obj(before, "DaemonSet", d) for d in before_ds - after_ds})
    return expect | pools_document(after) | driver_daemonsets_listed(before, after) | gates_changed(before, after) | sharing_changed(before, after, stack) | dra_pools_changed(before, after)


def expect_image_moved_in_place(before: Config, after: Config, stack: str) -> Expect:
    # the DaemonSet rolls to the new image like a driver bump, but the nodes still on the old image lose theirs
    return expect_driver_bump(before, after, stack) | Expect(dangers={"node-image-changed"})


def all_daemonsets(config: Config) -> set[str]:
    cfg = loaded(config)
    return {d for p in cfg.driver_pools for d in cfg.pool_driver(p).daemonsets}


def listed_pool(config: Config) -> str:
    return next(p.name for p in loaded(config).driver_pools if p.listed)


def image_daemonsets_changed(before: Config, after: Config) -> Expect:
    """A driver DaemonSet per node image comes or goes; the others keep their names and templates. The node-pools
    document lists each pool's DaemonSets, the stack gate's Role names them all, and the gate after the pool (if a
    later wave waits for it) judges them all."""
    old, new = all_daemonsets(before), all_daemonsets(after)
    expect = Expect(create={obj(after, "DaemonSet", d) for d in new - old},
                    delete={obj(before, "DaemonSet", d) for d in old - new})
    expect = expect | pools_document(after)
    if loaded(after).validation.mode != "off":
        expect.update.add(obj(after, "Role", "gpu-stack-validation"))
    pool = listed_pool(after)
    if pool in gated(after):
        expect.rerun.add(gate(after, pool))
        expect.update.add(obj(after, "Role", "gpu-stack-wave-gate"))
    return expect


def expect_image_listed(before: Config, after: Config, stack: str) -> Expect:
    return image_daemonsets_changed(before, after)


def expect_image_unlisted(before: Config, after: Config, stack: str) -> Expect:
    return image_daemonsets_changed(before, after)


def expect_sharing(before: Config, after: Config, stack: str) -> Expect:
    # nodes change their device-plugin.config label where the pool starts or stops sharing, mig.config for MIG
    return node_labels_changed(before, after) | sharing_changed(before, after, stack)


def expect_mig_layout(before: Config, after: Config, stack: str) -> Expect:
    # the MIG manager repartitions the pool's nodes when their mig.config label names the new layout
    return node_labels_changed(before, after) | sharing_changed(before, after, stack)


CDI_READERS = ("nvidia-container-toolkit-daemonset", "nvidia-device-plugin-daemonset", "nvidia-mig-manager")


def expect_cdi(before: Config, after: Config, stack: str) -> Expect:
    """The DaemonSets that read the CDI mode roll; on cri-o without CDI, operands also stop naming the nvidia
    RuntimeClass (OCI hook mode). The RuntimeClasses themselves stay."""
    labels = {obj(after, "DaemonSet", name) for name in CDI_READERS if rendered(after, obj(after, "DaemonSet", name), stack)}
    if loaded(after).cluster.container_runtime == "cri-o":
        for side in (before, after):
            for r in render(side, stack=stack).registrations:
                spec = ((r.inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
                if r.inputs.get("kind") == "DaemonSet" and spec.get("runtimeClassName"):
                    labels.add(changes.identity(r))
    return Expect(update=labels)


def expect_host_switch(before: Config, after: Config, stack: str) -> Expect:
    old, new = daemonset_of(before), daemonset_of(after)
    expect = Expect(
        create={obj(after, "DaemonSet", d) for p in set(new) - set(old) for d in new[p]},
        delete={obj(before, "DaemonSet", d) for p in set(old) - set(new) for d in old[p]},
    )
    driver_state = {obj(before, k, "nvidia-driver") for k in WAVE_GATE_RBAC} | {f"{k}/nvidia-driver" for k in WAVE_GATE_CLUSTER_RBAC}
    driver_state |= {obj(before, "ConfigMap", "nvidia-driver-startup-probe"), "state-driver"}
    if old and not new:
        expect.delete |= driver_state
    elif new and not old:
        expect.create |= driver_state
    return expect | pools_document(after) | driver_daemonsets_listed(before, after) | gates_changed(before, after)


def expect_agent_image(before: Config, after: Config, stack: str) -> Expect:
    agents = {obj(after, "DaemonSet", name) for name in ("gpu-stack-node-labeler", "gpu-stack-node-inventory")}
    agents.add(obj(after, "Deployment", "gpu-stack-upgrade-coordinator"))
    expect = Expect(update={a for a in agents if rendered(after, a, stack)}, rerun={gate(after, p) for p in gated(after)})
    if loaded(after).upgrade.wait_for_completion is not None:
        # Every driver pod runs the agent's wait-for-completion step first: the drivers roll too.
        expect = expect | drivers_rolled(before, after, set(daemonset_of(after)))
    return expect


def expect_monitoring(before: Config, after: Config, stack: str) -> Expect:
    monitors = {changes.identity(r) for r in render(after, stack=stack).registrations if r.inputs.get("kind") == "ServiceMonitor"}
    return Expect(update=monitors)


def expect_pull_secrets(before: Config, after: Config, stack: str) -> Expect:
    """Every pod template names the pull secrets: every workload rolls (the drivers wave by wave, keeping the
    loaded driver) and every gate re-runs."""
    workloads = {changes.identity(r) for r in render(after, stack=stack).registrations if r.inputs.get("kind") in ("DaemonSet", "Deployment")}
    expect = Expect(update=workloads, rerun={gate(after, p) for p in gated(after)})
    return expect | drivers_rolled(before, after, set(daemonset_of(after)))


EXPECTED: dict[str, Callable[[Config, Config, str], Expect]] = {
    "driver version bump": expect_driver_bump,
    "kernel module type switch": expect_driver_bump,
    # a wave is an ordering, not an object: renaming one changes nothing but the configuration's digest
    "rename a wave": expect_nothing_but_echo,
    "reorder waves": expect_gates_only,
    "move a pool to another wave": expect_gates_only,
    "add a wave": expect_pool_added,
    "remove a wave": expect_gates_only,
    "remove all waves": expect_gates_only,
    "add a pool": expect_pool_added,
    "remove a pool": expect_pool_removed,
    "rename a pool": expect_pool_renamed,
    "rename a pool, driver name unpinned": expect_pool_renamed,
    "add a second OS": expect_pool_added,
    "change a pool's OS": expect_image_moved_in_place,
    "change a pool's node image in place": expect_image_moved_in_place,
    "list a pool's next node image": expect_image_listed,
    "unlist a pool's previous node image": expect_image_unlisted,
    "sharing to none": expect_sharing,
    "sharing to time-slicing": expect_sharing,
    "sharing to MPS": expect_sharing,
    "sharing to MIG": expect_sharing,
    "change a MIG layout": expect_mig_layout,
    "toggle CDI": expect_cdi,
    "managed driver to host driver": expect_host_switch,
    "host driver to managed driver": expect_host_switch,
    "change validation mode": expect_nothing_but_echo,
    "change the node agent image": expect_agent_image,
    "change monitoring options": expect_monitoring,
    "change pull secrets": expect_pull_secrets,
}

# Each edit runs in `make test` on the first stack it applies to, in this order (every driver mode, runtime,
# sharing strategy, VM flavour and DRA among them); on the others as `matrix` cases (`make test-all`).
PREFERENCE = ("prod-managed", "prod-precompiled", "onprem-host-driver", "hybrid", "dra", "kubevirt", "a100-mig",
              "gpudirect-training", "kata-cc", "dev")
CORE_STACKS_PER_EDIT = 1


def _cases() -> list:
    order = [s for s in PREFERENCE if s in STACKS] + [s for s in STACKS if s not in PREFERENCE]
    cases = []
    for edit in EDITS:
        applies = [stack for stack in order if (start := _start(edit, stack)) is not None and edit.apply(start) is not None]
        core = set(applies[:CORE_STACKS_PER_EDIT])
        for stack in STACKS:
            marks = () if stack in core else (pytest.mark.matrix,)
            cases.append(pytest.param(stack, edit, marks=marks, id=f"{stack}: {edit.name}"))
    return cases


def _start(edit: Edit, stack: str) -> Optional[Config]:
    config = stack_config(stack)
    return edit.start(config) if edit.start is not None else config


CASES = _cases()


def actual(plan: changes.Plan) -> Expect:
    return Expect(
        create=plan.labels(changes.CREATE),
        update=plan.labels(changes.UPDATE),
        rerun=plan.labels(changes.RERUN),
        delete=plan.labels(changes.DELETE),
        dangers={rule for rule, _ in plan.dangers},
    )


@pytest.mark.parametrize("stack, edit", CASES)
def test_an_ordinary_edit_changes_exactly_what_it_must(stack, edit):
    before = _start(edit, stack)
    after = edit.apply(before) if before is not None else None
    if after is None:
        pytest.skip(f"{edit.name} does not apply to {stack}")
    plan = changes.plan(render(before, stack=stack), render(after, stack=stack))
    assert plan.blocked == [], "pulumi up would fail"
    assert plan.labels(changes.REPLACE) == set(), "an ordinary edit never replaces an object in place"
    expected = EXPECTED[edit.name](before, after, stack) | echo(before, after, stack)
    got = actual(plan)
    for action in ("create", "update", "rerun", "delete", "dangers"):
        assert getattr(got, action) == getattr(expected, action), action


MANAGED_STACKS = [s for s in STACKS if driver_version_bump(stack_config(s)) is not None]


# a100-mig rolls several driver DaemonSets in one wave (what wave-over-budget used to flag); the other stacks are
# `matrix` cases (`make test-all`), as each edit beyond its first stack.
BUMP_CORE_STACKS = ("a100-mig", "prod-precompiled")


@pytest.mark.parametrize("stack", [pytest.param(s, marks=() if s in BUMP_CORE_STACKS else (pytest.mark.matrix,))
                                   for s in MANAGED_STACKS])
def test_a_driver_version_bump_is_safe_on_every_shipped_stack_with_a_managed_driver(stack):
    """Every driver DaemonSet of the stack rolls, several in one wave where a stack has them (a100-mig's pools among
    them): the node agents replace driver pods within the one fleet budget, so `gpustack diff` has nothing to flag."""
    before = stack_config(stack)
    plan = changes.plan(render(before, stack=stack), render(driver_version_bump(before), stack=stack))
    assert (plan.dangers, plan.blocked) == ([], [])
    assert plan.labels(changes.UPDATE) & {obj(before, "DaemonSet", d) for d in all_daemonsets(before)}


def test_every_shipped_stack_with_a_managed_driver_is_checked():
    assert "a100-mig" in MANAGED_STACKS and "prod-managed" in MANAGED_STACKS


def test_every_edit_has_an_expectation_and_applies_somewhere():
    assert {e.name for e in EDITS} == set(EXPECTED)
    for edit in EDITS:
        assert any((start := _start(edit, stack)) is not None and edit.apply(start) is not None for stack in STACKS), edit.name


# --- what the engine's view is made of -----------------------------------------------------------------------


def test_a_urn_change_without_an_alias_is_an_already_exists_failure():
    before = render(stack_config("prod-managed"), stack="prod-managed")
    after = render(stack_config("prod-managed"), stack="prod-managed")
    import copy

    moved = copy.deepcopy(after)
    ds = next(r for r in moved.registrations if r.name == "nvidia-driver-daemonset-training")
    ds.urn = ds.urn.replace("gpu-stack:index:Driver$", "gpu-stack:index:Elsewhere$")
    ds.aliases = []
    plan = changes.plan(before, moved)
    assert any("AlreadyExists" in b for b in plan.blocked)
    ds.aliases = [r.urn for r in before.registrations if r.name == "nvidia-driver-daemonset-training"]
    assert changes.plan(before, moved).blocked == []


def test_a_driver_daemonset_replaced_in_place_is_dangerous():
    before = render(stack_config("prod-managed"), stack="prod-managed")
    import copy

    after = copy.deepcopy(before)
    ds = next(r for r in after.registrations if r.name == "nvidia-driver-daemonset-training")
    ds.inputs["spec"]["selector"]["matchLabels"]["app"] = "changed"
    ds.inputs["spec"]["template"]["metadata"]["labels"]["app"] = "changed"
    plan = changes.plan(before, after)
    assert ("driver-replaced" in {rule for rule, _ in plan.dangers}) and plan.labels(changes.REPLACE)


def test_deleting_a_protected_object_fails_the_update():
    before = render(stack_config("prod-managed"), stack="prod-managed")
    import copy

    after = copy.deepcopy(before)
    after.registrations = [r for r in after.registrations if r.inputs.get("kind") != "Namespace"]
    plan = changes.plan(before, after)
    assert any("Namespace/gpu-operator is protected" in b for b in plan.blocked)


def edits_table() -> str:
    rows = ["| edit | what `pulumi up` does to the live cluster |", "|---|---|"]
    rows += [f"| {edit.name} | {edit.effect} |" for edit in EDITS]
    return "\n".join(rows) + "\n"


def test_the_runbook_lists_every_edit_as_the_suite_pins_it():
    from stacktest import ROOT

    table = edits_table()
    runbook = ROOT / "docs" / "runbook.md"
    assert table in runbook.read_text(), "docs/runbook.md's edit table is stale; put this in its place:\n" + table
