"""The Parquet sink (sweep/store.py) writes on a thread: its errors still name the path, and what it writes reads
back as the layouts the search evaluated."""

from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq
import pytest

import stepbudget as sb
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.sweep.search import search
from stepbudget.sweep.store import CODE_NAMES, ParquetSink


def test_a_write_that_fails_on_the_thread_names_the_path(tmp_path):
    missing = tmp_path / "gone" / "r.parquet"  # its folder does not exist: the writer cannot open it
    with pytest.raises(ScenarioError, match=r"^out: cannot write .*r\.parquet.*choose a writable path$"):
        with ParquetSink(missing) as sink:
            sink.write({"tp": np.arange(3), "step_s": np.ones(3)})
    assert not missing.exists()


def test_rows_read_back_with_names_and_one_row_group_per_chunk(tmp_path):
    f = tmp_path / "r.parquet"
    r = search(sb.load("hpn-gpt3-175b"), gpus=64, out=str(f), chunk=20000)
    meta = pq.ParquetFile(f).metadata
    assert meta.num_rows == r.written == r.evaluated
    assert meta.num_row_groups == -(-r.candidates // 20000)  # every chunk here keeps some valid layouts
    t = pq.read_table(f)
    for name, names in CODE_NAMES.items():
        assert set(t.column(name).combine_chunks().dictionary.to_pylist()) <= set(names)
    assert int(np.sum(t.column("fits").to_numpy())) == r.feasible
    assert sorted(os.listdir(tmp_path)) == ["r.parquet"]
