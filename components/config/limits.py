"""Bounds on how much a stack file may ask for, in one place.

Every count the configuration takes has a ceiling: far above what a real cluster needs, low enough that a typo,
a template gone wrong or a hostile file is refused with the key and the limit before anything renders (the API
server has its own ceilings, most of them on bytes, which a render would only hit much later). The models use
these constants as `max_length` / `le` bounds or in their validators; an error names the key and the number.

| constant                    | bounds                                                                   | limit   |
|-----------------------------|--------------------------------------------------------------------------|---------|
| MAX_NODE_POOLS              | nodePools                                                                | 64      |
| MAX_KUBERNETES_VERSIONS     | cluster.kubernetesVersions                                               | 16      |
| MAX_WAVES                   | upgrade.waves                                                            | 16      |
| MAX_POOLS_PER_WAVE          | upgrade.waves[].pools                                                    | 64      |
| MAX_MIG_LAYOUTS             | migLayouts                                                               | 32      |
| MAX_MIG_LAYOUT_ENTRIES      | per-GPU entries of one migLayouts.<name> (one per GPU index at most)     | 64      |
| MAX_MIG_DEVICE_FILTERS      | migLayouts.<name>[].deviceFilter                                         | 16      |
| MAX_MIG_PROFILES            | MIG profiles of one layout or entry (migDevices)                         | 16      |
| MAX_VGPU_CONFIGS            | vgpu.configs                                                             | 32      |
| MAX_VGPU_CONFIG_ENTRIES     | entries of one vgpu.configs.<name>                                       | 64      |
| MAX_VGPU_TYPES              | vGPU types of one vgpu.configs entry (vgpuDevices)                       | 16      |
| MAX_PULL_SECRETS            | registry.pullSecrets, operands.<x>.imagePullSecrets                      | 16      |
| MAX_TOLERATIONS             | daemonsets.tolerations, operands.<x>.tolerations                         | 32      |
| MAX_NODE_IMAGES_PER_POOL    | nodePools[].nodeImage or nodePools[].os as a list (a pool mid-rollout)   | 4       |
| MAX_ENV                     | operands.<x>.env                                                         | 64      |
| MAX_ARGS                    | operands.<x>.args                                                        | 64      |
| MAX_ARG_LENGTH              | one of operands.<x>.args                                                 | 4096    |
| MAX_MAP_ENTRIES             | any label, annotation or nodeSelector map; resources requests/limits     | 64      |
| ANNOTATIONS_MAX_BYTES       | one annotation map, keys and values (API server: TotalAnnotationSizeLimitB) | 256 KiB |
| MAX_EXTRA_METRICS           | dcgmExporter.extraMetrics                                                | 256     |
| MAX_UNAVAILABLE_COUNT       | daemonsets.maxUnavailable, upgrade.maxUnavailable as a count             | 100000  |
| MAX_SCRAPE_DURATION_MS      | monitoring.serviceMonitor.interval and scrapeTimeout                     | 1h      |
| MAX_RELABELINGS             | monitoring.serviceMonitor.relabelings                                    | 32      |
| MAX_RELABEL_SOURCE_LABELS   | monitoring.serviceMonitor.relabelings[].sourceLabels                     | 16      |
| MAX_ALERT_DURATION_MS       | monitoring.alerts.utilizationFor, validatorNotReadyFor                   | 7d      |
"""

MAX_NODE_POOLS = 64
MAX_KUBERNETES_VERSIONS = 16
MAX_WAVES = 16
MAX_POOLS_PER_WAVE = MAX_NODE_POOLS
MAX_MIG_LAYOUTS = 32
MAX_MIG_LAYOUT_ENTRIES = 64
MAX_MIG_DEVICE_FILTERS = 16
MAX_MIG_PROFILES = 16
MAX_VGPU_CONFIGS = 32
MAX_VGPU_CONFIG_ENTRIES = 64
MAX_VGPU_TYPES = 16
MAX_PULL_SECRETS = 16
MAX_TOLERATIONS = 32
MAX_NODE_IMAGES_PER_POOL = 4
MAX_ENV = 64
MAX_ARGS = 64
MAX_ARG_LENGTH = 4096
MAX_MAP_ENTRIES = 64
ANNOTATIONS_MAX_BYTES = 256 * 1024
MAX_EXTRA_METRICS = 256
MAX_UNAVAILABLE_COUNT = 100_000
MAX_SCRAPE_DURATION_MS = 3_600_000
MAX_RELABELINGS = 32
MAX_RELABEL_SOURCE_LABELS = 16
MAX_ALERT_DURATION_MS = 7 * 86_400_000
