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
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.config import set_all_config

PROJECT_DIR = Path(__file__).resolve().parent.parent
PROJECT = "gpu-stack"
# Wire markers the SDK puts around secrets and unknowns (pulumi/runtime/rpc.py).
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


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

    @property
    def is_kubernetes_object(self) -> bool:
        return self.custom and self.type.startswith("kubernetes:") and "helm.sh" not in self.type


@dataclass
class Recording:
    stack: str
    preview: bool
    registrations: list[Registration]
    outputs: dict[str, Any]

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
    try:
        os.chdir(program_dir)
        _execute(str(program_dir / "__main__.py"))
        outputs = _stack_outputs()
    finally:
        os.chdir(previous_cwd)
        set_all_config({}, [])
        asyncio.set_event_loop(None)
        loop.close()
    return Recording(stack=stack, preview=preview, registrations=monitor.registrations, outputs=outputs)


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
