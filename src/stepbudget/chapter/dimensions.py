"""Panel 5.3: a preset with the panel's degrees, its bytes per GPU by dimension, and HPN's Table 3 re-read.

The panel moves a preset's degrees (TP, CP, PP, DP, EP), its experts and top-k, the micro-batch,
the sequence length and the rank order; the GPU count follows the degrees. A dense preset given
EP > 1 gets an MoE block in every layer, of the same active FLOPs (experts ``d_ff / k`` wide), and
the view says so. ``check`` gives the panel's rules a reader can break with one control, each
named by that control, before the scenario's own validation runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from stepbudget.budget.memory import Memory, memory_per_gpu
from stepbudget.budget.step import Budget, estimate
from stepbudget.budget.rate import kernel_scenario
from stepbudget.enums import Axis, Schedule
from stepbudget.inputs.scenario import Scenario, format_sets, load
from stepbudget.plan.derive import derive

PANEL_PRESETS = ("llama3-405b", "hpn-gpt3-175b", "megascale-175b", "deepseek-v3", "megascale-moe-352b")
"""The presets the panel offers, in its buttons' order."""
DENSE_EXPERTS, DENSE_TOP_K = 64, 2
"""What the experts and top-k controls start at on a dense preset (the chapter's exercise: EP 64, top-2)."""
HPN_TABLE_3 = {Axis.TP: 560e6, Axis.DP: 5.5e9, Axis.PP: 6e6}
"""Message sizes Alibaba measured for GPT-3 175B at TP8-PP8-DP512 (HPN, SIGCOMM'24, Table 3, via chapter 5.3)."""


@dataclass(frozen=True)
class Degrees:
    """The panel's controls."""

    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    experts: int
    top_k: int
    micro_batch: int
    seq_len: int
    order: tuple[str, ...]

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp


@dataclass(frozen=True)
class Problem:
    """A rule the controls break: ``field`` names the control, ``code`` the rule, ``values`` its numbers."""

    field: str
    code: str
    values: dict


@dataclass(frozen=True)
class DimensionRow:
    """One collective kind of one dimension, per GPU per step."""

    dim: str
    collective: str
    what: str
    group: int
    message_bytes: float
    calls: float
    bytes_per_gpu: float
    nic_bytes: float
    nvlink_bytes: float
    link: str
    time_s: float
    exposed_s: float
    critical: bool
    """On the critical path unless overlapped (TP, the CP all-gather, EP)."""
    status: str
    """"exposed" (all of it waits), "partly" (some hidden), "hidden"."""
    per_layer_bytes: float | None
    """TP, CP and EP: bytes per layer per micro-batch (what HPN's Table 3 counts); None for PP and DP."""
    per_layer_s: float | None = None
    """The same, in time: the collective's time per layer per micro-batch."""


@dataclass(frozen=True)
class Reread:
    """One entry of HPN's Table 3 against the model's figure for the same message."""

    dim: str
    measured_bytes: float
    ours_bytes: float
    match: str
    """"exact" (within 10 %) or "order" (the same order of magnitude)."""


@dataclass(frozen=True)
class DimensionView:
    ref: str
    sets: tuple[str, ...]
    scenario: Scenario
    budget: Budget
    memory: Memory
    assumed: list[tuple[str, dict]]
    """What the panel filled in, and what it means: ("moe_block", ...), ("moe_against_dp", ...), ("schedule", ...),
    ("kernel_rate", ...)."""
    rows: list[DimensionRow]
    hpn: list[Reread]
    """HPN's Table 3 re-read, for the HPN preset at the layout it was measured on; empty otherwise."""

    @property
    def command(self) -> str:
        return " ".join(["stepbudget budget", self.ref, *(f"--set '{s}'" if " " in s else f"--set {s}"
                                                          for s in self.sets)])


@functools.cache
def _preset(ref: str) -> Scenario:
    return load(ref)


def preset_degrees(ref: str) -> Degrees:
    """The controls' values for a preset as written."""
    sc = _preset(ref)
    lay, moe = sc.layout, sc.model.moe
    return Degrees(tp=lay.tp, cp=lay.cp, pp=lay.pp, dp=lay.dp, ep=lay.ep,
                   experts=moe.num_experts if moe else DENSE_EXPERTS, top_k=moe.top_k if moe else DENSE_TOP_K,
                   micro_batch=lay.micro_batch, seq_len=sc.model.seq_len, order=tuple(a.value for a in lay.order))


def _virtual(sc: Scenario, pp: int) -> int:
    """The preset's chunks per rank if they still divide the layer slots at ``pp`` stages, else 1."""
    v = sc.layout.virtual_stages
    return v if sc.pipeline_slots % (pp * v) == 0 else 1


def _sequences(sc: Scenario, seq_len: int) -> float:
    """Sequences a step at ``seq_len``: a preset that states its batch in tokens keeps the tokens."""
    tokens = sc.batch.global_batch_tokens
    return tokens / seq_len if tokens is not None else float(sc.global_batch_seqs)


def check(ref: str, d: Degrees) -> list[Problem]:
    """The rules one control can break, each named by that control (the scenario validates the rest)."""
    sc = _preset(ref)
    m = sc.model
    out = []
    if m.num_heads % d.tp or (m.mla is None and m.kv_heads % d.tp):
        out.append(Problem("tp", "tp_heads", {"tp": d.tp, "heads": m.num_heads,
                                              "kv_heads": m.kv_heads if m.mla is None else m.num_heads}))
    if sc.pipeline_slots % d.pp:
        out.append(Problem("pp", "pp_slots", {"pp": d.pp, "slots": sc.pipeline_slots}))
    if d.cp > 1 and d.seq_len % (2 * d.cp):
        out.append(Problem("cp", "cp_seq", {"cp": d.cp, "seq_len": d.seq_len}))
    seqs = _sequences(sc, d.seq_len)
    if not seqs.is_integer():
        out.append(Problem("seq_len", "seq_tokens", {"seq_len": d.seq_len, "tokens": sc.batch.global_batch_tokens}))
    elif seqs % (d.dp * d.micro_batch):
        out.append(Problem("dp", "batch_split", {"seqs": int(seqs), "dp": d.dp, "micro_batch": d.micro_batch}))
    if d.ep > 1 or m.moe is not None:
        if d.top_k > d.experts:
            out.append(Problem("top_k", "top_k_experts", {"top_k": d.top_k, "experts": d.experts}))
        if d.experts % d.ep:
            out.append(Problem("ep", "ep_experts", {"ep": d.ep, "experts": d.experts}))
        elif (d.tp * d.cp * d.dp) % d.ep:
            out.append(Problem("ep", "ep_ranks", {"ep": d.ep, "ranks": d.tp * d.cp * d.dp}))
    dense = [a.value for a in sc.layout.order if a != Axis.EP]  # the panel's orders leave EP right inside DP
    if sorted(a for a in d.order if a != Axis.EP) != sorted(dense):
        out.append(Problem("order", "order_axes", {"axes": ", ".join(dense)}))
    return out


def _edits(ref: str, d: Degrees) -> tuple[dict, list[tuple[str, dict]]]:
    """The edit that gives the preset the panel's degrees, and what had to be assumed for it."""
    sc = _preset(ref)
    lay, m = sc.layout, sc.model
    given = preset_degrees(ref)
    layout: dict = {name: getattr(d, name) for name in ("tp", "cp", "pp", "dp", "ep", "micro_batch")
                    if getattr(d, name) != getattr(given, name)}
    changes: dict = {"layout": layout, "cluster": {"gpus": d.gpus} if d.gpus != sc.cluster.gpus else {}, "model": {}}
    assumed: list[tuple[str, dict]] = []
    if d.pp != lay.pp and (v := _virtual(sc, d.pp)) != lay.virtual_stages:
        layout["virtual_stages"] = v
        if v == 1 and lay.schedule == Schedule.INTERLEAVED_1F1B:
            layout["schedule"] = Schedule.ONE_F_ONE_B.value
        assumed.append(("schedule", {"pp": d.pp, "v": v, "was": lay.virtual_stages}))
    if d.seq_len != m.seq_len:
        changes["model"]["seq_len"] = d.seq_len
    if d.order != given.order:
        layout["order"] = list(d.order)
    if m.moe is None and d.ep > 1:
        width = max(m.ffn_size // d.top_k, 1)  # the same active FLOPs as the dense MLP it replaces
        changes["model"]["moe"] = {"num_experts": d.experts, "top_k": d.top_k, "expert_ffn_size": width}
        assumed.append(("moe_block", {"experts": d.experts, "top_k": d.top_k, "expert_ffn": width,
                                      "dense_ffn": m.ffn_size}))
    elif m.moe is not None:
        moe = {name: value for name, value in (("num_experts", d.experts), ("top_k", d.top_k))
               if value != getattr(m.moe, name)}
        if moe:
            changes["model"]["moe"] = moe
    return {k: v for k, v in changes.items() if v}, assumed


def rows_of(b: Budget) -> list[DimensionRow]:
    """A budget's exchanges as the panel's rows (those that run)."""
    p = b.plan
    f = lambda x: float(np.asarray(x))  # noqa: E731
    passes = {Axis.TP: p.layers_per_gpu, Axis.CP: p.layers_per_gpu, Axis.EP: p.moe_layers_per_gpu}
    out = []
    for x, exposed in zip(b.exchanges, b.exposed_s):
        if f(x.calls) <= 0:
            continue
        t, e = f(x.time_s), f(exposed)
        layers = passes.get(x.dim)
        out.append(DimensionRow(
            dim=x.dim.value, collective=x.collective.value, what=x.what, group=int(np.asarray(x.group)),
            message_bytes=f(x.message_bytes), calls=f(x.calls), bytes_per_gpu=f(x.bytes_per_gpu),
            nic_bytes=f(x.nic_bytes), nvlink_bytes=f(x.nvlink_bytes), link=str(x.link), time_s=t, exposed_s=e,
            critical=x.critical, status="hidden" if e <= 0.01 * t else "exposed" if e >= 0.99 * t else "partly",
            per_layer_bytes=None if layers is None else f(x.bytes_per_gpu / (layers * p.microbatches)),
            per_layer_s=None if layers is None else f(x.time_s / (layers * p.microbatches)),
        ))
    return out


def _match(ours: float, measured: float) -> str:
    return "exact" if abs(ours / measured - 1) <= 0.1 else "order"


def hpn_reread(view_rows: list[DimensionRow], b: Budget) -> list[Reread]:
    """HPN's Table 3 against the model: TP per layer per micro-batch, the DP message (the per-GPU gradient
    shard) and the PP message."""
    p, w = b.plan, b.plan.scenario.precision
    tp = sum(r.per_layer_bytes or 0.0 for r in view_rows if r.dim == "tp")
    dp = float(np.asarray(p.params_dense_per_gpu)) * w.grads  # the whole gradient buffer one GPU reduces
    pp = next((r.message_bytes for r in view_rows if r.dim == "pp"), 0.0)
    return [Reread(dim.value, measured, ours, _match(ours, measured))
            for dim, ours, measured in ((Axis.TP, tp, HPN_TABLE_3[Axis.TP]), (Axis.DP, dp, HPN_TABLE_3[Axis.DP]),
                                        (Axis.PP, pp, HPN_TABLE_3[Axis.PP])) if ours > 0]


def dimension_view(ref: str, d: Degrees) -> DimensionView:
    """The preset ``ref`` with the panel's degrees, evaluated. ScenarioError when the scenario refuses them
    (``check`` first names the rules one control breaks)."""
    changes, assumed = _edits(ref, d)
    # a whole-step rate: the kernel view, so TP shows where it waits (the same step the budget tells)
    sc, rate = kernel_scenario(_preset(ref).edit(changes, where="panel 5.3"))
    if rate is not None:
        assumed.append(("kernel_rate", {"measured": float(_preset(ref).cluster.achieved_flops or 0), "kernel": rate}))
    plan = derive(sc)
    b = estimate(plan)
    rows = rows_of(b)
    for code, values in assumed:
        if code == "moe_block" and sc.model.moe is not None:  # the load the built job took, as show names it
            values["load"] = sc.model.moe.busiest_expert_load
    if any(code == "moe_block" for code, _ in assumed):  # the chapter's point: the all-to-all lands near DP
        dense = estimate(derive(_preset(ref)))
        assumed.append(("moe_against_dp", {"ep": float(np.asarray(b.by_dim("bytes_per_gpu")["ep"])),
                                           "dp": float(np.asarray(dense.by_dim("bytes_per_gpu")["dp"]))}))
    at_hpn = ref == "hpn-gpt3-175b" and d == preset_degrees(ref)  # Table 3 was measured at the preset's layout
    return DimensionView(ref=ref, sets=tuple(format_sets(changes)), scenario=sc, budget=b, memory=memory_per_gpu(plan),
                         assumed=assumed, rows=rows, hpn=hpn_reread(rows, b) if at_hpn else [])

