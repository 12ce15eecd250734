"""The whole stack configuration: one pydantic model, validated once, before anything is registered.

Stack files (`stacks/Pulumi.<stack>.yaml`) keep every setting under the `gpu-stack:` namespace, one top-level
key per section (`gpu-stack:cluster`, `gpu-stack:driver`, ...). The Pulumi CLI hands the program each value as
a string (objects as JSON), which is exactly what `load_config` takes, so the real CLI and the offline render go
through the same door.

Errors are collected, not raised one at a time: a user fixing a stack sees every problem with its key path and
the values that would have been accepted.

The models and their checks live in one module per area (base, cluster, drivers, pools, upgrade, monitoring, vm,
gpudirect, dra), the whole-stack model and its cross-key rules in `stack`, and loading in `loader`; this module
re-exports their public names, so importers keep `from components.config import ...`.
"""

from components.config.base import (
    BRANCH,
    DIGEST,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    FULL_DRIVER_VERSION,
    IMAGE_TAG,
    K8S_VERSION,
    LABEL_KEY,
    LABEL_VALUE,
    NAMESPACE,
    OS_TAG,
    REGISTRY,
    ConfigError,
    node_images,
)
from components.config.cluster import (
    Cluster,
    Components,
    DaemonSets,
    DevicePlugin,
    MigManager,
    Nfd,
    NodeAgent,
    Registry,
    RegistryCredentials,
    Toleration,
    Toolkit,
    Validation,
    Validator,
    Versions,
)
from components.config.dra import DRA_MIN_KUBERNETES_MINOR, Dra
from components.config.drivers import KERNEL_MODULE_TYPES, Driver, PoolDriver, PoolDriverPlan
from components.config.gpudirect import GpuDirect, Rdma, gds_needs_open_modules
from components.config.hostpaths import HostPaths
from components.config.loader import (
    SECRET_KEYS,
    UNDECRYPTED,
    load_config,
    program_config,
    program_secret_keys,
    stack_file_config,
    stack_file_secret_keys,
)
from components.config.monitoring import (
    DCGM_FIELD,
    PROM_DURATION,
    Alerts,
    Dashboard,
    DcgmExporter,
    DcgmMetric,
    Monitoring,
    ServiceMonitorSettings,
    duration_ms,
)
from components.config.overrides import EnvVar, OperandOverride, OperandOverrides, OperandToleration, Resources
from components.config.pools import MIG_LAYOUT_NAME, MPS_MAX_REPLICAS, NodePool, Sharing
from components.config.stack import StackConfig
from components.config.rules.overrides import deployed_operands
from components.config.rules.upgrade import MIN_NODE_SWAP_SECONDS, rollout_floor_seconds
from components.config.upgrade import Drain, Upgrade, Wave, label_selector_problem
from components.config.vm import CcManager, KubeVirt, SandboxWorkloads, Vgpu
