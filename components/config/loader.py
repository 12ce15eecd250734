"""From the string bag the Pulumi CLI hands the program to a validated StackConfig: values parsed, pydantic's
errors turned into key paths with the values that would have been accepted, secrets held to being secret, and
the bags of the running program and of a stack file."""

from __future__ import annotations

import difflib
import json
from typing import Any, Collection, Mapping, Optional

from pydantic import BaseModel, ValidationError
from pulumi.runtime.config import CONFIG, get_config_env, get_config_secret_keys_env, is_config_secret

from components.config.base import NAMESPACE, ConfigError
from components.config.stack import StackConfig, _cross_checks


def _parse_value(raw: str) -> Any:
    """The CLI passes objects and lists as JSON text and scalars as plain text."""
    try:
        return json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        return raw


def _fields_by_alias(model: type[BaseModel]) -> dict[str, Any]:
    return {(f.alias or name): f for name, f in model.model_fields.items()}


def _model_at(loc: tuple) -> Optional[type[BaseModel]]:
    """Walk StackConfig's fields along a pydantic error location to the model that owns the last key."""
    model: Any = StackConfig
    for part in loc:
        if isinstance(part, int):
            continue
        fields = _fields_by_alias(model) if isinstance(model, type) and issubclass(model, BaseModel) else {}
        if part not in fields:
            return None
        annotation = fields[part].annotation
        model = _unwrap(annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", None)
    if not args:
        return annotation
    for arg in args:
        inner = _unwrap(arg)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return inner
    return annotation


def _path(loc: tuple) -> str:
    text = NAMESPACE + ":"
    for i, part in enumerate(loc):
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += part if i == 0 else f".{part}"
    return text


def _unknown_key_message(key: str, allowed: list[str]) -> str:
    suggestion = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean '{suggestion[0]}'?)" if suggestion else ""
    return f"unknown key '{key}'{hint}; allowed keys: {', '.join(allowed)}"


def _describe(error: dict) -> str:
    kind = error["type"]
    value = error.get("input")
    if kind == "literal_error":
        allowed = error["ctx"]["expected"].replace(" or ", ", ")
        return f"got {value!r}; allowed values: {allowed}"
    if kind == "missing":
        return "required key is missing"
    if kind == "value_error":
        return str(error["ctx"]["error"])
    if kind in ("bool_type", "bool_parsing"):
        return f"got {value!r}; allowed values: true, false"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"got {value!r}; expected a whole number"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return f"got {value!r}; {error['msg'].lower()}"
    if kind in ("too_short", "too_long"):
        return f"{error['msg'].lower()}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"got {type(value).__name__} {value!r}; expected a mapping of keys"
    if kind == "list_type":
        return f"got {type(value).__name__} {value!r}; expected a list"
    if kind == "string_type":
        return f"got {type(value).__name__} {value!r}; expected a string"
    return f"{error['msg']} (got {value!r})"


def _translate(error: dict) -> tuple[str, str]:
    loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and ("[" in part or part.startswith("function-"))))
    if error["type"] == "extra_forbidden":
        owner = _model_at(loc[:-1])
        allowed = sorted(_fields_by_alias(owner)) if owner else []
        return _path(loc), _unknown_key_message(str(loc[-1]), allowed)
    return _path(loc), _describe(error)


SECRET_KEYS = (f"{NAMESPACE}:registryPassword",)


def _secret_checks(cfg: StackConfig, raw: Mapping[str, str], secret_keys: Collection[str]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for key in SECRET_KEYS:
        if key in raw and key not in secret_keys:
            name = key.split(":", 1)[1]
            problems.append(
                (
                    key,
                    "a plain value would be stored unencrypted in the stack file and in state; set it with "
                    f"`pulumi config set --secret {name} <value>`",
                )
            )
    if (cfg.registry.credentials is None) != (cfg.registry_password is None):
        missing = f"{NAMESPACE}:registryPassword" if cfg.registry_password is None else f"{NAMESPACE}:registry.credentials"
        problems.append((missing, "registry.credentials and the secret registryPassword are set together"))
    return problems


def load_config(raw: Mapping[str, str], secret_keys: Collection[str] = ()) -> StackConfig:
    """Validate the `gpu-stack:*` entries of a Pulumi config bag (values as the CLI passes them: strings).

    `secret_keys` are the keys the CLI marks secret; the keys in SECRET_KEYS must be among them."""
    prefix = NAMESPACE + ":"
    data: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    known = sorted(_fields_by_alias(StackConfig))
    for key, value in raw.items():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if name not in known:
            problems.append((key, _unknown_key_message(name, known)))
            continue
        data[name] = _parse_value(value)
    try:
        cfg = StackConfig.model_validate(data)
    except ValidationError as exc:
        problems += [_translate(e) for e in exc.errors(include_url=False)]
        raise ConfigError(problems) from None
    problems += _cross_checks(cfg)
    problems += _secret_checks(cfg, raw, secret_keys)
    if problems:
        raise ConfigError(problems)
    return cfg


def program_config() -> dict[str, str]:
    """The config bag of the running program: the CLI passes it as PULUMI_CONFIG, tests via set_all_config."""
    return {**get_config_env(), **CONFIG.get()}


def program_secret_keys() -> set[str]:
    """The keys the CLI marks secret: the language host passes them with the config, or as
    PULUMI_CONFIG_SECRET_KEYS next to PULUMI_CONFIG."""
    return set(get_config_secret_keys_env()) | {key for key in program_config() if is_config_secret(key)}


# What an offline render puts where the stack file holds ciphertext: without the stack's secrets provider
# nothing can decrypt it, and the value only ever reaches Secret data, which renders masked.
UNDECRYPTED = "[secret]"


def stack_file_secret_keys(document: Mapping[str, Any]) -> set[str]:
    """Keys whose value the stack file holds encrypted (`{secure: v1:...}`), as `pulumi config set --secret`
    writes them."""
    config = document.get("config") or {}
    return {key for key, value in config.items() if isinstance(value, dict) and set(value) == {"secure"}}


def stack_file_config(document: Mapping[str, Any]) -> dict[str, str]:
    """Turn a parsed `Pulumi.<stack>.yaml` into the string bag the CLI would hand the program."""
    config = document.get("config") or {}
    bag: dict[str, str] = {}
    secret = stack_file_secret_keys(document)
    for key, value in config.items():
        if key in secret:
            bag[key] = UNDECRYPTED
        elif isinstance(value, str):
            bag[key] = value
        elif isinstance(value, bool):
            bag[key] = "true" if value else "false"
        else:
            bag[key] = json.dumps(value)
    return bag
