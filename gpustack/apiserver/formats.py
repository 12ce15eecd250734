"""The string formats Kubernetes validates names, labels, keys and quantities against.

Each function mirrors one function of k8s.io/apimachinery/pkg/util/validation (or the package named beside it)
and returns the API server's complaints as a list of strings: empty means valid. Every pattern is matched with
`fullmatch`, so a trailing newline is a character like any other and fails, as it does in Go.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Optional

from docker_image import digest as image_digest
from docker_image import reference as image_reference
from kubernetes.utils.quantity import parse_quantity

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
DNS1035_LABEL_MAX = 63
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
IANA_SVC_NAME_MAX = 15
CONFIG_MAP_KEY_MAX = 253

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_IANA_SVC_NAME = re.compile(r"[-a-z0-9]+")
_ENV_VAR_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
_CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_PERCENT = re.compile(r"[0-9]+%")
# resource.ParseQuantity's grammar: a signed decimal number, then a binary SI suffix, a decimal SI suffix or a
# decimal exponent (k8s.io/apimachinery/pkg/api/resource/quantity.go).
_QUANTITY = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?")


def _too_long(value: str, limit: int) -> list[str]:
    return [f"must be no more than {limit} characters"] if len(value) > limit else []


def is_dns1123_label(value: str) -> list[str]:
    """IsDNS1123Label: a DNS label (RFC 1123): lower-case alphanumerics and '-', at most 63."""
    errors = _too_long(value, DNS1123_LABEL_MAX)
    if not _DNS1123_LABEL.fullmatch(value):
        errors.append("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                      "start and end with an alphanumeric character (e.g. 'my-name')")
    return errors


def is_dns1123_subdomain(value: str) -> list[str]:
    """IsDNS1123Subdomain: dot-separated DNS labels, at most 253."""
    errors = _too_long(value, DNS1123_SUBDOMAIN_MAX)
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errors.append("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                      "and must start and end with an alphanumeric character (e.g. 'example.com')")
    return errors


def is_dns1035_label(value: str) -> list[str]:
    """IsDNS1035Label: a DNS label that starts with a letter (Service names)."""
    errors = _too_long(value, DNS1035_LABEL_MAX)
    if not _DNS1035_LABEL.fullmatch(value):
        errors.append("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                      "alphabetic character, and end with an alphanumeric character (e.g. 'my-name')")
    return errors


def is_path_segment_name(value: str) -> list[str]:
    """k8s.io/apimachinery/pkg/api/validation/path.IsValidPathSegmentName (RBAC object names)."""
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in value]


def is_qualified_name(value: str) -> list[str]:
    """IsQualifiedName: label keys and annotation keys, `[prefix/]name` with a DNS subdomain prefix."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
        errors: list[str] = []
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors = ["prefix part must be non-empty"]
        else:
            errors = [f"prefix part {e}" for e in is_dns1123_subdomain(prefix)]
    else:
        return ["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character, with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        return errors + ["name part must be non-empty"]
    errors += [f"name part {e}" for e in _too_long(name, QUALIFIED_NAME_MAX)]
    if not _QUALIFIED_NAME.fullmatch(name):
        errors.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                      "an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc')")
    return errors


def is_label_value(value: str) -> list[str]:
    """IsValidLabelValue: empty, or at most 63 alphanumerics, '-', '_', '.', starting and ending alphanumeric."""
    errors = _too_long(value, LABEL_VALUE_MAX)
    if not _LABEL_VALUE.fullmatch(value):
        errors.append("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                      "and must start and end with an alphanumeric character (e.g. 'MyValue', 'my_value' or '12345')")
    return errors


def is_port_name(value: str) -> list[str]:
    """IsValidPortName: an IANA_SVC_NAME (RFC 6335)."""
    errors = _too_long(value, IANA_SVC_NAME_MAX)
    if not _IANA_SVC_NAME.fullmatch(value):
        errors.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if "--" in value:
        errors.append("must not contain consecutive hyphens")
    if not re.search(r"[a-z]", value):
        errors.append("must contain at least one letter (a-z)")
    if value.startswith("-") or value.endswith("-"):
        errors.append("must not begin or end with a hyphen")
    return errors


def is_port_number(value: object) -> list[str]:
    """IsValidPortNum: 1..65535."""
    if not is_int(value) or not 1 <= int(value) <= 65535:  # type: ignore[call-overload]
        return ["must be between 1 and 65535, inclusive"]
    return []


def is_env_var_name(value: str) -> list[str]:
    """IsEnvVarName, as every supported version accepts it (1.32's relaxed form allows more, older ones do not)."""
    if not _ENV_VAR_NAME.fullmatch(value):
        return ["a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', "
                "and must not start with a digit"]
    return []


def is_config_map_key(value: str) -> list[str]:
    """IsConfigMapKey: ConfigMap and Secret data keys (they become file names in a volume)."""
    errors = _too_long(value, CONFIG_MAP_KEY_MAX)
    if not _CONFIG_MAP_KEY.fullmatch(value):
        errors.append("a valid config key must consist of alphanumeric characters, '-', '_' or '.'")
    if value in (".", ".."):
        errors.append(f"must not be '{value}'")
    elif value.startswith(".."):
        errors.append("must not start with '..'")
    return errors


def is_percent(value: str) -> list[str]:
    """IsValidPercent: the only strings an IntOrString count accepts."""
    return [] if _PERCENT.fullmatch(value) else ["a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%')"]


def is_int(value: object) -> bool:
    """Whole numbers as they arrive in a rendered object (the engine carries numbers as floats)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or isinstance(value, float) and value.is_integer()


def quantity(value: object) -> Optional[Decimal]:
    """resource.ParseQuantity: the value, or None when the API server would not parse it."""
    if is_int(value):
        return Decimal(int(value))  # type: ignore[call-overload]
    if not isinstance(value, str) or not _QUANTITY.fullmatch(value):
        return None
    try:
        return parse_quantity(value)
    except ValueError:
        return None


def image_problem(image: str) -> Optional[str]:
    """Why the kubelet would leave a container in InvalidImageName: it normalises every image with
    github.com/distribution/reference.ParseNormalizedNamed (pkg/kubelet/images.applyDefaultImageTag)."""
    if image != image.strip() or any(c.isspace() for c in image):
        return "an image reference contains no whitespace"
    try:
        image_reference.Reference.parse_normalized_named(image)
    except (image_reference.InvalidReference, image_digest.InvalidDigest, ValueError) as exc:
        return f"not an image reference ({exc})"
    return None
