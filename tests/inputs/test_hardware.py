"""inputs/hardware.py: the GPU catalog against its datasheets, units read at the door, and each cluster
rule refused by the field it names."""

import pytest

from stepbudget.inputs.hardware import GPU, Cluster, Kernels, gpu_presets, named_gpu

# name: dense BF16 FLOP/s, dense FP8 FLOP/s, HBM bytes, HBM bytes/s, the words of its cited source line
CATALOG = {
    "a100-sxm-80gb": (312e12, 312e12, 80e9, 2039e9, "BF16 dense 312 TFLOP/s, 80 GB HBM2e at 2,039 GB/s"),
    "a100-sxm-40gb": (312e12, 312e12, 40e9, 1555e9, "BF16 dense 312 TFLOP/s, 40 GB HBM2 at 1,555 GB/s"),
    "h100-sxm": (989e12, 1979e12, 80e9, 3.35e12, "BF16 dense 989 TFLOP/s, FP8 1,979, 80 GB HBM3 at 3.35 TB/s"),
    "h800-sxm": (989e12, 1979e12, 80e9, 3.35e12, "989 TFLOP/s BF16"),
    "h200-sxm": (989e12, 1979e12, 141e9, 4.8e12, "141 GB HBM3e at 4.8 TB/s"),
    "b200": (2250e12, 4500e12, 180e9, 7.7e12, "dense BF16 2.25 PFLOP/s, FP8 4.5 PFLOP/s, 180 GB HBM3e at 7.7 TB/s"),
    "gb200-nvl72": (2500e12, 5000e12, 186e9, 8e12, "dense BF16 2,500, FP8 5,000 TFLOP/s"),
    "gb300-nvl72": (2500e12, 5000e12, 279e9, 8e12, "FP16/BF16 2.5 PFLOP/s, FP8 5 PFLOP/s"),
    "b300": (2250e12, 4500e12, 288e9, 8e12, "dense BF16 2,250, FP8 4,500 TFLOP/s; 288 GB HBM3e at 8.0 TB/s"),
    "mi300x": (1307.4e12, 2614.9e12, 192e9, 5.3e12, "peak dense BF16 1,307.4 TFLOP/s, FP8 2,614.9 TFLOP/s"),
    "mi325x": (1307.4e12, 2614.9e12, 256e9, 6e12, "BF16 1,307.4 TFLOP/s, FP8 2,614.9 TFLOP/s, twice that with "
               "sparsity; 256 GB HBM3E at 6 TB/s"),
    "mi355x": (2500e12, 5000e12, 288e9, 8e12, "FP16/BF16 matrix 2.5 PFLOP/s"),
}


def test_every_shipped_gpu_matches_its_datasheet():
    rows = gpu_presets()
    assert rows.keys() == CATALOG.keys()  # a new GPU needs its datasheet row here
    for name, (bf16, fp8, hbm, hbm_rate, cited) in CATALOG.items():
        gpu = GPU.model_validate(rows[name])
        assert (gpu.peak_bf16_flops, gpu.peak_fp8_flops) == pytest.approx((bf16, fp8), rel=1e-12), name
        assert (gpu.hbm_bytes, gpu.hbm_Bps) == pytest.approx((hbm, hbm_rate), rel=1e-12), name
        assert cited in gpu.source, name
        assert gpu.kernels.source and gpu.kernels.kernel_overhead_s == pytest.approx(5e-6)  # "5us" read as seconds
    assert GPU.model_validate(rows["h100-sxm"]).kernels == GPU.model_validate(rows["h800-sxm"]).kernels  # &hopper


def _cluster(**update) -> Cluster:
    return Cluster(**{"gpus": 16, "gpu": named_gpu("h100-sxm"), "nvlink_Bps": "450GB/s", "nic_Bps": "400Gb/s", **update})


def test_cluster_reads_units_and_derives_per_gpu_rates():
    c = _cluster(nics_per_node=4, nvlink_latency_s="2us", step_overhead_s="300ms")
    assert c.nic_Bps == 50e9  # 400 Gb/s = 50 GB/s: bits over 8
    assert c.nvlink_Bps == 450e9 and c.nvlink_latency_s == pytest.approx(2e-6) and c.step_overhead_s == 0.3
    assert c.nic_Bps_per_gpu == 25e9  # 4 NICs shared by the node's 8 GPUs
    assert c.gpu.name == "H100 SXM 80GB" and c.peak_fp8 == 1979e12
    by_figures = _cluster(gpu={"peak_bf16_flops": "1PFLOP/s", "hbm_bytes": "96GiB", "hbm_Bps": "4TB/s"})
    assert by_figures.peak_fp8 == 2e15  # FP8 defaults to twice the BF16 peak
    assert by_figures.gpu.hbm_bytes == 96 * 2**30 and by_figures.gpu.kernels == Kernels()
    assert _cluster(gpus=4).gpus == 4  # fewer GPUs than one node is allowed


@pytest.mark.parametrize("update, message", [
    (dict(rate_scope="step", step_overhead_s=0.5), "cluster.step_overhead_s: a measured whole-step rate"),
    (dict(gpus=12), "cluster.gpus: 12 GPUs do not fill whole nodes of 8"),
    (dict(nic_Bps="400Gbx"), "nic_Bps\n  Value error, unit 'Gbx' in '400Gbx' is not a rate unit"),
    (dict(nic_Bps=0), "nic_Bps\n  Input should be greater than or equal to 1"),
    (dict(nic_efficiency=1.5), "nic_efficiency\n  Input should be less than or equal to 1"),
    (dict(tiers=[{"domain_gpus": 8, "oversubscription": 0.5}]), "tiers.0.oversubscription\n"),
    (dict(gpu={"peak_bf16_flops": 1e15, "hbm_bytes": 1e9, "hbm_Bps": 1e12, "kernels": {"gemm": 1.2}}),
     "gpu.kernels.gemm\n"),
    (dict(gpu={"peak_bf16_flops": 1e15, "hbm_bytes": 1e9}), "gpu.hbm_Bps\n  Field required"),
    (dict(gpus_per_node=False), "gpus_per_node: False is not a number"),
])
def test_each_cluster_rule_refuses_by_the_field_it_names(update, message):
    with pytest.raises(ValueError) as e:
        _cluster(**update)
    assert message in str(e.value)


def test_named_gpu_hands_out_fresh_copies():
    first = named_gpu("h100-sxm")
    assert first is not None and first["hbm_bytes"] == "80GB"
    first["hbm_bytes"] = "1GB"
    first["kernels"]["gemm"] = 0.1  # nested too: the catalog is copied deeply
    again = named_gpu("h100-sxm")
    assert again is not None and again["hbm_bytes"] == "80GB" and again["kernels"]["gemm"] == 0.74
    gpu_presets()["b200"]["name"] = "edited"
    assert gpu_presets()["b200"]["name"] == "B200 180GB"
    assert named_gpu("tpu9") is None and named_gpu(None) is None and named_gpu(["h100-sxm"]) is None
