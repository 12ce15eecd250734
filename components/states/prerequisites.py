"""State `pre-requisites`: the namespace the operands run in and the RuntimeClasses they (and workloads) use.

GO:assets/pre-requisites/*: RuntimeClasses `nvidia`, `nvidia-cdi` and `nvidia-legacy`. The operator deletes the
CDI pair when CDI is off; gpu-stack keeps all three whatever the toolkit's mode, because workloads name them and a
config edit must never delete what running pods stand on. For the same reason the namespace and the
RuntimeClasses are protected (`kept`): an edit that would delete or replace them fails `pulumi up` instead. The
namespace carries Pod Security labels because every operand is privileged; without them a cluster enforcing
`baseline` rejects the driver pods.

With `registry.credentials`, the pull Secret every operand references is created here, its content a Pulumi
secret: encrypted in state, masked in previews and in the offline render.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.catalogs.consts import CDI_RUNTIME_CLASSES, DEFAULT_RUNTIME_CLASS
from components.kit.builders import kept, meta

RUNTIME_CLASS = DEFAULT_RUNTIME_CLASS
RUNTIME_CLASS_LABELS = {"app.kubernetes.io/component": "gpu-operator"}
POD_SECURITY_LABELS = {
    f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "audit", "warn")
}
REGISTRY_SECRET = "gpu-stack-registry-credentials"


@dataclass(frozen=True)
class RegistryLogin:
    server: str
    username: str
    # never in a repr (a log line, an assertion message): it only ever leaves as a secret Output
    password: str = field(repr=False)


def docker_config(login: RegistryLogin) -> str:
    """The `.dockerconfigjson` kubelet reads: one registry, with `auth` as docker login writes it."""
    auth = base64.b64encode(f"{login.username}:{login.password}".encode()).decode()
    return json.dumps({"auths": {login.server: {"username": login.username, "password": login.password, "auth": auth}}})


class PreRequisites(pulumi.ComponentResource):
    namespace: k8s.core.v1.Namespace
    runtime_classes: list[k8s.node.v1.RuntimeClass]

    def __init__(
        self,
        name: str,
        *,
        namespace: str,
        registry_login: Optional[RegistryLogin] = None,
        namespace_labels: Optional[dict[str, str]] = None,
        runtime_class: str = RUNTIME_CLASS,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-stack:index:PreRequisites", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        labels = {**POD_SECURITY_LABELS, **(namespace_labels or {})}
        # every operand, the loaded drivers' pods included, lives in it
        self.namespace = k8s.core.v1.Namespace(namespace, metadata=meta(namespace, labels=labels), opts=kept(child))
        if registry_login is not None:
            k8s.core.v1.Secret(
                REGISTRY_SECRET,
                metadata=meta(REGISTRY_SECRET, namespace),
                type="kubernetes.io/dockerconfigjson",
                string_data={".dockerconfigjson": pulumi.Output.secret(docker_config(registry_login))},
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.namespace])),
            )
        names = (runtime_class, *CDI_RUNTIME_CLASSES)
        self.runtime_classes = [
            k8s.node.v1.RuntimeClass(rc, metadata=meta(rc, labels=RUNTIME_CLASS_LABELS), handler=rc, opts=kept(child))
            for rc in names
        ]
        self.register_outputs({"namespace": self.namespace.metadata.name, "runtimeClasses": list(names)})
