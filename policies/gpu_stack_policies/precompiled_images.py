"""precompiled-image-exists: a precompiled driver DaemonSet pulls an image that exists.

The tag of a precompiled driver is `<branch>-<kernel>-<osTag>` and its DaemonSet selects nodes by
`feature.node.kubernetes.io/kernel-version.full=<kernel>` (fact sheet §4.3). The image exists when the kernel
and OS are an entry of node_images/catalog.yaml and either the image comes from that entry's `privateImage`
(the team's own build), or NVIDIA's precompiled build matrix covers the entry and branch (then any repository
is taken for NVIDIA's or a mirror of it). Anything else is a pod stuck in ImagePullBackOff on every node of
that kernel.
"""

from __future__ import annotations

from typing import Optional

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from gpu_stack_policies import drivers
from gpu_stack_policies.fields import report_at
from gpu_stack_policies.facts.node_images import catalog as node_image_catalog

NAME = "precompiled-image-exists"
BUILD_FIX = (
    "build it with node_images/driver-precompiled/build.sh and set privateImage on the catalog entry, or move the "
    "pool to driver mode managed"
)


def _catalog() -> node_image_catalog.Catalog:
    return node_image_catalog.load_catalog()


def problem(driver: drivers.DriverSet, catalog: Optional[node_image_catalog.Catalog] = None) -> Optional[str]:
    tag, kernel, branch = driver.tag, driver.kernel, driver.branch
    if tag is None or branch is None:
        return f"pulls {driver.image!r}, which has no `<branch>-<kernel>-<osTag>` tag (precompiled images are never digests); fix: render it from a catalog entry"
    if kernel is None:
        return "selects no feature.node.kubernetes.io/kernel-version.full, so it would run one kernel's driver on any kernel; fix: render it per kernel (components/states/driver/state.py)"
    prefix = f"{branch}-{kernel}-"
    if not tag.startswith(prefix):
        return f"pulls tag {tag!r} on nodes running kernel {kernel}; the tag must start {prefix!r}; fix: render it from the catalog entry of kernel {kernel}"
    os_tag = tag[len(prefix):]
    catalog = catalog or _catalog()
    entries = [e for e in catalog if e.kernel == kernel and e.os_tag == os_tag]
    if not entries:
        return (
            f"runs kernel {kernel} on {os_tag}, which is in no entry of node_images/catalog.yaml; fix: add the node "
            "image to the catalog (its checks say whether NVIDIA publishes it)"
        )
    if any(e.private_image and driver.repository == e.private_image for e in entries):
        return None
    reasons = [node_image_catalog.unpublished_reason(e, branch) for e in entries]
    if any(reason is None for reason in reasons):
        return None
    private = sorted({e.private_image for e in entries if e.private_image})
    if private:
        return f"pulls {driver.image}, but NVIDIA publishes no {tag} ({reasons[0]}); fix: pull the private build from {private[0]}"
    return f"pulls {driver.image}, but NVIDIA publishes no {tag} ({reasons[0]}); fix: {BUILD_FIX}"


def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
    driver = drivers.driver_set(args.resource_type, args.props, args.name)
    if driver is None or not driver.precompiled:
        return
    found = problem(driver)
    if found:
        # the image's tag names the branch, kernel and OS of the node image the stack picked
        field = f"{driver.at}/nodeSelector" if driver.kernel is None else f"{driver.at}{driver.driver.at}/image#/version"
        report_at(report, field, f"{driver.what} {found}")


POLICY = ResourceValidationPolicy(
    name=NAME,
    description="[critical: driver pods never start] Precompiled driver DaemonSets pull an image NVIDIA publishes or the team built privately.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
)
