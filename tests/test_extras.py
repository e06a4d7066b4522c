"""The main job runs on the base install; each optional extra, when missing, is one line naming what to install.

The extras (pyproject.toml): fast (numba), plot (plotly, kaleido), parquet (pyarrow), web (dash). Here they
are hidden from a fresh interpreter (``sys.modules[name] = None``: ``import`` fails and ``find_spec`` finds
nothing, as when the package was never installed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepbudget import cli

OPTIONAL = ("numba", "plotly", "kaleido", "pyarrow", "dash", "pandas")
PRELUDE = ("import sys\n"
           f"for name in {OPTIONAL!r}:\n"
           "    sys.modules[name] = None\n"
           "from stepbudget.cli import run\n"
           "sys.argv = ['stepbudget', *sys.argv[1:]]\n"
           "run()\n")


def _base(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PRELUDE, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_main_job_and_the_model_run_without_any_extra(tmp_path):
    budget = _base("budget", "llama3-405b", "--json", cwd=tmp_path)
    assert budget.returncode == 0, budget.stderr
    assert json.loads(budget.stdout)["mfu"] == pytest.approx(0.401, abs=5e-4)
    bare = _base(cwd=tmp_path)
    assert bare.returncode == 0 and "step time" in bare.stdout
    # the FAST-style schedule without numba runs its kernels as plain Python: the same stages
    args = ["moe", "deepseek-v3", "--skew", "zipf:0.8", "--servers", "4", "--gpus-per-server", "8", "--json"]
    moe = _base(*args, cwd=tmp_path)
    assert moe.returncode == 0, moe.stderr
    plain = json.loads(moe.stdout)["alltoall"]
    compiled = CliRunner().invoke(cli.app, args)
    assert compiled.exit_code == 0, compiled.output
    fast = json.loads(compiled.output)["alltoall"]
    assert plain["stages"] == fast["stages"] > 1 and plain["scheduled_s"] == fast["scheduled_s"]
    # and the plain all-to-all on the engine's loop run as plain Python: the same end
    assert plain["plain_s"] == fast["plain_s"]


@pytest.mark.parametrize("args,extra", [
    (["scale", "llama3-405b", "--plot", "f.png"], "plot"),
    (["wire", "llama3-405b", "--plot", "w.html"], "plot"),
    (["figure", "5.3", "--out", "ring.svg"], "plot"),
    (["search", "megascale-175b", "--gpus", "64", "--out", "l.parquet"], "parquet"),
    (["serve"], "web"),
    (["sweep", str(Path(__file__).parent / "fixtures" / "sweeps" / "budget.yaml"), "--out", "o"], "parquet"),
    (["sweep-report", "o"], "parquet"),
    (["moe", "deepseek-v3", "--servers", "16", "--gpus-per-server", "8"], "fast"),  # 128 GPUs: past the 64 timed as plain Python
])
def test_a_missing_extra_is_one_line_naming_it(args, extra, tmp_path):
    r = _base(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and f"stepbudget[{extra}]" in r.stderr and "Traceback" not in r.stderr
    assert not list(tmp_path.iterdir())  # refused before any work: nothing written


def test_to_frame_without_pandas_says_what_to_install(tmp_path):
    code = ("import sys\nsys.modules['pandas'] = None\nimport stepbudget as sb\n"
            "try:\n    sb.memory('llama3-405b').to_frame()\nexcept ImportError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "pip install pandas" in r.stdout, r.stderr


NO_DASK = PRELUDE.replace(repr(OPTIONAL), repr(("dask", "distributed")))


def test_without_dask_a_sweep_runs_in_this_process_and_says_so(tmp_path):
    sweep = str(Path(__file__).parent / "fixtures" / "sweeps" / "budget.yaml")
    r = subprocess.run([sys.executable, "-c", NO_DASK, "sweep", sweep, "--out", "o", "--workers", "2", "--json"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "sweep: 4 points in this process: dask.distributed is not installed (pip install 'stepbudget[dist]')" \
        in r.stderr
    assert json.loads(r.stdout)["written"] == 4 and json.loads(r.stdout)["where"]["kind"] == "process"
    assert len(list((tmp_path / "o" / "points").iterdir())) == 4
    r = subprocess.run([sys.executable, "-c", NO_DASK, "sweep", sweep, "--out", "p", "--scheduler", "tcp://127.0.0.1:1"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "stepbudget[dist]" in r.stderr, r.stderr
    assert not (tmp_path / "p").exists()
