"""Memory per stage of an uneven split: the busiest rank's states and activations."""

import pytest

from stepbudget.budget.memory import memory_per_gpu
from stepbudget.inputs.scenario import load
from stepbudget.plan.derive import derive

PP8 = ["layout.embedding_in_pipeline_split=false", "layout.loss_in_pipeline_split=false", "layout.pp=8",
       "layout.dp=256", "layout.virtual_stages=1", "layout.schedule=1f1b"]  # 126 layers over 8 ranks


def _mem(*counts: int):
    sets = [*PP8, "layout.stage_layers=[" + ",".join(map(str, counts)) + "]"] if counts else PP8[:-3] + [
        "layout.pp=2", "layout.dp=1024", "layout.virtual_stages=1", "layout.schedule=1f1b"]
    return memory_per_gpu(derive(load("llama3-405b", sets)))


def test_a_heavier_second_rank_is_the_peak_with_its_own_layers_and_in_flight():
    first, second = 14, 18  # 1F1B: rank 0 holds p = 8 micro-batches of 14 layers, rank 1 7 of 18
    mem = _mem(first, second, 18, 18, 16, 14, 14, 14)
    assert float(mem.plan.microbatches) >= 8
    assert int(mem.rank) == 1 and float(mem.layers) == second and float(mem.inflight) == 7
    # activations per layer and micro-batch from rank 1's own figures: the same for every rank
    per_layer = float(mem.activations) / (second * 7)
    assert per_layer * first * 8 < float(mem.activations)  # rank 0: 112 layer passes, rank 1: 126
    assert float(mem.total) == pytest.approx(sum(float(getattr(mem, c)) for c in
                                                 ("params", "grads", "optimizer", "gathered", "activations",
                                                  "extras")), rel=1e-12)


def test_a_list_that_repeats_the_even_split_keeps_the_even_figures():
    even = _mem()
    listed = memory_per_gpu(derive(load("llama3-405b", [*PP8[:-3], "layout.pp=2", "layout.dp=1024",
                                                        "layout.virtual_stages=1", "layout.schedule=1f1b",
                                                        "layout.stage_layers=[63,63]"])))
    assert int(listed.rank) == 0
    for c in ("params", "grads", "optimizer", "gathered", "activations", "extras", "total"):
        assert float(getattr(listed, c)) == pytest.approx(float(getattr(even, c)), rel=1e-12, abs=1e-6), c


def test_the_last_rank_holds_the_head_and_one_micro_batch_of_logits():
    mem = _mem(1, 1, 1, 1, 1, 1, 1, 119)  # everything on the last rank: it is the peak
    sc = mem.plan.scenario
    assert int(mem.rank) == 7 and float(mem.inflight) == 1
    V, h = sc.model.vocab_size, sc.model.hidden_size
    s, t = sc.model.seq_len, sc.layout.tp
    logits = 4 * s * h / t + 4 * s * V / t  # LN and projection inputs with SP, FP32 logits (Korthikanti22 4.3)
    assert float(mem.extras) == pytest.approx(logits, rel=1e-12)
