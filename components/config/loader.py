"""From the string bag the Pulumi CLI hands the program to a validated StackConfig: values parsed, pydantic's
errors turned into key paths with the values that would have been accepted, secrets held to being secret, and
the bags of the running program and of a stack file."""

from __future__ import annotations

import difflib
import json
from typing import Any, Collection, Iterator, Mapping, Optional

from pydantic import BaseModel, SecretStr, ValidationError
from pulumi.runtime.config import CONFIG, get_config_env, get_config_secret_keys_env, is_config_secret

from components.config.keys import tag_config
from components.config.base import NAMESPACE, SHOWN_MAX, ConfigError, foreign_key_problem, shown
from components.config.rules import cross_key_problems
from components.config.stack import StackConfig

# What an error says in place of a value it must not echo.
SECRET_NOT_SHOWN = "(secret value not shown)"
# The longest message one problem may carry: a value is cut to SHOWN_MAX, but a validator may quote several.
MESSAGE_MAX = 1000
# Keys whose value is never echoed, secret or not: a kubeconfig path given where contents were meant would be them.
ALWAYS_HIDDEN = (("cluster", "kubeconfig"),)
# Any this long a run of a secret's characters in a message counts as echoing it.
_ECHO_RUN = 6
# How much of each end of a huge secret text is looked for in a message (see _echoes).
_ECHO_SPAN = 4096


def _echo_forms(value: Any) -> list[str]:
    """How a validator may have quoted a value: `{value!r}`, `shown(value)` or `{value}`, longest first. A form
    shorter than _ECHO_RUN is left alone (replacing "1" would mangle the message; _echoes catches it instead)."""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return []
    forms = {repr(value), shown(value), str(value)}
    return sorted((f for f in forms if len(f) >= _ECHO_RUN), key=len, reverse=True)


def _bounded(message: str, value: Any = None) -> str:
    """A message as a problem carries it: a validator's whole `{value!r}` of a long value cut as `shown` cuts it,
    and the message as a whole to MESSAGE_MAX."""
    if isinstance(value, str) and len(repr(value)) > SHOWN_MAX:
        message = message.replace(repr(value), shown(value))
    if len(message) > MESSAGE_MAX:
        message = f"{message[:MESSAGE_MAX - 1]}\u2026 (message cut at {MESSAGE_MAX} characters)"
    return message


def _takes_text(annotation: Any) -> bool:
    """A key whose value is a string as given (a password such as `12345678` stays text, never a number)."""
    args = getattr(annotation, "__args__", None) or (annotation,)
    return all(arg in (str, SecretStr, type(None)) for arg in args)


def _parse_value(raw: str, text: bool = False) -> Any:
    """The CLI passes objects and lists as JSON text and scalars as plain text."""
    if text:
        return raw
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
            # a map's key is user input too (a layout name): cut like a value
            part = part if len(part) <= SHOWN_MAX else shown(part)
            text += part if i == 0 else f".{part}"
    return text


def _unknown_key_message(key: str, allowed: list[str]) -> str:
    suggestion = difflib.get_close_matches(key, allowed, n=1) if len(key) <= SHOWN_MAX else []
    hint = f" (did you mean '{suggestion[0]}'?)" if suggestion else ""
    return f"unknown key {shown(key)}{hint}; allowed keys: {', '.join(allowed)}"


def _texts(value: Any) -> Iterator[str]:
    """Every scalar under a value as text: what an echo of it could contain."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _texts(key)
            yield from _texts(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _texts(item)
    elif isinstance(value, SecretStr):
        yield value.get_secret_value()
    elif value is not None:
        yield str(value)


def _echoes(message: str, value: Any) -> bool:
    """Whether a message holds any run of _ECHO_RUN characters of the value (all of a shorter one). Of a text
    longer than 2 * _ECHO_SPAN only its head and tail are looked for: what a validator echoes of a huge value is
    its repr, whole (replaced before this) or cut (its head), and the search stays linear in the message."""
    windows: dict[int, set[str]] = {}
    for text in _texts(value):
        run = min(len(text), _ECHO_RUN)
        if not run:
            continue
        if run not in windows:
            windows[run] = {message[i : i + run] for i in range(len(message) - run + 1)}
        parts = (text,) if len(text) <= 2 * _ECHO_SPAN else (text[:_ECHO_SPAN], text[-_ECHO_SPAN:])
        if any(part[i : i + run] in windows[run] for part in parts for i in range(len(part) - run + 1)):
            return True
    return False


def _redacted(message: str, value: Any) -> str:
    """A validator's message about a secret value, with the value's echoes (its repr, cut or whole) named "the
    value"; a message that still holds any of the value is replaced as a whole."""
    for form in _echo_forms(value):
        message = message.replace(form, "the value")
    if _echoes(message, value):
        return f"not a valid value for this key {SECRET_NOT_SHOWN}"
    return f"{message} {SECRET_NOT_SHOWN}"


def _describe(error: dict, secret: bool = False) -> str:
    """What was wrong with a value, naming the values that would be taken. A secret value is never echoed (the
    message says so instead); any other is cut to SHOWN_MAX characters."""
    kind = error["type"]
    value = error.get("input")
    if kind == "value_error":
        message = str(error["ctx"]["error"])
        return _redacted(message, value) if secret else _bounded(message, value)
    if kind == "missing":
        return "required key is missing"
    if kind in ("too_short", "too_long"):
        return f"{error['msg'].lower()}"
    got = f"got {shown(value)}; "
    typed = f"got {type(value).__name__} {shown(value)}; "
    if secret:
        got, typed = "", f"got a {type(value).__name__}; "
    if kind == "literal_error":
        text = f"{got}allowed values: {error['ctx']['expected'].replace(' or ', ', ')}"
    elif kind in ("bool_type", "bool_parsing"):
        text = f"{got}allowed values: true, false"
    elif kind in ("int_type", "int_parsing", "int_from_float"):
        text = f"{got}expected a whole number"
    elif kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        text = f"{got}{error['msg'].lower()}"
    elif kind in ("dict_type", "model_type", "model_attributes_type"):
        text = f"{typed}expected a mapping of keys"
    elif kind == "list_type":
        text = f"{typed}expected a list"
    elif kind == "string_type":
        text = f"{typed}expected a string"
    else:
        text = error["msg"] if secret else f"{error['msg']} (got {shown(value)})"
    # built without the value: a secret's message only says it is not shown
    return f"{text} {SECRET_NOT_SHOWN}" if secret else _bounded(text, value)


def _hidden(loc: tuple, secret_names: Collection[str]) -> bool:
    """Whether a value at this location must not be echoed: under a secret key, or under ALWAYS_HIDDEN."""
    return bool(loc) and (loc[0] in secret_names or any(loc[: len(p)] == p for p in ALWAYS_HIDDEN))


def _translate(error: dict, secret_names: Collection[str] = ()) -> tuple[str, str]:
    loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and ("[" in part or part.startswith("function-"))))
    secret = _hidden(loc, secret_names)
    if secret:
        loc = _keys_hidden(loc)
    if error["type"] == "extra_forbidden":
        owner = _model_at(loc[:-1])
        allowed = sorted(_fields_by_alias(owner)) if owner else []
        if secret:
            return _path(loc[:-1]), f"an unknown key; allowed keys: {', '.join(allowed)} {SECRET_NOT_SHOWN}"
        return _path(loc), _unknown_key_message(str(loc[-1]), allowed)
    return _path(loc), _describe(error, secret=secret)


def _keys_hidden(loc: tuple) -> tuple:
    """A location inside a secret value with every map key (user data, unlike a field name) shown as `<key>`."""
    shown_loc: list = []
    for part in loc:
        owner = _model_at(tuple(shown_loc)) if shown_loc else StackConfig
        fields = _fields_by_alias(owner) if owner else {}
        shown_loc.append(part if isinstance(part, int) or part in fields else "<key>")
    return tuple(shown_loc)


# The keys taken only as Pulumi secrets (`pulumi config set --secret`); the program keeps their values secret
# Outputs end to end (the pull Secret's data, the Kubernetes provider's kubeconfig). Any other key's value is
# written into objects and state in plain text, so a secret there is refused rather than silently exposed.
SECRET_KEYS = (f"{NAMESPACE}:registryPassword", f"{NAMESPACE}:kubeconfig")
# Where a kubeconfig's credentials belong instead of an object's plain fields.
_CREDENTIAL_HOMES = "registry.pullSecrets, driver.secretEnv, driver.licensingConfig.secretName"
# What a kubeconfig's contents hold and a path never does.
_KUBECONFIG_MARKERS = (
    "apiVersion", "clusters:", "contexts:", "current-context", "users:", "certificate-authority-data",
    "client-certificate-data", "client-key-data", "token:", "password:",
)


def looks_like_kubeconfig(value: str) -> bool:
    """Contents rather than a path: several lines, a JSON document, or a kubeconfig's keys."""
    return any(c in value for c in "\n\r") or value.lstrip().startswith("{") or any(m in value for m in _KUBECONFIG_MARKERS)


def _secret_key_checks(data: Mapping[str, Any], raw: Mapping[str, str], secret_keys: Collection[str]) -> list[tuple[str, str]]:
    """Before validation, from the bag alone: secret keys given in plain text, secrets where gpu-stack cannot keep
    them, and kubeconfig contents in the plain `cluster.kubeconfig`. No message echoes a value."""
    problems: list[tuple[str, str]] = []
    for key in SECRET_KEYS:
        if key in raw and key not in secret_keys:
            name = key.split(":", 1)[1]
            problems.append(
                (
                    key,
                    "a plain value would be stored unencrypted in the stack file and in state; set it with "
                    f"`pulumi config set --secret {name} <value>` {SECRET_NOT_SHOWN}",
                )
            )
    prefix = NAMESPACE + ":"
    for key in sorted(secret_keys):
        if key.startswith(prefix) and key[len(prefix):] in data and key not in SECRET_KEYS:
            problems.append(
                (
                    key,
                    "is a secret (`pulumi config set --secret`), but gpu-stack writes this key's values into Kubernetes "
                    f"objects and state in plain text; only {', '.join(k[len(prefix):] for k in SECRET_KEYS)} are kept "
                    f"secret. Keep a credential in a Kubernetes Secret and name it ({_CREDENTIAL_HOMES}) {SECRET_NOT_SHOWN}",
                )
            )
    cluster = data.get("cluster")
    path = cluster.get("kubeconfig") if isinstance(cluster, dict) else None
    if isinstance(path, str) and looks_like_kubeconfig(path):
        problems.append(
            (
                f"{prefix}cluster.kubeconfig",
                "holds a kubeconfig's contents (credentials), which would be stored unencrypted in the stack file and "
                "in state; cluster.kubeconfig takes a path. Set the contents as the secret key kubeconfig: "
                f'`pulumi config set --secret kubeconfig "$(cat <file>)"` {SECRET_NOT_SHOWN}',
            )
        )
    return problems


def _secret_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if (cfg.registry.credentials is None) != (cfg.registry_password is None):
        missing = f"{NAMESPACE}:registryPassword" if cfg.registry_password is None else f"{NAMESPACE}:registry.credentials"
        problems.append((missing, "registry.credentials and the secret registryPassword are set together"))
    if cfg.kubeconfig is not None and cfg.cluster.kubeconfig is not None:
        problems.append(
            (
                f"{NAMESPACE}:kubeconfig",
                "set either cluster.kubeconfig (a path) or the secret kubeconfig (the contents), not both",
            )
        )
    if cfg.kubeconfig is not None and not cfg.kubeconfig.get_secret_value().strip():
        problems.append((f"{NAMESPACE}:kubeconfig", f"is empty; give the kubeconfig's contents {SECRET_NOT_SHOWN}"))
    return problems


def load_config(raw: Mapping[str, str], secret_keys: Collection[str] = ()) -> StackConfig:
    """Validate the `gpu-stack:*` entries of a Pulumi config bag (values as the CLI passes them: strings).

    `secret_keys` are the keys the CLI marks secret; the keys in SECRET_KEYS must be among them, and no other
    `gpu-stack:` key may be. No problem echoes a secret value, and any other value is cut to SHOWN_MAX characters."""
    prefix = NAMESPACE + ":"
    data: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    fields = _fields_by_alias(StackConfig)
    known = sorted(fields)
    for key, value in raw.items():
        if not key.startswith(prefix):
            if foreign_key_problem(key):
                problems.append((shown(key) if len(key) > SHOWN_MAX else key, foreign_key_problem(key)))
            continue
        name = key[len(prefix):]
        if name not in known:
            problems.append((shown(key) if len(key) > SHOWN_MAX else key, _unknown_key_message(name, known)))
            continue
        data[name] = _parse_value(value, text=_takes_text(fields[name].annotation))
    problems += _secret_key_checks(data, raw, secret_keys)
    secret_names = {key[len(prefix):] for key in (*SECRET_KEYS, *secret_keys) if key.startswith(prefix)}
    try:
        cfg = StackConfig.model_validate(data)
    except ValidationError as exc:
        problems += [_translate(e, secret_names) for e in exc.errors(include_url=False)]
        raise ConfigError(problems) from None
    # A rule across keys may quote a value of a key set as a secret that gpu-stack cannot keep secret (refused
    # above, but still reported on); SECRET_KEYS' values never reach those rules.
    refused = {key[len(prefix):] for key in secret_keys if key.startswith(prefix) and key not in SECRET_KEYS}
    secret_values = [data[name] for name in sorted(refused) if name in data]
    for path, message in cross_key_problems(cfg):
        echoes = bool(secret_values) and _echoes(message, secret_values)
        problems.append((path, _redacted(message, secret_values) if echoes else _bounded(message)))
    problems += _secret_checks(cfg)
    if problems:
        raise ConfigError(problems)
    # every value knows its key from here on (components/config/keys.py)
    return tag_config(cfg)


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


def _encrypted(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _holds_encrypted(value: Any) -> bool:
    """`{secure: v1:...}` at the top or anywhere inside (`pulumi config set --secret --path a.b` writes it there)."""
    if _encrypted(value):
        return True
    if isinstance(value, dict):
        return any(_holds_encrypted(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_encrypted(v) for v in value)
    return False


def _undecrypted(value: Any) -> Any:
    if _encrypted(value):
        return UNDECRYPTED
    if isinstance(value, dict):
        return {k: _undecrypted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_undecrypted(v) for v in value]
    return value


def stack_file_secret_keys(document: Mapping[str, Any]) -> set[str]:
    """Keys whose value the stack file holds encrypted (`{secure: v1:...}`), as `pulumi config set --secret`
    writes them; a key holding an encrypted value anywhere inside is secret as a whole, as the CLI marks it."""
    config = document.get("config") or {}
    return {key for key, value in config.items() if _holds_encrypted(value)}


def stack_file_config(document: Mapping[str, Any]) -> dict[str, str]:
    """Turn a parsed `Pulumi.<stack>.yaml` into the string bag the CLI would hand the program; ciphertext (nothing
    offline can decrypt it) becomes UNDECRYPTED wherever it sits."""
    config = document.get("config") or {}
    bag: dict[str, str] = {}
    for key, value in config.items():
        value = _undecrypted(value)
        if isinstance(value, str):
            bag[key] = value
        elif isinstance(value, bool):
            bag[key] = "true" if value else "false"
        else:
            bag[key] = json.dumps(value)
    return bag
