"""Sizes are bounded before work: search and scale refuse a GPU count, a space or a curve past its named limit in
one line naming the option, and sizes within the limits still run."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _util import one_line

import stepbudget as sb
from stepbudget.inputs._types import MAX_COUNT
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.sweep import space
from stepbudget.sweep.scaling import MAX_RESEARCH_SIZES, MAX_SIZES, check_sizes, parse_gpus, scale
from stepbudget.sweep.search import search
from stepbudget.sweep.space import MAX_CANDIDATES, MAX_SEARCH_GPUS, layout_space


# 720,720 heads and layers and a 1 M-token sequence share most divisors with a highly composite GPU count
MANY_DIVISORS = ["model.num_heads=720720", "model.num_kv_heads=null", "model.head_dim=128", "model.hidden_size=1441440",
                 "model.num_layers=720720", "model.seq_len=1048576", f"batch.global_batch_seqs={512 * 1441440}"]


@pytest.fixture(scope="module")
def megascale():
    return sb.load("megascale-175b")


# --- search: the GPU count and the space -------------------------------------------------------------------


def test_a_gpu_count_past_int64_is_refused_at_once_on_the_command_line():
    line = one_line("search", "megascale-175b", "--gpus", "9223372036854775808")  # it listed divisors for hours
    assert line.startswith("stepbudget: error: --gpus: ") and f"{MAX_SEARCH_GPUS:,}" in line
    assert "9,223,372,036,854,775,808" in line and "fewer GPUs" in line


@pytest.mark.parametrize("gpus", [2**63, MAX_SEARCH_GPUS + 8, 10**30])
def test_the_library_refuses_a_count_past_the_limit(megascale, gpus):
    with pytest.raises(ScenarioError, match=rf"^gpus: a search enumerates at most {MAX_SEARCH_GPUS:,} GPUs"):
        search(megascale, gpus=gpus)
    with pytest.raises(ScenarioError, match=r"^gpus: "):
        layout_space(megascale, gpus)


@pytest.mark.parametrize("gpus", [0, -8, 2.5, True])
def test_the_library_refuses_what_is_not_a_gpu_count(megascale, gpus):
    with pytest.raises(ScenarioError, match=r"^gpus: .* is not a GPU count; give a positive integer"):
        search(megascale, gpus=gpus)


def test_a_cluster_past_the_limit_names_cluster_gpus():
    sc = sb.load("megascale-175b", [f"cluster.gpus={2**40}", f"layout.dp={2**40 // 64}", f"batch.global_batch_seqs={2**40}"])
    with pytest.raises(ScenarioError, match=r"^cluster\.gpus: a search enumerates at most 16,777,216 GPUs"):
        search(sc)


def test_the_largest_allowed_count_still_searches(megascale):
    result = search(megascale, gpus=MAX_SEARCH_GPUS, top=2)
    assert result.gpus == MAX_SEARCH_GPUS and result.top
    assert all(r["tp"] * r["cp"] * r["pp"] * r["dp"] == MAX_SEARCH_GPUS for r in result.top)
    assert 0 < result.top[0]["step_s"] < 1e3


def test_a_space_past_the_candidate_limit_is_refused_before_any_layout_is_evaluated():
    sc = sb.load("hpn-gpt3-175b", MANY_DIVISORS)
    with pytest.raises(ScenarioError, match=rf"^gpus: 8,648,640 GPUs split .* more than {MAX_CANDIDATES:,} candidate"):
        search(sc, gpus=8_648_640)
    with pytest.raises(ScenarioError, match=r"^cluster\.gpus: 512 GPUs split .* candidate layouts"):
        search(sb.load("hpn-gpt3-175b", [*MANY_DIVISORS, "cluster.gpus=512", "layout.dp=8"]))


def test_the_shipped_presets_fit_the_candidate_limit_at_their_own_size():
    for name in ("deepseek-v3", "megascale-moe-352b", "llama3-405b"):
        sc = sb.load(name)
        assert 0 < layout_space(sc).size <= MAX_CANDIDATES


@pytest.mark.parametrize("top, chunk, name", [(0, 1 << 17, "top"), (1, 0, "chunk"), (1, 1 << 30, "chunk")])
def test_search_refuses_a_top_or_chunk_that_cannot_work(megascale, top, chunk, name):
    with pytest.raises(ScenarioError, match=rf"^{name}: "):
        search(megascale, gpus=1024, top=top, chunk=chunk)


@given(n=st.integers(1, 5000), data=st.data())
@settings(max_examples=60, deadline=None)
def test_splits_are_every_triple_whose_product_divides_the_count(n, data):
    divisors = space._divisors(n)
    tps = sorted(data.draw(st.sets(st.sampled_from(divisors), min_size=1)))
    cps = sorted(data.draw(st.sets(st.sampled_from(divisors), min_size=1)))
    pps = sorted(data.draw(st.sets(st.sampled_from(divisors), min_size=1)))
    got = list(space._splits(n, tps, cps, np.array(pps)))
    assert got == [(t, c, p) for t in tps for c in cps for p in pps if n % (t * c * p) == 0]


# --- scale: each size and how many ---------------------------------------------------------------------------


@pytest.mark.parametrize("args", [("--gpus", "99999999999999999999999999", "--research"),
                                  ("--gpus", "99999999999999999999999999"), ("--gpus", "1e26", "--research")])
def test_scale_refuses_a_huge_size_at_once(args):
    line = one_line("scale", "llama3-405b", *args)  # it searched (or budgeted) for hours
    assert line.startswith("stepbudget: error: --gpus: ")
    assert "1e26" in line or ("26-digit number of GPUs" in line and f"{MAX_COUNT:,}" in line)


def test_parse_gpus_bounds_each_size_and_their_number():
    with pytest.raises(ScenarioError, match=r"^sizes: a 26-digit number of GPUs is past the largest size, "
                                            r"1,099,511,627,776"):
        parse_gpus("99999999999999999999999999")
    with pytest.raises(ScenarioError, match=rf"^sizes: {MAX_SIZES + 1} GPU counts, more than the {MAX_SIZES}"):
        parse_gpus(",".join(["1024"] * (MAX_SIZES + 1)))
    assert parse_gpus(",".join(["1024"] * MAX_SIZES)) == [1024] * MAX_SIZES
    assert parse_gpus(str(MAX_COUNT)) == [MAX_COUNT]


def test_scale_bounds_sizes_by_the_api_too(megascale):
    with pytest.raises(ScenarioError, match=r"^sizes: 10,000,000,000,000 GPUs is past the largest size"):
        scale(megascale, [10**13])
    with pytest.raises(ScenarioError, match=rf"^sizes: 33,554,432 GPUs is past the largest size, {MAX_SEARCH_GPUS:,} "
                                            r"\(a search's bound"):
        scale(megascale, [2**25], research=True)
    with pytest.raises(ScenarioError, match=rf"^sizes: {MAX_RESEARCH_SIZES + 1} GPU counts, more than the "
                                            rf"{MAX_RESEARCH_SIZES} one re-searched curve"):
        scale(megascale, [1024] * (MAX_RESEARCH_SIZES + 1), research=True)
    with pytest.raises(ScenarioError, match=r"^sizes: no GPU count"):
        scale(megascale, [])
    with pytest.raises(ScenarioError, match=r"^sizes: 1.5 is not a GPU count"):
        check_sizes([1.5])  # type: ignore[list-item]


def test_weak_scaling_refuses_a_batch_past_the_largest():
    sc = sb.load("megascale-175b", ["batch.global_batch_seqs=1099511627776", "layout.dp=1", "cluster.gpus=64",
                                    "layout.pp=8"])
    with pytest.raises(ScenarioError, match=r"^sizes: weak scaling to 1,099,511,627,776 GPUs needs .* sequences per "
                                            r"step, past the largest batch"):
        scale(sc, [2**40], weak=True)


def test_the_largest_allowed_size_scales_to_a_finite_point():
    (p,) = scale(sb.load("llama3-405b"), [MAX_COUNT], weak=True).points
    assert p.gpus == MAX_COUNT
    assert all(math.isfinite(x) for x in (p.step_s, p.compute_s, p.dp_s, p.mfu, p.comm_share, p.memory_bytes))
