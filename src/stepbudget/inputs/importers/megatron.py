"""Megatron-LM's command-line arguments, from a launch script, an args file or a pasted command line.

Megatron-LM takes its whole job as ``--flag value`` arguments of ``pretrain_gpt.py``; engineers keep them in bash
launch scripts that build them from variables and arrays. The script is read, never run (shell.py): a flag whose
value stays unresolved is listed as ignored with why, never guessed.

Flag semantics are Megatron-LM megatron/training/arguments.py at tag core_v0.15.0 (commit 0d7e02bd26d3eb347ad8d1be
f625002babfa6df7), cited as "arguments.py" below, and megatron/core/transformer/transformer_config.py at that tag
("transformer_config.py"), whose router fields the NeMo and Megatron-Bridge importers read through ``router``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stepbudget.enums import Balance
from stepbudget.inputs.importers._reading import Imported, Reading, integer, number
from stepbudget.inputs.importers.shell import OPERATORS, Script, Shell, Word

FORMAT = "Megatron-LM arguments"

# --- finding the arguments ----------------------------------------------------------------------------------------

_CORE_FLAGS = ("--num-layers", "--hidden-size", "--num-attention-heads", "--tensor-model-parallel-size",
               "--pipeline-model-parallel-size", "--micro-batch-size", "--global-batch-size", "--seq-length")
_FLAG_AT = re.compile(r"(?:^|[\s(])(" + "|".join(re.escape(f) for f in _CORE_FLAGS) + r")(?=[\s=]|$)", re.M)


def _until_operator(words: list[Word]) -> list[Word]:
    end = next((i for i, w in enumerate(words) if w.text in OPERATORS and w.raw == w.text), len(words))
    return words[:end]


def _launch(command: list[Word]) -> tuple[list[Word], list[Word]] | None:
    """(launcher words, the script's arguments) of a command that runs a Python script, looking inside
    ``bash -c "..."`` strings too; None where it runs none."""
    for i, w in enumerate(command):
        if w.text.endswith(".py") and not w.text.startswith("-"):
            return command[:i], _until_operator(command[i + 1:])
        if any(c.isspace() for c in w.text) and ".py" in w.text:
            inner = [found for c in Script().read(w.text).commands if (found := _launch(c))]
            if inner:
                return max(inner, key=lambda f: sum(x.text.startswith("--") for x in f[1]))
    return None


def arguments(text: str) -> tuple[list[Word], list[Word], Script]:
    """The launcher's words and Megatron's argument words that ``text`` runs, and the script as read.

    The launch is the command that runs a ``*.py`` script with the most ``--`` flags; lines of bare flags (an
    args file, a pasted flag list) add to it; a script that launches nothing (a file of variables another script
    sources) gives the variables that hold Megatron flags, in the order it sets them."""
    script = Script().read(text)
    launches = [found for c in script.commands if (found := _launch(c))]
    bare = [w for c in script.commands if c[0].text.startswith("--") for w in _until_operator(c)]
    launcher, args = max(launches[::-1], key=lambda f: sum(w.text.startswith("--") for w in f[1])) if launches \
        else ([], [])
    args = args + bare
    if not args:
        for name in script.shell.order:
            scalar = script.shell.scalars.get(name)
            words = script.shell.arrays[name] if scalar is None else [
                Word(p, p, scalar.known or "$" not in p) for p in scalar.text.split()]
            if any(w.text in _CORE_FLAGS for w in words):
                args += words
    split = [Word(p, w.raw, w.known) for w in args for p in (w.text.split() if w.text.startswith("--") else [w.text])]
    return launcher, [w for w in split if w.text], script


@dataclass
class Args:
    """Flags and their value words; each flag read marks it used, so the rest can be listed as ignored."""

    values: dict[str, list[Word]]
    used: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, words: list[Word]) -> "Args":
        values: dict[str, list[Word]] = {}
        flag = None
        for w in words:
            if w.text.startswith("--") and len(w.text) > 2:
                name, eq, value = w.text.partition("=")
                flag = name
                values[flag] = [Word(value, w.raw, w.known)] if eq else []
            elif flag is not None:
                values[flag].append(w)
        return cls(values)

    def has(self, flag: str) -> bool:
        if flag in self.values:
            self.used.add(flag)
            return True
        return False

    def word(self, flag: str) -> Word | None:
        return self.values[flag][0] if self.has(flag) and self.values[flag] else None


# --- mapping the flags --------------------------------------------------------------------------------------------

def _key(flag: str, w: Word) -> str:
    """The file's key for a value: the flag, with the script's spelling where a variable gave the value."""
    return flag if w.raw == w.text else f"{flag} {w.raw}"


def _unresolved(flag: str, w: Word) -> str:
    """How the ignored list names a flag whose value the script leaves to whoever runs it."""
    why = "not resolved without running the script" if "$(" in w.raw or "`" in w.raw else "set outside the script"
    return f"{flag} {w.raw} ({why})"


def _count(r: Reading, a: Args, flag: str) -> tuple[int, str] | None:
    """A flag's whole-number value and key; a missing, unresolved or bad value is noted and gives None."""
    if not a.has(flag):
        return None
    w = a.word(flag)
    if w is None:
        r.problem(flag, "the flag has no value; give it one")
    elif not w.known:
        r.ignore(_unresolved(flag, w))
    elif integer(w.text) is None or integer(w.text) <= 0:  # type: ignore[operator]
        r.problem(flag, f"{w.text!r} is not a positive whole number; give one")
    else:
        return integer(w.text), _key(flag, w)  # type: ignore[return-value]
    return None


def _put_count(r: Reading, a: Args, flag: str, dotted: str) -> int | None:
    found = _count(r, a, flag)
    if found:
        r.put(dotted, found[0], found[1])
    return found[0] if found else None


def _shapes(r: Reading, a: Args) -> None:
    """Layers, widths, heads, activation and the FFN width Megatron derives when the script gives none."""
    _put_count(r, a, "--num-layers", "model.num_layers")
    h = _put_count(r, a, "--hidden-size", "model.hidden_size")
    _put_count(r, a, "--num-attention-heads", "model.num_heads")
    _put_count(r, a, "--kv-channels", "model.head_dim")
    _put_count(r, a, "--seq-length", "model.seq_len")
    _put_count(r, a, "--mtp-num-layers", "model.mtp_layers")
    swiglu = a.has("--swiglu")  # arguments.py: --swiglu store_true, "instead of default gelu"
    other = [f for f in ("--squared-relu", "--quick-geglu") if a.has(f)]
    if other:
        r.problem(other[0], "the tool models SwiGLU or GeLU MLPs only; drop the flag to estimate a GeLU MLP")
    elif swiglu:
        r.put("model.activation", "swiglu", "--swiglu")
    else:
        r.put("model.activation", "gelu", "--swiglu absent")
    if _put_count(r, a, "--ffn-hidden-size", "model.ffn_size") is None and h and "--ffn-hidden-size" not in a.values:
        # arguments.py validate_args: ffn_hidden_size None -> int((4*h*2/3)/64)*64 with --swiglu ("this keeps the
        # number of paramters in the same ballpark as the counterpart with 4*h size ... a multiple of 64"), else 4*h
        f = int((4 * h * 2 / 3) / 64) * 64 if swiglu else 4 * h
        r.put("model.ffn_size", f, "--ffn-hidden-size absent (Megatron: " +
              ("int(4*hidden*2/3/64)*64 with --swiglu)" if swiglu else "4*hidden)"))
    if a.has("--group-query-attention"):  # arguments.py: --group-query-attention store_true
        # arguments.py: --num-query-groups default 1, read only with --group-query-attention
        groups = _count(r, a, "--num-query-groups") if "--num-query-groups" in a.values \
            else (1, "--num-query-groups absent (1, Megatron's default)")
        if groups:
            r.put("model.num_kv_heads", groups[0], f"--group-query-attention + {groups[1]}")
    elif a.has("--num-query-groups"):
        r.ignore("--num-query-groups (no effect without --group-query-attention)")


def _positions(r: Reading, a: Args, mla: bool) -> None:
    """Position embedding: rope and its variants are rotary, learned_absolute (Megatron's default) is learned."""
    if a.has("--no-position-embedding"):
        r.ignore("--no-position-embedding (deprecated; --position-embedding-type decides)")
    # arguments.py: --position-embedding-type default 'learned_absolute', choices learned_absolute, rope, yarn,
    # mrope, relative, none; --use-rotary-position-embeddings (deprecated) means rope
    w = a.word("--position-embedding-type")
    if w is not None:
        kind, key = w.text, _key("--position-embedding-type", w)
    elif a.has("--use-rotary-position-embeddings"):
        kind, key = "rope", "--use-rotary-position-embeddings"
    elif mla:
        kind, key = "rope", "--multi-latent-attention (its decoupled rotary part)"
    else:
        kind, key = "learned_absolute", "--position-embedding-type absent (learned_absolute, Megatron's default)"
    if w is not None and not w.known:
        r.ignore(_unresolved("--position-embedding-type", w))
    elif kind in ("rope", "yarn", "mrope"):
        r.put("model.positions", "rotary", key)
    elif kind == "learned_absolute":
        r.put("model.positions", "learned", key)
    elif kind == "none":
        r.ignore("--position-embedding-type none (no position embedding: costs what the tool's rotary default "
                 "costs, less one memory-bound pass)")
    else:
        r.problem("--position-embedding-type", f"{kind!r} is none the tool models (rope, learned_absolute); "
                                               "use one of them")


def _regularisation(r: Reading, a: Args) -> None:
    """Tied embeddings, dropout and the padded vocabulary: what Megatron does when the script is silent."""
    # arguments.py: --untie-embeddings-and-output-weights store_true (tied by default)
    untied = a.has("--untie-embeddings-and-output-weights")
    r.put("model.tied_embeddings", not untied, "--untie-embeddings-and-output-weights" if untied
          else "--untie-embeddings-and-output-weights absent (tied, Megatron's default)")
    rates, keys = [], []
    for flag in ("--attention-dropout", "--hidden-dropout"):  # arguments.py: both default 0.1
        w = a.word(flag)
        if w is None:
            rates.append(0.1)
            keys.append(f"{flag} absent (0.1)")
            continue
        try:
            rates.append(float(w.text))
            keys.append(_key(flag, w))
        except ValueError:
            if w.known:
                r.problem(flag, f"{w.text!r} is not a rate; give one like 0.0")
            else:
                r.ignore(_unresolved(flag, w))
    if len(rates) == 2:
        r.put("model.dropout", any(p > 0 for p in rates), " + ".join(keys))
    vocab = _count(r, a, "--vocab-size")
    if vocab:
        # megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding: up to a multiple of
        # make_vocab_size_divisible_by (arguments.py default 128) * tensor_model_parallel_size
        found = _count(r, a, "--make-vocab-size-divisible-by")
        tp = _count(r, a, "--tensor-model-parallel-size")
        m = (found[0] if found else 128) * (tp[0] if tp else 1)
        r.put("model.vocab_size", -(-vocab[0] // m) * m,
              f"{vocab[1]} padded to a multiple of {m} (--make-vocab-size-divisible-by x TP)")


def _layer_pattern(text: str) -> list[int] | None:
    """A --moe-layer-freq list expression ("([0]*3+[1]*58)", "[0,1,1]") as a list, parsed without running it."""
    def walk(node: ast.expr) -> list[int] | None:
        if isinstance(node, ast.List) and all(isinstance(e, ast.Constant) and e.value in (0, 1) for e in node.elts):
            return [int(e.value) for e in node.elts]  # type: ignore[attr-defined]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = walk(node.left), walk(node.right)
            return left + right if left is not None and right is not None else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and isinstance(node.right, ast.Constant) \
                and isinstance(node.right.value, int) and node.right.value >= 0:
            part = walk(node.left)
            return part * node.right.value if part is not None and len(part) * node.right.value <= 100_000 else None
        return None
    try:
        return walk(ast.parse(text.strip(), mode="eval").body) if len(text) < 1000 else None
    except (SyntaxError, RecursionError):
        return None


def _moe(r: Reading, a: Args) -> None:
    """Routed and shared experts and the leading dense layers of a --moe-layer-freq pattern."""
    if not a.has("--num-experts"):  # arguments.py: --num-experts default None, "None means no MoE"
        return
    _put_count(r, a, "--num-experts", "model.moe.num_experts")
    if "--moe-router-topk" in a.values:
        _put_count(r, a, "--moe-router-topk", "model.moe.top_k")
    else:
        r.put("model.moe.top_k", 2, "--moe-router-topk absent (2, Megatron's default)")  # arguments.py: default 2
    _dispatcher(r, a)
    _router(r, a)
    if "--moe-ffn-hidden-size" in a.values:
        _put_count(r, a, "--moe-ffn-hidden-size", "model.moe.expert_ffn_size")
    elif r.has("model.ffn_size"):
        # arguments.py validate_args: moe_ffn_hidden_size None -> ffn_hidden_size
        r.put("model.moe.expert_ffn_size", r.values[("model", "ffn_size")], "--moe-ffn-hidden-size absent (= FFN width)")
    # arguments.py: --moe-shared-expert-intermediate-size, "Shared expert total ffn hidden size", None: no shared expert
    shared = _count(r, a, "--moe-shared-expert-intermediate-size")
    if shared:
        r.put("model.moe.shared_experts", 1, shared[1])
        r.put("model.moe.shared_ffn_size", shared[0], shared[1] + " (all shared experts as one)")
    w = a.word("--moe-layer-freq")
    if w is None:
        return
    # arguments.py moe_freq_type: an integer N (one MoE layer every N) or a list expression, 1 = MoE layer
    pattern = [1] if integer(w.text) == 1 else _layer_pattern(w.text)
    dense = next((i for i, v in enumerate(pattern or []) if v), 0)
    if not w.known:
        r.ignore(_unresolved("--moe-layer-freq", w))
    elif pattern is None or not any(pattern) or any(v == 0 for v in pattern[dense:]):
        r.problem("--moe-layer-freq", f"{w.text!r} is not some dense layers followed by MoE layers only, the one "
                                      "pattern the tool models; set model.moe.first_dense_layers to the nearest")
    else:
        layers = r.values.get(("model", "num_layers"))
        if len(pattern) > 1 and layers is not None and len(pattern) != layers:
            r.problem("--moe-layer-freq", f"the pattern has {len(pattern)} layers, --num-layers {layers}; make "
                                          "them agree")
        r.put("model.moe.first_dense_layers", dense, _key("--moe-layer-freq", w))


# arguments.py: --moe-token-dispatcher-type choices allgather, alltoall, flex (DeepEP or HybridEP), default allgather;
# the allgather dispatcher gathers the TP x EP group's tokens and reduce-scatters the outputs (token_dispatcher.py)
_DISPATCHERS = {"allgather": "all-gather", "alltoall": "all-to-all", "flex": "deepep"}


def _dispatcher(r: Reading, a: Args) -> None:
    """How the tokens reach the experts: the dispatcher's exchange, Megatron's default where the script names none."""
    w = a.word("--moe-token-dispatcher-type")
    if w is None:
        r.put("layout.ep_kind", "all-gather", "--moe-token-dispatcher-type absent (allgather, Megatron's default)")
    elif not w.known:
        r.ignore(_unresolved("--moe-token-dispatcher-type", w))
    elif w.text in _DISPATCHERS:
        r.put("layout.ep_kind", _DISPATCHERS[w.text], _key("--moe-token-dispatcher-type", w))
    else:
        r.problem("--moe-token-dispatcher-type", f"{w.text!r} is none of {', '.join(_DISPATCHERS)}; give one")


# --- Megatron-Core's router fields: also what NeMo 1 YAML and NeMo 2 / Megatron-Bridge recipes state -------------

ROUTER_FIELDS = ("moe_router_enable_expert_bias", "moe_router_load_balancing_type", "moe_aux_loss_coeff",
                 "moe_expert_capacity_factor", "moe_pad_expert_input_to_capacity", "moe_router_force_load_balancing")
"""Megatron-Core TransformerConfig's fields (transformer_config.py) that set model.moe.balance, capacity_factor and
pad_to_capacity; the flags are the same names (arguments.py, alike at core_v0.13.0 lines 2738-2805)."""
# transformer_config.py: "aux_loss" (GShard, Switch Transformer), "seq_aux_loss" (DeepSeek-V2, per sequence),
# "global_aux_loss" (per global batch, core_v0.15.0 on), "sinkhorn" (S-BASE), "none"
_AUX_LOSSES = ("aux_loss", "seq_aux_loss", "global_aux_loss")
_BALANCING = (*_AUX_LOSSES, "sinkhorn", "none")

Stated = dict[str, tuple[Any, str]]
"""A TransformerConfig field -> (its value as Python holds it, the file's key that states it)."""


def router(r: Reading, given: Stated, spell: Callable[[str], str], unknown: frozenset[str] = frozenset()) -> None:
    """model.moe.balance, capacity_factor and pad_to_capacity from Megatron-Core's router fields (ROUTER_FIELDS).

    ``given``: the fields the file states. ``unknown``: fields whose value the file does not give (an unresolved
    variable, or a model class built outside the file that may set them); every other field takes
    TransformerConfig's default (no expert bias, aux_loss weighted 0.0, no capacity, no padding). ``spell``: a
    field's name in the file's format, for the fix of a problem."""
    given = dict(given)
    for name in ("moe_router_enable_expert_bias", "moe_router_load_balancing_type", "moe_aux_loss_coeff",
                 "moe_pad_expert_input_to_capacity"):
        if name in given and given[name][0] is None:
            r.ignore(f"{given.pop(name)[1]} (None: Megatron-Core's default)")
    bias = given.get("moe_router_enable_expert_bias")
    missing = sorted(unknown & set(ROUTER_FIELDS[:3]))
    if not missing or (bias is not None and bias[0] is True):  # the bias decides alone
        _balance(r, given)
    else:
        for name in ROUTER_FIELDS[:3]:
            if name in given:
                r.ignore(f"{given[name][1]} (the balance turns on {', '.join(map(spell, missing))} too, which this "
                         "file does not give)")
    _capacity(r, given, spell, "moe_expert_capacity_factor" in unknown)
    force = given.get("moe_router_force_load_balancing")
    if force is not None and force[0] is True:  # arguments.py core_v0.13.0:2773: random logits, for benchmarks
        r.put("model.moe.expert_load", 1.0, f"{force[1]} (routing forced to balance: every expert at the mean)")
    elif force is not None and not isinstance(force[0], bool):
        r.problem(force[1], f"{force[0]!r} is not true or false; give one")


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _said(pair: tuple[Any, str]) -> str:
    """A stated field as the where-text of a value two fields decide: its key and value."""
    return f"{pair[1]} {' '.join(f'{v:g}' if number(v) else str(v) for v in _listed(pair[0]))}"


def _balance(r: Reading, given: Stated) -> None:
    """Loss-free where the expert bias is on (it balances whatever loss runs beside it: DeepSeek-V3 2.1.2 keeps a
    sequence-wise one at 1e-4); aux-loss where an aux-loss type is weighted above 0; else unstated."""
    bias, kinds, weights = (given.get(n) for n in ROUTER_FIELDS[:3])
    said = " + ".join(_said(p) for p in (kinds, weights) if p)
    if bias is not None and not isinstance(bias[0], bool):
        r.problem(bias[1], f"{bias[0]!r} is not true or false; give one")
        bias = None
    elif bias is not None and bias[0]:  # the bias is added to the scores that pick the top-k experts
        r.put("model.moe.balance", Balance.LOSS_FREE.value, bias[1])
        if said:
            r.ignore(f"{said} (beside the expert bias, which sets the balance)")
        return
    elif bias is not None:
        r.ignore(f"{bias[1]} (False: no expert bias)")
    types = _listed(kinds[0]) if kinds else ["aux_loss"]  # transformer_config.py: default "aux_loss"
    coeffs = _listed(weights[0]) if weights else [0.0]  # transformer_config.py: moe_aux_loss_coeff default 0.0
    if kinds and not all(t in _BALANCING for t in types):
        r.problem(kinds[1], f"{kinds[0]!r} is not one of {', '.join(_BALANCING)}; give one")
    elif weights and not all(number(c) and c >= 0 for c in coeffs):
        r.problem(weights[1], f"{weights[0]!r} is not a coefficient >= 0; give one (1e-2 is Megatron's suggestion)")
    elif len(coeffs) != len(types):  # transformer_config.py __post_init__: one coefficient per balancing type
        r.problem(" / ".join(p[1] for p in (kinds, weights) if p),
                  f"{len(coeffs)} coefficient(s) for {len(types)} balancing types; give one per type")
    elif any(t in _AUX_LOSSES and c > 0 for t, c in zip(types, coeffs)):
        r.put("model.moe.balance", Balance.AUX_LOSS.value,
              said if kinds else f"{said} (load-balancing type absent: aux_loss, Megatron-Core's default)")
    elif kinds and "sinkhorn" in types:
        r.problem(kinds[1], "'sinkhorn' (S-BASE) balances by Sinkhorn iterations, neither a loss nor an expert "
                            "bias; set model.moe.balance to the nearest")
    elif said:
        r.ignore(f"{said} (no balancing loss weighs anything: model.moe.balance is left to the scenario)")


def _capacity(r: Reading, given: Stated, spell: Callable[[str], str], factor_unknown: bool) -> None:
    """The experts' capacity and whether each is padded to it; Megatron-Core refuses padding without a capacity."""
    factor, pad = given.get("moe_expert_capacity_factor"), given.get("moe_pad_expert_input_to_capacity")
    capacity = None
    if factor is not None:
        value, key = factor
        if value is None:
            r.ignore(f"{key} (None: dropless, Megatron-Core's default)")
        elif not number(value):
            r.problem(key, f"{value!r} is not a number; give the capacity over the mean load (1.0: the mean), or "
                           "drop it for dropless experts")
        elif value < 0:  # transformer_config.py __post_init__: a factor below 0 becomes None
            r.ignore(f"{key} ({value:g}: below 0, Megatron-Core's dropless)")
        elif value == 0:
            r.problem(key, "0 leaves no expert room for a token; give a factor > 0 (1.0: the mean load), or drop it "
                           "for dropless experts")
        else:
            capacity = float(value)
            r.put("model.moe.capacity_factor", capacity, key)
    if pad is None:
        return
    value, key = pad
    if not isinstance(value, bool):
        r.problem(key, f"{value!r} is not true or false; give one")
    elif value and capacity is None and factor_unknown:
        r.ignore(f"{key} (the capacity it pads to, {spell('moe_expert_capacity_factor')}, is not given here)")
    elif value and capacity is None:  # transformer_config.py __post_init__ raises ValueError here
        r.problem(key, f"padding needs a capacity, and no {spell('moe_expert_capacity_factor')} gives one; give "
                       "one (1.0 pads each expert to the mean load) or drop the padding")
    else:
        r.put("model.moe.pad_to_capacity", value, key)


def _router(r: Reading, a: Args) -> None:
    """The router's flags as ``router`` takes them: store_true switches, words, numbers."""
    given: Stated = {}
    unknown: set[str] = set()
    for name in ROUTER_FIELDS:
        flag = "--" + name.replace("_", "-")
        if not a.has(flag):
            continue
        words = a.values[flag]
        if name in ("moe_router_enable_expert_bias", "moe_pad_expert_input_to_capacity",
                    "moe_router_force_load_balancing"):  # store_true
            given[name] = (True, flag)
        elif not words:
            r.problem(flag, "the flag has no value; give it one")
        elif any(not w.known for w in words):
            r.ignore(_unresolved(flag, next(w for w in words if not w.known)))
            unknown.add(name)
        elif name == "moe_router_load_balancing_type":  # core_v0.14.0 on: nargs='+'
            texts = [w.text for w in words]
            given[name] = (texts if len(texts) > 1 else texts[0], _key(flag, words[0]))
        else:
            try:
                numbers = [float(w.text) for w in words]
            except ValueError:
                r.problem(flag, f"{' '.join(w.text for w in words)!r} is not a number; give one")
                continue
            given[name] = (numbers if len(numbers) > 1 else numbers[0], _key(flag, words[0]))
    router(r, given, lambda name: "--" + name.replace("_", "-"), frozenset(unknown))


def _mla(r: Reading, a: Args) -> None:
    """Multi-latent attention's ranks and head widths, with Megatron's defaults for those the script leaves out."""
    if not a.has("--multi-latent-attention"):  # arguments.py: --multi-latent-attention store_true
        return
    # arguments.py: --q-lora-rank default None (full-rank query), --kv-lora-rank 32, --qk-head-dim 128,
    # --qk-pos-emb-head-dim 64, --v-head-dim 128; q_head_dim = qk_head_dim + qk_pos_emb_head_dim
    for flag, dotted, default in (("--q-lora-rank", "q_lora_rank", 0), ("--kv-lora-rank", "kv_lora_rank", 32),
                                  ("--qk-head-dim", "qk_nope_head_dim", 128),
                                  ("--qk-pos-emb-head-dim", "qk_rope_head_dim", 64), ("--v-head-dim", "v_head_dim", 128)):
        if flag in a.values:
            _put_count(r, a, flag, "model.mla." + dotted)
        else:
            r.put("model.mla." + dotted, default, f"{flag} absent ({default or 'None'}, Megatron's default)")


# arguments.py: --data-parallel-sharding-strategy choices, read with --use-megatron-fsdp
_SHARDING = {"no_shard": "ddp", "optim": "zero1", "optim_grads": "zero2", "optim_grads_params": "fsdp"}


def _parallel(r: Reading, a: Args) -> None:
    """Degrees, the interleaved pipeline, uneven edge stages, sequence parallelism and the DP sharding."""
    tp = _put_count(r, a, "--tensor-model-parallel-size", "layout.tp")
    pp = _put_count(r, a, "--pipeline-model-parallel-size", "layout.pp")
    _put_count(r, a, "--context-parallel-size", "layout.cp")
    _put_count(r, a, "--expert-model-parallel-size", "layout.ep")
    if "--expert-tensor-parallel-size" in a.values:
        _put_count(r, a, "--expert-tensor-parallel-size", "layout.expert_tp")
    elif "--num-experts" in a.values and (tp or "--tensor-model-parallel-size" not in a.values):
        # arguments.py validate_args: expert_tensor_parallel_size None -> tensor_model_parallel_size (default 1)
        r.put("layout.expert_tp", tp or 1, "--expert-tensor-parallel-size absent (= --tensor-model-parallel-size)")
    per_stage = _count(r, a, "--num-layers-per-virtual-pipeline-stage")
    layers = r.values.get(("model", "num_layers"))
    if per_stage and layers and (layers % ((pp or 1) * per_stage[0]) or layers // ((pp or 1) * per_stage[0]) < 2):
        r.problem("--num-layers-per-virtual-pipeline-stage",
                  f"{layers} layers over {pp or 1} stages of {per_stage[0]} layers is not a whole number (2 or more) "
                  "of chunks per rank; give a divisor")
    elif per_stage and layers:
        r.put("layout.virtual_stages", layers // ((pp or 1) * per_stage[0]), f"--num-layers / PP / {per_stage[1]}")
        r.put("layout.schedule", "interleaved-1f1b", per_stage[1])
    chunks = _count(r, a, "--num-virtual-stages-per-pipeline-rank")
    if chunks and chunks[0] > 1:
        r.put("layout.virtual_stages", chunks[0], chunks[1])
        r.put("layout.schedule", "interleaved-1f1b", chunks[1])
    if a.has("--no-overlap-p2p-communication"):  # arguments.py: the interleaved schedule's sends, not overlapped
        r.put("overlap.pp", 0.0, "--no-overlap-p2p-communication")
    _put_count(r, a, "--decoder-first-pipeline-num-layers", "layout.first_stage_layers")
    _put_count(r, a, "--decoder-last-pipeline-num-layers", "layout.last_stage_layers")
    # store_true switches: stated only where the script turns them on; the recipe says what their absence means
    for flag, dotted in (("--account-for-embedding-in-pipeline-split", "layout.embedding_in_pipeline_split"),
                         ("--account-for-loss-in-pipeline-split", "layout.loss_in_pipeline_split"),
                         ("--sequence-parallel", "layout.sequence_parallel")):
        if a.has(flag):
            r.put(dotted, True, flag)
    if a.has("--use-distributed-optimizer"):  # arguments.py: shards the optimizer state over DP (ZeRO-1)
        r.put("layout.dp_kind", "zero1", "--use-distributed-optimizer")
    if a.has("--use-torch-fsdp2"):
        r.put("layout.dp_kind", "fsdp", "--use-torch-fsdp2")
    if a.has("--use-megatron-fsdp"):
        w = a.word("--data-parallel-sharding-strategy")
        if w is None:
            r.ignore("--use-megatron-fsdp (without --data-parallel-sharding-strategy, whose default differs between "
                     "Megatron-LM versions)")
        elif w.text in _SHARDING:
            r.put("layout.dp_kind", _SHARDING[w.text], f"--use-megatron-fsdp + {_key('--data-parallel-sharding-strategy', w)}")
        elif not w.known:
            r.ignore(_unresolved("--data-parallel-sharding-strategy", w))
        else:
            r.problem("--data-parallel-sharding-strategy", f"{w.text!r} is not one of {', '.join(_SHARDING)}")


# arguments.py: --cp-comm-type p2p (K,V passed around a ring), all_gather, a2a (Ulysses), a2a+p2p (hierarchical)
_CP_KINDS = {"p2p": "ring", "all_gather": "all-gather"}


def _ranks(r: Reading, a: Args) -> None:
    """How the ranks are laid out and how context parallelism sends K and V."""
    if a.has("--use-tp-pp-dp-mapping"):  # initialize.py: order='tp-cp-ep-pp-dp' with it, 'tp-cp-ep-dp-pp' without
        r.put("layout.order", ["tp", "cp", "ep", "pp", "dp"], "--use-tp-pp-dp-mapping")
    w = a.word("--cp-comm-type")
    if w is None:
        return
    if not w.known:
        r.ignore(_unresolved("--cp-comm-type", w))
    elif w.text in _CP_KINDS:
        r.put("layout.cp_kind", _CP_KINDS[w.text], _key("--cp-comm-type", w))
    else:
        r.problem("--cp-comm-type", f"{w.text!r} is not modelled (p2p is the ring, all_gather the gather of K,V); "
                                    "set layout.cp_kind to the nearest, ring or all-gather")


def _schedule(r: Reading, a: Args) -> None:
    """Overlap, recompute, micro-batch, global batch and the precision switches."""
    if a.has("--overlap-grad-reduce"):
        gather = a.has("--overlap-param-gather")
        r.put("overlap.dp", "auto", "--overlap-grad-reduce" + (" + --overlap-param-gather" if gather else ""))
    elif a.has("--overlap-param-gather"):  # arguments.py validate_args: "Must use --overlap-param-gather with
        r.ignore("--overlap-param-gather (Megatron refuses it without --overlap-grad-reduce)")  # --overlap-grad-reduce"
    if a.has("--tp-comm-overlap"):
        r.put("overlap.tp", 1.0, "--tp-comm-overlap")
    w = a.word("--recompute-granularity")  # arguments.py: choices full, selective
    if w is not None and w.text in ("full", "selective"):
        r.put("layout.recompute", w.text, _key("--recompute-granularity", w))
    elif w is not None:
        if w.known:
            r.problem("--recompute-granularity", f"{w.text!r} is not full or selective; give one of them")
        else:
            r.ignore(_unresolved("--recompute-granularity", w))
    elif a.has("--recompute-activations"):  # arguments.py validate_args: recompute_activations -> 'selective'
        r.put("layout.recompute", "selective", "--recompute-activations")
    _put_count(r, a, "--micro-batch-size", "layout.micro_batch")
    _put_count(r, a, "--global-batch-size", "batch.global_batch_seqs")
    if a.has("--fp8-format"):  # arguments.py: --fp8-format default None; set, the linear layers run in FP8
        r.put("precision.gemm", "fp8", _key("--fp8-format", a.word("--fp8-format") or Word("", "")))
    if a.has("--accumulate-allreduce-grads-in-fp32"):
        r.put("precision.grads", "fp32", "--accumulate-allreduce-grads-in-fp32")
    if a.has("--grad-reduce-in-bf16"):  # arguments.py: "Reduce gradients in bfloat16", over the FP32 default
        r.put("precision.grads", "bf16", "--grad-reduce-in-bf16")
    if a.has("--overlap-moe-expert-parallel-comm"):
        # arguments.py (core_v0.14.0 on): overlaps the all-to-all of one micro-batch with another's compute, forward
        # paired with backward (the 1F1B A2A overlap), so the warm-up and cool-down chunks stay exposed
        r.put("overlap.ep", 1.0, "--overlap-moe-expert-parallel-comm")
        r.put("overlap.ep_paired", True, "--overlap-moe-expert-parallel-comm")
    _put_count(r, a, "--ddp-bucket-size", "layout.dp_bucket_params")  # arguments.py: parameters per DDP bucket
    if a.has("--checkpoint-activations"):  # Megatron-LM before 2022 and Megatron-DeepSpeed: the whole layer
        r.put("layout.recompute", "full", "--checkpoint-activations")
    if a.has("--use-flash-attn"):
        r.ignore("--use-flash-attn (the attention kernel is left at the tool's best)")


_PER_NODE = ("--nproc_per_node", "--nproc-per-node")
_NODES = ("--nnodes",)


def _cluster(r: Reading, launcher: Args, a: Args, shell: Shell) -> None:
    """GPUs launched: torchrun's --nproc_per_node x --nnodes, else the script's GPUS_PER_NODE x NNODES."""
    def find(flags: tuple[str, ...], names: tuple[str, ...]) -> tuple[Word, str] | None:
        for args in (launcher, a):
            for flag in flags:
                if args.has(flag) and args.values[flag]:
                    return args.values[flag][0], flag
        return next(((shell.scalars[n], n) for n in names if n in shell.scalars), None)

    per_node = find(_PER_NODE, ("GPUS_PER_NODE", "NPROC_PER_NODE", "NUM_GPUS_PER_NODE"))
    nodes = find(_NODES, ("NNODES", "NUM_NODES"))
    if per_node is None or nodes is None:
        return
    unresolved = [f"{key} {w.raw}" for w, key in (per_node, nodes) if not w.known or integer(w.text) is None]
    if unresolved:
        r.ignore(f"{' x '.join(unresolved)} (not a count the script sets: GPUs left to the launch)")
        return
    g, n = integer(per_node[0].text), integer(nodes[0].text)
    assert g is not None and n is not None
    key = f"{_key(per_node[1], per_node[0])} x {_key(nodes[1], nodes[0])}"
    r.put("cluster.gpus_per_node", g, _key(per_node[1], per_node[0]))
    r.put("cluster.gpus", g * n, key)


def detect(text: str, name: str) -> bool:
    """Megatron flags given as ``--flag`` words outside comments: two of the core ones, in a file that is not JSON.

    GPT-NeoX's YAML spells the same names as keys without dashes ("num-layers":), DeepSpeed's JSON has neither."""
    if text.lstrip().startswith(("{", "[")):
        return False
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return len({m[1] for m in _FLAG_AT.finditer(code)}) >= 2


def read(text: str, name: str) -> Imported:
    r = Reading(FORMAT)
    launcher_words, words, script = arguments(text)
    a, launcher = Args.of(words), Args.of(launcher_words)
    if not a.values:
        r.problem(name or "arguments", "no Megatron-LM flags found; give the launch script, args file or command line")
        return r.done(framework="megatron-lm")
    _shapes(r, a)
    _positions(r, a, "--multi-latent-attention" in a.values)
    _regularisation(r, a)
    _moe(r, a)
    _mla(r, a)
    _parallel(r, a)
    _ranks(r, a)
    _schedule(r, a)
    _cluster(r, launcher, a, script.shell)
    for note in script.notes:
        r.ignore(note)
    for flag in a.values:
        if flag not in a.used:
            r.ignore(flag)
    return r.done(framework="megatron-lm")
