"""The runs files examples/fms_fsdp_runs.yaml and examples/kempnerforge_runs.yaml: every run reads, and each printed
step agrees with the printed throughput and the stated batch (a check on the transcription, not on the model)."""

from pathlib import Path

import pytest

from stepbudget.validation.runs import read_runs

ROOT = Path(__file__).resolve().parents[2]
FILES = ("examples/fms_fsdp_runs.yaml", "examples/kempnerforge_runs.yaml")


@pytest.mark.parametrize("path", FILES)
def test_every_run_reads(path):
    runs, bad = read_runs(ROOT / path)
    assert bad == [] and len(runs) == {"examples/fms_fsdp_runs.yaml": 9, "examples/kempnerforge_runs.yaml": 25}[path]


@pytest.mark.parametrize("path", FILES)
def test_step_matches_throughput_and_batch(path):
    for run in read_runs(ROOT / path)[0]:
        meas, tokens = run["measured"], run["layout"]["global_batch_tokens"]
        assert tokens == run["layout"]["global_batch_seqs"] * run["model"]["seq_len"], run["id"]
        # fms-fsdp prints tokens/s per GPU; KempnerForge prints the job's tokens/s and its step rounded
        rate = meas["tokens_per_s_per_gpu"] * run["num_gpus"] if "tokens_per_s_per_gpu" in meas else meas["tokens_per_s"]
        assert tokens / rate == pytest.approx(meas["step_time_s"], rel=0.005), run["id"]


def test_known_figures():
    runs = {r["id"]: r for f in FILES for r in read_runs(ROOT / f)[0]}
    # fms-fsdp README: 7b on 128 A100, HSDP, batch 2, 3760 token/gpu/sec
    assert runs["fmsfsdp_readme_llama2_7b_a100_128gpu"]["measured"]["tokens_per_s_per_gpu"] == 3760
    # KempnerForge weak scaling: 70b, 160 GPUs, tp4_fsdp40, 15.32 s
    assert runs["kempnerforge_weak_70b_h200_160gpu_tp4_fsdp40"]["measured"]["step_time_s"] == 15.32
