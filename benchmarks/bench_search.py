"""Layout search speed and memory: the array path, the same layouts one at a time, and peak RSS.

Run: python benchmarks/bench_search.py   (prints figures; not a test)

Case 1 is the space Calculon spends about 12 hours on: GPT-3 175B on 1,024 A100-80GB
(MegaScale's 175B shapes and 6,144-sequence batch). Every case runs in a fresh process so
its peak RSS is its own; numpy runs these element-wise kernels on one core, and the Parquet
writer's thread takes a second one where there is one. The figures of commit 2ef4220, before
the search timed only the layouts that fit and wrote Parquet on a thread, are printed beside
(measured on the same 2-core machine, best of 3; that code is gone, so they are not re-run).
"""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time

CASES = [  # label, preset, --set overrides, --gpus
    ("GPT-3 175B, 1,024 A100-80GB", "megascale-175b", [], 1024),
    ("Llama 3 405B, 16,384 H100", "llama3-405b", [], None),
    ("DeepSeek-V3, 2,048 H800 (EP up to 256)", "deepseek-v3", [], None),
    ("Llama 3 405B, 131,072 H100 (rate calibrated on its 16,384-GPU run)", "llama3-405b", [], 131072),
]
SCALAR_SAMPLE = 2000
PREVIOUS_COMMIT = "2ef4220"
"""The search before issue 21 made it faster: run side by side from git when the checkout has it."""
PREVIOUS = {  # where git cannot extract it: search s, with Parquet s (first call with the import), peak RSS MB
    "megascale-175b": (0.32, 1.33, 233),
    "llama3-405b": (0.22, 0.74, 130),
    "deepseek-v3": (3.82, 5.63, 386),
    "llama3-405b@131072": (0.14, 0.48, 89),
}


def one_case(preset: str, sets: list[str], gpus: int | None, scalar: bool = True) -> dict:
    import numpy as np

    import stepbudget as sb
    from stepbudget.budget.memory import memory_per_gpu
    from stepbudget.sweep.search import layout_row, scenario_for, search
    from stepbudget.sweep.space import layout_space
    from stepbudget.sweep.store import CODE_NAMES

    sc = sb.load(preset, sets)
    search(sc, gpus=gpus, top=1, chunk=1 << 12)  # warm-up: imports, first-call costs
    seconds = float("inf")
    for _ in range(3):  # best of 3: the machine is shared
        t0 = time.perf_counter()
        result = search(sc, gpus=gpus, top=10)
        seconds = min(seconds, time.perf_counter() - t0)
    search_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3  # high-water mark so far
    t0 = time.perf_counter()
    import pyarrow.parquet  # noqa: F401 - once per process: timed apart from the writes

    pyarrow_import = time.perf_counter() - t0
    with_parquet = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "layouts.parquet")
        for _ in range(3):
            t0 = time.perf_counter()
            search(sc, gpus=gpus, top=10, out=path)
            with_parquet = min(with_parquet, time.perf_counter() - t0)
        parquet_mb = os.path.getsize(path) / 1e6
    parquet_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    out = {
        "candidates": result.candidates, "evaluated": result.evaluated, "feasible": result.feasible,
        "seconds": seconds, "per_s": result.evaluated / seconds, "with_parquet_s": with_parquet,
        "parquet_mb": parquet_mb, "peak_rss_mb": search_rss, "parquet_rss_mb": parquet_rss,
        "pyarrow_import_s": pyarrow_import,
        "best": {k: result.top[0][k] for k in ("tp", "cp", "pp", "dp", "ep", "schedule", "micro_batch", "dp_kind")},
    }
    if not scalar:
        return out

    # the same model, one layout at a time: validated Scenario -> derive -> estimate -> memory
    base = result.scenario
    space = layout_space(base, gpus)
    rng = np.random.default_rng(0)
    cols = next(c for _, c, _ in space.chunks(1 << 22))  # the first valid layouts (space order)
    picks = rng.choice(len(cols["tp"]), min(SCALAR_SAMPLE, len(cols["tp"])), replace=False)
    rows = [layout_row(cols, {}, i) for i in picks]
    t0 = time.perf_counter()
    for row in rows:
        plan = sb.derive(scenario_for(base, row, result.gpus))
        sb.estimate(plan), memory_per_gpu(plan)
    scalar_per_layout = (time.perf_counter() - t0) / len(rows)
    t0 = time.perf_counter()
    for row in rows:  # without validation: the evaluation alone
        values = {k: np.asarray(v) for k, v in row.items() if k not in CODE_NAMES}
        plan = sb.derive(base, values | {k: row[k] for k in CODE_NAMES})
        sb.estimate(plan), memory_per_gpu(plan)
    scalar_eval_only = (time.perf_counter() - t0) / len(rows)
    return out | {"scalar_ms": scalar_per_layout * 1e3, "scalar_eval_ms": scalar_eval_only * 1e3}


def _run_case(preset: str, sets: list[str], gpus: int | None, src: str, scalar: bool) -> dict:
    """One case in a fresh process that imports stepbudget from ``src``."""
    env = os.environ | {"PYTHONPATH": src}
    out = subprocess.run([sys.executable, __file__, "--case", preset, json.dumps(sets), json.dumps(gpus),
                          json.dumps(scalar)], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _previous_source(tmp: str) -> str | None:
    """The src/ folder of PREVIOUS_COMMIT, extracted from git into ``tmp`` (None outside a checkout)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    archive = subprocess.run(["git", "-C", repo, "archive", "--format=tar", PREVIOUS_COMMIT, "src"],
                             capture_output=True, check=False)
    if archive.returncode:
        return None
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp, filter="data")
    return os.path.join(tmp, "src")


def _print_case(label: str, r: dict, old: dict | None, key: str) -> None:
    arrays_per_layout = r["seconds"] / r["evaluated"]
    print(f"\n{label}")
    print(f"  candidates {r['candidates']:,}  valid and evaluated {r['evaluated']:,}  fit in HBM {r['feasible']:,}")
    rows = [("now", r)] + ([(f"{PREVIOUS_COMMIT} (old)", old)] if old else [])
    for name, x in rows:
        print(f"  {name:>13}: search {x['seconds']:.3f} s = {x['per_s']:>9,.0f} layouts/s; with Parquet "
              f"{x['with_parquet_s']:.3f} s ({x['with_parquet_s'] / x['seconds']:.2f}x the search, {x['parquet_mb']:.1f} MB; "
              f"pyarrow's import {x['pyarrow_import_s']:.2f} s once); peak RSS {x['peak_rss_mb']:,.0f} MB, "
              f"{x['parquet_rss_mb']:,.0f} MB with Parquet")
    if old:
        print(f"  ratio old/new: search {old['seconds'] / r['seconds']:.2f}x, with Parquet "
              f"{old['with_parquet_s'] / r['with_parquet_s']:.2f}x")
    elif key in PREVIOUS:
        old_s, old_parquet, old_rss = PREVIOUS[key]
        print(f"  previous (commit {PREVIOUS_COMMIT}): search {old_s:.2f} s = {r['evaluated'] / old_s:,.0f} layouts/s; "
              f"with Parquet {old_parquet:.2f} s; peak RSS {old_rss:,} MB")
    print(f"  one at a time: {r['scalar_ms']:.2f} ms per layout with validation, {r['scalar_eval_ms']:.2f} ms "
          f"evaluation only -> arrays are {r['scalar_ms'] / 1e3 / arrays_per_layout:,.0f}x / "
          f"{r['scalar_eval_ms'] / 1e3 / arrays_per_layout:,.0f}x faster per layout")
    print(f"  best: {r['best']}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--case":
        args = [json.loads(a) for a in sys.argv[3:6]]
        print(json.dumps(one_case(sys.argv[2], *args)))
        return
    print("layout search: array path vs the same layouts one at a time, and against commit "
          f"{PREVIOUS_COMMIT} (fresh process per case and version)")
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    with tempfile.TemporaryDirectory() as tmp:
        previous = _previous_source(tmp)
        for label, preset, sets, gpus in CASES:
            r = _run_case(preset, sets, gpus, here, scalar=True)
            old = _run_case(preset, sets, gpus, previous, scalar=False) if previous else None
            _print_case(label, r, old, preset + (f"@{gpus}" if gpus and preset == "llama3-405b" else ""))


if __name__ == "__main__":
    main()
