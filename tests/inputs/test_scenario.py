"""inputs/scenario.py: presets load whole, --set overrides apply, and each cross-section rule is refused
by the field it names, in a fixed order."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from stepbudget.inputs.scenario import ScenarioError, apply_overrides, build, load, preset_names, raw_scenario


PRESET_JOBS = [
    ("llama3-405b", 16384, 2048, 128),  # 2^24 tokens / 8,192; 126 layers + embedding + loss
    ("llama3-405b-puredp", 16384, 16384, 126),  # its base's 2^24 tokens as 1,024-token sequences
    ("deepseek-v3", 2048, 15360, 64),  # 61 layers + MTP + embedding + loss over 16 stages
    ("hpn-gpt3-175b", 32768, 8192, 96),
    ("megascale-175b", 12288, 6144, 96),
    ("megascale-moe-352b", 240, 720, 60),
]


@pytest.mark.parametrize("name, gpus, seqs, slots", PRESET_JOBS)
def test_each_preset_loads_with_the_job_its_source_describes(name, gpus, seqs, slots):
    sc = load(name)
    lay = sc.layout
    assert sc.name == name and sc.source and sc.description
    assert sc.cluster.gpus == lay.tp * lay.cp * lay.pp * lay.dp == gpus
    assert (sc.global_batch_seqs, sc.pipeline_slots) == (seqs, slots)
    assert sc.pipeline_slots % (lay.pp * lay.virtual_stages) == 0


def test_every_shipped_preset_has_its_job_above():
    assert preset_names() == sorted(name for name, *_ in PRESET_JOBS)


def test_set_overrides_apply_and_leave_the_preset_as_shipped():
    sc = load("llama3-405b", ["layout.pp=8", "layout.dp=256", "layout.order=[tp, pp, cp, dp]",
                              "cluster.nic_Bps=200Gb/s", "cluster.gpu.hbm_bytes=96GB", "model.moe.top_k=2",
                              "model.moe.num_experts=8", "model.moe.expert_ffn_size=1024"])
    assert (sc.layout.pp, sc.layout.dp, [str(a) for a in sc.layout.order]) == (8, 256, ["tp", "pp", "cp", "dp"])
    assert sc.cluster.nic_Bps == 25e9  # 200 Gb/s over 8 bits
    assert sc.cluster.gpu.hbm_bytes == 96e9 and sc.cluster.gpu.peak_bf16_flops == 989e12  # the rest of the H100
    assert sc.model.moe is not None and (sc.model.moe.num_experts, sc.model.moe.top_k) == (8, 2)  # a new section
    shipped = load("llama3-405b")
    assert (shipped.layout.pp, shipped.cluster.gpu.hbm_bytes, shipped.model.moe) == (16, 80e9, None)
    with pytest.raises(ScenarioError, match=r"override 'layoutpp': write section.field=value"):
        apply_overrides({}, ["layoutpp"])
    with pytest.raises(ScenarioError, match=r"override layout.pp.x: 'pp' is a value, not a section"):
        apply_overrides(raw_scenario("llama3-405b"), ["layout.pp.x=1"])


@pytest.mark.parametrize("name, sets, message", [
    ("deepseek-v3", ["layout.recompute=selective-op"], "layout.recompute: selective-op (torchtitan's per-op"),
    ("hpn-gpt3-175b", ["layout.dp_replicas=2"], "layout.dp_replicas: ddp shards nothing to replicate"),
    ("llama3-405b", ["layout.attention_kernel=flash-attention-2", "layout.flash_attention=false"],
     "layout.attention_kernel: flash-attention-2 is a fused kernel, but flash_attention is false"),
    ("deepseek-v3", ["batch.global_batch_seqs=15488"], "layout.schedule: DualPipe needs an even number of micro"),
    ("megascale-moe-352b", ["layout.expert_tp=4"], "layout.ep: ep*expert_tp = 8*4 must divide tp*cp*dp = 16"),
    ("megascale-moe-352b", ["layout.ep=3"], "layout.ep: ep = 3 must divide the 32 experts"),
    # the GPU count is checked before the heads: a file wrong twice over hears of the first
    ("llama3-405b", ["layout.tp=3", "layout.dp=64"],
     "layout: tp*cp*pp*dp = 3*1*16*64 = 3072 but cluster.gpus = 16384; change the degrees or set cluster.gpus=3072"),
    ("llama3-405b", ["layout.tp=3", "cluster.gpus=6144"], "layout.tp: 128 attention heads are not divisible by tp = 3"),
])
def test_each_scenario_rule_refuses_by_the_field_it_names(name, sets, message):
    with pytest.raises(ScenarioError) as e:
        load(name, sets)
    assert str(e.value).startswith(message), str(e.value)


def test_loaded_sections_refuse_mutation():
    sc = load("deepseek-v3")
    for section, field, value in [(sc, "name", "x"), (sc.model, "num_layers", 1), (sc.model.moe, "top_k", 1),
                                  (sc.cluster, "gpus", 8), (sc.cluster.gpu, "hbm_bytes", 1e9),
                                  (sc.cluster.gpu.kernels, "gemm", 0.1), (sc.layout, "tp", 2),
                                  (sc.batch, "global_batch_seqs", 1), (sc.precision, "grads", 2.0)]:
        with pytest.raises(ValidationError, match="Instance is frozen"):
            setattr(section, field, value)
    assert load("deepseek-v3").model.num_layers == 61


def _job(tp: int, cp: int, pp: int, dp: int, gpus: int) -> dict:
    """A dense job whose only constraint on degrees of powers of two is tp*cp*pp*dp == gpus."""
    return {
        "model": {"num_layers": 64, "hidden_size": 4096, "num_heads": 64, "ffn_size": 8192, "vocab_size": 1024,
                  "seq_len": 8192},
        "cluster": {"gpus": gpus, "gpu": "h100-sxm", "gpus_per_node": 1, "nics_per_node": 1,
                    "nvlink_Bps": "450GB/s", "nic_Bps": "400Gb/s"},
        "layout": {"tp": tp, "cp": cp, "pp": pp, "dp": dp},
        "batch": {"global_batch_seqs": 2**20},
    }


@settings(max_examples=60, deadline=None)
@given(exps=st.tuples(st.integers(0, 6), st.integers(0, 5), st.integers(0, 6), st.integers(0, 10)), data=st.data())
def test_a_layout_is_accepted_exactly_when_its_degrees_multiply_to_the_gpus(exps, data):
    tp, cp, pp, dp = (2**e for e in exps)
    product = tp * cp * pp * dp
    gpus = data.draw(st.one_of(st.just(product), st.integers(1, 2**28)), label="gpus")
    if gpus == product:
        sc = build(_job(tp, cp, pp, dp, gpus))
        assert (sc.layout.tp, sc.layout.cp, sc.layout.pp, sc.layout.dp) == (tp, cp, pp, dp)
        return
    with pytest.raises(ScenarioError) as e:
        build(_job(tp, cp, pp, dp, gpus))
    message = str(e.value)
    assert message.startswith(f"layout: tp*cp*pp*dp = {tp}*{cp}*{pp}*{dp} = {product} but cluster.gpus = {gpus}; ")
    fix = f"set layout.dp={gpus // (tp * cp * pp)}" if gpus % (tp * cp * pp) == 0 else "change the degrees"
    assert message.endswith(f"{fix} or set cluster.gpus={product}")
