"""Helpers shared by the tests."""


def rows(budget, dim, what=None):
    """The exchanges of one dimension that run at least once per step."""
    return [x for x in budget.exchanges if x.dim == dim and float(x.calls) > 0 and (what is None or what in x.what)]


def doc_pages():
    """The README and every page of the docs site (docs/**/*.md), in a fixed order."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def scratch_dir(tmp_path, monkeypatch):
    """Work in ``tmp_path`` (what a docs command writes lands there), with the repository's ``tests`` folder beside
    it, so that the docs can name the real config files under tests/data/configs by their paths in the repository."""
    from pathlib import Path

    (tmp_path / "tests").symlink_to(Path(__file__).resolve().parent, target_is_directory=True)
    monkeypatch.chdir(tmp_path)


def doc_text():
    """The README and the docs pages as one text: their command blocks are run by the tests."""
    return "\n".join(p.read_text() for p in doc_pages())


def one_line(*args: str) -> str:
    """Run the command line in-process (CliRunner); it must end in exit 2 and one stderr line, which is returned."""
    from typer.testing import CliRunner

    from stepbudget.cli import app

    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 2, (r.exit_code, r.output)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("stepbudget: error: "), r.stderr
    return lines[0]


def moe_job(model: str, order: list[str] | None = None, *, balanced: bool = False):
    """A catalog MoE model at a 4K sequence on 64 H100 (8 a node, 8 x 400G NICs): EP 8, TP 1, PP 1, DP 64,
    256 sequences a step, in the default rank order unless ``order`` is given (the job of the EP placement fix);
    ``balanced``: every expert at the mean load, not the busiest expert's default."""
    from stepbudget.inputs.scenario import build

    layout = {"tp": 1, "pp": 1, "dp": 64, "ep": 8} | ({"order": order} if order else {})
    return build({"model": {"catalog": model, "seq_len": 4096} | ({"moe": {"expert_load": 1}} if balanced else {}),
                  "cluster": {"gpus": 64, "gpu": "h100-sxm", "gpus_per_node": 8, "nvlink_Bps": "450GB/s",
                              "nics_per_node": 8, "nic_Bps": "400Gb/s"},
                  "layout": layout, "batch": {"global_batch_seqs": 256}})


ONE_GPU_DDP = (
    "layout.pp=1", "layout.dp=2048", "layout.schedule=1f1b", "layout.virtual_stages=1", "layout.dp_kind=ddp",
    "layout.micro_batch=2", "batch.global_batch_tokens=null", "batch.global_batch_seqs=4096",
    "layout.embedding_in_pipeline_split=false", "layout.loss_in_pipeline_split=false", "precision.grads=bf16",
    "cluster.rate_scope=kernel", "cluster.tiers=[]",
)
"""Changes to llama3-405b for one GPU's step without a pipeline: plain data parallelism (DDP) over 2,048 replicas of
TP 8 (16,384 GPUs), one micro-batch of two sequences, so that the step is one forward and one backward whose
buckets' all-reduces just hide behind the backward at the full rate. Animation 5.1 played this job until it came to
play Figure 5.1's; the simulator's tests and saved graphs (tests/fixtures/speed/make_build.py) keep it for the code
paths it takes. A picture of time, not of memory: this layout needs about 950 GB a GPU."""
