"""`python -m gpustack render|check|graph --stack NAME|PATH`: the stack without a cluster, for reviewers and CI.

Exit codes: 0 clean; 1 a mandatory policy is violated (check: or an object fails strict schema validation, or a
rule of the API server's own validation);
2 an input is invalid: the stack file or its configuration, the policy pack config, an import input, an unknown
--format (message on stderr, nothing written), or the review host refused a `comment`; 3 an internal error (a
one-line message asking for a report; `--debug`, a global flag, prints the traceback); 130 interrupted (Ctrl-C), 143
terminated (SIGTERM), one line and nothing half written (gpustack/interrupts.py); 141 stdout was closed early
(`render ... | head`), quietly, as SIGPIPE would.
"""

from __future__ import annotations

if __name__ == "__main__":
    # First, before the imports below (the Pulumi SDK, pydantic, the program: about a second): an interrupt during
    # them ends the command as cleanly as one during a render.
    from gpustack import interrupts as _interrupts

    _interrupts.install()

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Optional, Sequence

from components.config import ConfigError, stack_file_secret_keys
from gpustack import diff, docs, findings, graph, importer, interrupts, inventory, mig_hardware, packfacts, pr_comment, render, sarif, stack_schema
from gpustack.checking import Checked, StackFileError, check_one, evaluate, load_stack, read_stack, resolve_stack, summary
from gpustack.importer import ImportInputError
from gpustack.keylines import KeyLines
from gpustack.mockrun import PROJECT_DIR, Recording, run_program
from gpustack.policyrun import PolicyConfigError, Violation, config_path, has_mandatory

from node_images.catalog import CatalogError
from node_images.inputfiles import InputFileError

EXIT_OK, EXIT_VIOLATION, EXIT_CONFIG, EXIT_INTERNAL = 0, 1, 2, 3
# What a process killed by SIGPIPE reports to the shell (128 + 13).
EXIT_BROKEN_PIPE = 141
ISSUES_URL = "the gpu-stack repository's issue tracker"
# Every error a user can cause by what they pass: printed as it is, exit 2.
INPUT_ERRORS = (ConfigError, CatalogError, InputFileError, ImportInputError)
POLICY_CONFIG_HELP = (
    "policy pack config, as `pulumi preview --policy-pack-config FILE` takes it "
    f"(default: {config_path('<stack>').relative_to(PROJECT_DIR)} when it exists)"
)


def cmd_render(args: argparse.Namespace) -> int:
    cfg, recording, violations = evaluate(args.stack, args.preview, args.policy_config)
    out = Path(args.out)
    # All four or none: a render interrupted or failing half-way leaves the previous render whole, never a mix.
    interrupts.write_files({
        out / "manifests.yaml": render.manifests_yaml(recording),
        out / "graph.json": json.dumps(render.graph(recording), indent=2) + "\n",
        out / "policy.json": json.dumps({"violations": [v.as_json() for v in violations]}, indent=2) + "\n",
        # which stack key set each field (components/kit/sources.py): what check, diff and their reports trace keys by
        out / "sources.json": json.dumps(recording.sources or {"objects": {}}, indent=2) + "\n",
    })
    objects = sum(1 for r in recording.registrations if r.is_kubernetes_object)
    print(f"{recording.stack}: {objects} Kubernetes objects, {len(recording.registrations)} resources -> {out}/")
    _print_violations(violations, recording)
    return EXIT_VIOLATION if has_mandatory(violations) else EXIT_OK


def cmd_graph(args: argparse.Namespace) -> int:
    name, bag, _ = load_stack(args.stack)
    recording = run_program(name, bag, secret_keys=stack_file_secret_keys(read_stack(args.stack)[1]))
    text = graph.mermaid(recording)
    if args.out:
        interrupts.write_text(Path(args.out), text)
        print(f"{name}: wrote {args.out}")
    else:
        print(text, end="")
    return EXIT_OK


CHECK_FORMATS = ("text", "sarif")


class CheckInputError(Exception):
    pass


def cmd_check(args: argparse.Namespace) -> int:
    if args.format not in CHECK_FORMATS:
        raise CheckInputError(f"check: unknown --format {args.format[:40]!r}; allowed: {', '.join(CHECK_FORMATS)}")
    if args.format == "sarif":
        return _check_sarif(args)
    # Several stacks in one process share the compiled schema validators (CI checks every stack this way).
    return max(_print_checked(check_one(stack, args)) for stack in args.stack)


def _print_checked(checked: Checked) -> int:
    headers = ("KIND", "NAMESPACE", "NAME", *checked.versions, "API")
    widths = [max(len(str(r[i])) for r in [headers, *checked.rows]) for i in range(len(headers))]
    for row in [headers, *checked.rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    found = findings.from_check(checked.stack, checked.recording, checked.problems, checked.refused, checked.violations)
    causes = [findings.cause_text(f.cause) for f in found]
    for p, cause in zip(checked.problems, causes):
        print(f"schema {p.kubernetes_version} {p.kind}/{p.name}: {p.message}" + (f" [{cause}]" if cause else ""))
    for r, cause in zip(checked.refused, causes[len(checked.problems):]):
        print(f"apiserver {r}" + (f" [{cause}]" if cause else ""))
    _print_violations(checked.violations, checked.recording)
    print(summary(checked))
    return EXIT_VIOLATION if checked.failed else EXIT_OK


def _check_sarif(args: argparse.Namespace) -> int:
    """Every stack's findings in one SARIF log on stdout; the summary lines, and a stack's configuration error, on
    stderr as the text format prints them. A stack whose configuration is invalid becomes results at its keys (and
    exit 2), so a pull request that breaks one stack still gets every other stack's annotations."""
    entries: list[tuple[findings.Finding, Path, Optional[KeyLines]]] = []
    code = EXIT_OK
    for stack in args.stack:
        name, path = resolve_stack(stack)
        try:
            lines: Optional[KeyLines] = KeyLines.of_file(path)
        except InputFileError as error:
            print(str(error), file=sys.stderr)
            entries.append((findings.Finding(findings.STACK_FILE_RULE, "error", error.problem, name,
                                             line=error.line, subject=error.key), path, None))
            code = max(code, EXIT_CONFIG)
            continue
        try:
            checked = check_one(stack, args)
        except ConfigError as error:
            print(str(error), file=sys.stderr)
            entries += [(f, path, lines) for f in findings.config_findings(name, error)]
            code = max(code, EXIT_CONFIG)
            continue
        found = findings.from_check(name, checked.recording, checked.problems, checked.refused, checked.violations)
        entries += [(f, path, lines) for f in found]
        print(summary(checked), file=sys.stderr)
        code = max(code, EXIT_VIOLATION if checked.failed else EXIT_OK)
    print(json.dumps(sarif.log(entries), indent=2))
    return code


def cmd_inventory(args: argparse.Namespace) -> int:
    if args.mig_profiles:
        if args.stack or args.pool:
            print("--mig-profiles compares the GPUs with gpu-stack's MIG catalog, not with a stack: drop --stack/--pool",
                  file=sys.stderr)
            return EXIT_CONFIG
        return mig_hardware.run(as_json=args.json)
    name, _, cfg = load_stack(args.stack) if args.stack else (None, None, None)
    return inventory.run(stack=name, cfg=cfg, pool=args.pool, as_json=args.json)


def _print_violations(violations: Sequence[Violation], recording: Recording) -> None:
    """Each violation with the stack key that set the field it judges (the render's source map)."""
    index = findings.ObjectIndex(recording)
    for v in violations:
        cause = findings.cause_text(findings.violation_finding(recording.stack, v, index).cause)
        print(f"policy {v.enforcement} {v.policy}: {v.message} ({v.urn})" + (f" [{cause}]" if cause else ""))


def cmd_pack_facts(args: argparse.Namespace) -> int:
    if args.check:
        stale = packfacts.stale()
        for name in stale:
            print(f"stale: {packfacts.FACTS_DIR / name} (run python -m gpustack pack-facts)")
        return 1 if stale else 0
    for name in packfacts.write():
        print(f"wrote {packfacts.FACTS_DIR / name}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Every command and flag; the docs tests parse the commands pages show with it (tests/test_doc_commands.py)."""
    parser = argparse.ArgumentParser(prog="python -m gpustack", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="print the full traceback of an internal error")
    sub = parser.add_subparsers(dest="command", required=True)
    render_parser = sub.add_parser("render", help="write manifests.yaml, graph.json, policy.json and sources.json for a stack")
    render_parser.add_argument("--stack", required=True, help="stack name (stacks/Pulumi.<name>.yaml) or path")
    render_parser.add_argument("--out", required=True, help="output directory")
    render_parser.add_argument("--preview", action="store_true", help="run as `pulumi preview` would (dry run)")
    render_parser.add_argument("--policy-config", metavar="FILE", help=POLICY_CONFIG_HELP)
    render_parser.set_defaults(run=cmd_render)
    check_parser = sub.add_parser("check", help="validate a stack in memory: schemas per Kubernetes version, policies")
    check_parser.add_argument(
        "--stack", required=True, action="append", help="stack name (stacks/Pulumi.<name>.yaml) or path; repeat to check several"
    )
    check_parser.add_argument("--preview", action="store_true", help="run as `pulumi preview` would (dry run)")
    check_parser.add_argument("--policy-config", metavar="FILE", help=POLICY_CONFIG_HELP)
    check_parser.add_argument(
        "--format", default="text", metavar="FORMAT",
        help="text (default: the table and one line per problem) or sarif (SARIF 2.1.0 on stdout for code scanning, "
             "each finding at the stack-file line of the key that causes it)")
    check_parser.set_defaults(run=cmd_check)
    inventory_parser = sub.add_parser("inventory", help="read this machine's GPUs (NVML); with --stack, their drift from its pools")
    inventory_parser.add_argument("--stack", help="stack name (stacks/Pulumi.<name>.yaml) or path to compare with")
    inventory_parser.add_argument("--pool", help="judge the node against this pool only (default: every pool of its GPU model)")
    inventory_parser.add_argument("--json", action="store_true", help="machine-readable output")
    inventory_parser.add_argument(
        "--mig-profiles", action="store_true",
        help="print the MIG profiles the driver offers on each GPU and compare them with gpu-stack's MIG catalog")
    inventory_parser.set_defaults(run=cmd_inventory)
    diff_parser = sub.add_parser("diff", help="what `pulumi up` would create, update, replace and delete, and what is dangerous")
    diff.add_arguments(diff_parser)
    diff_parser.set_defaults(run=lambda parsed: diff.run(parsed, resolve_stack))
    import_parser = sub.add_parser("import", help="turn a running operator's ClusterPolicy into a stack file")
    importer.add_arguments(import_parser)
    import_parser.set_defaults(run=importer.run)
    facts_parser = sub.add_parser("pack-facts", help="refresh the policy pack's copies of the fact modules (policies/.../facts)")
    facts_parser.add_argument("--check", action="store_true", help="only report stale copies (exit 1), write nothing")
    facts_parser.set_defaults(run=cmd_pack_facts)
    graph.add_parser(sub, cmd_graph)
    pr_comment.add_parser(sub)
    docs.add_parser(sub)
    stack_schema.add_parser(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.run(args)
        sys.stdout.flush()  # inside the guard: a closed pipe shows here, not at the interpreter's exit
        return code
    except (*INPUT_ERRORS, StackFileError, PolicyConfigError, diff.DiffInputError, CheckInputError, pr_comment.CommentError) as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_CONFIG
    except BrokenPipeError:
        # The reader left (`render ... | head`): nothing more to say, and nothing to flush at exit either.
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback unless asked for
        if args.debug:
            traceback.print_exc()
        message = " ".join(str(exc).split())[:200]
        print(f"internal error: {type(exc).__name__}: {message}" + ("" if args.debug else
              f" - this is a bug in gpu-stack; rerun with --debug and report the traceback to {ISSUES_URL}"), file=sys.stderr)
        return EXIT_INTERNAL


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not raise BrokenPipeError again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
