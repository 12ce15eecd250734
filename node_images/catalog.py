"""The node image catalog (catalog.yaml): which OS + kernel + architecture each GPU node image runs, and where
its precompiled driver image comes from for each driver branch.

A precompiled driver image is tagged `<branch>-<kernel>-<osTag>` (fact sheet §4.3), `kernel` being NFD's
`kernel-version.full`. NVIDIA publishes such images only inside its nightly build matrix (catalog.yaml
`nvidiaPrecompiledMatrix`); an image outside it for some branch names a `privateImage` repository that the
team fills with node_images/driver-precompiled/build.sh.

Plain data: PyYAML and dataclasses only, so the Pulumi program, the tests and build.sh (through the command
line, node_images/catalog_cli.py) share one reading of the file.

    python -m node_images.catalog check
    python -m node_images.catalog list
    python -m node_images.catalog ref ubuntu22.04-5.15.0-1068-aws-amd64 --branch 580
    python -m node_images.catalog shell ubuntu22.04-6.5.0-45-generic-amd64 --branch 580   # for build.sh
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from .inputfiles import CATALOG_MAX_BYTES, InputFileError, load_yaml

CATALOG_PATH = Path(__file__).resolve().with_name("catalog.yaml")
NVIDIA_DRIVER_REPOSITORY = "nvcr.io/nvidia/driver"
ARCHITECTURES = ("amd64", "arm64")
# The operator tags images of these OSes with the major version only (fact sheet §4.1).
MAJOR_ONLY_OS = frozenset({"rhel", "rocky", "ol"})

# NFD's OS and kernel labels, which per-image driver DaemonSets select by (GO:internal/state/nodepool.go).
NFD_OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
NFD_OS_VERSION_ID = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
NFD_OS_VERSION_MAJOR = "feature.node.kubernetes.io/system-os_release.VERSION_ID.major"
NFD_KERNEL_FULL = "feature.node.kubernetes.io/kernel-version.full"
_OS_TAG_PARTS = re.compile(r"^([a-z]+(?:-[a-z]+)*)([0-9][0-9.]*)$")


def os_release_labels(os_tag: str) -> dict[str, str]:
    """NFD labels of the nodes an OS tag names; a tag without a minor version (rhel9) matches VERSION_ID.major."""
    found = _OS_TAG_PARTS.fullmatch(os_tag)
    if found is None:
        raise ValueError(f"{os_tag!r} is not an OS tag (ID and version, e.g. ubuntu22.04)")
    os_id, version = found.groups()
    key = NFD_OS_VERSION_ID if "." in version else NFD_OS_VERSION_MAJOR
    return {NFD_OS_ID: os_id, key: version}


# Usable as a Kubernetes label value and a DNS-1123 subdomain (dots allowed, as in ubuntu22.04-...).
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
OS_ID = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
OS_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*$")
# `uname -r` as NFD publishes it in a label value: starts like 5.15.0, label-value characters only.
KERNEL = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+([-._A-Za-z0-9]*[A-Za-z0-9])?$")
# Ubuntu kernel releases: <major>.<minor>.<patch>-<abi>-<flavor>, e.g. 5.15.0-1068-aws, 6.8.0-60-generic-64k.
UBUNTU_KERNEL = re.compile(r"^(?P<line>[0-9]+\.[0-9]+)\.[0-9]+-[0-9]+-(?P<flavor>[a-z0-9]+(-[a-z0-9]+)*)$")
BRANCH = re.compile(r"^[0-9]{3}$")
LTS_LINE = re.compile(r"^[0-9]+\.[0-9]+$")
# host[:port]/path, lower case, without a tag or digest (the tag is always <branch>-<kernel>-<osTag>).
REPOSITORY = re.compile(
    r"^(?P<host>[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(:[0-9]{1,5})?)"
    r"(?P<path>(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)+)$"
)
IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

TOP_KEYS = ("version", "branches", "nvidiaRepository", "nvidiaPrecompiledMatrix", "images")
MATRIX_KEYS = ("branches", "os", "flavors", "ltsKernels", "architectures", "exclude")
# exclude-rule key -> the matrix list its value must come from
RULE_KEYS = {"os": "os", "branch": "branches", "ltsKernel": "ltsKernels", "flavor": "flavors", "arch": "architectures"}
IMAGE_KEYS = ("name", "os", "kernel", "arch", "privateImage", "description")
OS_KEYS = ("id", "version")

Branch = Union[str, int]


class CatalogError(ValueError):
    """The catalog file is not valid; `problems` lists every finding as `<where>: <key>: <what is wrong>`."""

    def __init__(self, path: Path, problems: list[str]):
        self.path = path
        self.problems = problems
        super().__init__(f"invalid node image catalog {path}:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class PrecompiledMatrix:
    """NVIDIA's precompiled build matrix: the product of the lists, less every combination an exclude rule
    matches in full (NVIDIA/gpu-driver-container .github/precompiled-matrix-config.json, multi-arch.mk)."""

    branches: tuple[str, ...]
    os: tuple[str, ...]
    flavors: tuple[str, ...]
    lts_kernels: tuple[str, ...]
    architectures: tuple[str, ...]
    exclude: tuple[tuple[tuple[str, str], ...], ...] = ()

    def unpublished_reason(self, os_tag: str, kernel: str, arch: str, branch: str) -> Optional[str]:
        """Why NVIDIA builds no `<branch>-<kernel>-<osTag>` image for `arch`; None when it is in the matrix."""
        if branch not in self.branches:
            return f"NVIDIA builds precompiled images for branches {', '.join(self.branches)} only, not {branch}"
        if os_tag not in self.os:
            return f"NVIDIA builds precompiled images for {', '.join(self.os)} only, not {os_tag}"
        match = UBUNTU_KERNEL.fullmatch(kernel)
        if not match:
            return f"kernel {kernel} is not an Ubuntu kernel release (<version>-<abi>-<flavor>)"
        line, flavor = match["line"], match["flavor"]
        if flavor not in self.flavors:
            return f"kernel flavor {flavor} is not one NVIDIA builds ({', '.join(self.flavors)})"
        if line not in self.lts_kernels:
            return f"kernel line {line} is not an LTS line NVIDIA builds ({', '.join(self.lts_kernels)})"
        if arch not in self.architectures:
            return f"NVIDIA builds precompiled images for {', '.join(self.architectures)} only, not {arch}"
        point = {"os": os_tag, "branch": branch, "ltsKernel": line, "flavor": flavor, "arch": arch}
        for rule in self.exclude:
            if all(point[key] == value for key, value in rule):
                terms = ", ".join(f"{key}={value}" for key, value in rule)
                return f"NVIDIA's matrix excludes {terms}"
        return None


@dataclass(frozen=True)
class NodeImage:
    """One catalog entry: a node image (OS, kernel, architecture) and its private driver repository, if any."""

    name: str
    os_id: str
    os_version: str
    kernel: str
    arch: str
    private_image: Optional[str] = None
    description: Optional[str] = None
    matrix: Optional[PrecompiledMatrix] = field(default=None, repr=False, compare=False)

    @property
    def os_tag(self) -> str:
        """NFD `ID` + `VERSION_ID` as the operator forms it: ubuntu22.04, rhel9 (major only for rhel/rocky/ol)."""
        version = self.os_version.split(".")[0] if self.os_id in MAJOR_ONLY_OS else self.os_version
        return f"{self.os_id}{version}"


@dataclass(frozen=True)
class Catalog:
    path: Path
    branches: tuple[str, ...]
    nvidia_repository: str
    matrix: PrecompiledMatrix
    images: tuple[NodeImage, ...]

    def __iter__(self) -> Iterator[NodeImage]:
        return iter(self.images)

    def __len__(self) -> int:
        return len(self.images)

    @property
    def names(self) -> list[str]:
        return [image.name for image in self.images]

    def get(self, name: str) -> NodeImage:
        for image in self.images:
            if image.name == name:
                return image
        raise KeyError(f"no node image {name!r} in {self.path}; known: {', '.join(self.names)}")

    def siblings(self, entry: NodeImage) -> list[NodeImage]:
        """Entries sharing `entry`'s image tag (same OS tag and kernel, any architecture), itself included."""
        return [i for i in self.images if i.os_tag == entry.os_tag and i.kernel == entry.kernel]

    def base_image(self, entry: NodeImage, branch: Branch) -> Optional[str]:
        """A published NVIDIA precompiled image of the same branch, OS tag and architecture as `entry`, which a
        private build of `entry` starts from (node_images/driver-precompiled/Dockerfile); generic kernels first."""
        branch = _branch(branch)
        donors = [
            i for i in self.images if i.os_tag == entry.os_tag and i.arch == entry.arch and is_published(i, branch)
        ]
        if not donors:
            return None
        donors.sort(key=lambda i: (not i.kernel.endswith("-generic"), i.name))
        return f"{self.nvidia_repository}:{precompiled_tag(donors[0], branch)}"


def _branch(branch: Branch) -> str:
    value = str(branch)
    if isinstance(branch, bool) or not BRANCH.fullmatch(value):
        raise ValueError(f"{branch!r} is not a driver branch such as 580 or 595")
    return value


def precompiled_tag(entry: NodeImage, branch: Branch) -> str:
    """`<branch>-<kernel>-<osTag>`, the tag the operator pulls for a precompiled driver (fact sheet §4.3)."""
    return f"{_branch(branch)}-{entry.kernel}-{entry.os_tag}"


def unpublished_reason(entry: NodeImage, branch: Branch) -> Optional[str]:
    """Why NVIDIA publishes no precompiled image for `entry` and `branch`; None when it does."""
    if entry.matrix is None:
        raise ValueError(f"{entry.name}: no precompiled matrix attached; load entries with load_catalog")
    return entry.matrix.unpublished_reason(entry.os_tag, entry.kernel, entry.arch, _branch(branch))


def is_published(entry: NodeImage, branch: Branch) -> bool:
    """True when `entry` lies inside NVIDIA's precompiled matrix for `branch`."""
    return unpublished_reason(entry, branch) is None


def image_ref(entry: NodeImage, branch: Branch, registry_repository: str = NVIDIA_DRIVER_REPOSITORY) -> str:
    """The driver image a node of `entry` runs for `branch`: `<registry_repository>:<tag>` when NVIDIA publishes
    it (`registry_repository` is NVIDIA's repository or a mirror of it), else `<privateImage>:<tag>`."""
    tag = precompiled_tag(entry, branch)
    reason = unpublished_reason(entry, branch)
    if reason is None:
        return f"{registry_repository}:{tag}"
    if entry.private_image:
        return f"{entry.private_image}:{tag}"
    raise ValueError(f"{entry.name}: NVIDIA publishes no {tag} image ({reason}) and the entry has no privateImage")


def split_repository(repository: str) -> tuple[str, str]:
    """`harbor.platform.internal/gpu-stack/driver` -> (`harbor.platform.internal/gpu-stack`, `driver`): the
    repository/image pair of a ClusterPolicy `driver` or NVIDIADriver spec."""
    head, _, image = repository.rpartition("/")
    return head, image


# ---------------------------------------------------------------------------------------------- loading


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}")


def _string_list(
    value: Any, where: str, problems: _Problems, pattern: Optional[re.Pattern[str]] = None, allow_int: bool = False
) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        problems.add(where, f"must be a non-empty list, got {value!r}")
        return ()
    out: list[str] = []
    for index, item in enumerate(value):
        if allow_int and isinstance(item, int) and not isinstance(item, bool):
            item = str(item)
        if not isinstance(item, str):
            hint = ' (quote it: YAML reads 5.15 or 22.04 as a number)' if isinstance(item, float) else ""
            problems.add(f"{where}[{index}]", f"must be a string, got {item!r}{hint}")
            continue
        if pattern is not None and not pattern.fullmatch(item):
            problems.add(f"{where}[{index}]", f"{item!r} is not valid")
            continue
        if item in out:
            problems.add(f"{where}[{index}]", f"{item!r} is listed twice")
            continue
        out.append(item)
    return tuple(out)


def _unknown_keys(data: dict, allowed: tuple[str, ...], where: str, problems: _Problems) -> None:
    for key in data:
        if key not in allowed:
            problems.add(f"{where}{key}", f"unknown key (allowed: {', '.join(allowed)})")


def _matrix(data: Any, problems: _Problems) -> Optional[PrecompiledMatrix]:
    where = "nvidiaPrecompiledMatrix"
    if not isinstance(data, dict):
        problems.add(where, f"must be a mapping, got {data!r}")
        return None
    _unknown_keys(data, MATRIX_KEYS, f"{where}.", problems)
    for key in MATRIX_KEYS[:-1]:
        if key not in data:
            problems.add(f"{where}.{key}", "is required")
    lists = {
        "branches": _string_list(data.get("branches"), f"{where}.branches", problems, BRANCH, allow_int=True),
        "os": _string_list(data.get("os"), f"{where}.os", problems),
        "flavors": _string_list(data.get("flavors"), f"{where}.flavors", problems),
        "ltsKernels": _string_list(data.get("ltsKernels"), f"{where}.ltsKernels", problems, LTS_LINE),
        "architectures": _string_list(data.get("architectures"), f"{where}.architectures", problems),
    }
    for index, arch in enumerate(lists["architectures"]):
        if arch not in ARCHITECTURES:
            problems.add(f"{where}.architectures[{index}]", f"{arch!r} is not one of {', '.join(ARCHITECTURES)}")
    rules: list[tuple[tuple[str, str], ...]] = []
    raw_rules = data.get("exclude", [])
    if not isinstance(raw_rules, list):
        problems.add(f"{where}.exclude", f"must be a list of rules, got {raw_rules!r}")
        raw_rules = []
    for index, rule in enumerate(raw_rules):
        here = f"{where}.exclude[{index}]"
        if not isinstance(rule, dict) or not rule:
            problems.add(here, f"must be a non-empty mapping of {', '.join(RULE_KEYS)}, got {rule!r}")
            continue
        terms: list[tuple[str, str]] = []
        for key, value in rule.items():
            if key not in RULE_KEYS:
                problems.add(f"{here}.{key}", f"unknown key (allowed: {', '.join(RULE_KEYS)})")
                continue
            if key == "branch" and isinstance(value, int) and not isinstance(value, bool):
                value = str(value)
            allowed = lists[RULE_KEYS[key]]
            if not isinstance(value, str) or value not in allowed:
                problems.add(f"{here}.{key}", f"{value!r} is not in nvidiaPrecompiledMatrix.{RULE_KEYS[key]}")
                continue
            terms.append((key, value))
        rules.append(tuple(terms))
    return PrecompiledMatrix(
        branches=lists["branches"],
        os=lists["os"],
        flavors=lists["flavors"],
        lts_kernels=lists["ltsKernels"],
        architectures=lists["architectures"],
        exclude=tuple(rules),
    )


def _repository_problem(value: str) -> Optional[str]:
    last = value.rsplit("/", 1)[-1]
    if "@" in value:
        return f"{value!r} must be a repository without a digest"
    if ":" in last:
        return f"{value!r} must be a repository without a tag: the tag is always <branch>-<kernel>-<osTag>"
    if "/" not in value:
        return f"{value!r} must name a registry host and a path, e.g. harbor.platform.internal/gpu-stack/driver"
    if not REPOSITORY.fullmatch(value):
        return f"{value!r} is not a registry repository (lower-case host[:port]/path)"
    return None


def _image(data: Any, index: int, matrix: PrecompiledMatrix, problems: _Problems) -> Optional[NodeImage]:
    where = f"images[{index}]"
    if not isinstance(data, dict):
        problems.add(where, f"must be a mapping, got {data!r}")
        return None
    name = data.get("name")
    if isinstance(name, str) and name:
        where = f"{where} ({name})"
    count = len(problems.items)
    _unknown_keys(data, IMAGE_KEYS, f"{where}: ", problems)
    for key in ("name", "os", "kernel", "arch"):
        if key not in data:
            problems.add(f"{where}: {key}", "is required")

    if "name" in data and (not isinstance(name, str) or not NAME.fullmatch(name) or len(name) > 63):
        problems.add(
            f"{where}: name",
            f"{name!r} is not a name of at most 63 lower-case letters, digits, '-' and '.' "
            "that starts and ends with a letter or digit",
        )

    os_id = os_version = ""
    os_data = data.get("os")
    if "os" in data:
        if not isinstance(os_data, dict):
            problems.add(f"{where}: os", f'must be a mapping like {{id: ubuntu, version: "22.04"}}, got {os_data!r}')
        else:
            _unknown_keys(os_data, OS_KEYS, f"{where}: os.", problems)
            os_id, os_version = os_data.get("id"), os_data.get("version")
            if not isinstance(os_id, str) or not OS_ID.fullmatch(os_id):
                problems.add(f"{where}: os.id", f"{os_id!r} is not an os-release ID such as ubuntu or rhel")
            if isinstance(os_version, (int, float)) and not isinstance(os_version, bool):
                problems.add(
                    f"{where}: os.version",
                    f'must be a quoted string such as "22.04", got the number {os_version!r} '
                    "(YAML reads 24.10 as 24.1)",
                )
            elif not isinstance(os_version, str) or not OS_VERSION.fullmatch(os_version):
                problems.add(f"{where}: os.version", f"{os_version!r} is not an os-release VERSION_ID such as 22.04")

    kernel = data.get("kernel")
    if "kernel" in data and (not isinstance(kernel, str) or not KERNEL.fullmatch(kernel) or len(kernel) > 63):
        problems.add(
            f"{where}: kernel",
            f"{kernel!r} is not a full kernel version as NFD reports kernel-version.full, e.g. 5.15.0-1068-aws",
        )

    arch = data.get("arch")
    if "arch" in data and arch not in ARCHITECTURES:
        problems.add(f"{where}: arch", f"{arch!r} is not one of {', '.join(ARCHITECTURES)}")

    private_image = data.get("privateImage")
    if "privateImage" in data:
        if not isinstance(private_image, str):
            problems.add(f"{where}: privateImage", f"must be a repository string, got {private_image!r}")
        elif (problem := _repository_problem(private_image)) is not None:
            problems.add(f"{where}: privateImage", problem)

    description = data.get("description")
    if "description" in data and not isinstance(description, str):
        problems.add(f"{where}: description", f"must be a string, got {description!r}")

    if len(problems.items) != count:
        return None
    return NodeImage(
        name=name,
        os_id=os_id,
        os_version=os_version,
        kernel=kernel,
        arch=arch,
        private_image=private_image,
        description=description,
        matrix=matrix,
    )


def _cross_checks(images: list[NodeImage], branches: tuple[str, ...], problems: _Problems) -> None:
    seen_names: dict[str, int] = {}
    seen_targets: dict[tuple[str, str, str], str] = {}
    repository_by_tag: dict[tuple[str, str], tuple[str, Optional[str]]] = {}
    for index, image in enumerate(images):
        where = f"images[{index}] ({image.name})"
        if image.name in seen_names:
            problems.add(f"{where}: name", f"duplicates images[{seen_names[image.name]}]")
        seen_names.setdefault(image.name, index)
        target = (image.os_tag, image.kernel, image.arch)
        if target in seen_targets:
            problems.add(
                f"{where}: kernel", f"{image.os_tag} {image.kernel} {image.arch} is already {seen_targets[target]}"
            )
        seen_targets.setdefault(target, image.name)
        shared = (image.os_tag, image.kernel)
        if shared in repository_by_tag and repository_by_tag[shared][1] != image.private_image:
            other, other_repository = repository_by_tag[shared]
            problems.add(
                f"{where}: privateImage",
                f"{image.private_image!r} differs from {other_repository!r} of {other}: both architectures "
                "share one image tag, so they must share one repository (a multi-architecture image)",
            )
        repository_by_tag.setdefault(shared, (image.name, image.private_image))

        unpublished = []
        for branch in branches:
            tag = precompiled_tag(image, branch)
            if not IMAGE_TAG.fullmatch(tag):
                problems.add(f"{where}: kernel", f"image tag {tag!r} is not a valid tag (at most 128 characters)")
            reason = unpublished_reason(image, branch)
            if reason is not None:
                unpublished.append(branch)
                if not image.private_image:
                    problems.add(
                        f"{where}: privateImage",
                        f"is required: NVIDIA publishes no precompiled image for branch {branch} ({reason}); "
                        "name the repository build.sh pushes the team's build to",
                    )
        if image.private_image and not unpublished:
            problems.add(
                f"{where}: privateImage",
                f"must be left out: NVIDIA publishes {image.os_tag} {image.kernel} {image.arch} for every branch "
                f"({', '.join(branches)}), and pulling the published image beats building one",
            )


def load_catalog(path: Union[str, Path] = CATALOG_PATH) -> Catalog:
    """Read and validate the catalog; raises CatalogError naming every bad entry and key."""
    path = Path(path)
    problems = _Problems()
    try:
        data = load_yaml(path, CATALOG_MAX_BYTES, "CATALOG_MAX_BYTES")
    except InputFileError as error:
        raise CatalogError(path, [str(error)]) from None
    if not isinstance(data, dict):
        raise CatalogError(path, [f"top level: must be a mapping, got {data!r}"])
    _unknown_keys(data, TOP_KEYS, "", problems)
    for key in TOP_KEYS:
        if key not in data:
            problems.add(key, "is required")
    if "version" in data and data["version"] != 1:
        problems.add("version", f"must be 1, got {data['version']!r}")
    branches = _string_list(data.get("branches"), "branches", problems, BRANCH, allow_int=True)
    repository = data.get("nvidiaRepository", NVIDIA_DRIVER_REPOSITORY)
    if not isinstance(repository, str):
        problems.add("nvidiaRepository", f"must be a repository string, got {repository!r}")
    elif (problem := _repository_problem(repository)) is not None:
        problems.add("nvidiaRepository", problem)
    matrix = _matrix(data.get("nvidiaPrecompiledMatrix"), problems) if "nvidiaPrecompiledMatrix" in data else None

    images: list[NodeImage] = []
    raw_images = data.get("images")
    if "images" in data and (not isinstance(raw_images, list) or not raw_images):
        problems.add("images", f"must be a non-empty list, got {raw_images!r}")
    elif matrix is not None and isinstance(raw_images, list):
        parsed = [_image(item, index, matrix, problems) for index, item in enumerate(raw_images)]
        images = [image for image in parsed if image is not None]
        if not problems.items:
            _cross_checks(images, branches, problems)

    if problems.items:
        raise CatalogError(path, problems.items)
    assert matrix is not None
    return Catalog(path=path, branches=branches, nvidia_repository=repository, matrix=matrix, images=tuple(images))


if __name__ == "__main__":  # the command line lives in catalog_cli.py; imported here, not above, to avoid a cycle
    from .catalog_cli import main
    raise SystemExit(main())
