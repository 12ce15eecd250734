"""`python -m gpustack import`: a running GPU Operator's ClusterPolicy as a gpu-stack stack file.

Inputs are what kubectl and helm print: the ClusterPolicy (`kubectl get clusterpolicy -o yaml`, one object or a
List), optionally the operator's Helm values (`helm get values --all`), the nodes (`kubectl get nodes -o yaml`)
and ConfigMaps the ClusterPolicy names (`kubectl get cm -n gpu-operator NAME -o yaml`). A field the ClusterPolicy
lacks takes the Helm value when values are given and the CRD default otherwise: the two differ (fact sheet §11,
e.g. `dcgm.enabled`, `mig.strategy`, `driver.upgradePolicy.autoUpgrade`).

Every field of the effective spec ends up in exactly one place: mapped onto a gpu-stack key (`mapping` holds the
table), equal to what gpu-stack renders anyway, in the report's without-effect part (settings of a component the
operator did not deploy, deprecated no-ops), or in the not-carried report with the reason; never dropped without a
word. A MIG setup the stack would wipe (a pool labelled all-disabled over partitioned nodes) stops the import.
`import_cluster_policy` is pure; `run` does the files.

The package is split by input: `clusterpolicy` (the object and its effective spec), `helm`, `nodes` (node pools),
`configmaps`, `mig` (mig-parted layouts), and per area of the mapping `images`, `driver`, `operands`, `mapping`
(the table and the per-operand fields); `shapes` the field kinds every input is checked against before any
mapping runs, `spec_fields` the ClusterPolicy's and the Helm values' typed fields; `report` holds the report rules,
`build` the `_Importer` that runs the mapping in stack-file order, `stackfile` the check, the written file and its
policy-pack config, `tables` the generated tables of docs/migration.md.
This module re-exports what callers use and holds the command line (`run` reads `PROJECT_DIR` from here).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

from components.catalogs import catalog
from components.config import OS_TAG, ConfigError
from gpustack.importer.build import import_cluster_policy
from gpustack.importer.clusterpolicy import cluster_policy_of
from gpustack.importer.common import ClusterFacts, ImportInputError, ImportResult, NotCarried, read_yaml
from gpustack.importer.configmaps import configmaps_of
from gpustack.importer.nodes import INSTANCE_TYPE, model_from_product, nodes_of
from gpustack.importer.nvidiadriver import nvidia_drivers_of
from gpustack.importer.stackfile import policy_config, stack_yaml, validate

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
    parser.add_argument("--clusterpolicy", required=True, metavar="FILE", help="`kubectl get clusterpolicy -o yaml` output")
    parser.add_argument("--helm-values", metavar="FILE", help="the operator's `helm get values --all -o yaml`: fields the ClusterPolicy lacks take these, not the CRD defaults")
    parser.add_argument("--stack", required=True, help="stack name: writes stacks/Pulumi.<name>.yaml")
    parser.add_argument("--out", metavar="PATH", help="write the stack file here instead")
    parser.add_argument("--force", action="store_true", help="overwrite an existing stack file")
    parser.add_argument("--context", required=True, help="kubeconfig context of the cluster (gpu-stack:cluster.context)")
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


def run(args: argparse.Namespace) -> int:
    try:
        out = _output_path(args)
        if out.exists() and not args.force:
            raise ImportInputError(f"{out} exists; pass --force to overwrite it")
        if args.os is not None and not OS_TAG.fullmatch(args.os):
            raise ImportInputError(f"--os {args.os!r} is not an OS tag such as ubuntu22.04 or rhel9")
        policy = cluster_policy_of(read_yaml(args.clusterpolicy, "--clusterpolicy"), args.clusterpolicy)
        helm = read_yaml(args.helm_values, "--helm-values") if args.helm_values else None
        nodes = nodes_of(read_yaml(args.nodes, "--nodes"), args.nodes) if args.nodes else None
        configmaps = configmaps_of([(path, read_yaml(path, "--configmap")) for path in args.configmap])
        drivers = nvidia_drivers_of([(path, read_yaml(path, "--nvidiadriver")) for path in args.nvidiadriver])
        facts = ClusterFacts(
            context=args.context,
            node_agent_image=args.node_agent_image,
            cluster_name=args.cluster_name,
            kubernetes_versions=tuple(args.kubernetes_version),
            namespace=args.namespace,
            container_runtime=args.container_runtime,
            gpu_models=_gpu_models(args.gpu_model),
            os=args.os,
            pool_labels=tuple(args.pool_label),
            openshift_version=args.openshift_version,
            imagestream=read_yaml(args.imagestream, "--imagestream") if args.imagestream else None,
            proxy=read_yaml(args.proxy, "--proxy") if args.proxy else None,
        )
        result = import_cluster_policy(policy, facts, helm_values=helm, nodes=nodes, configmaps=configmaps, nvidia_drivers=drivers)
    except ImportInputError as exc:
        print(f"import: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        cfg = validate(result)
    except ConfigError as exc:
        print(f"import: the imported stack does not load, nothing written\n{exc.render()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    policy = policy_config(cfg)
    policy_out = _policy_path(args, out)
    if policy and policy_out.exists() and not args.force:
        print(f"import: {policy_out} exists; pass --force to overwrite it", file=sys.stderr)
        return EXIT_BAD_INPUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(stack_yaml(result, "python -m gpustack import"))
    print(f"wrote {out}: {len(cfg.node_pools)} pool(s) ({', '.join(p.name for p in cfg.node_pools)})")
    if policy:
        policy_out.parent.mkdir(parents=True, exist_ok=True)
        policy_out.write_text(json.dumps(policy, indent=2) + "\n")
        how = "" if not args.out else f" (pass it to check/render with --policy-config {policy_out})"
        print(f"wrote {policy_out}: the policy pack settings the imported stack needs{how}")
    print(f"not carried ({len(result.not_carried)}):")
    for item in result.not_carried:
        print(f"  {item.render()}")
    if result.no_effect:
        print(f"without effect in the operator ({len(result.no_effect)}):")
        for item in result.no_effect:
            print(f"  {item.render()}")
    if result.notes:
        print("notes:")
        for note in result.notes:
            print(f"  {note}")
    return EXIT_OK
