// stepbudget's page state lives in its URL: every control's value is a query parameter named by the
// control's id, beside lang. Each panel's output ends with a hidden element holding its controls' values as
// a query (web/components.py); whenever an output changes, the URL is rewritten in place from them (no new
// history entry, no reload). switch() reloads the page in the other language with the same controls.
(function () {
    let pending = false;
    function record() {
        pending = false;
        placeSliders();
        const params = new URLSearchParams(window.location.search);
        document.querySelectorAll(".url-state[data-query]").forEach(function (el) {
            new URLSearchParams(el.getAttribute("data-query")).forEach(function (value, key) { params.set(key, value); });
        });
        const query = "?" + params.toString();
        if (query !== window.location.search) {
            window.history.replaceState(window.history.state, "", query + window.location.hash);
        }
    }
    new MutationObserver(function () {
        if (!pending) { pending = true; window.requestAnimationFrame(record); }
    }).observe(document.documentElement, {childList: true, subtree: true});

    // a figure drawn before the Chinese font arrived was laid out for fallback glyphs: once every font has
    // loaded, a resize makes plotly's responsive figures lay themselves out again
    if (document.fonts && document.fonts.ready) {
        document.fonts.ready.then(function () { window.dispatchEvent(new Event("resize")); });
    }

    // the copy button beside each command: the outputs are plain HTML, so one listener serves them all
    document.addEventListener("click", function (event) {
        const button = event.target.closest && event.target.closest("button.copy");
        if (!button || !navigator.clipboard) { return; }
        const code = document.getElementById(button.getAttribute("data-copy"));
        if (code) { navigator.clipboard.writeText(code.innerText).catch(function () {}); }
    });
})();

// The sliders beside the text fields. A field's text is read as the server reads it (units.parse: the same
// prefixes and units; tests/web check the two agree), only to place its slider; the server still reads the text.
const PREFIX = {"": 1, k: 1e3, K: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18};
const BINARY = {Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40};
const TIME = {s: 1, ms: 1e-3, us: 1e-6, "µs": 1e-6, ns: 1e-9, min: 60, h: 3600};

function unitScale(unit, kind) {
    const prefixed = function (core) { return Object.prototype.hasOwnProperty.call(PREFIX, core) ? PREFIX[core] : null; };
    if (kind === "time") { return Object.prototype.hasOwnProperty.call(TIME, unit) ? TIME[unit] : null; }
    if (kind === "count" || kind === "integer") {
        if (unit === "B") { return 1e9; }
        return prefixed(unit) !== null ? prefixed(unit) : (BINARY[unit] || null);
    }
    if (kind === "bytes") {
        for (const p in BINARY) { if (unit === p + "B" || unit === p + "b") { return BINARY[p]; } }
        return unit.endsWith("B") ? prefixed(unit.slice(0, -1)) : null;
    }
    if (kind === "rate") {
        if (!(unit.endsWith("/s") || unit.endsWith("ps"))) { return null; }
        const core = unit.slice(0, -2);
        if (core.endsWith("B")) { return prefixed(core.slice(0, -1)); }
        if (core.endsWith("b")) { const p = prefixed(core.slice(0, -1)); return p === null ? null : p / 8; }
        return null;
    }
    if (kind === "flops") {
        for (const spelled of ["FLOP/s", "FLOPS", "FLOPs/s"]) {
            if (unit.endsWith(spelled)) { return prefixed(unit.slice(0, -spelled.length)); }
        }
    }
    return null;
}

function readField(text, kind) {
    // the number a field's text stands for, in SI units, or null where the server refuses it (web/fields.py _read)
    if (typeof text !== "string" || !text.trim()) { return null; }
    const shown = text.trim();
    if (shown.includes(",") && !/^\s*[-+]?\d{1,3}(,\d{3})+(\.\d*)?(?![0-9,])/.test(shown)) { return null; }
    if (shown.startsWith("-")) { return null; }
    const s = shown.replace(/[,_]/g, "");
    const number = function (t) { return /^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$/.test(t) ? Number(t) : null; };
    if (kind === "fraction") {
        const pct = s.endsWith("%");
        const x = number(s.replace(/%$/, "").trim());
        return x === null ? null : (pct ? x / 100 : x);
    }
    if (kind === "real") { return number(s); }
    if (kind !== "count" && kind !== "integer" && /^[-+]?[0-9.eE+-]+$/.test(s)) { return null; }  // no unit
    if (kind === "integer" && !/^[0-9.eE+]+$/.test(s)) { return null; }
    const m = /^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµ/]*(?:\/s)?)\s*$/.exec(s);
    if (!m) { return null; }
    const scale = m[2] === "" ? 1 : unitScale(m[2], kind);
    return scale === null ? null : Number(m[1]) * scale;
}

function positionOf(spec, x) {
    return spec.scale_kind === "powers" ? Math.log2(x) : spec.scale_kind === "log" ? Math.log10(x) : x;
}

function valueAt(spec, at) {
    return spec.scale_kind === "powers" ? 2 ** Math.round(at) : spec.scale_kind === "log" ? 10 ** at : at;
}

function shown(spec, x) {
    // a value as the field's default writes it: its unit, its spacing, thousands grouped where the default is
    let n = x / spec.scale;
    if (spec.whole) { n = Math.round(n); }
    let text;
    if (spec.grouped || (spec.whole && spec.unit === "")) {
        text = n.toLocaleString("en-US", {maximumFractionDigits: 0, useGrouping: spec.grouped});
    } else {
        text = String(Number(n.toPrecision(3)));
    }
    return text + spec.space + spec.unit;
}

const THROTTLE_MS = 120;
const lastSent = new Map();
const trailing = new Map();

function specOf(box) { return JSON.parse(box.getAttribute("data-spec")); }

function placeSliders() {
    // each slider at its field's value, where the field reads and the slider is elsewhere (typed, preset, try it)
    const clientside = window.dash_clientside;
    if (!clientside || !clientside.set_props) { return; }
    document.querySelectorAll(".slider[data-field]").forEach(function (box) {
        const field = document.getElementById(box.getAttribute("data-field"));
        const thumb = box.querySelector("[role=slider]");
        if (!field || !thumb) { return; }
        const spec = specOf(box);
        const x = readField(field.value, spec.kind);
        if (x === null || !(x > 0 || spec.scale_kind === "linear")) { return; }
        const low = Number(thumb.getAttribute("aria-valuemin")), high = Number(thumb.getAttribute("aria-valuemax"));
        const at = Math.min(high, Math.max(low, positionOf(spec, x)));
        if (Math.abs(at - Number(thumb.getAttribute("aria-valuenow"))) > 1e-6) {
            clientside.set_props(box.getAttribute("data-field") + "-slider", {value: at});
        }
    });
}

function slid(thumb) {
    // a slider moved (dragged, clicked or keyed): write its value into the field, at most once per THROTTLE_MS
    // while it moves and once more where it stops; the panel's callback reads the field as if it were typed
    const box = thumb.closest(".slider[data-field]");
    const clientside = window.dash_clientside;
    if (!box || !clientside || !clientside.set_props) { return; }
    const ident = box.getAttribute("data-field");
    const field = document.getElementById(ident);
    const spec = specOf(box);
    const at = Number(thumb.getAttribute("aria-valuenow"));
    const typed = field ? readField(field.value, spec.kind) : null;
    if (!field || !Number.isFinite(at) || (typed !== null && Math.abs(at - positionOf(spec, typed)) < 1e-6)) { return; }
    const wait = THROTTLE_MS - (performance.now() - (lastSent.get(ident) || 0));
    window.clearTimeout(trailing.get(ident));
    if (wait > 0) { trailing.set(ident, window.setTimeout(function () { slid(thumb); }, wait)); return; }
    lastSent.set(ident, performance.now());
    const text = shown(spec, valueAt(spec, at));
    if (text !== field.value) { clientside.set_props(ident, {value: text}); }
}

new MutationObserver(function (changes) {
    changes.forEach(function (change) { if (change.target.getAttribute("role") === "slider") { slid(change.target); } });
}).observe(document.documentElement, {attributes: true, attributeFilter: ["aria-valuenow"], subtree: true});

window.dash_clientside = Object.assign({}, window.dash_clientside, {
    stepbudget: {
        read: readField,
        shown: shown,
        title: function (title, lang) {
            document.title = title;
            document.documentElement.lang = lang;
            return window.dash_clientside.no_update;
        },
        switch: function () {
            const ctx = window.dash_clientside.callback_context;
            const target = ctx.triggered_id === "to-zh" ? "zh-Hant" : "en";
            const params = new URLSearchParams(window.location.search);
            params.set("lang", target);
            window.location.search = params.toString();
            return target;
        }
    }
});
