"""The command line of the node image catalog (node_images/catalog.py), for people and for build.sh.

    python -m node_images.catalog check
    python -m node_images.catalog list
    python -m node_images.catalog ref ubuntu22.04-5.15.0-1068-aws-amd64 --branch 580
    python -m node_images.catalog shell ubuntu22.04-6.5.0-45-generic-amd64 --branch 580   # for build.sh

`python -m node_images.catalog_cli ...` is the same command. Kept apart from catalog.py so that the data model
and loader, which the Pulumi program imports and the policy pack carries a copy of, hold no command line.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Optional

from . import catalog as _catalog
from .catalog import (
    CATALOG_PATH,
    Catalog,
    CatalogError,
    NodeImage,
    _branch,
    image_ref,
    is_published,
    load_catalog,
    precompiled_tag,
    unpublished_reason,
)


def _shell_vars(catalog: Catalog, entry: NodeImage, branch: str) -> dict[str, str]:
    reason = unpublished_reason(entry, branch)
    return {
        "NAME": entry.name,
        "OS_TAG": entry.os_tag,
        "KERNEL": entry.kernel,
        "ARCH": entry.arch,
        "BRANCH": branch,
        "TAG": precompiled_tag(entry, branch),
        "PUBLISHED": "false" if reason else "true",
        "REASON": reason or "",
        "NVIDIA_REF": f"{catalog.nvidia_repository}:{precompiled_tag(entry, branch)}",
        "PRIVATE_IMAGE": entry.private_image or "",
        "BASE_IMAGE": catalog.base_image(entry, branch) or "",
        "SIBLING_ARCHES": " ".join(sorted(i.arch for i in catalog.siblings(entry))),
    }


def main(argv: Optional[list[str]] = None) -> int:
    # The description is the first paragraph of the catalog's docstring: what the catalog is.
    parser = argparse.ArgumentParser(prog="python -m node_images.catalog", description=_catalog.__doc__.split("\n\n")[0])
    parser.add_argument("--catalog", type=Path, default=CATALOG_PATH, help="catalog file (default: %(default)s)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="validate the catalog")
    commands.add_parser("list", help="every image and where its driver image comes from per branch")
    ref = commands.add_parser("ref", help="the driver image reference of one image and branch")
    ref.add_argument("name")
    ref.add_argument("--branch", required=True)
    ref.add_argument("--registry-repository", default=None, help="NVIDIA's repository or a mirror of it")
    shell = commands.add_parser("shell", help="KEY='value' lines describing one image and branch (for build.sh)")
    shell.add_argument("name")
    shell.add_argument("--branch", required=True)
    args = parser.parse_args(argv)

    try:
        catalog = load_catalog(args.catalog)
        if args.command == "check":
            print(f"{catalog.path}: {len(catalog)} node images, branches {', '.join(catalog.branches)}")
        elif args.command == "list":
            for entry in catalog:
                sources = []
                for branch in catalog.branches:
                    sources.append(f"{branch}={'nvidia' if is_published(entry, branch) else 'private'}")
                print(f"{entry.name}\t{entry.os_tag}\t{entry.kernel}\t{entry.arch}\t{' '.join(sources)}")
        elif args.command == "ref":
            entry = catalog.get(args.name)
            print(image_ref(entry, args.branch, args.registry_repository or catalog.nvidia_repository))
        else:
            entry = catalog.get(args.name)
            for key, value in _shell_vars(catalog, entry, _branch(args.branch)).items():
                print(f"{key}={shlex.quote(value)}")
    except (CatalogError, KeyError, ValueError) as error:
        message = error.args[0] if isinstance(error, KeyError) else str(error)
        print(f"error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
