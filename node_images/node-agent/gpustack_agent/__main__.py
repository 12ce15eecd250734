"""Command line entry point:
``python -m gpustack_agent {label,inventory,coordinate,wait-validated,wait-for-completion}``.

Settings come from environment variables rather than flags because every mode is
started from pod specs that the Pulumi program generates, where env (with the
downward API for NODE_NAME) is the natural interface. Exit codes: 0 success,
1 failure (fatal API error, or strict validation failed), 2 bad settings,
143 stopped by SIGTERM before the gate reached a verdict (or before
``wait-for-completion`` ended its wait).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import traceback
from types import FrameType
from typing import Any, Callable, Mapping, Sequence

import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gpustack_agent.api import kube
from gpustack_agent.coordinate import coordinate, coordinator
from gpustack_agent.gate import gate, job
from gpustack_agent.inventory import inventory, loop
from gpustack_agent.label import labelloop, pacer
from gpustack_agent.model import configfile, labelcheck, labels
from gpustack_agent.model.settings import (DEFAULT_CONFIG_FILE, DEFAULT_POLL_SECONDS, DEFAULT_RESYNC_SECONDS, CoordinateSettings,
                                           GateSettings, LabelSettings, SettingsError, WaitSettings, read_own_namespace)
from gpustack_agent.wait import completion

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_TERMINATED = 0, 1, 2, 143
read_config = configfile.read_config
LABEL_HELP = f"""environment:
  NODE_NAME        (required) the node this pod runs on, from the downward API
  CONFIG_FILE      node-pools config, re-read on every reconcile (default {DEFAULT_CONFIG_FILE})
  RESYNC_SECONDS   watch timeout, i.e. how often config changes are picked up (default {DEFAULT_RESYNC_SECONDS});
                   while the node holds a slot it watches its own pods instead, for at most
                   {pacer.HOLD_WATCH_SECONDS} s at a time

A config that cannot be used at startup exits 2; one that turns bad later is logged and the last good one kept.
Failures (API errors, a watch the server ends at once) are retried after a growing, jittered pause of at most 30 s.

With config version 2 or 3, deploy label removals, driver handovers and MIG relayouts wait for
GPU work to end (or drain it) and for a slot of the fleet's budget (`removal.maxUnavailable`),
the ConfigMap gpu-stack-upgrade-budget in `removal.namespace`; with version 3 and
`driverUpgrade: rolling` the agent also replaces its node's outdated driver pod within it.
"""
INVENTORY_HELP = f"""environment:
  NODE_NAME        (required) the node this pod runs on, from the downward API
  CONFIG_FILE      node-pools config, re-read on every pass (default {DEFAULT_CONFIG_FILE})
  RESYNC_SECONDS   seconds between NVML reads (default {DEFAULT_RESYNC_SECONDS})

The container needs NVML: the NVIDIA runtime with NVIDIA_VISIBLE_DEVICES=all and
NVIDIA_DRIVER_CAPABILITIES=utility, or the driver's libraries and /dev/nvidia* mounted.
"""
COORDINATE_HELP = f"""environment:
  CONFIG_FILE      node-pools config, re-read every {coordinator.TICK_SECONDS:g} s (default {DEFAULT_CONFIG_FILE});
                   its `removal` block is the budget, `removal.namespace` where the budget ConfigMap
                   and the driver DaemonSets are

Grants the fleet's disruption budget (the ConfigMap gpu-stack-upgrade-budget) to the nodes that
need it, first come first served: nodes whose agents asked (gpu-stack/slot-request) and nodes
whose driver pod is older than their DaemonSet's newest revision (gpu-stack/driver-revision).
A document without `removal` (version 1) has nothing to coordinate: exit 2.
"""
GATE_HELP = f"""environment:
  NAMESPACE        (required) namespace of the nvidia-operator-validator pods
  TIMEOUT_SECONDS  (required) give up after this many seconds
  POLL_SECONDS     seconds between polls (default {DEFAULT_POLL_SECONDS})
  MODE             (required) strict: exit 1 unless validated; advisory: always exit 0
  JOB_NAME         (required) the Job to annotate with {gate.RESULT_ANNOTATION}
  JOB_NAMESPACE    the Job's namespace (default: this pod's own namespace)
  POOLS            comma-separated node pools (gpu-stack/pool values) to judge (default: all GPU nodes)
  DRIVER_DAEMONSETS
                   comma-separated DaemonSets in NAMESPACE that must also have finished
                   their rollout (default: none)
  VALIDATOR_DAEMONSETS
                   comma-separated validator DaemonSets in NAMESPACE whose rollout (unless
                   OnDelete) must have finished, so no old-template validator vouches (default: none)
  SANDBOX_VALIDATOR
                   true: also judge VM nodes (nvidia.com/gpu.deploy.sandbox-validator=true)
                   by their nvidia-sandbox-validator pods in NAMESPACE (default: false)
  DRA_VALIDATOR    true: also judge DRA nodes (nvidia.com/gpu.deploy.dra-validator=true) by their
                   DRA validator pods, which carry the operator validator's app label (default: false)
  EXPECTED_NODES   comma-separated pool=count: each such pool needs at least count validated
                   nodes (default: none); with POOLS, only pools POOLS names
  TERMINATION_MESSAGE_PATH
                   file the verdict is also written to, cut to 4096 bytes
                   (default {kube.DEFAULT_TERMINATION_MESSAGE_PATH})

Cordoned and NotReady nodes are skipped. A validator or driver pod that cannot start
(CrashLoopBackOff, ImagePullBackOff, ...) fails the gate once it restarted between two polls
or kept failing for {gate.FAILURE_CONFIRM_SECONDS} s.
In strict mode only `validated` exits 0; judging no GPU node at all is a failure there.
"""
WAIT_HELP = f"""environment:
  NODE_NAME        (required) the node this pod runs on, from the downward API
  WAIT_POD_SELECTOR
                   (required) label selector of the pods to wait for, on this node, in every namespace
  WAIT_TIMEOUT_SECONDS
                   stop waiting after this many seconds; 0 waits until they completed (default 0)
  POD_NAME, POD_NAMESPACE
                   this pod (downward API), never waited for even if the selector matches it

Taints the node ({completion.HOLD_TAINT_KEY}:NoSchedule), so no new pod lands on it,
waits until no matching pod on it is still running (phase not Succeeded/Failed) or the timeout
passed, then lifts its own taint; a cordon set meanwhile stays. Exit 0 when the wait ended; 1 when the API could not be
reached within the timeout, or refused a request (the kubelet restarts the init container).
"""


class Shutdown(BaseException):
    """Raised from the SIGTERM handler. A BaseException so that no `except Exception`
    on the way up swallows it, and raised (not just flagged) so that a watch blocked
    on a socket read stops now rather than after RESYNC_SECONDS, which is longer
    than the default termination grace period."""


def _config_source(config_file: str, node_name: str, command: str) -> configfile.ConfigSource | None:
    """The config of a `label`, `inventory` or `coordinate` run, read once before the loop starts: a document that
    cannot be used at startup is a bad setting (None, exit 2); one that turns bad later keeps the last good one."""
    source = configfile.ConfigSource(config_file, node_name=node_name, log=log_json)
    try:
        source.load()
    except labels.ConfigError as exc:
        log_json({"level": "error", "event": "config-invalid", "command": command, "node": node_name,
                  "error": str(exc)})
        return None
    return source


def log_json(record: dict[str, Any]) -> None:
    """One JSON object per line: label changes and progress to stdout, warnings and
    errors to stderr, so the gate's verdict is easy to pick out of the Job log."""
    line = json.dumps(
        {"ts": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **record},
        separators=(",", ":"),
    )
    stream = sys.stdout if record.get("level", "info") == "info" else sys.stderr
    print(line, file=stream, flush=True)


def print_line(line: str) -> None:
    print(line, flush=True)


def _on_sigterm(signum: int, _frame: FrameType | None) -> None:
    raise Shutdown()


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpustack_agent",
        description=("gpu-stack node agent: labels its own GPU node, reports its GPUs, gates on NVIDIA validation, "
                     "or lets a node's jobs finish before its driver is swapped."),
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{label,inventory,coordinate,wait-validated,wait-for-completion}"
    )
    commands.add_parser(
        "label",
        help="keep this node's GPU labels reconciled (DaemonSet)",
        epilog=LABEL_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands.add_parser(
        "inventory",
        help="annotate this node with its GPUs (NVML) and their drift from its pool (DaemonSet)",
        epilog=INVENTORY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands.add_parser(
        "coordinate",
        help="grant the fleet's disruption budget to nodes in the order they need it (Deployment)",
        epilog=COORDINATE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands.add_parser(
        "wait-validated",
        help="wait until every GPU node passed NVIDIA validation (Job)",
        epilog=GATE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands.add_parser(
        "wait-for-completion",
        help="wait for this node's matching pods to complete before its driver is swapped (driver init container)",
        epilog=WAIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


Clients = Callable[[], tuple[Any, Any, Any, Any]]


def run_label_agent(core: Any, apps: Any, *, node_name: str, load_config: Callable[[], Any], resync_seconds: int,
                    log: kube.Log, now: Callable[[], datetime.datetime] = pacer.utc_now, **loop: Any) -> None:
    """The `label` loop as the agent runs it: its Pacer wired to the loop's clock and randomness. The benchmark
    runs exactly this, with a fake API server, virtual time and green threads passed as ``loop``'s keywords
    (``clock``, ``rng``, ``sleep``, ``stop``, ``watch_events``, ``watch_pods``)."""
    reconcile = pacer.Pacer(core, apps, node_name=node_name, log=log, now=now,
                            **{k: loop[k] for k in ("clock", "rng") if k in loop})
    labelloop.run_label_loop(core, node_name=node_name, load_config=load_config, resync_seconds=resync_seconds, log=log,
                        reconcile=reconcile, **loop)


def _run_label(settings: LabelSettings, clients: Clients) -> int:
    source = _config_source(settings.config_file, settings.node_name, "label")
    if source is None:
        return EXIT_USAGE
    core, _, apps, _ = clients()
    log_json({"level": "info", "event": "starting", "command": "label", "node": settings.node_name,
              "configFile": settings.config_file, "resyncSeconds": settings.resync_seconds})
    run_label_agent(core, apps, node_name=settings.node_name, load_config=source.load,
                    resync_seconds=settings.resync_seconds, log=log_json)
    return EXIT_OK


def _run_coordinate(settings: CoordinateSettings, clients: Clients) -> int:
    source = _config_source(settings.config_file, "", "coordinate")
    if source is None:
        return EXIT_USAGE
    rules = source.load().removal
    if rules is None:
        log_json({"level": "error", "event": "config-invalid", "command": "coordinate",
                  "error": "a version 1 node-pools document has no `removal` budget to coordinate"})
        return EXIT_USAGE
    core, _, apps, _ = clients()
    log_json({"level": "info", "event": "starting", "command": "coordinate", "configFile": settings.config_file,
              "namespace": rules.namespace})
    try:
        coordinate.run(core, apps, namespace=rules.namespace, load_config=source.load, log=log_json)
    except coordinate.Fatal as exc:
        log_json({"level": "error", "event": "fatal", "command": "coordinate", "error": str(exc)})
        return EXIT_FAILED
    return EXIT_OK


def _run_inventory(settings: LabelSettings, clients: Clients) -> int:
    source = _config_source(settings.config_file, settings.node_name, "inventory")
    if source is None:
        return EXIT_USAGE
    core, _, _, _ = clients()
    log_json({"level": "info", "event": "starting", "command": "inventory", "node": settings.node_name,
              "configFile": settings.config_file, "resyncSeconds": settings.resync_seconds})
    loop.run_inventory_loop(
        core,
        node_name=settings.node_name,
        load_config=source.load,
        read_inventory=inventory.read_inventory,
        resync_seconds=settings.resync_seconds,
        log=log_json,
    )
    return EXIT_OK


def _run_wait(settings: WaitSettings, clients: Clients) -> int:
    core, _, _, _ = clients()
    log_json({"level": "info", "event": "starting", "command": "wait-for-completion", "node": settings.node_name,
              "podSelector": settings.pod_selector, "timeoutSeconds": settings.timeout_seconds})
    return completion.Waiter(
        core,
        node_name=settings.node_name,
        pod_selector=settings.pod_selector,
        timeout_seconds=settings.timeout_seconds,
        own_pod=settings.own_pod,
        log=log_json,
    ).run()


def _run_gate(settings: GateSettings, clients: Clients) -> int:
    core, batch, apps, _ = clients()
    return job.run_gate(
        core,
        batch,
        apps=apps,
        pools=settings.pools,
        driver_daemonsets=settings.driver_daemonsets,
        validator_daemonsets=settings.validator_daemonsets,
        sandbox_validator=settings.sandbox_validator,
        dra_validator=settings.dra_validator,
        expected_nodes=dict(settings.expected_nodes),
        termination_message_path=settings.termination_message_path,
        namespace=settings.namespace,
        job_namespace=settings.job_namespace,
        job_name=settings.job_name,
        timeout_seconds=settings.timeout_seconds,
        poll_seconds=settings.poll_seconds,
        mode=settings.mode,
        log=log_json,
        out=print_line,
    )


def main(
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    clients: Clients = kube.load_clients,
    own_namespace: Callable[[], str | None] = read_own_namespace,
) -> int:
    args = _build_parser().parse_args(argv)
    env = os.environ if environ is None else environ
    settings: LabelSettings | GateSettings | WaitSettings | CoordinateSettings
    try:
        if args.command in ("label", "inventory"):
            settings = LabelSettings.from_env(env)
        elif args.command == "coordinate":
            settings = CoordinateSettings.from_env(env)
        elif args.command == "wait-for-completion":
            settings = WaitSettings.from_env(env)
        else:
            settings = GateSettings.from_env(env, own_namespace)
    except SettingsError as exc:
        log_json({"level": "error", "event": "bad-settings", "command": args.command, "error": str(exc)})
        return EXIT_USAGE

    # As PID 1 in a container, a signal with no handler installed is ignored, so
    # without this the pod would only die by SIGKILL at the end of the grace period.
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        if isinstance(settings, GateSettings):
            return _run_gate(settings, clients)
        if isinstance(settings, WaitSettings):
            return _run_wait(settings, clients)
        if isinstance(settings, CoordinateSettings):
            return _run_coordinate(settings, clients)
        if args.command == "inventory":
            return _run_inventory(settings, clients)
        return _run_label(settings, clients)
    except Shutdown:
        log_json({"level": "info", "event": "stopping", "command": args.command, "signal": "SIGTERM"})
        # A gate or a wait stopped before its end did not do its job; the label, inventory and coordinate loops did.
        return EXIT_TERMINATED if isinstance(settings, (GateSettings, WaitSettings)) else EXIT_OK
    except (ApiException, urllib3.exceptions.HTTPError, ConfigException) as exc:
        # Reached only for errors retrying cannot fix (e.g. 403, 404); failing makes
        # the pod's restarts visible instead of hiding the problem in a log.
        log_json({"level": "error", "event": "fatal", "command": args.command,
                  "error": f"{type(exc).__name__}: {exc}".strip()})
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 - a bug: still one JSON log line, with the traceback for a report
        log_json({"level": "error", "event": "crashed", "command": args.command,
                  "error": labelcheck.shown(f"{type(exc).__name__}: {exc}"),
                  "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))})
        return EXIT_FAILED
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
