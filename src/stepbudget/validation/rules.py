"""The conversion rules, one small function each, that ``convert.RULES`` applies to a run in order.

Each is a ``convert.Rule``: it reads a few fields of the stated run (``stated.py``) and sets a few fields of the
raw scenario. The sections follow ``RULES``: what every prediction needs and the catalog row a model's name finds;
the model and the cluster; the degrees and the pipeline; batch, memory and precision; what the framework
overlaps and how it sends; the measured step. The defaults they take are listed in ``convert.py``'s doc.
"""

from __future__ import annotations

import re
from typing import Any

from stepbudget.inputs.complete import CATALOG_KEY as CATALOG  # names a catalog row; completion fills its fields
from stepbudget.inputs.hardware import gpu_node
from stepbudget.inputs.layout import stated_rank_layers
from stepbudget.validation.runs import FSDP_FIELDS, REQUIRED, overlap_dims
from stepbudget.validation.stated import (DP_KINDS, NIC_BUSBW_SHARE, NVLINK_BUSBW_SHARE,
                                          RECOMPUTE_MODES, StatedRun, Unpredictable, attention_kernel_of,
                                          catalog_row, element_bytes_of, flag_of, gpu_of, grad_reduce_precision,
                                          positions_of, stated_memory, text_of)

SHAPE_FIELDS = {"layers": "num_layers", "hidden": "hidden_size", "heads": "num_heads", "vocab": "vocab_size",
                "seq_len": "seq_len"}
"""A run's required model fields -> the scenario's model fields they set (a catalog row fills all but seq_len)."""

MODEL_FIELDS = {**SHAPE_FIELDS, "kv_heads": "num_kv_heads", "head_dim": "head_dim", "ffn_hidden": "ffn_size",
                "activation": "activation", "moe": "moe", "mtp_depth": "mtp_layers",
                "tied_embeddings": "tied_embeddings", "position_embedding": "positions"}
"""Every model field a run may state -> the scenario's model field it sets: what the run states wins over the row."""



# -- what every prediction needs, and the catalog row a model's name finds -------------------------------------

def required(r: StatedRun, sc: dict, notes: list[str]) -> None:
    row = catalog_row(str(r.model.get("name") or ""))
    known = row.model if row else {}  # a row's shape, never a training seq_len (inputs/catalog.py)
    missing = [f"{sec}.{name}" for sec, names in REQUIRED.items() for name in names
               if r.whole[sec].get(name) is None and not (sec == "model" and known.get(SHAPE_FIELDS[name]))]
    if not _batch_stated(r.layout):
        missing.append("layout.global_batch_seqs")
    if missing:
        raise Unpredictable(f"not stated in the source: {', '.join(missing)}")
    name = str(r.model.get("name", ""))
    sc.update(name=r.whole["id"], description=name, source=str((r.whole.get("source") or {}).get("document", "")))


def catalog_model(r: StatedRun, sc: dict, notes: list[str]) -> None:
    row = catalog_row(str(r.model.get("name") or ""))
    if row is None:
        return
    # the row fills every model field the run leaves unstated, and only those (inputs/complete.py ``_fill``)
    sc.setdefault("model", {})[CATALOG] = row.key
    stated = {field for name, field in MODEL_FIELDS.items() if r.model.get(name) is not None}
    filled = sorted(k for k in row.model if k not in stated | {"name", "source"})
    if filled:
        notes.append(f"model fields the run leaves unstated from the catalog row {row.key}: {', '.join(filled)}")


def _named_row(sc: dict):
    """The catalog row the scenario's model section names, else None."""
    model = sc.get("model", {})
    return catalog_row(model[CATALOG]) if model.get(CATALOG) else None


def _row_field(sc: dict, field: str) -> Any:
    """The model ``field`` as the scenario will have it: set by a rule, else the catalog row's (which completion
    fills in, inputs/complete.py), else None."""
    model = sc.get("model", {})
    if field in model:
        return model[field]
    row = _named_row(sc)
    return row.model.get(field) if row else None


def _from_row(sc: dict, field: str) -> bool:
    """Whether the catalog row the model names gives ``field`` (rules leave it for completion to fill)."""
    row = _named_row(sc)
    return row is not None and field in row.model


# -- the model and the cluster ---------------------------------------------------------------------------------

PROXY_LAYERS = r"\([^)]*?\b(\d+)(?:\s+of\s+\d+)?\s+layers?\b[^)]*\)"
"""A note in a model's name that gives the layers a proxy of it runs: "(proxy: 32 layers)", "(recipe proxy, 8 of
126 layers)" (the DGX Cloud recipes' and MLPerf's reduced-depth configs)."""


def model_shape(r: StatedRun, sc: dict, notes: list[str]) -> None:
    m, model = r.model, sc.setdefault("model", {})
    model["name"] = str(m.get("name", "model"))
    # each stated, or from the catalog row (required() saw one of them has it)
    model.update({field: m[name] for name, field in SHAPE_FIELDS.items() if m.get(name) is not None})
    proxy = re.search(PROXY_LAYERS, model["name"], re.IGNORECASE)
    if m.get("layers") is None and proxy:  # "Llama 3.1 405B (proxy: 32 layers)": that model with 32 layers
        model["num_layers"] = int(proxy.group(1))
        notes.append(f"layers from the model's name: {proxy.group(1)} (a proxy of its catalog row)")
    if m.get("kv_heads"):
        model["num_kv_heads"] = m["kv_heads"]
    if m.get("head_dim"):
        model["head_dim"] = m["head_dim"]


def ffn(r: StatedRun, sc: dict, notes: list[str]) -> None:
    m, model = r.model, sc.setdefault("model", {})
    if m.get("ffn_hidden"):
        model["ffn_size"] = m["ffn_hidden"]
    elif not _from_row(sc, "ffn_size"):
        model["ffn_size"] = 4 * model["hidden_size"]
        notes.append("FFN width 4h (GPT) assumed")
    stated = text_of(m.get("activation"))
    if stated:  # a gated MLP has three matrices (SwiGLU; GeGLU: the same FLOPs, another gate), others two
        model["activation"] = "swiglu" if re.search(r"swiglu|geglu|\bglu\b|gated", stated) else "gelu"
    elif not _from_row(sc, "activation"):
        model["activation"] = "gelu"
        notes.append("activation not stated: a two-matrix GeLU MLP")


def moe(r: StatedRun, sc: dict, notes: list[str]) -> None:
    m = r.model
    if not isinstance(m.get("moe"), dict):
        return
    mo = m["moe"]
    out = sc.setdefault("model", {}).setdefault("moe", {})  # a catalog row's block fills what the run leaves out
    out.update({k: v for k, v in (("num_experts", mo.get("num_experts")), ("top_k", mo.get("top_k")),
                                  ("expert_ffn_size", mo.get("expert_ffn_hidden")),
                                  ("shared_experts", mo.get("shared_experts")),
                                  ("node_limit", mo.get("node_limit")), ("balance", mo.get("balance")),
                                  ("expert_load", mo.get("expert_load")),
                                  ("capacity_factor", mo.get("capacity_factor")),
                                  ("pad_to_capacity", mo.get("pad_to_capacity"))) if v is not None})
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
    # the operator model's rate (convert.py's doc)
    sc.setdefault("cluster", {}).update(
        gpu=stated_memory(gpu, hw, notes), gpus=r.whole["num_gpus"], achieved_flops=None, achieved_fraction=None,
        rate_scope="kernel", nvlink_efficiency=NVLINK_BUSBW_SHARE, nic_efficiency=NIC_BUSBW_SHARE)


def node(r: StatedRun, sc: dict, notes: list[str]) -> None:
    """The node's size, NVLink and NICs as the run states them; what it leaves out is its GPU's node's
    (inputs/gpus.yaml, filled by completion), named in the notes."""
    hw, cl = r.hardware, sc.setdefault("cluster", {})
    if hw.get("gpus_per_node"):
        cl["gpus_per_node"] = hw["gpus_per_node"]
    if hw.get("nics_per_node"):
        cl["nics_per_node"] = hw["nics_per_node"]  # a stated count at the row's NIC rate (a stated rate is per GPU)
    if hw.get("nvlink_bw_gbps"):
        cl["nvlink_Bps"] = f"{hw['nvlink_bw_gbps'] / 2}GB/s"  # the file's figure is the datasheet total
    shipped = gpu_node(gpu_of(hw)) or {}  # every GPU gpu_of names has its node (tests/inputs/test_hardware.py)
    if hw.get("nic_gbps_per_gpu"):
        # one NIC per GPU: the rate a run states is each GPU's (runs.py schema)
        cl.update(nics_per_node=hw.get("gpus_per_node") or shipped.get("gpus_per_node", 8),
                  nic_Bps=f"{hw['nic_gbps_per_gpu']}Gb/s")
    unstated = [what for what, key in (("NVLink", "nvlink_bw_gbps"), ("NIC", "nic_gbps_per_gpu")) if not hw.get(key)]
    if unstated:
        notes.append(f"{' and '.join(unstated)} not stated: {shipped.get('source', 'the GPU row')}")


# -- degrees and the pipeline ----------------------------------------------------------------------------------

def fsdp_degrees(lay: dict, rest: int) -> tuple[int, int] | None:
    """(FSDP degree, pure-DP degree) of a run that states JAX-style sharding (``fsdp`` beside ``dp``, or MaxText's
    ici/dcn FSDP and data degrees), None where it states none. ``rest`` is the GPUs over TP x CP x PP: the part a
    run leaves out is what remains of it."""
    if all(lay.get(name) is None for name in FSDP_FIELDS):
        return None
    # MaxText base.yml: the mesh's fsdp axis is ici_fsdp_parallelism x dcn_fsdp_parallelism, its data axis
    # ici_data_parallelism x dcn_data_parallelism (each 1 where a run leaves it out)
    fsdp = lay.get("fsdp") or (lay.get("ici_fsdp_parallelism") or 1) * (lay.get("dcn_fsdp_parallelism") or 1)
    stated_dp = lay.get("dp") if isinstance(lay.get("dp"), int) else None
    data = [lay.get("ici_data_parallelism"), lay.get("dcn_data_parallelism")]
    if stated_dp is not None and lay.get("fsdp") is not None:
        pure = stated_dp  # `fsdp: N` beside `dp: M`: M is the pure-DP part
    elif any(d is not None for d in data):
        pure = (data[0] or 1) * (data[1] or 1)
    else:
        pure = max(rest // fsdp, 1)
    return fsdp, pure


def degrees(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay = r.layout
    tp, pp = lay["tp"], lay["pp"]
    cp = lay.get("cp") or 1
    if lay.get("sp_attention"):
        cp = lay["sp_attention"]  # MegaScale-MoE: attention split over the sequence on the EP ranks
        notes.append(f"SP attention {cp} as CP {cp}")
    sharded = fsdp_degrees(lay, r.whole["num_gpus"] // (tp * cp * pp))
    dp = lay.get("dp")
    if sharded:
        dp = sharded[0] * sharded[1]  # the data-parallel degree is FSDP x pure DP
    elif not isinstance(dp, int):
        dp = r.whole["num_gpus"] // (tp * cp * pp)  # every GPU is in one TP x CP x PP x DP grid
        said = "not stated" if "dp" not in lay else "not a number in the source"
        notes.append(f"DP {said}: {dp} from the GPU count")
    ep = lay.get("ep") or 1
    if (r.model.get("moe") or _row_field(sc, "moe")) and not lay.get("ep"):
        notes.append("EP not stated: experts sharded by TP")
    sc.setdefault("layout", {}).update(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep)


def cp_and_expert_kinds(r: StatedRun, sc: dict, notes: list[str]) -> None:
    sp_attention, out = r.layout.get("sp_attention"), sc.setdefault("layout", {})
    if out["cp"] > 1 and not sp_attention and r.megatron:
        out["cp_kind"] = "ring"  # Megatron-Core context parallelism: K,V blocks passed around a ring (P2P)
    if out["ep"] > 1 and not sp_attention:
        out["expert_tp"] = 1


def _stage_counts(lay: dict, layers: int, pp: int, slots: tuple[bool, bool] = (False, False)) -> list[int]:
    """Layer slots per pipeline rank as the run splits them (an even split of the layers and the embedding and
    loss slots the run counts, or its uneven first/last or per-stage counts: inputs/layout.py
    ``stated_rank_layers``), [] where they do not split into whole slots."""
    first, last, listed = _uneven_split(lay)
    if isinstance(listed, list):
        listed = [n for n in listed if isinstance(n, int)]
        return list(stated_rank_layers(layers, pp, None, None, listed)) if listed else []
    first, last = (n if isinstance(n, int) else None for n in (first, last))
    if first is None and last is None:
        layers += sum(slots)  # Megatron's --account-for-embedding/loss-in-pipeline-split: one slot each
    ranks = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    if rest < 0 or (ranks and rest % ranks) or (not ranks and rest):
        return []
    return list(stated_rank_layers(layers, pp, first, last, None))


def _shallowest_depth(counts: list[int], lay: dict) -> int:
    """The fewest chunks per rank (>= 2) every rank's slots divide into; a per-stage list of pp*v entries
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
        return  # an even split
    out = sc.setdefault("layout", {})
    out.update({k: v for k, v in (("first_stage_layers", first), ("last_stage_layers", last),
                                  ("stage_layers", listed)) if v is not None})
    for split in ("embedding_in_pipeline_split", "loss_in_pipeline_split"):
        if r.layout.get(split) is None:  # an uneven split places the embedding and loss itself (layout.py)
            out[split] = False


SPLIT_NAMES = {"embedding_in_pipeline_split": "account_for_embedding_in_pipeline_split",
               "loss_in_pipeline_split": "account_for_loss_in_pipeline_split"}
"""The scenario's pipeline-slot flags -> Megatron-LM's names for them (arguments.py
``--account-for-embedding-in-pipeline-split``, ``--account-for-loss-in-pipeline-split``); a run may use either."""


def pipeline_split(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay, out = r.layout, sc.setdefault("layout", {})
    said = False
    for split, megatron in SPLIT_NAMES.items():
        stated = lay.get(split) if lay.get(split) is not None else lay.get(megatron)
        if stated is not None:
            out[split] = flag_of(stated)
            said = True
    if said or any(n is not None for n in _uneven_split(lay)):
        return
    # unstated: where the layers (with MTP) do not split over the stages but do once the embedding and the loss
    # take a slot each, the run split them that way (Megatron-LM --account-for-embedding/loss-in-pipeline-split)
    slots, stages = _layer_slots(r, sc), lay["pp"] * (lay.get("virtual_pipeline_chunks_per_rank") or 1)
    if slots % stages and not (slots + 2) % stages:
        out.update(embedding_in_pipeline_split=True, loss_in_pipeline_split=True)
        notes.append(f"pipeline split not stated: {slots} layers split over {stages} stages once the embedding and "
                     "the loss take a slot each")


def _layer_slots(r: StatedRun, sc: dict) -> int:
    """The transformer and MTP layers the pipeline splits (each as stated, else the catalog row's)."""
    return int(_row_field(sc, "num_layers") or 0) + int(_row_field(sc, "mtp_layers") or 0)


def schedule(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay, out = r.layout, sc.setdefault("layout", {})
    stated = text_of(lay.get("schedule"))
    v = lay.get("virtual_pipeline_chunks_per_rank")
    if "dualpipe" in stated:
        out.update(schedule="dualpipe", virtual_stages=1)
    elif (v or 1) > 1 or "interleaved" in stated:
        # unstated depth: the shallowest interleaving (v >= 2) the stages' layer slots divide into
        slots = (bool(out.get("embedding_in_pipeline_split")), bool(out.get("loss_in_pipeline_split")))
        counts = _stage_counts(lay, _layer_slots(r, sc), lay["pp"], slots)
        out.update(schedule="interleaved-1f1b", virtual_stages=v or _shallowest_depth(counts, lay))
        if not v:
            notes.append(f"interleaving depth not stated: v = {out['virtual_stages']}")
    else:
        out.update(schedule="1f1b", virtual_stages=1)


# -- batch, memory, rank order and precision -------------------------------------------------------------------

def micro_batch(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay, out = r.layout, sc.setdefault("layout", {})
    local = lay.get("batch_size_per_gpu") or lay.get("batch_size_per_dp")
    accum = lay.get("grad_accum") or 1
    if lay.get("micro_batch"):
        out["micro_batch"] = lay["micro_batch"]
    elif local and lay["pp"] == 1 and local % accum == 0:
        # no pipeline: a rank runs its local batch as grad_accum micro-batches (one where none is stated)
        out["micro_batch"] = local // accum
        notes.append(f"micro-batch not stated: the local batch {local} over {accum} accumulation step(s)")
    else:
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
    if not stated and r.recipe_holds("layout.recompute"):
        return  # the recipe gives it
    sc.setdefault("layout", {})["recompute"] = next(
        (mode for pattern, mode in RECOMPUTE_MODES if re.search(pattern, stated)), "none")


def compiled(r: StatedRun, sc: dict, notes: list[str]) -> None:
    """torch.compile, as ``layout.compile`` states it or the framework names it (not "no torch.compile", not eager)."""
    stated = r.layout.get("compile")
    fw = r.framework.lower()
    named = bool(re.search(r"torch\.compile", fw)) and not re.search(r"\b(no|without)\s+torch\.compile|\beager\b", fw)
    if (flag_of(stated) if stated is not None else named):
        sc.setdefault("layout", {})["compiled"] = True  # Inductor's partitioner recomputes pointwise results


def _zero_text(lay: dict) -> str:
    """What the run says of its ZeRO stage and DP type, as one text."""
    return (text_of(lay.get("zero_stage")) + " " + text_of(lay.get("dp_type"))).strip()


def stated_dp_kind(lay: dict) -> str | None:
    """The DP sharding a run's ``zero_stage``/``dp_type`` text names (``DP_KINDS``), else FSDP where it states
    JAX-style FSDP degrees, else None."""
    zero = _zero_text(lay)
    kind = next((k for pattern, k in DP_KINDS if re.search(pattern, zero)), None)
    if kind is None and any(lay.get(name) is not None for name in FSDP_FIELDS):
        kind = "fsdp"
    return kind


def dp_kind(r: StatedRun, sc: dict, notes: list[str]) -> None:
    lay, out = r.layout, sc.setdefault("layout", {})
    zero = _zero_text(lay)
    kind = stated_dp_kind(lay)
    recipe_default = r.recipe.default("layout.dp_kind") if r.recipe is not None and kind is None else None
    if recipe_default is not None:
        kind = recipe_default.value  # completion fills the field from the recipe, with its source line
    else:
        if kind is None:
            family = r.family
            kind = family.dp_default
            said = f"not read ({zero[:40]!r})" if zero else "not stated"
            notes.append(f"DP sharding {said}: {kind} ({family.dp_default_source})")
        out["dp_kind"] = kind
    if kind == "fsdp":
        out["reshard_after_forward"] = "not resharded" not in zero
    sharded = fsdp_degrees(lay, r.whole["num_gpus"] // (out["tp"] * out["cp"] * out["pp"]))
    if sharded and lay.get("dp_replicas") is None:
        fsdp, pure = sharded
        if fsdp == 1:
            out["dp_kind"] = "ddp"  # no FSDP axis: every rank keeps the whole state
        elif pure > 1:
            out["dp_replicas"] = pure  # sharded over the FSDP axis, replicated over the data axis (HSDP)
    if lay.get("dp_replicas") is not None:
        out["dp_replicas"] = lay["dp_replicas"]  # HSDP: sharded inside each group, replicated across them


_AXIS = r"\b(?:tp|cp|ep|pp|dp)\b"


def rank_order(r: StatedRun, sc: dict, notes: list[str]) -> None:
    out = sc.setdefault("layout", {})
    stated = r.layout.get("order")
    # the first run of axis names, innermost first ("tp-cp-ep-dp-pp", "[TP, CP, PP, DP]"); words after it are prose
    listed = re.search(rf"{_AXIS}(?:[\s,>/\[\]-]+{_AXIS})*", text_of(stated))
    named = re.findall(_AXIS, listed.group(0)) if listed else []
    # ep is optional: EP's ranks are carved from the TP x CP x DP ranks where the order puts it (inputs/layout.py
    # checks it sits next to dp); an order without it puts it right inside dp
    if sorted(a for a in named if a != "ep") == ["cp", "dp", "pp", "tp"] and named.count("ep") <= 1:
        out["order"] = named
        return
    if stated:
        notes.append("rank order not read: name tp, cp, pp and dp once each (ep at most once)")
    if r.megatron:  # the framework's layout
        out["order"] = ["tp", "cp", "ep", "dp", "pp"]  # Megatron-Core parallel_state: order="tp-cp-ep-dp-pp"
    if not stated:
        notes.append("rank order not stated: " + ("Megatron-Core's tp-cp-ep-dp-pp" if r.megatron
                                                   else "the tool's default (inputs/complete.py)"))


def _batch_stated(lay: dict) -> bool:
    tokens = lay.get("global_batch_tokens")
    return bool(lay.get("global_batch_seqs") or (isinstance(tokens, int) and not isinstance(tokens, bool))
                or lay.get("batch_size_per_dp") or lay.get("batch_size_per_gpu")
                or (lay.get("micro_batch") and lay.get("grad_accum")))


def batch(r: StatedRun, sc: dict, notes: list[str]) -> None:
    """The global batch in sequences: as printed, else the tokens over the sequence length, else the local batch
    times the data-parallel degree (times the gradient accumulation steps where stated)."""
    lay, out = r.layout, sc["layout"]
    seq_len, dp = r.model.get("seq_len"), out["dp"]
    tokens = lay.get("global_batch_tokens")
    if lay.get("global_batch_seqs"):
        seqs = lay["global_batch_seqs"]
    elif isinstance(tokens, int) and seq_len:
        if tokens % seq_len:
            raise Unpredictable(f"layout.global_batch_tokens: {tokens:,} tokens is not a whole number of "
                                f"{seq_len:,}-token sequences")
        seqs = tokens // seq_len
        notes.append(f"global batch {seqs:,} sequences from global_batch_tokens")
    elif lay.get("batch_size_per_dp"):
        seqs = lay["batch_size_per_dp"] * dp  # per DP replica (Llama 3 Table 4's "Batch size/DP")
        notes.append(f"global batch {seqs:,} sequences: batch_size_per_dp x DP {dp}")
    elif lay.get("batch_size_per_gpu"):
        # what each data-parallel rank takes per micro-step (fms-fsdp's batch_size, MaxText's per_device_batch_size
        # with TP 1), times the accumulation steps where the source states them
        accum = lay.get("grad_accum") or 1
        seqs = lay["batch_size_per_gpu"] * accum * dp
        notes.append(f"global batch {seqs:,} sequences: batch_size_per_gpu x grad_accum {accum} x DP {dp}")
    else:
        seqs = lay["micro_batch"] * lay["grad_accum"] * dp  # per-rank micro-batch x accumulation x DP
        notes.append(f"global batch {seqs:,} sequences: micro_batch x grad_accum x DP {dp}")
    sc["batch"] = {"global_batch_seqs": seqs}


def gemm_precision(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if "fp8" in text_of(r.layout.get("precision")):
        sc.setdefault("precision", {})["gemm"] = "fp8"


def tensor_precisions(r: StatedRun, sc: dict, notes: list[str]) -> None:
    """The precisions a run states for the MoE dispatch and combine, the activations saved for backward and the
    optimizer's moments (DeepSeek-V3 3.3: FP8 dispatch with 1x128 scales, BF16 combine, FP8-cached activations,
    BF16 AdamW moments); unstated, each stays the scenario's default (BF16; FP32 moments)."""
    lay, out = r.layout, sc.setdefault("precision", {})
    for name, field in (("dispatch_precision", "dispatch"), ("combine_precision", "combine"),
                        ("saved_activations_precision", "saved_activations")):
        if lay.get(name) is not None:
            out[field] = element_bytes_of(lay[name])  # runs.py checked it names one precision
    moments = element_bytes_of(lay.get("optimizer_moments")) if lay.get("optimizer_moments") is not None else None
    if moments is not None:
        out["optimizer_bytes"] = 4 + 2 * moments  # FP32 master weights and Adam's two moments (ZeRO's K)


def grad_reduce(r: StatedRun, sc: dict, notes: list[str]) -> None:
    stated = r.layout.get("grad_reduce")
    reduce = grad_reduce_precision(stated)
    if reduce is None and r.recipe_holds("precision.grads"):
        if stated:
            notes.append(f"gradient reduction {stated!r} not read: the framework recipe's kept")
        return  # the recipe gives it (convert.py's doc)
    if reduce is None and stated:
        notes.append(f"gradient reduction {stated!r} not read: the framework's default kept")
    elif reduce is None:
        notes.append("gradient reduction not stated: " + ("FP32 (Megatron-LM's)" if r.megatron
                                                          else "in the gradients' precision (the tool's default)"))
    if reduce == "fp32" or (r.megatron and reduce is None):
        # Megatron-LM arguments.py: "bfloat16 requires gradient accumulation and all-reduce to be done in fp32";
        # other frameworks say so in layout.grad_reduce (PyTorch FSDP's reduce_dtype), and a Megatron-family run
        # whose optimizer reduces in BF16 says that (NeMo's distributed_fused_adam, grad_sync_dtype: bf16)
        sc.setdefault("precision", {})["grads"] = "fp32"
    elif reduce == "bf16":
        sc.setdefault("precision", {})["grads"] = "bf16"


# -- what the framework overlaps and how it sends (convert.py's doc) -------------------------------------------

def framework_recipe(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if r.recipe is not None:
        sc["framework"] = r.recipe.key  # its documented defaults fill what the run leaves unstated (inputs/recipes.py)


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
        said = "dp/pp overlap" in text_of(r.whole.get("notes"))
        if said:
            ov.update(pp="auto", dp="auto")  # the run's notes say it used MegaScale's DP/PP overlap
        if r.recipe is not None:
            return  # what else it overlaps is its recipe's (convert.py's doc)
        ov.update(tp=0.0, cp=0.0, ep=0.0)
        if not said:
            ov.update(pp=0.0, dp=0.0)
        if r.layout.get("overlap") is None:
            notes.append("overlap not stated: none (Megatron-LM's default flags, as MegaScale's baseline ran)")
    elif r.layout.get("overlap") is None:
        notes.append("overlap not stated: the tool's defaults (DP and PP in the windows the schedule leaves)")


def stated_overlap(r: StatedRun, sc: dict, notes: list[str]) -> None:
    if r.layout.get("overlap") is None:
        return
    # what the run's source says its framework overlaps: model-parallel collectives fused or hidden whole, DP and
    # PP hidden in the windows the schedule leaves them (the model's own default). A dimension the list leaves out is
    # one the source is silent on: it keeps the framework's default (framework_overlap) or the tool's
    listed = set(overlap_dims(r.layout["overlap"]))
    ov = sc.setdefault("overlap", {})
    ov.update({d: 1.0 if d in ("tp", "cp", "ep") else "auto" for d in listed})
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


HOPPER = ("h100", "h200", "h800")
TORCHTITAN_FLASH2 = ((2024, 10, 22), (2025, 10, 9))
"""The torchtitan builds (by date, first included, last not) that ran FlashAttention-2 on Hopper. From
pytorch#138522 (2024-10-22; 2.5.1) PyTorch's SDPA tries cuDNN last, and at 9dec370 (2024-12-26) torchtitan's model
called F.scaled_dot_product_attention in that order (a 2.6 nightly of 2024-12-04 gave 329 TFLOP/s there against
cuDNN's 631 on H100, pytorch#142132) and its CP chose [FLASH_ATTENTION, EFFICIENT_ATTENTION] (torchtitan/utils.py:214);
from 3b85aa31f (2025-05-14) its wrapper put cuDNN first on capability 10.0 (Blackwell) only; 6a3a9da (2025-10-09,
"Refactor attention", torchtitan/models/attention.py) put it first on every GPU, as the recipe's version does.
Earlier builds are left to the recipe: PyTorch tried cuDNN first on H100 for part of 2024 (pytorch#125343, as
2.5.0 shipped), and the runs that old here name no build."""


def _dated(r: StatedRun, project: str) -> tuple[int, int, int]:
    """The date of ``project``'s build the run's source names (``torchtitan 9dec370 (2024/12/26)``), or the
    latest date there is when it names none: the recipe's own version then holds."""
    found = re.search(rf"{project}\s+[0-9a-f]+\s*\((\d{{4}})[/-](\d{{2}})[/-](\d{{2}})\)",
                      str((r.whole.get("source") or {}).get("versions") or ""))
    return (int(found[1]), int(found[2]), int(found[3])) if found else (9999, 12, 31)


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
    elif "torchtitan" in fw and gpu_of(r.hardware).startswith(HOPPER) and (
            TORCHTITAN_FLASH2[0] <= _dated(r, "torchtitan") < TORCHTITAN_FLASH2[1]):
        out["attention_kernel"] = "flash-attention-2"
        notes.append("attention kernel not stated: FlashAttention-2 (torchtitan before 6a3a9da, 2025-10-09, ran SDPA "
                     "with FlashAttention-2 first on Hopper: PyTorch's order, cuDNN last since pytorch#138522, then its "
                     "own [FLASH, EFFICIENT, MATH]; cuDNN first came with 6a3a9da)")


def comm_sms(r: StatedRun, sc: dict, notes: list[str]) -> None:
    sms = re.search(r"(\d+)\s+of\s+(\d+)\s+SMs", str(r.layout.get("comm") or ""))
    if sms and 0 < int(sms.group(1)) <= int(sms.group(2)):  # else not a share: the default stands
        sc.setdefault("overlap", {})["comm_sm_share"] = int(sms.group(1)) / int(sms.group(2))


# -- the measured step -----------------------------------------------------------------------------------------

def flops_convention(r: StatedRun, sc: dict, notes: list[str]) -> None:
    sc["flops"] = {"convention": r.convention}  # the run's own count turns its MFU or TFLOP/s into a step
