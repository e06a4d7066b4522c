"""Controls several panels share (the chapter's Llama 3 405B job), and their shared messages."""

from __future__ import annotations

from dash import html

from stepbudget.api import FullModel, Unmapped
from stepbudget.views import fmt
from stepbudget.web.components import PanelProblem
from stepbudget.web.fields import Field, Slider
from stepbudget.views.i18n import t

# the chapter's worked example (5.3, formulas.md 9.1): Llama 3 405B on 16,384 GPUs, 2^24 tokens, 400 TFLOP/s
# sliders span the chapter's values: 1B-2T parameters, 64 to 262,144 GPUs, 1M-64M-token batches, 25 Gb/s-1.6 Tb/s
N = Field("N", "count", "405B", low=1e6, high=1e15, example="405B", slider=Slider(1e9, 2e12))
G = Field("G", "count", "16,384", low=1, low_open=False, example="16,384", slider=Slider(64, 2**18, "powers"))
B = Field("B", "count", "16,777,216", low=1, low_open=False, example="16,777,216",
          slider=Slider(2**20, 2**26, "powers"))
F = Field("F", "flops", "400 TFLOP/s", low=1e9, high=1e18, example="400 TFLOP/s", slider=Slider(50e12, 5e15))
NIC = Field("nic", "rate", "400 Gb/s", low=1e6, high=1e15, example="400 Gb/s", slider=Slider(25e9 / 8, 1.6e12 / 8))
PEAK = Field("peak", "flops", "989 TFLOP/s", low=1e9, high=1e18, example="989 TFLOP/s", slider=Slider(100e12, 10e15))
M = Slider(1, 1024, "powers")
"""A model-parallel group's slider: 1 (pure DP) to 1,024 GPUs."""


def no_fit(lang: str, pid: str, full: FullModel) -> list[html.P]:
    """The line a full-model box opens with when its job does not fit in HBM, as `stepbudget budget` says first."""
    mem = full.memory
    if mem is None or bool(mem.fits):
        return []
    return [html.P(t(lang, "full.no_fit", need=fmt.data(float(mem.total)), hbm=fmt.data(mem.capacity)),
                   id=f"{pid}-no-fit", className="no-fit")]


def check_split(G: float, M: float, field: str = "M") -> None:
    """The model-parallel group must fit whole into the GPUs: D = G / M replicas."""
    if M > G or G % M:
        raise PanelProblem(field, "split_gpus", G=fmt.number(G), M=fmt.number(M))


def unmapped(lang: str, why: Unmapped) -> html.P:
    """Why the full model has no scenario for these inputs, in one line."""
    return html.P(unmapped_text(lang, why), className="unmapped")


def unmapped_text(lang: str, why: Unmapped) -> str:
    """The same, as text (a figure's notice)."""
    v = why.values
    values = {"scenario": {"detail": why.detail},
              "model": {"N": fmt.count_words(lang, v.get("N", 0)), "llama": fmt.count_words(lang, v.get("llama", 0))},
              "split": {"M": fmt.number(v.get("M", 0)), "G": fmt.number(v.get("G", 0)),
                        "tp_max": fmt.number(v.get("tp_max", 0)), "slots": fmt.number(v.get("slots", 0))},
              "batch": {"B": fmt.number(v.get("B", 0)), "seq_len": fmt.number(v.get("seq_len", 0)),
                        "dp": fmt.number(v.get("dp", 0))}}[why.reason]
    return t(lang, f"full.unmapped.{why.reason}", **values)


def _dp_how(lang: str, v: dict) -> str:
    if v["reshard"] and v["dp_kind"] in ("fsdp", "zero3"):
        return t(lang, "full.dp.reshard", microbatches=fmt.number(v["microbatches"]))
    if v["grads"] == 4:
        return t(lang, "full.dp.fp32")
    return t(lang, "full.dp.kind", kind=v["dp_kind"])


def reason(lang: str, code: str, v: dict) -> str:
    """One way the full model's step differs from the first-order one (chapter/panels.py), in words."""
    time = lambda x: fmt.time(lang, x)  # noqa: E731
    values = {
        "rate_scope": lambda: {"measured": fmt.flops(v["measured"]), "kernel": fmt.flops(v["kernel"]),
                               "compute": time(v["compute"]), "per_step": fmt.flops(v["per_step"]),
                               "kernels": time(v["kernels"]), "bubble": time(v["bubble"]), "waits": time(v["waits"])},
        "rate_inside": lambda: {"measured": fmt.flops(v["measured"]), "kernel": fmt.flops(v["kernel"]),
                                "compute": time(v["compute"]), "kernels": time(v["kernels"]), "bubble": time(v["bubble"]),
                                "waits": time(v["waits"]), "exposed": time(v["exposed"]), "step": time(v["step"])},
        "bubble": lambda: {"bubble": time(v["bubble"]), "microbatches": fmt.number(v["microbatches"]),
                           "pp": fmt.number(v["pp"])},
        "dp_bytes": lambda: {"first": fmt.data(v["first"]), "full": fmt.data(v["full"]), "how": _dp_how(lang, v)},
        "latency": lambda: {"latency": time(v["latency"]), "dp": fmt.number(v["dp"])},
        "other_dims": lambda: {"dims": t(lang, "app.list_sep").join(v["dims"]), "exposed": time(v["exposed"])},
        "overlap": lambda: {"first": time(v["first"]), "full": time(v["full"])},
        "schedule": lambda: {"microbatches": fmt.number(v["microbatches"]), "pp": fmt.number(v["pp"])},
    }[code]()
    return t(lang, f"full.why.{code}", **values)
