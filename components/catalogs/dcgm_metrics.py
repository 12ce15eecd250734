"""The DCGM exporter's metrics list (the `DCGM_EXPORTER_COLLECTORS` CSV), rendered by gpu-stack.

The image's built-in `/etc/dcgm-exporter/dcp-metrics-included.csv` (fact sheet §10) leaves the volatile ECC
counters commented out, and the stack's alerts (components/catalogs/monitoring_rules.py) page on double-bit ECC errors.
So the stack ships its own list: the built-in file's enabled set plus `DCGM_FI_DEV_ECC_SBE_VOL_TOTAL` and
`DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`, mounted from a ConfigMap the way `dcgmExporter.config.name` would be.

CSV format read by the exporter: one metric per line, `DCGM_FIELD, prometheus-type, help text`, with the type
one of gauge|counter|label; a line starting with `#` is a comment. The exporter reads the file as CSV, so a
help text must not contain a comma or a double quote. A `label` field is no metric: its value is attached as
a label to the other metrics. Every other field is exposed under its own name (`DCGM_FI_DEV_GPU_TEMP`, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

TYPES = ("gauge", "counter", "label")
_FIELD = re.compile(r"^DCGM_(FI|EXP)_[A-Z0-9_]+$")


@dataclass(frozen=True)
class Metric:
    field: str
    type: str
    help: str


# (group heading, metrics) in the order they are written to the CSV.
_GROUPS: tuple[tuple[str, tuple[Metric, ...]], ...] = (
    (
        "Clocks",
        (
            Metric("DCGM_FI_DEV_SM_CLOCK", "gauge", "Streaming multiprocessor clock frequency (MHz)."),
            Metric("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Device memory clock frequency (MHz)."),
        ),
    ),
    (
        "Temperature",
        (
            Metric("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Device memory temperature (degrees Celsius)."),
            Metric("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU die temperature (degrees Celsius)."),
        ),
    ),
    (
        "Power and energy",
        (
            Metric("DCGM_FI_DEV_POWER_USAGE", "gauge", "Board power draw right now (watts)."),
            Metric(
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                "counter",
                "Energy used by the GPU since the driver was last loaded (millijoules).",
            ),
        ),
    ),
    (
        "PCIe",
        (
            Metric(
                "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "PCIe packets the link had to retransmit (replays)."
            ),
        ),
    ),
    (
        "Utilisation (whole GPUs only: not reported for MIG instances)",
        (
            Metric("DCGM_FI_DEV_GPU_UTIL", "gauge", "Share of time at least one kernel ran on the GPU (percent)."),
            Metric(
                "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Share of time device memory was read or written (percent)."
            ),
            Metric("DCGM_FI_DEV_ENC_UTIL", "gauge", "Video encoder busy time (percent)."),
            Metric("DCGM_FI_DEV_DEC_UTIL", "gauge", "Video decoder busy time (percent)."),
        ),
    ),
    (
        "Errors and memory health",
        (
            Metric(
                "DCGM_FI_DEV_XID_ERRORS",
                "gauge",
                "Code of the most recent XID error the driver reported for this GPU (0 when none).",
            ),
            Metric(
                "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                "counter",
                "Single-bit ECC errors corrected since the driver was last loaded.",
            ),
            Metric(
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                "counter",
                "Double-bit (uncorrectable) ECC errors since the driver was last loaded.",
            ),
            Metric("DCGM_FI_DEV_RETIRED_SBE", "counter", "Memory pages retired after single-bit ECC errors."),
            Metric("DCGM_FI_DEV_RETIRED_DBE", "counter", "Memory pages retired after double-bit ECC errors."),
            Metric(
                "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                "counter",
                "Memory rows remapped after uncorrectable errors.",
            ),
            Metric(
                "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Memory rows remapped after correctable errors."
            ),
            Metric(
                "DCGM_FI_DEV_ROW_REMAP_FAILURE",
                "gauge",
                "1 when a memory row could not be remapped (the GPU needs service).",
            ),
        ),
    ),
    (
        "Framebuffer memory",
        (
            Metric("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory not allocated (MiB)."),
            Metric("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory allocated (MiB)."),
            Metric("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory held back by the driver (MiB)."),
        ),
    ),
    (
        "NVLink",
        (Metric("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "NVLink traffic summed over all links."),),
    ),
    (
        "vGPU",
        (Metric("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU licence state as reported by the driver."),),
    ),
    (
        "Labels attached to every metric",
        (Metric("DCGM_FI_DRIVER_VERSION", "label", "NVIDIA driver version."),),
    ),
    (
        "Profiling (DCP; reported per MIG instance as well)",
        (
            Metric(
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                "gauge",
                "Share of time the graphics or compute engine was busy (ratio 0 to 1).",
            ),
            Metric(
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Share of cycles the tensor pipes were busy (ratio 0 to 1)."
            ),
            Metric(
                "DCGM_FI_PROF_DRAM_ACTIVE",
                "gauge",
                "Share of cycles device memory was moving data (ratio 0 to 1).",
            ),
            Metric("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "PCIe bytes sent per second including protocol overhead."),
            Metric(
                "DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "PCIe bytes received per second including protocol overhead."
            ),
        ),
    ),
)

DEFAULT_METRICS: tuple[Metric, ...] = tuple(m for _, group in _GROUPS for m in group)

_GROUP_OF = {m.field: heading for heading, group in _GROUPS for m in group}
_OTHER = "Other fields"

HEADER = """\
# DCGM exporter metrics list, rendered by gpu-stack (components/dcgm_metrics.py); do not edit by hand.
# gpu-stack ships its own list instead of the image's built-in dcp-metrics-included.csv because that file
# leaves the volatile ECC counters (DCGM_FI_DEV_ECC_SBE_VOL_TOTAL / DCGM_FI_DEV_ECC_DBE_VOL_TOTAL) commented
# out and the stack's alerts need them.
# Format: DCGM field, Prometheus type (gauge|counter|label), help text.
"""


def _check(metric: Metric) -> None:
    if not _FIELD.fullmatch(metric.field):
        raise ValueError(f"{metric.field!r} is not a DCGM field name (DCGM_FI_...)")
    if metric.type not in TYPES:
        raise ValueError(f"{metric.field}: unknown metric type {metric.type!r} (expected one of {', '.join(TYPES)})")
    if not metric.help.strip() or any(c in metric.help for c in ',"\n\r'):
        raise ValueError(f"{metric.field}: help text must be non-empty and hold no comma, quote or newline")


def metrics_csv(metrics: Iterable[Metric]) -> str:
    """The CSV the exporter reads: a header comment, then the metrics grouped under comment headings.

    Metrics keep their order within a group; groups follow DEFAULT_METRICS' grouping, unknown fields last.
    """
    metrics = list(metrics)
    seen: set[str] = set()
    for metric in metrics:
        _check(metric)
        if metric.field in seen:
            raise ValueError(f"{metric.field} is listed twice")
        seen.add(metric.field)
    headings = [heading for heading, _ in _GROUPS] + [_OTHER]
    lines = [HEADER.rstrip("\n")]
    for heading in headings:
        members = [m for m in metrics if _GROUP_OF.get(m.field, _OTHER) == heading]
        if not members:
            continue
        lines.append("")
        lines.append(f"# {heading}")
        lines.extend(f"{m.field}, {m.type}, {m.help}" for m in members)
    return "\n".join(lines) + "\n"


def parse_metrics_csv(text: str) -> list[Metric]:
    """Read a metrics CSV back; ValueError names the offending line for malformed lines or unknown types."""
    metrics = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"line {number}: expected 'DCGM_FIELD, type, help text', got {raw!r}")
        metric = Metric(*parts)
        try:
            _check(metric)
        except ValueError as error:
            raise ValueError(f"line {number}: {error}: {raw!r}") from None
        metrics.append(metric)
    return metrics


def exported_metric_names(metrics: Iterable[Metric]) -> set[str]:
    """Names of the Prometheus series the exporter exposes for these fields (label fields expose none)."""
    return {m.field for m in metrics if m.type != "label"}
