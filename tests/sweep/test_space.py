"""The layout space (sweep/space.py): every row a valid, distinct layout; chunks cover the flat index."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stepbudget as sb
from stepbudget.enums import CP_KIND_CODES, DP_KIND_CODES, SCHEDULE_CODES
from stepbudget.enums import DataParallel, Schedule
from stepbudget.sweep.search import scenario_for
from stepbudget.sweep.space import COLUMNS, layout_space
from stepbudget.sweep.store import CODE_NAMES

CASES = [("hpn-gpt3-175b", 64), ("megascale-moe-352b", 64)]


def collect(space, chunk):
    """All valid rows of the space, with the covered and schedule-invalid totals."""
    parts, covered, invalid = [], 0, 0
    for n, cols, bad in space.chunks(chunk):
        assert set(cols) == set(COLUMNS)
        assert len({len(v) for v in cols.values()}) == 1
        parts.append(np.stack([cols[k] for k in COLUMNS], axis=1))
        covered += n
        invalid += bad
    return np.concatenate(parts), covered, invalid


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def space_rows(request):
    name, gpus = request.param
    sc = sb.load(name)
    space = layout_space(sc, gpus)
    rows, covered, invalid = collect(space, 1 << 17)
    return sc, space, rows, covered, invalid


def as_dict(row):
    d = dict(zip(COLUMNS, (int(x) for x in row)))
    for k in CODE_NAMES:
        d[k] = CODE_NAMES[k][d[k]]
    d["reshard_after_forward"] = bool(d["reshard_after_forward"])
    d["sequence_parallel"] = bool(d["sequence_parallel"])
    return d


def test_chunks_cover_the_flat_index(space_rows):
    sc, space, rows, covered, invalid = space_rows
    assert covered == space.size == len(space.structures) * len(space.choices)
    assert 0 < len(rows) and len(rows) + invalid <= space.size


def test_no_duplicate_layouts(space_rows):
    rows = space_rows[2]
    assert len(np.unique(rows, axis=0)) == len(rows)


def test_no_layouts_that_differ_only_in_a_switch_that_does_nothing(space_rows):
    sc, space, rows, _, _ = space_rows
    c = {k: rows[:, i] for i, k in enumerate(COLUMNS)}
    assert np.all((c["tp"] > 1) | (c["sequence_parallel"] == 0))
    assert np.all((c["cp"] > 1) | (c["cp_kind"] == CP_KIND_CODES["all-gather"]))
    assert np.all((c["dp"] * c["cp"] > 1) | (c["dp_kind"] == DP_KIND_CODES[DataParallel.DDP]))
    assert np.all((c["dp_kind"] == DP_KIND_CODES[DataParallel.FSDP]) | (c["reshard_after_forward"] == 1))
    assert np.all((c["schedule"] == SCHEDULE_CODES[Schedule.INTERLEAVED_1F1B]) | (c["virtual_stages"] == 1))
    assert np.all((c["pp"] > 1) | (c["schedule"] == SCHEDULE_CODES[Schedule.ONE_F_ONE_B]))
    assert not np.any(c["dp_kind"] == DP_KIND_CODES[DataParallel.ZERO3])  # listed as FSDP with reshard


def test_rows_are_whole_layouts(space_rows):
    sc, space, rows, _, _ = space_rows
    c = {k: rows[:, i] for i, k in enumerate(COLUMNS)}
    m = sc.model
    assert np.all(c["tp"] * c["cp"] * c["pp"] * c["dp"] == space.gpus)
    assert np.all(m.num_heads % c["tp"] == 0) and np.all(m.kv_heads % c["tp"] == 0)
    assert np.all(m.num_layers % (c["pp"] * c["virtual_stages"]) == 0)
    assert np.all(sc.global_batch_seqs % (c["dp"] * c["micro_batch"]) == 0)
    experts = m.moe.num_experts if m.moe else 1
    assert np.all(experts % c["ep"] == 0)
    assert np.all((c["tp"] * c["cp"] * c["dp"]) % (c["ep"] * c["expert_tp"]) == 0)
    if m.moe is not None:
        assert np.any(c["ep"] > 1)


def test_a_smaller_chunk_yields_the_same_rows(space_rows):
    sc, space, rows, covered, invalid = space_rows
    small, covered2, invalid2 = collect(space, 4099)
    assert (covered2, invalid2) == (covered, invalid)
    assert np.array_equal(small, rows)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_row_is_a_scenario_the_validator_accepts(space_rows, data):
    sc, space, rows, _, _ = space_rows
    i = data.draw(st.integers(0, len(rows) - 1))
    row = as_dict(rows[i])
    built = scenario_for(sc, row, space.gpus)  # raises ScenarioError if the space let an invalid layout in
    assert built.layout.tp * built.layout.cp * built.layout.pp * built.layout.dp == space.gpus


def test_hand_picked_layouts_are_in_the_space():
    sc = sb.load("hpn-gpt3-175b")
    space = layout_space(sc, 64)
    rows, _, _ = collect(space, 1 << 17)
    present = {tuple(r) for r in rows.tolist()}
    code = lambda k, v: CODE_NAMES[k].index(v)  # noqa: E731
    wanted = [
        # tp cp pp dp ep etp schedule v | mb dp_kind reshard recompute sp cp_kind
        (8, 1, 8, 1, 1, 8, code("schedule", "1f1b"), 1, 1, code("dp_kind", "ddp"), 1, code("recompute", "none"), 1,
         code("cp_kind", "all-gather")),
        (4, 2, 4, 2, 1, 4, code("schedule", "interleaved-1f1b"), 3, 2, code("dp_kind", "fsdp"), 0,
         code("recompute", "selective"), 0, code("cp_kind", "ring")),
        (2, 1, 16, 2, 1, 2, code("schedule", "dualpipe"), 1, 4, code("dp_kind", "zero2"), 1, code("recompute", "full"),
         1, code("cp_kind", "all-gather")),
    ]
    for w in wanted:
        assert w in present, w
    # micro-batches are powers of two (space.py)
    assert {r[8] for r in present} <= {1, 2, 4, 8, 16, 32}


def test_empty_space_names_the_batch():
    sc = sb.load("hpn-gpt3-175b")
    space = layout_space(sc, 7)
    assert space.size == 0 and space.empty_reason is not None
    assert space.empty_reason.startswith("batch") and "7" in space.empty_reason


@given(n=st.integers(1, 20000))
def test_divisors_are_every_divisor_in_order(n):
    from stepbudget.sweep.space import _divisors
    assert _divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
