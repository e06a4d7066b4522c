"""The docs' Python walkthrough in a live Jupyter kernel: each cell shows what it prints, once, and every API
result the walkthrough makes renders once, as HTML (a rich console that also wrote to the display would show each
result twice, one copy clipped)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

from test_docs import CELLS  # noqa: E402  the walkthrough's cells, as the docs test reads them

WALKTHROUGH = Path(__file__).resolve().parents[1] / "docs" / "python.md"


def test_the_walkthrough_shows_each_output_once_and_each_result_as_html(tmp_path):
    # one kernel for the whole page, about 10 s: the cells are the docs' own, run as a reader runs them
    nb = nbformat.v4.new_notebook()
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})

    def run(code: str) -> list:
        nb.cells.append(nbformat.v4.new_code_cell(code))
        return client.execute_cell(nb.cells[-1], len(nb.cells) - 1).outputs

    with client.setup_kernel():
        for i, (code, _) in enumerate(CELLS.findall(WALKTHROUGH.read_text())):
            kinds = [o["output_type"] for o in run(code)]
            # what it prints, and no table displayed besides; the kernel sends what a cell prints in chunks as its
            # output buffer flushes (every 0.2 s), which the notebook shows as one block
            shown = [k for j, k in enumerate(kinds) if not (k == "stream" and j and kinds[j - 1] == "stream")]
            assert shown == ["stream"], f"cell {i + 1}: {kinds}"
        names = run("print(' '.join(n for n, v in dict(globals()).items() if isinstance(v, sb.api.Result)))")
        results = names[0]["text"].split()
        assert len(results) >= 8, results  # budget, search, scale, whatif, simulate, wire, validate, ...
        for name in results:
            shown = run(name)
            assert [o["output_type"] for o in shown] == ["execute_result"], name
            html, plain = shown[0]["data"]["text/html"], shown[0]["data"]["text/plain"]
            assert html.count("<pre") == 1, name  # the command's tables, drawn once
            assert plain.startswith("<") and plain.endswith(">"), name  # and the one-line repr for plain text
