"""The budget's arithmetic stays finite and quiet at the edges of its bounded inputs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import stepbudget as sb
from stepbudget.budget.step import estimate
from stepbudget.plan.derive import derive


@pytest.mark.parametrize("dim", ["tp", "dp"])
def test_a_denormal_overlap_hides_what_a_tiny_one_hides(dim):
    sc = sb.load("megascale-175b", [f"overlap.{dim}=5e-324"])
    layouts = {"tp": np.array([8, 8, 1]), "pp": np.array([8, 1, 8]), "dp": np.array([1, 8, 8]),
               "micro_batch": np.array([1, 1, 1])}
    sc = sc.model_copy(update={"cluster": sc.cluster.model_copy(update={"gpus": 64}),
                               "batch": sc.batch.model_copy(update={"global_batch_seqs": 64,
                                                                    "global_batch_tokens": None})})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = estimate(derive(sc, layouts))
        plain = estimate(derive(sc.model_copy(update={"overlap": sc.overlap.model_copy(update={dim: 1e-300})}), layouts))
    assert np.all(np.isfinite(b.step_s)) and np.allclose(b.step_s, plain.step_s, rtol=1e-12)


def test_a_denormal_overlap_searches_without_a_warning():
    # 5e-324 x a TP time of a second or more is 5e-324: dividing the window by it overflowed (a RuntimeWarning on
    # stderr) in the branch np.where then dropped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = sb.search(sb.load("megascale-175b", ["overlap.tp=5e-324"]), top=1)
    assert np.isfinite(result.top[0]["step_s"])
