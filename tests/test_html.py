"""Results render as tables in Jupyter (_repr_html_), with the CLI's numbers."""

import numpy as np

import stepbudget as sb
from stepbudget.chapter import firstorder as fo
from stepbudget.views.tables import budget_dict
from stepbudget.units import fmt_bytes, fmt_time


def test_a_budget_and_its_memory_are_tables_with_the_clis_figures(budget_of):
    b = budget_of("llama3-405b")
    page = b._repr_html_()
    d = budget_dict(b)
    assert page.count("<table>") == 2
    assert fmt_time(d["step_s"]) in page and fmt_time(d["bubble_s"]) in page and "40.1%" in page
    assert all(fmt_bytes(r["bytes_per_gpu"]) in page for r in d["exchanges"])
    memory = sb.memory_per_gpu(b.plan)._repr_html_()
    assert fmt_bytes(float(sb.memory_per_gpu(b.plan).total)) in memory and ">yes<" in memory


def test_first_order_results_are_tables_and_arrays_show_their_range():
    assert "1.62 TB" in fo.roofline(405e9, 16384, 2**24, 400e12, 50e9)._repr_html_()
    sweep = fo.strong_scaling(405e9, np.array([16384, 131072]), 2**24, 128, 50e9, 400e12, 0.9, 989e12)._repr_html_()
    assert "778 ms to 6.22 s (shape (2,))" in sweep


def test_text_is_escaped():
    sc = sb.load("hpn-gpt3-175b", ["name=<b>mine</b>"])
    assert "&lt;b&gt;mine" in sb.estimate(sb.derive(sc))._repr_html_()
