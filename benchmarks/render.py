"""Render-time benchmark: how long the real program takes to register the `prod-managed` stack as the number of
node pools grows, against the Pulumi SDK's own floor for registering the same resources.

For 1, 10 and 50 generated node pools it times `gpustack.mockrun.run_program` (the real `__main__.py` under
Pulumi's mock runtime: config validation, components, typed pulumi-kubernetes args, dependency wiring).

The floor is measured in the same process and under the same mocks: the Kubernetes objects of that recording,
already rendered to plain manifests, are registered by a trivial program that creates one typed
pulumi-kubernetes resource per manifest (top-level fields as keyword arguments, nested fields as dicts), plus the
same provider, component resources and Helm Release, with the same parents, so both sides register the same
URNs. Nothing of ours runs inside the floor program, so its time is what the SDK itself costs to serialise and
register that many resources; `seconds / floor_seconds` is the overhead our program adds on top.

Each measurement is the best of 3 runs after one warm-up run (`time.perf_counter`). Output, one row per pool
count, then the growth verdict and the overhead ratio at 50 pools:

    pools=N resources=R seconds=S floor_seconds=F
    growth=linear|superlinear
    overhead_ratio=X

The project's target is overhead_ratio <= 1.3 and linear growth; this script reports and does not assert.
Run: `.venv/bin/python benchmarks/render.py`.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

import pulumi  # noqa: E402
import pulumi_kubernetes as k8s  # noqa: E402
import yaml  # noqa: E402

from components.config import NAMESPACE, stack_file_config  # noqa: E402
from gpustack.mockrun import (  # noqa: E402
    PROJECT,
    EchoMocks,
    Recording,
    RecordingMonitor,
    Registration,
    pulumi_mocks,
    pulumi_settings,
    run_program,
    set_all_config,
)
from gpustack.render import integral, kubernetes_object  # noqa: E402

STACK = "prod-managed"
STACK_FILE = PROJECT_DIR / "stacks" / f"Pulumi.{STACK}.yaml"
POOL_COUNTS = (1, 10, 50)
REPEATS = 7  # the 2-core machine is noisy; best-of-3 swung the ratio between 1.0 and 2.1
GPU_MODELS = ("A100-80GB", "H100-80GB", "L4")
POOL_OS = "ubuntu22.04"
POOL_SELECTOR_KEY = "gpu-stack.benchmark/pool"
TIME_SLICING_REPLICAS = 4
# Growth from 10 to 50 pools is linear at 5x; more than 50% above that is superlinear.
LINEAR_FACTOR = 50 / 10
SUPERLINEAR_TOLERANCE = 1.5
# Inputs the SDK adds itself (pulumi-kubernetes sets `compat` on Helm releases); passing them back is not allowed.
SDK_ADDED_INPUTS = frozenset({"compat"})

# One typed pulumi-kubernetes class per (apiVersion, kind) the program emits.
KUBERNETES_CLASSES: dict[tuple[str, str], type[pulumi.CustomResource]] = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "Service"): k8s.core.v1.Service,
    ("apps/v1", "DaemonSet"): k8s.apps.v1.DaemonSet,
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("node.k8s.io/v1", "RuntimeClass"): k8s.node.v1.RuntimeClass,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.rbac.v1.ClusterRole,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.rbac.v1.ClusterRoleBinding,
}
PROVIDER_TYPE = "pulumi:providers:kubernetes"
HELM_RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
STACK_TYPE = "pulumi:pulumi:Stack"


# --- configuration ------------------------------------------------------------------------------------------


def generated_pools(count: int) -> list[dict[str, Any]]:
    """`count` distinct pools; GPU models rotate, every third pool is time-sliced."""
    pools: list[dict[str, Any]] = []
    for i in range(count):
        name = f"pool-{i:03d}"
        pool: dict[str, Any] = {
            "name": name,
            "nodeSelector": {POOL_SELECTOR_KEY: name},
            "gpuModel": GPU_MODELS[i % len(GPU_MODELS)],
            "os": POOL_OS,
        }
        if (i + 1) % 3 == 0:
            pool["sharing"] = {"strategy": "time-slicing", "replicas": TIME_SLICING_REPLICAS}
        pools.append(pool)
    return pools


def stack_config(pool_count: int) -> dict[str, str]:
    """The stack's config bag as the CLI passes it, with `gpu-stack:nodePools` replaced by generated pools and its
    upgrade waves by a canary (the first pool) and the rest."""
    with STACK_FILE.open() as handle:
        bag = stack_file_config(yaml.safe_load(handle))
    pools = generated_pools(pool_count)
    bag[f"{NAMESPACE}:nodePools"] = json.dumps(pools)
    upgrade = json.loads(bag[f"{NAMESPACE}:upgrade"])
    names = [p["name"] for p in pools]
    upgrade["waves"] = [{"name": "canary", "pools": names[:1]}, *([{"name": "rest", "pools": names[1:]}] if names[1:] else [])]
    bag[f"{NAMESPACE}:upgrade"] = json.dumps(upgrade)
    return bag


# --- running a callable under the mocks ---------------------------------------------------------------------


def run_under_mocks(
    program: Callable[[], None],
    stack: str = STACK,
    *,
    config: Optional[Mapping[str, str]] = None,
    preview: bool = False,
) -> list[Registration]:
    """Run `program` as a Pulumi program under the mock runtime `mockrun.run_program` uses; return what it registered.

    Same setup as `run_program`: a fresh event loop, reset settings, `set_mocks` with a `RecordingMonitor` over
    `EchoMocks`, the config bag, and `pulumi.runtime.test` to wait for every outstanding registration."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    pulumi_settings.reset_options(project=PROJECT, stack=stack, preview=preview)
    monitor = RecordingMonitor(EchoMocks())
    pulumi_mocks.set_mocks(EchoMocks(), project=PROJECT, stack=stack, preview=preview, monitor=monitor)
    set_all_config(dict(config or {}))
    try:
        pulumi.runtime.test(program)()
    finally:
        set_all_config({})
        asyncio.set_event_loop(None)
        loop.close()
    return monitor.registrations


# --- the floor program --------------------------------------------------------------------------------------


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _keyword_args(inputs: Mapping[str, Any], skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Top-level fields as the Python SDK's keyword arguments; nested values stay plain dicts."""
    return {_snake(key): value for key, value in inputs.items() if key not in skip}


@dataclass(frozen=True)
class FloorResource:
    """One registration of the real program, reduced to what the floor program needs to recreate it."""

    urn: str
    name: str
    parent: str
    provider: str
    create: Callable[..., pulumi.Resource]
    kwargs: dict[str, Any] = field(default_factory=dict)
    component: bool = False


def floor_resources(recording: Recording) -> list[FloorResource]:
    """Pre-built resources for the floor program, in the recording's registration order (parents first)."""
    built: list[FloorResource] = []
    for r in recording.registrations:
        if r.type == STACK_TYPE:
            continue  # set_mocks registers the root stack on both sides
        provider = r.provider.rpartition("::")[0] if r.provider else ""
        if r.is_kubernetes_object:
            manifest = kubernetes_object(r)
            key = (manifest["apiVersion"], manifest["kind"])
            if key in KUBERNETES_CLASSES:
                kwargs = _keyword_args(manifest, frozenset({"apiVersion", "kind"}))
                built.append(FloorResource(r.urn, r.name, r.parent, provider, KUBERNETES_CLASSES[key], kwargs))
            else:  # a CRD's kind (ServiceMonitor, PrometheusRule): the generic CustomResource, as the program uses
                kwargs = {"api_version": key[0], "kind": key[1], **_keyword_args(manifest, frozenset({"apiVersion", "kind"}))}
                built.append(FloorResource(r.urn, r.name, r.parent, provider, k8s.apiextensions.CustomResource, kwargs))
        elif r.type == PROVIDER_TYPE:
            built.append(FloorResource(r.urn, r.name, r.parent, "", k8s.Provider, _keyword_args(integral(r.inputs))))
        elif r.type == HELM_RELEASE_TYPE:
            kwargs = _keyword_args(integral(r.inputs), SDK_ADDED_INPUTS)
            built.append(FloorResource(r.urn, r.name, r.parent, provider, k8s.helm.v3.Release, kwargs))
        elif not r.custom:
            built.append(FloorResource(r.urn, r.name, r.parent, "", _component_factory(r.type), component=True))
        else:
            raise ValueError(f"no floor equivalent for {r.type} {r.name}")
    return built


def _component_factory(type_: str) -> Callable[..., pulumi.Resource]:
    def create(name: str, opts: Optional[pulumi.ResourceOptions] = None) -> pulumi.Resource:
        return pulumi.ComponentResource(type_, name, None, opts)

    return create


def floor_program(resources: list[FloorResource]) -> Callable[[], None]:
    """A program that registers `resources` and does nothing else."""

    def program() -> None:
        created: dict[str, pulumi.Resource] = {}
        components: list[pulumi.ComponentResource] = []
        for spec in resources:
            opts = pulumi.ResourceOptions(parent=created.get(spec.parent), provider=created.get(spec.provider))
            resource = spec.create(spec.name, opts=opts, **spec.kwargs)
            created[spec.urn] = resource
            if spec.component:
                components.append(resource)  # type: ignore[arg-type]
        for component in components:
            component.register_outputs({})

    return program


def check_floor_matches(recording: Recording, floor: list[Registration]) -> None:
    """The comparison only means something if the floor registered the same URNs and the same manifests."""
    real = {r.urn: r for r in recording.registrations}
    ours = {r.urn: r for r in floor}
    if real.keys() != ours.keys():
        missing = sorted(real.keys() - ours.keys())[:5]
        extra = sorted(ours.keys() - real.keys())[:5]
        raise RuntimeError(f"floor registrations differ: missing {missing}, extra {extra}")
    for urn, r in real.items():
        if r.is_kubernetes_object and kubernetes_object(r) != kubernetes_object(ours[urn]):
            raise RuntimeError(f"floor manifest differs for {urn}")


# --- timing -------------------------------------------------------------------------------------------------


def best_time(action: Callable[[], object], repeats: int = REPEATS) -> float:
    """One warm-up run, then the best of `repeats` timed runs."""
    action()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


@dataclass(frozen=True)
class Row:
    pools: int
    resources: int
    seconds: float
    floor_seconds: float


def measure(pool_count: int) -> Row:
    config = stack_config(pool_count)
    recording = run_program(STACK, config)
    resources = floor_resources(recording)
    program = floor_program(resources)
    check_floor_matches(recording, run_under_mocks(program))
    seconds = best_time(lambda: run_program(STACK, config))
    floor_seconds = best_time(lambda: run_under_mocks(program))
    return Row(pool_count, len(recording.registrations), seconds, floor_seconds)


def growth(rows: Mapping[int, Row]) -> str:
    ratio = rows[50].seconds / rows[10].seconds
    return "superlinear" if ratio > LINEAR_FACTOR * SUPERLINEAR_TOLERANCE else "linear"


def main() -> None:
    rows: dict[int, Row] = {}
    for pool_count in POOL_COUNTS:
        row = measure(pool_count)
        rows[pool_count] = row
        print(
            f"pools={row.pools} resources={row.resources} seconds={row.seconds:.3f} floor_seconds={row.floor_seconds:.3f}",
            flush=True,
        )
    print(f"growth={growth(rows)}")
    print(f"overhead_ratio={rows[50].seconds / rows[50].floor_seconds:.2f}")
    # The SDK's mock monitor leaves one unclosed event loop per executor thread; finalise them now, not during
    # interpreter shutdown, where their sockets may already be gone and asyncio prints a spurious traceback.
    gc.collect()


if __name__ == "__main__":
    main()
