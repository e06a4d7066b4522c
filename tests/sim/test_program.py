"""The step's task graph (sim/program.py) on the shipped presets: its structure, and the budget's terms it carries."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import stepbudget as sb
from stepbudget.enums import SCHEDULE_CODES, Axis, Schedule
from stepbudget.inputs.scenario import ScenarioError
from stepbudget.sim.graph import TaskKind
from stepbudget.sim.program import MAX_TASKS, program_size, step_program
from stepbudget.sim.step import sim_budget, simulate_step
from stepbudget.sim.terms import _budget_terms, _code, _order, _senders, _shape, _sweeps, _walk_schedules

PRESETS = sb.preset_names()
ON_PATH = (Axis.TP, Axis.CP, Axis.EP)


@pytest.fixture(scope="module")
def programs():
    """preset -> (budget, program without contention): each dimension of a stage on its own link."""
    out = {}
    for name in PRESETS:
        b = sim_budget(sb.load(name))
        out[name] = b, step_program(b, contention=False)
    return out


def _seconds(prog) -> np.ndarray:
    """Per task: a transfer's time alone on its link (bytes / rate), 0 for other tasks."""
    g = prog.graph
    out = np.zeros(g.num_tasks)
    tr = np.flatnonzero(g.kind == TaskKind.TRANSFER)
    out[tr] = g.size_bytes[tr] / prog.capacity_Bps[g.link_ids[g.link_indptr[tr]]]
    return out


def _live(b, dims):
    return [(x, float(e)) for x, e in zip(b.exchanges, b.exposed_s) if x.dim in dims and float(x.calls) > 0]


@pytest.mark.parametrize("name", PRESETS)
def test_tasks_are_emitted_after_what_they_wait_for(programs, name):
    # the graph is built in dependency order: every dependency is an earlier task, so the list is a topological order
    _, prog = programs[name]
    g = prog.graph
    owner = np.repeat(np.arange(g.num_tasks), np.diff(g.dep_indptr))
    assert g.dep_ids.size > 0 and np.all(g.dep_ids < owner)


@pytest.mark.parametrize("name", PRESETS)
def test_minus_one_means_only_the_final_join_and_no_deadline(programs, name):
    b, prog = programs[name]
    p, T = int(b.plan.pp), prog.graph.num_tasks
    assert np.flatnonzero(prog.stage < 0).tolist() == [T - 1]  # the step's end, which no stage owns
    assert prog.graph.kind[-1] == TaskKind.JOIN and set(prog.stage[:-1].tolist()) == set(range(p))
    due = np.flatnonzero(prog.deadline != -1)
    assert due.size > 0 and np.all((prog.deadline[due] >= 0) & (prog.deadline[due] < T))
    # a deadline is a compute task of the same stage: the one the transfer hides behind (or a gather's first layer)
    assert np.all(prog.graph.kind[prog.deadline[due]] == TaskKind.COMPUTE)
    assert np.array_equal(prog.stage[prog.deadline[due]], prog.stage[due])
    assert set(prog.role[due].tolist()) <= {"hidden", "reduce", "gather"}


@pytest.mark.parametrize("name", PRESETS)
def test_each_stage_computes_the_budget_compute_and_its_sm_share(programs, name):
    # per stage, the layers sum to the budget's compute of the passes plus what hidden kernels take of the SMs
    # (budget/step.py contention_s), split 1 : 2 between forward and backward; then the optimizer step
    b, prog = programs[name]
    g = prog.graph
    want = float(b.compute_s - b.plan.optimizer_s + b.contention_s)
    for s in range(int(b.plan.pp)):
        fwd = g.duration_s[(prog.stage == s) & (prog.role == "fwd")].sum()
        bwd = g.duration_s[(prog.stage == s) & (prog.role == "bwd")].sum()
        assert fwd + bwd == pytest.approx(want, rel=1e-12)
        assert bwd == pytest.approx(2 * fwd, rel=1e-12)
        (opt,) = np.flatnonzero((prog.stage == s) & (prog.role == "optimizer"))
        assert g.duration_s[opt] == float(b.plan.optimizer_s)


@pytest.mark.parametrize("name", PRESETS)
def test_each_stage_moves_the_budget_time_of_every_dimension(programs, name):
    # a transfer's bytes are its budget time at its link's rate: per stage, TP + CP + EP add up to the budget's
    # time (the exposed part of all three rides one transfer), each hidden part to time - exposed, DP to its time
    b, prog = programs[name]
    secs = _seconds(prog)
    on_path = sum(float(x.time_s) for x, _ in _live(b, ON_PATH))
    reduce = sum(float(x.time_s) for x, _ in _live(b, (Axis.DP,)) if x.collective.value != "all-gather")
    gather = sum(float(x.time_s) for x, _ in _live(b, (Axis.DP,)) if x.collective.value == "all-gather")
    for s in range(int(b.plan.pp)):
        stage = prog.stage == s
        got = secs[stage & np.isin(prog.dim, [d.value for d in ON_PATH])].sum()
        assert got == pytest.approx(on_path, rel=1e-9, abs=1e-15)
        for d in ON_PATH:
            hidden = sum(float(x.time_s) - e for x, e in _live(b, (d,)))
            assert secs[stage & (prog.dim == d.value) & (prog.role == "hidden")].sum() == pytest.approx(hidden, abs=1e-12)
        assert secs[stage & (prog.role == "reduce")].sum() == pytest.approx(reduce, rel=1e-9, abs=1e-15)
        assert secs[stage & (prog.role == "gather")].sum() == pytest.approx(gather, rel=1e-9, abs=1e-15)
    pp = [float(x.call_s) for x, _ in _live(b, (Axis.PP,))]
    sends = secs[prog.role == "send"]  # one PP call each, where the schedule runs task by task
    assert (sends.size > 0) == (bool(pp) and not prog.closed_form_bubble)
    assert sends.size == 0 or np.allclose(sends, pp[0], rtol=1e-12)


@pytest.mark.parametrize("name", PRESETS)
def test_program_size_counts_every_pass_with_a_send(programs, name):
    # program_size's docstring: the passes' tasks exactly, with a send at every pass; a micro-batch's first
    # forward and last backward send nothing (2 m), and the per-step tasks (DP, bubbles, optimizer, end) are left out
    b, prog = programs[name]
    per_step = np.isin(prog.role, ["reduce", "gather", "optimizer", "bubble"]) | (prog.stage < 0)
    per_pass = prog.graph.num_tasks - int(per_step.sum())
    m = max(int(round(float(b.plan.microbatches))), 1)
    unsent = 2 * m if np.any(prog.role == "send") else 0
    assert program_size(b) == per_pass + unsent


def test_the_tp_overlap_is_the_budgets_so_agreement_cannot_test_it():
    # whatever overlap.tp says, the hidden TP transfers carry phi of TP's time, finish on their own link before
    # their pass does, and the simulation agrees with the budget: an error in phi would pass this check too.
    # Without the SM share: it lengthens the layers the fill and drain wait for, which the budget's bubble
    # leaves out (about (p - 1) / m of contention_s, 2 % of hpn's step at phi = 1)
    for phi in (0.0, 0.5, 1.0):
        b = sim_budget(sb.load("hpn-gpt3-175b", [f"overlap.tp={phi}", "overlap.comm_sm_share=0"]))
        prog = step_program(b, contention=False)
        tp = sum(float(x.time_s) for x, _ in _live(b, (Axis.TP,)))
        hidden = _seconds(prog)[(prog.stage == 0) & (prog.dim == "tp") & (prog.role == "hidden")].sum()
        assert hidden == pytest.approx(phi * tp, rel=1e-9, abs=1e-15)
        result = simulate_step(b, contention=False, program=prog)
        assert not [m for m in result.deadline_misses if m["dim"] == "tp"]
        assert result.step_s == pytest.approx(float(b.step_s), rel=0.01)


def test_a_closed_form_schedule_starts_every_stage_with_the_budget_bubble(programs):
    b, prog = programs["deepseek-v3"]  # DualPipe: not run task by task
    terms = _budget_terms(b)
    assert prog.closed_form_bubble and not np.any(prog.role == "send")
    bubbles = np.flatnonzero(prog.role == "bubble")
    assert prog.stage[bubbles].tolist() == list(range(int(b.plan.pp)))
    assert np.all(prog.graph.duration_s[bubbles] == float(b.bubble_s) + terms.pp_exposed_s)
    first_layer = [int(np.flatnonzero((prog.stage == s) & (prog.role == "fwd"))[0]) for s in range(int(b.plan.pp))]
    g = prog.graph
    assert all(bubbles[s] in g.dep_ids[g.dep_indptr[t]:g.dep_indptr[t + 1]] for s, t in enumerate(first_layer))


def test_a_large_step_runs_a_task_per_pass_and_a_larger_one_is_refused():
    # hpn: p = 8, v = 1, 12 layers a stage; m passes 2 p m (layers + 3) tasks past MAX_TASKS at m > 2,500
    def shape(seqs):
        b = sim_budget(sb.load("hpn-gpt3-175b", [f"batch.global_batch_seqs={seqs}"]))
        return _shape(b.plan, b)

    assert shape(8192).layers_per_chunk == 12
    coarse = shape(2_097_152)  # m = 4,096
    assert coarse.microbatches == 4096 and coarse.layers_per_chunk == 1
    assert 2 * 8 * 4096 * (12 + 3) > MAX_TASKS >= 2 * 8 * 4096 * 4
    with pytest.raises(ScenarioError, match="raise layout.micro_batch"):
        shape(5_242_880)  # m = 10,240: 163,840 passes


def test_a_pass_receives_from_the_previous_virtual_stage(programs):
    b, _ = programs["hpn-gpt3-175b"]  # 1F1B, p = 8
    shape = _shape(b.plan, b)

    def sender(kind, mb, c, s):
        one = np.array([kind == "F"]), np.array([mb]), np.array([c]), np.array([s])
        return int(_senders(shape, *one)[0])

    def code(kind, mb, c, s):
        return int(_code(shape, np.array([int(kind == "B")]), np.array([mb]), np.array([c]), np.array([s]))[0])

    assert sender("F", 0, 0, 0) == -1  # the first stage's forward receives nothing
    assert sender("F", 3, 0, 1) == code("F", 3, 0, 0)
    assert sender("B", 3, 0, 7) == code("F", 3, 0, 7)  # the last stage turns its forward round
    assert sender("B", 3, 0, 6) == code("B", 3, 0, 7)
    closed = _shape(*(lambda x: (x.plan, x))(programs["deepseek-v3"][0]))  # DualPipe: its bubble stands in
    assert closed.closed_form and _senders(closed, np.array([True]), np.array([0]), np.array([0]),
                                           np.array([3])).tolist() == [-1]


def test_the_walk_emits_in_sweeps_and_says_when_the_schedule_deadlocks():
    # stage 0 runs a, b; stage 1 runs c, d; c receives from b, and b from d: a sweep emits a, then c waits on b...
    assert _sweeps([0, 2, 4], [-1, -1, 1, -1], [0, 0, 0, 0]) == [0, 0, 0, 0]  # b is before c in the same sweep
    assert _sweeps([0, 2, 4], [-1, 3, -1, -1], [0, 1, 0, 0]) == [0, 1, 0, 0]  # b waits a sweep for d on stage 1
    with pytest.raises(RuntimeError, match="deadlocked"):
        _sweeps([0, 2, 4], [-1, 3, -1, 1], [0, 1, 0, 0])  # b waits on d, d on b


@pytest.mark.parametrize("name", PRESETS)
def test_every_pass_comes_after_its_stage_predecessor_and_its_sender(programs, name):
    b, _ = programs[name]
    ps = _walk_schedules(_shape(b.plan, b))
    i = np.arange(ps.s.size)
    assert np.all((ps.prev < i) & (ps.received < i))
    assert np.all(ps.s[ps.prev[ps.prev >= 0]] == ps.s[ps.prev >= 0])
    assert np.array_equal(np.sort(ps.index.ravel()), i)  # every (direction, micro-batch, chunk, stage) once


@given(p=st.integers(1, 6), rounds=st.integers(1, 3), v=st.integers(1, 3),
       schedule=st.sampled_from([Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED_1F1B]))
def test_every_stage_runs_each_pass_once_backward_after_forward(p, rounds, v, schedule):
    m, v = rounds * p, (v if schedule == Schedule.INTERLEAVED_1F1B else 1)  # interleaving runs p | m task by task
    for s in range(p):
        order = _order(SCHEDULE_CODES[schedule], p, s, m, v)
        assert sorted(order) == sorted((k, i, c) for k in "FB" for i in range(m) for c in range(v))
        assert all(order.index(("F", i, c)) < order.index(("B", i, c)) for i in range(m) for c in range(v))
        if schedule == Schedule.ONE_F_ONE_B:  # 1F1B holds at most p - s micro-batches' activations
            in_flight = np.cumsum([1 if k == "F" else -1 for k, _, _ in order])
            assert in_flight.max() == min(p - s, m)
