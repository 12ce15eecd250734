"""docs/security.md (gpustack/security.py): generated from the render of every shipped stack, fresh, and saying what
each token on a GPU node can write before and after the node-bound policies."""

from __future__ import annotations

from gpustack import security
from stacktest import STACKS, objects, render_stack, stack_objects


def rows(text: str) -> dict[str, list[list[str]]]:
    """ServiceAccount -> the cells of each table row naming it."""
    found: dict[str, list[list[str]]] = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            found.setdefault(cells[0].split("`")[1], []).append(cells)
    return found


def test_the_security_page_is_what_the_shipped_stacks_render():
    # the renders every other test of a shipped stack reads (tests/stacktest.py caches them across workers)
    renders = {stack: list(stack_objects(stack)) for stack in STACKS}
    assert not security.stale(renders=renders), "docs/security.md is stale: run `python -m gpustack docs` and commit the page"


def test_every_daemonsets_account_has_its_row_with_what_a_stolen_token_can_still_write():
    page = rows(security.PAGE.read_text())
    for stack in ("prod-managed", "dra", "kubevirt"):
        for ds in objects(render_stack(stack), "DaemonSet").values():
            assert ds["spec"]["template"]["spec"]["serviceAccountName"] in page
    agent_now, agent_then = page["gpu-stack-node-labeler"]
    assert "pods/eviction" not in agent_now[5] and "`nodes` patch (own node only)" in agent_now[5]
    assert "`pods/eviction` create" in agent_then[1] and "pods/eviction" not in agent_then[2]
    driver = page["nvidia-driver"][1]
    assert "`pods/eviction` create" in driver[3], "NVIDIA's driver manager evicts cluster-wide"
    worker = page["node-feature-discovery-worker"][1]
    assert "`nodes` patch, update" in worker[1] and "nodes" not in worker[2]
    assert page["nvidia-dcgm"][0][2] == "no"


# The release before the node-bound policies (gpu-stack 0.9.0): the page's "before" column adds the catalogued
# grants it dropped (components/catalogs/token_reach.py) to today's RBAC, so the catalog is held to that release's
# own render here. kubevirt runs the driver, the vGPU and VFIO managers, NFD's worker and the node agent; a100-mig
# runs DCGM, whose token went.
PREVIOUS_RELEASE = "4e7ecf7"


def test_the_before_column_is_what_the_previous_release_rendered():
    from gpustack.diff import render_at_ref
    from gpustack.render import objects_in_order

    for stack in ("kubevirt", "a100-mig"):
        recording, _ = render_at_ref(stack, PREVIOUS_RELEASE)
        then = security.accounts({stack: [obj for _, obj in objects_in_order(recording)]})
        now = security.accounts({stack: list(stack_objects(stack))})
        for name, account in now.items():
            if name not in then:
                continue  # an account the release did not have (NFD's worker ran as the master's)
            was = then[name]
            assert security.before(account) == (security.describe(security.writes(was.grants)) if was.token else "no token"), name
        worker = now["node-feature-discovery-worker"]
        assert security.before(worker) == security.describe(security.writes(then["node-feature-discovery"].grants))
