"""driver-supports-gpu: every driver DaemonSet runs a branch and kernel module type its pools' GPUs support.

A stack policy: a driver DaemonSet's pools are the ones it can reach (its deploy label, node selector and
`gpu-stack/pool` affinity against the node labeller's document), each pool names its GPU model, and
components/catalogs/catalog.py says which branches and kernel modules run that model (first branch per NVIDIA's open
kernel modules' Compatible GPUs table, last branch for Volta; open modules only on Grace Hopper and Blackwell,
proprietary only before Turing). The branch is read from the image tag; a digest names no branch and is
reported as unverifiable. GPUDirect Storage from nvidia-fs 2.17.5 needs the open modules as well (fact sheet
§4.1): a driver pod with an `nvidia-fs` container at that version or later must not run `proprietary`.
"""

from __future__ import annotations

import re

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from gpu_stack_policies import drivers, objects
from gpu_stack_policies.fields import report_at
from gpu_stack_policies.facts import catalog

NAME = "driver-supports-gpu"
GDS_CONTAINER = "nvidia-fs"
GDS_MIN_FOR_OPEN = (2, 17, 5)


def _version(image: str) -> tuple[int, ...] | None:
    match = re.search(r":v?(\d+)\.(\d+)\.(\d+)", image.rsplit("/", 1)[-1])
    return tuple(int(part) for part in match.groups()) if match else None


def _labeller_urn(resources: list, fallback: str) -> str:
    labeller, _ = objects.find_pools(resources)
    return labeller.urn if labeller is not None else fallback


def validate(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = list(args.resources)
    _, pools = objects.find_pools(resources)
    for driver in drivers.driver_sets(resources):
        urn = driver.resource.urn
        module_type = driver.kernel_module_type
        for container in objects.containers(driver.spec):
            version = _version(container.image or "") if container.name == GDS_CONTAINER else None
            if version is not None and version >= GDS_MIN_FOR_OPEN and module_type == "proprietary":
                report_at(
                    report, driver.at + driver.driver.env_at("KERNEL_MODULE_TYPE"),
                    f"{driver.what} runs GDS {'.'.join(map(str, version))} on proprietary kernel modules; nvidia-fs "
                    "2.17.5 and later need the open ones; fix: gpu-stack:driver.kernelModuleType: open",
                    urn,
                )
        reached = drivers.driver_pools(driver.reachable(pools))
        if not reached:
            continue
        branch = driver.branch
        image = f"{driver.at}{driver.driver.at}/image"
        if branch is None:
            report_at(
                report, f"{image}#/version",
                f"{driver.what} pulls {driver.image!r}, whose branch cannot be read, so GPU support is unverified for "
                f"pool(s) {', '.join(p.name for p in reached)}; fix: pin the driver by version tag",
                urn,
            )
            continue
        for pool in reached:
            model = catalog.GPU_MODELS.get(pool.gpu_model or "")
            if model is None:
                report_at(report, f"{pool.at}/gpuModel",
                          f"{driver.what} serves pool {pool.name!r}, whose GPU model {pool.gpu_model!r} is not in components/catalogs/catalog.py; fix: name a known gpuModel",
                          _labeller_urn(resources, urn))
                continue
            support = catalog.DRIVER_SUPPORT[model.name]
            problem = support.branch_problem(int(branch))
            if problem:
                report_at(
                    report, f"{image}#/version",
                    f"{driver.what} runs driver branch {branch} on pool {pool.name!r}, but the {model.name} {problem}; "
                    "fix: set a supported gpu-stack:versions.driver / driver.branch, or the pool's own driver.version / driver.branch",
                    urn,
                )
            problem = support.module_problem(module_type)
            if problem:
                report_at(
                    report, driver.at + driver.driver.env_at("KERNEL_MODULE_TYPE"),
                    f"{driver.what} loads {module_type} kernel modules on pool {pool.name!r}, but the {model.name} {problem}; "
                    "fix: set gpu-stack:driver.kernelModuleType or the pool's driver.kernelModuleType",
                    urn,
                )


POLICY = StackValidationPolicy(
    name=NAME,
    description="[critical: the driver cannot run the GPU] Driver branch and kernel module type support the GPUs of every pool the driver serves.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
)
