"""The budget over arrays, invariants of the step, and the overlap model."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stepbudget as sb
from stepbudget.a2a.routing import remote_nodes_per_token
from stepbudget.enums import Axis

from _util import rows

KERNEL = ["cluster.rate_scope=kernel"]


def one(name, *sets):
    return sb.estimate(sb.derive(sb.load(name, list(sets))))


@pytest.mark.parametrize("shape", [(), (2,), (2, 3)])
def test_arrays_match_the_scalar_path(shape):
    sc = sb.load("llama3-405b", KERNEL)
    pp = np.resize(np.array([16, 8, 4, 16, 8, 2]), shape) if shape else np.array(8)
    tp = np.resize(np.array([8, 8, 4, 4, 2, 8]), shape) if shape else np.array(4)
    dp = 16384 // (pp * tp)
    many = sb.estimate(sb.derive(sc, {"pp": pp, "tp": tp, "dp": dp}))
    assert np.shape(many.step_s) == shape
    for i in np.ndindex(shape):
        single = one("llama3-405b", *KERNEL, f"layout.pp={pp[i]}", f"layout.tp={tp[i]}", f"layout.dp={dp[i]}")
        assert float(many.step_s[i]) == pytest.approx(float(single.step_s), rel=1e-12)
        assert float(many.mfu[i]) == pytest.approx(float(single.mfu), rel=1e-12)
        assert float(many.link_bytes()["nic"][i]) == pytest.approx(float(single.link_bytes()["nic"]), rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(nic=st.sampled_from(["100Gb/s", "200Gb/s", "400Gb/s", "800Gb/s"]), factor=st.sampled_from([1.5, 2, 4]),
       preset=st.sampled_from(["llama3-405b", "hpn-gpt3-175b", "megascale-175b", "deepseek-v3", "megascale-moe-352b"]))
def test_a_faster_nic_is_never_slower(nic, factor, preset):
    from stepbudget.units import parse
    slow = one(preset, *KERNEL, f"cluster.nic_Bps={nic}")
    fast = one(preset, *KERNEL, f"cluster.nic_Bps={parse(nic, 'rate') * factor}")
    assert float(fast.step_s) <= float(slow.step_s) * (1 + 1e-12)


def test_exposed_never_exceeds_time_and_hidden_never_exceeds_compute():
    for preset in sb.preset_names():
        b = one(preset, *KERNEL)
        hidden = 0.0
        for x, e in zip(b.exchanges, b.exposed_s):
            assert -1e-12 <= float(e) <= float(x.time_s) + 1e-12
            hidden += float(x.time_s - e)
        assert hidden <= float(b.compute_s) * (1 + 1e-9)


def test_overlap_fraction_hides_phi_of_the_time():
    # formulas.md 6.1: exposed = T - min(phi T, W)
    b0 = one("megascale-175b", "overlap.tp=0")
    b1 = one("megascale-175b", "overlap.tp=0.75")
    for x0, e0, e1 in zip(b0.exchanges, b0.exposed_s, b1.exposed_s):
        if x0.dim == Axis.TP and float(x0.calls) > 0:
            assert float(e0) == pytest.approx(float(x0.time_s))
            assert float(e1) == pytest.approx(0.25 * float(x0.time_s))


def test_pure_dp_cannot_be_hidden():
    # 5.4: when T_comm > T_comp no overlap saves you: at most T_comp is hidden
    b = one("llama3-405b-puredp", "overlap.dp=1.0")
    assert float(b.exposed_comm_s) == pytest.approx(float(b.comm_s - b.compute_s))


def test_interleaving_divides_the_bubble(budget_of):
    b1 = one("llama3-405b", *KERNEL, "layout.schedule=1f1b", "layout.virtual_stages=1")
    b4 = one("llama3-405b", *KERNEL)
    # (p-1)/m of each micro-batch's critical path: compute plus the exchanges it waits for (TP here)
    critical = sum(float(e) for x, e in zip(b1.exchanges, b1.exposed_s) if x.critical)
    assert critical > 0
    assert float(b1.bubble_s) == pytest.approx(15 / 16 * (float(b1.compute_s) + critical))
    assert float(b4.bubble_s) == pytest.approx(float(b1.bubble_s) / 4)


def test_rank_order_moves_dp_onto_nvlink():
    # DP innermost: 8 DP peers share the node, 1/8 of the bytes go to each NIC
    b = one("llama3-405b", "layout.order=[dp, tp, cp, pp]")
    for x in rows(b, Axis.DP):
        assert float(x.nvlink_bytes) > 0
    for x in rows(b, Axis.TP):
        assert x.link == "nic"  # and TP now spans nodes


def test_sequence_parallel_keeps_tp_bytes():
    # Korthikanti 4.2.2: RS + AG moves what the all-reduce moved
    sp = sum(float(x.bytes_per_gpu) for x in rows(one("hpn-gpt3-175b", "layout.sequence_parallel=true"), Axis.TP))
    ar = sum(float(x.bytes_per_gpu) for x in rows(one("hpn-gpt3-175b"), Axis.TP))
    assert sp == pytest.approx(ar)


def test_fsdp_reshard_gathers_twice_per_microbatch():
    # formulas.md 3.4: (d-1)/d Psi (2 w_p + w_g) with reshard, (w_p + w_g) without, for one
    # micro-batch; resharded parameters and sharded gradients repeat that for each of the m
    no = sum(float(x.bytes_per_gpu) for x in rows(one("llama3-405b", "precision.grads=bf16"), Axis.DP))
    for seqs in (2048, 4096):  # m = 16 and 32 micro-batches
        sets = ("precision.grads=bf16", "layout.reshard_after_forward=true", "batch.global_batch_tokens=null",
                f"batch.global_batch_seqs={seqs}")
        re = sum(float(x.bytes_per_gpu) for x in rows(one("llama3-405b", *sets), Axis.DP))
        m = seqs / 128
        assert re / no == pytest.approx(1.5 * m)


def test_dp_bytes_per_step_do_not_grow_with_the_batch_without_reshard():
    # chapter 5.7: "If the batch doubles, DP bytes per step are unchanged" (DDP, ZeRO-1, FSDP no-reshard)
    for kind in ("ddp", "zero1", "fsdp"):
        a, b = (sum(float(x.bytes_per_gpu) for x in rows(one("llama3-405b", f"layout.dp_kind={kind}",
                "batch.global_batch_tokens=null", f"batch.global_batch_seqs={n}"), Axis.DP)) for n in (2048, 4096))
        assert a == pytest.approx(b) and a > 0


def test_ddp_and_zero1_reduce_in_megatron_core_buckets():
    # megascale-175b: ZeRO-1, DP overlapped, 175B / (TP 8 x PP 8) = 2.7 B parameters per GPU over DP 192
    b = one("megascale-175b")
    rs = rows(b, Axis.DP, "grads")[0]
    psi = float(b.plan.params_dense_per_gpu)
    bucket = max(40e6, 1e6 * 192)  # Megatron-Core: max(40 M, 1 M x DP ranks) parameters
    assert float(rs.calls) == np.ceil(psi / bucket) == float(rs.units)
    grad_bytes = b.plan.scenario.precision.grads
    assert float(rs.message_bytes * rs.calls) == pytest.approx(psi * grad_bytes)  # the whole buffer, once
    # a bigger DP group, bigger buckets: fewer calls, so ring latency does not grow with every rank
    calls = [float(rows(one("megascale-175b", f"layout.dp={d}", f"cluster.gpus={64 * d}",
                            f"batch.global_batch_seqs={8 * d}"), Axis.DP, "grads")[0].calls) for d in (8, 64, 512)]
    assert calls[0] >= calls[1] >= calls[2] and calls[0] > calls[2]
    # not overlapped, Megatron-Core does not bucket: one call for the buffer; a stated bucket wins
    assert float(rows(one("megascale-175b", "overlap.dp=0"), Axis.DP, "grads")[0].calls) == 1
    stated = rows(one("megascale-175b", "layout.dp_bucket_params=25e6"), Axis.DP, "grads")[0]
    assert float(stated.calls) == np.ceil(psi / 25e6)
    # FSDP exchanges a unit per layer, whatever the DP group
    fsdp = rows(one("llama3-405b"), Axis.DP, "params")[0]
    assert float(fsdp.units) == float(fsdp.calls) == np.ceil(126 / 16)  # 126 layers over 16 stages


@settings(max_examples=25, deadline=None)
@given(bucket=st.floats(1e5, 1e11))
def test_buckets_split_the_dp_bytes_without_changing_them(bucket):
    base = sum(float(x.bytes_per_gpu) for x in rows(one("megascale-175b"), Axis.DP))
    b = one("megascale-175b", f"layout.dp_bucket_params={bucket}")
    xs = rows(b, Axis.DP)
    assert sum(float(x.bytes_per_gpu) for x in xs) == pytest.approx(base)
    assert all(float(x.calls) == max(np.ceil(float(b.plan.params_dense_per_gpu) / bucket), 1) for x in xs)


def test_moe_adds_an_all_to_all_in_every_moe_layer():
    b = one("deepseek-v3")
    counts, *ep = rows(b, Axis.EP)
    assert [x.what for x in ep] == ["tokens (dispatch)", "tokens (combine)"]
    # before each dispatch every rank gathers the EP group's token count per expert (int64), once per MoE layer's
    # forward: the backward reuses the splits (Megatron-Core token_dispatcher.py)
    assert counts.what == "token counts" and counts.collective.value == "all-gather" and counts.critical
    assert float(counts.message_bytes) == 64 * 256 * 8
    assert float(counts.calls) == pytest.approx(58 / 16 * float(b.plan.microbatches))
    for x in ep:
        # dispatch + combine, forward and backward, per MoE layer per micro-batch
        assert float(x.calls) == pytest.approx(2 * 58 / 16 * float(b.plan.microbatches))
    # node-limited routing: at most 4 nodes' worth of each token crosses the NIC
    d = next(x for x in ep if "dispatch" in x.what)
    token_bytes = 4096 * 7168 * 1.03125 * float(d.calls)
    assert float(d.nic_bytes) <= 4 * token_bytes * (1 - 1 / 8) + 1


def test_cp_all_gather_of_kv():
    # Llama 3 long context: CP16 all-gathers K,V of the whole sequence per layer
    b = one("llama3-405b", "model.seq_len=131072", "layout.cp=16", "layout.dp=8", "batch.global_batch_tokens=16777216")
    ag = next(x for x in rows(b, Axis.CP) if x.collective.value == "all-gather")
    kv = 2 * 131072 * (8 * 128 / 8) * 2  # K and V, 8 KV heads of 128 split over TP 8, BF16
    assert float(ag.message_bytes) == pytest.approx(kv)
    assert float(ag.calls) == pytest.approx(126 / 16 * float(b.plan.microbatches))  # one per layer pass


def test_hidden_communication_slows_the_operator_model_compute_by_the_measured_share():
    from stepbudget.plan.derive import OVERLAP_SM_SHARE
    b = one("megascale-175b")
    assert b.plan.rate_source == "operators" and b.plan.comm_sm_share == OVERLAP_SM_SHARE
    hidden = float(b.comm_s - b.exposed_comm_s)
    assert hidden > 0
    assert float(b.contention_s) == pytest.approx(OVERLAP_SM_SHARE * hidden)
    none = one("megascale-175b", "overlap.comm_sm_share=0")
    assert float(b.step_s - none.step_s) == pytest.approx(float(b.contention_s))


def test_dualpipe_runs_its_paired_chunks_on_the_sms_its_all_to_all_leaves():
    # DeepSeek-V3 3.2.1-3.2.2: SMs dedicated to communication by hand (20 of 132), so a pair's compute runs on
    # the rest for the whole pair, 1 / (1 - s) times as long; DP and PP hidden beside it hold SMs as before
    from stepbudget.budget.pipeline import dualpipe_unpaired
    b = one("deepseek-v3", "overlap.comm_sm_share=0.15")
    p = b.plan
    assert int(p.schedule) == 5 and float(p.ep) > 1
    passes = float(b.compute_s - p.optimizer_s)
    paired = passes * (1 - float(dualpipe_unpaired(p.pp, p.microbatches)))
    other = sum(float(x.time_s - e) for x, e in zip(b.exchanges, b.exposed_s) if x.dim != Axis.EP)
    assert float(b.contention_s) == pytest.approx(0.15 * other + 0.15 / 0.85 * paired, rel=1e-12)
    ep_hidden = sum(float(x.time_s - e) for x, e in zip(b.exchanges, b.exposed_s) if x.dim == Axis.EP)
    assert 0 < ep_hidden < paired / 0.85  # the all-to-all ends before the pair: the SMs stay held regardless
    # 1F1B's paired overlap (Megatron-Core's) holds them only while the all-to-all runs
    one_f = one("deepseek-v3", "overlap.comm_sm_share=0.15", "layout.schedule=1f1b", "overlap.ep_paired=true")
    hidden = float(one_f.comm_s - one_f.exposed_comm_s)
    assert float(one_f.contention_s) == pytest.approx(0.15 * hidden, rel=1e-12)
    # a dense model under DualPipe has no all-to-all to set SMs aside for
    dense = one("megascale-175b", "layout.schedule=dualpipe", "layout.virtual_stages=1")
    assert float(dense.contention_s) == pytest.approx(dense.plan.comm_sm_share * float(dense.comm_s - dense.exposed_comm_s))


def test_a_stated_rate_already_contains_its_own_overlap():
    b = one("llama3-405b", *KERNEL)
    assert b.plan.rate_source == "stated" and b.plan.comm_sm_share == 0.0
    assert float(b.contention_s) == 0.0
    assert one("llama3-405b", *KERNEL, "overlap.comm_sm_share=0.1").plan.comm_sm_share == 0.1


def test_all_gather_ep_moves_every_token_to_every_rank():
    # MegaScale-MoE 3.2: all-gather the EP group's tokens instead of sending k copies: ep / k times the bytes
    def ep(*sets):
        b = one("megascale-moe-352b", *sets)
        xs = [x for x in b.exchanges if x.dim.value == "ep" and float(x.calls) > 0 and x.what.startswith("tokens")]
        return xs, b
    a2a, _ = ep()
    ag, b = ep("layout.ep_kind=all-gather")
    assert [x.collective.value for x in ag] == ["all-gather", "reduce-scatter"]
    e, k = b.plan.scenario.layout.ep, b.plan.scenario.model.moe.top_k
    for x, y in zip(a2a, ag):
        assert float(y.bytes_per_gpu) == pytest.approx(float(x.bytes_per_gpu) * e / k)
    permute = lambda bud: next(o for o in bud.plan.operators if o.name == "experts activation + permute")  # noqa: E731
    assert float(permute(b).bytes) > float(permute(one("megascale-moe-352b")).bytes)


def test_deepep_sends_one_nic_copy_per_node_and_forwards_the_rest_on_nvlink():
    # DeepEP / DeepSeek-V3 3.2.2: same bytes per GPU, fewer on the NIC, the difference on NVLink
    sets = ("layout.tp=1", "layout.ep=16", "layout.pp=15", "layout.dp=16")
    def ep(*more):
        b = one("megascale-moe-352b", *sets, *more)
        return [x for x in b.exchanges if x.dim.value == "ep" and float(x.calls) > 0 and x.what.startswith("tokens")], b
    plain, _ = ep()
    fwd, b = ep("layout.ep_kind=deepep")
    m = b.plan.scenario.model.moe
    for x, y in zip(plain, fwd):
        assert float(y.bytes_per_gpu) == pytest.approx(float(x.bytes_per_gpu))
        assert float(y.nic_bytes + y.nvlink_bytes) == pytest.approx(float(x.nic_bytes + x.nvlink_bytes))
        assert float(y.nic_bytes) < float(x.nic_bytes) and float(y.time_s) < float(x.time_s)
        # the plain all-to-all's NIC copies are k (N-1)/N per token; DeepEP's are the remote nodes reached
        N = float(x.group / b.plan.q["ep"])  # nodes the EP group spans
        ratio = float(remote_nodes_per_token(m.num_experts, m.top_k, N)) / (m.top_k * (N - 1) / N)
        assert float(y.nic_bytes) == pytest.approx(float(x.nic_bytes) * ratio)


def test_every_dp_ring_the_readme_names_is_accepted():
    # layout.dp_ring: in-network reduction (NVLS + SHARP) sends S/q per NIC, the ring 2(N-1)/N of that: never slower
    t = {ring: rows(one("hpn-gpt3-175b", f"layout.dp_ring={ring}"), Axis.DP)[0] for ring in
         ("hierarchical", "flat", "tree", "in-network")}
    assert float(t["in-network"].nic_bytes) == pytest.approx(float(t["hierarchical"].nic_bytes) / 2, rel=0.01)
    assert float(t["in-network"].time_s) <= float(t["hierarchical"].time_s)


# a 7B model on 64 GPUs in plain FSDP (TP 1): the DP group spans 8 nodes
HSDP_7B = ["cluster.achieved_flops=null", *KERNEL, "cluster.gpus=64", "layout.tp=1", "layout.pp=1", "layout.dp=64",
           "layout.schedule=1f1b", "layout.virtual_stages=1", "layout.dp_kind=fsdp", "layout.reshard_after_forward=true",
           "model.num_layers=32", "model.hidden_size=4096", "model.num_heads=32", "model.num_kv_heads=8",
           "model.ffn_size=14336", "model.seq_len=4096", "batch.global_batch_tokens=null", "batch.global_batch_seqs=256",
           "layout.micro_batch=2"]


def test_hsdp_shards_inside_each_node_and_all_reduces_the_shards_across_nodes():
    flat, hsdp = one("llama3-405b", *HSDP_7B), one("llama3-405b", *HSDP_7B, "layout.dp_replicas=8")
    psi, w = float(flat.plan.params_dense_per_gpu), flat.plan.scenario.precision
    m = 256 / (64 * 2)
    rs, ag = rows(hsdp, Axis.DP, "grads")[0], rows(hsdp, Axis.DP, "params")[0]
    ar = next(x for x in rows(hsdp, Axis.DP) if x.what == "grads across replicas")
    # the shard group is one node: its reduce-scatters and gathers stay on NVLink, (S-1)/S of the buffer each
    assert int(rs.group) == int(ag.group) == 8 and float(rs.nic_bytes) == float(ag.nic_bytes) == 0
    assert float(rs.bytes_per_gpu) == pytest.approx(m * 7 / 8 * psi * w.grads)
    assert float(ag.bytes_per_gpu) == pytest.approx(2 * m * 7 / 8 * psi * w.params)  # forward and backward
    # once per step, each rank's 1/8 shard is all-reduced across the 8 nodes, all of it on the NIC
    assert int(ar.group) == 8 and float(ar.calls) == float(ar.units)
    assert float(ar.bytes_per_gpu) == pytest.approx(2 * 7 / 8 * psi / 8 * w.grads) == float(ar.nic_bytes)
    # plain FSDP over 64 ranks sends more over the NIC than HSDP does
    assert sum(float(x.nic_bytes) for x in rows(flat, Axis.DP)) > sum(float(x.nic_bytes) for x in rows(hsdp, Axis.DP))
    # the model state is sharded 8 ways, not 64: eight times the optimizer state per GPU
    mf, mh = sb.memory_per_gpu(flat.plan), sb.memory_per_gpu(hsdp.plan)
    assert float(mh.optimizer) == pytest.approx(8 * float(mf.optimizer))


def test_two_replicas_of_two_ranks_each_are_the_smallest_hsdp():
    # 4 DP ranks in 2 groups: each group of 2 shards, and a 2-rank all-reduce sums each shard across the groups
    b = one("llama3-405b", *HSDP_7B, "cluster.gpus=4", "layout.dp=4", "batch.global_batch_seqs=8", "layout.dp_replicas=2")
    groups = {x.what: int(x.group) for x in rows(b, Axis.DP)}
    assert groups == {"grads": 2, "params": 2, "grads across replicas": 2}


@pytest.mark.parametrize(("sets", "fragment"), [
    (["layout.dp_replicas=3"], "no larger than half"),
    (["layout.dp_replicas=64"], "no larger than half"),
    (["layout.dp_replicas=8", "layout.dp_kind=ddp"], "ddp shards nothing"),
    (["layout.dp_replicas=0"], "layout.dp_replicas"),
])
def test_replicas_need_shard_groups_of_two_or_more(sets, fragment):
    with pytest.raises(sb.ScenarioError, match=fragment):
        sb.load("llama3-405b", [*HSDP_7B, *sets])


@pytest.mark.parametrize("nic", ["400Gb/s", "25Gb/s"])
def test_the_simulator_times_hsdp_as_the_budget_does(nic):
    # 16 micro-batches; on the slow NIC the replicas' all-reduce, once per step after the last backward, is
    # mostly exposed: the simulator must not spread it over every micro-batch
    sc = sb.load("llama3-405b", [*HSDP_7B, "layout.dp_replicas=8", "batch.global_batch_seqs=2048", f"cluster.nic_Bps={nic}"])
    b = sb.estimate(sb.derive(sc))
    ar = next(x for x in rows(b, Axis.DP) if x.what == "grads across replicas")
    if nic == "25Gb/s":
        assert float(ar.time_s) > 1.0
    assert float(sb.simulate(sc).step_s) == pytest.approx(float(b.step_s), rel=0.02)



def test_per_op_checkpointing_gathers_the_sequence_parallel_inputs_again():
    # wk and w3 need their all-gathered inputs again; torchtitan saves the reduce-scatter outputs
    base = ["cluster.achieved_flops=null", *KERNEL]
    none, op = (one("llama3-405b", *base, f"layout.recompute={r}") for r in ("none", "selective-op"))
    calls = lambda b, coll: float(next(x.calls for x in rows(b, Axis.TP) if x.collective.value == coll))  # noqa: E731
    assert calls(op, "all-gather") == 1.5 * calls(none, "all-gather")
    assert calls(op, "reduce-scatter") == calls(none, "reduce-scatter")


# --- the MoE layer as it runs: the busiest expert, capacity, and the bubble's own pass times ---------------------

def test_experts_padded_to_capacity_exchange_the_capacity_and_gather_no_counts():
    # Megatron-Core's drop-and-pad path sizes every buffer from the capacity, so no count is gathered or waited for
    # (token_dispatcher.py core_v0.13.0: drop_and_pad returns before the gather); each expert exchanges cf x the mean
    dropless = one("megascale-moe-352b", "model.moe.expert_load=1")
    padded = one("megascale-moe-352b", "model.moe.capacity_factor=1.25", "model.moe.pad_to_capacity=true")
    assert [x.what for x in rows(dropless, Axis.EP)] == ["token counts", "tokens (dispatch)", "tokens (combine)"]
    assert [x.what for x in rows(padded, Axis.EP)] == ["tokens (dispatch)", "tokens (combine)"]
    for x, y in zip(rows(dropless, Axis.EP)[1:], rows(padded, Axis.EP)):
        assert float(y.bytes_per_gpu) == pytest.approx(1.25 * float(x.bytes_per_gpu))
        assert float(y.bandwidth_s) == pytest.approx(1.25 * float(x.bandwidth_s))


def test_experts_capped_below_the_mean_exchange_and_compute_what_they_keep():
    full = one("megascale-moe-352b", "model.moe.expert_load=1")
    capped = one("megascale-moe-352b", "model.moe.capacity_factor=0.8")  # every expert drops down to 0.8x the mean
    for x, y in zip(rows(full, Axis.EP)[1:], rows(capped, Axis.EP)[1:]):
        assert float(y.bytes_per_gpu) == pytest.approx(0.8 * float(x.bytes_per_gpu))  # bytes and time agree
        assert float(y.bandwidth_s) == pytest.approx(0.8 * float(x.bandwidth_s))


def test_a_hotter_expert_is_never_faster():
    steps = [float(one("megascale-moe-352b", f"model.moe.expert_load={load}").step_s) for load in (1, 1.2, 1.52, 3)]
    assert steps == sorted(steps) and steps[0] < steps[-1]
    # a capacity caps the busiest expert: dropping the excess above 1.25 x the mean is as fast as a load of 1.25
    capped = one("megascale-moe-352b", "model.moe.expert_load=3", "model.moe.capacity_factor=1.25")
    assert float(capped.step_s) == pytest.approx(float(one("megascale-moe-352b", "model.moe.expert_load=1.25").step_s))


def test_the_dualpipe_bubble_uses_the_passes_own_backward_and_weight_gradient():
    # DeepSeek-V3 Table 2: (p/2 - 1)(F&B + B - 3W) with F&B = F + B; the operator model times F, B and W itself
    b = one("deepseek-v3")
    p = b.plan
    ratio, w = float(p.backward_ratio), float(p.w_frac)
    layer = [op for op in p.operators if not op.output_layer]
    fwd = sum(op.share * float(op.fwd_s) for op in layer)
    wgrad = sum(op.share * float(op.wgrad_s) for op in layer)
    assert 0 < wgrad < ratio * fwd and w == pytest.approx(wgrad / (ratio * fwd))
    assert w < 0.5  # the attention core and the memory-bound kernels have no weight gradient
    F, B, W = 1.0, ratio, ratio * w
    FB = (F + B) / (1 - p.comm_sm_share)  # a pair runs on the SMs its all-to-all leaves (DeepSeek-V3 3.2.1)
    fraction = (16 / 2 - 1) * (FB + B - 3 * W) / (float(p.microbatches) * (F + B))
    per_microbatch = float(b.compute_s - p.optimizer_s) + sum(float(e) for x, e in zip(b.exchanges, b.exposed_s)
                                                                if x.critical)
    assert float(b.bubble_s) == pytest.approx(fraction * per_microbatch)
    # a stated rate has no operators: the bubble takes the defaults B = 2F, W = B / 2
    stated = one("deepseek-v3", "cluster.achieved_fraction=0.4")
    assert (stated.plan.backward_ratio, stated.plan.w_frac) == (2.0, 0.5)
