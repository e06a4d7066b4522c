"""TaskGraph's validation: every rule, its message, and the tasks it names; arrays taken without a copy."""

import numpy as np
import pytest

from stepbudget.sim.graph import Task, TaskGraph, TaskKind, compute, join, transfer


def _graph(**change):
    """Three tasks (a compute, a transfer after it, a join after both), with fields replaced by ``change``."""
    fields = dict(kind=np.array([0, 1, 2], dtype=np.int8), stream=np.array([0, -1, -1]),
                  duration_s=np.array([1.0, 0.0, 0.0]), size_bytes=np.array([0.0, 5.0, 0.0]),
                  link_indptr=np.array([0, 0, 1, 1]), link_ids=np.array([0]),
                  dep_indptr=np.array([0, 0, 1, 3]), dep_ids=np.array([0, 0, 1]))
    fields.update(change)
    return TaskGraph(**fields)


BROKEN = {
    "stream shape": (dict(stream=np.array([0, -1])), "stream has shape (2,), expected (3,): one entry per task"),
    "names shape": (dict(names=np.array(["a"])), "names has shape (1,), expected (3,)"),
    "link pointer length": (dict(link_indptr=np.array([0, 1, 1])),
                            "link_indptr must be non-decreasing, of length 4, from 0 to len(link_ids) = 1"),
    "link pointer start": (dict(link_indptr=np.array([1, 1, 1, 1])),
                           "link_indptr must be non-decreasing, of length 4, from 0 to len(link_ids) = 1"),
    "dep pointer decreasing": (dict(dep_indptr=np.array([0, 2, 1, 3])),
                               "dep_indptr must be non-decreasing, of length 4, from 0 to len(dep_ids) = 3"),
    "dep pointer end": (dict(dep_indptr=np.array([0, 0, 1, 2])),
                        "dep_indptr must be non-decreasing, of length 4, from 0 to len(dep_ids) = 3"),
    "kind": (dict(kind=np.array([0, 3, 2], dtype=np.int8)),
             "kind must hold TaskKind values 0 (COMPUTE), 1 (TRANSFER), 2 (JOIN)"),
    "negative kind": (dict(kind=np.array([-1, 1, 2], dtype=np.int8)),
                      "kind must hold TaskKind values 0 (COMPUTE), 1 (TRANSFER), 2 (JOIN)"),
    "no stream": (dict(stream=np.array([-1, -1, -1])), "1 task(s) break the rule: compute tasks need stream >= 0 "
                  "and a finite duration_s >= 0 (first: compute#0)"),
    "NaN duration": (dict(duration_s=np.array([np.nan, 0.0, 0.0]), names=np.array(["c", "t", "j"])),
                     "1 task(s) break the rule: compute tasks need stream >= 0 and a finite duration_s >= 0 "
                     "(first: c)"),
    "infinite duration": (dict(duration_s=np.array([np.inf, 0.0, 0.0])), "1 task(s) break the rule: compute tasks "
                          "need stream >= 0 and a finite duration_s >= 0 (first: compute#0)"),
    "negative size": (dict(size_bytes=np.array([0.0, -1.0, 0.0])), "1 task(s) break the rule: transfers need finite "
                      "size_bytes >= 0 and at least one link (use a join for a local no-op) (first: transfer#1)"),
    "NaN size": (dict(size_bytes=np.array([0.0, np.nan, 0.0])), "1 task(s) break the rule: transfers need finite "
                 "size_bytes >= 0 and at least one link (use a join for a local no-op) (first: transfer#1)"),
    "no link": (dict(link_indptr=np.array([0, 0, 0, 0]), link_ids=np.array([], dtype=np.int64)),
                "1 task(s) break the rule: transfers need finite size_bytes >= 0 and at least one link "
                "(use a join for a local no-op) (first: transfer#1)"),
    "a join on a link": (dict(link_indptr=np.array([0, 0, 1, 2]), link_ids=np.array([0, 1])),
                         "1 task(s) break the rule: only transfers cross links (first: join#2)"),
    "negative link": (dict(link_ids=np.array([-1])), "link_ids must be >= 0"),
    "itself": (dict(dep_ids=np.array([0, 0, 2])),
               "1 task(s) break the rule: dependencies must be other task ids in [0, 3) (first: join#2)"),
    "out of range": (dict(dep_ids=np.array([3, -1, 1])), "2 task(s) break the rule: dependencies must be other task "
                     "ids in [0, 3) (first: transfer#1, join#2)"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_each_rule_is_one_value_error_naming_the_tasks(case):
    change, message = BROKEN[case]
    with pytest.raises(ValueError) as error:
        _graph(**change)
    assert str(error.value) == message


def test_a_later_dependency_is_allowed_and_the_engine_sees_the_cycle():
    # the graph takes any other task id; only the engine needs an order
    g = _graph(dep_indptr=np.array([0, 1, 2, 3]), dep_ids=np.array([2, 0, 1]))
    assert g.dep_ids.tolist() == [2, 0, 1]


def test_arrays_of_the_right_dtype_are_not_copied_and_read_only():
    size = np.array([0.0, 5.0, 0.0])
    g = _graph(size_bytes=size, stream=[0, -1, -1])
    assert np.shares_memory(g.size_bytes, size) and not g.size_bytes.flags.writeable
    assert size.flags.writeable  # the caller's array is left as it was
    assert g.stream.dtype == np.int64 and not g.stream.flags.writeable
    assert g.kind.dtype == np.int8 and g.num_tasks == 3 and g.num_links == 1 and g.num_streams == 1


def test_from_tasks_packs_names_and_csr():
    g = TaskGraph.from_tasks([compute("c", 0, 1.0), transfer("t", 5.0, [0, 2], [0]), join("j", [0, 1]),
                              Task("k", TaskKind.JOIN)])
    assert g.names.tolist() == ["c", "t", "j", "k"] and g.label(1) == "t"
    assert g.link_indptr.tolist() == [0, 0, 2, 2, 2] and g.link_ids.tolist() == [0, 2]
    assert g.dep_indptr.tolist() == [0, 0, 1, 3, 3] and g.dep_ids.tolist() == [0, 0, 1]
    assert g.num_links == 3
