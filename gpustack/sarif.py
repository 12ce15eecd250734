"""`gpustack check --format sarif`: the findings as one SARIF 2.1.0 log, which GitHub code scanning (and GitLab,
Azure DevOps, IDE viewers) turns into an annotation on the stack-file line that causes each one.

One run per invocation, whatever the number of stacks: its rules are every check gpu-stack can report (the stack
configuration, the stack file's syntax, strict schema validation, each API-server rule, each policy of the pack),
so a rule's id and index stay the same from one run to the next. The log sets no `automationDetails`: the upload
names its category (the workflow's `category: gpu-stack`). Each result names its stack file, the whole region
(start and end line and column) of the key traced by gpustack/findings.py, or of the line where the file stopped
parsing, and a fingerprint that survives edits elsewhere in the file. Findings of one rule on one line are one
result listing each object: GitHub keys an alert by the rule and the line, and would fold them into one anyway.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from gpustack import __version__
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
DOCS = {"config": "docs/configuration.md", "policies": "docs/policies.md", "check": "docs/runbook.md", "ci": "docs/ci.md"}
# A stack file read for a whole-line region when no key locates a finding: at most this many lines.
MAX_LINE_SCAN = 100_000


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


def information_uri(environ: Optional[Mapping[str, str]] = None) -> str:
    """Where a reader of the log learns about the tool: docs/ci.md in the repository on the review host that runs the
    check (GitHub's and GitLab's CI variables name it), else that page in this checkout."""
    environ = os.environ if environ is None else environ
    server, repository = environ.get("GITHUB_SERVER_URL", ""), environ.get("GITHUB_REPOSITORY", "")
    if server.startswith("https://") and repository.count("/") == 1:
        return f"{server}/{repository}/blob/HEAD/{DOCS['ci']}"
    project = environ.get("CI_PROJECT_URL", "")
    if project.startswith("https://"):
        return f"{project}/-/blob/HEAD/{DOCS['ci']}"
    return (PROJECT_DIR / DOCS["ci"]).resolve().as_uri()


def _uri(path: Path) -> str:
    """The path as code scanning matches it against the checkout: relative to the project (where CI checks it out),
    else to where the command runs, else the absolute file URI."""
    resolved = path.resolve()
    for root in (PROJECT_DIR.resolve(), Path.cwd().resolve()):
        if resolved.is_relative_to(root):
            return Path(os.path.relpath(resolved, root)).as_posix()
    return resolved.as_uri()


def _fingerprint(rule: str, stack: str, where: str) -> str:
    # GitHub keys an alert by its fingerprint: one per rule and stack-file line's key, whatever objects it lists
    text = "\x1f".join((rule, stack, where))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Placed:
    """A finding, where it lands, and what its message adds (a default that applies, a key that only decides)."""

    finding: Finding
    path: Path
    region: tuple[int, int, int, int]  # startLine, startColumn, endLine, endColumn
    key: str
    note: str


def place(finding: Finding, path: Path, lines: Optional[KeyLines]) -> Placed:
    position, note = lines.locate(finding.cause) if lines is not None else (None, "")
    if position is not None:
        return Placed(finding, path, (position.line, position.column, position.end_line, position.end_column), position.key, note)
    region = (lines or KeyLines({}, [], _file_lines(path))).line_region(finding.line)
    where = (region["startLine"], region["startColumn"], region["endLine"], region["endColumn"])
    return Placed(finding, path, where, "", _unplaced_note(finding))


def _unplaced_note(finding: Finding) -> str:
    """What a finding located at the file as a whole says about its key: none, or one the file does not write."""
    cause = finding.cause
    if cause is None:
        return "no stack key sets this field" if finding.object else ""
    if cause.decides:
        return f"no stack key sets this field; {cause.key} decides the object and is not set in this file: its default applies"
    return f"{cause.key} is not set in this file: its default applies"


def _file_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[:MAX_LINE_SCAN]
    except OSError:
        return []


def _message(group: Sequence[Placed]) -> str:
    """One finding's message with its note. Several of one rule on one line: the first message and the other
    objects when the messages differ only by the object they name, else how many objects and each message."""
    objects = list(dict.fromkeys(p.finding.object for p in group if p.finding.object))
    texts = list(dict.fromkeys(p.finding.message for p in group))
    alike = {p.finding.message.replace(p.finding.object, "\0") if p.finding.object else p.finding.message for p in group}
    if len(texts) == 1 or len(alike) == 1:
        text = texts[0] + (f" (also on {', '.join(objects[1:])})" if len(objects) > 1 else "")
    else:
        head = f"{len(objects)} objects: {', '.join(objects)}." if objects else f"{len(texts)} findings."
        text = "\n".join([head, *(f"- {t}" for t in texts)])
    note = group[0].note
    return f"{text} ({note})" if note else text


def result(group: Sequence[Placed], rule_index: dict[str, int]) -> dict[str, Any]:
    """One SARIF result for the findings of one rule on one line (GitHub would fold them into one alert anyway)."""
    first = group[0]
    finding = first.finding
    start_line, start_column, end_line, end_column = first.region
    where = first.key or f"line {start_line}"
    objects = list(dict.fromkeys(p.finding.object for p in group if p.finding.object))
    return {
        "ruleId": finding.rule,
        "ruleIndex": rule_index[finding.rule],
        "level": _worst(p.finding.level for p in group),
        "message": {"text": _message(group)},
        "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": _uri(first.path)},
            "region": {"startLine": start_line, "startColumn": start_column, "endLine": end_line, "endColumn": end_column},
        }}],
        "partialFingerprints": {FINGERPRINT: _fingerprint(finding.rule, finding.stack, first.key or finding.subject or where)},
        "properties": {"stack": finding.stack, **({"key": first.key} if first.key else {}),
                       **({"objects": objects} if objects else {})},
    }


def _worst(levels: Iterable[str]) -> str:
    order = ("error", "warning", "note", "none")
    return min(levels, key=lambda level: order.index(level) if level in order else len(order))


def grouped(placed: Sequence[Placed]) -> list[list[Placed]]:
    """Findings of one rule on one line of one file, together, in the order the first of each came."""
    groups: dict[tuple, list[Placed]] = {}
    for p in placed:
        groups.setdefault((p.finding.rule, str(p.path), p.region, p.key), []).append(p)
    return list(groups.values())


def log(findings: Sequence[tuple[Finding, Path, Optional[KeyLines]]], *, environ: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """One SARIF log: (finding, its stack file, that file's key positions or None when it does not parse); `environ`
    (default: this process's) names the repository informationUri points into."""
    catalog = rules()
    rule_index = {rule["id"]: i for i, rule in enumerate(catalog)}
    placed = [place(f, path, lines) for f, path, lines in findings]
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {"name": TOOL_NAME, "version": __version__, "informationUri": information_uri(environ), "rules": catalog}},
            "columnKind": "unicodeCodePoints",
            "results": [result(group, rule_index) for group in grouped(placed)],
        }],
    }
