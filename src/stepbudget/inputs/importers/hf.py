"""A Hugging Face ``config.json``: the model block that a transformers checkpoint ships with.

The file describes the network and nothing else: no GPUs, no layout, no batch, no training sequence length. It is
read as transformers reads it: ``model_type`` picks a config class, and a key the file leaves out takes that
class's default (most often asked about: whether the LM head is tied to the input embedding). The families read
are listed in FAMILIES (another family's shapes are read, and what only its class fixes is left unstated); the keys
not read are listed as ignored, and a value the schema cannot hold is a problem naming the key.

Defaults are those of huggingface/transformers, cited as "transformers FILE @COMMIT" below (FILE under
src/transformers/). Most classes are read at commit 008e574391258935f3ecc3035c882e73bbcac419 (@008e574);
``PretrainedConfig``'s own default at bdf52342d8e725ea54973b3e3593be4717e9c1b0 (@bdf5234), GPT-2's at
1c70522e01cdf5fcc6ebda6c372ee0198d557c53 (@1c70522), Mistral's and DeepSeek-V3's at
001f85b38fb432858ace93f18622f07cec46d874 (@001f85b), Qwen2-MoE's layer rule at
00a3f9386614dde0dc41cf4e9b8d0abd3af0671d (@00a3f93).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from stepbudget.enums import Balance
from stepbudget.inputs.importers._reading import Imported, Reading, integer, json_object, number
from stepbudget.inputs.importers.deepspeed import MARKERS

FORMAT = "Hugging Face config.json"


@dataclass(frozen=True)
class Family:
    """What a ``model_type`` fixes that the file need not state."""

    gated: bool
    """The MLP has gate, up and down matrices (three h x d_ff; stepbudget's swiglu) rather than two."""
    tied: bool
    """transformers' tie_word_embeddings when the key is absent."""
    tied_source: str
    """Where that default is written."""
    learned_positions: bool = False
    """Absolute positions added to the input (GPT-2's wpe) rather than rotary embeddings in every layer."""


FAMILIES: dict[str, Family] = {
    # transformers models/llama/configuration_llama.py @008e574: hidden_act "silu" (LlamaMLP: gate, up, down)
    "llama": Family(True, False, "LlamaConfig tie_word_embeddings=False"),
    # transformers models/mistral/configuration_mistral.py @001f85b: tie_word_embeddings=False
    "mistral": Family(True, False, "MistralConfig tie_word_embeddings=False"),
    # transformers models/mixtral/configuration_mixtral.py @008e574: tie_word_embeddings=False
    "mixtral": Family(True, False, "MixtralConfig tie_word_embeddings=False"),
    # transformers models/qwen2/configuration_qwen2.py @008e574 (Qwen2 and Qwen2.5): tie_word_embeddings=False
    "qwen2": Family(True, False, "Qwen2Config tie_word_embeddings=False"),
    # transformers models/qwen2_moe/configuration_qwen2_moe.py @008e574: tie_word_embeddings=False
    "qwen2_moe": Family(True, False, "Qwen2MoeConfig tie_word_embeddings=False"),
    # transformers models/qwen3/configuration_qwen3.py @008e574: tie_word_embeddings=False
    "qwen3": Family(True, False, "Qwen3Config tie_word_embeddings=False"),
    # transformers models/qwen3_moe/configuration_qwen3_moe.py @008e574: tie_word_embeddings=False
    "qwen3_moe": Family(True, False, "Qwen3MoeConfig tie_word_embeddings=False"),
    # transformers models/deepseek_v2/configuration_deepseek_v2.py @008e574: tie_word_embeddings=False
    "deepseek_v2": Family(True, False, "DeepseekV2Config tie_word_embeddings=False"),
    # transformers models/deepseek_v3/configuration_deepseek_v3.py @001f85b: tie_word_embeddings=False
    "deepseek_v3": Family(True, False, "DeepseekV3Config tie_word_embeddings=False"),
    # transformers models/gemma/configuration_gemma.py @008e574: tie_word_embeddings=True, GemmaMLP gated
    "gemma": Family(True, True, "GemmaConfig tie_word_embeddings=True"),
    # transformers models/gemma2/configuration_gemma2.py @008e574: tie_word_embeddings=True
    "gemma2": Family(True, True, "Gemma2Config tie_word_embeddings=True"),
    # transformers models/gpt2/configuration_gpt2.py @1c70522 sets no tie_word_embeddings: PretrainedConfig's
    # default, configuration_utils.py @bdf5234: kwargs.pop("tie_word_embeddings", True); GPT2MLP c_fc, c_proj
    "gpt2": Family(False, True, "GPT2Config leaves it to PretrainedConfig: tie_word_embeddings=True",
                   learned_positions=True),
    # transformers models/gpt_neox/configuration_gpt_neox.py @008e574: tie_word_embeddings=False, rotary
    "gpt_neox": Family(False, False, "GPTNeoXConfig tie_word_embeddings=False"),
}

_LAYERS, _HIDDEN, _HEADS = ("num_hidden_layers", "n_layer"), ("hidden_size", "n_embd"), ("num_attention_heads", "n_head")
_DEEPSPEED = MARKERS[:4]
"""Keys only a DeepSpeed config has: such a file is that importer's even when it names a model."""

_REASONS = {
    "max_position_embeddings": "the longest sequence the model accepts; the training sequence length is the "
                               "job's: set model.seq_len",
    "n_positions": "GPT-2's position table size; the training sequence length is the job's: set model.seq_len",
    "n_ctx": "GPT-2's context size; the training sequence length is the job's: set model.seq_len",
    "torch_dtype": "the checkpoint's storage type; training precision is the job's",
    "n_group": "the router's expert groups, not mapped: model.moe.node_limit bounds nodes, not groups",
    "topk_group": "groups a token's experts come from, not mapped: model.moe.node_limit bounds nodes, not groups",
    "top_k": "a generation setting", "top_p": "a generation setting", "temperature": "a generation setting",
    "do_sample": "a generation setting", "num_beams": "a generation setting", "max_length": "a generation setting",
}
_DROPOUTS = ("attention_dropout", "hidden_dropout", "attn_pdrop", "resid_pdrop")
"""Dropout on attention scores and layer outputs, whose masks stepbudget counts (model.dropout)."""




def detect(text: str, name: str) -> bool:
    """A JSON object naming a model (``model_type`` or ``architectures``) with a transformer's shape keys."""
    doc = json_object(text)
    if doc is None or not ("model_type" in doc or "architectures" in doc) or any(k in doc for k in _DEEPSPEED):
        return False
    return any(k in doc for k in (*_LAYERS, *_HIDDEN, *_HEADS))


class _Keys:
    """The file's top-level keys, each marked when read, so that the rest are listed as ignored."""

    def __init__(self, doc: dict[str, Any], r: Reading) -> None:
        self.doc, self.r = doc, r
        self.read: set[str] = set()

    def get(self, key: str) -> Any:
        self.read.add(key)
        return self.doc.get(key)

    def first(self, keys: tuple[str, ...]) -> str | None:
        """The first of ``keys`` (one field's spellings across families) the file has."""
        return next((k for k in keys if k in self.doc), None)

    def count(self, key: str | None, dotted: str, zero: bool = False) -> int | None:
        """A whole number > 0 (>= 0 with ``zero``) under ``key``, stated as ``dotted``; else a problem."""
        if key is None or key not in self.doc:
            return None
        value, n = self.get(key), integer(self.doc[key])
        if n is None or n < (0 if zero else 1):
            self.r.problem(key, f"{value!r} is not a whole number {'>= 0' if zero else '> 0'}; give the {key} "
                                f"of the model ({dotted})")
            return None
        self.r.put(dotted, n, key)
        return n

    def rest(self) -> None:
        for key in self.doc:
            if key not in self.read:
                reason = _REASONS.get(key)
                self.r.ignore(f"{key} ({reason})" if reason else key)


def read(text: str, name: str) -> Imported:
    r = Reading(FORMAT)
    try:
        doc = json.loads(text)
    except ValueError as err:
        r.problem(name or "config.json", f"not valid JSON ({err}); give the model's config.json as saved")
        return r.done()
    if not isinstance(doc, dict):
        r.problem(name or "config.json", "not a JSON object; give the model's config.json as saved")
        return r.done()
    k = _Keys(doc, r)
    family = _identity(k)
    _shapes(k, family)
    if family is not None:
        _mlp(k, family)
    _embeddings(k, family)
    _dropout(k)
    _moe(k)
    if k.r.has("model.moe.num_experts"):
        _balance(k)
    _mla(k)
    k.rest()
    return r.done()


def _identity(k: _Keys) -> Family | None:
    """model.name and model.source; the family whose defaults fill what the file leaves out."""
    model_type, arch = k.get("model_type"), k.get("architectures")
    first_arch = arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else None
    named = k.get("_name_or_path")
    if isinstance(named, str) and named:
        k.r.put("model.name", named, "_name_or_path")
    elif first_arch or isinstance(model_type, str):
        k.r.put("model.name", first_arch or model_type, "architectures" if first_arch else "model_type")
    if isinstance(model_type, str):
        k.r.put("model.source", f"Hugging Face config.json (model_type {model_type})", "model_type")
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:  # the shapes are still read; what only the family fixes is left to the scenario
        k.r.ignore(f"model_type ({model_type!r}: no family stepbudget knows ({', '.join(FAMILIES)}), so whether "
                   "the MLP is gated (and, without tie_word_embeddings, whether embeddings are tied) is not stated: set "
                   "model.activation)")
    return family


def _shapes(k: _Keys, family: Family | None) -> None:
    """Layers, width, heads, FFN width and vocabulary, in either spelling (Llama's or GPT-2's)."""
    k.count(k.first(_LAYERS), "model.num_layers")
    hidden = k.count(k.first(_HIDDEN), "model.hidden_size")
    k.count(k.first(_HEADS), "model.num_heads")
    for key, dotted, null in (("num_key_value_heads", "model.num_kv_heads", "one KV head per query head"),
                              ("head_dim", "model.head_dim", "hidden_size / heads")):  # Qwen3, Gemma state it
        if key in k.doc and k.get(key) is None:  # e.g. LlamaConfig.__post_init__ fills both so
            k.r.ignore(f"{key} (null: {null})")
        else:
            k.count(key, dotted)
    if "n_embd" in k.doc or "n_inner" in k.doc:  # GPT-2's spelling of the FFN width
        if k.doc.get("n_inner") is not None:
            k.count("n_inner", "model.ffn_size")
        elif hidden is not None:
            k.get("n_inner")  # transformers models/gpt2/configuration_gpt2.py @1c70522: "None will set it to 4 times n_embd"
            k.r.put("model.ffn_size", 4 * hidden, "n_inner null (GPT-2: 4 x n_embd)")
    else:
        k.count("intermediate_size", "model.ffn_size")
    k.count("vocab_size", "model.vocab_size")
    if family is not None:
        k.r.put("model.positions", "learned" if family.learned_positions else "rotary",
                "model_type (learned absolute positions)" if family.learned_positions else "model_type (RoPE)")


def _mlp(k: _Keys, family: Family) -> None:
    """Three matrices (gate, up, down) or two: the family's MLP, whatever activation sits inside it."""
    named = [a for a in ("hidden_activation", "hidden_act", "activation_function") if k.get(a) is not None]
    said = f"{named[0]} {k.doc[named[0]]}" if named else f"model_type {k.doc['model_type']}"
    if family.gated:  # e.g. LlamaMLP: down(act(gate(x)) * up(x)); silu inside is SwiGLU, gelu_tanh is GeGLU
        k.r.put("model.activation", "swiglu", f"{said} (gated MLP: three matrices)")
    else:  # GPT2MLP c_fc then c_proj; GPTNeoXMLP dense_h_to_4h then dense_4h_to_h
        k.r.put("model.activation", "gelu", f"{said} (two-matrix MLP)")
    if family is FAMILIES["gpt_neox"]:
        if "use_parallel_residual" not in k.doc:  # transformers models/gpt_neox/configuration_gpt_neox.py @008e574
            k.r.put("model.parallel_block", True, "use_parallel_residual absent (GPTNeoXConfig default True)")
        elif isinstance(k.doc["use_parallel_residual"], bool):
            k.r.put("model.parallel_block", k.get("use_parallel_residual"), "use_parallel_residual")
        else:
            k.r.problem("use_parallel_residual", f"{k.get('use_parallel_residual')!r} is not true or false")


def _embeddings(k: _Keys, family: Family | None) -> None:
    if "tie_word_embeddings" not in k.doc:
        if family is not None:
            k.r.put("model.tied_embeddings", family.tied, f"tie_word_embeddings absent ({family.tied_source})")
    elif isinstance(k.doc["tie_word_embeddings"], bool):
        k.r.put("model.tied_embeddings", k.get("tie_word_embeddings"), "tie_word_embeddings")
    else:
        k.r.problem("tie_word_embeddings", f"{k.get('tie_word_embeddings')!r} is not true or false")


def _dropout(k: _Keys) -> None:
    """Dropout is on where any attention or layer-output rate the file states is above 0."""
    rates = {d: k.doc[d] for d in _DROPOUTS if d in k.doc}
    if not rates:
        return
    if not all(number(v) and 0 <= v < 1 for v in rates.values()):
        k.r.problem(", ".join(rates), f"{rates} holds a rate outside [0, 1); give dropout probabilities")
        return
    for d in rates:
        k.get(d)
    k.r.put("model.dropout", any(v > 0 for v in rates.values()), ", ".join(f"{d} {v}" for d, v in rates.items()))


def _moe(k: _Keys) -> None:
    """Routed experts in any family's spelling: Mixtral's, Qwen's or DeepSeek's."""
    key = k.first(("num_local_experts", "num_experts", "n_routed_experts"))
    if key is None or k.doc.get(key) in (None, 0):  # DeepSeek dense: n_routed_experts null; Qwen: 0
        if key is not None:
            k.get(key)
        return
    k.count(key, "model.moe.num_experts")
    k.count("num_experts_per_tok", "model.moe.top_k")
    if key == "num_local_experts":  # Mixtral: every layer's MLP is the experts, each intermediate_size wide
        width = k.count("intermediate_size", "model.moe.expert_ffn_size")
        if width is not None:
            k.r.put("model.ffn_size", width, "intermediate_size (Mixtral: the expert width; no dense layers)")
        return
    k.count("moe_intermediate_size", "model.moe.expert_ffn_size")
    if "n_shared_experts" in k.doc:  # transformers modeling_deepseek_v3.py DeepseekV3MoE: n_shared x moe width
        k.count("n_shared_experts", "model.moe.shared_experts", zero=True)
    elif k.doc.get("shared_expert_intermediate_size"):  # Qwen2MoeSparseMoeBlock: one shared_expert MLP
        k.r.put("model.moe.shared_experts", 1, "shared_expert_intermediate_size (one shared expert)")
        k.count("shared_expert_intermediate_size", "model.moe.shared_ffn_size")
    elif k.doc.get("model_type") == "qwen2_moe" and "shared_expert_intermediate_size" not in k.doc:
        # transformers models/qwen2_moe/configuration_qwen2_moe.py @008e574: shared_expert_intermediate_size=5632
        said = "shared_expert_intermediate_size absent (Qwen2MoeConfig default 5632)"
        k.r.put("model.moe.shared_experts", 1, said)
        k.r.put("model.moe.shared_ffn_size", 5632, said)
    if "first_k_dense_replace" in k.doc:
        k.count("first_k_dense_replace", "model.moe.first_dense_layers", zero=True)
    if "num_nextn_predict_layers" in k.doc:
        k.count("num_nextn_predict_layers", "model.mtp_layers", zero=True)
    if "moe_layer_freq" in k.doc and k.get("moe_layer_freq") != 1:  # DeepSeek-V2: MoE every moe_layer_freq-th layer
        k.r.problem("moe_layer_freq", f"{k.doc['moe_layer_freq']!r}: MoE layers that skip layers; the schema holds "
                                      "leading dense layers only (model.moe.first_dense_layers)")
    if "decoder_sparse_step" in k.doc or "mlp_only_layers" in k.doc:
        _qwen_dense_layers(k)


# DeepSeek's remote modeling_deepseek.py MoEGate: "greedy" and "group_limited_greedy" pick the top-k of the softmax
# scores and add aux_loss_alpha x the balance loss in training (DeepSeek-V2); "noaux_tc" adds a per-expert bias
# (e_score_correction_bias) to the scores that pick the top-k (DeepSeek-V3 2.1.2, auxiliary-loss-free)
_AUX_TOPK = ("greedy", "group_limited_greedy")


def _weight(value: Any) -> bool:
    """A loss coefficient: a number >= 0."""
    return number(value) and value >= 0


def _balance(k: _Keys) -> None:
    """model.moe.balance where a key says how the router was balanced: DeepSeek's topk_method (with aux_loss_alpha),
    else router_aux_loss_coef (Mixtral, Qwen MoE: transformers' load_balancing_loss_func, weighted by it)."""
    method = k.get("topk_method") if "topk_method" in k.doc else None
    if method is not None:
        alpha = k.get("aux_loss_alpha") if "aux_loss_alpha" in k.doc else None
        if alpha is not None and not _weight(alpha):
            k.r.problem("aux_loss_alpha", f"{alpha!r} is not a coefficient >= 0; give the balance loss's weight")
            alpha = None
        if method == "noaux_tc":
            k.r.put("model.moe.balance", Balance.LOSS_FREE.value, "topk_method noaux_tc")
            if alpha:
                k.r.ignore(f"aux_loss_alpha ({alpha:g}: a loss beside the expert bias, which sets the balance)")
        elif method in _AUX_TOPK and alpha:
            k.r.put("model.moe.balance", Balance.AUX_LOSS.value, f"topk_method {method} + aux_loss_alpha {alpha:g}")
        elif method in _AUX_TOPK:
            k.r.ignore(f"topk_method ({method} without aux_loss_alpha > 0: no balance loss stated)")
        elif isinstance(method, str):
            k.r.ignore(f"topk_method ({method!r}: not greedy, group_limited_greedy or noaux_tc; model.moe.balance "
                       "is left to the scenario)")
        else:
            k.r.problem("topk_method", f"{method!r} is not a routing method's name; give greedy, "
                                       "group_limited_greedy or noaux_tc")
        return
    for key in ("router_aux_loss_coef", "aux_loss_alpha"):
        if key not in k.doc:
            continue
        coef = k.get(key)
        if not _weight(coef):
            k.r.problem(key, f"{coef!r} is not a coefficient >= 0; give the balance loss's weight")
        elif coef > 0:
            k.r.put("model.moe.balance", Balance.AUX_LOSS.value, f"{key} {coef:g}")
        else:
            k.r.ignore(f"{key} (0: no balance loss; model.moe.balance is left to the scenario)")
        return


def _qwen_dense_layers(k: _Keys) -> None:
    """Qwen's dense layers: layer i is MoE unless i is in mlp_only_layers or (i + 1) % decoder_sparse_step != 0
    (transformers models/qwen2_moe/modeling_qwen2_moe.py @00a3f93, Qwen2MoeDecoderLayer.__init__); the schema holds
    one leading run of dense layers."""
    step, only, layers = k.get("decoder_sparse_step"), k.get("mlp_only_layers"), k.r.values.get(("model", "num_layers"))
    step = 1 if step is None else integer(step)  # Qwen2MoeConfig / Qwen3MoeConfig default decoder_sparse_step=1
    only = [] if only is None else only  # ... and mlp_only_layers=None -> []
    keys = "decoder_sparse_step, mlp_only_layers"
    if step is None or step < 1 or not isinstance(only, list) or not all(integer(i) is not None for i in only):
        k.r.problem(keys, f"{k.doc.get('decoder_sparse_step')!r}, {k.doc.get('mlp_only_layers')!r}: give a step >= 1 "
                          "and a list of layer numbers")
        return
    if not isinstance(layers, int):
        return
    dense = {n for n in map(integer, only) if n is not None}
    moe = [i for i in range(layers) if i not in dense and (i + 1) % step == 0]
    lead = moe[0] if moe else layers
    if moe != list(range(lead, layers)):
        k.r.problem(keys, f"MoE layers {moe[:8]}{'...' if len(moe) > 8 else ''} of {layers} are not one trailing "
                          "run; the schema holds leading dense layers only (model.moe.first_dense_layers)")
        return
    k.r.put("model.moe.first_dense_layers", lead, f"decoder_sparse_step {step}, mlp_only_layers {sorted(dense)}")


def _mla(k: _Keys) -> None:
    """DeepSeek's multi-head latent attention (DeepseekV2Attention): low-rank query and joint key/value."""
    if "kv_lora_rank" not in k.doc:
        return
    q = k.doc.get("q_lora_rank")
    if q is None and "q_lora_rank" in k.doc:  # DeepSeek-V2-Lite: null means a full-rank q_proj
        k.get("q_lora_rank")
        k.r.put("model.mla.q_lora_rank", 0, "q_lora_rank null (full-rank query projection)")
    else:
        k.count("q_lora_rank", "model.mla.q_lora_rank", zero=True)
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        k.count(key, f"model.mla.{key}")
    v = k.r.values.get(("model", "mla", "v_head_dim"))
    if v is not None and not k.r.has("model.head_dim"):
        k.r.put("model.head_dim", v, "v_head_dim (MLA: the per-head width; hidden_size / heads does not apply)")
