"""Pod volumes and the mounts that name them (pkg/apis/core/validation: validateVolumes, ValidateVolumeMounts)."""

from __future__ import annotations

from typing import Any, Mapping

from gpustack.apiserver import formats
from gpustack.apiserver.engine import WORKLOAD_KINDS, Obj, Report, containers, mapping, pod_specs, rule

HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice")
MOUNT_PROPAGATION = ("None", "HostToContainer", "Bidirectional")
# Volume modes are file permission bits: 0..0777.
MAX_MODE = 0o777


def _no_backsteps(path: str) -> bool:
    """validatePathNoBacksteps: no '..' element."""
    return ".." not in path.split("/")


def _local_descending(path: str) -> list[str]:
    """validateLocalDescendingPath: relative, without '..' elements."""
    problems = []
    if path.startswith("/"):
        problems.append("must be a relative path")
    if not _no_backsteps(path):
        problems.append("must not contain '..'")
    return problems


def _privileged(container: Mapping[str, Any]) -> bool:
    return bool(mapping(container.get("securityContext")).get("privileged"))


@rule("volume-names", "k8s.io/kubernetes/pkg/apis/core/validation.validateVolumes (name: IsDNS1123Label, unique; one source)",
      kinds=WORKLOAD_KINDS)
def volume_names(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        seen: set[str] = set()
        for i, volume in enumerate(pod.get("volumes") or []):
            here = f"{path}.volumes[{i}]"
            name = volume.get("name") or ""
            if not name:
                report(f"{here}.name", "Required value")
            for message in formats.is_dns1123_label(name) if name else []:
                report(f"{here}.name", f"Invalid value {name[:80]!r}: {message}")
            if name in seen:
                report(f"{here}.name", f"Duplicate value: {name!r}")
            seen.add(name)
            sources = [k for k, v in volume.items() if k != "name" and v is not None]
            if not sources:
                report(here, "Required value: must specify a volume type")
            elif len(sources) > 1:
                report(here, f"Forbidden: may not specify more than 1 volume type (has {', '.join(sorted(sources))})")


@rule("host-path", "k8s.io/kubernetes/pkg/apis/core/validation.validateHostPathVolumeSource (path, validatePathNoBacksteps, validateHostPathType)",
      kinds=WORKLOAD_KINDS)
def host_path(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        for i, volume in enumerate(pod.get("volumes") or []):
            source = volume.get("hostPath")
            if source is None:
                continue
            here = f"{path}.volumes[{i}].hostPath"
            host = source.get("path") or ""
            if not host:
                report(f"{here}.path", "Required value")
            elif not _no_backsteps(host):
                report(f"{here}.path", f"Invalid value {host[:80]!r}: must not contain '..'")
            type_ = source.get("type", "") or ""
            if type_ not in HOST_PATH_TYPES:
                report(f"{here}.type", f"Unsupported value {type_!r}: supported values: {', '.join(repr(t) for t in HOST_PATH_TYPES)}")


def _mode(value: Any, path: str, report: Report) -> None:
    if value is not None and (not formats.is_int(value) or not 0 <= int(value) <= MAX_MODE):
        report(path, f"Invalid value {value!r}: must be a number between 0 and 0777 (octal), both inclusive")


@rule("volume-items", "k8s.io/kubernetes/pkg/apis/core/validation.validateConfigMapVolumeSource, validateSecretVolumeSource, validateKeyToPath",
      kinds=WORKLOAD_KINDS)
def volume_items(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        for i, volume in enumerate(pod.get("volumes") or []):
            for source_key, name_key in (("configMap", "name"), ("secret", "secretName")):
                source = volume.get(source_key)
                if source is None:
                    continue
                here = f"{path}.volumes[{i}].{source_key}"
                if not source.get(name_key):
                    report(f"{here}.{name_key}", "Required value")
                _mode(source.get("defaultMode"), f"{here}.defaultMode", report)
                for j, item in enumerate(source.get("items") or []):
                    item_path = f"{here}.items[{j}]"
                    if not item.get("key"):
                        report(f"{item_path}.key", "Required value")
                    target = item.get("path") or ""
                    if not target:
                        report(f"{item_path}.path", "Required value")
                    for message in _local_descending(target) if target else []:
                        report(f"{item_path}.path", f"Invalid value {target[:80]!r}: {message}")
                    if target.startswith(".."):
                        report(f"{item_path}.path", f"Invalid value {target[:80]!r}: must not start with '..'")
                    _mode(item.get("mode"), f"{item_path}.mode", report)
            empty_dir = volume.get("emptyDir")
            if empty_dir and empty_dir.get("sizeLimit") is not None:
                limit = formats.quantity(empty_dir["sizeLimit"])
                if limit is None or limit < 0:
                    report(f"{path}.volumes[{i}].emptyDir.sizeLimit", f"Invalid value {empty_dir['sizeLimit']!r}: must be a non-negative quantity")


@rule("volume-mounts", "k8s.io/kubernetes/pkg/apis/core/validation.ValidateVolumeMounts (volume exists, unique mountPath, subPath, propagation)",
      kinds=WORKLOAD_KINDS)
def volume_mounts(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        volumes = {v.get("name") for v in pod.get("volumes") or []}
        for c_path, container, _ in containers(pod, path):
            mount_paths: set[str] = set()
            for j, m in enumerate(container.get("volumeMounts") or []):
                here = f"{c_path}.volumeMounts[{j}]"
                name = m.get("name") or ""
                if not name:
                    report(f"{here}.name", "Required value")
                elif name not in volumes:
                    report(f"{here}.name", f"Not found: {name!r} (no volume of the pod has this name)")
                mount_path = m.get("mountPath") or ""
                if not mount_path:
                    report(f"{here}.mountPath", "Required value")
                elif mount_path in mount_paths:
                    report(f"{here}.mountPath", f"Invalid value {mount_path!r}: must be unique")
                mount_paths.add(mount_path)
                sub_path = m.get("subPath") or ""
                for message in _local_descending(sub_path) if sub_path else []:
                    report(f"{here}.subPath", f"Invalid value {sub_path[:80]!r}: {message}")
                if sub_path and m.get("subPathExpr"):
                    report(f"{here}.subPathExpr", "Invalid value: subPathExpr and subPath are mutually exclusive")
                propagation = m.get("mountPropagation")
                if propagation is not None and propagation not in MOUNT_PROPAGATION:
                    report(f"{here}.mountPropagation", f"Unsupported value {propagation!r}: supported values: {', '.join(MOUNT_PROPAGATION)}")
                elif propagation == "Bidirectional" and not _privileged(container):
                    report(f"{here}.mountPropagation", "Forbidden: Bidirectional mount propagation is available only to privileged containers")
