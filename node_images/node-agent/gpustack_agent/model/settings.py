"""The agent's settings: each subcommand's environment variables, read and bounded before anything else runs. Every
mode is started from a pod spec the Pulumi program generates, where env (with the downward API for NODE_NAME) is
the natural interface; a missing or malformed one is a SettingsError naming it, and the process exits 2."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from gpustack_agent.api import kube
from gpustack_agent.gate import gate
from gpustack_agent.model import labelcheck, labels

DEFAULT_CONFIG_FILE = "/etc/gpu-stack/node-pools.json"
DEFAULT_RESYNC_SECONDS = 60
DEFAULT_POLL_SECONDS = 10
SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# The API server bounds nothing, but a selector this long is a template gone wrong, not a selector.
MAX_POD_SELECTOR_LENGTH = 1024
# Upper bound of every seconds setting: a week, far above what the Pulumi program writes (a day at most); beyond
# it is a typo, and a sleep that long overflows the platform's timer.
MAX_SECONDS = 7 * 24 * 3600
# Upper bound of an EXPECTED_NODES count, far above any fleet.
MAX_EXPECTED_NODES = 1_000_000


class SettingsError(ValueError):
    """An environment variable is missing or malformed."""


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise SettingsError(f"{name} must be set")
    return value


def _int(env: Mapping[str, str], name: str, default: int | None, minimum: int, maximum: int = MAX_SECONDS) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        if default is None:
            raise SettingsError(f"{name} must be set")
        return default
    try:
        # More digits than the maximum has is out of range without converting (a huge string is slow to convert).
        value = int(raw) if len(raw) <= len(str(maximum)) + 1 else maximum + 1
    except ValueError:
        raise SettingsError(f"{name} must be an integer, got {labelcheck.shown(repr(raw))}") from None
    if not minimum <= value <= maximum:
        raise SettingsError(f"{name} must be from {minimum} to {maximum}, got {labelcheck.shown(raw)}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    # Only the two spellings the Pulumi program writes: a typo such as "ture" must
    # not quietly leave the VM nodes unjudged.
    if raw not in ("true", "false"):
        raise SettingsError(f"{name} must be true or false, got {raw!r}")
    return raw == "true"


def _name_list(env: Mapping[str, str], name: str, is_valid: Callable[[str], bool], kind: str) -> tuple[str, ...]:
    raw = env.get(name, "").strip()
    if not raw:
        return ()
    entries = [entry.strip() for entry in raw.split(",")]
    # An empty entry is usually a name the generating template failed to fill in;
    # skipping it would quietly judge less than the wave it was meant for.
    if "" in entries:
        raise SettingsError(f"{name} has an empty entry: {raw!r}")
    for entry in entries:
        if not is_valid(entry):
            raise SettingsError(f"{name} entry {entry!r} is not a valid {kind}")
    duplicates = sorted({entry for entry in entries if entries.count(entry) > 1})
    if duplicates:
        raise SettingsError(f"{name} names {', '.join(duplicates)} more than once")
    return tuple(entries)


def _expected_nodes(env: Mapping[str, str], pools: Sequence[str]) -> tuple[tuple[str, int], ...]:
    raw = env.get("EXPECTED_NODES", "").strip()
    if not raw:
        return ()
    expected: list[tuple[str, int]] = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            raise SettingsError(f"EXPECTED_NODES has an empty entry: {raw!r}")
        pool, equals, count = (part.strip() for part in entry.partition("="))
        if not equals:
            raise SettingsError(f"EXPECTED_NODES entry {entry!r} is not pool=count: {raw!r}")
        if not pool or not labels.is_label_value(pool):
            raise SettingsError(f"EXPECTED_NODES entry {entry!r}: {pool!r} is not a valid pool name (label value)")
        if not count.isdigit() or not count.isascii() or len(count) > 7 or int(count) > MAX_EXPECTED_NODES:
            raise SettingsError(f"EXPECTED_NODES entry {labelcheck.shown(repr(entry))}: the count must be an integer "
                                f"from 0 to {MAX_EXPECTED_NODES}")
        if any(pool == seen for seen, _ in expected):
            raise SettingsError(f"EXPECTED_NODES names {pool} more than once")
        # A pool POOLS leaves out is never judged, so the gate could only ever time out.
        if pools and pool not in pools:
            raise SettingsError(f"EXPECTED_NODES names pool {pool}, which POOLS ({', '.join(pools)}) leaves out")
        expected.append((pool, int(count)))
    return tuple(expected)


def _is_object_name(value: str) -> bool:
    # A malformed name can never exist, so the gate would report "not found" until
    # its timeout instead of failing at once.
    return labelcheck.is_object_name(value)


@dataclass(frozen=True)
class LabelSettings:
    node_name: str
    config_file: str
    resync_seconds: int

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "LabelSettings":
        return cls(
            node_name=_required(env, "NODE_NAME"),
            config_file=env.get("CONFIG_FILE", "").strip() or DEFAULT_CONFIG_FILE,
            resync_seconds=_int(env, "RESYNC_SECONDS", DEFAULT_RESYNC_SECONDS, 1),
        )


@dataclass(frozen=True)
class CoordinateSettings:
    config_file: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "CoordinateSettings":
        return cls(config_file=env.get("CONFIG_FILE", "").strip() or DEFAULT_CONFIG_FILE)


@dataclass(frozen=True)
class GateSettings:
    namespace: str
    timeout_seconds: int
    poll_seconds: int
    mode: str
    job_name: str
    job_namespace: str
    pools: tuple[str, ...] = ()
    driver_daemonsets: tuple[str, ...] = ()
    validator_daemonsets: tuple[str, ...] = ()
    sandbox_validator: bool = False
    dra_validator: bool = False
    expected_nodes: tuple[tuple[str, int], ...] = ()
    termination_message_path: str = kube.DEFAULT_TERMINATION_MESSAGE_PATH

    @classmethod
    def from_env(cls, env: Mapping[str, str], own_namespace: Callable[[], str | None]) -> "GateSettings":
        namespace = _required(env, "NAMESPACE")
        mode = _required(env, "MODE")
        if mode not in gate.MODES:
            raise SettingsError(f"MODE must be one of {', '.join(gate.MODES)}, got {mode!r}")
        # The Job may live outside the operator's namespace; the pod's own namespace
        # is where its Job is, and NAMESPACE is only a last resort outside a cluster.
        job_namespace = env.get("JOB_NAMESPACE", "").strip() or own_namespace() or namespace
        pools = _name_list(env, "POOLS", labels.is_label_value, "label value")
        return cls(
            namespace=namespace,
            timeout_seconds=_int(env, "TIMEOUT_SECONDS", None, 0),
            poll_seconds=_int(env, "POLL_SECONDS", DEFAULT_POLL_SECONDS, 1),
            mode=mode,
            job_name=_required(env, "JOB_NAME"),
            job_namespace=job_namespace,
            pools=pools,
            driver_daemonsets=_name_list(env, "DRIVER_DAEMONSETS", _is_object_name, "DaemonSet name"),
            validator_daemonsets=_name_list(env, "VALIDATOR_DAEMONSETS", _is_object_name, "DaemonSet name"),
            sandbox_validator=_bool(env, "SANDBOX_VALIDATOR", False),
            dra_validator=_bool(env, "DRA_VALIDATOR", False),
            expected_nodes=_expected_nodes(env, pools),
            termination_message_path=(env.get("TERMINATION_MESSAGE_PATH", "").strip()
                                      or kube.DEFAULT_TERMINATION_MESSAGE_PATH),
        )


@dataclass(frozen=True)
class WaitSettings:
    node_name: str
    pod_selector: str
    timeout_seconds: int
    own_pod: tuple[str, str] | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "WaitSettings":
        selector = _required(env, "WAIT_POD_SELECTOR")
        # An empty selector would wait for every pod on the node, DaemonSets included, i.e. always to the timeout;
        # the Pulumi program validates the selector's syntax, and the API server answers 400 to a bad one.
        if len(selector) > MAX_POD_SELECTOR_LENGTH:
            raise SettingsError(f"WAIT_POD_SELECTOR is longer than {MAX_POD_SELECTOR_LENGTH} characters")
        pod_name, pod_namespace = env.get("POD_NAME", "").strip(), env.get("POD_NAMESPACE", "").strip()
        return cls(
            node_name=_required(env, "NODE_NAME"),
            pod_selector=selector,
            timeout_seconds=_int(env, "WAIT_TIMEOUT_SECONDS", 0, 0),
            own_pod=(pod_namespace, pod_name) if pod_name and pod_namespace else None,
        )


def read_own_namespace(path: str = SERVICE_ACCOUNT_NAMESPACE_FILE) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None

