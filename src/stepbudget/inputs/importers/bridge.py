"""NeMo 2 and Megatron-Bridge recipes: Python files that build a training config in code
(nemo/collections/llm/recipes/*.py, src/megatron/bridge/recipes/**/*.py).

The file is read with ``ast`` only, never imported or run. One function of it is followed as Python would run it
with its defaults: ``pretrain_recipe`` (NeMo 2: what ``nemo llm pretrain --factory NAME`` calls), else
``pretrain_config`` (Megatron-Bridge before October 2025), else the file's first public function whose name holds
``pretrain`` and ends in ``_config`` (Megatron-Bridge's per-GPU recipes such as
``deepseek_v3_pretrain_1024gpu_h100_bf16_config``); the file's other recipes are listed ignored. Calls to
functions of the same file are followed with the arguments given; ``run.Config(X, k=v)`` and any other call
build an object whose fields are its keyword arguments, and ``recipe.trainer.strategy.x = v`` sets one. An ``if``
whose test is literal takes its branch (``if performance_mode:`` with the default False is skipped); one that is
not is skipped whole and listed. Only literal constants become values; a name bound to one in the function or
the module resolves; anything else (an imported function's result, ``os.environ``, arithmetic) is not stated.
The fields the followed function's result holds are then mapped onto the scenario by their names.
Semantics cited from NeMo at 8cfedd7203462cb251a914e700e5605444277561 and Megatron-Bridge at
067f987df03b8355b03192d88d70f1709fedf51a.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from stepbudget.inputs.importers._reading import Imported, Reading, integer, number
from stepbudget.inputs.importers.megatron import ROUTER_FIELDS, Stated, router

FORMAT = "NeMo 2 / Megatron-Bridge recipe"

_IMPORTS = re.compile(r"^\s*(?:from|import)\s+(nemo\.collections\.llm|megatron\.bridge)\b", re.MULTILINE)
_RECIPE_DEF = re.compile(r"^def\s+(pretrain_recipe|pretrain_config|[A-Za-z]\w*pretrain\w*_config)\s*\(", re.MULTILINE)


def detect(text: str, name: str) -> bool:
    """Python that imports NeMo 2's LLM collection or Megatron-Bridge and defines a pretraining recipe."""
    return bool(_IMPORTS.search(text)) and bool(_RECIPE_DEF.search(text))


# --- values while following the code --------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Unknown:
    """A value the file does not state as a literal; ``why`` says what it is instead."""

    why: str


@dataclass(eq=False)
class _Obj:
    """What a call builds: ``kind`` is the class or function called, ``fields`` its keyword arguments and the
    attributes set on it later. ``opaque``: built outside the file, so it may hold fields the file never shows."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)
    opaque: bool = False
    guessed: bool = False
    """Read off an opaque object without the file setting it: it may be None, or anything."""


_CONFIG_CALLS = ("run.Config", "run.Partial", "Config", "Partial")  # nemo_run: the first argument is the target
_MAX_CALL_DEPTH = 6
_MAX_CALLS = 500
"""Calls into the file's own functions followed per read at most: a recipe makes a handful."""
_MODEL_CLASS = re.compile(r"^([A-Z][A-Za-z]*?)(\d*)(?:Config|ModelProvider)(\d\w*)$")
"""NeMo 2's ``Llama3Config70B`` / Megatron-Bridge's ``Llama3ModelProvider70B``: family, version, size."""
_DISTRIBUTED_ADAM = "distributed_fused_adam_with_cosine_annealing"
# NeMo nemo/collections/llm/recipes/optim/adam.py:47 and Megatron-Bridge recipes/utils/optimizer_utils.py:150:
# this helper builds OptimizerConfig(use_distributed_optimizer=True)


def _dotted(node: ast.AST) -> str:
    return ast.unparse(node) if isinstance(node, (ast.Name, ast.Attribute)) else type(node).__name__


def _model_name(kind: str) -> str | None:
    """"Llama3Config70B" -> "Llama 3 70B"; "Llama31Config405B" -> "Llama 3.1 405B"; None for other names."""
    found = _MODEL_CLASS.match(kind.rsplit(".", 1)[-1])
    if not found:
        return None
    family, version, size = found.groups()
    version = f"{version[0]}.{version[1:]}" if len(version) == 2 else version
    return " ".join(p for p in (family, version, size) if p)


class _Follower:
    """Runs one function of the module over literal values only, noting what it cannot follow."""

    def __init__(self, module: ast.Module, r: Reading) -> None:
        self.r = r
        self.functions = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}
        self.globals: dict[str, Any] = {}
        self.model_names: list[tuple[str, str]] = []  # (name, where it was read)
        self.skipped: list[str] = []  # the literal conditions found false, whose branch was not taken
        self.calls = 0
        for node in module.body:  # module constants: NAME = "llama3_70b", SEQUENCE_LENGTH_16K: int = 16384
            target, value = _single_target(node)
            if isinstance(target, ast.Name) and value is not None:
                v = self.eval(value, {}, 0)
                if not isinstance(v, (_Obj, _Unknown)):
                    self.globals[target.id] = v

    def call(self, fn: ast.FunctionDef, args: list[Any], kwargs: dict[str, Any], depth: int) -> Any:
        scope: dict[str, Any] = {}
        params = fn.args.posonlyargs + fn.args.args
        defaults = [None] * (len(params) - len(fn.args.defaults)) + list(fn.args.defaults)
        for i, (param, default) in enumerate(zip(params, defaults)):
            if i < len(args):
                scope[param.arg] = args[i]
            elif param.arg in kwargs:
                scope[param.arg] = kwargs[param.arg]
            else:
                scope[param.arg] = (self.eval(default, {}, depth) if default is not None
                                    else _Unknown(f"{param.arg} has no default"))
        for param, kw_default in zip(fn.args.kwonlyargs, fn.args.kw_defaults):
            scope[param.arg] = kwargs.get(param.arg, self.eval(kw_default, {}, depth) if kw_default is not None
                                          else _Unknown(f"{param.arg} has no default"))
        return self.run(fn.body, scope, depth)

    def run(self, body: list[ast.stmt], scope: dict[str, Any], depth: int) -> Any:
        """Runs ``body``; the value of the ``return`` it reaches (None when it reaches none)."""
        for stmt in body:
            if isinstance(stmt, ast.Return):
                return self.eval(stmt.value, scope, depth) if stmt.value is not None else None
            if isinstance(stmt, ast.If):
                test = self.eval(stmt.test, scope, depth)
                if isinstance(test, (_Obj, _Unknown)):
                    self.r.ignore(f"if {ast.unparse(stmt.test)} (not a literal condition; neither branch is read)")
                    continue
                if not test:
                    self.skipped.append(ast.unparse(stmt.test))
                result = self.run(stmt.body if test else stmt.orelse, scope, depth)
                if result is not _FELL_THROUGH:
                    return result
                continue
            target, value = _single_target(stmt)
            if value is not None:
                self.assign(stmt, target, self.eval(value, scope, depth), scope)
            elif isinstance(stmt, ast.Expr):
                self.eval(stmt.value, scope, depth)
            elif not isinstance(stmt, (ast.Pass, ast.Import, ast.ImportFrom)):
                self.r.ignore(f"line {stmt.lineno}: {type(stmt).__name__.lower()} statement (not followed)")
        return _FELL_THROUGH

    def assign(self, stmt: ast.stmt, target: ast.expr | None, value: Any, scope: dict[str, Any]) -> None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [target]
        for t in targets:
            if isinstance(t, ast.Name):
                scope[t.id] = value
            elif isinstance(t, ast.Attribute):
                owner = self.eval(t.value, scope, 0)
                if isinstance(owner, _Obj):
                    owner.fields[t.attr] = value
            elif isinstance(t, ast.Tuple):  # opt, sched = helper(...): the first is what the helper built
                for i, elt in enumerate(t.elts):
                    if isinstance(elt, ast.Name):
                        scope[elt.id] = value if i == 0 else _Unknown("returned by a function outside this file")

    def eval(self, node: ast.expr, scope: dict[str, Any], depth: int) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in scope:
                return scope[node.id]
            if node.id in self.globals:
                return self.globals[node.id]
            return _Unknown(f"{node.id} is not a literal of this file")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
            v = self.eval(node.operand, scope, depth)
            if isinstance(node.op, ast.Not):
                return v if isinstance(v, (_Obj, _Unknown)) else not v
            return -v if number(v) else _Unknown("an expression")
        if isinstance(node, ast.Attribute):
            owner = self.eval(node.value, scope, depth)
            if isinstance(owner, _Obj):
                if node.attr not in owner.fields and owner.opaque:
                    owner.fields[node.attr] = _Obj(f"{owner.kind}.{node.attr}", opaque=True, guessed=True)
                return owner.fields.get(node.attr, _Unknown(f"{ast.unparse(node)} is not set in this file"))
            return _Unknown(f"{ast.unparse(node)} is not a literal of this file")
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.eval(e, scope, depth) for e in node.elts]
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return _compare(node.ops[0], self.eval(node.left, scope, depth),
                            self.eval(node.comparators[0], scope, depth))
        if isinstance(node, ast.BoolOp):
            values = [self.eval(v, scope, depth) for v in node.values]
            if any(isinstance(v, (_Obj, _Unknown)) for v in values):
                return _Unknown("a condition on values outside this file")
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Call):
            return self.eval_call(node, scope, depth)
        return _Unknown(f"{type(node).__name__.lower()} expression")

    def eval_call(self, node: ast.Call, scope: dict[str, Any], depth: int) -> Any:
        func = _dotted(node.func)
        args = [self.eval(a, scope, depth) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs = {k.arg: self.eval(k.value, scope, depth) for k in node.keywords if k.arg is not None}
        if func in self.functions:  # a function of this file: follow it with these arguments
            self.calls += 1
            if depth >= _MAX_CALL_DEPTH or self.calls > _MAX_CALLS:
                return _Unknown(f"{func}() is nested too deep to follow")
            return self.call(self.functions[func], args, kwargs, depth + 1)
        owner = self.eval(node.func.value, scope, depth) if isinstance(node.func, ast.Attribute) else None
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("append", "extend"):
            if isinstance(owner, list) and args:
                owner.extend(args[0] if node.func.attr == "extend" and isinstance(args[0], list) else args[:1])
            return None
        kind = _dotted(node.args[0]) if func in _CONFIG_CALLS and node.args else func
        built = _Obj(kind, kwargs, opaque=func not in _CONFIG_CALLS)
        self.note_model(node, kind, kwargs, args)
        if kind.rsplit(".", 1)[-1] == _DISTRIBUTED_ADAM:
            built.fields.setdefault("use_distributed_optimizer", _Implied(True, f"{_DISTRIBUTED_ADAM}()"))
        return built

    def note_model(self, node: ast.Call, kind: str, kwargs: dict[str, Any], args: list[Any]) -> None:
        """The model a call names: a config class, a Hugging Face id, or a NeMo ``*_model(version=...)``."""
        for named in [kind] + [_dotted(a) for a in node.args]:
            if (name := _model_name(named)) is not None:
                self.model_names.append((name, named.rsplit(".", 1)[-1]))
        last = kind.rsplit(".", 1)[-1]
        if last == "from_hf_pretrained" and args and isinstance(args[0], str):
            self.model_names.append((args[0].rsplit("/", 1)[-1], f'from_hf_pretrained("{args[0]}")'))
        elif last.endswith("_model") and isinstance(kwargs.get("version"), str):
            self.model_names.append((kwargs["version"], f'{last}(version="{kwargs["version"]}")'))


_FELL_THROUGH = _Unknown("the function returns nothing")


@dataclass(frozen=True)
class _Implied:
    """A field a known helper of the framework sets: ``value``, as ``helper`` (the call) builds it."""

    value: Any
    helper: str


def _single_target(node: ast.stmt) -> tuple[ast.expr | None, ast.expr | None]:
    if isinstance(node, ast.Assign):
        return node.targets[0], node.value
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return node.target, node.value
    return None, None


def _compare(op: ast.cmpop, a: Any, b: Any) -> Any:
    if isinstance(a, (_Obj, _Unknown)) or isinstance(b, (_Obj, _Unknown)):
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(a, _Obj) and not a.guessed and b is None:  # built: not None
            return isinstance(op, ast.IsNot)
        return _Unknown("a condition on values outside this file")
    table = {ast.Is: lambda: a is b, ast.IsNot: lambda: a is not b, ast.Eq: lambda: a == b,
             ast.NotEq: lambda: a != b}
    return table[type(op)]() if type(op) in table else _Unknown("a comparison")


def _walk(value: Any, path: tuple[str, ...], seen: set[int]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Each (path, value) the followed result holds: a literal, or an _Unknown at a field the file names."""
    if isinstance(value, _Obj):
        if id(value) in seen:
            return
        seen.add(id(value))
        for k, v in value.fields.items():
            yield from _walk(v, path + (k,), seen)
    elif isinstance(value, list) and any(isinstance(v, _Obj) for v in value):
        for v in value:
            if isinstance(v, _Obj):
                yield from _walk(v, path + (v.kind.rsplit(".", 1)[-1],), seen)
    else:
        yield path, value


# --- the mapping ----------------------------------------------------------------------------------------------------

_COUNTS = {  # NeMo 2 recipe parameters and Megatron-Core config fields (megatron/core/model_parallel_config.py,
    # transformer_config.py) -> the scenario's whole-number fields
    "tensor_model_parallel_size": "layout.tp", "tensor_parallelism": "layout.tp",
    "pipeline_model_parallel_size": "layout.pp", "pipeline_parallelism": "layout.pp",
    "context_parallel_size": "layout.cp", "context_parallelism": "layout.cp",
    "expert_model_parallel_size": "layout.ep", "expert_parallelism": "layout.ep",
    "expert_tensor_parallel_size": "layout.expert_tp", "expert_tensor_parallelism": "layout.expert_tp",
    "virtual_pipeline_model_parallel_size": "layout.virtual_stages",
    "virtual_pipeline_parallelism": "layout.virtual_stages",
    "micro_batch_size": "layout.micro_batch", "global_batch_size": "batch.global_batch_seqs",
    "seq_length": "model.seq_len", "sequence_length": "model.seq_len",
    "num_layers": "model.num_layers", "hidden_size": "model.hidden_size", "ffn_hidden_size": "model.ffn_size",
    "num_attention_heads": "model.num_heads", "num_query_groups": "model.num_kv_heads", "kv_channels": "model.head_dim",
    "num_moe_experts": "model.moe.num_experts", "moe_router_topk": "model.moe.top_k",
    "moe_ffn_hidden_size": "model.moe.expert_ffn_size", "mtp_num_layers": "model.mtp_layers",
}
_SWITCHES = {  # a True/False field -> (scenario field, value when True, value when False)
    "sequence_parallel": ("layout.sequence_parallel", True, False),
    "sequence_parallelism": ("layout.sequence_parallel", True, False),
    # NeMo megatron_comm_overlap.py:44 / Megatron-Bridge comm_overlap.py:384: userbuffers TP overlap
    "tp_comm_overlap": ("overlap.tp", 1.0, 0.0),
    # Megatron-Core distributed_data_parallel_config.py: overlap_grad_reduce overlaps the DP reduce with backward
    "overlap_grad_reduce": ("overlap.dp", "auto", 0.0),
    "overlap_p2p_comm": ("overlap.pp", "auto", 0.0),  # Megatron-Core model_parallel_config.py: overlap_p2p_comm
    # Megatron-Core distributed_data_parallel_config.py: use_distributed_optimizer shards optimizer state (ZeRO-1)
    "use_distributed_optimizer": ("layout.dp_kind", "zero1", "ddp"),
    "grad_reduce_in_fp32": ("precision.grads", "fp32", "bf16"),  # Megatron-Core DDP config: grads reduced in FP32
    "share_embeddings_and_output_weights": ("model.tied_embeddings", True, False),
}
_LAST = ("mixed_precision",)
# Megatron-Bridge training/mixed_precision.py:135: MixedPrecisionConfig.setup overrides the DDP config's
# grad_reduce_in_fp32, so a mixed_precision field wins over a ddp one
_GPUS = {"h100": "h100-sxm", "h200": "h200-sxm", "b200": "b200", "a100": "a100-sxm-80gb"}
_RECIPE_NAME = re.compile(r"_(\d+)gpu_([a-z]+\d+)_")
"""Megatron-Bridge recipes/<family>/<gpu>/*.py name each recipe <model>_pretrain_<N>gpu_<gpu>_<precision>_config."""


def _choose(module: ast.Module) -> tuple[ast.FunctionDef | None, list[str]]:
    """The recipe function read (module docstring), and the file's other recipes."""
    defs = [n for n in module.body if isinstance(n, ast.FunctionDef)]
    names = [d.name for d in defs]
    recipes = [n for n in names if n in ("pretrain_recipe", "pretrain_config")
               or (not n.startswith("_") and "pretrain" in n and n.endswith("_config"))]
    chosen = next((n for n in ("pretrain_recipe", "pretrain_config") if n in names), recipes[0] if recipes else None)
    return next((d for d in defs if d.name == chosen), None), [n for n in recipes if n != chosen]


class _Mapper:
    """States the scenario fields one followed recipe holds; a field two keys give differently is a problem."""

    def __init__(self, r: Reading) -> None:
        self.r = r

    def put(self, dotted: str, value: Any, key: str, override: bool = False) -> None:
        path = tuple(dotted.split("."))
        if path in self.r.values and self.r.values[path] != value and not override:
            self.r.problem(key, f"states {dotted} = {value!r} where {self.r.keys[path]} states "
                                f"{self.r.values[path]!r}; make them agree")
            return
        if path not in self.r.values or override:
            self.r.put(dotted, value, key)

    def field(self, name: str, value: Any, key: str, last: bool) -> bool:
        """Maps one field; False when its name is none the tool reads."""
        if isinstance(value, _Unknown) and (name in _COUNTS or name in _SWITCHES or name in _OTHERS):
            self.r.ignore(f"{key} ({value.why})")
        elif name in _COUNTS:
            self.count(_COUNTS[name], value, key)
        elif name in _SWITCHES:
            target, on, off = _SWITCHES[name]
            if isinstance(value, bool):
                self.put(target, on if value else off, key, override=last)
            elif value is None:
                self.r.ignore(f"{key} (None: left to the framework)")
            else:
                self.r.problem(key, f"{value!r} is not True or False; give one")
        elif name in _OTHERS:
            _OTHERS[name](self, value, key)
        else:
            return False
        return True

    def count(self, target: str, value: Any, key: str) -> None:
        n, least = integer(value), 0 if target == "model.mtp_layers" else 1
        if value is None:
            self.r.ignore(f"{key} (None: left to the framework)")
        elif n is None or n < least:
            self.r.problem(key, f"{value!r} is not a whole number >= {least}; give one")
        else:
            self.put(target, n, key)
            if target == "layout.virtual_stages" and n > 1:  # Megatron-Core schedules.py: VP > 1 interleaves
                self.put("layout.schedule", "interleaved-1f1b", key)

    def recompute(self, value: Any, key: str) -> None:
        if value in ("selective", "full"):  # Megatron-Core transformer_config.py: recompute_granularity
            self.put("layout.recompute", value, key)
        elif value is None:
            self.r.ignore(f"{key} (None: no recompute unless the framework sets one)")
        else:
            self.r.problem(key, f"{value!r} is not 'selective', 'full' or None; give one")

    def fp8(self, value: Any, key: str) -> None:
        if value in (None, False):
            self.r.ignore(f"{key} ({value}: no FP8)")
        elif isinstance(value, str) or value is True:  # Megatron-Core: fp8 = "e4m3" | "hybrid" turns FP8 GEMMs on
            self.put("precision.gemm", "fp8", key)
        else:
            self.r.problem(key, f"{value!r} is not an FP8 format; give 'hybrid', 'e4m3' or None")

    def dropout(self, value: Any, key: str) -> None:
        if number(value):
            self.put("model.dropout", bool(value > 0) or bool(self.r.values.get(("model", "dropout"))), key,
                     override=True)
        else:
            self.r.problem(key, f"{value!r} is not a probability; give one")

    def fsdp(self, value: Any, key: str) -> None:
        if value is True:  # Megatron-Bridge: use_megatron_fsdp shards parameters, grads and optimizer state
            self.put("layout.dp_kind", "fsdp", key, override=True)
        else:
            self.r.ignore(f"{key} ({value})")


_OTHERS = {"recompute_granularity": _Mapper.recompute, "fp8": _Mapper.fp8, "hidden_dropout": _Mapper.dropout,
           "attention_dropout": _Mapper.dropout, "use_megatron_fsdp": _Mapper.fsdp}


def _cluster(m: _Mapper, fields: dict[str, tuple[Any, str]], recipe: str) -> None:
    """cluster.gpus from the trainer's nodes x GPUs per node, else from a Megatron-Bridge recipe's name."""
    nodes, per_node = fields.get("num_nodes"), fields.get("devices") or fields.get("num_gpus_per_node")
    n, g = (integer(nodes[0]) if nodes else None), (integer(per_node[0]) if per_node else None)
    for given, whole in ((nodes, n), (per_node, g)):
        if given is not None and (whole is None or whole < 1):
            m.r.ignore(f"{given[1]} ({given[0]!r}: not a literal count)")
    if g is not None and g >= 1 and per_node:
        m.put("cluster.gpus_per_node", g, per_node[1])
        if n is not None and n >= 1 and nodes:
            m.put("cluster.gpus", n * g, f"{per_node[1]} * {nodes[1]}")
    named = _RECIPE_NAME.search(recipe)
    if named and not m.r.has("cluster.gpus"):
        m.put("cluster.gpus", int(named.group(1)), f"{recipe} ({named.group(1)}gpu)")
    if named and named.group(2) in _GPUS:
        m.put("cluster.gpu", _GPUS[named.group(2)], f"{recipe} ({named.group(2)})")


def _routing(r: Reading, routing: Stated, name: str, value: Any, key: str) -> None:
    """Collects one of Megatron-Core's router fields (megatron.ROUTER_FIELDS) for ``router``, which needs them
    together; a field stated twice differently is a problem."""
    if isinstance(value, _Unknown):
        r.ignore(f"{key} ({value.why})")
    if name in routing and routing[name][0] != value:
        r.problem(key, f"states {name} = {value!r} where {routing[name][1]} states {routing[name][0]!r}; make them agree")
    else:
        routing[name] = (value, key)


def _plain_mode(r: Reading) -> None:
    """A NeMo 2 recipe followed with ``performance_mode=False`` adds no MegatronCommOverlapCallback
    (recipes/llama3_70b.py pretrain_recipe: ``if performance_mode:``): TP and pipeline sends are not overlapped (Megatron-Core's
    ModelParallelConfig tp_comm_overlap and overlap_p2p_comm default False) and the DDP buckets are Megatron-Core's
    own, where the performance recipe (frameworks/nemo2.yaml) sets all three."""
    key = "if performance_mode (False: no MegatronCommOverlapCallback)"
    for dotted, value in (("overlap.tp", 0.0), ("overlap.pp", 0.0), ("layout.dp_bucket_params", None)):
        if not r.has(dotted):
            r.put(dotted, value, key)


def read(text: str, name: str) -> Imported:
    r = Reading(FORMAT)
    found = _IMPORTS.search(text)
    framework = "megatron-bridge" if found and found.group(1) == "megatron.bridge" else "nemo2"
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        r.problem(name, f"not valid Python ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                        "give the recipe file as it is in the repository")
        return r.done(framework=framework)
    fn, others = _choose(module)
    if fn is None:
        r.problem(name, "defines no pretrain_recipe, pretrain_config or *pretrain*_config function; give a recipe")
        return r.done(framework=framework)
    for other in others:
        r.ignore(f"{other}() (another recipe of this file; stepbudget reads {fn.name}())")
    follower = _Follower(module, r)
    try:
        result = follower.call(fn, [], {}, 0)
    except RecursionError:
        r.problem(fn.name, "nested too deeply to follow; simplify the recipe")
        return r.done(framework=framework)
    returned = fn.body[-1].value if fn.body and isinstance(fn.body[-1], ast.Return) else None
    root = returned.id if isinstance(returned, ast.Name) else "recipe"
    mapper = _Mapper(r)
    leaves = sorted(_walk(result, (), set()), key=lambda pv: pv[0][0] in _LAST if pv[0] else False)
    cluster: dict[str, tuple[Any, str]] = {}
    routing: Stated = {}
    owner = root  # the config object that holds the router fields
    for path, value in leaves:
        if not path:
            continue
        key = ".".join((root,) + path)
        if isinstance(value, _Implied):
            value, key = value.value, f"{key} (set by {value.helper})"
        if path[-1] in ("num_nodes", "devices", "num_gpus_per_node"):
            cluster[path[-1]] = (value, key)
        elif path[-1] in ROUTER_FIELDS:
            _routing(r, routing, path[-1], value, key)
            owner = ".".join((root,) + path[:-1])
        elif not mapper.field(path[-1], value, key, last=path[0] in _LAST):
            r.ignore(key)
    _cluster(mapper, cluster, fn.name)
    if routing:
        known = {n: v for n, v in routing.items() if not isinstance(v[0], _Unknown)}
        # a field the recipe leaves out is the model class's (MixtralConfig8x7B, DeepSeekV3ModelProvider), defined
        # outside the file: unknown, not Megatron-Core's default
        router(r, known, lambda name: f"{owner}.{name}", frozenset(ROUTER_FIELDS) - known.keys())
    if framework == "nemo2" and "performance_mode" in follower.skipped:
        _plain_mode(r)
    if follower.model_names:
        model, where = follower.model_names[0]
        r.put("model.name", model, where)
    return r.done(framework=framework)
