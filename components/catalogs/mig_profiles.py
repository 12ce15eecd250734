"""MIG profiles of every MIG-capable GPU model: slices, per-GPU counts and the operator's `all-balanced` devices.

Pure data, standard library only (the policy pack carries a copy; gpustack/packfacts.py). mig_catalog.py builds the
layouts, fit checks and the mig-parted document on top of it. Models are keyed by the names in
`catalog.GPU_MODELS`.

Sources (fact sheet = /work/shared/reference/gpu-operator.md):

* Profiles and per-GPU instance counts: NVIDIA's MIG User Guide, "Supported MIG Profiles" (R580 edition: the A30,
  A100, H100, H200, B200 and RTX PRO 6000 tables), and the operator's `default-mig-parted-config`
  (GO:assets/state-mig-manager/0400_configmap.yaml at a22dbf6 / v26.7.0; fact sheet §6.5), whose `all-<profile>`
  counts are the guide's "number of instances available".
* `all-balanced` devices: the device-filtered entries of that ConfigMap, exactly.

The operator file also ships `all-3g.95gb`, `all-4g.95gb` and `all-7g.189gb`, for a 189 GB Blackwell part that no
entry of catalog.GPU_MODELS is (GB200 here is the 186 GB part, PCI id 0x2941, whose `all-balanced` uses 3g.93gb);
they are left out rather than pinned to a guessed model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# "<compute>g.<memory>gb" optionally followed by a qualifier: "+me", "-me", "+gfx", "+me.all".
PROFILE_NAME = re.compile(r"^(?P<compute>[1-9][0-9]*)g\.(?P<memory>[1-9][0-9]*)gb(?P<qualifier>[-+][a-z.]+)?$")


@dataclass(frozen=True)
class MigProfile:
    name: str
    compute_slices: int
    memory_slices: int
    max_count: int  # how many of this profile alone fit on one GPU (the operator's `all-<profile>` count)


@dataclass(frozen=True)
class MigGeometry:
    model: str
    compute_slices: int
    memory_slices: int
    profiles: dict[str, MigProfile]  # in (compute, memory, name) order
    balanced: dict[str, int]  # the operator's `all-balanced` devices for this model, profile -> count per GPU


# model -> (compute slices, memory slices, {profile: max count per GPU}, all-balanced devices)
#
# The operator file's family comments are loose and its single-profile entries mostly carry no device filter; a
# profile belongs to a model when NVIDIA's profile table for that GPU lists it (or, for the GPUs the guide has no
# table for, when its size is that GPU's share of memory: 1g = 1/8, 1g.<2x> = 2/8, ... of the full 7g profile).
_TABLE: dict[str, tuple[int, int, dict[str, int], dict[str, int]]] = {
    "A30": (4, 4, {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1},
            {"1g.6gb": 2, "2g.12gb": 1}),
    # 1g.10gb is x4 here (the guide's A100-40GB table; the operator's `all-1g.10gb` has an A100-40GB entry of 4).
    "A100-40GB": (7, 8, {"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1,
                         "7g.40gb": 1},
                  {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
    # A100-80GB and H100-80GB share one row (and one device filter) in the operator file.
    "A100-80GB": (7, 8, {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1,
                         "7g.80gb": 1},
                  {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
    "H100-80GB": (7, 8, {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1,
                         "7g.80gb": 1},
                  {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
    "H100-NVL": (7, 8, {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1,
                        "7g.94gb": 1},
                 {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1}),
    # H100 96 GB (H100 on GH200, H20): the 1g profiles are the H100 NVL's names (12 GB is 1/8 of both), so the
    # operator's `all-1g.12gb` / `all-1g.12gb.me` / `all-1g.24gb` / `all-2g.24gb` serve it too; like every Hopper
    # part, one 1g instance may take the media extensions (1g.12gb+me x1).
    "H100-96GB": (7, 8, {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1,
                         "7g.96gb": 1},
                  {"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1}),
    # `all-1g.35gb` is x4 for H200 (the operator filters it to 0x2335 only; here it applies to both H200 ids).
    "H200": (7, 8, {"1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1,
                    "7g.141gb": 1},
             {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
    # GH200 144G HBM3e; 1g.18gb / 1g.18gb+me are shared with H200 (one `all-1g.18gb` for both).
    "GH200": (7, 8, {"1g.18gb": 7, "1g.18gb+me": 1, "1g.36gb": 4, "2g.36gb": 3, "3g.72gb": 2, "4g.72gb": 1,
                     "7g.144gb": 1},
              {"1g.18gb": 2, "2g.36gb": 1, "3g.72gb": 1}),
    "B200": (7, 8, {"1g.23gb": 7, "1g.23gb+me": 1, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1,
                    "7g.180gb": 1},
             {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1}),
    # GB200 (186 GB): 1g.23gb is 1/8 of it as of B200, and its all-balanced uses it; the operator files
    # `all-1g.23gb` (x7) and `all-1g.23gb.me` (x1) under "GB200, B200".
    "GB200": (7, 8, {"1g.23gb": 7, "1g.23gb+me": 1, "1g.47gb": 4, "2g.47gb": 3, "3g.93gb": 2, "4g.93gb": 1,
                     "7g.186gb": 1},
              {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}),
    "B300": (7, 8, {"1g.34gb": 7, "1g.34gb+me": 1, "1g.67gb": 4, "2g.67gb": 3, "3g.135gb": 2, "4g.135gb": 1,
                    "7g.269gb": 1},
             {"1g.34gb": 2, "2g.67gb": 1, "3g.135gb": 1}),
    # `all-1g.35gb` is x7 on GB300 (device-filtered entry in the operator file).
    "GB300": (7, 8, {"1g.35gb": 7, "1g.35gb+me": 1, "1g.70gb": 4, "2g.70gb": 3, "3g.139gb": 2, "4g.139gb": 1,
                     "7g.278gb": 1},
              {"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1}),
    # RTX PRO 6000 Blackwell 96GB: the guide's table, +gfx (graphics), -me (no media engines), +me (one media
    # engine set, one instance) and +me.all (all media engines, one instance).
    "RTX-PRO-6000": (4, 4, {"1g.24gb": 4, "1g.24gb+me": 1, "1g.24gb+gfx": 4, "1g.24gb-me": 4, "1g.24gb+me.all": 1,
                            "2g.48gb": 2, "2g.48gb+gfx": 2, "2g.48gb-me": 2, "2g.48gb+me.all": 1, "4g.96gb": 1,
                            "4g.96gb+gfx": 1},
                     {"1g.24gb": 2, "2g.48gb": 1}),
}


def parse_profile(profile: str) -> tuple[int, int]:
    """(compute slices, memory GB) from a profile name such as `3g.40gb` or `1g.24gb+me.all`."""
    match = PROFILE_NAME.fullmatch(profile)
    if not match:
        raise ValueError(f"malformed MIG profile name {profile!r}")
    return int(match["compute"]), int(match["memory"])


def _build(model: str, compute: int, memory: int, counts: dict[str, int], balanced: dict[str, int]) -> MigGeometry:
    full_gb = {parse_profile(p)[1] for p in counts if parse_profile(p)[0] == compute}
    if len(full_gb) != 1:
        raise ValueError(f"{model}: expected one full-GPU ({compute}g) memory size, found {sorted(full_gb)}")
    (total_gb,) = full_gb
    profiles = {}
    for name, count in counts.items():
        gi, gb = parse_profile(name)
        # Memory slices from the profile's share of the full GPU's memory: sizes are rounded to whole GB
        # (1g.12gb of 94 GB is 1.02 slices, 1g.23gb of 186 GB is 0.99), so anything not near a whole number is a typo.
        share = gb * memory / total_gb
        slices = round(share)
        if slices < 1 or abs(share - slices) > 0.1:
            raise ValueError(f"{model}: {name} is {share:.2f} of {memory} memory slices")
        profiles[name] = MigProfile(name, gi, slices, count)
    ordered = dict(sorted(profiles.items(), key=lambda kv: (kv[1].compute_slices, kv[1].memory_slices, kv[0])))
    return MigGeometry(model, compute, memory, ordered, dict(balanced))


GEOMETRY: dict[str, MigGeometry] = {model: _build(model, *row) for model, row in _TABLE.items()}
