"""The chapter's what-ifs (chapter 5.7, Panel 5.7): its named cases for `stepbudget whatif --chapter`, and the
panel's toggles on Llama 3 405B, each run through the what-if sweep (sweep/whatif.py)."""

from __future__ import annotations

import functools
import shlex

from stepbudget.budget.memory import memory_per_gpu
from stepbudget.inputs.scenario import load
from stepbudget.plan.derive import derive
from stepbudget.sweep.whatif import Variant, whatif

CHAPTER_CASES: dict[str, dict[str, tuple[str, ...]]] = {
    # chapter 5.7: "If the next GPU has 141 or 192 GB of HBM, PP can drop from 16 to 8 ... half the
    # bubble if the DP degree and the batch per replica stay fixed" - so 8,192 GPUs, DP 128, same batch
    "llama3-405b": {
        "PP 8 on 80 GB H100": ("layout.pp=8", "cluster.gpus=8192"),
        "PP 8 on 141 GB H200": ("layout.pp=8", "cluster.gpus=8192", "cluster.gpu=h200-sxm"),
        # the chapter's 192 GB is the B200 package; an HGX B200 exposes 180 GB (gpus.yaml)
        "PP 8 on 180 GB B200": ("layout.pp=8", "cluster.gpus=8192", "cluster.gpu=b200"),
        # "If the batch doubles, DP bytes per step are unchanged, TP, PP and EP bytes double"
        "batch x 2": ("batch.global_batch_tokens=33554432",),
        # "If the model becomes MoE, a data-dependent all-to-all appears in every MoE layer":
        # 16 experts of half the FFN width, top-2 (same active FLOPs), EP over the 8 GPUs of a node
        "dense -> MoE (16 experts, top-2, EP 8)": (
            "model.moe={num_experts: 16, top_k: 2, expert_ffn_size: 26624}", "layout.ep=8"),
        # "If the sequence grows to 128K, CP takes GPUs from DP": Llama 3 Table 4's long-context row
        "sequence 128K (CP 16 from DP)": ("model.seq_len=131072", "layout.cp=16", "layout.dp=8"),
        "NIC 200 Gb/s": ("cluster.nic_Bps=200Gb/s",),
        "NVLink domain 64 (NVL72 rack)": ("cluster.gpus_per_node=64", "cluster.nics_per_node=64"),
        "GPU generation: B200": ("cluster.gpu=b200", "cluster.nvlink_Bps=900GB/s"),
    },
}
"""Named variants per preset: the chapter's four cases, then NIC rate, NVLink domain and GPU generation."""

HBM_CHOICES = (80e9, 141e9, 192e9)
"""Panel 5.7's HBM sizes: H100's 80 GB, H200's 141 GB and the 192 GB of a B200 package (chapter 5.7)."""
PANEL_CHANGES = {
    # chapter 5.7, the cases of CHAPTER_CASES["llama3-405b"], as toggles that combine
    "batch": ("batch.global_batch_tokens=33554432",),
    "moe": ("model.moe={num_experts: 16, top_k: 2, expert_ffn_size: 26624}", "layout.ep=8"),
    "long": ("model.seq_len=131072", "layout.cp=16", "layout.dp=8"),
}
"""Panel 5.7's toggles other than HBM: the batch doubled, dense to MoE, the sequence 8K to 128K (CP from DP)."""


def _hbm(hbm_bytes: float, changes: tuple[str, ...]) -> tuple[str, ...]:
    """More HBM on the same GPU: PP 16 -> 8 on half the GPUs (DP and the batch per replica kept) if that fits."""
    if hbm_bytes == HBM_CHOICES[0]:
        return ()
    bigger = (f"cluster.gpu.hbm_bytes={hbm_bytes / 1e9:g}GB",)
    pp8 = (*bigger, "layout.pp=8", "cluster.gpus=8192")  # TP8 PP8 with DP 128 (or CP 16 x DP 8): 8,192 GPUs
    return pp8 if bool(memory_per_gpu(derive(load("llama3-405b", [*changes, *pp8]))).fits) else bigger


def panel_whatif(hbm_bytes: float = 80e9, double_batch: bool = False, moe: bool = False,
                 long_sequence: bool = False) -> tuple[Variant, ...]:
    """Panel 5.7 on Llama 3 405B: the base as measured (80 GB), then each change on its own and all of them
    together when more than one is on, each on GPUs of ``hbm_bytes`` (PP 16 -> 8 where that fits), and the
    bigger HBM alone. Every variant runs at the base's kernel efficiency (``whatif``); cached per setting."""
    return _panel_whatif(float(hbm_bytes), bool(double_batch), bool(moe), bool(long_sequence))


@functools.lru_cache(maxsize=64)
def _panel_whatif(hbm_bytes: float, double_batch: bool, moe: bool, long_sequence: bool) -> tuple[Variant, ...]:
    on = [name for name, flag in (("batch", double_batch), ("moe", moe), ("long", long_sequence)) if flag]
    variants = [("hbm", _hbm(hbm_bytes, ()))] if hbm_bytes != HBM_CHOICES[0] else []
    variants += [(name, PANEL_CHANGES[name] + _hbm(hbm_bytes, PANEL_CHANGES[name])) for name in on]
    if len(on) > 1:
        rest = tuple(c for name in on for c in PANEL_CHANGES[name])
        variants.append(("all", rest + _hbm(hbm_bytes, rest)))
    return tuple(whatif("llama3-405b", [], variants))


def whatif_command(ref: str, variants: tuple[Variant, ...] | list[Variant]) -> str:
    """The `stepbudget whatif` command line that prints ``variants`` (the base is always first)."""
    inner = lambda c: f'"{c}"' if " " in c else c  # noqa: E731  double quotes inside the single-quoted --vary
    varies = [shlex.quote(" ".join(inner(c) for c in v.changes)) for v in variants if v.changes]
    return " ".join(["stepbudget whatif", ref, *(f"--vary {v}" for v in varies)])
