"""`stepbudget gpus`: every GPU row and the node it ships in, in SI units, with their sources."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from stepbudget import api
from stepbudget.cli import app
from stepbudget.inputs.hardware import gpu_node, gpu_presets
from stepbudget.inputs.scenario import load


def test_every_row_is_listed_with_its_figures_and_sources():
    result = CliRunner().invoke(app, ["gpus", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["key"]: r for r in json.loads(result.output)["gpus"]}
    assert set(rows) == set(gpu_presets())
    for key, row in rows.items():
        assert row["gpu"]["source"] and row["node"]["source"] == gpu_node(key)["source"]
    h100 = rows["h100-sxm"]
    # NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense BF16, 3.35 TB/s; DGX H100: 8 GPUs, NVLink 900 GB/s total
    assert (h100["gpu"]["peak_bf16_flops"], h100["gpu"]["hbm_Bps"]) == (989e12, 3.35e12)
    assert (h100["node"]["gpus_per_node"], h100["node"]["nvlink_Bps"], h100["node"]["nic_Bps"]) == (8, 450e9, 50e9)


def test_a_row_is_what_a_scenario_naming_the_gpu_takes():
    """The listing and the completion read the same row: a job that names the GPU gets these figures."""
    for row in api.gpus():
        sc = load("llama3-405b", [f"cluster.gpu={row['key']}", "cluster.rate_scope=kernel",
                                  "cluster.achieved_flops=null"])
        assert sc.cluster.gpu.peak_bf16_flops == row["gpu"]["peak_bf16_flops"]
        assert sc.cluster.gpu.hbm_bytes == row["gpu"]["hbm_bytes"]


def test_a_gb200_nvl72_job_with_ep_64_sends_its_all_to_all_on_nvlink():
    """The NVL72 rack is one NVLink domain: a job that uses 64 of each rack's 72 GPUs (the row's node is the rack;
    the job states the 64 it uses) keeps an EP group of 64 inside it, where eight-GPU nodes send much of it over
    the NICs."""
    import stepbudget as sb

    def ep_bytes(sc):
        exchanges = [x for x in sb.estimate(sb.derive(sc)).exchanges if x.dim.value == "ep"]
        return sum(float(x.nic_bytes) for x in exchanges), sum(float(x.bytes_per_gpu) for x in exchanges)

    rack = load("deepseek-v3").edit(cluster={"gpu": "gb200-nvl72", "gpus_per_node": 64, "nvlink_Bps": "900GB/s",
                                             "nics_per_node": 64}, layout={"ep_kind": "all-to-all"})
    nodes = rack.edit(cluster={"gpus_per_node": 8, "nics_per_node": 8})
    assert rack.cluster.gpu.name.startswith("GB200") and rack.layout.ep == 64
    on_nic, total = ep_bytes(rack)
    assert total > 0 and on_nic == 0
    assert ep_bytes(nodes)[0] > 0.3 * ep_bytes(nodes)[1]  # with eight-GPU nodes, most peers are on other nodes
