"""scc-as-nvidia-ships-them: on OpenShift, SecurityContextConstraints grant host access only as NVIDIA's do.

OpenShift admits a pod under an SCC its ServiceAccount may use. NVIDIA's assets ship one SCC per operand that needs
the host (components/catalogs/openshift.py, facts copy `facts/openshift.py`): privileged containers and host
directories, plus the host namespaces and ports that operand's asset allows, for that operand's ServiceAccount
alone. For every SCC the stack renders:

* it is one of those, by name; any other SCC would hand privileged containers to pods NVIDIA never gives them;
* it admits exactly its operand's ServiceAccount (`system:serviceaccount:<namespace>:<sa>`), in the stack's
  namespace, and only the groups NVIDIA's SCCs name (cluster admins, nodes, masters);
* it allows no host PID, IPC, network or ports beyond the operand's asset.
"""

from __future__ import annotations

from typing import Mapping

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from gpu_stack_policies import objects
from gpu_stack_policies.fields import report_at
from gpu_stack_policies.facts import openshift

NAME = "scc-as-nvidia-ships-them"
HOST_FLAGS = {"allowHostPID": "host_pid", "allowHostIPC": "host_ipc", "allowHostNetwork": "host_network", "allowHostPorts": "host_ports"}
SCC_USER_PREFIX = "system:serviceaccount:"


def _check(props: Mapping, name: str, report: ReportViolation) -> None:
    scc_name = objects.name_of(props, name)
    what = f"SecurityContextConstraints {scc_name}"
    shape = next((s for s in openshift.SCCS.values() if s.name == scc_name), None)
    if shape is None:
        known = ", ".join(sorted(s.name for s in openshift.SCCS.values()))
        report_at(report, "/metadata/name", f"{what} is none of NVIDIA's operand SCCs, so nothing says which pods may run privileged under it; fix: "
               f"remove it (NVIDIA's: {known})")
        return
    users = [str(u) for u in objects.items(props.get("users"))]
    namespaces = {u[len(SCC_USER_PREFIX):].rsplit(":", 1)[0] for u in users if u.startswith(SCC_USER_PREFIX)}
    wanted = [f"{SCC_USER_PREFIX}{ns}:{shape.service_account}" for ns in sorted(namespaces)] or ["(its ServiceAccount)"]
    if len(users) != 1 or users != wanted[:1]:
        report_at(report, "/users", f"{what} admits {users}; NVIDIA's admits the {shape.service_account} ServiceAccount alone; fix: users "
               f"{wanted[:1]}")
    extra_groups = sorted({str(g) for g in objects.items(props.get("groups"))} - set(openshift.SCC_GROUPS))
    if extra_groups:
        report_at(report, "/groups", f"{what} admits groups {extra_groups}, whose every pod could then run privileged; fix: keep only "
               f"{list(openshift.SCC_GROUPS)}")
    for field, attribute in HOST_FLAGS.items():
        if props.get(field) is True and not getattr(shape, attribute):
            report_at(report, f"/{field}", f"{what} sets {field}: true, which NVIDIA's asset for {shape.service_account} does not; fix: false")


def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if objects.kind_of(args.resource_type) == openshift.SCC_KIND:
        _check(args.props, args.name, report)


POLICY = ResourceValidationPolicy(
    name=NAME,
    description="[high: security] OpenShift SCCs are NVIDIA's per-operand ones: privileged only for the operand's own ServiceAccount, host access no wider than its asset's.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
)
