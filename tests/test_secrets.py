"""Registry credentials: a Pulumi secret in stack config becomes the pull Secret every operand references, and
the password never appears in plain text in anything gpu-stack writes."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import ConfigError, load_config
from components.states.prerequisites import REGISTRY_SECRET, RegistryLogin, docker_config
from gpustack import render as rendering
from gpustack import schema
from gpustack.__main__ import main
from gpustack.mockrun import run_program
from stacktest import bag, objects, stack_config

PASSWORD = "nvapi-Qx7s9Lk2Pz4Wm8Rt"
USERNAME = "$oauthtoken"


def with_credentials(stack: str = "kubevirt", **registry: Any) -> dict[str, Any]:
    config = stack_config(stack)
    config["gpu-stack:registry"] = {**config.get("gpu-stack:registry", {}), "credentials": {"server": "nvcr.io", "username": USERNAME}, **registry}
    config["gpu-stack:registryPassword"] = PASSWORD
    return config


@pytest.fixture(scope="module")
def recording():
    return run_program("kubevirt", bag(with_credentials()), secret_keys=["gpu-stack:registryPassword"])


def leaked_forms() -> list[str]:
    auth = base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    return [PASSWORD, auth, base64.b64encode(PASSWORD.encode()).decode()]


def test_the_password_appears_nowhere_the_toolkit_writes(recording, tmp_path):
    written = {
        "manifests.yaml": rendering.manifests_yaml(recording),
        "graph.json": json.dumps(rendering.graph(recording)),
        "outputs": json.dumps(recording.outputs),
        "inputs": json.dumps([r.inputs for r in recording.registrations]),
    }
    for name, text in written.items():
        for form in leaked_forms():
            assert form not in text, name


def test_the_pull_secret_is_rendered_masked_and_schema_valid(recording):
    secret = objects(recording, "Secret")[REGISTRY_SECRET]
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert secret["stringData"] == {".dockerconfigjson": "[secret]"}
    assert secret["metadata"]["namespace"] == "gpu-operator"
    for version in ("1.33", "1.34"):
        assert schema.validate(secret, version) == []
    registration = recording.find("kubernetes:core/v1:Secret", REGISTRY_SECRET)
    assert registration.secret_paths == ["stringData"]


def test_every_operand_pulls_with_the_secret(recording):
    for kind in ("DaemonSet", "Job"):
        for name, obj in objects(recording, kind).items():
            pull = [s["name"] for s in obj["spec"]["template"]["spec"].get("imagePullSecrets", [])]
            assert REGISTRY_SECRET in pull, f"{kind}/{name}"


def test_the_docker_config_is_what_docker_login_writes():
    document = json.loads(docker_config(RegistryLogin("nvcr.io", USERNAME, PASSWORD)))
    entry = document["auths"]["nvcr.io"]
    assert (entry["username"], entry["password"]) == (USERNAME, PASSWORD)
    assert base64.b64decode(entry["auth"]).decode() == f"{USERNAME}:{PASSWORD}"


def test_a_plain_password_is_refused_before_anything_is_registered():
    with pytest.raises(ConfigError) as caught:
        load_config(bag(with_credentials()), secret_keys=())
    assert caught.value.problems == [
        (
            "gpu-stack:registryPassword",
            "a plain value would be stored unencrypted in the stack file and in state; set it with "
            "`pulumi config set --secret registryPassword <value>`",
        )
    ]


@pytest.mark.parametrize(
    ("drop", "key"),
    [("gpu-stack:registryPassword", "gpu-stack:registryPassword"), ("credentials", "gpu-stack:registry.credentials")],
)
def test_credentials_and_password_come_together(drop, key):
    config = with_credentials()
    if drop == "credentials":
        del config["gpu-stack:registry"]["credentials"]
    else:
        del config[drop]
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config), secret_keys=["gpu-stack:registryPassword"])
    assert (key, "registry.credentials and the secret registryPassword are set together") in caught.value.problems


@pytest.mark.parametrize(
    ("credentials", "key", "expected"),
    [
        ({"server": "https://nvcr.io", "username": "u"}, "gpu-stack:registry.credentials.server", "is not a registry host[:port]"),
        ({"server": "nvcr.io/nvaie", "username": "u"}, "gpu-stack:registry.credentials.server", "is not a registry host[:port]"),
        ({"server": "nvcr.io", "username": ""}, "gpu-stack:registry.credentials.username", "at least 1 character"),
        ({"server": "nvcr.io"}, "gpu-stack:registry.credentials.username", "required key is missing"),
        ({"server": "nvcr.io", "username": "u", "password": "p"}, "gpu-stack:registry.credentials.password", "unknown key 'password'"),
    ],
)
def test_bad_credentials_name_the_key(credentials, key, expected):
    config = with_credentials()
    config["gpu-stack:registry"]["credentials"] = credentials
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config), secret_keys=["gpu-stack:registryPassword"])
    assert expected in dict(caught.value.problems)[key]


def test_the_offline_render_reads_an_encrypted_stack_file_without_decrypting_it(tmp_path: Path):
    """`pulumi config set --secret` leaves ciphertext in the stack file; the offline toolkit cannot decrypt it
    (no secrets provider) and does not need to: the value only reaches Secret data, which renders masked."""
    document = {"config": with_credentials("dev")}
    document["config"]["gpu-stack:registryPassword"] = {"secure": "v1:Zm9yLXRoaXMtdGVzdA==:bm90LWEtcmVhbC1rZXk="}
    stack_file = tmp_path / "Pulumi.dev-private.yaml"
    stack_file.write_text(yaml.safe_dump(document))
    out = tmp_path / "out"
    assert main(["render", "--stack", str(stack_file), "--out", str(out)]) == 0
    manifests = [d for d in yaml.safe_load_all((out / "manifests.yaml").read_text()) if d]
    (secret,) = [d for d in manifests if d["kind"] == "Secret"]
    assert secret["stringData"] == {".dockerconfigjson": "[secret]"}
    assert "v1:Zm9y" not in (out / "manifests.yaml").read_text() + (out / "graph.json").read_text()
