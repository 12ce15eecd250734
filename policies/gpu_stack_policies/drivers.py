"""The driver DaemonSets of a rendered stack, read the way the driver policies need them.

A driver DaemonSet is recognised by what every one of them carries, whatever its name: the pod label
`app.kubernetes.io/component: nvidia-driver` and the `nvidia-driver-ctr` container (components/states/driver/state.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from gpu_stack_policies import objects
from gpu_stack_policies.facts import consts

COMPONENT_LABEL = "app.kubernetes.io/component"
DRIVER_COMPONENT = "nvidia-driver"
DRIVER_CONTAINER = "nvidia-driver-ctr"
MANAGER_CONTAINER = "k8s-driver-manager"
PRECOMPILED_LABEL = "nvidia.com/precompiled"
DRIVER_DEPLOY_COMPONENT = "driver"


@dataclass(frozen=True)
class DriverSet:
    resource: Any
    what: str
    spec: Mapping
    template_labels: Mapping
    driver: objects.Container
    manager: Optional[objects.Container]
    # the pod spec's JSON pointer (a container's `at` is below it)
    at: str = "/spec/template/spec"

    @property
    def image(self) -> str:
        return self.driver.image or ""

    @property
    def repository(self) -> str:
        image = self.image.split("@", 1)[0]
        head, _, last = image.rpartition("/")
        return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]

    @property
    def tag(self) -> Optional[str]:
        if "@" in self.image:
            return None
        last = self.image.rsplit("/", 1)[-1]
        return last.split(":", 1)[1] if ":" in last else None

    @property
    def precompiled(self) -> bool:
        return str(self.template_labels.get(PRECOMPILED_LABEL, "")) == "true"

    @property
    def kernel(self) -> Optional[str]:
        return objects.node_selector(self.spec).get(consts.NFD_KERNEL_FULL)

    @property
    def branch(self) -> Optional[str]:
        """`580` from `580-5.15.0-69-generic-ubuntu22.04` (precompiled) or `580.126.20-rhel9` (managed); None for
        a digest, which names no version."""
        tag = self.tag
        if tag is None:
            return None
        head = tag.split("-", 1)[0]
        branch = head.split(".", 1)[0]
        return branch if branch.isdigit() and len(branch) == 3 else None

    @property
    def kernel_module_type(self) -> str:
        return self.driver.env.get("KERNEL_MODULE_TYPE", "auto")

    @property
    def named_pools(self) -> Optional[set[str]]:
        """The pools its affinity names (`gpu-stack/pool In [...]`); None when it names none."""
        return objects.named_label_values(self.spec, consts.POOL_LABEL)

    def reachable(self, pools: Iterable[objects.Pool]) -> list[objects.Pool]:
        return objects.pools_a_pod_can_reach(self.spec, pools)

    @property
    def other_node_selector(self) -> dict[str, str]:
        return {k: v for k, v in objects.node_selector(self.spec).items() if not k.startswith(consts.DEPLOY_PREFIX)}


def driver_set(resource_type: str, props: Mapping, fallback_name: str, resource: Any = None) -> Optional[DriverSet]:
    kind = objects.kind_of(resource_type)
    if kind != "DaemonSet":
        return None
    spec = objects.pod_spec(kind, props)
    template_labels = objects.mapping(objects.mapping(objects.mapping(props.get("spec")).get("template")).get("metadata")).get("labels")
    template_labels = objects.mapping(template_labels)
    if spec is None or template_labels.get(COMPONENT_LABEL) != DRIVER_COMPONENT:
        return None
    found = {c.name: c for c in objects.containers(spec)}
    if DRIVER_CONTAINER not in found:
        return None
    return DriverSet(
        resource,
        objects.describe(kind, props, fallback_name),
        spec,
        template_labels,
        found[DRIVER_CONTAINER],
        found.get(MANAGER_CONTAINER),
    )


def driver_sets(resources: Iterable[Any]) -> list[DriverSet]:
    found = []
    for resource in resources:
        driver = driver_set(resource.resource_type, resource.props, resource.name, resource)
        if driver is not None:
            found.append(driver)
    return found


def driver_pools(pools: Iterable[objects.Pool]) -> list[objects.Pool]:
    """Pools whose nodes get the driver deploy label: gpu-stack deploys their driver."""
    return [p for p in pools if DRIVER_DEPLOY_COMPONENT in p.deploy_components]
