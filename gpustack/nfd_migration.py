"""`python -m gpustack.nfd_migration STATE.json [--out FILE]`: step 2 of moving a live stack off the NFD Helm release.

Earlier versions installed Node Feature Discovery as the Helm release `node-feature-discovery`; this version renders
its objects itself under the same names (components/states/nfd.py, "Migrating a live stack from the Helm
release"). Dropping the release from the program makes `pulumi up` delete it, and a release's delete is `helm
uninstall`. This command edits a `pulumi stack export` file so the release is retained instead: the next `pulumi
up` removes it from the state and leaves the cluster alone. Feed the file back with `pulumi stack import`.

Exit codes: 0 the release is marked (or the state has none: nothing to migrate); 2 the file is not a stack export.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from gpustack import interrupts
from node_images.inputfiles import IMPORT_INPUT_MAX_BYTES, InputFileError, load_json

RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
RELEASE = "node-feature-discovery"  # components/kit/nfd_chart.py RELEASE
PARENT_TYPE = "gpu-stack:index:NodeFeatureDiscovery"


class NotAStackExport(Exception):
    pass


def nfd_releases(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The NFD Helm releases gpu-stack registered in a `pulumi stack export` document (one per stack, at most)."""
    deployment = state.get("deployment") if isinstance(state, dict) else None
    resources = deployment.get("resources") if isinstance(deployment, dict) else None
    if not isinstance(resources, list):
        raise NotAStackExport("not a `pulumi stack export` document: no deployment.resources list")
    return [
        r
        for r in resources
        if isinstance(r, dict)
        and r.get("type") == RELEASE_TYPE
        and str(r.get("urn", "")).endswith(f"${RELEASE_TYPE}::{RELEASE}")
        and f"${PARENT_TYPE}$" in str(r.get("urn", ""))
    ]


def retain_nfd_release(state: dict[str, Any]) -> list[str]:
    """Marks each NFD release `retainOnDelete` (in place); the URNs marked."""
    releases = nfd_releases(state)
    for release in releases:
        release["retainOnDelete"] = True
    return [str(r["urn"]) for r in releases]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpustack.nfd_migration", description=__doc__.split("\n\n")[0])
    parser.add_argument("state", type=Path, help="a file written by `pulumi stack export --file`")
    parser.add_argument("--out", type=Path, help="where to write the edited export (default: the input file)")
    args = parser.parse_args(argv)
    try:
        # A state export is as large as an import dump can be: the same guarded door and limit.
        state = load_json(args.state, IMPORT_INPUT_MAX_BYTES, "IMPORT_INPUT_MAX_BYTES")
        marked = retain_nfd_release(state)
    except InputFileError as exc:
        print(exc, file=sys.stderr)
        return 2
    except NotAStackExport as exc:
        print(f"{args.state}: {exc}", file=sys.stderr)
        return 2
    if not marked:
        print(f"{args.state}: no Helm release {RELEASE} of gpu-stack in this state: nothing to migrate")
        return 0
    out = args.out or args.state
    # A state file half written would be imported as a broken state: whole or not at all.
    interrupts.write_text(out, json.dumps(state, indent=4) + "\n")
    for urn in marked:
        print(f"retainOnDelete set on {urn}")
    print(f"wrote {out}: run `pulumi stack import --file {out}`, then "
          "`PULUMI_K8S_UPSERT_EXISTING_OBJECTS=true pulumi up` (components/states/nfd.py)")
    return 0


if __name__ == "__main__":
    interrupts.install()
    sys.exit(main())
