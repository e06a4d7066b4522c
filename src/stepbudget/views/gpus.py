"""The GPU rows as a table and as JSON (`stepbudget gpus`). Formatting only: the rows are inputs/gpus.yaml as
stepbudget.inputs.hardware reads them."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from stepbudget.units import fmt_bits_rate, fmt_bytes, fmt_rate


def _peak(flops: float) -> str:
    return f"{flops / 1e12:,.0f}"


def gpus_table(rows: list[dict[str, Any]]) -> Table:
    """One line per GPU row (``cluster.gpu: NAME``): its dense BF16 and FP8 peaks, HBM, the node it ships in (the
    scale-up domain, its per-GPU rate each way, NICs) and the sources of the datasheet and the node."""
    table = Table(title="GPUs (cluster.gpu: NAME in a scenario; the node fills what the cluster leaves out)")
    headers = ("name", "BF16 TFLOP/s", "FP8 TFLOP/s", "HBM", "HBM rate", "domain", "scale-up/GPU", "NICs",
               "sources")
    for header in headers:
        table.add_column(header, justify="left" if header in ("name", "sources") else "right",
                         overflow="fold" if header == "sources" else "ellipsis")
    for row in rows:
        g, node = row["gpu"], row["node"]
        table.add_row(row["key"], _peak(g["peak_bf16_flops"]), _peak(g["peak_fp8_flops"]), fmt_bytes(g["hbm_bytes"]),
                      fmt_rate(g["hbm_Bps"]), str(node["gpus_per_node"]), fmt_rate(node["nvlink_Bps"]),
                      f"{node['nics_per_node']} x {fmt_bits_rate(node['nic_Bps'])}",
                      f"{g['source']}; node: {node['source']}")
    return table


def gpus_dict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"gpus": rows}
