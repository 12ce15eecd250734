"""State `pre-requisites`: the namespace the operands run in and the RuntimeClasses they (and workloads) use.

GO:assets/pre-requisites/*: RuntimeClass `nvidia` always, `nvidia-cdi` and `nvidia-legacy` only with CDI on
(the operator deletes them otherwise). The namespace carries Pod Security labels because every operand is
privileged; without them a cluster enforcing `baseline` rejects the driver pods.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components._k8s import meta

RUNTIME_CLASS = "nvidia"
CDI_RUNTIME_CLASSES = ("nvidia-cdi", "nvidia-legacy")
RUNTIME_CLASS_LABELS = {"app.kubernetes.io/component": "gpu-operator"}
POD_SECURITY_LABELS = {
    f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "audit", "warn")
}


class PreRequisites(pulumi.ComponentResource):
    namespace: k8s.core.v1.Namespace
    runtime_classes: list[k8s.node.v1.RuntimeClass]

    def __init__(self, name: str, *, namespace: str, cdi: bool, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:PreRequisites", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.namespace = k8s.core.v1.Namespace(namespace, metadata=meta(namespace, labels=POD_SECURITY_LABELS), opts=child)
        names = (RUNTIME_CLASS, *CDI_RUNTIME_CLASSES) if cdi else (RUNTIME_CLASS,)
        self.runtime_classes = [
            k8s.node.v1.RuntimeClass(rc, metadata=meta(rc, labels=RUNTIME_CLASS_LABELS), handler=rc, opts=child)
            for rc in names
        ]
        self.register_outputs({"namespace": self.namespace.metadata.name, "runtimeClasses": list(names)})
