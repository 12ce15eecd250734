"""Secrets: registry credentials (a Pulumi secret in stack config becomes the pull Secret every operand references)
and kubeconfig contents (the Kubernetes provider's secret input) never appear in plain text in anything gpu-stack
writes; no error echoes a secret value (it names the key and says "(secret value not shown)"), a key gpu-stack
cannot keep secret is refused as a secret, and any other echoed value is cut to 80 characters. Each output path
(render, check, diff, import and its report) is checked with a unique marker that must appear nowhere."""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import ConfigError, load_config, stack_file_config, stack_file_secret_keys
from components.config.base import SHOWN_MAX
from components.config.loader import SECRET_NOT_SHOWN
from components.states.prerequisites import REGISTRY_SECRET, RegistryLogin, docker_config
from gpustack import render as rendering
from gpustack import schema
from gpustack.__main__ import main
from gpustack.mockrun import run_program
from stacktest import ROOT, bag, objects, stack_config

PASSWORD = "nvapi-Qx7s9Lk2Pz4Wm8Rt"
USERNAME = "$oauthtoken"
# Unique per run: whatever path a secret takes, this string must not come out of it.
MARKER = f"S3CR3T-MARKER-{secrets.token_hex(6)}"
KUBECONFIG = f"apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    token: {MARKER}\n"
CIPHERTEXT = "v1:Zm9yLXRoaXMtdGVzdA==:bm90LWEtcmVhbC1rZXk="


def with_credentials(stack: str = "kubevirt", **registry: Any) -> dict[str, Any]:
    config = stack_config(stack)
    config["gpu-stack:registry"] = {**config.get("gpu-stack:registry", {}), "credentials": {"server": "nvcr.io", "username": USERNAME}, **registry}
    config["gpu-stack:registryPassword"] = PASSWORD
    return config


@pytest.fixture(scope="module")
def recording():
    config = with_credentials()
    config["gpu-stack:kubeconfig"] = KUBECONFIG
    return run_program("kubevirt", bag(config), secret_keys=["gpu-stack:registryPassword", "gpu-stack:kubeconfig"])


def leaked_forms() -> list[str]:
    auth = base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    return [PASSWORD, auth, base64.b64encode(PASSWORD.encode()).decode(), MARKER]


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


def test_kubeconfig_contents_reach_the_provider_as_a_secret(recording):
    """State holds the provider's inputs: contents must be a secret Output there, never plain text."""
    provider = recording.find("pulumi:providers:kubernetes", "cluster")
    assert provider.secret_paths == ["kubeconfig"]
    assert provider.inputs["kubeconfig"] == "[secret]"


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
    assert PASSWORD not in repr(RegistryLogin("nvcr.io", USERNAME, PASSWORD))


def test_a_plain_password_is_refused_before_anything_is_registered():
    with pytest.raises(ConfigError) as caught:
        load_config(bag(with_credentials()), secret_keys=())
    assert caught.value.problems == [
        (
            "gpu-stack:registryPassword",
            "a plain value would be stored unencrypted in the stack file and in state; set it with "
            f"`pulumi config set --secret registryPassword <value>` {SECRET_NOT_SHOWN}",
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
    document["config"]["gpu-stack:kubeconfig"] = {"secure": CIPHERTEXT}
    stack_file = tmp_path / "Pulumi.dev-private.yaml"
    stack_file.write_text(yaml.safe_dump(document))
    out = tmp_path / "out"
    assert main(["render", "--stack", str(stack_file), "--out", str(out)]) == 0
    manifests = [d for d in yaml.safe_load_all((out / "manifests.yaml").read_text()) if d]
    (secret,) = [d for d in manifests if d["kind"] == "Secret"]
    assert secret["stringData"] == {".dockerconfigjson": "[secret]"}
    assert "v1:Zm9y" not in (out / "manifests.yaml").read_text() + (out / "graph.json").read_text()


# --- no error echoes a secret value ----------------------------------------------------------------------------


def problems_of(config: dict[str, Any], secret_keys: tuple[str, ...] = ()) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config), secret_keys=secret_keys)
    text = str(caught.value)
    assert MARKER not in text
    return dict(caught.value.problems)


def _set(config: dict[str, Any], key: str, path: tuple, value: Any) -> dict[str, Any]:
    node = config.setdefault(key, {})
    for part in path[:-1]:
        node = node[part] if isinstance(part, int) else node.setdefault(part, {})
    node[path[-1]] = value
    return config


# (secret key, where inside it, a value carrying the marker that fails validation, the key path the error names)
SECRET_EDITS = [
    ("gpu-stack:daemonsets", ("maxUnavailable",), MARKER, "gpu-stack:daemonsets.maxUnavailable"),
    ("gpu-stack:validation", ("timeoutSeconds",), MARKER + "x" * 10_000_000, "gpu-stack:validation.timeoutSeconds"),
    ("gpu-stack:cluster", ("name",), MARKER.lower() + "-" * 3, "gpu-stack:cluster.name"),
    ("gpu-stack:nodePools", (0, "nodeSelector"), {MARKER: MARKER * 4}, "gpu-stack:nodePools[0].nodeSelector"),
    ("gpu-stack:nodePools", (0, "sharing", MARKER), 1, "gpu-stack:nodePools[0].sharing"),
    ("gpu-stack:operands", ("driver", "env"), [{"name": f"X-{MARKER}", "value": MARKER}], "gpu-stack:operands.driver.env[0].name"),
    ("gpu-stack:migLayouts", (MARKER,), {"1g.10gb": MARKER}, "gpu-stack:migLayouts"),
    ("gpu-stack:upgrade", ("drain", "timeoutSeconds"), {"v": MARKER}, "gpu-stack:upgrade.drain.timeoutSeconds"),
]


def test_even_a_boolean_secret_is_not_shown():
    config = _set(stack_config("dev"), "gpu-stack:daemonsets", ("maxUnavailable",), True)
    message = problems_of(config, secret_keys=("gpu-stack:daemonsets",))["gpu-stack:daemonsets.maxUnavailable"]
    assert "True" not in message and SECRET_NOT_SHOWN in message


@pytest.mark.parametrize(("key", "path", "value", "named"), SECRET_EDITS, ids=[e[3] for e in SECRET_EDITS])
def test_a_secret_value_that_fails_validation_is_named_never_shown(key, path, value, named):
    problems = problems_of(_set(stack_config("dev"), key, path, value), secret_keys=(key,))
    assert SECRET_NOT_SHOWN in problems[named]
    # and gpu-stack says why this key cannot be a secret at all: its values go into plain objects
    assert "writes this key's values into Kubernetes objects" in problems[key]


def test_a_rule_across_keys_never_quotes_a_secret_value():
    config = stack_config("dev")
    name = MARKER.lower()
    config["gpu-stack:nodePools"] = [{**pool, "name": name} for pool in config["gpu-stack:nodePools"] * 2]
    problems = problems_of(config, secret_keys=("gpu-stack:nodePools",))
    assert SECRET_NOT_SHOWN in problems["gpu-stack:nodePools[1].name"]


def test_the_same_value_in_plain_text_is_shown_cut_to_80_characters():
    problems = problems_of(_set(stack_config("dev"), "gpu-stack:daemonsets", ("maxUnavailable",), "x" * 10_000_000))
    message = problems["gpu-stack:daemonsets.maxUnavailable"]
    assert "\u2026 (10000000 characters)" in message and len(message) < 400
    assert "'" + "x" * (SHOWN_MAX - 2) + "\u2026" in message


def test_a_huge_unknown_key_is_cut_too():
    config = stack_config("dev")
    config["gpu-stack:cluster"]["k" * 100_000] = 1
    config["gpu-stack:" + "u" * 100_000] = 1
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    assert len(str(caught.value)) < 3000
    assert "(100000 characters)" in str(caught.value)


def test_a_numeric_password_stays_text():
    """`pulumi config set --secret registryPassword 12345678` hands the program the text 12345678; it is the
    password, not a number (JSON parsing would make it one and refuse it, printing it)."""
    config = with_credentials()
    config["gpu-stack:registryPassword"] = "0012345678"
    cfg = load_config(bag(config), secret_keys=["gpu-stack:registryPassword"])
    assert cfg.registry_password.get_secret_value() == "0012345678"


# --- kubeconfig contents are a secret --------------------------------------------------------------------------


def with_kubeconfig_path(value: str) -> dict[str, Any]:
    config = stack_config("dev")
    config["gpu-stack:cluster"] = {**config["gpu-stack:cluster"], "kubeconfig": value}
    return config


@pytest.mark.parametrize(
    "contents",
    [KUBECONFIG, json.dumps({"apiVersion": "v1", "users": [{"token": MARKER}]}), f"token: {MARKER}"],
    ids=["yaml", "json", "one-line"],  # the marker is random per process: ids must not show it (pytest-xdist)
)
def test_kubeconfig_contents_in_the_plain_path_key_are_refused(contents):
    message = problems_of(with_kubeconfig_path(contents))["gpu-stack:cluster.kubeconfig"]
    assert "pulumi config set --secret kubeconfig" in message and SECRET_NOT_SHOWN in message


def test_kubeconfig_contents_are_taken_only_as_a_secret():
    config = stack_config("dev")
    config["gpu-stack:kubeconfig"] = KUBECONFIG
    assert "pulumi config set --secret kubeconfig" in problems_of(config)["gpu-stack:kubeconfig"]
    cfg = load_config(bag(config), secret_keys=["gpu-stack:kubeconfig"])
    assert cfg.kubeconfig.get_secret_value() == KUBECONFIG and MARKER not in repr(cfg)
    both = with_kubeconfig_path("/etc/gpu-stack/kubeconfig")
    both["gpu-stack:kubeconfig"] = KUBECONFIG
    with pytest.raises(ConfigError) as caught:
        load_config(bag(both), secret_keys=["gpu-stack:kubeconfig"])
    assert "not both" in dict(caught.value.problems)["gpu-stack:kubeconfig"]
    assert load_config(bag(with_kubeconfig_path("/etc/gpu-stack/kubeconfig"))).cluster.kubeconfig == "/etc/gpu-stack/kubeconfig"


def test_ciphertext_inside_a_value_marks_its_key_secret_and_is_never_read():
    """`pulumi config set --secret --path operands.driver.env[0].value` encrypts inside an object: the whole key is
    secret then (as the CLI marks it), and gpu-stack cannot keep an operand's env secret, so it refuses it."""
    config = stack_config("dev")
    config["gpu-stack:operands"] = {"driver": {"env": [{"name": "NGC_API_KEY", "value": {"secure": CIPHERTEXT}}]}}
    document = {"config": config}
    assert stack_file_secret_keys(document) == {"gpu-stack:operands"}
    bag_ = stack_file_config(document)
    assert CIPHERTEXT not in bag_["gpu-stack:operands"]
    with pytest.raises(ConfigError) as caught:
        load_config(bag_, stack_file_secret_keys(document))
    assert "gpu-stack:operands" in dict(caught.value.problems) and CIPHERTEXT not in str(caught.value)


# --- every output path of the toolkit -------------------------------------------------------------------------


def _bad_stack_file(tmp_path: Path, name: str = "Pulumi.leaky.yaml") -> Path:
    """A stack a careless user wrote: kubeconfig contents in the plain path key."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"config": with_kubeconfig_path(KUBECONFIG)}))
    return path


def _nothing_leaked(capsys, *files: Path) -> str:
    captured = capsys.readouterr()
    text = captured.out + captured.err + "".join(f.read_text() for f in files if f.is_file())
    assert MARKER not in text
    return captured.err


@pytest.mark.parametrize("command", ["render", "check", "diff"])
def test_the_cli_refuses_plain_kubeconfig_contents_without_echoing_them(command, tmp_path, capsys):
    stack = _bad_stack_file(tmp_path)
    out = tmp_path / "out"
    argv = {
        "render": ["render", "--stack", str(stack), "--out", str(out)],
        "check": ["check", "--stack", str(stack)],
        "diff": ["diff", "--stack", str(stack), "--base", str(stack)],
    }[command]
    assert main(argv) == 2
    err = _nothing_leaked(capsys)
    assert "gpu-stack:cluster.kubeconfig" in err and SECRET_NOT_SHOWN in err
    assert not out.exists()


def test_import_never_copies_or_prints_a_credential(tmp_path, capsys):
    """A ClusterPolicy's env holding a token (by its name or its shape) is not copied into the stack file (kept in
    git) nor printed in the report, which says so instead."""
    policy = yaml.safe_load((ROOT / "tests" / "fixtures" / "clusterpolicy" / "minimal.yaml").read_text())
    policy["spec"]["driver"]["env"] = [{"name": "NGC_API_KEY", "value": MARKER}, {"name": "LOG_LEVEL", "value": "debug"}]
    policy["spec"]["devicePlugin"]["env"] = [{"name": "EXTRA", "value": f"nvapi-{MARKER}"}]
    source = tmp_path / "clusterpolicy.yaml"
    source.write_text(yaml.safe_dump(policy))
    out = tmp_path / "Pulumi.lab.yaml"
    code = main(["import", "--context", "lab-admin", "--node-agent-image", "harbor.platform.internal/gpu-stack/node-agent:0.10.0",
                 "--kubernetes-version", "1.32", "--gpu-model", "L4", "--os", "ubuntu22.04",
                 "--clusterpolicy", str(source), "--stack", "lab", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    written = out.read_text()
    assert MARKER not in printed + written
    assert f"spec.driver.env[NGC_API_KEY] = {SECRET_NOT_SHOWN}: looks like a credential" in printed
    assert f"spec.devicePlugin.env[EXTRA] = {SECRET_NOT_SHOWN}" in written  # the report travels with the file
    assert {"name": "LOG_LEVEL", "value": "debug"} in yaml.safe_load(written)["config"]["gpu-stack:operands"]["driver"]["env"]


def test_a_malformed_import_input_never_echoes_a_credential_or_a_huge_value(tmp_path, capsys):
    policy = yaml.safe_load((ROOT / "tests" / "fixtures" / "clusterpolicy" / "minimal.yaml").read_text())
    policy["spec"]["driver"]["env"] = [{"name": "NGC_API_KEY", "value": MARKER}, "oops"]
    policy["spec"]["devicePlugin"]["env"] = {"token": MARKER}
    policy["spec"]["toolkit"] = "t" * 1_000_000
    for section, expected in (("driver", "spec.driver.env"), ("devicePlugin", "spec.devicePlugin.env"), ("toolkit", "spec.toolkit")):
        broken = json.loads(json.dumps(policy))
        for other in ("driver", "devicePlugin", "toolkit"):
            if other != section:
                broken["spec"][other] = {}
        source = tmp_path / f"{section}.yaml"
        source.write_text(yaml.safe_dump(broken))
        code = main(["import", "--context", "lab-admin", "--node-agent-image", "harbor.platform.internal/gpu-stack/node-agent:0.10.0",
                     "--kubernetes-version", "1.32", "--gpu-model", "L4", "--os", "ubuntu22.04",
                     "--clusterpolicy", str(source), "--stack", "lab", "--out", str(tmp_path / "Pulumi.lab.yaml")])
        assert code == 2
        err = _nothing_leaked(capsys)
        assert expected in err and len(err) < 1000
