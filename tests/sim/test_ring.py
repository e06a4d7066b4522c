"""The ring all-reduce the simulator costs, send by send (chapter Figure 5.3)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepbudget.sim.collectives import ring_schedule


def test_ring_has_2_n_minus_1_steps_and_every_chunk_reaches_every_gpu():
    n = 4
    r = ring_schedule(n, 1e9, 50e9)
    assert sorted(set(r.step.tolist())) == list(range(2 * (n - 1)))
    assert (r.phase == 0).sum() == (r.phase == 1).sum() == n * (n - 1)
    assert r.bytes_per_rank == pytest.approx(2 * (n - 1) / n * 1e9)
    for phase in (0, 1):  # each chunk is passed on by n - 1 ranks in each phase, one of them each step
        for c in range(n):
            senders = r.sender[(r.phase == phase) & (r.chunk == c)]
            assert len(senders) == n - 1 and len(set(senders.tolist())) == n - 1
    # all-gather: the rank that finished a chunk (the last reduce-scatter sender's receiver) sends it first
    last_rs = r.step == n - 2
    first_ag = r.step == n - 1
    finished = dict(zip(r.chunk[last_rs].tolist(), r.receiver[last_rs].tolist()))
    assert dict(zip(r.chunk[first_ag].tolist(), r.sender[first_ag].tolist())) == finished
    assert np.all(r.end_s > r.start_s) and np.all(np.diff(r.start_s[::n]) > 0)  # step after step


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 12), size=st.floats(1e3, 1e12), rate=st.floats(1e6, 1e13))
def test_ring_takes_2_n_minus_1_chunk_times_and_sends_2_n_minus_1_over_n(n, size, rate):
    r = ring_schedule(n, size, rate)
    assert len(r.step) == 2 * (n - 1) * n
    assert r.bytes_per_rank == pytest.approx(2 * (n - 1) / n * size)
    # without latency every send is a chunk of S/n at the link rate, one step after another
    assert r.end_s.max() == pytest.approx(2 * (n - 1) * size / n / rate, rel=1e-6)
