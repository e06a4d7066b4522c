"""Layout search (sweep/search.py, store.py, `stepbudget search`): invariants, bad input, Parquet output."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

import stepbudget as sb
from stepbudget.budget.memory import memory_per_gpu
from stepbudget.cli import app
from stepbudget.enums import Axis
from stepbudget.inputs.layout import Layout
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.sweep.calibrate import kernel_scenario
from stepbudget.sweep.search import KNOBS, METRICS, SearchError, scenario_for, search
from stepbudget.sweep.space import COLUMNS, layout_space
from stepbudget.sweep.store import CODE_NAMES
from tests._util import moe_job

runner = CliRunner()
REL = 1e-9


def rank(row):
    return row["step_s"] + 1e-18 * row["memory_bytes"]


@pytest.fixture(scope="module")
def hpn64():
    return search(sb.load("hpn-gpt3-175b"), gpus=64, top=10)


@pytest.fixture(scope="module")
def llama():
    """llama3-405b at its own 16,384 GPUs: a step-scope rate, so the search calibrates a kernel rate."""
    return search(sb.load("llama3-405b"), top=5)


@pytest.fixture(scope="module", params=["hpn64", "llama"])
def result(request):
    return request.getfixturevalue(request.param)


# --- the top layouts through the scalar path -------------------------------------------------------------


def test_top_layouts_use_every_gpu_fit_and_match_the_scalar_path(result):
    capacity = float(result.scenario.cluster.gpu.hbm_bytes)
    assert result.top
    for row in result.top:
        assert row["tp"] * row["cp"] * row["pp"] * row["dp"] == result.gpus
        sc = scenario_for(result.scenario, row, result.gpus)  # validates the layout as a user's scenario
        plan = sb.derive(sc)
        mem = memory_per_gpu(plan)
        assert bool(mem.fits) and float(mem.total) <= capacity
        assert float(mem.total) == pytest.approx(row["memory_bytes"], rel=REL)
        assert float(mem.model_state) == pytest.approx(row["model_state_bytes"], rel=REL)
        b = sb.estimate(plan)
        assert float(b.step_s) == pytest.approx(row["step_s"], rel=REL)
        assert float(b.mfu) == pytest.approx(row["mfu"], rel=REL)


def test_top_is_sorted_distinct_and_as_long_as_asked(result):
    ranks = [rank(r) for r in result.top]
    assert ranks == sorted(ranks)
    asked = {"hpn-gpt3-175b": 10, "llama3-405b": 5}[result.scenario.name]
    assert len(result.top) == min(asked, result.feasible)
    layouts = {tuple(r[k] for k in COLUMNS) for r in result.top}
    assert len(layouts) == len(result.top)
    for row in result.top:
        assert set(COLUMNS) | set(METRICS) <= set(row)


def test_counts_add_up(result):
    assert 0 < result.feasible <= result.evaluated <= result.candidates
    assert result.evaluated + result.schedule_invalid <= result.candidates
    assert result.feasible + sum(result.dropped.values()) == result.evaluated
    assert all(v >= 0 for v in result.dropped.values())


def test_counts_match_the_space(hpn64):
    space = layout_space(hpn64.scenario, 64)
    valid = invalid = 0
    for _, cols, bad in space.chunks():
        valid += len(cols["tp"])
        invalid += bad
    assert (hpn64.candidates, hpn64.evaluated, hpn64.schedule_invalid) == (space.size, valid, invalid)


def test_best_by_knob_is_consistent_with_the_winner(result):
    best = result.top[0]
    for knob in KNOBS:
        rows = result.best_by[knob]
        assert rows, knob
        assert rank(rows[best[knob]]) == pytest.approx(rank(best), rel=1e-12)  # the winner is the best of its value
        for value, row in rows.items():
            assert row[knob] == value
            assert rank(row) >= rank(best) * (1 - 1e-12)


# --- the best is never slower than layouts evaluated by hand -------------------------------------------


def scalar(base, gpus, **layout):
    """(step_s, fits) of one layout through scenario_for -> derive -> estimate / memory_per_gpu."""
    row = {k: getattr(base.layout, k) for k in COLUMNS if k != "expert_tp"} | layout
    row["expert_tp"] = layout.get("expert_tp", Layout(**{k: row[k] for k in ("tp", "ep")}).expert_tp_degree)
    plan = sb.derive(scenario_for(base, row, gpus))
    return float(sb.estimate(plan).step_s), bool(memory_per_gpu(plan).fits)


def test_calibration_reproduces_the_measured_step():
    sc = sb.load("llama3-405b")
    base, rate = kernel_scenario(sc)
    assert rate is not None and rate > 400e12  # the kernels ran faster than the whole-step average
    assert float(sb.estimate(sb.derive(base)).step_s) == pytest.approx(float(sb.estimate(sb.derive(sc)).step_s), rel=1e-6)
    same, none = kernel_scenario(sb.load("hpn-gpt3-175b"))
    assert none is None and same.cluster.rate_scope == "kernel"


def test_best_beats_hand_layouts_at_the_calibrated_rate(llama):
    base, rate = kernel_scenario(sb.load("llama3-405b"))
    assert llama.calibrated_rate == pytest.approx(rate, rel=1e-12)
    assert float(sb.derive(llama.scenario).flops_rate) == pytest.approx(rate, rel=1e-12)
    hand = [
        {},  # the preset's own layout: TP8 PP16 DP128, interleaved v4, FSDP without reshard
        {"dp_kind": "zero1", "reshard_after_forward": True},
        {"pp": 8, "dp": 256},
        {"pp": 8, "dp": 256, "schedule": "1f1b", "virtual_stages": 1, "dp_kind": "zero2"},
        {"tp": 4, "pp": 16, "dp": 256, "schedule": "1f1b", "virtual_stages": 1, "recompute": "selective"},
        {"cp": 2, "pp": 8, "dp": 128},
    ]
    fitting = []
    for layout in hand:
        step, fits = scalar(base, llama.gpus, **layout)
        if fits:
            fitting.append(step)
    own_step, own_fits = scalar(base, llama.gpus)
    assert own_fits and len(fitting) >= 3
    assert llama.top[0]["step_s"] <= min(fitting) * (1 + REL)


def test_best_beats_random_rows_of_the_space(hpn64):
    """Thirty rows drawn from the space, each through the scalar path: none that fits is faster."""
    space = layout_space(hpn64.scenario, 64)
    rows = np.concatenate([np.stack([c[k] for k in COLUMNS], axis=1) for _, c, _ in space.chunks()])
    # draw among the rows the array path says fit; each is then re-checked on its own
    fit = memory_per_gpu(sb.derive(hpn64.scenario, {k: rows[:, i] for i, k in enumerate(COLUMNS)})).fits
    assert fit.sum() == hpn64.feasible
    picks = np.random.default_rng(7).choice(np.flatnonzero(fit), size=30, replace=False)
    for i in picks:
        row = dict(zip(COLUMNS, (int(x) for x in rows[i])))
        for k in CODE_NAMES:
            row[k] = CODE_NAMES[k][row[k]]
        plan = sb.derive(scenario_for(hpn64.scenario, row, 64))
        assert memory_per_gpu(plan).fits
        assert hpn64.top[0]["step_s"] <= float(sb.estimate(plan).step_s) * (1 + REL)


# --- an MoE job at 4K: EP 8 is on NVLink without CP ------------------------------------------------------


@pytest.mark.parametrize("model", ["mixtral-8x7b", "qwen3-30b-a3b"])
def test_a_moe_search_at_4k_does_not_take_cp_to_move_ep_into_the_node(model):
    # with EP 8 costed on the NIC the search took TP2 CP4 to bring EP inside TP x CP; EP 8 drawn from the DP ranks
    # is one node already (PP outermost in Megatron-Core's order, an EP job's default), so the winner keeps CP at 1
    # and the best layout of each CP exposes the same EP
    r = search(moe_job(model, balanced=True), top=1)  # balanced: a hot expert would favour EP 1, another question
    best = r.top[0]
    assert (best["tp"], best["cp"], best["ep"]) == (1, 1, 8) and best["pp"] * best["dp"] == 64
    b = sb.estimate(sb.derive(scenario_for(r.scenario, best, r.gpus)))
    assert [float(x.nic_bytes) for x in b.exchanges if x.dim == Axis.EP] == [0.0, 0.0, 0.0]  # counts, the tokens
    assert sorted(r.best_by["cp"]) == [1, 2, 4]
    for row in r.best_by["cp"].values():
        assert row["exposed_ep_s"] == pytest.approx(best["exposed_ep_s"], rel=1e-12)
        assert row["step_s"] >= best["step_s"]


# --- more bandwidth, smaller chunks ------------------------------------------------------------------


@pytest.fixture(scope="module")
def megascale_best():
    return search(sb.load("megascale-175b"), top=1).top[0]["step_s"]


@pytest.mark.parametrize("faster", ["cluster.nic_Bps=400Gb/s", "cluster.nvlink_Bps=600GB/s"])
def test_more_bandwidth_never_slows_the_best(megascale_best, faster):
    """megascale-175b has a kernel-scope rate, so no calibration moves with the bandwidth."""
    best = search(sb.load("megascale-175b", [faster]), top=1).top[0]["step_s"]
    assert best <= megascale_best * (1 + 1e-12)


@pytest.mark.parametrize("field", ["nic_Bps", "nvlink_Bps"])
def test_more_bandwidth_never_slows_any_layout(hpn64, field):
    base = hpn64.scenario
    faster = base.model_copy(update={"cluster": base.cluster.model_copy(update={field: 2 * getattr(base.cluster, field)})})
    space = layout_space(base, 64)
    for _, cols, _ in space.chunks():
        slow = np.asarray(sb.estimate(sb.derive(base, cols)).step_s)
        fast = np.asarray(sb.estimate(sb.derive(faster, cols)).step_s)
        assert np.all(fast <= slow * (1 + 1e-12))


def test_a_smaller_chunk_gives_the_same_result(hpn64):
    small = search(sb.load("hpn-gpt3-175b"), gpus=64, top=10, chunk=5003)
    for k in ("candidates", "evaluated", "schedule_invalid", "feasible", "dropped"):
        assert getattr(small, k) == getattr(hpn64, k), k
    assert [rank(r) for r in small.top] == pytest.approx([rank(r) for r in hpn64.top], rel=1e-12)
    assert {k: small.top[0][k] for k in COLUMNS} == {k: hpn64.top[0][k] for k in COLUMNS}
    for knob in KNOBS:
        assert set(small.best_by[knob]) == set(hpn64.best_by[knob])


def test_progress_reaches_the_candidate_count():
    calls = []
    r = search(sb.load("hpn-gpt3-175b"), gpus=64, top=1, chunk=20000, progress=lambda d, t: calls.append((d, t)))
    done = [d for d, _ in calls]
    assert done == sorted(done) and len(calls) == -(-r.candidates // 20000)
    assert calls[-1] == (r.candidates, r.candidates)


# --- bad input: one line, exit code 2 ------------------------------------------------------------------


def fails(*args):
    r = runner.invoke(app, list(args))
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "Traceback" not in r.output and "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("stepbudget: error: "), lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "args, words",
    [
        # 96 heads, 8192 sequences: on 7 GPUs every split has DP 7, which does not divide the batch
        (("hpn-gpt3-175b", "--gpus", "7"), ["batch", "7 GPUs", "8192"]),
        (("hpn-gpt3-175b", "--set", "layout.dp=1", "--set", "cluster.gpus=64", "--set", "batch.global_batch_seqs=3",
          "--gpus", "4096"), ["batch", "3 sequences", "4096"]),
        (("llama3-405b", "--set", "batch.global_batch_tokens=null", "--set", "batch.global_batch_seqs=3",
          "--set", "layout.dp=1", "--set", "cluster.gpus=128", "--gpus", "16384"), ["batch", "3 sequences", "16384"]),
        (("hpn-gpt3-175b", "--gpus", "64", "--set", "cluster.gpu.hbm_bytes=1GB"), ["cluster.gpu", "1 GB", "HBM"]),
        (("hpn-gpt3-175b", "--gpus", "64", "--out", "layouts.csv"), ["--out", ".parquet"]),
        (("hpn-gpt3-175b", "--gpus", "64", "--out", "/no/such/folder/x.parquet"), ["--out", "folder"]),
        (("hpn-gpt3-175b", "--gpus", "64", "--top", "0"), ["--top", "0"]),
        (("hpn-gpt3-175b", "--gpus", "0"), ["--gpus", "0"]),
    ],
)
def test_bad_search_input(args, words):
    line = fails("search", *args)
    for w in words:
        assert w in line, (w, line)


def test_search_api_raises_search_error():
    with pytest.raises(SearchError, match="HBM"):
        search(sb.load("hpn-gpt3-175b", ["cluster.gpu.hbm_bytes=1GB"]), gpus=64)
    with pytest.raises(ScenarioError, match="batch"):
        search(sb.load("hpn-gpt3-175b"), gpus=7)


def test_gpu_count_that_does_not_fill_nodes_is_refused():
    line = fails("search", "hpn-gpt3-175b", "--set", "cluster.gpu.hbm_bytes=1TB", "--gpus", "12", "--json")
    assert "12" in line


def test_interrupted_cli_search_exits_130(monkeypatch):
    import stepbudget.sweep.search as mod

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(mod, "search", interrupted)
    r = runner.invoke(app, ["search", "hpn-gpt3-175b", "--gpus", "64"])
    assert r.exit_code == 130
    assert "interrupted" in r.stderr


# --- Parquet ----------------------------------------------------------------------------------------


def partials(folder):
    return [p for p in os.listdir(folder) if "partial" in p]


def test_out_writes_every_evaluated_layout(tmp_path):
    import pyarrow.parquet as pq

    f = tmp_path / "layouts.parquet"
    r = runner.invoke(app, ["search", "hpn-gpt3-175b", "--gpus", "64", "--top", "2", "--json", "--out", str(f)])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    table = pq.read_table(f)
    assert table.num_rows == d["evaluated"]
    assert set(table.column_names) == set(COLUMNS) | set(METRICS) | {"fits"}
    cols = table.to_pydict()
    assert sum(cols["fits"]) == d["feasible"]
    for k in CODE_NAMES:
        assert set(cols[k]) <= set(CODE_NAMES[k]), k
    steps = np.array(cols["step_s"])[np.array(cols["fits"])]
    assert steps.min() == pytest.approx(d["top"][0]["budget"]["step_s"], rel=REL)
    mem = np.array(cols["memory_bytes"])
    assert np.array_equal(np.array(cols["fits"]), mem <= 80e9)
    gpus = np.array(cols["tp"]) * np.array(cols["cp"]) * np.array(cols["pp"]) * np.array(cols["dp"])
    assert np.all(gpus == 64)
    assert partials(tmp_path) == []


def test_out_table_mode_says_how_many_rows(tmp_path):
    f = tmp_path / "t.parquet"
    r = runner.invoke(app, ["search", "hpn-gpt3-175b", "--gpus", "64", "--top", "1", "--out", str(f)])
    assert r.exit_code == 0, r.output
    d = search(sb.load("hpn-gpt3-175b"), gpus=64, top=1)
    assert f"wrote {d.evaluated:,} layouts" in r.stdout
    assert f.exists() and partials(tmp_path) == []


OLD = b"a result the user saved before"


def interrupt_on(n):
    calls = []

    def cb(done, total):
        calls.append(done)
        if len(calls) == n:
            raise KeyboardInterrupt

    return cb


def test_interrupt_keeps_the_old_file(tmp_path):
    f = tmp_path / "r.parquet"
    f.write_bytes(OLD)
    with pytest.raises(KeyboardInterrupt):
        search(sb.load("hpn-gpt3-175b"), gpus=64, out=str(f), chunk=20000, progress=interrupt_on(2))
    assert f.read_bytes() == OLD
    assert partials(tmp_path) == [] and sorted(os.listdir(tmp_path)) == ["r.parquet"]


def test_interrupt_creates_no_file(tmp_path):
    f = tmp_path / "new.parquet"
    with pytest.raises(KeyboardInterrupt):
        search(sb.load("hpn-gpt3-175b"), gpus=64, out=str(f), chunk=20000, progress=interrupt_on(3))
    assert os.listdir(tmp_path) == []


def test_search_that_fails_before_evaluating_keeps_the_old_file(tmp_path):
    f = tmp_path / "r.parquet"
    f.write_bytes(OLD)
    with pytest.raises(SearchError):
        search(sb.load("hpn-gpt3-175b"), gpus=7, out=str(f))
    assert f.read_bytes() == OLD and partials(tmp_path) == []


def test_search_where_nothing_fits_keeps_the_old_file(tmp_path):
    f = tmp_path / "r.parquet"
    f.write_bytes(OLD)
    with pytest.raises(SearchError):
        search(sb.load("hpn-gpt3-175b", ["cluster.gpu.hbm_bytes=1GB"]), gpus=64, out=str(f))
    assert f.read_bytes() == OLD and partials(tmp_path) == []


def test_a_search_keeps_the_scenarios_replicas_in_layouts_that_split_into_shard_groups():
    res = search(sb.load("hpn-gpt3-175b", ["layout.dp_kind=zero1", "layout.dp_replicas=2"]), gpus=256, top=10)
    assert res.top
    for row in res.top:
        assert (row["dp"] * row["cp"]) % 2 == 0 and row["dp"] * row["cp"] > 2 and row["dp_kind"] != "ddp"
        sc = scenario_for(res.scenario, row, res.gpus)
        assert sc.layout.dp_replicas == 2
        assert float(sb.estimate(sb.derive(sc)).step_s) == pytest.approx(row["step_s"], rel=REL)


def test_a_search_no_layout_splits_into_replicas_says_so():
    with pytest.raises(SearchError, match="layout.dp_replicas: no layout on 8 GPUs"):
        search(sb.load("megascale-175b", ["layout.dp_replicas=8"]), gpus=8)
