"""`gpustack check --format sarif`: the findings as one SARIF 2.1.0 log, which GitHub code scanning (and GitLab,
Azure DevOps, IDE viewers) turns into an annotation on the stack-file line that causes each one.

One run per invocation, whatever the number of stacks: its rules are every check gpu-stack can report (the stack
configuration, the stack file's syntax, strict schema validation, each API-server rule, each policy of the pack),
so a rule's id and index stay the same from one run to the next. The log sets no `automationDetails`: the upload
names its category (the workflow's `category: gpu-stack`). Each result names its stack file, the line and
column of the key traced by gpustack/findings.py, and a fingerprint that survives edits elsewhere in the file.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Optional, Sequence

from gpustack.apiserver.engine import RULES as API_RULES
from gpustack.findings import APISERVER_PREFIX, CONFIG_RULE, LEVELS, POLICY_PREFIX, SCHEMA_RULE, STACK_FILE_RULE, Finding
from gpustack.keylines import KeyLines
from gpustack.mockrun import PROJECT_DIR
from gpustack.policyrun import pack_policies

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
TOOL_NAME = "gpu-stack"
FINGERPRINT = "gpustackFinding/v1"
# GitHub shows a security-severity score (0.1-10) for rules tagged `security`; the pack's severities, scored.
SECURITY_SEVERITY = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "2.0"}
DOCS = {"config": "docs/configuration.md", "policies": "docs/policies.md", "check": "docs/runbook.md"}


def _rule(rule_id: str, name: str, short: str, full: str, help_text: str, level: str, tags: list[str],
          severity: Optional[str] = None) -> dict[str, Any]:
    properties: dict[str, Any] = {"tags": tags, "precision": "very-high"}
    if severity is not None:
        properties["problem.severity"] = {"error": "error", "warning": "warning"}.get(level, "recommendation")
        if "security" in tags and severity in SECURITY_SEVERITY:
            properties["security-severity"] = SECURITY_SEVERITY[severity]
    return {
        "id": rule_id,
        "name": name,
        "shortDescription": {"text": short},
        "fullDescription": {"text": full},
        "help": {"text": help_text, "markdown": help_text},
        "defaultConfiguration": {"level": level},
        "properties": properties,
    }


def _camel(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in text.replace("/", "-").split("-") if part)


def _policy_rule(policy: Any) -> dict[str, Any]:
    description = policy.description
    severity, impact, text = "", "", description
    if description.startswith("[") and "]" in description:
        head, text = description[1:].split("]", 1)
        severity, _, impact = head.partition(":")
        text = text.strip()
    tags = ["gpu-stack", "policy", severity.strip()] + (["security"] if impact.strip() == "security" else [])
    level = LEVELS.get(policy.enforcement_level.value, "warning")
    return _rule(
        POLICY_PREFIX + policy.name, _camel(policy.name), text.split(". ")[0].rstrip(".") + ".",
        f"{text} Severity: {severity.strip() or 'unstated'}{' (' + impact.strip() + ')' if impact else ''}.",
        f"Policy `{policy.name}` of the gpu-stack CrossGuard pack ({DOCS['policies']}): {text} The stack's "
        f"policies/config/<stack>.json sets its enforcement level (pack default: {policy.enforcement_level.value}); "
        "`pulumi preview --policy-pack policies` runs the same check.",
        level, [t for t in tags if t], severity.strip(),
    )


def rules() -> list[dict[str, Any]]:
    """Every rule gpu-stack can report, in a fixed order."""
    found = [
        _rule(CONFIG_RULE, "StackConfig", "The stack configuration is invalid.",
              "A key of the stack file has a value gpu-stack refuses; nothing is rendered or registered.",
              f"The key and the values it allows are in the message and in {DOCS['config']}; `pulumi up` stops "
              "with the same message before it registers anything.", "error", ["gpu-stack", "configuration"]),
        _rule(STACK_FILE_RULE, "StackFile", "The stack file cannot be read.",
              "The stack file is not YAML gpu-stack accepts (syntax, a tag, an ambiguous number, a size limit).",
              "The message names the line and the key where reading stopped.", "error", ["gpu-stack", "configuration"]),
        _rule(SCHEMA_RULE, "KubernetesSchema", "A rendered object fails strict schema validation.",
              "An object the stack renders fails the OpenAPI schema of a Kubernetes version the stack declares "
              "(cluster.kubernetesVersions); the API server would refuse it.",
              "The message names the Kubernetes version, the object and the field; the location is the stack key "
              "that sets the field, where one does.", "error", ["gpu-stack", "kubernetes"]),
    ]
    for rule_id, api_rule in API_RULES.items():
        found.append(_rule(
            APISERVER_PREFIX + rule_id, _camel(rule_id), f"The API server refuses the object ({rule_id}).",
            f"A rendered object breaks a rule of the API server's own validation that no schema states; gpu-stack "
            f"mirrors {api_rule.mirrors}.",
            f"Mirrors Kubernetes' {api_rule.mirrors}. The message names the object and the field; the location is "
            "the stack key that sets the field, where one does.", "error", ["gpu-stack", "kubernetes"]))
    return found + [_policy_rule(policy) for policy in pack_policies()]


def _uri(path: Path) -> str:
    """The path as code scanning matches it against the checkout: relative to the project (where CI checks it out),
    else to where the command runs, else the absolute file URI."""
    resolved = path.resolve()
    for root in (PROJECT_DIR.resolve(), Path.cwd().resolve()):
        if resolved.is_relative_to(root):
            return Path(os.path.relpath(resolved, root)).as_posix()
    return resolved.as_uri()


def _fingerprint(finding: Finding, key: str) -> str:
    text = "\x1f".join((finding.rule, finding.stack, key, finding.subject or finding.message))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def result(finding: Finding, path: Path, lines: Optional[KeyLines], rule_index: dict[str, int]) -> dict[str, Any]:
    position = lines.locate(finding.keys, finding.context, finding.pools) if lines is not None else None
    if position is not None:
        region = {"startLine": position.line, "startColumn": position.column,
                  "endLine": position.end_line, "endColumn": position.end_column}
        key = position.key
    else:
        region, key = {"startLine": finding.line or 1}, ""
    message = finding.message
    wanted = finding.keys[0] if finding.keys else ""
    if key and wanted and "[]" not in wanted and wanted.startswith((key + ".", key + "[")):
        message += f" ({wanted} is not set in this file: its default applies)"
    return {
        "ruleId": finding.rule,
        "ruleIndex": rule_index[finding.rule],
        "level": finding.level,
        "message": {"text": message},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(path)}, "region": region}}],
        "partialFingerprints": {FINGERPRINT: _fingerprint(finding, key)},
        "properties": {"stack": finding.stack, **({"key": key} if key else {})},
    }


def log(findings: Sequence[tuple[Finding, Path, Optional[KeyLines]]]) -> dict[str, Any]:
    """One SARIF log: (finding, its stack file, that file's key positions or None when it does not parse)."""
    catalog = rules()
    rule_index = {rule["id"]: i for i, rule in enumerate(catalog)}
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {"name": TOOL_NAME, "rules": catalog}},
            "columnKind": "unicodeCodePoints",
            "results": [result(f, path, lines, rule_index) for f, path, lines in findings],
        }],
    }
