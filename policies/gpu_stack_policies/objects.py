"""Reading rendered Kubernetes objects the way every policy needs them.

Policies receive resource properties through pulumi-policy's proxies (read-only Mappings and Sequences whose
numbers are floats, camelCase as on the wire), in `pulumi preview` as in the offline run. These helpers never
assume a field is present: a policy that cannot find what it checks says so in its message instead of
raising.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional

from gpu_stack_policies.facts import consts

KUBERNETES_PREFIX = "kubernetes:"
HELM_RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
# Kinds whose objects carry a pod template; CronJob nests it one level deeper.
POD_TEMPLATE_KINDS = ("DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "ReplicationController", "Job")

# gpu-stack's node labeller ConfigMap: the pools in match order, each with its GPU model, node selector and the
# labels the node agent writes (node_images/node-agent reads the same document).
NODE_POOLS_KEY = "node-pools.json"
# Gate Jobs run the node agent's `wait-validated`; the stack-wide gate also carries this label.
VALIDATES_LABEL = "gpu-stack/validates"
WAIT_VALIDATED = "wait-validated"
VALIDATOR_DAEMONSET = "nvidia-operator-validator"
SKIP_AWAIT = consts.SKIP_AWAIT


def mapping(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def items(value: Any) -> list:
    return list(value) if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else []


def kind_of(resource_type: str) -> Optional[str]:
    """`kubernetes:apps/v1:DaemonSet` -> `DaemonSet`; None for anything that is not a Kubernetes object."""
    if not resource_type.startswith(KUBERNETES_PREFIX) or resource_type == HELM_RELEASE_TYPE:
        return None
    return resource_type.rsplit(":", 1)[-1]


def metadata(props: Mapping) -> Mapping:
    return mapping(props.get("metadata"))


def name_of(props: Mapping, fallback: str = "?") -> str:
    return str(metadata(props).get("name") or fallback)


def namespace_of(props: Mapping) -> Optional[str]:
    namespace = metadata(props).get("namespace")
    return str(namespace) if namespace else None


def labels_of(props: Mapping) -> Mapping:
    return mapping(metadata(props).get("labels"))


def annotations_of(props: Mapping) -> Mapping:
    return mapping(metadata(props).get("annotations"))


def describe(kind: str, props: Mapping, fallback_name: str = "?") -> str:
    """`DaemonSet gpu-operator/nvidia-driver-daemonset`: how every message names the object it is about."""
    namespace = namespace_of(props)
    name = name_of(props, fallback_name)
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


# Where each kind keeps its pod spec, as a JSON pointer (gpu_stack_policies/fields.py).
POD_SPEC_POINTERS = {**{kind: "/spec/template/spec" for kind in POD_TEMPLATE_KINDS},
                     "CronJob": "/spec/jobTemplate/spec/template/spec", "Pod": "/spec"}


def pod_spec_pointer(kind: Optional[str]) -> str:
    return POD_SPEC_POINTERS.get(kind or "", "")


def pod_spec(kind: Optional[str], props: Mapping) -> Optional[Mapping]:
    spec = mapping(props.get("spec"))
    if kind in POD_TEMPLATE_KINDS:
        return mapping(mapping(spec.get("template")).get("spec"))
    if kind == "CronJob":
        job = mapping(mapping(spec.get("jobTemplate")).get("spec"))
        return mapping(mapping(job.get("template")).get("spec"))
    if kind == "Pod":
        return spec
    return None


@dataclass(frozen=True)
class Container:
    spec: Mapping
    init: bool
    # its JSON pointer below the pod spec: /initContainers/0, /containers/1
    at: str = ""

    @property
    def name(self) -> str:
        return str(self.spec.get("name") or "?")

    @property
    def image(self) -> Optional[str]:
        image = self.spec.get("image")
        return str(image) if image else None

    @property
    def env(self) -> dict[str, str]:
        """Literal env values; values from fields or secrets are left out (no policy reads those)."""
        values = {}
        for entry in items(self.spec.get("env")):
            entry = mapping(entry)
            if "value" in entry and entry.get("name"):
                values[str(entry["name"])] = str(entry["value"])
        return values

    @property
    def security_context(self) -> Mapping:
        return mapping(self.spec.get("securityContext"))

    def env_at(self, name: str) -> str:
        """The pointer of env variable `name` below the pod spec (of the container's env when it has none)."""
        for index, entry in enumerate(items(self.spec.get("env"))):
            if mapping(entry).get("name") == name:
                return f"{self.at}/env/{index}/value"
        return f"{self.at}/env"


def containers(spec: Mapping) -> list[Container]:
    found = []
    for field_name, init in (("initContainers", True), ("containers", False), ("ephemeralContainers", False)):
        found += [Container(mapping(c), init, f"/{field_name}/{i}") for i, c in enumerate(items(spec.get(field_name)))]
    return found


def node_selector(spec: Mapping) -> dict[str, str]:
    return {str(k): str(v) for k, v in mapping(spec.get("nodeSelector")).items()}


def deploy_components(spec: Mapping) -> set[str]:
    """The `nvidia.com/gpu.deploy.<component>=true` labels a pod requires of its node."""
    return {
        key[len(consts.DEPLOY_PREFIX) :]
        for key, value in node_selector(spec).items()
        if key.startswith(consts.DEPLOY_PREFIX) and value == "true" and key != consts.DEPLOY_OPERANDS
    }


def config_map_data(props: Mapping) -> Mapping:
    return mapping(props.get("data"))


@dataclass(frozen=True)
class Pool:
    """One entry of the node labeller's pools document."""

    name: str
    # its pointer in the ConfigMap: /data/node-pools.json#/pools/<i> (gpu_stack_policies/fields.py)
    at: str
    gpu_model: Optional[str]
    node_selector: dict[str, str]
    deploy_labels: tuple[str, ...]
    labels: dict[str, str]
    # The driver DaemonSets of the pool, one per node image (document version 4): the node agent writes one of them
    # as a node's gpu-stack/driver label, by the image the node runs.
    driver_daemonsets: tuple[str, ...] = ()

    @property
    def workload_type(self) -> str:
        return self.labels.get(consts.WORKLOAD_CONFIG, "container")

    @property
    def deploy_components(self) -> set[str]:
        return {label[len(consts.DEPLOY_PREFIX) :] for label in self.deploy_labels if label.startswith(consts.DEPLOY_PREFIX)}


class PoolsDocumentError(ValueError):
    pass


def node_pools(props: Mapping) -> Optional[list[Pool]]:
    """The pools of a ConfigMap carrying the labeller's document; None for any other ConfigMap.
    PoolsDocumentError when the document is there but unreadable."""
    raw = config_map_data(props).get(NODE_POOLS_KEY)
    if raw is None:
        return None
    try:
        document = json.loads(str(raw))
    except ValueError as error:
        raise PoolsDocumentError(f"{NODE_POOLS_KEY} is not JSON: {error}") from None
    pools = []
    for index, entry in enumerate(items(mapping(document).get("pools"))):
        entry = mapping(entry)
        pools.append(
            Pool(
                name=str(entry.get("name") or "?"),
                at=f"/data/{NODE_POOLS_KEY}#/pools/{index}",
                gpu_model=str(entry["gpuModel"]) if entry.get("gpuModel") else None,
                node_selector={str(k): str(v) for k, v in mapping(entry.get("nodeSelector")).items()},
                deploy_labels=tuple(str(label) for label in items(entry.get("deployLabels"))),
                labels={str(k): str(v) for k, v in mapping(entry.get("labels")).items()},
                driver_daemonsets=tuple(str(mapping(i).get("daemonSet")) for i in items(entry.get("driverImages"))),
            )
        )
    return pools


def selectors_compatible(first: Mapping[str, str], second: Mapping[str, str]) -> bool:
    """Whether some node can match both ANDed label maps: only a key they give different values excludes it."""
    return all(second[key] == value for key, value in first.items() if key in second)


def is_subset(smaller: Mapping[str, str], larger: Mapping[str, str]) -> bool:
    return all(larger.get(key) == value for key, value in smaller.items())


def named_label_values(spec: Mapping, key: str) -> Optional[set[str]]:
    """Every value the pod's required node affinity names for `key` with `In`, in any term; None when no term
    names `key`."""
    affinity = mapping(mapping(spec.get("affinity")).get("nodeAffinity"))
    terms = items(mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution")).get("nodeSelectorTerms"))
    named = [
        {str(v) for v in items(mapping(e).get("values"))}
        for term in terms
        for e in items(mapping(term).get("matchExpressions"))
        if mapping(e).get("key") == key and mapping(e).get("operator") == "In"
    ]
    return set().union(*named) if named else None


AGENT_DECIDED = (consts.POOL_LABEL, consts.DRIVER_DAEMONSET_LABEL)


def pool_node_labels(pool: Pool) -> list[dict[str, str]]:
    """The labels a node of the pool may carry: its selector and what the node agent writes for the pool, once
    for a node the agent has not given a driver DaemonSet yet and once for each it may give (one per node image
    of the pool, document version 4)."""
    base = {**pool.node_selector, consts.POOL_LABEL: pool.name, **pool.labels}
    return [base, *({**base, consts.DRIVER_DAEMONSET_LABEL: d} for d in pool.driver_daemonsets)]


def _terms(spec: Mapping) -> list[list[Mapping]]:
    affinity = mapping(mapping(spec.get("affinity")).get("nodeAffinity"))
    terms = items(mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution")).get("nodeSelectorTerms"))
    return [[mapping(e) for e in items(mapping(t).get("matchExpressions"))] for t in terms] or [[]]


def _jointly_possible(expressions: list[Mapping], known: Mapping[str, str]) -> bool:
    """Whether one node can satisfy every expression at once: each against the labels the pool decides
    (`known`), and together on every other key (two `In` sets with nothing in common, or `In` with
    `DoesNotExist`, exclude each other)."""
    if not all(_may_hold(e, known) for e in expressions):
        return False
    allowed: dict[str, Optional[set[str]]] = {}
    absent: set[str] = set()
    for e in expressions:
        key, operator = str(e.get("key")), str(e.get("operator"))
        if key in known:
            continue
        values = {str(v) for v in items(e.get("values"))}
        if operator == "In":
            current = allowed.get(key)
            allowed[key] = values if current is None else current & values
        elif operator == "Exists":
            allowed.setdefault(key, None)
        elif operator == "DoesNotExist":
            absent.add(key)
    return not any((key in allowed and key in absent) or (values is not None and not values) for key, values in allowed.items())


def could_share_a_node(first: Mapping, second: Mapping, pool: Pool) -> bool:
    """Whether one node of `pool` could be selected by both pod specs (their required node affinity terms, ORed,
    and their node selectors): for a node of each gpu-stack/driver value the agent may write, and for one it has
    not labelled yet."""
    selectors = [{"key": k, "operator": "In", "values": [v]} for spec in (first, second)
                 for k, v in node_selector(spec).items() if not k.startswith(consts.DEPLOY_PREFIX)]
    return any(
        _jointly_possible([*a, *b, *selectors], variant)
        for variant in pool_node_labels(pool) for a in _terms(first) for b in _terms(second)
    )


def _may_hold(expression: Mapping, labels: Mapping[str, str]) -> bool:
    """Whether a node with `labels` can satisfy a node selector requirement; a key the pool does not decide
    (kernel, GFD's labels) may take any value."""
    key, operator = str(expression.get("key")), expression.get("operator")
    values = {str(v) for v in items(expression.get("values"))}
    if key not in labels:
        # The node agent decides its own labels: one it does not write for the pool is absent on its nodes.
        return operator in ("DoesNotExist", "NotIn") if key in AGENT_DECIDED else True
    value = labels[key]
    return {
        "In": value in values,
        "NotIn": value not in values,
        "Exists": True,
        "DoesNotExist": False,
    }.get(str(operator), True)


def affinity_admits(spec: Mapping, labels: Mapping[str, str]) -> bool:
    """Whether the pod's required node affinity can admit a node with `labels` (terms ORed, expressions ANDed)."""
    affinity = mapping(mapping(spec.get("affinity")).get("nodeAffinity"))
    terms = items(mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution")).get("nodeSelectorTerms"))
    if not terms:
        return True
    return any(all(_may_hold(mapping(e), labels) for e in items(mapping(term).get("matchExpressions"))) for term in terms)


def pools_a_pod_can_reach(spec: Mapping, pools: Iterable[Pool]) -> list[Pool]:
    """The pools whose nodes a pod may run on: the pool's agent writes every deploy label the pod requires, the
    pod's node affinity admits the labels the pool's nodes carry (gpu-stack/pool, gpu-stack/driver, ...), and no
    nodeSelector key contradicts the pool's selector. Labels outside the pool's own selector (kernel, GFD's) are
    assumed satisfiable."""
    required = deploy_components(spec)
    selector = {k: v for k, v in node_selector(spec).items() if not k.startswith(consts.DEPLOY_PREFIX)}
    return [
        pool
        for pool in pools
        if required <= pool.deploy_components
        and any(affinity_admits(spec, labels) for labels in pool_node_labels(pool))
        and selectors_compatible(selector, pool.node_selector)
    ]


def resources_by_kind(resources: Iterable[Any], kind: str) -> Iterator[Any]:
    """PolicyResources (stack policies) of one Kubernetes kind."""
    for resource in resources:
        if kind_of(resource.resource_type) == kind:
            yield resource


def find_pools(resources: Iterable[Any]) -> tuple[Optional[Any], list[Pool]]:
    """The labeller's ConfigMap and its pools, or (None, []) when the stack renders no labeller."""
    for resource in resources_by_kind(resources, "ConfigMap"):
        pools = node_pools(resource.props)
        if pools is not None:
            return resource, pools
    return None, []


def is_awaited(props: Mapping) -> bool:
    """pulumi-kubernetes waits for an object's readiness unless `pulumi.com/skipAwait` is "true"."""
    return str(annotations_of(props).get(SKIP_AWAIT, "")).lower() != "true"
