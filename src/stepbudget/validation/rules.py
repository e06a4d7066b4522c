"""The conversion rules, one small function each, that ``convert.RULES`` applies to a run in order.

Each is a ``convert.Rule``: it reads a few fields of the stated run (``stated.py``) and sets a few fields of the
raw scenario. The sections follow ``RULES``: what every prediction needs and the preset a model's name picks;
the model and the cluster; the degrees and the pipeline; batch, memory and precision; what the framework
overlaps and how it sends; the measured step. The defaults they take are listed in ``convert.py``'s doc.
"""

from __future__ import annotations

import copy
import re

from stepbudget.inputs.layout import stated_rank_layers
from stepbudget.inputs.scenario import raw_scenario
from stepbudget.validation.runs import OVERLAP_DIMS, REQUIRED, overlap_dims
from stepbudget.validation.stated import (DP_KINDS, NIC_BUSBW_SHARE, NVLINK_BUSBW_SHARE, NVLINK_PER_DIRECTION,
                                          RECOMPUTE_MODES, StatedRun, Unpredictable, attention_kernel_of,
                                          catalog_row, flag_of, gpu_of, grad_reduce_precision, positions_of,
                                          preset_for, stated_memory, text_of)

SHAPE_FIELDS = {"layers": "num_layers", "hidden": "hidden_size", "heads": "num_heads", "vocab": "vocab_size",
                "seq_len": "seq_len"}
"""A run's required model fields -> the scenario's model fields they set (and a preset or catalog row fills)."""


# -- what every prediction needs, and the preset or catalog row a model's name picks ---------------------------

def required(r: StatedRun, sc: dict, notes: list[str]) -> None:
    known = _named_model(str(r.model.get("name") or ""))
    missing = [f"{sec}.{name}" for sec, names in REQUIRED.items() for name in names
               if r.whole[sec].get(name) is None and not (sec == "model" and known.get(SHAPE_FIELDS[name]))]
    if missing:
        raise Unpredictable(f"not stated in the source: {', '.join(missing)}")


def _named_model(name: str) -> dict:
    """The model section a run's model name brings: its preset's, else its catalog row's, else none."""
    picked = preset_for(name)
    if picked:
        return dict(raw_scenario(picked).get("model") or {})
    row = catalog_row(name)
    return row.model if row else {}


def preset(r: StatedRun, sc: dict, notes: list[str]) -> None:
    name = str(r.model.get("name", ""))
    picked = preset_for(name)
    if picked:  # it carries what the file leaves out (convert.py's doc); the rules below override it
        sc.update(copy.deepcopy(raw_scenario(picked)))
        notes.append(f"unstated fields from preset {picked}")
    sc.update(name=r.whole["id"], description=name, source=str((r.whole.get("source") or {}).get("document", "")))


def catalog_model(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if all(r.model.get(name) is not None for name in SHAPE_FIELDS):
        return  # a run that states its shape is read as stated: the catalog never changes a complete run's prediction
    row = catalog_row(str(r.model.get("name") or ""))  # None where a preset matched: it keeps precedence
    if row:  # the row's shapes fill what the run leaves out; the rules below set the run's own numbers over them
        sc["model"] = row.model
        notes.append(f"model fields from the catalog row {row.key}")


# -- the model and the cluster ---------------------------------------------------------------------------------

def model_shape(r: StatedRun, sc: dict, notes: list[str]) -> None:
    m, model = r.model, sc.setdefault("model", {})
    model["name"] = str(m.get("name", "model"))
    # each stated, or from the preset or catalog row (required() saw one of them has it)
    model.update({field: m[name] for name, field in SHAPE_FIELDS.items() if m.get(name) is not None})
    if m.get("kv_heads"):
        model["num_kv_heads"] = m["kv_heads"]
    if m.get("head_dim"):
        model["head_dim"] = m["head_dim"]


def ffn(r: StatedRun, sc: dict, notes: list[str]) -> None:
    m, model = r.model, sc.setdefault("model", {})
    if m.get("ffn_hidden"):
        model["ffn_size"] = m["ffn_hidden"]
    elif "ffn_size" not in model:
        model["ffn_size"] = 4 * model["hidden_size"]
        notes.append("FFN width 4h (GPT) assumed")
    if re.search(r"swiglu|geglu", text_of(m.get("activation"))):
        model["activation"] = "swiglu"  # GeGLU: the same three matrices and FLOPs, another gate function
    elif "activation" not in model:
        model["activation"] = "gelu"


def moe(r: StatedRun, sc: dict, notes: list[str]) -> None:
    m = r.model
    if not isinstance(m.get("moe"), dict):
        return
    mo = m["moe"]
    out = sc.setdefault("model", {}).setdefault("moe", {})
    out.update({k: v for k, v in (("num_experts", mo.get("num_experts")), ("top_k", mo.get("top_k")),
                                  ("expert_ffn_size", mo.get("expert_ffn_hidden")),
                                  ("shared_experts", mo.get("shared_experts")),
                                  ("node_limit", mo.get("node_limit"))) if v is not None})
    if m.get("dense_layers") is not None:
        out["first_dense_layers"] = m["dense_layers"]


def mtp(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if r.model.get("mtp_depth") is not None:
        sc.setdefault("model", {})["mtp_layers"] = r.model["mtp_depth"]


def embeddings(r: StatedRun, sc: dict, notes: list[str]) -> None:
    m, model = r.model, sc.setdefault("model", {})
    if m.get("tied_embeddings") is not None:
        model["tied_embeddings"] = flag_of(m["tied_embeddings"])
    positions = positions_of(m.get("position_embedding"))
    if positions:
        model["positions"] = positions
    elif m.get("position_embedding"):
        notes.append(f"position embedding {m['position_embedding']!r} not read: rotary assumed")


def gpu_part(r: StatedRun, sc: dict, notes: list[str]) -> None:
    hw = r.hardware
    gpu = gpu_of(hw)
    if "ampere" in text_of(hw.get("gpu")) and "a100" not in text_of(hw.get("gpu")):
        notes.append("Ampere SKU not stated: A100 SXM 80GB")
    # the operator model's rate, never the preset's measured one (convert.py's doc)
    sc.setdefault("cluster", {}).update(
        gpu=stated_memory(gpu, hw, notes), gpus=r.whole["num_gpus"], achieved_flops=None, achieved_fraction=None,
        rate_scope="kernel", nvlink_efficiency=NVLINK_BUSBW_SHARE, nic_efficiency=NIC_BUSBW_SHARE)


def node(r: StatedRun, sc: dict, notes: list[str]) -> None:
    hw, cl = r.hardware, sc.setdefault("cluster", {})
    cl["gpus_per_node"] = hw.get("gpus_per_node") or cl.get("gpus_per_node") or 8
    if hw.get("nvlink_bw_gbps"):
        cl["nvlink_Bps"] = f"{hw['nvlink_bw_gbps'] / 2}GB/s"  # the file's figure is the datasheet total
    elif "nvlink_Bps" not in cl:
        cl["nvlink_Bps"] = NVLINK_PER_DIRECTION[gpu_of(hw)]


def nic(r: StatedRun, sc: dict, notes: list[str]) -> None:
    hw, cl = r.hardware, sc.setdefault("cluster", {})
    g = cl["gpus_per_node"]  # one NIC per GPU
    if hw.get("nic_gbps_per_gpu"):
        cl.update(nics_per_node=g, nic_Bps=f"{hw['nic_gbps_per_gpu']}Gb/s")
    elif "nic_Bps" not in cl:
        cl.update(nics_per_node=g, nic_Bps="400Gb/s")
        notes.append("NIC not stated: 400 Gb/s per GPU")


# -- degrees and the pipeline ----------------------------------------------------------------------------------

def degrees(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay = r.layout
    tp, pp = lay["tp"], lay["pp"]
    cp = lay.get("cp") or 1
    if lay.get("sp_attention"):
        cp = lay["sp_attention"]  # MegaScale-MoE: attention split over the sequence on the EP ranks
        notes.append(f"SP attention {cp} as CP {cp}")
    dp = lay.get("dp")
    if not isinstance(dp, int):
        dp = r.whole["num_gpus"] // (tp * cp * pp)  # every GPU is in one TP x CP x PP x DP grid
        said = "not stated" if "dp" not in lay else "not a number in the source"
        notes.append(f"DP {said}: {dp} from the GPU count")
    ep = lay.get("ep") or 1
    if r.model.get("moe") and not lay.get("ep"):
        notes.append("EP not stated: experts sharded by TP")
    sc.setdefault("layout", {}).update(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep)


def cp_and_expert_kinds(r: StatedRun, sc: dict, notes: list[str]) -> None:
    sp_attention, out = r.layout.get("sp_attention"), sc.setdefault("layout", {})
    if out["cp"] > 1 and not sp_attention and r.megatron:
        out["cp_kind"] = "ring"  # Megatron-Core context parallelism: K,V blocks passed around a ring (P2P)
    out.pop("expert_tp", None)  # a preset's expert TP belongs to its own layout
    if out["ep"] > 1 and not sp_attention:
        out["expert_tp"] = 1


def schedule(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay, out = r.layout, sc.setdefault("layout", {})
    stated = text_of(lay.get("schedule"))
    v = lay.get("virtual_pipeline_chunks_per_rank")
    if "dualpipe" in stated:
        out.update(schedule="dualpipe", virtual_stages=1)
    elif (v or 1) > 1 or "interleaved" in stated:
        # unstated depth: the preset's, else the shallowest interleaving (v >= 2) the stages' layers divide into
        shallowest = _shallowest_depth(_stage_counts(lay, sc["model"]["num_layers"], lay["pp"]), lay)
        out.update(schedule="interleaved-1f1b", virtual_stages=v or out.get("virtual_stages", shallowest))
        if not v:
            notes.append(f"interleaving depth not stated: v = {out['virtual_stages']}")
    else:
        out.update(schedule="1f1b", virtual_stages=1)


def _stage_counts(lay: dict, layers: int, pp: int) -> list[int]:
    """Layers per pipeline rank as the run splits them (an even split, or its uneven first/last or per-stage
    counts: inputs/layout.py ``stated_rank_layers``), [] where they do not split into whole layers."""
    first, last, listed = _uneven_split(lay)
    if isinstance(listed, list):
        listed = [n for n in listed if isinstance(n, int)]
        return list(stated_rank_layers(layers, pp, None, None, listed)) if listed else []
    first, last = (n if isinstance(n, int) else None for n in (first, last))
    ranks = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    if rest < 0 or (ranks and rest % ranks) or (not ranks and rest):
        return []
    return list(stated_rank_layers(layers, pp, first, last, None))


def _shallowest_depth(counts: list[int], lay: dict) -> int:
    """The fewest chunks per rank (>= 2) every rank's layers divide into; a per-stage list of pp*v entries
    says v itself; 2 where nothing divides."""
    listed = _uneven_split(lay)[2]
    if isinstance(listed, list) and len(listed) > lay["pp"] and len(listed) % lay["pp"] == 0:
        return len(listed) // lay["pp"]
    per_rank = [n for n in counts if n > 0]
    fewest = min(per_rank, default=0)
    return next((k for k in range(2, fewest + 1) if all(n % k == 0 for n in per_rank)), 2)


def _uneven_split(lay: dict) -> tuple[object, object, object]:
    """(first rank's layers, last rank's layers, the per-stage list) as a run's layout states them, Megatron's
    decoder_first/last_pipeline_num_layers read as the first two; None where not stated."""
    first = lay.get("first_stage_layers", lay.get("decoder_first_pipeline_num_layers"))
    last = lay.get("last_stage_layers", lay.get("decoder_last_pipeline_num_layers"))
    return first, last, lay.get("stage_layers")


def stage_layers(r: StatedRun, sc: dict, notes: list[str]) -> None:
    first, last, listed = _uneven_split(r.layout)
    if first is None and last is None and listed is None:
        return  # an even split, or the preset's own
    out = sc.setdefault("layout", {})
    for name in ("first_stage_layers", "last_stage_layers", "stage_layers"):
        out.pop(name, None)  # a preset's split belongs to its own layout
    out.update({k: v for k, v in (("first_stage_layers", first), ("last_stage_layers", last),
                                  ("stage_layers", listed)) if v is not None})
    for split in ("embedding_in_pipeline_split", "loss_in_pipeline_split"):
        if r.layout.get(split) is None:  # an uneven split places the embedding and loss itself (layout.py)
            out[split] = False


def pipeline_split(r: StatedRun, sc: dict, notes: list[str]) -> None:
    out = sc.setdefault("layout", {})
    for split in ("embedding_in_pipeline_split", "loss_in_pipeline_split"):
        if r.layout.get(split) is not None:
            out[split] = flag_of(r.layout[split])


# -- batch, memory, rank order and precision -------------------------------------------------------------------

def micro_batch(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay, out = r.layout, sc.setdefault("layout", {})
    if lay.get("micro_batch"):
        out["micro_batch"] = lay["micro_batch"]
    elif "micro_batch" not in out:
        out["micro_batch"] = 1
        notes.append("micro-batch not stated: 1")


def sequence_parallel(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay, out = r.layout, sc.setdefault("layout", {})
    if lay.get("sequence_parallel") is not None:
        out["sequence_parallel"] = flag_of(lay["sequence_parallel"])
    else:
        out["sequence_parallel"] = lay["tp"] > 1  # unstated: on with TP (convert.py's doc)
    if lay.get("flash_attention") is not None:
        out["flash_attention"] = flag_of(lay["flash_attention"])


def recompute(r: StatedRun, sc: dict, notes: list[str]) -> None:
    stated = text_of(r.layout.get("recompute")).strip()
    sc.setdefault("layout", {})["recompute"] = next(
        (mode for pattern, mode in RECOMPUTE_MODES if re.search(pattern, stated)), "none")


def compiled(r: StatedRun, sc: dict, notes: list[str]) -> None:
    """torch.compile, as ``layout.compile`` states it or the framework names it (not "no torch.compile", not eager)."""
    stated = r.layout.get("compile")
    fw = r.framework.lower()
    named = bool(re.search(r"torch\.compile", fw)) and not re.search(r"\b(no|without)\s+torch\.compile|\beager\b", fw)
    if (flag_of(stated) if stated is not None else named):
        sc.setdefault("layout", {})["compiled"] = True  # Inductor's partitioner recomputes pointwise results


def dp_kind(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay, out = r.layout, sc.setdefault("layout", {})
    zero = text_of(lay.get("zero_stage")) + " " + text_of(lay.get("dp_type"))
    kind = next((k for pattern, k in DP_KINDS if re.search(pattern, zero.strip())), None)
    if kind:
        out["dp_kind"] = kind
    elif zero.strip():
        notes.append(f"zero_stage not read ({zero.strip()[:40]!r}): {out.get('dp_kind', 'zero1')}")
    if kind == "fsdp":
        out["reshard_after_forward"] = "not resharded" not in zero
    if lay.get("dp_replicas") is not None:
        out["dp_replicas"] = lay["dp_replicas"]  # HSDP: sharded inside each group, replicated across them


def rank_order(r: StatedRun, sc: dict, notes: list[str]) -> None:
    out = sc.setdefault("layout", {})
    stated = r.layout.get("order")
    order = re.findall(r"\b(tp|cp|pp|dp)\b", text_of(stated))
    if sorted(order) == ["cp", "dp", "pp", "tp"]:
        out["order"] = order
        return
    if stated:
        notes.append("rank order not read: name tp, cp, pp and dp once each")
    if r.megatron:  # the framework's layout, not the preset's cluster
        out["order"] = ["tp", "cp", "dp", "pp"]  # Megatron-Core parallel_state: order="tp-cp-ep-dp-pp"


def batch(r: StatedRun, sc: dict, notes: list[str]) -> None:
    sc["batch"] = {"global_batch_seqs": r.layout["global_batch_seqs"]}  # replaces a preset's, in tokens or not


def gemm_precision(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if "fp8" in text_of(r.layout.get("precision")):
        sc.setdefault("precision", {})["gemm"] = "fp8"


def grad_reduce(r: StatedRun, sc: dict, notes: list[str]) -> None:
    stated = r.layout.get("grad_reduce")
    reduce = grad_reduce_precision(stated)
    if reduce is None and stated:
        notes.append(f"gradient reduction {stated!r} not read: the framework's default kept")
    if reduce == "fp32" or (r.megatron and reduce is None):
        # Megatron-LM arguments.py: "bfloat16 requires gradient accumulation and all-reduce to be done in fp32";
        # other frameworks say so in layout.grad_reduce (PyTorch FSDP's reduce_dtype), and a Megatron-family run
        # whose optimizer reduces in BF16 says that (NeMo's distributed_fused_adam, grad_sync_dtype: bf16)
        sc.setdefault("precision", {})["grads"] = "fp32"
    elif reduce == "bf16":  # stated: whatever a preset's framework reduced in
        sc.setdefault("precision", {})["grads"] = "bf16"


# -- what the framework overlaps and how it sends (convert.py's doc) -------------------------------------------

def framework_overlap(r: StatedRun, sc: dict, notes: list[str]) -> None:
    fw, ov = r.framework.lower(), sc.setdefault("overlap", {})
    if "megascale-moe" in fw:
        ov.update(tp=1.0, cp=1.0, ep=1.0)
        out = sc.setdefault("layout", {})
        out["ep_kind"] = "all-gather"  # §3.2, Fig. 9: AG + scatter + GroupedGEMM, GroupedGEMM + gather + RS
    elif "megascale" in fw:
        ov.update(tp=1.0)
        model = sc.setdefault("model", {})
        model["parallel_block"] = True  # MegaScale 3.1: parallel transformer block (its window for SWA is not stated)
    elif r.megatron:
        ov.update(tp=0.0, cp=0.0, ep=0.0)
        if "dp/pp overlap" not in text_of(r.whole.get("notes")):
            ov.update(pp=0.0, dp=0.0)


def stated_overlap(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if r.layout.get("overlap") is None:
        return
    # what the run's recipe overlaps, and nothing else: model-parallel collectives fused or hidden
    # whole, DP and PP hidden in the windows the schedule leaves them (the model's own default)
    listed = set(overlap_dims(r.layout["overlap"]))
    ov = sc.setdefault("overlap", {})
    ov.update({d: (1.0 if d in ("tp", "cp", "ep") else "auto") if d in listed else 0.0 for d in OVERLAP_DIMS})
    if r.megatron and "ep" in listed:
        ov["ep_paired"] = True  # Megatron-Core overlaps the all-to-all by pairing forward and backward chunks


def dispatcher(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if re.search(r"deepep|hybrid-?ep", text_of(r.layout.get("dispatcher"))):
        out = sc.setdefault("layout", {})
        out["ep_kind"] = "deepep"  # one NIC copy per target node, NVLink forwards it (DeepEP; DeepSeek-V3 3.2.2)


def ring_overlap(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if sc.setdefault("layout", {}).get("cp_kind") == "ring":
        ov = sc.setdefault("overlap", {})
        ov["cp"] = "auto"  # the ring sends the next block while the current one is attended to (by design)


def attention(r: StatedRun, sc: dict, notes: list[str]) -> None:
    stated, fw, out = r.layout.get("attention_kernel"), r.framework.lower(), sc.setdefault("layout", {})
    kernel, read = attention_kernel_of(stated)
    if kernel:
        out["attention_kernel"] = kernel
    elif not read:
        notes.append(f"attention kernel not read ({text_of(stated)[:40]!r}): the GPU's best")
    elif r.source == "MegaScale" and "megatron" in fw and "megascale" not in fw:
        # MegaScale 3.3: "for the attention part, we adopt FlashAttention-2" as its own efficient operator;
        # the baseline runs FlashAttention-1
        out["attention_kernel"] = "flash-attention-1"
        notes.append("FlashAttention-1 (MegaScale's baseline): half FlashAttention-2's attention rate")


def comm_sms(r: StatedRun, sc: dict, notes: list[str]) -> None:
    sms = re.search(r"(\d+)\s+of\s+(\d+)\s+SMs", str(r.layout.get("comm") or ""))
    if sms and 0 < int(sms.group(1)) <= int(sms.group(2)):  # else not a share: the default stands
        sc.setdefault("overlap", {})["comm_sm_share"] = int(sms.group(1)) / int(sms.group(2))


# -- the measured step -----------------------------------------------------------------------------------------

def flops_convention(r: StatedRun, sc: dict, notes: list[str]) -> None:
    sc["flops"] = {"convention": r.convention}  # the source's own count turns its MFU or TFLOP/s into a step
