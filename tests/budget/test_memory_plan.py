"""Memory per GPU of a whole plan (budget/memory.py) against formulas.md 4 and 5, worked by hand.

Hand numbers use the GPT-3 175B shapes of the hpn-gpt3-175b preset (Brown et al. Table 2.1):
L = 96, h = 12288, a = 96, s = 2048, d_ff = 4h (GeLU), V = 51200, tied embeddings, no biases.
One layer then has 4h^2 attention + 8h^2 MLP = 12h^2 parameters (Megatron transformer_flops).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import stepbudget as sb
from stepbudget.budget.memory import COMPONENTS, layer_widths, memory_per_gpu
from stepbudget.cli import app
from stepbudget.plan.memory import layer_activation_bytes
from stepbudget.sweep.search import scenario_for

# GPT-3 175B (hpn-gpt3-175b preset)
H, A, S, L, V = 12288, 96, 2048, 96, 51200
LAYER = 12 * H * H  # parameters of one GPT layer, no biases

FIELDS = ("params", "grads", "optimizer", "gathered", "activations", "extras", "layers", "inflight")


def mem(name, *sets, layouts=None):
    return memory_per_gpu(sb.derive(sb.load(name, list(sets)), layouts))


def gpt3(*sets):
    """hpn-gpt3-175b on 64 GPUs at TP8 PP8 DP1 (1F1B, 8192 sequences: m = 8192 micro-batches)."""
    return ("hpn-gpt3-175b", "cluster.gpus=64", "layout.dp=1", *sets)


# --- activations: Korthikanti22 Table 2 through the whole plan ---------------------------------------


def korthikanti(t, sp, recompute, b=1, dropout=True, flash=False):
    """Activation bytes of one GPT-3 layer for one micro-batch, Korthikanti22 Table 2 / §4.1 (by hand)."""
    sbh = S * b * H
    if recompute == "full":
        return 2 * sbh / (t if sp else 1)
    if dropout:
        outside, scores = 10, 5 * A * S / H  # LN 4 + inputs 4 + masks 2; softmax 2 + mask 1 + dropout 2 per score
    else:
        outside, scores = 8, 2 * A * S / H  # no masks, no dropout output: softmax output only
    if recompute == "selective" or flash:
        scores = 0
    return sbh * (outside / (t if sp else 1) + (24 + scores) / t)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_activations_are_korthikanti_table_2(t, sp, recompute):
    m = mem(*gpt3(f"layout.tp={t}", f"cluster.gpus={8 * t}", f"layout.sequence_parallel={str(sp).lower()}",
                  f"layout.recompute={recompute}", "model.dropout=true", "layout.flash_attention=false"))
    # first 1F1B stage: L/p = 12 layers, p = 8 micro-batches in flight (m = 8192 >= p): L layers' worth (Eq. 5)
    assert float(m.layers) == 12 and float(m.inflight) == 8
    per_layer = korthikanti(t, sp, recompute)
    assert float(m.activations) == pytest.approx(per_layer * 12 * 8, rel=1e-12)
    assert float(m.activations) == pytest.approx(per_layer * float(m.layers) * float(m.inflight), rel=1e-12)


def test_table_2_worked_numbers_per_sequence():
    """formulas.md 5.2: GPT-3, t = 8 TP+SP: 359 MB per layer per sequence; 107 MB with selective recompute."""
    for recompute, mb in (("none", 359), ("selective", 107)):
        m = mem(*gpt3("layout.sequence_parallel=true", f"layout.recompute={recompute}", "model.dropout=true",
                      "layout.flash_attention=false"))
        assert float(m.activations / (m.layers * m.inflight)) / 1e6 == pytest.approx(mb, abs=0.5)


@pytest.mark.parametrize("dropout, flash", [(True, True), (False, False), (False, True)])
def test_dropout_and_flash_change_the_per_layer_count(dropout, flash):
    m = mem(*gpt3(f"model.dropout={str(dropout).lower()}", f"layout.flash_attention={str(flash).lower()}",
                  "layout.micro_batch=2"))
    expected = korthikanti(8, False, "none", b=2, dropout=dropout, flash=flash)
    assert float(m.activations) == pytest.approx(expected * 12 * 8, rel=1e-12)


def test_saved_activations_in_fp8_halve_the_activations():
    bf16 = mem(*gpt3("model.dropout=true", "layout.flash_attention=false"))
    fp8 = mem(*gpt3("model.dropout=true", "layout.flash_attention=false", "precision.saved_activations=fp8"))
    assert float(fp8.activations) == pytest.approx(float(bf16.activations) / 2, rel=1e-12)
    assert float(fp8.model_state) == pytest.approx(float(bf16.model_state), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    t=st.sampled_from([1, 2, 4, 8, 16]),
    cp=st.sampled_from([1, 2]),
    b=st.sampled_from([1, 2, 4]),
    sp=st.booleans(),
    flash=st.booleans(),
    dropout=st.booleans(),
    preset=st.sampled_from(["hpn-gpt3-175b", "llama3-405b", "deepseek-v3"]),
)
def test_recompute_full_below_selective_below_none(t, cp, b, sp, flash, dropout, preset):
    sc = sb.load(preset, [f"model.dropout={str(dropout).lower()}", f"layout.flash_attention={str(flash).lower()}"])
    layouts = {"tp": t, "cp": cp, "micro_batch": b, "sequence_parallel": sp,
               "recompute": np.array(["none", "selective", "full"])}
    act = memory_per_gpu(sb.derive(sc, layouts)).activations
    none, selective, full = act
    assert 0 < full < selective <= none
    if flash:  # FlashAttention already drops the scores: selective recompute stores the same
        assert selective == pytest.approx(none, rel=1e-12)
    else:
        assert selective < none


# --- model states: formulas.md 5.1 by hand ------------------------------------------------------------

PSI = 12 * LAYER / 8 + V * H / 8  # TP8 PP8: 12 layers and the vocab-parallel (tied) embedding on rank 0


@pytest.mark.parametrize("cp, dp", [(1, 8), (2, 4)])
@pytest.mark.parametrize(
    "kind, reshard, params, grads, optimizer, gathered_layers",
    [
        ("ddp", True, 2 * PSI, 2 * PSI, 12 * PSI, 0),
        ("zero1", True, 2 * PSI, 2 * PSI, 12 * PSI / 8, 0),
        ("zero2", True, 2 * PSI, 2 * PSI / 8, 12 * PSI / 8, 0),
        ("zero3", True, 2 * PSI / 8, 2 * PSI / 8, 12 * PSI / 8, 2),
        ("zero3", False, 2 * PSI / 8, 2 * PSI / 8, 12 * PSI / 8, 2),  # reshard is FSDP's switch: ZeRO-3 always frees
        ("fsdp", True, 2 * PSI / 8, 2 * PSI / 8, 12 * PSI / 8, 2),  # prefetch keeps 2 layers gathered
        ("fsdp", False, 2 * PSI / 8, 2 * PSI, 12 * PSI / 8, 12),  # no reshard: whole grads, whole stage gathered
    ],
)
def test_zero_stages_shard_as_formulas_5_1(cp, dp, kind, reshard, params, grads, optimizer, gathered_layers):
    """N_d = dp * cp = 8 in both rows: CP ranks reduce gradients with the DP ranks."""
    m = mem("hpn-gpt3-175b", f"layout.cp={cp}", f"layout.dp={dp}", "cluster.gpus=512", f"layout.dp_kind={kind}",
            f"layout.reshard_after_forward={str(reshard).lower()}")
    assert float(m.params) == pytest.approx(params, rel=1e-12)
    assert float(m.grads) == pytest.approx(grads, rel=1e-12)
    assert float(m.optimizer) == pytest.approx(optimizer, rel=1e-12)
    assert float(m.gathered) == pytest.approx(gathered_layers * 2 * LAYER / 8, rel=1e-12)
    assert float(m.model_state) == pytest.approx(params + grads + optimizer + gathered_layers * 2 * LAYER / 8)
    assert float(m.total) == pytest.approx(float(m.model_state + m.activations + m.extras), rel=1e-12)


def test_zero_totals_per_parameter():
    """formulas.md 5.1 closed forms: 16 Psi, 4 Psi + 12 Psi/N_d, 2 Psi + 14 Psi/N_d, 16 Psi/N_d (+ gathered)."""
    d = 8
    totals = {k: float(mem("hpn-gpt3-175b", "layout.dp=8", "cluster.gpus=512", f"layout.dp_kind={k}").model_state)
              for k in ("ddp", "zero1", "zero2", "zero3")}
    assert totals["ddp"] == pytest.approx(16 * PSI)
    assert totals["zero1"] == pytest.approx(4 * PSI + 12 * PSI / d)
    assert totals["zero2"] == pytest.approx(2 * PSI + 14 * PSI / d)
    assert totals["zero3"] == pytest.approx(16 * PSI / d + 2 * 2 * LAYER / 8)
    assert totals["ddp"] > totals["zero1"] > totals["zero2"] > totals["zero3"]


def llama3_psi():
    """Llama 3 405B, TP8 PP16, embedding counted as a slot: 128 slots / 16 = 8, less the embedding = 7 layers."""
    h, q, kv, ff, vocab = 16384, 16384, 8 * 128, 53248, 128256
    layer = h * (q + 2 * kv) + q * h + 3 * h * ff  # GQA attention + SwiGLU
    return 7 * layer / 8 + vocab * h / 8


@pytest.mark.parametrize("reshard", [False, True])
def test_fsdp_gradients_whole_without_reshard(reshard):
    """Llama 3 keeps FP32 gradients whole with FSDP and no reshard; with reshard they are a 1/d shard."""
    m = mem("llama3-405b", f"layout.reshard_after_forward={str(reshard).lower()}")
    psi, d = llama3_psi(), 128
    assert float(m.layers) == 7
    assert float(m.grads) == pytest.approx(4 * psi / (1 if not reshard else d), rel=1e-12)
    assert float(m.params) == pytest.approx(2 * psi / d, rel=1e-12)


def test_zero3_regathers_whatever_the_fsdp_switch_says():
    # memory and traffic read one flag: ZeRO-3 frees gathered parameters after every pass
    calls = {}
    for reshard in ("true", "false"):
        sc = sb.load("hpn-gpt3-175b", ["layout.dp_kind=zero3", f"layout.reshard_after_forward={reshard}"])
        b = sb.estimate(sb.derive(sc))
        calls[reshard] = [float(x.calls) for x in b.exchanges if x.dim.value == "dp"]
    assert calls["true"] == calls["false"] and max(calls["true"]) > 0


def test_dualpipe_holds_two_stages_of_parameters():
    """DSV3 Table 2: DualPipe parameters 2x (stage i and p-1-i), activations PP+1 against 1F1B's PP."""
    one = mem("hpn-gpt3-175b")  # TP8 PP8 DP512 1F1B DDP, m = 16
    dual = mem("hpn-gpt3-175b", "layout.schedule=dualpipe")
    stage = 12 * LAYER / 8
    assert float(one.params) == pytest.approx(2 * (stage + V * H / 8), rel=1e-12)
    # tied embeddings: the last stage's LM head is the embedding rank 0 already holds
    assert float(dual.params) == pytest.approx(2 * (2 * stage + V * H / 8), rel=1e-12)
    assert float(dual.inflight) == 9 and float(one.inflight) == 8
    assert float(dual.activations) == pytest.approx(float(one.activations) * 9 / 8, rel=1e-12)


def test_dualpipe_untied_head_on_rank_zero():
    """megascale-175b (untied, V = 64000): rank 0 also holds the last stage, so the LM head too."""
    sets = ("layout.schedule=dualpipe", "layout.virtual_stages=1")
    one = mem("megascale-175b", "layout.schedule=1f1b", "layout.virtual_stages=1")
    dual = mem("megascale-175b", *sets)
    h, vocab = 12288, 64000
    stage = 12 * 12 * h * h / 8
    assert float(one.params) == pytest.approx(2 * (stage + vocab * h / 8), rel=1e-12)
    assert float(dual.params) == pytest.approx(2 * (2 * stage + 2 * vocab * h / 8), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    preset=st.sampled_from(["hpn-gpt3-175b", "megascale-moe-352b", "deepseek-v3"]),
    kind=st.sampled_from(["ddp", "zero1", "zero2", "zero3", "fsdp"]),
    reshard=st.booleans(),
    tp=st.sampled_from([1, 2, 4, 8]),
    cp=st.sampled_from([1, 2]),
    d=st.integers(1, 256),
    more=st.integers(1, 1024),
)
def test_more_dp_never_increases_model_state(preset, kind, reshard, tp, cp, d, more):
    sc = sb.load(preset)
    m = memory_per_gpu(sb.derive(sc, {"tp": tp, "cp": cp, "dp": np.array([d, d + more]), "dp_kind": kind,
                                      "reshard_after_forward": reshard}))
    for field in ("params", "grads", "optimizer", "gathered", "model_state"):
        small, large = getattr(m, field)
        assert large <= small * (1 + 1e-12), field
    if kind != "ddp":
        assert m.model_state[1] < m.model_state[0]


# --- the array path equals the scalar path ------------------------------------------------------------

LAYOUTS = [  # valid on hpn-gpt3-175b with 64 GPUs
    dict(tp=8, cp=1, pp=8, dp=1, schedule="1f1b", virtual_stages=1, micro_batch=1, dp_kind="zero1",
         reshard_after_forward=True, sequence_parallel=True, recompute="none", cp_kind="all-gather"),
    dict(tp=4, cp=2, pp=4, dp=2, schedule="interleaved-1f1b", virtual_stages=3, micro_batch=2, dp_kind="fsdp",
         reshard_after_forward=False, sequence_parallel=False, recompute="selective", cp_kind="ring"),
    dict(tp=2, cp=1, pp=16, dp=2, schedule="dualpipe", virtual_stages=1, micro_batch=4, dp_kind="zero2",
         reshard_after_forward=True, sequence_parallel=True, recompute="full", cp_kind="all-gather"),
    dict(tp=8, cp=1, pp=2, dp=4, schedule="gpipe", virtual_stages=1, micro_batch=8, dp_kind="zero3",
         reshard_after_forward=True, sequence_parallel=True, recompute="none", cp_kind="all-gather"),
    dict(tp=1, cp=2, pp=32, dp=1, schedule="zb-h1", virtual_stages=1, micro_batch=1, dp_kind="ddp",
         reshard_after_forward=True, sequence_parallel=False, recompute="none", cp_kind="ring"),
    dict(tp=16, cp=1, pp=4, dp=1, schedule="zb-h2", virtual_stages=1, micro_batch=16, dp_kind="fsdp",
         reshard_after_forward=True, sequence_parallel=True, recompute="full", cp_kind="all-gather"),
]
ARRAY_SETS = ["cluster.gpus=64", "layout.dp=1", "model.dropout=true", "layout.flash_attention=false"]


@pytest.fixture(scope="module")
def scalar_answers():
    base = sb.load("hpn-gpt3-175b", ARRAY_SETS)
    out = []
    for row in LAYOUTS:
        plan = sb.derive(scenario_for(base, {**row, "ep": 1, "expert_tp": row["tp"]}, 64))
        m = memory_per_gpu(plan)
        out.append({**{f: float(getattr(m, f)) for f in FIELDS}, "step_s": float(sb.estimate(plan).step_s)})
    return base, out


def _columns(rows, shape):
    return {k: np.array([r[k] for r in rows]).reshape(shape) for k in rows[0]}


@pytest.mark.parametrize("shape", [(), (2,), (2, 3)])
def test_array_path_equals_scalar_path(scalar_answers, shape):
    base, answers = scalar_answers
    n = int(np.prod(shape))
    picks = [1] if shape == () else list(range(n))  # () uses the interleaved FSDP layout
    plan = sb.derive(base, _columns([LAYOUTS[i] | {"ep": 1} for i in picks], shape))
    m, step = memory_per_gpu(plan), np.asarray(sb.estimate(plan).step_s)
    assert np.shape(m.total) == shape
    for f in FIELDS:
        got = np.broadcast_to(np.asarray(getattr(m, f), dtype=float), shape).reshape(-1)
        want = [answers[i][f] for i in picks]
        assert got == pytest.approx(want, rel=1e-12, abs=1e-9), f
    assert np.broadcast_to(step, shape).reshape(-1) == pytest.approx([answers[i]["step_s"] for i in picks], rel=1e-12)


def test_moe_array_path_follows_tp_when_expert_tp_unset():
    """megascale-moe-352b with ep = 1 and expert_tp unset: expert TP is the TP degree (layout.py)."""
    sets = ["layout.ep=1", "layout.expert_tp=null", "layout.tp=4", "layout.dp=4"]
    base = sb.load("megascale-moe-352b", sets)
    arr = memory_per_gpu(sb.derive(base, {"tp": np.array([8]), "dp": np.array([2])}))
    one = memory_per_gpu(sb.derive(sb.load("megascale-moe-352b", sets[:2] + ["layout.tp=8", "layout.dp=2"])))
    assert float(arr.params[0]) == pytest.approx(float(one.params), rel=1e-12)


def test_no_embedding_dropout_masks_without_dropout():
    """hpn-gpt3-175b trains without dropout (preset): with pp > 1 rank 0 has no output layer, so no extras."""
    m = mem("hpn-gpt3-175b")
    assert float(m.extras) == 0


def test_extras_with_dropout_are_the_embedding_masks():
    """Korthikanti22 §4.3: 1-byte embedding dropout mask, sbh per in-flight micro-batch (no SP, pp > 1)."""
    m = mem("hpn-gpt3-175b", "model.dropout=true")
    assert float(m.extras) == pytest.approx(S * H * 8, rel=1e-12)


# --- the memory command ---------------------------------------------------------------------------------


def test_memory_cli_json_matches_the_library():
    sets = ["layout.dp_kind=zero2", "layout.recompute=selective"]
    r = CliRunner().invoke(app, ["memory", "hpn-gpt3-175b", "--json", *[a for s in sets for a in ("--set", s)]])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    m = mem("hpn-gpt3-175b", *sets)
    assert set(d["bytes"]) == set(COMPONENTS)
    for k in COMPONENTS:
        assert d["bytes"][k] == pytest.approx(float(getattr(m, k)), rel=1e-12)
    assert d["total_bytes"] == pytest.approx(sum(d["bytes"].values()), rel=1e-12)
    assert d["headroom_bytes"] == pytest.approx(d["capacity_bytes"] - d["total_bytes"], rel=1e-12)
    assert d["capacity_bytes"] == 80e9
    assert d["fits"] is (d["total_bytes"] <= d["capacity_bytes"])


def test_memory_cli_bad_input_is_one_line_per_problem():
    r = CliRunner().invoke(app, ["memory", "hpn-gpt3-175b", "--set", "layout.tp=5"])
    assert r.exit_code == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    # TP 5 breaks two rules at once: the degrees no longer fill the GPUs, and 5 does not divide the 96 heads
    assert lines == ["stepbudget: error: layout: tp*cp*pp*dp = 5*1*8*512 = 20480 but cluster.gpus = 32768; change the "
                     "degrees or set cluster.gpus=20480",
                     "stepbudget: error: layout.tp: 96 attention heads are not divisible by tp = 5; use a divisor"]



def test_per_op_checkpointing_keeps_the_saved_matmul_outputs():
    # Llama 3.1 8B, no TP: the layer input, Q, V, the attention output, w1's output and w2's output
    m = sb.load("llama3-405b").model.model_copy(update={"num_layers": 32, "hidden_size": 4096, "num_heads": 32,
                                                        "kv_heads": 8, "ffn_size": 14336})
    per = {r: float(layer_activation_bytes(1, 1, 1, False, r, True, **layer_widths(m)))
           for r in ("none", "selective-op", "full")}
    assert per["selective-op"] == 2 * (4096 + 4096 + 1024 + 4096 + 14336 + 4096)
    assert per["full"] < per["selective-op"] < per["none"]


def test_llama3_405b_layer_keeps_what_megatron_core_saves():
    """Llama 3 405B at TP8 with SP, FlashAttention, no recompute: each tensor the backward reads, in BF16.

    Sequence-split over the 8 TP ranks (Korthikanti22 4.2.2): the two RMSNorm inputs and their outputs (the
    QKV and MLP GEMM inputs, kept as the local shard and all-gathered again), 8h. Head-split: Q and the
    8-head K and V after RoPE (FlashAttention saves them), h + 2h/16; the attention output (FlashAttention's O
    is the projection's input, one tensor), h; SwiGLU's gate and up (2 x 3.25h) and their product (3.25h, fc2's
    input). No s^2 scores (FlashAttention), no dropout masks (Llama 3 trains without dropout)."""
    m = sb.load("llama3-405b")
    h, t, s = 16384, 8, 8192
    elements = 4 * h / t + (h + 2 * h / 16 + h + 3 * 3.25 * h) / t  # per token
    per_layer = layer_activation_bytes(s, 1, t, True, "none", True, s_kv=s, **layer_widths(m.model))
    assert per_layer == 2 * elements * s == 8192 * 65024  # 532.7 MB per layer per micro-batch
