"""`python -m gpustack import`: a running GPU Operator's ClusterPolicy (and NVIDIADriver objects) as a gpu-stack
stack file, with a per-field report.

Inputs are what kubectl and helm print: the ClusterPolicy (`kubectl get clusterpolicy -o yaml`, one object or a
List), optionally the operator's Helm values (`helm get values --all`), the nodes (`kubectl get nodes -o yaml`),
ConfigMaps the ClusterPolicy names (`kubectl get cm -n gpu-operator NAME -o yaml`) and, when the ClusterPolicy sets
driver.useNvidiaDriverCRD, the NVIDIADriver objects; or all of them read from the cluster (`--from-cluster`,
`live`). A field the ClusterPolicy
lacks takes the Helm value when values are given and the CRD default otherwise: the two differ (fact sheet §11,
e.g. `dcgm.enabled`, `mig.strategy`, `driver.upgradePolicy.autoUpgrade`).

Every field of the effective spec ends up in exactly one place: mapped onto a gpu-stack key (`mapping` holds the
table), equal to what gpu-stack renders anyway, in the report's without-effect part (settings of a component the
operator did not deploy, deprecated no-ops), or in the not-carried report with the reason; never dropped without a
word. A MIG setup the stack would wipe (a pool labelled all-disabled over partitioned nodes) stops the import.
`import_cluster_policy` is pure; `run` does the files.

The package is split by input: `clusterpolicy` (the object and its effective spec), `helm`, `nodes` (node pools),
`configmaps`, `mig` (mig-parted layouts), `nvidiadriver` (NVIDIADriver objects, their owners and pools), `live`
(reading them all from a cluster), and per area of the mapping `images`, `driver`, `operands`, `mapping` (the
table and the per-operand fields); `shapes` the field kinds every input is checked against before any mapping
runs, `spec_fields` the ClusterPolicy's and the Helm values' typed fields; `report` holds the report rules,
`ledger` each field's outcome, `output` the report as text or JSON, `build` the `_Importer` that runs the mapping
in stack-file order, `stackfile` the check, the written file and its policy-pack config, `tables` the generated
tables of docs/migration.md.
This module re-exports what callers use and holds the command line (`run` reads `PROJECT_DIR` from here).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from components.catalogs import catalog
from components.config import OS_TAG, ConfigError
from gpustack import interrupts, stack_schema
from gpustack.importer.build import import_cluster_policy
from gpustack.importer.clusterpolicy import cluster_policy_of
from gpustack.importer.common import ClusterFacts, ImportInputError, ImportResult, NotCarried, read_yaml
from gpustack.importer.configmaps import configmaps_of
from gpustack.importer.nodes import INSTANCE_TYPE, model_from_product, nodes_of
from gpustack.importer.live import read_cluster
from gpustack.importer.nvidiadriver import nvidia_drivers_of
from gpustack.importer.output import json_report, refusal, text_report
from gpustack.importer.stackfile import policy_config, stack_yaml, validate
from gpustack.paths import shown

__all__ = [
    "ClusterFacts",
    "ImportInputError",
    "ImportResult",
    "NotCarried",
    "add_arguments",
    "cluster_policy_of",
    "configmaps_of",
    "import_cluster_policy",
    "model_from_product",
    "nodes_of",
    "nvidia_drivers_of",
    "policy_config",
    "read_yaml",
    "run",
    "stack_yaml",
    "validate",
]

EXIT_OK, EXIT_BAD_INPUT = 0, 2
PROJECT_DIR = Path(__file__).resolve().parent.parent.parent
STACK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


# --- command line ----------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clusterpolicy", metavar="FILE", help="`kubectl get clusterpolicy -o yaml` output (or --from-cluster)")
    parser.add_argument("--from-cluster", action="store_true",
                        help="read the ClusterPolicy, NVIDIADrivers, nodes, the ConfigMaps they name and OpenShift's "
                             "objects from the cluster of --context (read-only) instead of files")
    parser.add_argument("--kubeconfig", metavar="FILE", help="with --from-cluster: the kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="the report's format (default text)")
    parser.add_argument("--report", metavar="FILE", help="write the report here instead of printing it")
    parser.add_argument("--helm-values", metavar="FILE", help="the operator's `helm get values --all -o yaml`: fields the ClusterPolicy lacks take these, not the CRD defaults")
    parser.add_argument("--stack", required=True, help="stack name: writes stacks/Pulumi.<name>.yaml")
    parser.add_argument("--out", metavar="PATH", help="write the stack file here instead")
    parser.add_argument("--force", action="store_true", help="overwrite an existing stack file")
    parser.add_argument("--context", help="kubeconfig context of the cluster (gpu-stack:cluster.context); with --from-cluster "
                                          "also the one read (default: the kubeconfig's current context)")
    parser.add_argument("--node-agent-image", required=True, metavar="IMAGE", help="gpu-stack node agent image (it replaces the operator's node labeller)")
    parser.add_argument("--cluster-name", help="gpu-stack:cluster.name (default: the context, as a DNS label)")
    parser.add_argument("--kubernetes-version", action="append", default=[], metavar="1.N", help="repeatable; default: the kubelet versions in --nodes")
    parser.add_argument("--namespace", help="operand namespace (default: the ClusterPolicy's status.namespace)")
    parser.add_argument("--container-runtime", choices=("containerd", "cri-o"), help="default: from --nodes, else containerd")
    parser.add_argument("--nodes", metavar="FILE", help="`kubectl get nodes -o yaml`: node pools from the GPU nodes' labels")
    parser.add_argument("--gpu-model", action="append", default=[], metavar="[KEY=VALUE:]MODEL",
                        help="GPU model of nodes whose labels do not say it (VM nodes), or of the single pool without --nodes; repeatable")
    parser.add_argument("--os", help="OS tag (e.g. ubuntu22.04) of nodes without NFD OS labels, or of the single pool")
    parser.add_argument("--openshift-version", metavar="4.N", help="the cluster is OpenShift (oc get clusterversion): cluster.platform openshift, cri-o")
    parser.add_argument("--imagestream", metavar="FILE", help="OpenShift: `oc get imagestream driver-toolkit -n openshift -o yaml`, the DTK image per RHCOS build")
    parser.add_argument("--proxy", metavar="FILE", help="OpenShift: `oc get proxy cluster -o yaml`, the proxy the driver downloads through")
    parser.add_argument("--pool-label", action="append", default=[], metavar="KEY", help="node label that tells pools apart; repeatable")
    parser.add_argument("--configmap", action="append", default=[], metavar="FILE",
                        help="`kubectl get cm -o yaml` of ConfigMaps the ClusterPolicy names (device-plugin, mig-parted, DCGM metrics); repeatable")
    parser.add_argument("--nvidiadriver", action="append", default=[], metavar="FILE",
                        help="`kubectl get nvidiadrivers -o yaml` (one object or a List): the drivers when the ClusterPolicy "
                             "sets driver.useNvidiaDriverCRD; repeatable")


def _gpu_models(values: Sequence[str]) -> tuple[tuple[Optional[tuple[str, str]], str], ...]:
    parsed = []
    for value in values:
        selector, sep, model = value.rpartition(":")
        if model not in catalog.GPU_MODELS:
            raise ImportInputError(f"--gpu-model {value}: unknown model {model!r}; allowed values: {', '.join(catalog.GPU_MODELS)}")
        if not sep:
            parsed.append((None, model))
            continue
        key, eq, label = selector.partition("=")
        if not eq or not key:
            raise ImportInputError(f"--gpu-model {value}: expected KEY=VALUE:MODEL, e.g. {INSTANCE_TYPE}=p4d.24xlarge:A100-40GB")
        parsed.append(((key, label), model))
    return tuple(parsed)


def _output_path(args: argparse.Namespace) -> Path:
    if not STACK_NAME.fullmatch(args.stack):
        raise ImportInputError(f"--stack {args.stack!r}: a stack name is letters, digits, '.', '_' and '-'")
    return Path(args.out) if args.out else PROJECT_DIR / "stacks" / f"Pulumi.{args.stack}.yaml"


def _policy_path(args: argparse.Namespace, out: Path) -> Path:
    """policies/config/<stack>.json, where `check --stack` finds it; next to an --out file otherwise."""
    if args.out:
        return out.with_name(f"{args.stack}.policy.json")
    return PROJECT_DIR / "policies" / "config" / f"{args.stack}.json"


FILE_INPUTS = ("clusterpolicy", "nodes", "configmap", "nvidiadriver", "imagestream", "proxy", "openshift_version")


@dataclass
class _Inputs:
    policy: Any
    nodes: Any
    configmaps: list[tuple[str, Any]]
    drivers: list[tuple[str, Any]]
    context: str
    openshift_version: Optional[str]
    imagestream: Any
    proxy: Any
    source: str


def _file_inputs(args: argparse.Namespace) -> _Inputs:
    if not args.clusterpolicy or not args.context:
        raise ImportInputError("--clusterpolicy FILE and --context are required (or read the cluster with --from-cluster)")
    return _Inputs(
        policy=read_yaml(args.clusterpolicy, "--clusterpolicy"),
        nodes=read_yaml(args.nodes, "--nodes") if args.nodes else None,
        configmaps=[(path, read_yaml(path, "--configmap")) for path in args.configmap],
        drivers=[(path, read_yaml(path, "--nvidiadriver")) for path in args.nvidiadriver],
        context=args.context,
        openshift_version=args.openshift_version,
        imagestream=read_yaml(args.imagestream, "--imagestream") if args.imagestream else None,
        proxy=read_yaml(args.proxy, "--proxy") if args.proxy else None,
        source=args.clusterpolicy,
    )


def _cluster_inputs(args: argparse.Namespace) -> _Inputs:
    given = [f"--{name.replace('_', '-')}" for name in FILE_INPUTS if getattr(args, name)]
    if given:
        raise ImportInputError(f"--from-cluster reads {', '.join(given)} from the cluster; leave them out")
    found = read_cluster(args.kubeconfig, args.context, args.namespace)
    return _Inputs(found.cluster_policy, found.nodes, found.configmaps, found.nvidia_drivers, found.context,
                   found.openshift_version, found.imagestream, found.proxy, f"context {found.context}")


def _emit(args: argparse.Namespace, text: str) -> None:
    if args.report:
        interrupts.write_text(Path(args.report), text)
    else:
        sys.stdout.write(text)


def _refuse(args: argparse.Namespace, message: str) -> int:
    print(f"import: {message}", file=sys.stderr)
    if args.format == "json":
        _emit(args, json.dumps(refusal(message), indent=2) + "\n")
    return EXIT_BAD_INPUT


def run(args: argparse.Namespace) -> int:
    try:
        out = _output_path(args)
        if out.exists() and not args.force:
            raise ImportInputError(f"{out} exists; pass --force to overwrite it")
        if args.os is not None and not OS_TAG.fullmatch(args.os):
            raise ImportInputError(f"--os {args.os!r} is not an OS tag such as ubuntu22.04 or rhel9")
        inputs = _cluster_inputs(args) if args.from_cluster else _file_inputs(args)
        policy = cluster_policy_of(inputs.policy, inputs.source)
        helm = read_yaml(args.helm_values, "--helm-values") if args.helm_values else None
        nodes = nodes_of(inputs.nodes, "--nodes" if not args.from_cluster else "nodes (cluster)") if inputs.nodes is not None else None
        configmaps = configmaps_of(inputs.configmaps)
        drivers = nvidia_drivers_of(inputs.drivers)
        facts = ClusterFacts(
            context=inputs.context,
            node_agent_image=args.node_agent_image,
            cluster_name=args.cluster_name,
            kubernetes_versions=tuple(args.kubernetes_version),
            namespace=args.namespace,
            container_runtime=args.container_runtime,
            gpu_models=_gpu_models(args.gpu_model),
            os=args.os,
            pool_labels=tuple(args.pool_label),
            openshift_version=inputs.openshift_version,
            imagestream=inputs.imagestream,
            proxy=inputs.proxy,
        )
        result = import_cluster_policy(policy, facts, helm_values=helm, nodes=nodes, configmaps=configmaps, nvidia_drivers=drivers)
    except ImportInputError as exc:
        return _refuse(args, str(exc))
    try:
        cfg = validate(result)
    except ConfigError as exc:
        return _refuse(args, f"the imported stack does not load, nothing written\n{exc.render()}")
    policy_document = policy_config(cfg)
    policy_out = _policy_path(args, out)
    if policy_document and policy_out.exists() and not args.force:
        return _refuse(args, f"{policy_out} exists; pass --force to overwrite it")
    _write(args, result, cfg, out, (policy_out, policy_document))
    return EXIT_OK


def _write(args: argparse.Namespace, result: ImportResult, cfg: Any, out: Path, policy: tuple[Path, dict[str, Any]]) -> None:
    """The stack file, its policy settings (when it needs any) and the report, all together or not at all (an
    interrupt, a full disk); then the report on stdout, or the line naming its file."""
    policy_out, policy_document = policy
    # The schema line first, as in every stack of stacks/: an editor validates the import before it is committed.
    files = {out: stack_schema.modeline(out, PROJECT_DIR / "docs" / "stack.schema.json") + "\n"
             + stack_yaml(result, "python -m gpustack import")}
    written = [f"wrote {shown(out)}: {len(cfg.node_pools)} pool(s) ({', '.join(p.name for p in cfg.node_pools)})"]
    if policy_document:
        files[policy_out] = json.dumps(policy_document, indent=2) + "\n"
        how = "" if not args.out else f" (pass it to check/render with --policy-config {shown(policy_out)})"
        written.append(f"wrote {shown(policy_out)}: the policy pack settings the imported stack needs{how}")
    report = (json.dumps(json_report(result, written), indent=2, default=str) + "\n" if args.format == "json"
              else text_report(result, written))
    if args.report:
        files[Path(args.report)] = report
    interrupts.write_files(files)
    if args.report:
        print(f"wrote {args.report}: the migration report ({args.format})")
    else:
        sys.stdout.write(report)
