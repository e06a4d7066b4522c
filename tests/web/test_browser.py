"""The chapter's panels in a real browser: defaults, controls, exercises, language, URL state, bad input.

Expected values are worked out here from the chapter's formulas (formulas.md 9), not read from the app,
and formatted with the CLI's own functions (units.py): the page must show the same digits.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from playwright.sync_api import expect

from stepbudget.units import fmt_bits_rate, fmt_bytes, fmt_rate, fmt_time
from stepbudget.web.fields import Choice, Field
from stepbudget.views.i18n import catalog, t
from stepbudget.web.panels import PANELS

from _web import load, pick, shows, type_in

N, G, B, F, NIC = 405e9, 16384, 2**24, 400e12, 50e9  # Llama 3 405B, 16M tokens, 400 TFLOP/s, 400 Gb/s


def ring(D):
    return 2 * (D - 1) / D  # ring all-reduce, formulas.md 1.1


def test_panel_5_1_roofline(watched, server):
    page = watched
    load(page, server)
    sent = ring(G) * 2 * N  # pure DP: the BF16 gradient, every GPU (formulas.md 9.1)
    assert shows(page, "p51-t-bytes") == fmt_bytes(sent) == "1.62 TB"
    assert shows(page, "p51-t-comm") == fmt_time(sent / NIC)
    assert shows(page, "p51-t-compute") == fmt_time(6 * N * B / G / F)
    assert shows(page, "p51-t-intensity") == f"{6 * N * B / G / sent:,.0f}"
    assert shows(page, "p51-t-balance-nic") == f"{F / NIC:,.0f}" == "8,000"
    type_in(page, "p51-M", "128")
    sent = ring(G / 128) * 2 * N / 128
    expect(page.locator("#p51-t-bytes .value")).to_have_text(fmt_bytes(sent))
    assert shows(page, "p51-t-intensity") == f"{6 * N * B / G / sent:,.0f}"
    expect(page.locator("#p51-t-verdict")).to_have_class(re.compile("good"))
    expect(page.locator("#p51-command")).to_have_text("stepbudget budget llama3-405b")


def test_panel_5_2_dp_exchange_and_its_legs(watched, server):
    page = watched
    load(page, server)
    psi = N / 128
    assert shows(page, "p52-t-shard") == fmt_bytes(2 * psi) == "6.33 GB"
    assert shows(page, "p52-t-bytes") == fmt_bytes(ring(128) * 2 * psi) == "12.6 GB"
    assert shows(page, "p52-t-time") == fmt_time(ring(128) * 2 * psi / NIC)
    pick(page, "p52-kind", "fsdp")
    pick(page, "p52-grads", "fp32")
    fsdp = 127 / 128 * psi * (4 + 2)  # FP32 reduce-scatter and BF16 all-gather (formulas.md 9.2)
    expect(page.locator("#p52-t-bytes .value")).to_have_text(fmt_bytes(fsdp))
    assert round(fsdp / 1e9) == 19 and shows(page, "p52-t-time") == fmt_time(fsdp / NIC)
    assert shows(page, "p52-t-intensity") == f"{6.2 * F / fsdp:,.0f}"  # about 130,000
    type_in(page, "p52-D", "512")
    expect(page.locator("#p52-t-bytes .value")).to_have_text(fmt_bytes(511 / 512 * psi * 6))


def test_panel_5_3_hpn_reread_and_the_ep_exercise(watched, server):
    page = watched
    load(page, server)
    h, s, L, V = 12288, 2048, 96, 51200  # GPT-3 175B (Brown et al. 2020)
    tp_layer = 4 * 2 * 7 / 8 * s * h * 2  # four ring all-reduces of b s h in BF16 per layer (formulas.md 9.3)
    reread = page.inner_text("#p53-hpn")
    assert fmt_bytes(tp_layer) in reread and "560 MB" in reread and fmt_bytes(s * h * 2 / 8) in reread
    params = 12 * L * h * h + V * h  # 12 L h^2 + V h: within 0.01 % of the model's count
    assert fmt_bytes(params / 64 * 2) in reread  # the DP message: the per-GPU gradient shard, 5.5 GB
    type_in(page, "p53-ep", "64")
    tokens, k = s // 8, 2  # a micro-batch's tokens over TP 8, top-2
    calls = 96 // 8 * (8192 // 512) * 2  # MoE layers a GPU holds x micro-batches x (forward, backward)
    ep = 2 * calls * tokens * k * h * 2 * 63 / 64  # dispatch and combine, the 63/64 that leave the GPU
    counts = calls // 2 * 64 * 64 * 8 * 63 / 64  # each forward dispatch first gathers 64 ranks' int64 count per expert
    expect(page.locator("#p53-t-total-ep .value")).to_have_text(fmt_bytes(ep + counts))
    assert "64 experts, top-2" in page.inner_text("#p53-out")  # the panel says what it assumed
    rows = page.locator("#p53-table tr.dim-ep")
    assert rows.count() == 3 and all("critical path" in rows.nth(i).inner_text() for i in range(3))
    pick(page, "p53-preset", "deepseek-v3")  # a preset button resets the degrees
    expect(page.locator("#p53-tp")).to_have_value("1")
    expect(page.locator("#p53-ep")).to_have_value("64")
    expect(page.locator("#p53-summary")).to_contain_text("DeepSeek-V3")


def test_panel_5_4_exercises(watched, server):
    page = watched
    load(page, server)
    comp = 6 * N * B / G / F
    comm = ring(128) * 2 * N / 128 / NIC
    assert shows(page, "p54-t-compute") == fmt_time(comp) and shows(page, "p54-t-comm") == fmt_time(comm)
    type_in(page, "p54-M", "1")  # exercise 1: the model-parallel group set to 1
    comm1 = ring(G) * 2 * N / NIC
    expect(page.locator("#p54-t-share .value")).to_have_text(f"{comm1 / (comp + comm1):.1%}")
    mfu1 = float(shows(page, "p54-t-mfu").rstrip("%"))
    assert comm1 / comp > 5 and mfu1 < 10
    type_in(page, "p54-M", "128")  # exercise 2: back to 128, half the bandwidth
    type_in(page, "p54-nic", "200 Gb/s")
    expect(page.locator("#p54-t-comm .value")).to_have_text(fmt_time(2 * comm))
    step = comp + 2 * comm * (1 - 0.9)
    assert shows(page, "p54-t-mfu") == f"{F / 989e12 * comp / step:.1%}"  # barely moves from 40 %
    type_in(page, "p54-nic", "400 Gb/s")  # exercise 3: 131,072 GPUs
    type_in(page, "p54-G", "131,072")
    expect(page.locator("#p54-t-compute .value")).to_have_text(fmt_time(6 * N * B / 131072 / F))
    assert shows(page, "p54-t-comm") == fmt_time(ring(1024) * 2 * N / 128 / NIC)
    why = page.inner_text("#p54-why")  # the full model says which of its terms differ, and by how much
    assert "Bubble" in why and "Rate" in why
    expect(page.locator("#p54-command")).to_have_text(
        "stepbudget budget llama3-405b --set cluster.gpus=131072 --set layout.dp=1024")


def test_panel_5_5_moe_layer(watched, server):
    page = watched
    load(page, server)
    R = lambda f, bw: 1.5 * f * 8 / 7 * bw / 989e12  # noqa: E731  MegaScale-MoE 7, exact form (formulas.md 7.1)
    assert shows(page, "p55-t-ratio") == f"{R(14336, 400e9):.3g}" == "9.94"
    assert shows(page, "p55-t-ratio-nic") == f"{R(14336, 50e9):.3g}" == "1.24"
    type_in(page, "p55-expert_ffn", "1408")  # DeepSeekMoE's small experts: about 1.0 even on NVLink
    expect(page.locator("#p55-t-ratio .value")).to_have_text(f"{R(1408, 400e9):.3g}")
    pick(page, "p55-link", "nic")
    expect(page.locator("#p55-t-ratio .value")).to_have_text(f"{R(1408, 50e9):.3g}")
    expect(page.locator("#p55-t-ratio")).to_have_class(re.compile("bad"))
    expect(page.locator("#p55-axis .main-svg").first).to_be_visible()
    pick(page, "p55-preset", "megascale-moe-352b")
    expect(page.locator("#p55-nvlink")).to_have_value("200 GB/s")  # the preset's NVLink, per direction
    expect(page.locator("#p55-t-ratio .value")).to_have_text(f"{R(14336, 200e9):.3g}")


def test_panel_5_6_the_exercise_keeps_the_average(watched, server):
    page = watched
    load(page, server)
    assert shows(page, "p56-t-bytes") == fmt_bytes(0.050 * NIC) == "2.5 GB"  # 50 ms at 400 Gb/s
    assert shows(page, "p56-t-excess") == "2.5 GB"
    type_in(page, "p56-burst", "40 ms")  # typing a burst length makes it the one that sets the burst
    expect(page.locator("#p56-by input[value='burst']")).to_be_checked()
    expect(page.locator(".derived #p56-duty")).to_have_count(1)
    expect(page.locator("#p56-t-duty .value")).to_have_text(f"{0.040 / 0.2:.1%}")
    type_in(page, "p56-duty", "30%")  # and typing a duty cycle, that
    type_in(page, "p56-duty", "25%")
    expect(page.locator("#p56-by input[value='duty']")).to_be_checked()
    page.click("#p56-pin")  # compare with 25 % at 400 Gb/s
    expect(page.locator("#p56-changes")).to_have_count(0)
    type_in(page, "p56-duty", "50%")
    expect(page.locator("#p56-t-average .value")).to_have_text(f"{fmt_bits_rate(0.5 * NIC)} ({fmt_rate(0.5 * NIC)})")
    type_in(page, "p56-rate", "200 Gb/s")  # half the line rate at twice the duty: the same average
    expect(page.locator("#p56-t-burst .value")).to_have_text(fmt_time(0.5 * 0.2))
    expect(page.locator("#p56-t-average .value")).to_have_text(f"{fmt_bits_rate(0.25 * NIC)} ({fmt_rate(0.25 * NIC)})")
    changed = page.inner_text("#p56-changes")
    assert changed.index("Peak-to-average") < changed.index("unchanged") < changed.index("Average load")
    expect(page.locator("#p56-t-average")).not_to_have_class(re.compile("changed"))
    expect(page.locator("#p56-t-peak")).to_have_class(re.compile("changed"))


def test_panel_5_7_what_changes(watched, server):
    page = watched
    load(page, server)
    pick(page, "p57-hbm", "141")
    expect(page.locator("#p57-table")).to_contain_text("TP8 CP1 PP8 DP128")
    row = page.locator("#p57-table tr.bytes-tp td")
    base, bigger = (float(row.nth(i).inner_text().split()[0]) for i in (1, 2))
    assert bigger == pytest.approx(2 * base, rel=0.01)  # twice the TP bytes per GPU, still on NVLink
    pick(page, "p57-changes", "moe")
    expect(page.locator("#p57-table tr.memory")).to_contain_text("does not fit")


def test_the_language_switch(watched, server):
    page = watched
    load(page, server, "?p54-G=131%2C072")
    english = {p.PID: shows(page, f"{p.PID}-t-{name}") for p, name in
               ((PANELS[0], "bytes"), (PANELS[1], "bytes"), (PANELS[3], "compute"), (PANELS[4], "ratio"))}
    page.click("#to-zh")
    page.wait_for_url(re.compile("lang=zh-Hant"))
    for selector in ("#p51-t-bytes", "#p54-terms", "#p57-table", "#p53-table"):
        page.wait_for_selector(selector)
    zh = catalog("zh-Hant")
    expect(page.locator("#p51 > h3")).to_contain_text(zh["p51.heading"])
    expect(page).to_have_title(zh["app.title"])
    assert page.evaluate("document.documentElement.lang") == "zh-Hant"
    expect(page.locator("#p54-G")).to_have_value("131,072")  # the controls come along
    body = page.inner_text("main")
    en = catalog("en")
    labels = [v for k, v in en.items() if "{" not in v and v != zh[k] and len(v) >= 5 and re.search("[a-z]", v)]
    left = [v for v in labels if re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", body)]
    assert left == []
    for pid, shown in english.items():  # the same numbers, only the words change
        tile = {"p51": "bytes", "p52": "bytes", "p54": "compute", "p55": "ratio"}[pid]
        assert re.findall(r"[\d.,]+", shows(page, f"{pid}-t-{tile}")) == re.findall(r"[\d.,]+", shown)
    assert shows(page, "p54-t-compute").endswith("毫秒")


def test_a_url_restores_every_control(watched, server):
    page = watched
    state = {"lang": "en"}
    for panel in PANELS:
        for spec in panel.CONTROLS:
            key = f"{panel.PID}-{spec.name}"
            if isinstance(spec, Choice):
                state[key] = ",".join(spec.options[-1:]) if spec.many else spec.options[-1]
            elif spec.name not in ("N",):
                state[key] = spec.default.replace("16,384", "32,768")
    state.update({"p53-preset": "hpn-gpt3-175b", "p53-dp": "256", "p55-preset": "chapter", "p56-by": "duty",
                  "p54-G": "32,768", "p51-G": "32,768", "p57-changes": "batch,long"})
    load(page, server, "?" + urlencode(state))
    for panel in PANELS:
        for spec in panel.CONTROLS:
            key = f"{panel.PID}-{spec.name}"
            if key not in state:
                continue
            if isinstance(spec, Field):
                expect(page.locator(f"#{key}")).to_have_value(state[key])
            else:
                for value in state[key].split(",") if spec.many else [state[key]]:
                    expect(page.locator(f"#{key} input[value='{value}']")).to_be_checked()
    assert shows(page, "p54-t-compute") == fmt_time(6 * N * B / 32768 / F)
    page.reload()  # and the URL the page keeps is the state again
    for selector in ("#p54-t-compute", "#p57-table"):
        page.wait_for_selector(selector)
    assert shows(page, "p54-t-compute") == fmt_time(6 * N * B / 32768 / F)
    expect(page.locator("#p57-changes input[value='long']")).to_be_checked()


BAD = {"count": "twelve", "integer": "1.5", "fraction": "lots", "rate": "400", "flops": "fast", "bytes": "64",
       "time": "six seconds"}
"""A value each kind of field refuses: words, a fraction of a whole number, a rate without its unit, ...; every
third field gets an empty value instead, and every third a negative one."""


def bad_value(spec: Field, i: int) -> str:
    return ["", f"-{spec.default}", BAD[spec.kind]][i % 3]


@pytest.mark.parametrize("lang", ["en", "zh-Hant"])
def test_every_field_says_what_is_wrong_with_it(watched, server, lang):
    page = watched
    load(page, server, f"?lang={lang}")
    i = 0
    for panel in PANELS:
        # A panel's fields all go wrong before any is put right: while one is wrong the panel computes nothing,
        # so each round trip checks the wiring without re-running the panel. The wiring is the same in both
        # languages, so Chinese tries one field a panel; test_i18n.py reads every message in both.
        fields = [spec for spec in panel.CONTROLS if isinstance(spec, Field)][:None if lang == "en" else 1]
        for spec in fields:
            ident = f"{panel.PID}-{spec.name}"
            type_in(page, ident, bad_value(spec, i))
            i += 1
            expect(page.locator(f"#{ident}-error")).to_contain_text(t(lang, f"{panel.PID}.f.{spec.name}"))
            expect(page.locator(f"#{panel.PID}-out .stale")).to_be_visible()
        for spec in fields:
            type_in(page, f"{panel.PID}-{spec.name}", spec.default)
        for spec in fields:
            expect(page.locator(f"#{panel.PID}-{spec.name}-error")).to_be_empty()
        expect(page.locator(f"#{panel.PID}-out .stale")).to_have_count(0)
    type_in(page, "p54-M", "100")  # a layout that does not divide: named under its field
    expect(page.locator("#p54-M-error")).to_contain_text("16,384")


def test_screenshots_of_every_panel_in_both_languages(watched, server, tmp_path_factory):
    page = watched
    page.set_viewport_size({"width": 1280, "height": 900})
    folder = tmp_path_factory.mktemp("screenshots")
    for lang in ("en", "zh-Hant"):
        load(page, server, f"?lang={lang}")
        page.wait_for_selector("#p55-axis .main-svg")
        for panel in PANELS:
            path = folder / f"{panel.PID}-{lang}.png"
            page.locator(f"#{panel.PID}").screenshot(path=path)
            assert path.stat().st_size > 10_000
    print(f"screenshots in {folder}")
