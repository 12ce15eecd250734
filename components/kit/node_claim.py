"""The node a pod-bound ServiceAccount token was issued on, as admission policies read it.

The API server puts that node in the request's user info (`authentication.kubernetes.io/node-name`, KEP-4193), so a
ValidatingAdmissionPolicy can hold a token to its own node: NVIDIA's ResourceSlice policy for the DRA kubelet plugin
(components/kit/dra_api.py) and gpu-stack's node-bound policies (components/states/node_write_policy.py) both do.
"""

from __future__ import annotations

from pulumi_kubernetes.admissionregistration.v1 import VariableArgs

NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
# '' where the token names no node (a token not bound to a pod, or a cluster that does not stamp the claim)
REQUEST_NODE = VariableArgs(
    name="requestNode",
    expression=f"request.userInfo.extra[?'{NODE_NAME_CLAIM}'][0].orValue('')",
)
