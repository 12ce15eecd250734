"""MIG catalog: every model's layouts fit it, layouts that do not fit are refused with the reason and the
alternatives, and the device plugin / mig-parted views of a layout are what the operator's components expect."""

from __future__ import annotations

import re

import pytest

from components.catalogs import catalog, mig_catalog
from components.catalogs.mig_catalog import (
    GEOMETRY,
    Layout,
    builtin_layouts,
    check_devices,
    check_entries,
    entry_from_mig_parted,
    filter_models,
    fitting_layouts,
    layout_name,
    mig_parted_config,
    resolve_layout,
    resource_names,
    resources_by_gpu,
    single_strategy_problem,
)
from components.config import ConfigError, load_config
from components.kit import sharing
from gpustack.importer.mig import layout_from_mig_parted
from stacktest import bag, stack_config

MODELS = sorted(GEOMETRY)
SEVEN_SLICE = [m for m in MODELS if GEOMETRY[m].compute_slices == 7]
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def smallest(model: str) -> str:
    """The plain one-slice profile (no +me/-me/+gfx qualifier) that fits most often."""
    plain = [p for p in GEOMETRY[model].profiles.values() if p.compute_slices == 1 and p.memory_slices == 1
             and "+" not in p.name and "-" not in p.name]
    return max(plain, key=lambda p: p.max_count).name


def full(model: str) -> str:
    geometry = GEOMETRY[model]
    return next(p.name for p in geometry.profiles.values() if p.compute_slices == geometry.compute_slices)


# --- the geometry table --------------------------------------------------------------------------------------


def test_every_mig_capable_catalog_model_has_a_geometry_and_no_other():
    assert set(GEOMETRY) == {name for name, m in catalog.GPU_MODELS.items() if m.mig_capable}


@pytest.mark.parametrize("model", MODELS)
def test_slice_counts_and_full_profile_match_the_catalog(model):
    geometry = GEOMETRY[model]
    expected = (4, 4) if model in ("A30", "RTX-PRO-6000") else (7, 8)
    assert (geometry.compute_slices, geometry.memory_slices) == expected
    assert geometry.model == model
    # The full-GPU profile's memory is the catalog's memory size, e.g. 7g.80gb on an 80 GiB part.
    assert full(model).split(".")[1].startswith(f"{catalog.GPU_MODELS[model].memory_gib}gb")
    for name, profile in geometry.profiles.items():
        assert profile.name == name
        assert 1 <= profile.compute_slices <= geometry.compute_slices
        assert 1 <= profile.memory_slices <= geometry.memory_slices
        assert profile.max_count >= 1


def test_memory_slices_follow_memory_size():
    a100 = GEOMETRY["A100-80GB"].profiles
    assert {name: p.memory_slices for name, p in a100.items()} == {
        "1g.10gb": 1, "1g.10gb+me": 1, "1g.20gb": 2, "2g.20gb": 2, "3g.40gb": 4, "4g.40gb": 4, "7g.80gb": 8,
    }
    assert {name: p.max_count for name, p in a100.items()} == {
        "1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1,
    }
    # Rounded sizes still land on whole slices: 1g.12gb of a 94 GB H100 NVL, 1g.23gb of a 186 GB GB200.
    assert GEOMETRY["H100-NVL"].profiles["1g.12gb"].memory_slices == 1
    assert GEOMETRY["GB200"].profiles["1g.23gb"].memory_slices == 1
    assert GEOMETRY["A30"].profiles["2g.12gb+me"].memory_slices == 2


def test_per_model_counts_where_the_operator_filters_by_device():
    # `all-1g.10gb` is x4 on A100-40GB and x7 on the 80 GB parts; `all-1g.35gb` x4 on H200 and x7 on GB300.
    assert builtin_layouts("A100-40GB")["all-1g.10gb"].devices == {"1g.10gb": 4}
    assert builtin_layouts("A100-80GB")["all-1g.10gb"].devices == {"1g.10gb": 7}
    assert builtin_layouts("H200")["all-1g.35gb"].devices == {"1g.35gb": 4}
    assert builtin_layouts("GB300")["all-1g.35gb"].devices == {"1g.35gb": 7}


# --- builtin layouts fit, overfull ones are refused ----------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_builtin_layouts_are_named_like_the_operator_and_all_fit(model):
    layouts = builtin_layouts(model)
    expected = {"all-disabled", "all-enabled", "all-balanced"}
    expected |= {"all-" + p.replace("+", ".") for p in GEOMETRY[model].profiles}
    assert set(layouts) == expected
    assert list(layouts) == sorted(layouts)
    assert layouts["all-disabled"] == Layout("all-disabled", False, {})
    assert layouts["all-enabled"] == Layout("all-enabled", True, {})
    assert layouts["all-balanced"].devices == GEOMETRY[model].balanced
    for name, layout in layouts.items():
        assert layout.name == name
        assert check_devices(model, layout.devices) == [], name
    for profile in GEOMETRY[model].profiles.values():
        assert layouts["all-" + profile.name.replace("+", ".")].devices == {profile.name: profile.max_count}
    assert fitting_layouts(model) == sorted(layouts)


@pytest.mark.parametrize("model", MODELS)
def test_one_more_than_max_count_of_the_smallest_profile_is_refused(model):
    profile = GEOMETRY[model].profiles[smallest(model)]
    problems = check_devices(model, {profile.name: profile.max_count + 1})
    assert f"{profile.name}: at most {profile.max_count} per {model} GPU, got {profile.max_count + 1}" in problems


@pytest.mark.parametrize("model", MODELS)
def test_two_full_gpu_profiles_are_refused_with_every_reason(model):
    geometry = GEOMETRY[model]
    c, m = geometry.compute_slices, geometry.memory_slices
    assert check_devices(model, {full(model): 2}) == [
        f"{full(model)}: at most 1 per {model} GPU, got 2",
        f"needs {2 * c} of {c} compute slices on {model}",
        f"needs {2 * m} of {m} memory slices on {model}",
    ]


@pytest.mark.parametrize("model", MODELS)
def test_full_profile_plus_one_slice_overflows_compute_and_memory(model):
    geometry = GEOMETRY[model]
    c, m = geometry.compute_slices, geometry.memory_slices
    assert check_devices(model, {full(model): 1, smallest(model): 1}) == [
        f"needs {c + 1} of {c} compute slices on {model}",
        f"needs {m + 1} of {m} memory slices on {model}",
    ]


@pytest.mark.parametrize("model", SEVEN_SLICE)
def test_memory_overflow_with_compute_to_spare(model):
    # Four double-memory 1g profiles use all 8 memory slices but only 4 of 7 compute slices.
    double = next(p for p in GEOMETRY[model].profiles.values() if p.compute_slices == 1 and p.memory_slices == 2)
    assert check_devices(model, {double.name: 4}) == []
    assert check_devices(model, {double.name: 4, smallest(model): 1}) == [
        f"needs 9 of 8 memory slices on {model}"
    ]


@pytest.mark.parametrize("model", MODELS)
def test_refused_custom_layout_names_the_reason_and_the_layouts_that_fit(model):
    custom = {"too-big": {full(model): 2}, "one-small": {smallest(model): 1}}
    layout, problems = resolve_layout(model, "too-big", custom)
    assert layout is None
    assert f"custom MIG layout 'too-big' on {model}: {full(model)}: at most 1 per {model} GPU, got 2" in problems
    fits = fitting_layouts(model, custom)
    assert "one-small" in fits and "too-big" not in fits and "all-balanced" in fits
    assert problems[-1] == f"layouts that fit {model}: {', '.join(fits)}"


@pytest.mark.parametrize("model", MODELS)
def test_builtin_and_custom_layouts_resolve(model):
    assert resolve_layout(model, "all-balanced", {}) == (builtin_layouts(model)["all-balanced"], [])
    layout, problems = resolve_layout(model, "one-small", {"one-small": {smallest(model): 1}})
    assert problems == []
    assert layout == Layout("one-small", True, {smallest(model): 1})


# --- bad input ------------------------------------------------------------------------------------------------


def test_unknown_profile_lists_the_model_profiles():
    assert check_devices("A100-80GB", {"1g.5gb": 2}) == [
        "unknown MIG profile '1g.5gb' for A100-80GB; A100-80GB profiles: "
        "1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"
    ]


@pytest.mark.parametrize("count", [0, -1])
def test_counts_below_one_are_refused(count):
    assert check_devices("H100-80GB", {"1g.10gb": count}) == [f"1g.10gb: count must be at least 1, got {count}"]


def test_non_integer_counts_are_refused():
    assert check_devices("A30", {"1g.6gb": 1.5}) == ["1g.6gb: count must be a whole number, got 1.5"]
    assert check_devices("A30", {"1g.6gb": True}) == ["1g.6gb: count must be a whole number, got True"]


def test_a_layout_of_another_model_is_refused_with_its_owner_and_the_alternatives():
    layout, problems = resolve_layout("A100-80GB", "all-1g.5gb", {})
    assert layout is None
    assert problems[0] == (
        "MIG layout 'all-1g.5gb' does not exist on A100-80GB: profile 1g.5gb is not a A100-80GB profile "
        "(the layout is for A100-40GB)"
    )
    assert problems[1].startswith("layouts that fit A100-80GB: all-1g.10gb, all-1g.10gb.me, all-1g.20gb,")


def test_an_unknown_layout_suggests_close_names():
    layout, problems = resolve_layout("H100-80GB", "all-balance", {})
    assert layout is None
    assert problems[0].startswith("unknown MIG layout 'all-balance' for H100-80GB (did you mean all-balanced")


def test_models_without_mig_are_refused():
    assert resolve_layout("T4", "all-balanced", {}) == (
        None, ["T4 is not MIG-capable; MIG-capable models: " + ", ".join(MODELS)]
    )
    assert check_devices("X999", {"1g.5gb": 1})[0].startswith("unknown GPU model 'X999'")
    with pytest.raises(ValueError, match="not MIG-capable"):
        builtin_layouts("L4")


@pytest.mark.parametrize("name", ["all-balanced", "all-disabled", "all-1g.5gb"])
def test_custom_layouts_may_not_shadow_builtin_names(name):
    # all-1g.5gb is an A100-40GB layout: in the shared mig-parted document it would clash on an H100 too.
    custom = {name: {"1g.10gb": 1}}
    layout, problems = resolve_layout("H100-80GB", name, custom)
    assert layout is None
    assert f"custom MIG layout {name!r} on H100-80GB: shadows the builtin layout of that name; rename it" in problems
    assert fitting_layouts("H100-80GB", custom) == fitting_layouts("H100-80GB")
    with pytest.raises(ValueError, match="shadows the builtin layout"):
        mig_parted_config({name: {"H100-80GB": {"1g.10gb": 1}}})


def test_custom_layouts_need_devices_and_a_label_value_name():
    _, problems = resolve_layout("A30", "empty", {"empty": {}})
    assert "custom MIG layout 'empty' on A30: lists no MIG devices (use all-enabled for MIG mode alone)" in problems
    _, problems = resolve_layout("A30", "bad name", {"bad name": {"1g.6gb": 1}})
    assert any("not a valid label value" in p for p in problems)


# --- device plugin view ---------------------------------------------------------------------------------------


def test_single_strategy_needs_one_profile_type_and_mig_devices():
    layouts = builtin_layouts("A100-80GB")
    problem = single_strategy_problem(layouts["all-balanced"])
    assert problem is not None
    assert "mixes MIG profiles 1g.10gb, 2g.20gb, 3g.40gb" in problem and "MIG-INVALID" in problem
    assert single_strategy_problem(Layout("mine", True, {"1g.10gb": 2, "1g.10gb+me": 1})) is not None
    assert single_strategy_problem(layouts["all-1g.10gb"]) is None
    assert single_strategy_problem(layouts["all-disabled"]) is None
    # A MIG-enabled GPU without MIG devices fails the plugin under single (DP:internal/rm/device_map.go).
    assert "without MIG devices" in single_strategy_problem(layouts["all-enabled"])


def test_resource_names_single():
    layouts = builtin_layouts("A100-80GB")
    assert resource_names(layouts["all-1g.10gb"], "single") == {"nvidia.com/gpu": 7}
    assert resource_names(layouts["all-3g.40gb"], "single") == {"nvidia.com/gpu": 2}
    assert resource_names(layouts["all-disabled"], "single") == {"nvidia.com/gpu": 1}
    assert resource_names(layouts["all-balanced"], "single") == {}  # the plugin refuses mixed profiles
    assert resource_names(layouts["all-enabled"], "single") == {}


def test_resource_names_mixed_rewrite_plus_as_dot():
    a100 = builtin_layouts("A100-80GB")
    assert resource_names(a100["all-balanced"], "mixed") == {
        "nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-3g.40gb": 1,
    }
    assert resource_names(a100["all-1g.10gb.me"], "mixed") == {"nvidia.com/mig-1g.10gb.me": 1}
    assert resource_names(a100["all-disabled"], "mixed") == {"nvidia.com/gpu": 1}
    assert resource_names(a100["all-enabled"], "mixed") == {}
    rtx = builtin_layouts("RTX-PRO-6000")
    assert resource_names(rtx["all-1g.24gb-me"], "mixed") == {"nvidia.com/mig-1g.24gb-me": 4}
    assert resource_names(rtx["all-2g.48gb.me.all"], "mixed") == {"nvidia.com/mig-2g.48gb.me.all": 1}
    assert resource_names(a100["all-balanced"], "none") == {"nvidia.com/gpu": 1}
    with pytest.raises(ValueError, match="unknown MIG strategy"):
        resource_names(a100["all-balanced"], "mig-mixed")


@pytest.mark.parametrize("model", MODELS)
def test_every_mixed_resource_name_is_a_valid_extended_resource(model):
    for layout in builtin_layouts(model).values():
        for resource in resource_names(layout, "mixed"):
            prefix, name = resource.split("/")
            assert prefix == "nvidia.com" and len(resource) <= 63 and DNS_SUBDOMAIN.match(name), resource


# --- mig-parted config ----------------------------------------------------------------------------------------


def expected_filter(model: str) -> list[str]:
    return [pci.upper().replace("0X", "0x") + "10DE" for pci in catalog.GPU_MODELS[model].pci_device_ids]


def test_mig_parted_config_shape_and_order():
    doc = mig_parted_config()
    assert doc["version"] == "v1"
    configs = doc["mig-configs"]
    assert list(configs) == sorted(configs)
    assert configs["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert configs["all-enabled"] == [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]
    assert set(configs) == {name for model in MODELS for name in builtin_layouts(model)}
    assert doc == mig_parted_config()  # deterministic


def test_device_filters_are_the_catalog_ids_with_the_nvidia_vendor():
    entries = mig_parted_config()["mig-configs"]["all-balanced"]
    assert [e["device-filter"] for e in entries] == [expected_filter(m) for m in MODELS]
    assert entries[MODELS.index("A100-80GB")]["device-filter"] == ["0x20B210DE", "0x20B510DE", "0x20F310DE",
                                                                   "0x20F510DE"]
    all_ids = [i for e in entries for i in e["device-filter"]]
    assert len(all_ids) == len(set(all_ids))  # one entry per model, filters never overlap


def test_every_filtered_entry_is_well_formed_and_fits_its_model():
    by_filter = {tuple(expected_filter(m)): m for m in MODELS}
    for name, entries in mig_parted_config()["mig-configs"].items():
        if name in ("all-disabled", "all-enabled"):
            continue
        assert entries, name
        models = [by_filter[tuple(e["device-filter"])] for e in entries]
        assert models == sorted(models), name
        for entry, model in zip(entries, models):
            assert set(entry) == {"device-filter", "devices", "mig-enabled", "mig-devices"}
            assert entry["devices"] == "all" and entry["mig-enabled"] is True
            assert entry["mig-devices"] == builtin_layouts(model)[name].devices
            assert check_devices(model, entry["mig-devices"]) == []


def test_a_layout_shared_by_models_has_one_entry_per_model():
    entries = mig_parted_config()["mig-configs"]["all-1g.10gb"]
    assert [(e["device-filter"], e["mig-devices"]) for e in entries] == [
        (expected_filter("A100-40GB"), {"1g.10gb": 4}),
        (expected_filter("A100-80GB"), {"1g.10gb": 7}),
        (expected_filter("H100-80GB"), {"1g.10gb": 7}),
    ]


def test_custom_layouts_appear_with_their_model_filter():
    custom = {"inference": {"H100-80GB": {"3g.40gb": 1, "1g.10gb": 4}, "A30": {"2g.12gb": 1, "1g.6gb": 2}}}
    configs = mig_parted_config(custom)["mig-configs"]
    assert configs["inference"] == [
        {"device-filter": ["0x20B710DE"], "devices": "all", "mig-enabled": True,
         "mig-devices": {"1g.6gb": 2, "2g.12gb": 1}},
        {"device-filter": expected_filter("H100-80GB"), "devices": "all", "mig-enabled": True,
         "mig-devices": {"1g.10gb": 4, "3g.40gb": 1}},
    ]
    assert list(configs) == sorted(configs)


def test_invalid_custom_layouts_are_refused_with_every_problem():
    with pytest.raises(ValueError) as caught:
        mig_parted_config({"big": {"A30": {"4g.24gb": 2}, "T4": {"1g.6gb": 1}}, "none": {}})
    message = str(caught.value)
    assert "custom MIG layout 'big' on A30: 4g.24gb: at most 1 per A30 GPU, got 2" in message
    assert "custom MIG layout 'big' on T4: T4 is not MIG-capable" in message
    assert "custom MIG layout 'none' names no GPU model" in message


# --- NVIDIA's shipped layouts ----------------------------------------------------------------------------------
# Facts of the operator's default-mig-parted-config (GO:assets/state-mig-manager/0400_configmap.yaml, v26.7.0):
# the unfiltered single-profile layouts as profile -> count (layout `all-<profile>`, `+` written `.`), and the
# device-filtered entries as (PCI device ids, devices).
OPERATOR_SINGLE = {
    "1g.5gb": 7, "1g.5gb+me": 1, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1,
    "1g.24gb+gfx": 4, "1g.24gb+me.all": 1, "1g.24gb-me": 4, "2g.48gb": 2, "2g.48gb+gfx": 2, "2g.48gb+me.all": 1,
    "2g.48gb-me": 2, "4g.96gb": 1, "4g.96gb+gfx": 1,
    "1g.10gb+me": 1, "1g.20gb": 4, "1g.23gb": 7, "1g.23gb+me": 1, "1g.24gb+me": 1, "2g.20gb": 3, "3g.40gb": 2,
    "4g.40gb": 1, "7g.80gb": 1,
    "1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1,
    "1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "1g.45gb": 4, "1g.47gb": 4, "2g.24gb": 3, "2g.45gb": 3,
    "2g.47gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1,
    "3g.48gb": 2, "3g.90gb": 2, "3g.93gb": 2, "3g.95gb": 2, "4g.48gb": 1, "4g.90gb": 1, "4g.93gb": 1, "4g.95gb": 1,
    "7g.96gb": 1, "7g.180gb": 1, "7g.186gb": 1, "7g.189gb": 1,
    "1g.18gb": 7, "1g.18gb+me": 1, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1,
    "1g.36gb": 4, "2g.36gb": 3, "3g.72gb": 2, "4g.72gb": 1, "7g.144gb": 1,
    "1g.34gb": 7, "1g.34gb+me": 1, "1g.67gb": 4, "2g.67gb": 3, "3g.135gb": 2, "4g.135gb": 1, "7g.269gb": 1,
    "1g.35gb+me": 1, "1g.70gb": 4, "2g.70gb": 3, "3g.139gb": 2, "4g.139gb": 1, "7g.278gb": 1,
}
# A 189 GB part no catalog model is (catalog.GPU_MODELS has the 186 GB GB200): left out of the catalog.
NO_CATALOG_MODEL = {"3g.95gb", "4g.95gb", "7g.189gb"}
GPU_80GB = ["0x2330", "0x2331", "0x2322", "0x20B2", "0x20B5", "0x20F3", "0x20F5", "0x2324"]
GPU_40GB = ["0x20B0", "0x20B1", "0x20F1", "0x20F6"]
OPERATOR_FILTERED = {
    "all-1g.10gb": [(GPU_80GB, {"1g.10gb": 7}), (GPU_40GB, {"1g.10gb": 4})],
    "all-1g.35gb": [(["0x2335"], {"1g.35gb": 4}), (["0x31C2"], {"1g.35gb": 7})],
    "all-balanced": [
        (["0x2941"], {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}),
        (["0x2BB5"], {"1g.24gb": 2, "2g.48gb": 1}),
        (["0x2901"], {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1}),
        (["0x2348"], {"1g.18gb": 2, "2g.36gb": 1, "3g.72gb": 1}),
        (["0x2335", "0x233B"], {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
        (["0x2321", "0x233A"], {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1}),
        (GPU_80GB, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        (GPU_40GB, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
        (["0x20B7"], {"1g.6gb": 2, "2g.12gb": 1}),
        (["0x2342", "0x233D", "0x20B6", "0x2329"], {"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1}),
        (["0x3182"], {"1g.34gb": 2, "2g.67gb": 1, "3g.135gb": 1}),
        (["0x31C2"], {"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1}),
    ],
}


def ids(pci: list[str]) -> list[str]:
    return [p + "10DE" for p in pci]


@pytest.mark.parametrize("profile,count", sorted(OPERATOR_SINGLE.items()))
def test_every_single_profile_layout_of_the_operator_exists_with_its_count_on_its_gpus(profile, count):
    models = [m for m in MODELS if profile in GEOMETRY[m].profiles]
    if profile in NO_CATALOG_MODEL:
        assert models == []
        return
    assert models, f"{profile}: no catalog model has it"
    for model in models:
        layout, problems = resolve_layout(model, layout_name(profile), {})
        assert problems == [] and layout.devices == {profile: count}, model


@pytest.mark.parametrize("name", sorted(OPERATOR_FILTERED))
def test_every_device_filtered_layout_of_the_operator_has_its_devices_on_each_catalog_model(name):
    covered = set()
    for pci, devices in OPERATOR_FILTERED[name]:
        models = filter_models(ids(pci))
        assert models, pci
        for model in models:
            assert builtin_layouts(model)[name].devices == devices, model
            # all-balanced filters are exact; all-1g.35gb names only the H200 SXM id, and applies to both here.
            assert name != "all-balanced" or set(expected_filter(model)) <= set(ids(pci)), model
        covered |= set(models)
    if name == "all-balanced":
        assert covered == set(MODELS)


def test_the_catalog_has_no_layout_the_operator_lacks():
    operator = {layout_name(p) for p in OPERATOR_SINGLE} | set(OPERATOR_FILTERED) | {"all-disabled", "all-enabled"}
    assert set(mig_parted_config()["mig-configs"]) <= operator


def test_media_extension_and_graphics_profiles_of_nvidias_tables():
    # MIG User Guide tables: one +me instance per GPU; RTX PRO 6000 has +gfx, -me and +me.all too.
    assert builtin_layouts("H100-96GB")["all-1g.12gb.me"].devices == {"1g.12gb+me": 1}
    assert builtin_layouts("H100-80GB")["all-1g.10gb.me"].devices == {"1g.10gb+me": 1}
    rtx = GEOMETRY["RTX-PRO-6000"].profiles
    assert {n: p.max_count for n, p in rtx.items() if n.startswith("1g.")} == {
        "1g.24gb": 4, "1g.24gb+gfx": 4, "1g.24gb+me": 1, "1g.24gb+me.all": 1, "1g.24gb-me": 4,
    }
    assert resource_names(builtin_layouts("RTX-PRO-6000")["all-1g.24gb.me"], "mixed") == {"nvidia.com/mig-1g.24gb.me": 1}


# mig-parted's examples/config.yaml: A100-40GB layouts, and a per-GPU one (`custom-config`).
MIG_PARTED_EXAMPLE = {
    "all-1g.5gb": {"1g.5gb": 7},
    "all-2g.10gb": {"2g.10gb": 3},
    "all-3g.20gb": {"3g.20gb": 2},
    "all-balanced": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
}
CUSTOM_CONFIG = [
    {"devices": [0, 1, 2, 3], "mig-enabled": False},
    {"devices": [4], "mig-enabled": True, "mig-devices": {"1g.5gb": 7}},
    {"devices": [5], "mig-enabled": True, "mig-devices": {"2g.10gb": 3}},
    {"devices": [6], "mig-enabled": True, "mig-devices": {"3g.20gb": 2}},
    {"devices": [7], "mig-enabled": True, "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}},
]
# mig-parted's examples/dgx-station-80gb-config.yaml: A100-80GB (0x20B2) GPUs and the DGX Display GPU (0x1FB0).
A100_80, DISPLAY = "0x20B210DE", "0x1FB010DE"
DGX_STATION = {
    "balanced-k8s-dgx-station-80": [
        {"device-filter": A100_80, "devices": [0], "mig-enabled": False, "mig-devices": {}},
        {"device-filter": A100_80, "devices": [1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"device-filter": A100_80, "devices": [2], "mig-enabled": True, "mig-devices": {"2g.20gb": 3, "1g.10gb": 1}},
        {"device-filter": A100_80, "devices": [4], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"device-filter": DISPLAY, "devices": [3], "mig-enabled": False, "mig-devices": {}},
    ],
    **{
        f"all-{name}-dgx-station-80": [
            {"device-filter": A100_80, "devices": "all", "mig-enabled": enabled, "mig-devices": devices},
            {"device-filter": DISPLAY, "devices": "all", "mig-enabled": False, "mig-devices": {}},
        ]
        for name, enabled, devices in [
            ("disabled", False, {}), ("enabled", True, {}), ("1g.10gb", True, {"1g.10gb": 7}),
            ("2g.20gb", True, {"2g.20gb": 3}), ("3g.40gb", True, {"3g.40gb": 2}), ("4g.40gb", True, {"4g.40gb": 1}),
            ("7g.80gb", True, {"7g.80gb": 1}), ("balanced", True, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        ]
    },
}


def test_mig_parted_example_layouts_are_the_a100_40gb_builtins():
    for name, devices in MIG_PARTED_EXAMPLE.items():
        assert builtin_layouts("A100-40GB")[name].devices == devices


@pytest.mark.parametrize("model,name,entries", [("A100-40GB", "custom-config", CUSTOM_CONFIG)]
                         + [("A100-80GB", name, entries) for name, entries in DGX_STATION.items()])
def test_per_gpu_example_layouts_fit_their_gpu(model, name, entries):
    parsed = [entry_from_mig_parted(e) for e in entries]
    assert check_entries(model, parsed) == []
    layout, problems = resolve_layout(model, "custom", {"custom": parsed})
    assert problems == [] and layout.per_gpu
    # The display GPU's entry never applies to the A100s.
    assert all(e.device_filter in (None, (A100_80,)) for e in layout.entries)


# --- layouts through a pool's config (config level: no render) --------------------------------------------------
_BASE = stack_config("a100-mig")
for _key in ("gpu-stack:upgrade", "gpu-stack:migLayouts"):
    _BASE.pop(_key, None)


def pool_config(model: str, strategy: str, layout: str, layouts: dict | None = None) -> dict:
    config = {**_BASE, "gpu-stack:nodePools": [{
        "name": "p", "nodeSelector": {"gpu": "p"}, "gpuModel": model, "os": "ubuntu24.04",
        "sharing": {"strategy": strategy, "migLayout": layout},
    }]}
    if layouts:
        config["gpu-stack:migLayouts"] = layouts
    return config


def load(config: dict):
    return load_config(bag(config))


def problems_of(config: dict) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        load(config)
    return caught.value.problems


def gpu_resources(cfg) -> dict:
    return sharing.resources_by_pool(cfg.node_pools, "single", cfg.mig_layouts)["p"]


@pytest.mark.parametrize("model", MODELS)
def test_every_catalog_layout_round_trips_through_a_pool(model):
    """Every layout of the operator's default config that applies to the GPU is taken by a mig-mixed pool,
    all-enabled included (MIG mode on: the plugin advertises what a DRA driver or an admin creates); all-disabled is
    a pool with strategy none."""
    rendered = mig_parted_config()["mig-configs"]
    for name, layout in builtin_layouts(model).items():
        if name == mig_catalog.ALL_ENABLED:
            assert gpu_resources(load(pool_config(model, "mig-mixed", name)))["perGpu"] == {}
        if not layout.devices:
            continue
        cfg = load(pool_config(model, "mig-mixed", name))
        pool = cfg.node_pools[0]
        assert gpu_resources(cfg)["perGpu"] == resource_names(layout, "mixed"), name
        assert sharing.plugin_config("single", pool)["flags"] == {"migStrategy": "mixed"}
        assert sharing.mig_config_label(pool) == name
        ours = [e for e in rendered[name] if e["device-filter"] == expected_filter(model)]
        assert [e["mig-devices"] for e in ours] == [layout.devices], name
        if len(layout.devices) == 1:
            cfg = load(pool_config(model, "mig-single", name))
            assert gpu_resources(cfg)["perGpu"] == {"nvidia.com/gpu": sum(layout.devices.values())}, name
        else:
            [(key, message)] = problems_of(pool_config(model, "mig-single", name))
            assert key == "gpu-stack:nodePools[0].sharing.migLayout" and "mixes MIG profiles" in message


def test_a_builtin_layout_of_another_gpu_is_refused_by_the_pool():
    [(key, message), _] = problems_of(pool_config("A100-80GB", "mig-mixed", "all-1g.24gb.me"))
    assert key == "gpu-stack:nodePools[0].sharing.migLayout"
    assert "profile 1g.24gb+me is not a A100-80GB profile (the layout is for RTX-PRO-6000)" in message


def entries(*raw: dict) -> list[dict]:
    return list(raw)


SPLIT_40GB = entries(
    {"devices": [0, 1], "migEnabled": False},
    {"devices": [2], "migEnabled": True, "migDevices": {"3g.20gb": 2}},
    {"devices": [3], "migEnabled": True, "migDevices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}},
)


def test_a_per_gpu_layout_round_trips_through_a_pool():
    cfg = load(pool_config("A100-40GB", "mig-mixed", "split", {"split": SPLIT_40GB}))
    assert gpu_resources(cfg) == {
        "strategy": "mig-mixed", "gpuModel": "A100-40GB", "migLayout": "split",
        "byGpu": {
            "0": {"nvidia.com/gpu": 1}, "1": {"nvidia.com/gpu": 1}, "2": {"nvidia.com/mig-3g.20gb": 2},
            "3": {"nvidia.com/mig-1g.5gb": 2, "nvidia.com/mig-2g.10gb": 1, "nvidia.com/mig-3g.20gb": 1},
        },
    }
    document = mig_parted_config(sharing.mig_parted_layouts(cfg.node_pools, cfg.mig_layouts))
    forty = expected_filter("A100-40GB")
    assert document["mig-configs"]["split"] == [
        {"device-filter": forty, "devices": [0, 1], "mig-enabled": False},
        {"device-filter": forty, "devices": [2], "mig-enabled": True, "mig-devices": {"3g.20gb": 2}},
        {"device-filter": forty, "devices": [3], "mig-enabled": True,
         "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}},
    ]
    # The stack file's shape comes back from the loaded config (the config hash reads it).
    assert cfg.model_dump(mode="json", by_alias=True)["migLayouts"]["split"][2]["migDevices"] == SPLIT_40GB[2]["migDevices"]


@pytest.mark.parametrize("entry,expected", [
    ({"devices": [0], "migEnabled": True, "migDevices": {"3g.40gb": 1}}, "entry 0 (GPU 0): unknown MIG profile '3g.40gb' for A100-40GB"),
    ({"devices": "all", "migEnabled": True, "migDevices": {"1g.5gb": 8}}, "entry 0 (GPUs all): 1g.5gb: at most 7 per A100-40GB GPU, got 8"),
    ({"devices": "all", "deviceFilter": ["0x20B710DE"], "migEnabled": True, "migDevices": {"4g.24gb": 2}},
     "entry 0 (GPUs all of 0x20B710DE) on A30: 4g.24gb: at most 1 per A30 GPU, got 2"),
    ({"devices": [3], "deviceFilter": ["0x1fb010de"], "migEnabled": True, "migDevices": {"1g.5gb": 1}},
     "the device filter names no MIG-capable GPU model of the catalog"),
    ({"devices": [0], "deviceFilter": ["0x20B710DE"], "migEnabled": True, "migDevices": {"1g.6gb": 1}},
     "no entry applies to A100-40GB"),
])
def test_oversized_or_foreign_per_gpu_entries_are_refused_with_the_profile_and_gpu(entry, expected):
    problems = problems_of(pool_config("A100-40GB", "mig-mixed", "x", {"x": [entry]}))
    assert all(key == "gpu-stack:nodePools[0].sharing.migLayout" for key, _ in problems)
    assert any(expected in message for _, message in problems), problems
    assert problems[-1][1].startswith("layouts that fit A100-40GB: all-1g.10gb,")


def test_per_gpu_entries_may_not_configure_a_gpu_twice():
    layout = entries({"devices": [0, 1], "migEnabled": False}, {"devices": [1], "migEnabled": True, "migDevices": {"1g.5gb": 7}})
    messages = [m for _, m in problems_of(pool_config("A100-40GB", "mig-mixed", "x", {"x": layout}))]
    assert "custom MIG layout 'x' on A100-40GB: entries 0 and 1 both configure GPU 1 of A100-40GB; give each GPU one entry" in messages


SINGLE_OK = entries({"devices": [0], "migEnabled": True, "migDevices": {"1g.5gb": 7}},
                    {"devices": [1, 2], "migEnabled": True, "migDevices": {"1g.5gb": 3}})


@pytest.mark.parametrize("layout,reason", [
    (SINGLE_OK, None),
    (SPLIT_40GB, "needs the same MIG mode on every GPU"),
    (entries({"devices": [0], "migEnabled": True, "migDevices": {"1g.5gb": 7}},
             {"devices": [1], "migEnabled": True, "migDevices": {"3g.20gb": 2}}), "mixes MIG profiles 1g.5gb, 3g.20gb"),
    (entries({"devices": [0], "migEnabled": True, "migDevices": {"1g.5gb": 7}}, {"devices": [1], "migEnabled": True}),
     "enables MIG on GPU 1 without MIG devices"),
])
def test_per_gpu_layouts_under_mig_single_and_mig_mixed(layout, reason):
    # mixed takes every per-GPU layout that creates MIG devices; single one MIG mode and one profile per node.
    assert load(pool_config("A100-40GB", "mig-mixed", "x", {"x": layout})).mig_layouts["x"]
    if reason is None:
        cfg = load(pool_config("A100-40GB", "mig-single", "x", {"x": layout}))
        assert gpu_resources(cfg)["byGpu"] == {"0": {"nvidia.com/gpu": 7}, "1": {"nvidia.com/gpu": 3}, "2": {"nvidia.com/gpu": 3}}
        return
    [(key, message)] = problems_of(pool_config("A100-40GB", "mig-single", "x", {"x": layout}))
    assert key == "gpu-stack:nodePools[0].sharing.migLayout" and reason in message


def test_a_per_gpu_layout_without_mig_devices_is_refused_by_the_pool():
    layout = entries({"devices": "all", "migEnabled": False})
    [(key, message)] = problems_of(pool_config("A100-40GB", "mig-mixed", "off", {"off": layout}))
    assert "'off' enables MIG on no GPU" in message
