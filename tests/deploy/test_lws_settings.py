"""LeaderWorkerSet's variables set nnodes, node_rank and master_addr below dspark's own; disagreements are noted."""

from __future__ import annotations

import pytest

from dspark.config.recipes import load_recipe_text
from dspark.config.settings import resolve_settings
from dspark.core.errors import SettingsError

RECIPE = load_recipe_text("""\
name: r
engine: vllm
model: {path: org/model}
parallel: {tensor: 2, nodes: 2, master_addr: 10.0.0.1}
""")
LWS = {"LWS_LEADER_ADDRESS": "m-0.m.ns", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}


def test_lws_variables_set_the_multi_node_settings_over_the_recipe() -> None:
    s = resolve_settings({}, LWS, RECIPE)
    assert (s.nnodes.value, s.nnodes.source) == (2, "env:LWS_GROUP_SIZE")
    assert (s.node_rank.value, s.node_rank.source) == (1, "env:LWS_WORKER_INDEX")
    assert (s.master_addr.value, s.master_addr.source) == ("m-0.m.ns", "env:LWS_LEADER_ADDRESS")
    assert s.notes == ()


def test_dspark_variables_and_flags_win_and_the_conflict_is_reported() -> None:
    env = {**LWS, "DSPARK_NODE_RANK": "0", "DSPARK_MASTER_ADDR": "m-0.m.ns"}
    s = resolve_settings({"nnodes": 2}, env, RECIPE)
    assert (s.node_rank.value, s.node_rank.source) == (0, "env:DSPARK_NODE_RANK")
    assert s.nnodes.source == "flag"
    # Equal values are no conflict; the rank is, and says which won.
    assert s.notes == ("DSPARK_NODE_RANK sets node_rank=0, which wins over LWS_WORKER_INDEX='1'",)
    assert any("wins over LWS_WORKER_INDEX" in line for line in s.notices())


def test_lws_values_are_checked_like_dspark_values() -> None:
    with pytest.raises(SettingsError, match=r"LWS_WORKER_INDEX='x': not a whole number"):
        resolve_settings({}, {**LWS, "LWS_WORKER_INDEX": "x"}, RECIPE)
    with pytest.raises(SettingsError, match=r"LWS_GROUP_SIZE='': empty"):
        resolve_settings({}, {**LWS, "LWS_GROUP_SIZE": ""}, RECIPE)
    # A group of 4 cannot split TP 2 evenly; the message names where the node count came from.
    with pytest.raises(SettingsError, match=r"(?s)split evenly over 4 nodes.*nnodes from LWS_GROUP_SIZE"):
        resolve_settings({}, {**LWS, "LWS_GROUP_SIZE": "4"}, RECIPE)
    with pytest.raises(SettingsError, match=r"node_rank 2 from LWS_WORKER_INDEX is out of range"):
        resolve_settings({}, {**LWS, "LWS_WORKER_INDEX": "2"}, RECIPE)
