"""What a Kubernetes API server (and the kubelet) would refuse, judged offline.

The strict JSON-schema check (`gpustack.schema`) sees types and field names; the API server's Go validation
sees much more: name formats per kind, IntOrString fields that are integers or percentages, unique container
and volume names, mounts that name a volume, selectors that match their template, and so on. No Python
package implements that code, so each rule here mirrors one of its functions and names it (`Rule.mirrors`).

Not covered, because only a live cluster knows: admission webhooks and policies installed there, quotas and
limit ranges, the RBAC of whoever applies the stack, objects that already exist (a name taken by an object
another tool created), feature gates that are off, and whether an image can actually be pulled.
"""

from gpustack.apiserver import admission, cluster, containers, core, meta, pod, rbac, references, volumes, workloads  # noqa: F401  (registers rules)
from gpustack.apiserver.engine import RULES, ApiProblem, Rule, validate, validate_all

__all__ = ["RULES", "ApiProblem", "Rule", "validate", "validate_all"]
