"""Which config keys the stack digest (components/kit/stack_digest.py, the validation gate's annotation) takes.

The digest takes the whole config, except a key added to the model after stacks were deployed while it holds its
default: upgrading gpu-stack must not move the digest (and re-run the gates) of a stack that does not use the new
key. Added keys are not listed by hand: every key outside `FIRST_KEYS` is one, and its default is the model's.
`FIRST_KEYS` is frozen: the keys every released digest has taken (as of issue 37, the model's keys less the nine
that a hand-kept list then left out). Add to it only to move every stack's digest on purpose.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Optional

from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

# Section -> its keys; None: a section taken whole (a list, a map or a single value).
FIRST_KEYS: Mapping[str, Optional[tuple[str, ...]]] = MappingProxyType(
    {
        "cluster": ('name', 'context', 'kubeconfig', 'kubernetesVersions', 'containerRuntime', 'namespace'),
        "registry": ('override', 'pullSecrets', 'credentials'),
        "versions": ('driver', 'driverManager', 'toolkit', 'devicePlugin', 'gfd', 'validator', 'dcgm', 'dcgmExporter', 'migManager', 'sandboxDevicePlugin', 'kataDevicePlugin', 'ccManager', 'vgpuDeviceManager', 'gds', 'gdrcopy', 'draDriver', 'nfdChart'),
        "driver": ('mode', 'branch', 'kernelModuleType', 'licensingConfig', 'repoConfig', 'certConfig', 'kernelModuleConfig', 'secretEnv', 'extraVolumes', 'startupProbe', 'readinessProbe', 'livenessProbe', 'hostNetwork'),
        "toolkit": ('installDir', 'cdi', 'runtimeConfig', 'runtimeDropInConfig', 'runtimeSocket'),
        "hostPaths": ('rootFS', 'driverInstallDir', 'kubeletRootDir'),
        "devicePlugin": ('migStrategy',),
        "validator": ('pluginWorkload',),
        "validation": ('mode', 'timeoutSeconds'),
        "nfd": ('mode',),
        "nodeAgent": ('image', 'resyncSeconds'),
        "daemonsets": ('priorityClassName', 'tolerations', 'updateStrategy', 'maxUnavailable', 'labels', 'annotations'),
        "dcgmExporter": ('extraMetrics', 'internalTrafficPolicy', 'enablePodLabels', 'enablePodUid', 'podLabelAllowlistRegex', 'listenAddress', 'collectorsFile', 'remoteHostengine', 'hostNetwork', 'hostPid', 'hpcJobMapping'),
        "migManager": ('withReboot', 'gpuClientsConfig'),
        "monitoring": ('prometheusOperator', 'serviceMonitor', 'alerts', 'dashboard'),
        "migLayouts": None,
        "nodePools": None,
        "components": ('nfd', 'nodeLabeler', 'toolkit', 'devicePlugin', 'dcgm', 'dcgmExporter', 'gfd', 'migManager', 'nodeStatusExporter', 'nodeInventory'),
        "upgrade": ('strategy', 'maxUnavailable', 'maxParallelUpgrades', 'paused', 'nodeReadyTimeoutSeconds', 'gpuPodEviction', 'drain', 'waves', 'waitForCompletion'),
        "sandboxWorkloads": ('mode', 'ccManager', 'defaultWorkload', 'kubevirt'),
        "vgpu": ('managerImage', 'defaultConfig'),
        "gpudirect": ('gds', 'gdrcopy', 'rdma'),
        "dra": ('kubeletPlugin', 'computeDomains', 'featureGates'),
        "operands": ('driver', 'driverManager', 'toolkit', 'validator', 'devicePlugin', 'mpsControlDaemon', 'gfd', 'dcgm', 'dcgmExporter', 'migManager', 'nodeStatusExporter', 'vgpuManager', 'vgpuDeviceManager', 'vfioManager', 'sandboxValidator', 'sandboxDevicePlugin', 'kataSandboxDevicePlugin', 'ccManager', 'gds', 'gdrcopy', 'peermem', 'draDriver'),
        "registryPassword": None,
        "kubeconfig": None,
    }
)


def _field(model: type[BaseModel], key: str) -> Optional[FieldInfo]:
    return next((f for name, f in model.model_fields.items() if (f.alias or name) == key), None)


def _default(field: FieldInfo) -> Any:
    """The field's default as the digest's dump writes it; a sentinel no dumped value equals when it has none."""
    if field.is_required():
        return _REQUIRED
    value = field.get_default(call_default_factory=True)
    return TypeAdapter(field.annotation).dump_python(value, mode="json", by_alias=True, warnings=False)


_REQUIRED = object()


def without_added_defaults(model: type[BaseModel], dumped: dict[str, Any]) -> dict[str, Any]:
    """`dumped` (a dump of `model` by alias) less the added keys, of the config or of its sections, that hold their
    defaults."""
    kept = {}
    for section, value in dumped.items():
        field = _field(model, section)
        assert field is not None, section
        if section not in FIRST_KEYS:
            if value != _default(field):
                kept[section] = value
            continue
        first = FIRST_KEYS[section]
        section_model = field.annotation
        if first is None or not isinstance(value, dict) or not (isinstance(section_model, type) and issubclass(section_model, BaseModel)):
            kept[section] = value
            continue
        kept[section] = {k: v for k, v in value.items() if k in first or v != _default(_field(section_model, k))}
    return kept
