"""Every env var gpu-stack renders in an operand's own containers is owned (an override of it is refused, naming the
key that sets it) or listed in OVERRIDABLE_ENV with the reason a user may change it
(components/catalogs/operand_overrides.py). A builder that starts rendering a new variable fails here until someone
decides which it is: issue 37 found OPENSHIFT_VERSION and the OpenShift proxy accepted as overrides, overwriting what
gpu-stack derives from `cluster.openshift`.

The renders are tests/test_overrides_by_operand.py's (shared through the run's render cache): an override on every
operand marks each container with the key whose override reached it, so which operand a container answers to is the
program's own word, not a table kept here."""

from __future__ import annotations

import functools
from typing import Any

from components.catalogs import operand_overrides as targets
from components.config import load_config
from stacktest import bag, objects, render, stack_config
from test_overrides_by_operand import MARK_ENV, OPENSHIFT_VM, marks, openshift_with_vm_pools, with_an_override_on_every_operand

# Between them: every operand, the OpenShift driver and vGPU manager (proxy, Driver Toolkit), DRA's controller, kata.
CASES = ("prod-precompiled", "hybrid", "dra", "onprem-host-driver", "kata-cc", OPENSHIFT_VM)


def _config(case: str) -> dict[str, Any]:
    return openshift_with_vm_pools() if case == OPENSHIFT_VM else stack_config(case)


@functools.lru_cache(maxsize=None)
def rendered_env(case: str) -> dict[str, frozenset[str]]:
    """Operand key -> the env vars gpu-stack rendered in the containers that key's overrides reach (the mark left
    out), over the case's DaemonSets and Deployments."""
    recording = render(with_an_override_on_every_operand(_config(case)), stack=case)
    found: dict[str, set[str]] = {}
    for kind in ("DaemonSet", "Deployment"):
        for obj in objects(recording, kind).values():
            spec = obj["spec"]["template"]["spec"]
            for c in [*spec.get("initContainers", []), *spec["containers"]]:
                key, _ = marks(c)
                if key is not None:
                    found.setdefault(key, set()).update(e["name"] for e in c.get("env", []) if e["name"] != MARK_ENV)
    return {key: frozenset(names) for key, names in found.items()}


def _on_openshift(case: str) -> bool:
    return load_config(bag(_config(case))).cluster.platform == "openshift"


def test_every_env_var_gpu_stack_renders_for_an_operand_is_owned_or_deliberately_overridable():
    unclassified = {}
    for case in CASES:
        openshift = _on_openshift(case)
        for key, names in rendered_env(case).items():
            known = targets.owned_env(key, openshift=openshift).keys() | targets.OVERRIDABLE_ENV.get(key, {}).keys()
            if names - known:
                unclassified[f"{case}/{key}"] = sorted(names - known)
    assert not unclassified, f"classify these in operand_overrides.py (owned_env or OVERRIDABLE_ENV): {unclassified}"


def test_the_cases_reach_every_operand():
    reached = {key for case in CASES for key in rendered_env(case)}
    assert reached == set(targets.OPERAND_KEYS)


def test_an_overridable_var_is_one_gpu_stack_renders_and_does_not_own():
    rendered = {(key, name) for case in CASES for key, names in rendered_env(case).items() for name in names}
    for key, reasons in targets.OVERRIDABLE_ENV.items():
        for name, reason in reasons.items():
            assert (key, name) in rendered, f"{key}: {name} is listed as overridable but never rendered"
            assert name not in targets.owned_env(key, openshift=True), f"{key}: {name} is both owned and overridable"
            assert reason


def test_the_openshift_env_is_owned_on_openshift_only():
    """Elsewhere gpu-stack renders no proxy, and operands.driver.env is how NVIDIA documents giving the driver one."""
    assert _on_openshift(OPENSHIFT_VM)
    driver_on_openshift = rendered_env(OPENSHIFT_VM)["driver"]
    assert set(targets.OPENSHIFT_OWNED_ENV) <= driver_on_openshift  # the stack sets its proxy: every variable shows
    for key in ("driver", "vgpuManager"):
        assert set(targets.OPENSHIFT_OWNED_ENV) <= targets.owned_env(key, openshift=True).keys()
        assert not set(targets.OPENSHIFT_OWNED_ENV) & targets.owned_env(key, openshift=False).keys()
