"""Node image catalog (node_images/catalog.yaml) and the private precompiled driver build
(node_images/driver-precompiled): catalog validation, tag resolution, build.sh --dry-run, Dockerfile, shellcheck."""

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dockerfile_parse import DockerfileParser

from node_images import catalog as nic
from node_images import catalog_cli
from node_images.catalog import CatalogError, NodeImage, load_catalog

ROOT = Path(__file__).resolve().parent.parent
NODE_IMAGES = ROOT / "node_images"
BUILD_DIR = NODE_IMAGES / "driver-precompiled"
BUILD_SH = BUILD_DIR / "build.sh"
DOCKERFILE = BUILD_DIR / "Dockerfile"

# What each catalog image resolves to, per branch (NVIDIA's matrix decides which are published).
EXPECTED_REFS = {
    "ubuntu22.04-5.15.0-139-generic-amd64": {
        "580": "nvcr.io/nvidia/driver:580-5.15.0-139-generic-ubuntu22.04",
        "595": "nvcr.io/nvidia/driver:595-5.15.0-139-generic-ubuntu22.04",
    },
    "ubuntu22.04-5.15.0-1068-aws-amd64": {
        "580": "nvcr.io/nvidia/driver:580-5.15.0-1068-aws-ubuntu22.04",
        "595": "nvcr.io/nvidia/driver:595-5.15.0-1068-aws-ubuntu22.04",
    },
    "ubuntu24.04-6.8.0-79-generic-amd64": {
        "580": "nvcr.io/nvidia/driver:580-6.8.0-79-generic-ubuntu24.04",
        "595": "nvcr.io/nvidia/driver:595-6.8.0-79-generic-ubuntu24.04",
    },
    "ubuntu24.04-6.8.0-1035-aws-arm64": {
        "580": "nvcr.io/nvidia/driver:580-6.8.0-1035-aws-ubuntu24.04",
        "595": "nvcr.io/nvidia/driver:595-6.8.0-1035-aws-ubuntu24.04",
    },
    "ubuntu22.04-6.5.0-45-generic-amd64": {
        "580": "harbor.platform.internal/gpu-stack/driver:580-6.5.0-45-generic-ubuntu22.04",
        "595": "harbor.platform.internal/gpu-stack/driver:595-6.5.0-45-generic-ubuntu22.04",
    },
}

MATRIX = {
    "branches": ["535", "550", "570", "580", "595"],
    "os": ["ubuntu22.04", "ubuntu24.04", "ubuntu26.04"],
    "flavors": ["aws", "azure", "azure-fde", "generic", "nvidia", "oracle"],
    "ltsKernels": ["5.15", "6.8", "7.0"],
    "architectures": ["amd64", "arm64"],
    "exclude": [
        {"os": "ubuntu26.04", "branch": "580"},
        {"os": "ubuntu24.04", "ltsKernel": "5.15"},
        {"os": "ubuntu24.04", "ltsKernel": "7.0"},
        {"os": "ubuntu26.04", "ltsKernel": "5.15"},
        {"os": "ubuntu26.04", "ltsKernel": "6.8"},
        {"os": "ubuntu22.04", "ltsKernel": "7.0"},
        {"os": "ubuntu22.04", "flavor": "azure-fde"},
        {"os": "ubuntu22.04", "arch": "arm64"},
        {"os": "ubuntu26.04", "arch": "arm64"},
        {"flavor": "azure-fde", "arch": "arm64"},
        {"branch": "535", "os": "ubuntu24.04"},
        {"branch": "535", "os": "ubuntu26.04"},
        {"branch": "550", "os": "ubuntu26.04"},
        {"branch": "570", "os": "ubuntu26.04"},
        {"branch": "550", "flavor": "azure-fde"},
        {"branch": "535", "arch": "arm64"},
        {"branch": "550", "arch": "arm64"},
        {"branch": "570", "arch": "arm64"},
    ],
}


def published_entry(**overrides):
    entry = {"name": "ubuntu22.04-5.15.0-139-generic-amd64", "os": {"id": "ubuntu", "version": "22.04"},
             "kernel": "5.15.0-139-generic", "arch": "amd64"}
    entry.update(overrides)
    return entry


def private_entry(**overrides):
    entry = {"name": "ubuntu22.04-6.5.0-45-generic-amd64", "os": {"id": "ubuntu", "version": "22.04"},
             "kernel": "6.5.0-45-generic", "arch": "amd64", "privateImage": "harbor.platform.internal/gpu-stack/driver"}
    entry.update(overrides)
    return entry


def catalog_data(*images):
    return {
        "version": 1,
        "branches": ["580", "595"],
        "nvidiaRepository": "nvcr.io/nvidia/driver",
        "nvidiaPrecompiledMatrix": copy.deepcopy(MATRIX),
        "images": list(images) or [published_entry(), private_entry()],
    }


def write(tmp_path, data, name="catalog.yaml"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


# ---------------------------------------------------------------------------------------------- the catalog


def test_catalog_loads_and_every_entry_is_valid(cat):
    assert cat.branches == ("580", "595")
    assert cat.nvidia_repository == "nvcr.io/nvidia/driver"
    assert sorted(cat.names) == sorted(EXPECTED_REFS)
    for entry in cat:
        assert nic.NAME.match(entry.name) and len(entry.name) <= 63
        assert nic.KERNEL.match(entry.kernel)
        assert entry.arch in nic.ARCHITECTURES
        # names follow <osTag>-<kernel>-<arch>, so a name cannot silently disagree with its fields
        assert entry.name == f"{entry.os_tag}-{entry.kernel}-{entry.arch}"
        for branch in cat.branches:
            assert nic.is_published(entry, branch) or entry.private_image


def test_catalog_covers_the_node_images_the_fleet_runs(cat):
    amd64_2204 = [e for e in cat if e.os_tag == "ubuntu22.04" and e.arch == "amd64" and e.kernel.startswith("5.15.")]
    assert {e.kernel.split("-")[-1] for e in amd64_2204} >= {"generic", "aws"}
    assert any(e.os_tag == "ubuntu24.04" and e.kernel.startswith("6.8.") and e.arch == "amd64" for e in cat)
    assert any(e.arch == "arm64" for e in cat)
    private = [e for e in cat if not nic.is_published(e, "580")]
    assert [e.name for e in private] == ["ubuntu22.04-6.5.0-45-generic-amd64"]
    assert cat.get("ubuntu22.04-6.5.0-45-generic-amd64").private_image == "harbor.platform.internal/gpu-stack/driver"


def test_catalog_matrix_is_nvidias(cat, tmp_path):
    """catalog.yaml carries NVIDIA's matrix (precompiled-matrix-config.json + multi-arch.mk) as written above."""
    assert cat.matrix == load_catalog(write(tmp_path, catalog_data())).matrix


@pytest.mark.parametrize("name", sorted(EXPECTED_REFS))
@pytest.mark.parametrize("branch", ["580", "595"])
def test_tag_resolution_for_every_catalog_image(cat, name, branch):
    entry = cat.get(name)
    tag = nic.precompiled_tag(entry, branch)
    assert tag == f"{branch}-{entry.kernel}-{entry.os_tag}"
    assert nic.image_ref(entry, branch, cat.nvidia_repository) == EXPECTED_REFS[name][branch]
    assert nic.is_published(entry, branch) == EXPECTED_REFS[name][branch].startswith("nvcr.io/")
    # a mirror replaces NVIDIA's repository for published images only
    mirrored = nic.image_ref(entry, int(branch), "mirror.internal:5000/nvidia/driver")
    expected = EXPECTED_REFS[name][branch].replace("nvcr.io/nvidia/driver", "mirror.internal:5000/nvidia/driver")
    assert mirrored == expected


def test_image_helpers(cat):
    entry = cat.get("ubuntu22.04-6.5.0-45-generic-amd64")
    assert nic.unpublished_reason(entry, "580") == "kernel line 6.5 is not an LTS line NVIDIA builds (5.15, 6.8, 7.0)"
    assert nic.split_repository(entry.private_image) == ("harbor.platform.internal/gpu-stack", "driver")
    assert cat.base_image(entry, "580") == "nvcr.io/nvidia/driver:580-5.15.0-139-generic-ubuntu22.04"
    assert [e.name for e in cat.siblings(entry)] == [entry.name]
    with pytest.raises(KeyError, match="no node image 'nope'"):
        cat.get("nope")
    for bad in ("58", "latest", "580.95.05", True):
        with pytest.raises(ValueError, match="is not a driver branch"):
            nic.precompiled_tag(entry, bad)


@pytest.mark.parametrize(
    ("os_tag", "kernel", "arch", "branch", "reason"),
    [
        ("ubuntu22.04", "5.15.0-1068-aws", "amd64", "580", None),
        ("ubuntu24.04", "6.8.0-79-generic", "arm64", "595", None),
        ("ubuntu24.04", "6.8.0-1020-azure-fde", "amd64", "580", None),
        ("ubuntu26.04", "7.0.0-10-generic", "amd64", "595", None),
        ("ubuntu26.04", "7.0.0-10-generic", "amd64", "580", "excludes os=ubuntu26.04, branch=580"),
        ("ubuntu22.04", "6.8.0-60-generic", "amd64", "580", None),  # the 22.04 HWE kernel is in the matrix
        ("ubuntu22.04", "6.5.0-45-generic", "amd64", "580", "kernel line 6.5 is not an LTS line NVIDIA builds"),
        ("ubuntu22.04", "5.15.0-139-generic", "arm64", "580", "excludes os=ubuntu22.04, arch=arm64"),
        ("ubuntu22.04", "5.15.0-1070-azure-fde", "amd64", "580", "excludes os=ubuntu22.04, flavor=azure-fde"),
        ("ubuntu24.04", "6.8.0-1020-azure-fde", "arm64", "580", "excludes flavor=azure-fde, arch=arm64"),
        ("ubuntu24.04", "6.8.0-60-generic-64k", "arm64", "580", "flavor generic-64k is not one NVIDIA builds"),
        ("ubuntu24.04", "6.8.0-60-lowlatency", "amd64", "580", "flavor lowlatency is not one NVIDIA builds"),
        ("ubuntu24.04", "6.8.0-79-generic", "amd64", "560", "branches 535, 550, 570, 580, 595 only, not 560"),
        # the EOL branches NVIDIA built until their end of life
        ("ubuntu22.04", "5.15.0-139-generic", "amd64", "535", None),
        ("ubuntu24.04", "6.8.0-79-generic", "amd64", "535", "excludes branch=535, os=ubuntu24.04"),
        ("ubuntu24.04", "6.8.0-79-generic", "amd64", "550", None),
        ("ubuntu24.04", "6.8.0-1020-azure-fde", "amd64", "550", "excludes branch=550, flavor=azure-fde"),
        ("ubuntu24.04", "6.8.0-79-generic", "amd64", "570", None),
        ("ubuntu24.04", "6.8.0-1035-aws", "arm64", "570", "excludes branch=570, arch=arm64"),
        ("ubuntu26.04", "7.0.0-10-generic", "amd64", "570", "excludes branch=570, os=ubuntu26.04"),
        ("rhel9", "5.14.0-427.13.1.el9_4.x86_64", "amd64", "580", "ubuntu22.04, ubuntu24.04, ubuntu26.04 only"),
        ("ubuntu24.04", "6.6.30-custom", "amd64", "580", "not an Ubuntu kernel release"),
    ],
)
def test_published_matrix(cat, os_tag, kernel, arch, branch, reason):
    got = cat.matrix.unpublished_reason(os_tag, kernel, arch, branch)
    if reason is None:
        assert got is None
    else:
        assert got is not None and reason in got


def test_branch_published_for_one_branch_only_needs_a_private_image_for_the_other(tmp_path):
    entry = {"name": "ubuntu26.04-7.0.0-10-generic-amd64", "os": {"id": "ubuntu", "version": "26.04"},
             "kernel": "7.0.0-10-generic", "arch": "amd64"}
    with pytest.raises(CatalogError, match=r"images\[0\] \(ubuntu26.04-7.0.0-10-generic-amd64\): privateImage: "
                                           r"is required: NVIDIA publishes no precompiled image for branch 580"):
        load_catalog(write(tmp_path, catalog_data(entry)))
    entry["privateImage"] = "harbor.internal/gpu/driver"
    loaded = load_catalog(write(tmp_path, catalog_data(entry)))
    image = loaded.get(entry["name"])
    assert nic.image_ref(image, "580") == "harbor.internal/gpu/driver:580-7.0.0-10-generic-ubuntu26.04"
    assert nic.image_ref(image, "595") == "nvcr.io/nvidia/driver:595-7.0.0-10-generic-ubuntu26.04"


def test_os_tag_is_major_only_for_rhel_like_systems(tmp_path):
    entry = {"name": "rhel9.4-5.14.0-427.13.1.el9-4-amd64", "os": {"id": "rhel", "version": "9.4"},
             "kernel": "5.14.0-427.13.1.el9_4.x86_64", "arch": "amd64", "privateImage": "harbor.internal/gpu/driver"}
    image = load_catalog(write(tmp_path, catalog_data(entry))).get(entry["name"])
    assert image.os_tag == "rhel9"
    assert nic.precompiled_tag(image, 580) == "580-5.14.0-427.13.1.el9_4.x86_64-rhel9"


def test_image_ref_without_private_image_is_an_error(cat):
    entry = NodeImage("ubuntu22.04-6.5.0-44-generic-amd64", "ubuntu", "22.04", "6.5.0-44-generic", "amd64",
                      matrix=cat.matrix)
    message = "NVIDIA publishes no 580-6.5.0-44-generic-ubuntu22.04 image .* no privateImage"
    with pytest.raises(ValueError, match=message):
        nic.image_ref(entry, "580")


# ---------------------------------------------------------------------------------------------- bad catalogs


def mutate(change):
    data = catalog_data()
    change(data)
    return data


BAD_CATALOGS = {
    "name": (
        lambda d: d["images"][0].update(name="Ubuntu_Bad"),
        "images[0] (Ubuntu_Bad): name: 'Ubuntu_Bad' is not a name of at most 63 lower-case letters",
    ),
    "missing kernel": (
        lambda d: d["images"][1].pop("kernel"),
        "images[1] (ubuntu22.04-6.5.0-45-generic-amd64): kernel: is required",
    ),
    "short kernel": (
        lambda d: d["images"][0].update(kernel="5.15"),
        "images[0] (ubuntu22.04-5.15.0-139-generic-amd64): kernel: '5.15' is not a full kernel version",
    ),
    "arch": (
        lambda d: d["images"][0].update(arch="x86_64"),
        "images[0] (ubuntu22.04-5.15.0-139-generic-amd64): arch: 'x86_64' is not one of amd64, arm64",
    ),
    "os version as number": (
        lambda d: d["images"][0]["os"].update(version=22.04),
        "images[0] (ubuntu22.04-5.15.0-139-generic-amd64): os.version: must be a quoted string such as \"22.04\"",
    ),
    "os as os tag": (
        lambda d: d["images"][0].update(os="ubuntu22.04"),
        "images[0] (ubuntu22.04-5.15.0-139-generic-amd64): os: must be a mapping like {id: ubuntu",
    ),
    "os id": (
        lambda d: d["images"][0]["os"].update(id="Ubuntu"),
        "images[0] (ubuntu22.04-5.15.0-139-generic-amd64): os.id: 'Ubuntu' is not an os-release ID",
    ),
    "unknown key": (
        lambda d: d["images"][1].update(privateimage="x"),
        "images[1] (ubuntu22.04-6.5.0-45-generic-amd64): privateimage: unknown key (allowed: name, os, kernel",
    ),
    "private image with tag": (
        lambda d: d["images"][1].update(privateImage="harbor.platform.internal/gpu-stack/driver:580"),
        "images[1] (ubuntu22.04-6.5.0-45-generic-amd64): privateImage: 'harbor.platform.internal/gpu-stack/driver:580' "
        "must be a repository without a tag",
    ),
    "private image with digest": (
        lambda d: d["images"][1].update(privateImage="registry.example.com/driver@sha256:" + "a" * 64),
        "privateImage: 'registry.example.com/driver@sha256:" + "a" * 64 + "' must be a repository without a digest",
    ),
    "private image without registry": (
        lambda d: d["images"][1].update(privateImage="driver"),
        "privateImage: 'driver' must name a registry host and a path",
    ),
    "private image upper case": (
        lambda d: d["images"][1].update(privateImage="Registry.example.com/Driver"),
        "privateImage: 'Registry.example.com/Driver' is not a registry repository",
    ),
    "private image missing": (
        lambda d: d["images"][1].pop("privateImage"),
        "images[1] (ubuntu22.04-6.5.0-45-generic-amd64): privateImage: is required: NVIDIA publishes no precompiled "
        "image for branch 580 (kernel line 6.5 is not an LTS line NVIDIA builds (5.15, 6.8, 7.0))",
    ),
    "private image on a published kernel": (
        lambda d: d["images"][0].update(privateImage="harbor.platform.internal/gpu-stack/driver"),
        "images[0] (ubuntu22.04-5.15.0-139-generic-amd64): privateImage: must be left out: NVIDIA publishes "
        "ubuntu22.04 5.15.0-139-generic amd64 for every branch (580, 595)",
    ),
    "duplicate name": (
        lambda d: d["images"].append(private_entry(kernel="6.5.0-44-generic")),
        "images[2] (ubuntu22.04-6.5.0-45-generic-amd64): name: duplicates images[1]",
    ),
    "duplicate kernel": (
        lambda d: d["images"].append(private_entry(name="hwe-again")),
        "images[2] (hwe-again): kernel: ubuntu22.04 6.5.0-45-generic amd64 is already "
        "ubuntu22.04-6.5.0-45-generic-amd64",
    ),
    "architectures in two repositories": (
        lambda d: d["images"].append(
            private_entry(name="ubuntu22.04-6.5.0-45-generic-arm64", arch="arm64", privateImage="other.example.com/d")
        ),
        "images[2] (ubuntu22.04-6.5.0-45-generic-arm64): privateImage: 'other.example.com/d' differs from "
        "'harbor.platform.internal/gpu-stack/driver' of ubuntu22.04-6.5.0-45-generic-amd64",
    ),
    "exclude value": (
        lambda d: d["nvidiaPrecompiledMatrix"]["exclude"].append({"flavor": "azure_fde"}),
        "nvidiaPrecompiledMatrix.exclude[18].flavor: 'azure_fde' is not in nvidiaPrecompiledMatrix.flavors",
    ),
    "exclude key": (
        lambda d: d["nvidiaPrecompiledMatrix"]["exclude"].append({"distro": "ubuntu22.04"}),
        "nvidiaPrecompiledMatrix.exclude[18].distro: unknown key (allowed: os, branch, ltsKernel, flavor, arch)",
    ),
    "lts kernel as number": (
        lambda d: d["nvidiaPrecompiledMatrix"].update(ltsKernels=["5.15", 6.8]),
        "nvidiaPrecompiledMatrix.ltsKernels[1]: must be a string, got 6.8 (quote it",
    ),
    "matrix list missing": (
        lambda d: d["nvidiaPrecompiledMatrix"].pop("flavors"),
        "nvidiaPrecompiledMatrix.flavors: is required",
    ),
    "branch": (
        lambda d: d.update(branches=["58"]),
        "branches[0]: '58' is not valid",
    ),
    "version": (
        lambda d: d.update(version=2),
        "version: must be 1, got 2",
    ),
    "top-level key": (
        lambda d: d.update(image=[]),
        "image: unknown key (allowed: version, branches, nvidiaRepository, nvidiaPrecompiledMatrix, images)",
    ),
    "no images": (
        lambda d: d.update(images=[]),
        "images: must be a non-empty list, got []",
    ),
    "entry not a mapping": (
        lambda d: d["images"].append("ubuntu22.04-5.15.0-1068-aws-amd64"),
        "images[2]: must be a mapping, got 'ubuntu22.04-5.15.0-1068-aws-amd64'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CATALOGS))
def test_bad_catalog_entries_give_clear_errors(tmp_path, case):
    change, expected = BAD_CATALOGS[case]
    path = write(tmp_path, mutate(change))
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    message = str(caught.value)
    assert message.startswith(f"invalid node image catalog {path}:")
    assert expected in message, message


def test_every_problem_is_reported_at_once(tmp_path):
    def change(data):
        data["images"][0].update(arch="x86_64")
        data["images"][1].update(kernel="6.5", privateImage="registry.example.com/driver:1")

    with pytest.raises(CatalogError) as caught:
        load_catalog(write(tmp_path, mutate(change)))
    assert len(caught.value.problems) == 3, caught.value.problems


def test_not_yaml(tmp_path):
    with pytest.raises(CatalogError, match="not valid YAML"):
        load_catalog(write(tmp_path, "images: [\n"))
    with pytest.raises(CatalogError, match="top level: must be a mapping"):
        load_catalog(write(tmp_path, "- 1\n"))


def test_command_line(capsys):
    assert catalog_cli.main(["check"]) == 0
    assert "5 node images, branches 580, 595" in capsys.readouterr().out
    assert catalog_cli.main(["ref", "ubuntu22.04-6.5.0-45-generic-amd64", "--branch", "595"]) == 0
    assert capsys.readouterr().out == "harbor.platform.internal/gpu-stack/driver:595-6.5.0-45-generic-ubuntu22.04\n"
    assert catalog_cli.main(["list"]) == 0
    assert "ubuntu22.04-6.5.0-45-generic-amd64\tubuntu22.04\t6.5.0-45-generic\tamd64\t580=private 595=private" in (
        capsys.readouterr().out
    )
    assert catalog_cli.main(["ref", "nope", "--branch", "580"]) == 2
    assert "error: no node image 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["node_images.catalog", "node_images.catalog_cli"])
def test_command_line_runs_as_a_module(module):
    """`python -m node_images.catalog` (documented, used by build.sh) hands over to catalog_cli."""
    result = subprocess.run([sys.executable, "-m", module, "check"], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert (result.returncode, result.stderr) == (0, "")
    assert "5 node images, branches 580, 595" in result.stdout


# ---------------------------------------------------------------------------------------------- build.sh


def build_sh(*args, catalog=None):
    env = dict(os.environ, PYTHON=sys.executable)
    command = ["sh", str(BUILD_SH), *(["--catalog", str(catalog)] if catalog else []), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=30, cwd=ROOT)


def test_build_sh_dry_run_for_a_private_image():
    result = build_sh("--dry-run", "ubuntu22.04-6.5.0-45-generic-amd64", "580")
    assert result.returncode == 0, result.stderr
    repo = "harbor.platform.internal/gpu-stack/driver:580-6.5.0-45-generic-ubuntu22.04"
    assert result.stdout.splitlines() == [
        "# ubuntu22.04-6.5.0-45-generic-amd64, branch 580: private build "
        "(kernel line 6.5 is not an LTS line NVIDIA builds (5.15, 6.8, 7.0))",
        "docker build --platform linux/amd64"
        " --build-arg BASE_IMAGE=nvcr.io/nvidia/driver:580-5.15.0-139-generic-ubuntu22.04"
        " --build-arg TARGET_KERNEL=6.5.0-45-generic --build-arg TARGET_OS_TAG=ubuntu22.04"
        f" --build-arg TARGET_DRIVER_BRANCH=580 --tag {repo}-amd64 --file {DOCKERFILE} {BUILD_DIR}",
        f"docker push {repo}-amd64",
        f"docker tag {repo}-amd64 {repo}",
        f"docker push {repo}",
    ]


def test_build_sh_refuses_a_published_image_unless_forced():
    refused = build_sh("--dry-run", "ubuntu22.04-5.15.0-1068-aws-amd64", "580")
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert "NVIDIA publishes nvcr.io/nvidia/driver:580-5.15.0-1068-aws-ubuntu22.04" in refused.stderr
    assert "--force" in refused.stderr

    no_repo = build_sh("--dry-run", "--force", "ubuntu22.04-5.15.0-1068-aws-amd64", "580")
    assert no_repo.returncode == 1 and "has no privateImage in the catalog; pass --image" in no_repo.stderr

    forced = build_sh("--dry-run", "--force", "--image", "harbor.internal/gpu/driver",
                      "--build-arg", "KERNEL_MODULE_TYPES=open", "--sign-key", "/keys/mok key.pem",
                      "--sign-cert", "/keys/mok.crt", "ubuntu24.04-6.8.0-1035-aws-arm64", "595")
    assert forced.returncode == 0, forced.stderr
    lines = forced.stdout.splitlines()
    assert lines[0].startswith("# ubuntu24.04-6.8.0-1035-aws-arm64, branch 595: forced private build")
    assert lines[1] == (
        "docker build --platform linux/arm64"
        " --build-arg BASE_IMAGE=nvcr.io/nvidia/driver:595-6.8.0-1035-aws-ubuntu24.04"
        " --build-arg TARGET_KERNEL=6.8.0-1035-aws --build-arg TARGET_OS_TAG=ubuntu24.04"
        " --build-arg TARGET_DRIVER_BRANCH=595 --build-arg KERNEL_MODULE_TYPES=open"
        " --secret 'id=module_signing_key,src=/keys/mok key.pem' --secret id=module_signing_cert,src=/keys/mok.crt"
        f" --tag harbor.internal/gpu/driver:595-6.8.0-1035-aws-ubuntu24.04-arm64 --file {DOCKERFILE} {BUILD_DIR}"
    )


def test_build_sh_makes_one_multi_arch_tag_for_a_kernel_on_two_architectures(tmp_path):
    arm = private_entry(name="ubuntu22.04-6.5.0-45-generic-arm64", arch="arm64")
    path = write(tmp_path, catalog_data(published_entry(), private_entry(), arm))
    result = build_sh("--dry-run", "ubuntu22.04-6.5.0-45-generic-amd64", "595", catalog=path)
    assert result.returncode == 0, result.stderr
    repo = "harbor.platform.internal/gpu-stack/driver:595-6.5.0-45-generic-ubuntu22.04"
    assert result.stdout.splitlines()[2:] == [
        f"docker push {repo}-amd64",
        f"# left out at run time until {repo}-arm64 is pushed (build.sh for the arm64 entry)",
        f"docker buildx imagetools create --tag {repo} {repo}-amd64 {repo}-arm64",
    ]
    # NVIDIA publishes no arm64 image for Ubuntu 22.04 to build on
    arm64 = build_sh("--dry-run", "ubuntu22.04-6.5.0-45-generic-arm64", "595", catalog=path)
    assert arm64.returncode == 1
    assert "no catalog image of ubuntu22.04 arm64 is published by NVIDIA for branch 595" in arm64.stderr
    with_base = build_sh("--dry-run", "--base-image", "harbor.internal/driver:595-x-ubuntu22.04",
                         "ubuntu22.04-6.5.0-45-generic-arm64", "595", catalog=path)
    assert with_base.returncode == 0, with_base.stderr
    assert "--build-arg BASE_IMAGE=harbor.internal/driver:595-x-ubuntu22.04" in with_base.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ubuntu22.04-6.5.0-45-generic-amd64",), "usage: build.sh"),
        (("--dry-run", "nope", "580"), "no node image 'nope'"),
        (("--dry-run", "ubuntu22.04-6.5.0-45-generic-amd64", "58"), "'58' is not a driver branch"),
        (("--dry-run", "--build-arg", "X=a b", "ubuntu22.04-6.5.0-45-generic-amd64", "580"), "only letters"),
        (("--dry-run", "--sign-key", "k", "ubuntu22.04-6.5.0-45-generic-amd64", "580"), "go together"),
        (("--bogus",), "unknown option --bogus"),
    ],
)
def test_build_sh_usage_errors(args, message):
    result = build_sh(*args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "docker" not in result.stdout


# ---------------------------------------------------------------------------------------------- Dockerfile


def stages(parser):
    """[(FROM value, [instructions of the stage])] plus the instructions before the first FROM."""
    preamble, found = [], []
    for instruction in parser.structure:
        if instruction["instruction"] == "COMMENT":
            continue
        if instruction["instruction"] == "FROM":
            found.append((instruction["value"], []))
        elif found:
            found[-1][1].append(instruction)
        else:
            preamble.append(instruction)
    return preamble, found


def arg_names(instructions):
    return {i["value"].split("=", 1)[0] for i in instructions if i["instruction"] == "ARG"}


def test_dockerfile_build_args_and_final_stage():
    parser = DockerfileParser(path=str(DOCKERFILE))
    preamble, found = stages(parser)
    assert arg_names(preamble) == {"BASE_IMAGE"}
    assert [value for value, _ in found] == ["${BASE_IMAGE} AS modules", "${BASE_IMAGE} AS driver"]

    modules, final = found[0][1], found[1][1]
    assert arg_names(modules) == {
        "TARGET_KERNEL", "TARGET_OS_TAG", "TARGET_DRIVER_BRANCH", "TARGET_DRIVER_VERSION",
        "KERNEL_MODULE_TYPES", "BASE_URL", "UBUNTU_MIRROR", "TARGETARCH",
    }
    # the build args build.sh and its README pass all exist
    dry_run = build_sh("--dry-run", "--build-arg", "TARGET_DRIVER_VERSION=580.95.05", "--build-arg",
                       "UBUNTU_MIRROR=http://mirror.internal/ubuntu", "ubuntu22.04-6.5.0-45-generic-amd64", "580")
    passed = {word.split("=", 1)[0] for word in dry_run.stdout.split() if "=" in word and not word.startswith("--")}
    assert passed <= arg_names(preamble) | arg_names(modules)

    # the final stage is NVIDIA's image plus the packages, and starts NVIDIA's unchanged runtime script
    kinds = [i["instruction"] for i in final]
    assert "COPY" in kinds and kinds[-1] == "ENTRYPOINT"
    copy_ = next(i for i in final if i["instruction"] == "COPY")
    assert copy_["value"] == "--from=modules /out/repo/ /usr/local/repos/"
    assert json.loads(final[-1]["value"]) == ["nvidia-driver", "init"]
    assert any(i["instruction"] == "RUN" and "dpkg-scanpackages . /dev/null | gzip -9c > Packages.gz" in i["value"]
               for i in final)
    assert {"TARGET_KERNEL", "TARGET_OS_TAG", "TARGET_DRIVER_BRANCH"} <= arg_names(final)

    # the modules stage packages exactly the names NVIDIA's runtime script installs
    build = " ".join(i["value"] for i in modules if i["instruction"] == "RUN")
    for name in (
        "linux-modules-nvidia-${branch}-server-open-${kernel}",
        "linux-modules-nvidia-${branch}-server-${kernel}",
        "linux-objects-nvidia-${branch}-server-${kernel}",
        "linux-signatures-nvidia-${kernel}",
    ):
        assert name in build
    assert 'SYSSRC="/lib/modules/${TARGET_KERNEL}/build"' in build


def test_dockerfile_run_steps_are_valid_shell(tmp_path):
    """Every RUN step parses and passes shellcheck in the shell its stage runs it with (bash in the modules
    stage, sh in the final one). SC2154 and SC1091: variables and files that come from the base image."""
    shellcheck = Path(sys.executable).parent / "shellcheck"
    _, found = stages(DockerfileParser(path=str(DOCKERFILE)))
    for (stage, instructions), shell in zip(found, ("bash", "sh")):
        scripts = []
        for index, instruction in enumerate(i for i in instructions if i["instruction"] == "RUN"):
            body = re.sub(r"^(--mount=\S+\s+)+", "", instruction["value"])
            script = tmp_path / f"{stage.split()[-1]}-{index}.sh"
            script.write_text(body + "\n")
            scripts.append(str(script))
        result = subprocess.run([str(shellcheck), "--format=gcc", "-s", shell, "-e", "SC2154,SC1091", *scripts],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------- shellcheck


def test_shellcheck_every_script_under_node_images():
    shellcheck = Path(sys.executable).parent / "shellcheck"
    scripts = sorted(NODE_IMAGES.rglob("*.sh"))
    assert BUILD_SH in scripts
    result = subprocess.run([str(shellcheck), "--format=gcc", *map(str, scripts)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr
