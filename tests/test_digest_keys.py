"""The stack digest leaves out a key added since stacks were deployed while it holds its default, derived from the
model (components/config/digest_keys.py), not from a list someone must remember to extend (issue 37)."""

from __future__ import annotations

import copy

from pydantic import BaseModel

from components.config import StackConfig, load_config
from components.config import digest_keys
from components.kit.stack_digest import stack_digest
from stacktest import bag, stack_config

BASE = stack_config("prod-managed")


def test_every_key_the_first_digest_took_is_a_key_of_the_model():
    for section, keys in digest_keys.FIRST_KEYS.items():
        field = digest_keys._field(StackConfig, section)
        assert field is not None, section
        if keys is not None:
            assert isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel), section
            assert all(digest_keys._field(field.annotation, key) is not None for key in keys), section


def test_an_added_key_moves_the_digest_only_once_it_leaves_its_default():
    changed = copy.deepcopy(BASE)
    changed["gpu-stack:toolkit"]["runtimeClass"] = "nvidia"  # added after stacks were deployed, at its default
    assert stack_digest(load_config(bag(changed))) == stack_digest(load_config(bag(BASE)))
    changed["gpu-stack:toolkit"]["runtimeClass"] = "nvidia-gpu"
    assert stack_digest(load_config(bag(changed))) != stack_digest(load_config(bag(BASE)))


def test_a_key_new_to_the_model_needs_no_list_to_stay_out_at_its_default(monkeypatch):
    cfg = load_config(bag(BASE))
    dumped = cfg.model_dump(mode="json", by_alias=True, warnings=False)
    assert "maxParallelUpgrades" in digest_keys.without_added_defaults(StackConfig, dumped)["upgrade"]
    # as if upgrade.maxParallelUpgrades had just been added to the model
    first = dict(digest_keys.FIRST_KEYS)
    first["upgrade"] = tuple(k for k in first["upgrade"] if k != "maxParallelUpgrades")
    monkeypatch.setattr(digest_keys, "FIRST_KEYS", first)
    default = StackConfig.model_fields["upgrade"].annotation.model_fields["max_parallel_upgrades"].default
    assert dumped["upgrade"]["maxParallelUpgrades"] == default  # the stack leaves it at its default
    assert "maxParallelUpgrades" not in digest_keys.without_added_defaults(StackConfig, dumped)["upgrade"]
    # and a section new to the model, at its default, stays out whole
    del first["gpudirect"]
    assert "gpudirect" not in digest_keys.without_added_defaults(StackConfig, dumped)
