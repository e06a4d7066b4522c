"""The model being trained: shapes that fix parameters, FLOPs and message sizes."""

from __future__ import annotations

from pydantic import Field, model_validator

from stepbudget.enums import Activation, Balance, Positions
from stepbudget.inputs._types import MAX_COUNT, Count, Frozen


class MLA(Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank Q and KV projections."""

    q_lora_rank: int = Field(default=0, ge=0, le=MAX_COUNT)
    """Rank of the query compression; 0 means a full-rank query projection."""
    kv_lora_rank: int = Field(gt=0, le=MAX_COUNT)
    """Rank of the joint key/value compression (512 in DeepSeek-V3)."""
    qk_nope_head_dim: int = Field(gt=0, le=MAX_COUNT)
    """Per-head query/key width without rotary position (128 in DeepSeek-V3)."""
    qk_rope_head_dim: int = Field(gt=0, le=MAX_COUNT)
    """Per-head decoupled rotary width (64 in DeepSeek-V3)."""
    v_head_dim: int = Field(gt=0, le=MAX_COUNT)
    """Per-head value width (128 in DeepSeek-V3)."""


BALANCED_LOAD: dict[Balance, tuple[float, str]] = {
    Balance.AUX_LOSS: (1.52, "Wang et al. 2024 (arXiv 2408.15664) Table 2: MaxVio 0.52 under an auxiliary loss "
                             "(3B model; 0.72 at 1B)"),
    Balance.LOSS_FREE: (1.04, "Wang et al. 2024 (arXiv 2408.15664) Table 2: MaxVio 0.04 under loss-free "
                              "balancing (1B and 3B)"),
}
"""The busiest expert's load over the mean under each balance, as measured (MaxVio = max / mean - 1, over the
validation set), with its source. One dispatch's tokens are far fewer, which adds noise, while a loss computed per
micro-batch pushes against it: state ``expert_load`` where a job measured it."""


class MoE(Frozen):
    """Mixture-of-experts feed-forward layers."""

    num_experts: int = Field(gt=0, le=MAX_COUNT)
    """Routed experts per MoE layer."""
    top_k: int = Field(gt=0, le=MAX_COUNT)
    """Routed experts each token activates."""
    expert_ffn_size: int = Field(gt=0, le=MAX_COUNT)
    """Intermediate width of one routed expert."""
    shared_experts: int = Field(default=0, ge=0, le=MAX_COUNT)
    """Always-active shared experts per MoE layer (1 in DeepSeek-V3)."""
    shared_ffn_size: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    """Intermediate width of one shared expert; defaults to expert_ffn_size."""
    first_dense_layers: int = Field(default=0, ge=0, le=MAX_COUNT)
    """Leading layers that keep a dense FFN (3 in DeepSeek-V3)."""
    node_limit: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    """Most nodes a token is sent to (DeepSeek-V3 node-limited routing: 4)."""
    popularity_skew: float = Field(default=0.0, ge=0, le=16)  # 16: the top expert takes all it can, far past any router
    """Zipf exponent of the experts' popularity within one call (0: none; ``expert_load`` sets the busiest expert
    instead). The busiest GPU's share of the all-to-all then sets its time and its expert GEMMs' (plan/routing.py;
    FAST measured pairs at 12x the median)."""
    balance: Balance = Balance.AUX_LOSS
    """How the router balances the experts' loads: it sets ``expert_load`` where that is not stated."""
    expert_load: float | None = Field(default=None, ge=1, le=MAX_COUNT)
    """Tokens the busiest expert gets in one dispatch over the mean; None: the figure measured under
    ``balance`` (``BALANCED_LOAD``). The GPU holding it waits for it; the rest of the EP group waits for that GPU."""
    capacity_factor: float | None = Field(default=None, gt=0, le=MAX_COUNT)
    """Tokens an expert takes, over the mean, before it drops the rest (Switch Transformer 2.2;
    Megatron-Core's moe_expert_capacity_factor); None: dropless."""
    pad_to_capacity: bool = False
    """Every expert computes and exchanges its full capacity, padded (Megatron-Core's
    moe_pad_expert_input_to_capacity): the load is even, at ``capacity_factor`` times the mean."""

    @property
    def shared_width(self) -> int:
        """Intermediate width of one shared expert: shared_ffn_size if given, else expert_ffn_size."""
        return self.shared_ffn_size or self.expert_ffn_size

    @property
    def busiest_expert_load(self) -> float:
        """Tokens the busiest expert computes in one dispatch over the mean: ``expert_load`` (else the figure
        for ``balance``) capped by the capacity, or the capacity itself when every expert is padded to it."""
        if self.pad_to_capacity and self.capacity_factor is not None:
            return self.capacity_factor
        load = self.expert_load if self.expert_load is not None else BALANCED_LOAD[self.balance][0]
        return load if self.capacity_factor is None else min(load, self.capacity_factor)

    @model_validator(mode="after")
    def _one_routing(self) -> "MoE":
        if self.pad_to_capacity and self.capacity_factor is None:
            raise ValueError("model.moe.pad_to_capacity: padding needs a capacity; set model.moe.capacity_factor "
                             "(1.0 pads each expert to the mean load)")
        if self.popularity_skew > 0 and self.expert_load is not None:
            raise ValueError("model.moe.expert_load: a popularity skew sets the busiest expert itself; give "
                             "expert_load or popularity_skew, not both")
        return self

    @model_validator(mode="after")
    def _top_k_fits(self) -> "MoE":
        if self.top_k > self.num_experts:
            raise ValueError(
                f"model.moe.top_k: top_k = {self.top_k} exceeds num_experts = {self.num_experts}; "
                f"set top_k <= {self.num_experts}"
            )
        return self


class Model(Frozen):
    """Transformer shapes. Symbols in formulas: L, h, a, a_kv, d_ff, V, s."""

    name: str = "model"
    """The model's name in outputs."""
    source: str = ""
    """Where these shapes come from (paper, config file)."""
    num_layers: int = Field(gt=0, le=MAX_COUNT)
    """Transformer layers L."""
    hidden_size: int = Field(gt=0, le=MAX_COUNT)
    """Model width h."""
    num_heads: int = Field(gt=0, le=MAX_COUNT)
    """Query heads a."""
    num_kv_heads: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    """Key/value heads (GQA); defaults to num_heads (MHA)."""
    head_dim: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    """Width of one head; defaults to hidden_size / num_heads."""
    ffn_size: int = Field(gt=0, le=MAX_COUNT)
    """Dense MLP intermediate width d_ff (for MoE models: the dense layers' width)."""
    activation: Activation = Activation.SWIGLU
    """swiglu (three h x d_ff matrices) or gelu (two)."""
    positions: Positions = Positions.ROTARY
    """rotary (a memory-bound pass over Q and K in every layer), learned (added once at the input: GPT-3,
    Megatron-LM's default) or alibi (a bias inside the attention kernel: BLOOM, BloombergGPT); the last two cost
    no per-layer pass."""
    vocab_size: int = Field(gt=0, le=MAX_COUNT)
    """Vocabulary V (padded size if the model pads it)."""
    seq_len: Count
    """Training sequence length s in tokens."""
    tied_embeddings: bool = False
    """Whether the input embedding and the LM head share one matrix."""
    dropout: bool = False
    """Dropout on attention scores and layer outputs (GPT-3/Megatron): its 1-byte masks are stored
    for backward (Korthikanti22 4.1). Llama 3 and DeepSeek-V3 train without dropout."""
    parallel_block: bool = False
    """Attention and MLP read the same normalized input and add into one residual (GPT-J; PaLM 2;
    MegaScale 3.1): one norm, one TP collective pair per layer, and QKV fused with MLP-up and the
    attention output with MLP-down into two GEMMs. Dense MLP and standard attention only."""
    mtp_layers: int = Field(default=0, ge=0, le=MAX_COUNT)
    """Multi-token-prediction modules (DeepSeek-V3: 1): each adds one layer and one LM head
    to the FLOPs and one pipeline slot; their parameters are not counted (as in the 671B figure)."""
    mla: MLA | None = None
    """Latent attention shapes; replaces the GQA projections when set."""
    moe: MoE | None = None
    """Expert layers; a dense model leaves this empty."""

    @model_validator(mode="after")
    def _heads(self) -> "Model":
        kv = self.num_kv_heads or self.num_heads
        if self.num_heads % kv:
            raise ValueError(
                f"model.num_kv_heads: {self.num_heads} query heads cannot be grouped over {kv} KV heads; "
                "use a divisor of num_heads"
            )
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.head_dim: hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}; "
                "set head_dim explicitly"
            )
        if self.mla is not None and self.positions != Positions.ROTARY:
            raise ValueError("model.positions: latent attention carries its own rotary part; leave positions rotary")
        if self.parallel_block and (self.moe is not None or self.mla is not None):
            raise ValueError("model.parallel_block: a parallel block needs a dense MLP and standard attention; "
                             "set it to false for MoE or MLA models")
        if self.moe and self.moe.first_dense_layers > self.num_layers:
            raise ValueError(
                f"model.moe.first_dense_layers: {self.moe.first_dense_layers} exceeds num_layers {self.num_layers}"
            )
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_width(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def mlp_intermediates(self) -> int:
        """Tensors of the FFN width per token between the MLP's GEMMs: SwiGLU gate, up and product; GeLU
        input and output (Korthikanti 4.1)."""
        return 3 if self.activation == Activation.SWIGLU else 2

    @property
    def moe_layers(self) -> int:
        return 0 if self.moe is None else self.num_layers - self.moe.first_dense_layers

