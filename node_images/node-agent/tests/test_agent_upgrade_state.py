"""The node's step in a paced change (`gpu-stack/upgrade-state`): a named enum whose values are the label's, so that
the Pulumi program's gate, the docs and agents of earlier versions read the same strings."""

from __future__ import annotations

import json

from gpustack_agent.model import upgrade
from gpustack_agent.model.upgrade import UpgradeState


def test_the_states_are_the_labels_values_as_every_earlier_agent_wrote_them():
    assert [state.value for state in UpgradeState] == [
        "upgrade-required", "drain-required", "pod-restart-required", "change-in-progress", "upgrade-done",
        "upgrade-failed",
    ]


def test_a_state_goes_on_the_wire_as_its_value():
    assert json.dumps({upgrade.UPGRADE_STATE_LABEL: UpgradeState.DRAINING}) == '{"gpu-stack/upgrade-state": "drain-required"}'
    assert f"{UpgradeState.FAILED}" == "upgrade-failed"


def test_a_value_read_back_from_a_node_is_the_same_state_in_sets_and_dicts():
    node = json.loads(json.dumps({"metadata": {"labels": {upgrade.UPGRADE_STATE_LABEL: UpgradeState.RESTARTING}}}))
    read = upgrade.state_of(node)
    assert type(read) is str and read in upgrade.HOLDING_STATES and read == UpgradeState.RESTARTING
    assert {UpgradeState.RESTARTING: "holding"}[read] == "holding"
    assert upgrade.state_of({"metadata": {"labels": {upgrade.UPGRADE_STATE_LABEL: "upgrade-done"}}}) not in upgrade.HOLDING_STATES
