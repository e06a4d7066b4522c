"""How the job is split over the GPUs, and the batch, precision and overlap settings."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from stepbudget.enums import AttentionKernel, Axis, CPKind, DataParallel, EPKind, Recompute, Schedule
from stepbudget.inputs._types import MAX_COUNT, Count, Degree, ElementBytes, Frozen

DEFAULT_ORDER = (Axis.TP, Axis.CP, Axis.PP, Axis.DP)
StageLayers = Annotated[int, Field(ge=0, le=MAX_COUNT)]
"""Layers of one pipeline stage: 0 or more (a stage may hold only the embedding or the loss)."""
EdgeStageLayers = Annotated[int, Field(ge=1, le=MAX_COUNT)]
"""Layers of the first or last rank in Megatron's uneven split: at least 1 (transformer_config.py refuses 0)."""
def stated_rank_layers(layers: int, pp: int, first: int | None, last: int | None,
                       listed: tuple[int, ...] | list[int] | None) -> tuple[int, ...]:
    """Layers of each pipeline rank under a stated split: a per-stage list's stages j on rank j mod pp (Megatron's
    interleaving order), else the first and last ranks as stated and the others sharing the rest evenly."""
    if listed is not None:
        return tuple(sum(listed[r::pp]) for r in range(pp))
    ranks = pp - (first is not None) - (last is not None)
    middle = (layers - (first or 0) - (last or 0)) // max(ranks, 1)
    return (middle if first is None else first,) + (middle,) * (pp - 2) + (middle if last is None else last,)


MAX_OPTIMIZER_BYTES = 64.0
"""Most optimizer bytes per parameter (ZeRO's K): mixed-precision Adam keeps 12 (FP32 master and two FP32
moments), an FP64 master with FP64 moments 24; 64 leaves room for any optimizer's extra state."""


def shard_groups_split(replicas, tp, cp, dp, ep=1, expert_tp=1, moe=False):
    """Whether ``replicas`` HSDP groups split the DP x CP ranks (and, for an MoE model, an expert's
    DP ranks, tp*cp*dp/(ep*expert_tp)) into shard groups of two or more ranks each; arrays broadcast."""
    groups = [np.asarray(dp) * cp] + ([np.asarray(tp) * cp * dp // (ep * expert_tp)] if moe else [])
    ok = np.asarray(replicas) <= 1
    return ok | np.logical_and.reduce([(g % replicas == 0) & (g >= 2 * replicas) for g in groups])


class Layout(Frozen):
    """Parallel degrees and how each dimension runs. A degree of 1 means the axis is off."""

    tp: Degree = 1
    """Tensor-parallel degree."""
    cp: Degree = 1
    """Context-parallel degree (splits the sequence; 2*cp chunks for causal balance)."""
    pp: Degree = 1
    """Pipeline stages."""
    dp: Degree = 1
    """Data-parallel replicas."""
    ep: Degree = 1
    """Expert-parallel degree; its ranks are taken from the TP x CP x DP ranks."""
    expert_tp: Degree | None = None
    """Tensor-parallel degree inside an expert; defaults to 1 when ep > 1, else tp."""
    virtual_stages: Degree = 1
    """Model chunks per pipeline rank (v); more than 1 needs the interleaved schedule."""
    schedule: Schedule = Schedule.ONE_F_ONE_B
    """Pipeline schedule."""
    dp_kind: DataParallel = DataParallel.ZERO1
    """How the DP group shares model state: ddp, zero1, zero2, zero3, fsdp."""
    dp_replicas: Degree = 1
    """Groups the sharded model state is replicated over (HSDP; torchtitan's dp_replicate, Megatron's
    distributed-optimizer instances): parameters, gradients and optimizer state are sharded inside each
    of the dp*cp/dp_replicas ranks of a group, and one all-reduce per step sums each shard's gradients
    across the groups. 1: one group, the whole DP x CP group (FSDP, ZeRO)."""
    reshard_after_forward: bool = True
    """FSDP only: free gathered parameters after forward and gather them again in backward (ZeRO-3 always does)."""
    dp_bucket_params: float | None = Field(default=None, gt=0, le=MAX_COUNT)
    """DDP and ZeRO-1: parameters per gradient bucket, one collective call each. Default Megatron-Core's
    max(40 M, 1 M x DP ranks) when DP is overlapped, and one bucket for the whole buffer when it is not."""
    sequence_parallel: bool = True
    """Megatron sequence parallelism with TP (same bytes, reduce-scatter + all-gather)."""
    cp_kind: CPKind = CPKind.ALL_GATHER
    """Context-parallel exchange: all-gather of K,V (Llama 3) or ring attention."""
    ep_kind: EPKind = EPKind.ALL_TO_ALL
    """Expert-parallel exchange: all-to-all of each token's k copies; deepep, the same all-to-all with
    one NIC copy per target node that NVLink forwards to the experts there (DeepEP, DeepSeek-V3); or
    all-gather of the EP group's tokens and reduce-scatter of the outputs (MegaScale-MoE: cheaper to
    run, ep/k times the bytes)."""
    recompute: Recompute = Recompute.NONE
    """Activation recomputation: none; selective (the attention core, Korthikanti 2022); full (the whole
    layer); selective-op (torchtitan's per-op policy: every second matmul and the memory-bound operators)."""
    flash_attention: bool = True
    """Fused attention that never stores the s x s scores (FlashAttention): no 5as/h term."""
    compiled: bool = False
    """The model runs under torch.compile (Inductor). Its default partitioner,
    ``functorch.compile.min_cut_rematerialization_partition``, "partitions the joint graph such that the backward
    recomputes the forward": cheap pointwise results are recomputed rather than saved, so a layer keeps neither
    its norms' outputs nor its MLP's pointwise product (memory only: the recompute is fused into kernels that run
    anyway)."""
    attention_kernel: AttentionKernel = AttentionKernel.BEST
    """Which fused attention kernel: the GPU's best (gpus.yaml), flash-attention-2 (PyTorch SDPA's
    flash backend, or the flash-attn 2 package, on Hopper) or flash-attention-1."""
    micro_batch: Degree = 1
    """Sequences per micro-batch (b)."""
    order: tuple[Axis, ...] = DEFAULT_ORDER
    """Rank order, innermost (fastest-varying) first. Default [tp, cp, pp, dp] (Llama 3 3.3.2). ep, optional,
    sits next to dp (pp may sit between them): the expert ranks are carved out of each pipeline stage's
    TP x CP x DP ranks, expert TP, EP and expert DP where the order puts TP, EP and DP (Megatron-Core's
    default [tp, cp, ep, dp, pp]); an order without ep puts it right inside dp."""
    dp_ring: Literal["hierarchical", "flat", "tree", "in-network"] = "hierarchical"
    """How a DP group that shares nodes runs its ring: hierarchical/multi-channel (NVLink inside
    the node, 1/g of the bytes on each NIC) or flat (every ring neighbour on another node: all
    bytes on the NIC, the chapter's pure-DP assumption)."""
    embedding_in_pipeline_split: bool = False
    """Count the embedding as one layer slot of the first stage (Megatron flag of that name)."""
    loss_in_pipeline_split: bool = False
    """Count the LM head and loss as one layer slot of the last stage (Megatron flag)."""
    first_stage_layers: EdgeStageLayers | None = None
    """Transformer layers of the first pipeline rank, all its chunks together (Megatron's
    ``decoder_first_pipeline_num_layers``); the ranks without a stated count split the rest evenly.
    null: an even split."""
    last_stage_layers: EdgeStageLayers | None = None
    """Transformer (and MTP) layers of the last pipeline rank, all its chunks together (Megatron's
    ``decoder_last_pipeline_num_layers``). null: an even split."""
    stage_layers: tuple[StageLayers, ...] | None = None
    """Layers of every pipeline stage, first to last (torchtitan's per-stage lists, Megatron's
    ``pipeline_model_parallel_layout``): pp*virtual_stages entries, virtual stage j on rank j mod pp,
    or pp entries, one per rank; they add up to the model's layers plus its MTP layers. null: an even split."""

    @field_validator("dp_bucket_params")
    @classmethod
    def _whole_parameter(cls, v: float | None) -> float | None:
        # a bucket of a fraction of a parameter is no bucket: 5e-324 would make the calls per step infinite
        if v is not None and v < 1:
            raise ValueError(f"layout.dp_bucket_params: {v:g} parameters per bucket; give at least 1, e.g. 40e6")
        return v

    @field_validator("order")
    @classmethod
    def _order_is_permutation(cls, v: tuple[Axis, ...]) -> tuple[Axis, ...]:
        got = f"[{', '.join(v)}]"
        if sorted(a for a in v if a != Axis.EP) != sorted(DEFAULT_ORDER) or v.count(Axis.EP) > 1:
            raise ValueError(f"layout.order: list tp, cp, pp and dp once each and ep at most once, innermost first, "
                             f"e.g. [tp, cp, pp, dp] or [tp, cp, ep, dp, pp]; got {got}")
        # ep and dp adjacent: Megatron-Core's RankGenerator carves EP out of DP ("The ep and dp must be adjacent
        # in order", parallel_state.py before MoE parallel folding); pp between them is its tp-cp-ep-pp-dp
        beside = [a for a in v if a != Axis.PP]
        if Axis.EP in beside and abs(beside.index(Axis.EP) - beside.index(Axis.DP)) != 1:
            raise ValueError(f"layout.order: {got} puts ep away from dp; put ep next to dp, whose ranks it is "
                             "carved from, e.g. [tp, cp, ep, dp, pp]")
        return v

    @model_validator(mode="after")
    def _schedule_fits(self) -> "Layout":
        if self.virtual_stages > 1 and self.schedule != Schedule.INTERLEAVED_1F1B:
            raise ValueError(
                f"layout.virtual_stages: {self.virtual_stages} chunks per rank need schedule interleaved-1f1b "
                f"(got {self.schedule}); set virtual_stages=1 or schedule=interleaved-1f1b"
            )
        if self.schedule == Schedule.INTERLEAVED_1F1B and self.virtual_stages < 2:
            raise ValueError("layout.virtual_stages: interleaved-1f1b needs virtual_stages >= 2")
        if self.schedule == Schedule.DUALPIPE and self.pp % 2:
            raise ValueError(f"layout.pp: DualPipe needs an even number of stages, got pp = {self.pp}")
        return self

    @model_validator(mode="after")
    def _split_is_one_kind(self) -> "Layout":
        # Megatron refuses uneven first/last stages beside the embedding/loss slots (transformer_block.py
        # get_num_layers_to_build), and an explicit list leaves nothing for first/last to say
        uneven = self.first_stage_layers is not None or self.last_stage_layers is not None
        flags = self.embedding_in_pipeline_split or self.loss_in_pipeline_split
        if (uneven or self.stage_layers is not None) and flags:
            field = "stage_layers" if self.stage_layers is not None else "first_stage_layers"
            raise ValueError(f"layout.{field}: an uneven split places the embedding and loss itself; set "
                             "embedding_in_pipeline_split and loss_in_pipeline_split to false")
        if uneven and self.stage_layers is not None:
            raise ValueError("layout.stage_layers: give either stage_layers or first_stage_layers/last_stage_layers, "
                             "not both")
        return self

    @property
    def uneven_split(self) -> bool:
        """Whether the layout states its own split of the layers over the stages."""
        return self.stage_layers is not None or self.first_stage_layers is not None or self.last_stage_layers is not None

    @property
    def expert_tp_degree(self) -> int:
        return self.expert_tp if self.expert_tp is not None else (1 if self.ep > 1 else self.tp)


class Batch(Frozen):
    """The global batch of one optimizer step: give sequences or tokens."""

    global_batch_seqs: Count | None = None
    """Sequences per step."""
    global_batch_tokens: Count | None = None
    """Tokens per step (must be a whole number of sequences)."""

    @model_validator(mode="after")
    def _one_of(self) -> "Batch":
        if (self.global_batch_seqs is None) == (self.global_batch_tokens is None):
            raise ValueError("batch: give exactly one of global_batch_seqs or global_batch_tokens")
        return self


class Precision(Frozen):
    """Bytes per element of each exchanged tensor ("bf16", "fp32", "fp8" or a number)."""

    params: ElementBytes = 2.0
    """Parameters as all-gathered (BF16)."""
    grads: ElementBytes = 2.0
    """Gradients as reduced over DP (Llama 3 reduce-scatters in FP32: 4)."""
    activations: ElementBytes = 2.0
    """TP, CP and PP activations."""
    dispatch: ElementBytes = 2.0
    """MoE dispatch all-to-all (DeepSeek-V3 FP8 with 1x128 scales: 1.03125)."""
    combine: ElementBytes = 2.0
    """MoE combine all-to-all (BF16)."""
    gemm: Literal["bf16", "fp8"] = "bf16"
    """Which peak the GEMMs run at."""
    saved_activations: ElementBytes = 2.0
    """Bytes per element of activations stored for backward (DeepSeek-V3 caches the inputs of
    its FP8 GEMMs in FP8: 1); scales the whole activation count."""
    grad_buffer: ElementBytes | None = None
    """Bytes per element of the buffer gradients accumulate in over micro-batches (Megatron's
    FP32 main_grad: 4); defaults to ``grads``."""
    optimizer_bytes: float = Field(default=12.0, ge=0, le=MAX_OPTIMIZER_BYTES)
    """Optimizer bytes per parameter, ZeRO's K: FP32 master 4 + Adam moments 4 + 4 = 12
    (DeepSeek-V3 keeps BF16 moments: 8)."""
    master_weights: bool = True
    """K includes a 4-byte FP32 master copy (false: the parameters are their own master)."""

    @property
    def grad_buffer_bytes(self) -> float:
        """Bytes per element of the buffer gradients accumulate in: ``grad_buffer``, else ``grads``."""
        return self.grad_buffer or self.grads


Overlap = float | Literal["auto"]


class OverlapSettings(Frozen):
    """Fraction phi of each dimension's communication that runs behind compute.

    "auto" takes the documented default for the dimension (budget/step.py):
    tp, cp, ep 0 (critical path); pp all but the pipeline fill and drain; dp all but
    the first all-gather and last reduce-scatter of one unit. Hidden time never exceeds compute.
    A stated ep share is taken as overlap within a chunk (MegaScale-MoE's intra- and inter-operator
    overlap) unless ``ep_paired``; DualPipe always pairs.
    """

    tp: Overlap = "auto"
    """Share of TP's exchanges hidden behind compute; auto: 0, on the critical path."""
    cp: Overlap = "auto"
    """Share of CP's exchanges hidden; auto: 0 for the K,V all-gather (ring attention hides its passes)."""
    pp: Overlap = "auto"
    """Share of PP's sends hidden; auto: all but the pipeline's fill and drain."""
    dp: Overlap = "auto"
    """Share of DP's gradient and parameter exchanges hidden; auto: all but the first gather and the last
    reduce of one bucket (MegaScale 3.2)."""
    ep: Overlap = "auto"
    """Share of EP's all-to-all hidden; auto: 0, on the critical path (see ep_paired)."""
    ep_paired: bool = False
    """The EP overlap pairs one micro-batch's forward chunk with another's backward (DualPipe;
    Megatron-Core's ``--overlap-moe-expert-parallel-comm``), so the all-to-all of the warm-up
    forwards and cool-down backwards, which have no partner, stays exposed (pipeline.unpaired_share)."""
    comm_sm_share: float | Literal["auto"] = "auto"
    """Share of the SMs communication kernels hold while they overlap compute (DeepSeek-V3: 20 of 132);
    the hidden time costs compute this share of itself. "auto": the measured average with the
    operator model's rate (plan/derive.py OVERLAP_SM_SHARE), none with a stated rate."""

    @field_validator("tp", "cp", "pp", "dp", "ep")
    @classmethod
    def _fraction(cls, v: Overlap, info: ValidationInfo) -> Overlap:
        if v != "auto" and not 0.0 <= float(v) <= 1.0:
            raise ValueError(f"overlap.{info.field_name}: a fraction within [0, 1] or 'auto', got {v}")
        return v

    @field_validator("comm_sm_share")
    @classmethod
    def _share(cls, v: float | str) -> float | str:
        if v != "auto" and not 0.0 <= float(v) < 1.0:
            raise ValueError(f"overlap.comm_sm_share: a share within [0, 1) or 'auto', got {v}")
        return v


class FlopsConvention(Frozen):
    """Which FLOPs count as the model's (MFU) and how attention is counted."""

    convention: Literal["6N", "causal", "noncausal"] = "causal"
    """6N: Kaplan's 6 x parameters per token, no attention term; causal: Megatron's per-operator count
    with half the score matrix; noncausal: the same with the full matrix (PaLM, nanoGPT)."""
