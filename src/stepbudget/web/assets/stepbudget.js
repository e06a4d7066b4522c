// stepbudget's page state lives in its URL: every control's value is a query parameter named by the
// control's id, beside lang. Each panel's output ends with a hidden element holding its controls' values as
// a query (web/components.py); whenever an output changes, the URL is rewritten in place from them (no new
// history entry, no reload). switch() reloads the page in the other language with the same controls.
(function () {
    let pending = false;
    function record() {
        pending = false;
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

    // the copy button beside each command: the outputs are plain HTML, so one listener serves them all
    document.addEventListener("click", function (event) {
        const button = event.target.closest && event.target.closest("button.copy");
        if (!button || !navigator.clipboard) { return; }
        const code = document.getElementById(button.getAttribute("data-copy"));
        if (code) { navigator.clipboard.writeText(code.innerText).catch(function () {}); }
    });
})();

window.dash_clientside = Object.assign({}, window.dash_clientside, {
    stepbudget: {
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
