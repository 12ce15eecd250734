"""Run the real `__main__.py` under Pulumi's mock runtime and record every registration.

The Pulumi CLI and engine are not available offline, so this is the engine's stand-in: the program registers
resources exactly as it would under `pulumi up`, and a MockMonitor subclass records what the engine would see:
type, name, parent, dependencies and inputs (MockResourceArgs alone carries neither parent nor dependencies).
"""

from __future__ import annotations

import asyncio
import os
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Optional

import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import resource_cycle_breaker
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.config import set_all_config

PROJECT_DIR = Path(__file__).resolve().parent.parent
PROJECT = "gpu-stack"
ROOT_STACK_TYPE = "pulumi:pulumi:Stack"
# Wire markers the SDK puts around secrets and unknowns (pulumi/runtime/rpc.py).
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
# The program's record of which stack key set each field (components/kit/sources.py `current()`), read by module
# name: this module imports nothing of the project, and a program without one (an older version) records none.
SOURCES_MODULE = "components.kit.sources"


def _reachable(from_resource: Any, to_resource: Any) -> bool:
    """The SDK's cycle check (`resource_cycle_breaker._reachable`: is `to_resource` among `from_resource`'s transitive
    dependencies?), walked with a stack instead of nested generators. Same answer for every graph; the SDK's
    recursion was a third of each render here (a ~500-object stack declares ~1,300 dependencies, each walking the
    graph again)."""
    seen: set = set()
    pending = [from_resource]
    while pending:
        current = pending.pop()
        if current == to_resource:
            return True
        if current in seen:
            continue
        seen.add(current)
        pending.extend(resource_cycle_breaker._deps(current))
    return False


resource_cycle_breaker._reachable = _reachable


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    parent: str
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    custom: bool
    provider: str
    inputs: dict[str, Any]
    secret_paths: list[str] = field(default_factory=list)
    # The resource options the engine acts on when the program changes: what an old URN is now called, what it
    # refuses to delete, what it leaves in the cluster, and how it replaces.
    aliases: list[str] = field(default_factory=list)
    protect: bool = False
    retain_on_delete: bool = False
    delete_before_replace: bool = False
    replace_on_changes: list[str] = field(default_factory=list)

    @property
    def is_kubernetes_object(self) -> bool:
        return self.custom and self.type.startswith("kubernetes:") and "helm.sh" not in self.type


@dataclass
class Recording:
    stack: str
    preview: bool
    registrations: list[Registration]
    outputs: dict[str, Any]
    # The source map's JSON form (SourceMap.as_json), or None when the program keeps none.
    sources: Optional[dict[str, Any]] = None

    def by_urn(self) -> dict[str, Registration]:
        return {r.urn: r for r in self.registrations}

    def find(self, type_: str, name: str) -> Registration:
        for r in self.registrations:
            if r.type == type_ and r.name == name:
                return r
        raise KeyError(f"{type_} {name} was not registered")


# What a secret looks like in everything the toolkit writes, as in `pulumi preview`.
MASKED = "[secret]"


def _masked(value: Any) -> Any:
    """Keys stay readable (and schema-checkable); every value under a secret is masked."""
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return MASKED


def _plain(value: Any, path: str, secrets: list[str]) -> Any:
    """Strip the SDK's wire markers; numbers stay as the engine sees them (floats) until rendering. A secret is
    masked right here, so no manifest, graph or policy report written from a recording can hold it."""
    if isinstance(value, dict):
        if value.get(_SIG_KEY) == _SECRET_SIG:
            secrets.append(path)
            return _masked(_plain(value.get("value"), path, []))
        return {k: _plain(v, f"{path}.{k}" if path else k, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, f"{path}[{i}]", secrets) for i, v in enumerate(value)]
    if value == _UNKNOWN:
        return None
    return value


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """Records every RegisterResource request in order, with parent and dependency URNs."""

    def __init__(self, mocks: pulumi_mocks.Mocks):
        super().__init__(mocks)
        self.registrations: list[Registration] = []

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        """The URN the engine gives a resource: its type prefixed by its parent's whole qualified type (the mock's
        own keeps only the parent's last type), the root stack's type left out. Aliases name old URNs this way, so
        a recording must too for an offline plan to match them."""
        if parent:
            qualified = parent.split("::")[2]
            if qualified != ROOT_STACK_TYPE:
                type_ = f"{qualified}${type_}"
        return "urn:pulumi:" + "::".join([pulumi.get_stack(), pulumi.get_project(), type_, name])

    def GetDeploymentInfo(self, request):  # noqa: N802 - gRPC method name
        # Without alias specs the SDK sends every alias as the full URN it stands for, its parent's aliases
        # included (pulumi.resource.all_aliases): the same identities the engine would match against state.
        info = super().GetDeploymentInfo(request)
        features = [f for f in info.supportedFeatures if f != resource_pb2.RESOURCE_MONITOR_FEATURE_ALIAS_SPECS]
        return resource_pb2.DeploymentInfo(supportedFeatures=features)

    def RegisterResource(self, request):  # noqa: N802 - gRPC method name
        response = super().RegisterResource(request)
        secrets: list[str] = []
        inputs = _plain(json_format.MessageToDict(request.object), "", secrets)
        self.registrations.append(
            Registration(
                urn=response.urn,
                type=request.type,
                name=request.name,
                parent=request.parent,
                dependencies=list(request.dependencies),
                property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
                custom=request.custom,
                provider=request.provider,
                inputs=inputs,
                secret_paths=secrets,
                aliases=[a.urn for a in request.aliases if a.urn] + list(request.aliasURNs),
                protect=request.protect,
                retain_on_delete=request.retainOnDelete,
                delete_before_replace=request.deleteBeforeReplace,
                replace_on_changes=list(request.replaceOnChanges),
            )
        )
        return response


class EchoMocks(pulumi_mocks.Mocks):
    """Every resource comes back with its inputs as outputs, as a provider's create would return them."""

    def new_resource(self, args: pulumi_mocks.MockResourceArgs):
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi_mocks.MockCallArgs):
        return {}


def run_program(
    stack: str,
    config: dict[str, str],
    *,
    secret_keys: Collection[str] = (),
    preview: bool = False,
    program_dir: Path = PROJECT_DIR,
) -> Recording:
    """Execute the Pulumi program once, in-process, with `config` as the stack's config bag and `secret_keys`
    marked secret as the CLI marks them."""
    if str(program_dir) not in sys.path:
        sys.path.insert(0, str(program_dir))
    # A fresh event loop and root stack per run: the SDK keeps both in globals.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    pulumi_settings.reset_options(project=PROJECT, stack=stack, preview=preview)
    monitor = RecordingMonitor(EchoMocks())
    pulumi_mocks.set_mocks(EchoMocks(), project=PROJECT, stack=stack, preview=preview, monitor=monitor)
    set_all_config(dict(config), list(secret_keys))
    previous_cwd = os.getcwd()
    before = _source_map()
    try:
        os.chdir(program_dir)
        _execute(str(program_dir / "__main__.py"))
        outputs = _stack_outputs()
        after = _source_map()
        sources = after.as_json() if after is not None and after is not before else None
    finally:
        os.chdir(previous_cwd)
        set_all_config({}, [])
        asyncio.set_event_loop(None)
        loop.close()
    return Recording(stack=stack, preview=preview, registrations=monitor.registrations, outputs=outputs, sources=sources)


def _source_map() -> Any:
    module = sys.modules.get(SOURCES_MODULE)
    current = getattr(module, "current", None)
    return current() if callable(current) else None


@pulumi.runtime.test
def _execute(main: str) -> None:
    runpy.run_path(main, run_name="__main__")


def _stack_outputs() -> dict[str, Any]:
    root = pulumi_settings.get_root_resource()
    outputs: dict[str, Any] = {}
    if root is None:
        return outputs
    loop = asyncio.get_event_loop()
    for name, value in getattr(root, "outputs", {}).items():
        outputs[name] = loop.run_until_complete(_resolve(value))
    return outputs


async def _resolve(value: Any) -> Optional[Any]:
    output = pulumi.Output.from_input(value)
    known = await output.is_known()
    if not known:
        return None
    return _plain(await output.future(), "", [])


# --- a recording as data, and this module as a standalone runner -------------------------------------------------
#
# `gpustack diff --base <git ref>` renders the base side with the program as it was at that ref. Its modules
# (components, ...) share names with today's, so the base runs in a process of its own: this file, copied
# outside the repository, run with the base tree as its program directory, writing the recording as JSON. It
# imports nothing of the project, so any version of the program can be recorded by it.


def recording_to_json(recording: Recording) -> dict[str, Any]:
    return {
        "stack": recording.stack,
        "preview": recording.preview,
        "outputs": recording.outputs,
        "registrations": [vars(r) for r in recording.registrations],
        "sources": recording.sources,
    }


def recording_from_json(data: dict[str, Any]) -> Recording:
    return Recording(
        stack=data["stack"],
        preview=data["preview"],
        registrations=[Registration(**r) for r in data["registrations"]],
        outputs=data.get("outputs") or {},
        sources=data.get("sources"),
    )


def stack_file_bag(document: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """A parsed `Pulumi.<stack>.yaml` as the CLI hands it to the program: every value a string, objects as JSON;
    encrypted values (`{secure: ...}`, at the top or inside as `--secret --path` writes them) masked and their key
    marked secret, since nothing offline can decrypt them (components/config/loader.py stack_file_config does the
    same; this module imports nothing of the project)."""
    import json

    def masked(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"secure"}:
            return MASKED
        if isinstance(value, dict):
            return {k: masked(v) for k, v in value.items()}
        if isinstance(value, list):
            return [masked(v) for v in value]
        return value

    bag: dict[str, str] = {}
    secret: list[str] = []
    for key, given in (document.get("config") or {}).items():
        value = masked(given)
        if value != given:
            secret.append(key)
        if isinstance(value, str):
            bag[key] = value
        elif isinstance(value, bool):
            bag[key] = "true" if value else "false"
        else:
            bag[key] = json.dumps(value)
    return bag, secret


def _main(argv: Optional[list[str]] = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(description="record one stack of the Pulumi program in --program-dir as JSON")
    parser.add_argument("--program-dir", required=True, type=Path)
    parser.add_argument("--stack", required=True)
    # The config bag as gpustack diff read it from the stack file (guarded loader): {"config": {...}, "secretKeys": [...]}.
    parser.add_argument("--bag", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    given = json.loads(args.bag.read_text(encoding="utf-8"))
    bag, secret = given["config"], given["secretKeys"]
    recording = run_program(args.stack, bag, secret_keys=secret, program_dir=args.program_dir.resolve())
    args.out.write_text(json.dumps(recording_to_json(recording)))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
