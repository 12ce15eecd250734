"""The driver: its mode (host, managed, precompiled), version, probes, the driver DaemonSet names the operator
used, and the upgrade policy or the k8s-driver-manager env that governs a driver update."""

from __future__ import annotations

import re
from typing import Any, Mapping

from components.config import NAMESPACE, node_images
from components.kit import naming
from components.kit.naming import sanitize_kernel
from gpustack.importer.common import ImportInputError, _show, int_or_percent, shown_input, truthy

DRIVER_MANAGER_ENV_DEFAULTS = {  # the state-driver asset's values (fact sheet §2.3)
    "ENABLE_GPU_POD_EVICTION": "true",
    "ENABLE_AUTO_DRAIN": "false",
    "DRAIN_USE_FORCE": "false",
    "DRAIN_POD_SELECTOR_LABEL": "",
    "DRAIN_TIMEOUT_SECONDS": "0s",
    "DRAIN_DELETE_EMPTYDIR_DATA": "false",
}

# gpu-stack's driver startup probe when driver.startupProbe is unset (the asset's; 5 s initial delay when precompiled).
PROBE_DEFAULTS = {"initialDelaySeconds": 60, "periodSeconds": 10, "timeoutSeconds": 60, "failureThreshold": 120}


class DriverMixin:
    """Mixed into build._Importer: spec.driver, its upgradePolicy and its manager's env."""

    def _driver_mode(self) -> str:
        s = self.spec
        s.use("driver.useNvidiaDriverCRD")
        if self.crd_mode:
            return self._nvd_driver_mode()
        if not s.get("driver.enabled"):
            return "host"
        return "precompiled" if s.get("driver.usePrecompiled") else "managed"

    def _operator_driver_names(self) -> None:
        """Pin each container pool's driver DaemonSet to the name the operator gave it (ClusterPolicy's one
        `nvidia-driver-daemonset`, or one per kernel for precompiled drivers), so that adopting the running cluster
        takes over the driver pods already on the nodes instead of starting a second driver beside each."""
        driver_pools = [p for p in self.pools if p.get("workloadType", "container") == "container"]
        if self.driver_mode == "host" or not driver_pools or self.crd_mode:
            return  # (NVIDIADriver DaemonSets are named per pool: nvidiadriver.py)
        if self.driver_mode == "managed" and self.facts.openshift_version and self.spec.peek("operator.use_ocp_driver_toolkit") is not False:
            # The operator's DTK DaemonSets are one per RHCOS build across pools; gpu-stack's are per pool and build.
            self.notes.append("OpenShift Driver Toolkit: the operator's per-build driver DaemonSets are not adopted by "
                              "name; gpu-stack runs nvidia-driver-daemonset-<pool>-<build> (docs/openshift.md)")
            return
        if self.driver_mode == "managed":
            if len({p.get("os") for p in driver_pools}) > 1:
                self.notes.append("the container pools boot different OS images, which one ClusterPolicy driver DaemonSet "
                                  "cannot serve: each pool gets a driver DaemonSet of its own name")
                return
            names = {p["name"]: naming.DRIVER_DAEMONSET for p in driver_pools}
        else:
            images = {image.name: image for image in node_images()}
            names = {}
            for pool in driver_pools:
                image = images[pool["nodeImage"]]
                names[pool["name"]] = f"{naming.DRIVER_DAEMONSET}-{sanitize_kernel(image.kernel)}-{image.os_tag}"
        for pool in driver_pools:
            pool.setdefault("driver", {})["daemonSetName"] = names[pool["name"]]
            where = f"{NAMESPACE}:nodePools[{self.pools.index(pool)}].driver.daemonSetName"
            self.origins[where] = "the operator's driver DaemonSet name"

    def _driver(self) -> None:
        s = self.spec
        mode = self.driver_mode
        s.use("driver.enabled", "driver.usePrecompiled")
        if mode == "host":
            self.put("driver.mode", "host", origin="spec.driver.enabled")
        if mode == "host" or "container" not in self.workloads:
            # No driver DaemonSet: the operator did not use the rest of the section either.
            s.without_effect("driver", "driver.enabled is false: the operator deployed no driver" if mode == "host"
                             else "no imported pool runs container workloads, so no driver DaemonSet")
            return
        self.put("driver.mode", mode, origin="spec.driver.usePrecompiled" if mode == "precompiled" else "spec.driver.enabled")
        self.put("driver.kernelModuleType", s.get("driver.kernelModuleType"), origin="spec.driver.kernelModuleType")
        version = getattr(self, "driver_version", "")
        if mode == "precompiled":
            if version:
                self.put("driver.branch", version, origin="spec.driver.version")
        elif version:
            self.put("versions.driver", version, origin="spec.driver.version")
        self._driver_probe()

    def _driver_probe(self) -> None:
        """driver.startupProbe: the fields that differ from what gpu-stack renders unset (driver.startupProbe.*)."""
        s = self.spec
        ours = {**PROBE_DEFAULTS, "initialDelaySeconds": 5 if self.driver_mode == "precompiled" else 60}
        for key, default in ours.items():
            value = s.get(f"driver.startupProbe.{key}")
            if value is not None and value != default:
                self.put(f"driver.startupProbe.{key}", value, origin=f"spec.driver.startupProbe.{key}")

    def _upgrade(self) -> None:
        s = self.spec
        if self.driver_mode == "host" or "container" not in self.workloads:
            for path in ("driver.upgradePolicy", "driver.manager"):
                s.without_effect(path, "no driver DaemonSet, so no driver upgrade")
            return
        policy = s.raw("driver.upgradePolicy")
        auto = isinstance(policy, dict) and bool(s.get("driver.upgradePolicy.autoUpgrade"))
        manager_env = s.env("driver.manager.env")
        if auto and self.sandbox:
            self.report("spec.driver.upgradePolicy.autoUpgrade", True,
                        "the operator turns automatic driver upgrades off while sandboxWorkloads are enabled; imported as "
                        "upgrade.strategy manual (OnDelete), which is what the operator did")
            auto = False
        if not auto:
            # The Helm chart: with autoUpgrade false "all other options are ignored"; the driver manager's env rules.
            s.use("driver.upgradePolicy.autoUpgrade")
            s.without_effect("driver.upgradePolicy", "autoUpgrade is false: the operator ignores the rest of the upgrade "
                                                     "policy (k8s-driver-manager's env governs a driver update)")
            self.put("upgrade.strategy", "manual", origin="spec.driver.upgradePolicy.autoUpgrade")
            self._manager_env(manager_env, superseded=False)
            return
        self._rolling_budget()
        self._wait_policy()
        self._drain_policy()
        self._manager_env(manager_env, superseded=True)

    def _rolling_budget(self) -> None:
        s = self.spec
        self.put("upgrade.strategy", "rolling", origin="spec.driver.upgradePolicy.autoUpgrade")
        # Both carried as they are: gpu-stack's budget is the operator's, fleet-wide, a percentage of the GPU nodes
        # with a managed driver, and maxParallelUpgrades 0 is unlimited in both.
        unavailable = int_or_percent(s.get("driver.upgradePolicy.maxUnavailable"))
        parallel = s.get("driver.upgradePolicy.maxParallelUpgrades")
        self.put("upgrade.maxUnavailable", unavailable, origin="spec.driver.upgradePolicy.maxUnavailable")
        self.put("upgrade.maxParallelUpgrades", parallel, origin="spec.driver.upgradePolicy.maxParallelUpgrades")
        self.report("spec.driver.upgradePolicy.maxUnavailable", unavailable,
                    "counted differently: the operator also counts nodes cordoned or NotReady for any other reason "
                    "against it, so a cluster with nodes down for maintenance upgraded fewer at once; gpu-stack counts "
                    "only the nodes it takes out of service itself")
        self.report("spec.driver.upgradePolicy.autoUpgrade", True,
                    "a failed node differs: the operator marks it upgrade-failed and goes on with other nodes while the "
                    "budget allows; gpu-stack's node agent keeps it cordoned and halts the rollout until it is fixed "
                    "(upgrade.nodeReadyTimeoutSeconds)")

    def _wait_policy(self) -> None:
        s = self.spec
        wait = {}
        selector = s.get("driver.upgradePolicy.waitForCompletion.podSelector")
        timeout = s.raw("driver.upgradePolicy.waitForCompletion.timeoutSeconds")
        if not timeout or selector:
            s.use("driver.upgradePolicy.waitForCompletion.timeoutSeconds")
        if selector:
            wait["podSelector"] = selector
            # 0, the default, waits without a limit; it means something only with a selector to wait for.
            if timeout:
                wait["timeoutSeconds"] = timeout
        elif timeout:
            s.without_effect("driver.upgradePolicy.waitForCompletion.timeoutSeconds",
                             "no waitForCompletion.podSelector: the upgrade controller waits for nothing")
        if wait:
            self._wait_for_completion(wait)

    def _drain_policy(self) -> None:
        s = self.spec
        deletion = s.raw("driver.upgradePolicy.podDeletion")
        self.put("upgrade.gpuPodEviction", isinstance(deletion, dict), origin="spec.driver.upgradePolicy.podDeletion")
        drain_on = s.get("driver.upgradePolicy.drain.enable")
        drain = {"enabled": drain_on}
        pairs = (("force", "force"), ("timeoutSeconds", "timeoutSeconds"), ("deleteEmptyDir", "deleteEmptyDirData"))
        if not drain_on and isinstance(deletion, dict):
            s.without_effect("driver.upgradePolicy.drain", "drain.enable is false: the upgrade controller drains nothing "
                                                           "(podDeletion's settings govern the GPU pod eviction)")
        for key, ours in pairs:
            drain_value = s.peek(f"driver.upgradePolicy.drain.{key}")
            deletion_value = s.get(f"driver.upgradePolicy.podDeletion.{key}") if isinstance(deletion, dict) else None
            if drain_on or deletion_value is None:
                s.use(f"driver.upgradePolicy.drain.{key}")
                drain[ours] = drain_value
                if deletion_value is not None and deletion_value != drain_value:
                    self.report(f"spec.driver.upgradePolicy.podDeletion.{key}", deletion_value,
                                f"gpu-stack's driver manager evicts GPU pods and drains with one {ours} setting; it "
                                f"takes the drain's ({_show(drain_value)})")
            else:
                # Without a drain these settings only govern the GPU pod eviction, which is what podDeletion set.
                drain[ours] = deletion_value
        selector = s.peek("driver.upgradePolicy.drain.podSelector")
        if not drain_on:
            s.without_effect("driver.upgradePolicy.drain.podSelector", "drain.enable is false: the upgrade controller drains nothing")
        if drain_on and selector:
            s.use("driver.upgradePolicy.drain.podSelector")
            drain["podSelector"] = selector
        self.put("upgrade.drain", drain, origin="spec.driver.upgradePolicy.drain")

    def _wait_for_completion(self, wait: dict[str, Any]) -> None:
        """upgrade.waitForCompletion runs as a node agent step, which every agent the configuration admits has (an
        older --node-agent-image is refused by nodeAgent.image when the result is checked)."""
        self.put("upgrade.waitForCompletion", wait, origin="spec.driver.upgradePolicy.waitForCompletion")

    def _manager_env(self, env: Mapping[str, Any], *, superseded: bool) -> None:
        s = self.spec
        if superseded:
            for name in env:
                if name in DRIVER_MANAGER_ENV_DEFAULTS:
                    s.use_env("driver.manager.env", name)
                    self.report(f"spec.driver.manager.env[{name}]", env[name],
                                "superseded in the operator while autoUpgrade is true (the upgrade controller evicts and "
                                "drains); gpu-stack takes these settings from upgradePolicy")
            return
        values = {**DRIVER_MANAGER_ENV_DEFAULTS, **{k: str(v) for k, v in env.items() if k in DRIVER_MANAGER_ENV_DEFAULTS}}
        for name in env:
            if name in DRIVER_MANAGER_ENV_DEFAULTS:
                s.use_env("driver.manager.env", name)
        origin = "spec.driver.manager.env"
        self.put("upgrade.gpuPodEviction", truthy(values["ENABLE_GPU_POD_EVICTION"]), origin=origin)
        drain: dict[str, Any] = {
            "enabled": truthy(values["ENABLE_AUTO_DRAIN"]),
            "force": truthy(values["DRAIN_USE_FORCE"]),
            "timeoutSeconds": _seconds(values["DRAIN_TIMEOUT_SECONDS"], "spec.driver.manager.env[DRAIN_TIMEOUT_SECONDS]"),
            "deleteEmptyDirData": truthy(values["DRAIN_DELETE_EMPTYDIR_DATA"]),
        }
        if values["DRAIN_POD_SELECTOR_LABEL"]:
            drain["podSelector"] = values["DRAIN_POD_SELECTOR_LABEL"]
        self.put("upgrade.drain", drain, origin=origin)


def _seconds(value: str, where: str) -> int:
    """A Go duration or plain seconds, as k8s-driver-manager's DRAIN_TIMEOUT_SECONDS takes it."""
    text = value.strip()
    # [0-9], not \d or isdigit(): those take any Unicode digit, which no Go duration has.
    if re.fullmatch(r"[0-9]{1,9}", text):
        return int(text)
    match = re.fullmatch(r"(?:([0-9]{1,9})h)?(?:([0-9]{1,9})m)?(?:([0-9]{1,9})s)?", text)
    if not text or not match:
        raise ImportInputError(f"{where}: {shown_input(value)} is not a duration such as 300s or 5m")
    h, m, s = (int(g or 0) for g in match.groups())
    return h * 3600 + m * 60 + s
