"""Completion (inputs/complete.py): stated, then the model catalog's row, then the GPU's hardware row, then the tool
default, every resolved field with the source of its value; typed edits complete again."""

import pytest

import stepbudget as sb
from stepbudget.enums import Origin
from stepbudget.inputs.catalog import lookup
from stepbudget.inputs.hardware import gpu_node
from stepbudget.inputs.scenario import ScenarioError, build, load

JOB = {"model": {"catalog": "llama3.1-70b", "seq_len": 8192}, "cluster": {"gpus": 64, "gpu": "h100-sxm"},
       "layout": {"tp": 8, "pp": 4, "dp": 2}, "batch": {"global_batch_seqs": 256}}
"""A job as an engineer first writes it: a catalog model, a GPU by name, a layout and a batch; nothing else."""


def _origin(sc, name):
    return sc.sources[name].origin


def test_every_field_says_where_its_value_came_from():
    sc = build(JOB)
    assert set(sc.sources) == set(_leaves(sc.model_dump(mode="json")))  # every field, none twice
    row = lookup("llama3.1-70b")
    assert row is not None
    assert _origin(sc, "model.seq_len") == Origin.STATED and _origin(sc, "layout.tp") == Origin.STATED
    for name in ("num_layers", "hidden_size", "num_kv_heads", "ffn_size", "activation", "vocab_size"):
        assert _origin(sc, f"model.{name}") == Origin.CATALOG and sc.sources[f"model.{name}"].where == row.key
        assert getattr(sc.model, name) == row.model[name]
    assert sc.model.activation == "swiglu"  # the row's, never a GeLU default
    for name in ("peak_bf16_flops", "hbm_bytes", "kernels.gemm"):
        assert sc.sources[f"cluster.gpu.{name}"].origin == Origin.HARDWARE
    assert _origin(sc, "layout.recompute") == _origin(sc, "overlap.dp") == Origin.DEFAULT


def _leaves(node, path=()):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    else:
        yield ".".join(path)


def test_the_gpu_row_fills_the_node_links_a_job_leaves_unstated():
    sc = build(JOB)
    node = gpu_node("h100-sxm")
    assert node is not None and "DGX H100" in node["source"]
    assert (sc.cluster.nvlink_Bps, sc.cluster.nic_Bps) == (450e9, 50e9)  # NVLink 4 each way; ConnectX-7 400 Gb/s
    assert sc.cluster.gpus_per_node == sc.cluster.nics_per_node == 8
    for name in ("nvlink_Bps", "nic_Bps", "gpus_per_node", "nics_per_node"):
        assert _origin(sc, f"cluster.{name}") == Origin.HARDWARE
    stated = build({**JOB, "cluster": {**JOB["cluster"], "nvlink_Bps": "160GB/s"}})
    assert stated.cluster.nvlink_Bps == 160e9 and _origin(stated, "cluster.nvlink_Bps") == Origin.STATED


def test_a_job_on_one_node_needs_no_nic():
    gpu = {"name": "mine", "peak_bf16_flops": "500TFLOP/s", "hbm_bytes": "96GB", "hbm_Bps": "3TB/s"}
    one = {**JOB, "cluster": {"gpus": 8, "gpu": gpu, "nvlink_Bps": "300GB/s"}, "layout": {"tp": 8}}
    sc = build(one)
    assert sc.sources["cluster.nic_Bps"].origin == Origin.DEFAULT and "one node" in sc.sources["cluster.nic_Bps"].where
    assert all(float(x.nic_bytes) == 0 for x in sb.estimate(sb.derive(sc)).exchanges)  # no exchange crosses it
    with pytest.raises(ScenarioError, match="cluster.nic_Bps: required"):  # two nodes: the NIC decides the answer
        build({**one, "cluster": {**one["cluster"], "gpus": 16}, "layout": {"tp": 8, "dp": 2}})


def test_a_catalog_context_is_not_a_training_length():
    with pytest.raises(ScenarioError, match="model.seq_len: required"):
        build({**JOB, "model": {"catalog": "mixtral-8x7b"}})


def test_a_catalog_swap_keeps_the_jobs_sequence_length_and_drops_the_old_rows_fields():
    sc = build(JOB).edit(model="llama3.1-8b")
    assert sc.model.seq_len == 8192 and sc.model.num_layers == 32 and sc.sources["model.num_layers"].where == "llama3.1-8b"
    assert sc.sources["model.seq_len"].origin == Origin.STATED


def test_an_edit_merges_completes_again_and_leaves_the_scenario_as_it_was():
    sc = build(JOB)
    moved = sc.edit(layout={"pp": 2, "dp": 4}, where="mine")
    assert (moved.layout.pp, moved.layout.dp, moved.layout.tp) == (2, 4, 8) and (sc.layout.pp, sc.layout.dp) == (4, 2)
    assert moved.sources["layout.pp"].where == "mine" and moved.sources["layout.tp"].where == "given"
    h200 = sc.edit(cluster={"gpu": "h200-sxm"})  # the new GPU's row replaces the old row's figures
    assert h200.cluster.gpu.hbm_bytes == 141e9 and h200.sources["cluster.gpu.hbm_bytes"].where == "h200-sxm"


def test_expert_parallelism_without_an_order_takes_megatron_cores():
    sc = build({**JOB, "model": {"catalog": "mixtral-8x7b", "seq_len": 4096}, "layout": {"pp": 2, "dp": 32, "ep": 8}})
    assert [a.value for a in sc.layout.order] == ["tp", "cp", "ep", "dp", "pp"]
    assert sc.sources["layout.order"].origin == Origin.DEFAULT and "parallel_state" in sc.sources["layout.order"].where
    (ep, *_) = [x for x in sb.estimate(sb.derive(sc)).exchanges if x.dim == "ep"]
    assert float(ep.nic_bytes) == 0 < float(ep.nvlink_bytes)  # EP 8 inside the node, also with PP 2
    assert [a.value for a in build(JOB).layout.order] == ["tp", "cp", "pp", "dp"]  # dense: Llama 3's


def test_presets_say_which_preset_states_each_value():
    sc = load("llama3-405b-puredp", ["layout.micro_batch=1"])
    assert sc.sources["model.seq_len"].where == "preset llama3-405b-puredp"  # the file over its base
    assert sc.sources["model.num_layers"].where == "preset llama3-405b"  # from the base it names
    assert sc.sources["layout.micro_batch"].where == "--set"


def test_a_node_of_another_size_keeps_the_rows_nics_per_gpu():
    # KempnerForge's nodes hold 4 H200: the DGX H200 row's 8 NICs for 8 GPUs is one NIC per GPU, so 4 here
    sc = build({**JOB, "cluster": {"gpus": 64, "gpu": "h200-sxm", "gpus_per_node": 4}, "layout": {"tp": 4, "pp": 4, "dp": 4}})
    assert (sc.cluster.gpus_per_node, sc.cluster.nics_per_node, sc.cluster.nic_Bps_per_gpu) == (4, 4, 50e9)
    assert sc.sources["cluster.nics_per_node"].origin == Origin.HARDWARE


def test_a_copy_with_changes_states_its_whole_self():
    # model_copy(update=...) bypasses completion: what the original stated no longer describes the copy
    copy = load("llama3-405b").model_copy(update={"name": "mine"})
    assert {s.origin for s in copy.sources.values()} == {Origin.STATED}
    assert copy.sources["layout.recompute"].where == "given" and copy.edit(layout={"pp": 8, "dp": 256}).layout.pp == 8


MOE_JOB = {"model": {"catalog": "qwen3-30b-a3b", "seq_len": 4096}, "cluster": {"gpus": 64, "gpu": "h100-sxm"},
           "layout": {"tp": 1, "pp": 1, "dp": 64, "ep": 8}, "batch": {"global_batch_seqs": 256}}


@pytest.mark.parametrize(("moe", "load", "where"), [
    ({}, 1.52, "MaxVio 0.52 under an auxiliary loss"),  # the row states no balance: an auxiliary loss, the default
    ({"balance": "loss-free"}, 1.04, "MaxVio 0.04 under loss-free"),
])
def test_an_moe_job_is_told_how_hot_its_busiest_expert_runs_and_why(moe, load, where):
    sc = build({**MOE_JOB, "model": {**MOE_JOB["model"], "moe": moe}})
    assert sc.model.moe.expert_load == load
    source = sc.sources["model.moe.expert_load"]
    assert source.origin == Origin.DEFAULT and "Wang et al. 2024 (arXiv 2408.15664) Table 2" in source.where
    assert where in source.where


@pytest.mark.parametrize("moe", [{"expert_load": 1.1}, {"popularity_skew": 0.8},
                                 {"capacity_factor": 1.0, "pad_to_capacity": True}])
def test_a_stated_load_skew_or_padding_sets_the_load_itself(moe):
    sc = build({**MOE_JOB, "model": {**MOE_JOB["model"], "moe": moe}})
    assert sc.model.moe.expert_load == moe.get("expert_load")
    assert sc.sources["model.moe.expert_load"].origin == (Origin.STATED if "expert_load" in moe else Origin.DEFAULT)


@pytest.mark.parametrize(("moe", "said"), [
    ({"pad_to_capacity": True}, r"model.moe.pad_to_capacity: padding needs a capacity"),
    ({"popularity_skew": 0.8, "expert_load": 1.2}, r"model.moe.expert_load: a popularity skew sets the busiest"),
])
def test_routing_that_says_two_things_is_refused_by_name(moe, said):
    with pytest.raises(ScenarioError, match=said):
        build({**MOE_JOB, "model": {**MOE_JOB["model"], "moe": moe}})
