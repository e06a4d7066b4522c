"""The runs files examples/fms_fsdp_runs.yaml and examples/kempnerforge_runs.yaml: every run reads, and the figures each
run prints agree with each other and with the batch it states (a check on the transcription, not on the model).

Neither file states a global batch or a derived step: the batch is the printed per-GPU batch times the data-parallel
degree (times KempnerForge's printed grad_accum), and the converter reads it so."""

from pathlib import Path

import pytest

from stepbudget.validation.convert import to_case
from stepbudget.validation.runs import read_runs

ROOT = Path(__file__).resolve().parents[2]
FMS, KEMPNER = "examples/fms_fsdp_runs.yaml", "examples/kempnerforge_runs.yaml"
FILES = (FMS, KEMPNER)


def _runs(path: str) -> list[dict]:
    return read_runs(ROOT / path)[0]


def _global_batch_seqs(run: dict) -> int:
    """The global batch in sequences as the run states it: fms-fsdp's batch_size per GPU x GPUs (no TP, no
    accumulation), KempnerForge's batch_size x grad_accum x DP (DP the GPUs over TP where one rank is not stated)."""
    lay = run["layout"]
    if "batch_size_per_gpu" in lay:
        return lay["batch_size_per_gpu"] * run["num_gpus"]
    dp = lay.get("dp", run["num_gpus"] // lay["tp"])
    return lay["micro_batch"] * lay["grad_accum"] * dp


@pytest.mark.parametrize("path", FILES)
def test_every_run_reads(path):
    runs, bad = read_runs(ROOT / path)
    assert bad == [] and len(runs) == {FMS: 9, KEMPNER: 25}[path]


@pytest.mark.parametrize("path", FILES)
def test_the_converter_reads_the_stated_batch(path):
    for run in _runs(path):
        case = to_case(run)
        assert case.scenario is not None, (run["id"], case.reason)
        assert case.scenario.global_batch_seqs == _global_batch_seqs(run), run["id"]
        assert case.scenario.layout.micro_batch == run["layout"]["micro_batch"], run["id"]


def test_kempnerforge_printed_step_matches_its_throughput_and_batch():
    # KempnerForge prints the step (rounded) and the job's tok/s (the 160-GPU rows a mean of two runs)
    for run in _runs(KEMPNER):
        tokens = _global_batch_seqs(run) * run["model"]["seq_len"]
        assert tokens / run["measured"]["tokens_per_s"] == pytest.approx(run["measured"]["step_time_s"], rel=0.005), \
            run["id"]
        assert run["derived"]["check_step_time_s"] == pytest.approx(tokens / run["measured"]["tokens_per_s"], abs=1e-3)


def test_kempnerforge_batch_is_the_reports_per_gpu_batch():
    # the MFU report's Batch Configuration table: effective tokens/step/GPU 32,768 (7B), 65,536 (13B), 32,768 (70B);
    # the weak-scaling README's Models table: batch/GPU 4 and grad_accum 4 (13B), 2 and 4 (70B)
    per_model = {"7b": 32768, "13b": 65536, "70b": 32768}
    for run in _runs(KEMPNER):
        lay, size = run["layout"], run["id"].split("_")[2]
        assert lay["micro_batch"] * lay["grad_accum"] * run["model"]["seq_len"] == per_model[size], run["id"]


def test_fms_fsdp_step_from_the_printed_tokens_per_gpu():
    # fms-fsdp prints tokens/s/GPU and no step: the step the converter takes is global tokens / (rate x GPUs), the
    # arithmetic the run keeps under derived
    for run in _runs(FMS):
        tokens = _global_batch_seqs(run) * run["model"]["seq_len"]
        step = tokens / (run["measured"]["tokens_per_s_per_gpu"] * run["num_gpus"])
        assert run["derived"]["step_time_s"] == pytest.approx(step, abs=1e-4), run["id"]
        case = to_case(run)
        assert (case.measured_from, case.measured_step_s) == ("tokens_per_s_per_gpu", pytest.approx(step)), run["id"]


def test_fms_fsdp_blog_figures_agree_with_each_other():
    runs = {r["id"]: r for r in _runs(FMS)}
    # the blog: '1 million tokens per batch for 128 GPUs' is the 7B's batch_size 2 x 128 GPUs x 4,096
    seven = runs["fmsfsdp_readme_llama2_7b_a100_128gpu"]
    assert _global_batch_seqs(seven) * seven["model"]["seq_len"] == 1_048_576
    # the README's 7b row (3760 tokens/s/GPU) and the blog's 7B A100 row it stands for (3700) agree within 2 %
    assert seven["measured"]["tokens_per_s_per_gpu"] == pytest.approx(3700, rel=0.02)
    # each row's MFU is of the throughput it prints, against the peak it quotes: for one model, H100 MFU / A100 MFU
    # is the rate ratio times 312/989 (34B: 32/47 = 0.68, (1550/700) x (312/989) = 0.70)
    for size in ("34b", "70b"):
        a100, h100 = (runs[f"fmsfsdp_blog_llama2_{size}_{gpu}"]["measured"] for gpu in ("a100_128gpu", "h100_96gpu"))
        ratio = (h100["tokens_per_s_per_gpu"] / a100["tokens_per_s_per_gpu"]) * (a100["peak_tflops"] / h100["peak_tflops"])
        assert h100["mfu_pct"] / a100["mfu_pct"] == pytest.approx(ratio, rel=0.03), size


def test_known_figures():
    runs = {r["id"]: r for f in FILES for r in _runs(f)}
    # fms-fsdp README: 7b on 128 A100, HSDP, batch 2, 3760 token/gpu/sec; 70b, FSDP, batch 6, 380
    assert runs["fmsfsdp_readme_llama2_7b_a100_128gpu"]["measured"]["tokens_per_s_per_gpu"] == 3760
    assert runs["fmsfsdp_readme_llama2_70b_a100_128gpu"]["layout"]["batch_size_per_gpu"] == 6
    assert runs["fmsfsdp_readme_llama2_70b_a100_128gpu"]["measured"]["tokens_per_s_per_gpu"] == 380
    # the blog's Table 1: 70B on H100, 800 tokens/s/GPU, MFU 0.34
    assert runs["fmsfsdp_blog_llama2_70b_h100_96gpu"]["measured"]["mfu_pct"] == 34.0
    # KempnerForge weak scaling: 70b, 160 GPUs, tp4_fsdp40, 15.32 s
    assert runs["kempnerforge_weak_70b_h200_160gpu_tp4_fsdp40"]["measured"]["step_time_s"] == 15.32
