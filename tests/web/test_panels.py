"""The seven panels' callbacks, called as the page calls them: the chapter's numbers at the defaults, its
exercises, and the inline messages for inputs that can't be used (the browser tests drive the same page)."""

import pytest
from dash import html

from stepbudget.web import components as ui
from stepbudget.web.app import create_app, page
from stepbudget.views.i18n import LANGS
from stepbudget.web.panels import PANELS, p51, p52, p53, p54, p55, p56, p57

from _web import compute, defaults, find, ids, text, tile


def run(panel, lang="en", **changes):
    return compute(panel, lang, **changes)


@pytest.mark.parametrize("lang", list(LANGS))
def test_panel_5_1_defaults_are_the_chapters_pure_dp(lang):
    out = run(p51, lang)
    assert tile(out, "p51-t-bytes") == "1.62 TB"
    assert tile(out, "p51-t-comm").startswith("32.4 ")  # "about 32 seconds"
    assert tile(out, "p51-t-compute").startswith("6.22 ")  # "about 6.2 seconds"
    assert tile(out, "p51-t-intensity") == "1,536"  # "about 1,500 FLOP per byte"
    assert tile(out, "p51-t-balance-nic") == "8,000"
    assert {"en": "5.2×", "zh-Hant": "5.2 倍"}[lang] in tile(out, "p51-t-verdict")
    assert "llama3-405b-puredp" in find(out, "p51-command").children


def test_panel_5_2_defaults_and_the_fp32_reduce_scatter():
    out = run(p52)
    assert tile(out, "p52-t-params") == "3.16 billion" and tile(out, "p52-t-shard") == "6.33 GB"
    assert tile(out, "p52-t-bytes") == "12.6 GB" and tile(out, "p52-t-time") == "251 ms"
    assert tile(out, "p52-t-share") == "4.1%"
    fp32 = run(p52, kind="fsdp", grads="fp32")
    assert tile(fp32, "p52-t-bytes") == "18.8 GB" and tile(fp32, "p52-t-time") == "377 ms"
    assert tile(fp32, "p52-t-share") == "6.1%" and tile(fp32, "p52-t-intensity") == "131,662"
    assert tile(run(p52, lang="zh-Hant"), "p52-t-params") == "31.6 億"


def test_panel_5_3_hpn_table_3_reread():
    out = run(p53)
    hpn = text(find(out, "p53-hpn"))
    assert "352 MB per layer per 2K-token micro-batch" in hpn and "5.46 GB" in hpn and "6.29 MB" in hpn
    assert tile(out, "p53-t-total-dp") == "10.9 GB"


def test_panel_5_3_hpn_with_ep_64_fills_in_an_moe_block_and_says_so():
    out = run(p53, ep="64")
    said = text(out)
    assert "64 experts, top-2, each 24,576 wide" in said and "busiest expert at 1.52x the mean load" in said
    ep, dense_dp = tile(out, "p53-t-total-ep"), tile(run(p53), "p53-t-total-dp")
    assert (ep, dense_dp) == ("9.52 GB", "10.9 GB")  # the all-to-all (and its token counts) near the dense DP bytes
    rows = find(out, "p53-table").children[1].children
    assert all("critical path" in text(r.children[10]) for r in rows if text(r.children[0]) == "EP")
    assert "does not fit" in text(find(out, "p53-summary"))


def test_panel_5_3_names_the_control_a_bad_layout_breaks():
    with pytest.raises(ui.PanelProblem) as e:
        run(p53, tp="7", dp="100")
    assert {p[0] for p in e.value.problems} == {"tp", "dp"}


@pytest.mark.parametrize("preset", p53.dims.PANEL_PRESETS)
def test_panel_5_3_every_preset_as_written(preset):
    d = p53.dims.preset_degrees(preset)
    out = run(p53, preset=preset, **{n: str(getattr(d, n)) for n in p53.DEGREES}, order=",".join(d.order))
    assert find(out, "p53-table")


def test_panel_5_4_exercises():
    base = run(p54)
    assert tile(base, "p54-t-compute").startswith("6.22") and tile(base, "p54-t-comm") == "251 ms"
    group_1 = run(p54, M="1")
    assert tile(group_1, "p54-t-share") == "83.9%" and float(tile(group_1, "p54-t-mfu").rstrip("%")) < 10
    half = run(p54, nic="200 Gb/s")
    assert abs(float(tile(half, "p54-t-mfu").rstrip("%")) - float(tile(base, "p54-t-mfu").rstrip("%"))) < 0.5
    big = run(p54, G="131,072")
    assert tile(big, "p54-t-compute") == "778 ms" and tile(big, "p54-t-comm") == "253 ms"
    why = text(find(big, "p54-why"))
    assert "Bubble" in why and "562 TFLOP/s" in why  # the full model says why its MFU is lower


def test_panel_5_4_full_model_matches_budget_and_scale():
    terms = find(run(p54, G="131,072"), "p54-terms")
    full = {text(r.children[0]): text(r.children[2]) for r in terms.children[1].children}
    assert full["MFU"] == "16.8%"  # budget --set cluster.gpus=131072 and scale agree on it
    # as budget prints the job: compute at the measured rate holds the bubble; exposed is DP's at the edges
    assert full["Compute"] == "1.8 s" and full["Pipeline bubble (inside compute)"] == "1.17 s"
    assert full["Exposed communication (DP at the step's edges)"] == "76.2 ms"
    assert full["DP exchange"] == "609 ms" and full["TP exchange"] == "68.8 ms" and full["PP exchange"] == "11 ms"


@pytest.mark.parametrize("panel, changes", [(p51, {}), (p52, {}), (p54, {"G": "8,192"})])
def test_a_full_model_box_says_when_its_job_does_not_fit(panel, changes):
    said = text(find(run(panel, **changes), f"{panel.PID}-no-fit"))  # as `stepbudget budget` says first
    assert "does not fit" in said and "80 GB" in said


def test_panel_5_7_names_a_command_at_its_defaults_too():
    assert find(run(p57), "p57-command").children == "stepbudget whatif llama3-405b --chapter"


@pytest.mark.parametrize("lang, words", [("en", "does not fit: it needs 92.1 GB per GPU against 80 GB"),
                                         ("zh-Hant", "放不下：每顆 GPU 需要 92.1 GB，HBM 只有 80 GB")])
def test_panel_5_4_says_when_the_full_models_job_does_not_fit(lang, words):
    assert words in text(find(run(p54, lang, G="8,192"), "p54-no-fit"))  # Llama 3 on half its GPUs, as budget says
    with pytest.raises(KeyError):
        find(run(p54, lang), "p54-no-fit")  # the job as measured fits


def test_panel_5_5_chapter_ratios_and_presets():
    out = run(p55)
    assert tile(out, "p55-t-ratio") == "9.94" and tile(out, "p55-t-ratio-nic") == "1.24"
    assert tile(out, "p55-t-compute") == "1.09 ms" and tile(out, "p55-t-nvlink") == "110 µs"
    assert tile(run(p55, expert_ffn="1408"), "p55-t-ratio") == "0.976"  # DeepSeekMoE's small experts: about 1.0
    for name in p55.PRESETS[1:]:
        out = run(p55, preset=name, **p55.preset_values(name))
        assert find(out, "p55-command").children == f"stepbudget moe {name}"
        changed = run(p55, preset=name, **{**p55.preset_values(name), "top_k": "1"})  # the command follows the layer
        assert find(changed, "p55-command").children == f"stepbudget moe {name} --set model.moe.top_k=1"
        with pytest.raises(KeyError):  # a hidden size reshapes the whole job: no moe command prints this layer
            find(run(p55, preset=name, **{**p55.preset_values(name), "hidden": "1024"}), "p55-command")
    assert find(run(p55, nvlink="300 GB/s", expert_ffn="1408"), "p55-command").children == (
        "stepbudget moe megascale-moe-352b --set cluster.nvlink_Bps=300GB/s --set model.moe.expert_ffn_size=1408")


def test_panel_5_6_defaults_and_the_exercise():
    out = run(p56)
    assert tile(out, "p56-t-bytes") == "2.5 GB" and tile(out, "p56-t-excess") == "2.5 GB"  # 50 ms at 400 Gb/s
    a = defaults(p56, by="duty", duty="25%", rate="400 Gb/s")
    memory = p56.compute("en", a, None, set()).memory
    second = p56.compute("en", defaults(p56, by="duty", duty="50%", rate="200 Gb/s"), memory, set()).children
    said = text(find(second, "p56-changes"))
    changed, kept = said.split("unchanged")
    assert "Average load" in kept and "What the counter reports" in kept
    assert "Peak-to-average" in changed and "Burst length" in changed


def test_panel_5_7_more_hbm_halves_pp_and_a_misfit_is_marked():
    out = run(p57, hbm="141")
    table = find(out, "p57-table")
    said = text(table)
    assert "TP8 CP1 PP8 DP128" in said and "474 GB" in said  # twice the TP bytes, PP 16 -> 8
    moe = text(find(run(p57, changes=("moe",)), "p57-table"))
    assert "does not fit" in moe


def test_every_callback_reads_and_writes_ids_the_page_has():
    app = create_app()
    present = set(ids(app.layout)) | set(ids(page("en", {})))
    for callback in app.callback_map.values():
        for dep in callback["inputs"] + callback["state"]:
            assert dep["id"] in present, dep
        outputs = callback["output"] if isinstance(callback["output"], list) else [callback["output"]]
        assert {o.component_id for o in outputs} <= present, outputs


def test_every_output_is_plain_html_with_its_braces_escaped():
    for panel in PANELS:
        assert ui.html_of(run(panel)).startswith("<")
    moe = ui.html_of(run(p53, ep="64"))  # the command sets the MoE block field by field
    assert "{" not in moe and "--set model.moe.num_experts=64 --set model.moe.top_k=2" in moe
    assert ui.html_of(html.Div("<b> & {x}", title='"')) == '<div title="&quot;">&lt;b&gt; &amp; &#123;x&#125;</div>'


def test_ids_are_unique_on_the_page_and_in_each_panels_output():
    everything = ids(page("en", {})) + [i for panel in PANELS for i in ids(run(panel))]
    assert len(everything) == len(set(everything))
