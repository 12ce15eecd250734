"""docs/stack.schema.json: generated from the config models, fresh, and agreeing with load_config on every stack."""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import jsonschema
import pytest
from stacktest import ROOT, STACKS, bag, stack_document

from components.config import ConfigError, load_config
from gpustack import __main__ as cli
from gpustack import stack_schema


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(stack_schema.SCHEMA_PATH.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def problems(validator: jsonschema.Draft7Validator, document: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def test_the_committed_schema_is_what_the_models_generate():
    assert not stack_schema.stale(), "docs/stack.schema.json is stale: run `python -m gpustack stack-schema` and commit it"


def test_stack_schema_check_exits_1_on_a_stale_file(tmp_path, monkeypatch, capsys):
    path = tmp_path / "stack.schema.json"
    path.write_text("{}\n")
    monkeypatch.setattr(stack_schema, "SCHEMA_PATH", path)
    assert cli.main(["stack-schema", "--check"]) == 1 and "stale" in capsys.readouterr().out
    assert cli.main(["schema"]) == 0 and cli.main(["stack-schema", "--check"]) == 0
    assert path.read_text() == stack_schema.render()


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_file_validates(validator, stack):
    assert problems(validator, stack_document(stack)) == []


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_file_names_the_schema_on_its_first_line(stack):
    first = (ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text().splitlines()[0]
    assert first == stack_schema.MODELINE
    assert (ROOT / "stacks" / stack_schema.MODELINE.split("$schema=", 1)[1]).resolve() == stack_schema.SCHEMA_PATH


def test_every_constraint_names_a_key_the_models_have():
    paths = [path for path, _, _ in stack_schema.walk(stack_schema.model_schema())]
    stale = sorted(set(stack_schema.constraints(paths)) - set(paths))
    assert not stale, f"gpustack/stack_schema.py constrains keys StackConfig does not have any more: {stale}"


def test_a_wrong_enum_value_is_refused(validator):
    document = stack_document("dev")
    document["config"]["gpu-stack:driver"] = {"mode": "compiled"}
    found = problems(validator, document)
    assert len(found) == 1 and found[0].startswith("config/gpu-stack:driver/mode: 'compiled' is not one of")


def test_unknown_gpu_stack_keys_are_refused_and_other_namespaces_pass(validator):
    document = stack_document("dev")
    document["config"]["kubernetes:context"] = "kind-gpu-dev"
    document["config"]["pulumi:tags"] = {"team": "platform"}
    assert problems(validator, document) == []
    document["config"]["gpu-stack:nodepools"] = []
    assert problems(validator, document) != []
    del document["config"]["gpu-stack:nodepools"]
    document["config"]["gpu-stack:cluster"]["contxt"] = "x"
    assert any("contxt" in p for p in problems(validator, document))


def test_a_secret_is_taken_only_encrypted(validator):
    node = stack_schema.stack_file_schema()["properties"]["config"]["properties"]["gpu-stack:registryPassword"]
    assert node["writeOnly"] is True and node["x-secret"] is True
    assert "pulumi config set --secret registryPassword" in node["description"]
    document = stack_document("dev")
    document["config"]["gpu-stack:registry"] = {"credentials": {"server": "nvcr.io", "username": "$oauthtoken"}}
    document["config"]["gpu-stack:registryPassword"] = {"secure": "v1:Zm9yYmlkZGVu"}
    assert problems(validator, document) == []
    document["config"]["gpu-stack:registryPassword"] = "plain-text"
    assert problems(validator, document) != []


def test_the_schema_carries_descriptions_defaults_and_catalog_enums():
    config = stack_schema.stack_file_schema()["properties"]["config"]
    assert config["required"] == ["gpu-stack:cluster", "gpu-stack:nodePools"]
    validation = config["properties"]["gpu-stack:validation"]["properties"]
    assert validation["mode"]["enum"] == ["strict", "advisory", "off"] and validation["mode"]["default"] == "strict"
    assert validation["timeoutSeconds"]["minimum"] == 60 and validation["timeoutSeconds"]["description"]
    pool = config["properties"]["gpu-stack:nodePools"]["items"]["properties"]
    assert "A100-80GB" in pool["gpuModel"]["enum"]
    assert "$ref" not in json.dumps(config) and '"title"' not in json.dumps(config)


Edit = Callable[[dict[str, Any]], None]


def _set(section: str, key: str, value: Any) -> Edit:
    return lambda config: config.setdefault(f"gpu-stack:{section}", {}).__setitem__(key, value)


def _pool(key: str, value: Any) -> Edit:
    return lambda config: config["gpu-stack:nodePools"][0].__setitem__(key, value)


# (edit of the dev stack, whether load_config takes it): the schema must say the same for each key on its own.
AGREEMENT = [
    ("driver mode", _set("driver", "mode", "compiled"), False),
    ("cluster name upper-case", lambda c: c["gpu-stack:cluster"].__setitem__("name", "Dev"), False),
    ("kubernetes version with v and patch", lambda c: c["gpu-stack:cluster"].__setitem__("kubernetesVersions", ["v1.33.2"]), True),
    ("kubernetes version unknown", lambda c: c["gpu-stack:cluster"].__setitem__("kubernetesVersions", ["1.12"]), False),
    ("maxUnavailable percent", _set("daemonsets", "maxUnavailable", "10%"), True),
    ("maxUnavailable digits as a string", _set("daemonsets", "maxUnavailable", "1"), False),
    ("maxUnavailable zero", _set("daemonsets", "maxUnavailable", 0), False),
    ("image tag latest", _set("versions", "toolkit", "latest"), False),
    ("image digest", _set("versions", "toolkit", "sha256:" + "a" * 64), True),
    ("driver version", _set("versions", "driver", "580.126.20"), True),
    ("driver version without patch digits", _set("versions", "driver", "r580"), False),
    ("gpu model", _pool("gpuModel", "A100"), False),
    ("os tag", _pool("os", "ubuntu"), False),
    ("pool name too long", _pool("name", "p" * 41), False),
    ("label value", _set("daemonsets", "labels", {"team": "gpu platform"}), False),
    ("prometheus duration", lambda c: c.setdefault("gpu-stack:monitoring", {}).__setitem__("serviceMonitor", {"interval": "30 s"}), False),
    ("timeout out of bounds", _set("validation", "timeoutSeconds", 30), False),
    ("strict boolean", _set("toolkit", "cdi", "yes"), False),
]


@pytest.mark.parametrize("name,edit,accepted", AGREEMENT, ids=[a[0] for a in AGREEMENT])
def test_the_schema_agrees_with_load_config_key_by_key(validator, name, edit, accepted):
    document = copy.deepcopy(stack_document("dev"))
    edit(document["config"])
    try:
        load_config(bag(document["config"]))
        loaded = True
    except ConfigError:
        loaded = False
    assert loaded is accepted, name
    assert (problems(validator, document) == []) is accepted, name
