"""The model catalog as a table and as JSON (`stepbudget models`). Formatting only: the rows are
inputs/catalog.yaml as stepbudget.inputs.catalog reads them."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from stepbudget.inputs.catalog import Entry

_SHAPE = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_size", "vocab_size",
          "activation", "positions", "tied_embeddings")
"""Model fields every row of the JSON carries (None where the row leaves a default)."""


def params_label(x: float) -> str:
    """A parameter count in the unit its size reads best in: 125M, 8.03B, 1.01T (three significant digits)."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:,.0f}"


def _heads(m: dict[str, Any]) -> str:
    kv = m.get("num_kv_heads") or m["num_heads"]
    return f"{m['num_heads']}/{kv}" + (" MLA" if m.get("mla") else "")


def _experts(m: dict[str, Any]) -> str:
    moe = m.get("moe")
    if not moe:
        return "-"
    shared = f"+{moe['shared_experts']}" if moe.get("shared_experts") else ""
    return f"{moe['num_experts']}{shared}/{moe['top_k']}"


def models_table(entries: list[Entry]) -> Table:
    """One line per catalog row: name, stated parameters, layers, hidden, heads/kv, FFN width (an MoE's expert
    width), experts/top-k (shared experts as +n), the context the row's source states (row metadata, not a
    training length: a scenario states its own seq_len) and source."""
    table = Table(title="Model catalog (model: {catalog: NAME, seq_len: S} in a scenario)", show_lines=False)
    for header in ("name", "params", "layers", "hidden", "heads/kv", "ffn", "experts/top-k", "context", "source"):
        table.add_column(header, justify="left" if header in ("name", "source") else "right",
                         overflow="fold" if header == "source" else "ellipsis")
    for e in entries:
        m = e.model
        ffn = m["moe"]["expert_ffn_size"] if m.get("moe") else m["ffn_size"]
        table.add_row(e.key, params_label(e.params_stated), str(m["num_layers"]), f"{m['hidden_size']:,}",
                      _heads(m), f"{ffn:,}", _experts(m), f"{e.context_len:,}", e.source)
    return table


def model_dict(e: Entry) -> dict[str, Any]:
    """One row for --json: its names, stated count, sources and source's context length, and its model section as a
    scenario takes it (with no seq_len: the scenario states its own)."""
    return {"key": e.key, "name": e.model.get("name", e.key), "aliases": list(e.aliases),
            "params_stated": e.params_stated, "params_source": e.params_source, "source": e.source,
            "context_len": e.context_len, "seq_source": e.seq_source, "note": e.note,
            "shape": {k: e.model.get(k) for k in _SHAPE},
            "moe": e.model.get("moe"), "mla": e.model.get("mla"), "model": e.model}


def models_dict(entries: list[Entry]) -> dict[str, Any]:
    """The `models --json` object: ``{"models": [row, ...]}`` in table order."""
    return {"models": [model_dict(e) for e in entries]}
