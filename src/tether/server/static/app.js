/* tether inspector: a dependency-free single page over the tether serve JSON API and its SSE stream. */
"use strict";
(function () {
  const STATUSES = ["queued", "running", "suspended", "ok", "error", "exhausted", "cancelled"];
  const EVENT_TYPES = [
    "run:start", "run:end", "phase:start", "log", "budget:update", "agent:queued", "agent:start", "agent:end",
    "agent:error", "agent:schema-retry", "agent:stream", "tool:start", "tool:end", "spawn", "spawn:refused",
    "external:waiting", "approval:pending", "child:start", "child:end", "phase:end", "model:start", "model:end",
    "budget:draw", "budget:refused", "warning",
  ];
  const QUIET = new Set(["agent:stream", "log", "model:start"]); // frequent, and they change nothing the page shows
  const view = document.getElementById("view");

  // -- DOM and formatting helpers -------------------------------------------------------------
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  // replaceChildren that flattens arrays and drops null/false (so optional parts can be written inline)
  function fill(el, ...kids) {
    el.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined && k !== false)
      .map((k) => (k instanceof Node ? k : document.createTextNode(String(k)))));
    return el;
  }
  const svgNS = "http://www.w3.org/2000/svg";
  function s(tag, attrs, ...kids) {
    const el = document.createElementNS(svgNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
    for (const kid of kids.flat()) if (kid !== null && kid !== undefined) el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    return el;
  }
  // A USD amount to its precision, the CLI's rule (tether.contracts.money.usd): six significant digits, at least
  // two decimals, no trailing zeros past them ($0.20, $0.001, $0.005, $0.03612).
  function usd(v) {
    if (v === null || v === undefined) return "—";
    if (v === 0 || !isFinite(v)) return v === 0 ? "$0.00" : "$" + v;
    const digits = Math.min(20, Math.max(2, 5 - Math.floor(Math.log10(Math.abs(v)))));
    const [whole, frac] = v.toFixed(digits).split(".");
    return "$" + whole + "." + frac.replace(/0+$/, "").padEnd(2, "0");
  }
  const int = (v) => (v === null || v === undefined ? "—" : Math.round(v).toLocaleString("en-US"));
  function dur(sec) {
    if (sec === null || sec === undefined || !isFinite(sec)) return "—";
    if (sec < 1) return Math.round(sec * 1000) + " ms";
    if (sec < 60) return sec.toFixed(sec < 10 ? 2 : 1) + " s";
    if (sec < 3600) return Math.floor(sec / 60) + "m " + String(Math.round(sec % 60)).padStart(2, "0") + "s";
    return Math.floor(sec / 3600) + "h " + String(Math.floor((sec % 3600) / 60)).padStart(2, "0") + "m";
  }
  function ago(ts) {
    const d = Date.now() / 1000 - ts;
    if (d < 5) return "just now";
    if (d < 60) return Math.round(d) + " s ago";
    if (d < 3600) return Math.round(d / 60) + " min ago";
    if (d < 86400) return Math.round(d / 3600) + " h ago";
    return new Date(ts * 1000).toLocaleDateString();
  }
  const stamp = (ts) => (ts ? new Date(ts * 1000).toLocaleString() : "");
  const pill = (status, big) => h("span", { class: "pill" + (big ? " lg" : ""), "data-status": status }, status);
  const json = (v) => h("pre", { class: "json" }, JSON.stringify(v, null, 2));

  function spendBar(spent, ceiling) {
    if (!ceiling) return h("div", { class: "spend" }, h("span", { class: "amount num" }, usd(spent)), h("span", { class: "small muted" }, "no ceiling"));
    const frac = Math.min(spent / ceiling, 1);
    const cls = "bar" + (spent >= ceiling ? " over" : frac >= 0.8 ? " warn" : "");
    return h("div", { class: "spend", title: (100 * spent / ceiling).toFixed(1) + "% of the ceiling" },
      h("span", { class: "amount num" }, usd(spent), h("span", { class: "muted" }, " / " + usd(ceiling))),
      h("div", { class: cls }, h("span", { style: "width:" + (100 * frac).toFixed(2) + "%" })));
  }

  // -- API -------------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.error && body.error.message) || "HTTP " + status);
      this.status = status;
      this.code = body && body.error && body.error.code;
    }
  }
  async function api(path, options) {
    const init = Object.assign({ headers: { Accept: "application/json", "X-Tether-Request": "1" } }, options || {});
    if (init.body !== undefined) init.headers["Content-Type"] = "application/json";
    const res = await fetch(path, init);
    if (res.status === 401) { location.reload(); throw new ApiError(401, null); }
    const body = await res.json().catch(() => null);
    if (!res.ok) throw new ApiError(res.status, body);
    return body;
  }
  const post = (path, body) => api(path, { method: "POST", body: JSON.stringify(body) });

  // -- live connection indicator and the event stream ------------------------------------------
  const conn = { el: document.getElementById("conn"), text: document.getElementById("conn-text") };
  function setConn(state, text) { conn.el.dataset.state = state; conn.text.textContent = text; }

  let stream = null;
  function closeStream() { if (stream) { stream.close(); stream = null; } setConn("idle", "idle"); }
  function openStream(runId, onEvent) {
    closeStream();
    const es = new EventSource("/api/runs/" + encodeURIComponent(runId) + "/events");
    stream = es;
    setConn("live", "connecting");
    es.onopen = () => setConn("live", "live");
    for (const type of EVENT_TYPES) {
      es.addEventListener(type, (ev) => {
        setConn("live", "live");
        if (!QUIET.has(type)) onEvent(type, JSON.parse(ev.data));
      });
    }
    es.addEventListener("end", () => { if (stream === es) closeStream(); onEvent("end", null); });
    es.onerror = () => { if (stream === es) setConn("error", "reconnecting"); };
  }

  // -- routing ---------------------------------------------------------------------------------
  let current = null; // the active page, with a stop() that clears its timers and stream
  function route() {
    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    if (parts[0] === "runs" && parts[1] && parts[2] === "diff" && parts[3]) {
      closeDrawer();
      const key = parts[1] + "\u0000" + parts[3];
      if (!current || current.diffKey !== key) { stop(); current = diffPage(parts[1], parts[3]); }
      return;
    }
    if (parts[0] === "sessions") {
      closeDrawer();
      const key = "session\u0000" + (parts[1] || "");
      if (!current || current.sessionKey !== key) { stop(); current = parts[1] ? sessionPage(parts[1]) : sessionListPage(); }
      return;
    }
    if (parts[0] === "runs" && parts[1]) {
      if (!current || current.runId !== parts[1]) { stop(); current = runPage(parts[1]); }
      if (parts[2] === "agents" && parts[3]) openTranscript(parts[1], parts[3]); else closeDrawer();
      return;
    }
    closeDrawer();
    stop();
    current = listPage();
  }
  function stop() { if (current) current.stop(); current = null; closeStream(); }
  function crumbs(...items) {
    const nav = document.getElementById("crumbs");
    fill(nav, ...items.flatMap((it, i) => [i ? h("span", { class: "sep" }, "/") : null, it]));
  }
  window.addEventListener("hashchange", route);

  // -- run list --------------------------------------------------------------------------------
  function listPage() {
    const state = { status: sessionStorage.getItem("tether.filter") || "", runs: [], cursor: null, extra: false };
    crumbs(h("span", {}, "Runs"));
    const tbody = h("tbody");
    const more = h("div", { class: "more" });
    const chips = h("div", { class: "filters", role: "group", "aria-label": "filter by status" });
    const renderChips = () => fill(chips, ...["", ...STATUSES].map((st) =>
      h("button", { class: "chip", "aria-pressed": String(state.status === st), "data-filter": st || "all",
        onclick: () => { state.status = st; sessionStorage.setItem("tether.filter", st); state.extra = false; renderChips(); load(false); } },
        st || "all")));
    renderChips();
    const errorBox = h("div");
    fill(view, 
      h("div", { class: "page-head" }, h("h1", {}, "Runs"), h("a", { href: "#/sessions", class: "btn btn-ghost", "data-testid": "sessions-link" }, "Sessions")),
      chips,
      h("div", { class: "card" }, h("div", { class: "table-wrap" }, h("table", { class: "runs", "data-testid": "run-list" },
        h("thead", {}, h("tr", {}, h("th", {}, "Run"), h("th", {}, "Status"), h("th", {}, "Spend / ceiling"),
          h("th", { class: "hide-sm" }, "Started"), h("th", { class: "num" }, "Duration"), h("th", { class: "num hide-sm" }, "Pending"))),
        tbody)), more),
      errorBox);

    function row(r) {
      const href = "#/runs/" + encodeURIComponent(r.run_id);
      return h("tr", { class: "clickable", "data-run-id": r.run_id, "data-status": r.status, onclick: (ev) => { if (ev.target.tagName !== "A") location.hash = href; } },
        h("td", {}, h("a", { href }, r.run_id), h("div", { class: "small muted" }, r.workflow)),
        h("td", {}, pill(r.status)),
        h("td", {}, spendBar(r.spent_usd, r.budget_usd)),
        h("td", { class: "hide-sm", title: stamp(r.created_at) }, ago(r.created_at)),
        h("td", { class: "num" }, dur(r.duration_s)),
        h("td", { class: "num hide-sm" }, r.pending ? h("span", { class: "pill", "data-status": "suspended" }, r.pending) : h("span", { class: "muted" }, "—")));
    }
    function render() {
      fill(tbody, ...(state.runs.length ? state.runs.map(row)
        : [h("tr", {}, h("td", { colspan: 6 }, h("div", { class: "empty" }, state.status ? "No " + state.status + " runs." : "No runs in this store yet.")))]));
      fill(more, state.cursor ? h("button", { class: "btn", onclick: () => { state.extra = true; load(true); } }, "Load more") : "");
    }
    async function load(append) {
      const q = new URLSearchParams({ limit: "50" });
      if (state.status) q.set("status", state.status);
      if (append && state.cursor) q.set("cursor", state.cursor);
      try {
        const page = await api("/api/runs?" + q);
        state.runs = append ? state.runs.concat(page.runs) : page.runs;
        state.cursor = page.next_cursor;
        fill(errorBox);
        render();
      } catch (e) { fill(errorBox, h("div", { class: "error-box" }, e.message)); }
    }
    load(false);
    const timer = setInterval(() => { if (!state.extra && document.visibilityState === "visible") load(false); }, 4000);
    return { stop: () => clearInterval(timer) };
  }

  // -- run view --------------------------------------------------------------------------------
  function runPage(runId) {
    const page = { runId, data: null, expanded: new Set(), pendingKeys: null, timer: null, refreshing: null, again: false };
    const enc = encodeURIComponent(runId);
    crumbs(h("a", { href: "#/" }, "Runs"), h("span", { class: "mono" }, runId));
    const el = {
      head: h("div", { class: "page-head" }),
      stats: h("div", { class: "stats" }),
      lineage: h("div"),
      forks: h("div"),
      tree: h("div", { class: "card-body", "data-testid": "agent-tree" }),
      chart: h("div", { class: "chart", "data-testid": "spend-chart" }),
      pending: h("div", { class: "card-body", "data-testid": "suspensions" }),
      outcome: h("div", { class: "card-body" }),
      journal: h("div", { class: "table-wrap" }),
      ledger: h("div", { class: "table-wrap" }),
      error: h("div"),
      treeHint: h("span", { class: "hint" }),
      journalHint: h("span", { class: "hint" }),
    };
    const card = (title, hint, body, extra) => h("section", Object.assign({ class: "card" }, extra || {}),
      h("div", { class: "card-head" }, h("h2", {}, title), hint), body);
    fill(view, 
      el.head, el.error, el.lineage, el.forks, el.stats,
      h("div", { class: "grid" },
        h("div", { class: "stack" },
          card("Agent tree", el.treeHint, el.tree)),
        h("div", { class: "stack" },
          card("Spend against the ceiling", h("span", { class: "hint" }, "from the journal's timestamps"), el.chart),
          card("Pending suspensions", null, el.pending),
          card("Outcome", null, el.outcome))),
      h("div", { class: "full" }, card("Journal", el.journalHint, h("div", { class: "card-body flush" }, el.journal))),
      h("div", { class: "full" }, card("Effect ledger", h("span", { class: "hint" }, "one row per tool dispatch attempt"), h("div", { class: "card-body flush" }, el.ledger))));

    async function fetchAll() {
      const [detail, tree, ledger, forks] = await Promise.all([
        api("/api/runs/" + enc), api("/api/runs/" + enc + "/tree"), api("/api/runs/" + enc + "/ledger"),
        api("/api/runs/" + enc + "/forks")]);
      const entries = [];
      const reuse = new Map(); // a fork's copied entries: seq -> {source_seq, reused}
      let cursor = null;
      for (let i = 0; i < 20; i++) { // at most 100k entries in the page
        const q = new URLSearchParams({ limit: "5000" });
        if (cursor) q.set("cursor", cursor);
        const pageJ = await api("/api/runs/" + enc + "/journal?" + q);
        entries.push(...pageJ.entries);
        for (const m of pageJ.reuse || []) reuse.set(m.seq, m);
        cursor = pageJ.next_cursor;
        if (!cursor) break;
      }
      return { detail, tree, ledger, entries, reuse, forks };
    }
    async function refresh() {
      if (page.refreshing) { page.again = true; return page.refreshing; }
      page.refreshing = (async () => {
        try {
          const data = await fetchAll();
          page.data = data;
          fill(el.error);
          render(data);
          syncStream(data.detail);
        } catch (e) {
          fill(el.error, h("div", { class: "error-box", "data-testid": "run-error" }, e.message));
        } finally {
          page.refreshing = null;
          if (page.again) { page.again = false; refresh(); }
        }
      })();
      return page.refreshing;
    }
    let debounce = null;
    const soon = () => { clearTimeout(debounce); debounce = setTimeout(refresh, 120); };

    function syncStream(detail) {
      if (detail.status === "running" && !stream) openStream(runId, () => soon());
      if (detail.status !== "running" && stream) closeStream();
    }

    function render(d) {
      renderHead(d.detail);
      renderLineage(d.detail);
      renderForks(d.forks);
      renderStats(d.detail, d.tree);
      renderTree(d.detail, d.tree);
      fill(el.chart, spendChart(d.detail, d.entries));
      renderPending(d.detail);
      renderOutcome(d.detail);
      renderJournal(d.detail, d.entries, d.reuse);
      renderLedger(d.ledger);
    }

    // A fork: where it came from (a link to the source), what it reused against what it spent, and its diff.
    function renderLineage(det) {
      const l = det.lineage;
      if (!l) { fill(el.lineage); return; }
      const src = "#/runs/" + encodeURIComponent(l.forked_from);
      const swaps = Object.entries(l.models || {});
      fill(el.lineage, h("section", { class: "card lineage", "data-testid": "lineage" },
        h("div", { class: "card-body" },
          h("div", {}, "forked from ", h("a", { href: src, class: "mono", "data-testid": "lineage-source" }, l.forked_from),
            l.at === null ? " (its whole journal)" : [" at seq ", h("strong", { class: "mono", "data-testid": "lineage-at" }, l.at)],
            " · ", h("a", { href: src + "/diff/" + enc, "data-testid": "lineage-diff" }, "diff against source")),
          h("div", { class: "small muted", "data-testid": "lineage-spend" },
            "reused " + usd(l.reused_usd) + " (" + l.reused_calls + " call" + (l.reused_calls === 1 ? "" : "s") + ", paid by the source) · new spend " + usd(l.new_usd),
            swaps.length ? " · models swapped: " + swaps.map(([k, v]) => k + " → " + v).join(", ") : ""))));
    }

    // A source: the runs forked from it, each a link to the fork and to its diff against this run.
    function renderForks(list) {
      const forks = (list && list.forks) || [];
      if (!forks.length) { fill(el.forks); return; }
      fill(el.forks, h("section", { class: "card lineage", "data-testid": "forks" },
        h("div", { class: "card-body" }, forks.length === 1 ? "1 fork: " : forks.length + " forks: ",
          forks.map((f, i) => [i ? " · " : null,
            h("a", { href: "#/runs/" + encodeURIComponent(f.run_id), class: "mono", "data-testid": "fork-link", "data-run-id": f.run_id }, f.run_id),
            " ", pill(f.status), f.at === null ? "" : h("span", { class: "small muted" }, " at seq " + f.at),
            " (", h("a", { href: "#/runs/" + enc + "/diff/" + encodeURIComponent(f.run_id), "data-testid": "fork-diff" }, "diff"), ")"]))));
    }

    function renderHead(det) {
      const actions = h("div", { class: "actions" });
      if (det.driven_here && det.status === "running") {
        actions.append(h("button", { class: "btn btn-danger", "data-testid": "cancel", onclick: async (ev) => {
          ev.target.disabled = true;
          try { await post("/api/runs/" + enc + "/cancel", { reason: "cancelled from the inspector" }); } catch (e) { alert(e.message); }
          soon();
        } }, "Cancel run"));
      }
      fill(el.head, 
        h("div", { class: "title" }, h("span", { class: "run-id" }, det.run_id),
          h("span", { class: "muted" }, "workflow ", h("strong", {}, det.workflow), " · ", det.segments, det.segments === 1 ? " segment" : " segments",
            det.driven_here ? " · driven by this server" : "")),
        h("span", { "data-testid": "run-status", "data-status": det.status }, pill(det.status, true)),
        actions);
    }

    function stat(label, value, sub, extra) {
      return h("div", Object.assign({ class: "card stat" }, extra || {}), h("div", { class: "stat-label" }, label),
        h("div", { class: "stat-value" }, value), sub ? h("div", { class: "stat-sub" }, sub) : null);
    }
    function renderStats(det, tree) {
      const c = det.ceilings;
      const refused = tree.events.filter((e) => e.kind === "spawn_refused").length;
      const u = det.cost.usage;
      const end = det.status === "running" ? Date.now() / 1000 : det.updated_at;
      const cost = det.cost;
      const orphaned = cost.orphaned_calls || cost.orphaned_usd ? h("div", { class: "orphaned", "data-testid": "stat-orphaned",
        title: cost.settlement ? "cut off by a crash; settled by " + (cost.settlement.by || "an operator") + (cost.settlement.reason ? ": " + cost.settlement.reason : "")
          : "cut off by a crash, charged at their worst case until `tether settle-orphans` replaces it with the provider's figure" },
        usd(cost.spent_usd) + " spent + " + usd(cost.orphaned_usd) + " orphaned (" + cost.orphaned_calls + " cut call" + (cost.orphaned_calls === 1 ? "" : "s") + (cost.settlement ? ", settled" : "") + ")") : null;
      // The forecast a forecast_gate judged the run by, beside the ceiling (none without a gate).
      const f = c.forecast;
      const forecast = f ? h("div", { class: "forecast" + (f.over ? " over" : ""), "data-testid": "stat-forecast",
        "data-over": String(f.over), title: "forecast_gate=" + f.gate + (f.limit_usd !== null ? ", judged against " + usd(f.limit_usd) : "") },
        f.enough && f.p95_usd !== null ? "forecast P95 " + usd(f.p95_usd) + " · P50 " + usd(f.p50_usd) + " (" + f.runs + " runs)" + (f.over ? " · over its limit" : "")
          : "forecast: not enough history (" + f.runs + " runs)") : null;
      fill(el.stats,
        stat("Spent", usd(det.spent_usd), [c.budget_usd ? spendBar(det.spent_usd, c.budget_usd) : "no USD ceiling", forecast, orphaned],
          { "data-testid": "stat-spent" }),
        stat("Tokens", int(u.input_tokens + u.output_tokens), int(u.input_tokens) + " in · " + int(u.output_tokens) + " out" + (c.max_tokens ? " · cap " + int(c.max_tokens) : "")),
        stat("Agents", String(tree.agents.length), (refused ? refused + " refused · " : "") + (tree.queued.length ? tree.queued.length + " queued · " : "") + det.cost.provider_calls + " provider calls"),
        stat("Duration", dur(end - det.created_at), "started " + ago(det.created_at)));
    }

    function renderTree(det, tree) {
      const kids = new Map();
      for (const n of tree.agents) {
        const k = n.parent_agent_id === null ? 0 : n.parent_agent_id;
        if (!kids.has(k)) kids.set(k, []);
        kids.get(k).push(n);
      }
      const rootRefusals = tree.events.filter((e) => e.kind === "spawn_refused" && e.agent_id === 0).map((e) => e.detail);
      const nodeEl = (n) => {
        const status = n.status;
        const name = n.label || (n.role === "orchestrate" ? "orchestrator" : n.role) || "agent";
        return h("li", {},
          h("div", { class: "node", "data-status": status, "data-agent-id": n.agent_id, "data-testid": "agent-node" },
            h("span", { class: "dot" }),
            h("span", { class: "name" }, name),
            h("span", { class: "aid" }, "#" + n.agent_id),
            h("span", { class: "status-text" }, status),
            n.refusals.map((r) => h("span", { class: "refused", title: "a spawn this agent asked for was refused by the " + r + " cap" }, "refused: " + r)),
            h("span", { class: "meta" },
              h("span", { title: "tokens (input + output)" }, int(n.tokens) + " tok"),
              n.reused ? h("span", { class: "reused", "data-testid": "node-reused", title: "a copy the fork reused: the source paid for it, this run did not" }, "reused " + usd(n.reused_usd))
                : h("span", { title: n.cut_calls ? usd(n.spent_usd) + " spent + " + usd(n.orphaned_usd) + " orphaned (" + n.cut_calls + " cut by a crash)" : "cost", "data-testid": "node-cost" },
                  usd(n.cost_usd) + (n.cut_calls ? " *" : "")),
              n.ended_at && n.started_at ? h("span", { class: "muted" }, dur(n.ended_at - n.started_at)) : null,
              h("a", { class: "transcript", href: "#/runs/" + enc + "/agents/" + n.agent_id, "data-testid": "transcript-link" }, "transcript"))),
          (kids.get(n.agent_id) || []).length ? h("ul", { class: "tree" }, kids.get(n.agent_id).map(nodeEl)) : null);
      };
      const queued = tree.queued.map((q) => h("li", {}, h("div", { class: "node queued", "data-status": "queued", "data-testid": "queued-node" },
        h("span", { class: "dot" }), h("span", { class: "name" }, q.label || "agent"), h("span", { class: "status-text" }, "queued"),
        h("span", { class: "meta" }, "depth " + q.depth + " · waiting " + dur(Date.now() / 1000 - q.since)))));
      el.treeHint.textContent = tree.agents.length + " agents" + (tree.max_tokens ? " · token ceiling " + int(tree.max_tokens) : "");
      fill(el.tree, h("ul", { class: "tree" }, h("li", {},
        h("div", { class: "node root", "data-status": det.status },
          h("span", { class: "dot" }), h("span", { class: "name" }, det.workflow), h("span", { class: "aid" }, "workflow"),
          rootRefusals.map((r) => h("span", { class: "refused" }, "refused: " + r)),
          h("span", { class: "meta" }, h("span", {}, usd(det.spent_usd)))),
        h("ul", { class: "tree" }, (kids.get(0) || []).map(nodeEl), queued))),
        tree.agents.length || tree.queued.length ? "" : h("div", { class: "empty" }, "No agents yet."));
    }

    function renderPending(det) {
      const keys = det.suspensions.map((x) => x.kind + ":" + x.key).join("|");
      if (keys === page.pendingKeys) return; // the same suspensions: keep what the user typed
      page.pendingKeys = keys;
      if (!det.suspensions.length) { fill(el.pending, h("div", { class: "empty" }, "Nothing is waiting.")); return; }
      fill(el.pending, ...det.suspensions.map((sus) => {
        const msg = h("span", { class: "s-msg" });
        const send = async (value, btn) => {
          btn.disabled = true;
          msg.className = "s-msg";
          msg.textContent = "resolving…";
          try {
            const r = await post("/api/runs/" + enc + "/resolve", { key: sus.key, value });
            msg.className = "s-msg good";
            msg.textContent = r.woke_live_run ? "resolved: the run continues" : r.resumed ? "resolved: the run resumed here" : "resolved (journaled)";
            page.pendingKeys = null;
            await refresh();
          } catch (e) { msg.className = "s-msg bad"; msg.textContent = e.message; btn.disabled = false; }
        };
        const controls = sus.kind === "budget" ? raiseControls(sus, msg) : resolveControls(sus, send, msg);
        return h("form", { class: "suspension", "data-key": sus.key, "data-testid": "suspension",
          onsubmit: (ev) => { ev.preventDefault(); if (controls.submit) controls.submit(ev); } },
          h("div", { class: "s-head" }, h("span", { class: "s-key" }, sus.key), h("span", { class: "pill", "data-status": "suspended" }, sus.kind),
            h("span", { class: "small muted" }, sus.since ? "waiting since " + ago(sus.since) : "")),
          sus.kind === "approval" ? h("div", { class: "small", style: "margin-top:6px" }, "tool ", h("strong", { class: "mono" }, sus.tool || "?"), sus.agent_id ? " · agent #" + sus.agent_id : "", json(sus.args)) : null,
          controls.nodes);
      }));
    }

    // A run its USD ceiling parked: what it needs, and a raise (never below the ceiling) that resolves it.
    function raiseControls(sus, msg) {
      const need = sus.budget || {};
      const amount = h("input", { type: "number", name: "usd", step: "any", min: need.ceiling_usd, value: need.suggested_usd,
        "aria-label": "new USD ceiling for " + sus.key, "data-testid": "raise-usd" });
      const reason = h("input", { type: "text", name: "reason", maxlength: 500, placeholder: "why (journaled)",
        "aria-label": "reason for the raise", "data-testid": "raise-reason" });
      const submit = h("button", { type: "submit", class: "btn btn-primary", "data-testid": "raise" }, "Raise ceiling");
      const facts = h("div", { class: "small s-accepts", "data-testid": "budget-need" },
        "the ", h("strong", {}, usd(need.ceiling_usd)), " ceiling stopped ", need.agent_id ? "agent #" + need.agent_id : "the run",
        " (", h("code", {}, need.reason || "usd-ceiling"), ") with ", usd(need.spent_usd),
        " spent; raise it and the stopped agents continue from their checkpoints (0 turns paid again)");
      return { nodes: [facts, h("div", { class: "s-actions" }, amount, reason, submit, msg)],
        submit: async (ev) => {
          const btn = ev.submitter || submit;
          btn.disabled = true;
          msg.className = "s-msg";
          msg.textContent = "raising…";
          try {
            const r = await post("/api/runs/" + enc + "/raise-budget", { usd: Number(amount.value), reason: reason.value });
            msg.className = "s-msg good";
            msg.textContent = "raised to " + usd(r.ceiling_usd) + (r.resumed ? ": the run resumed here" : " (journaled): resume the run to go on");
            page.pendingKeys = null;
            await refresh();
          } catch (e) { msg.className = "s-msg bad"; msg.textContent = e.message; btn.disabled = false; }
        } };
    }

    // What a suspension takes, shown before anything is typed: an approval exactly allow or deny, an enum its
    // values (a select, nothing to mistype), a declared schema next to the free-text field.
    function resolveControls(sus, send, msg) {
      const accepts = sus.accepts || null;
      const shown = (v) => typeof v === "string" ? v : JSON.stringify(v);
      const note = accepts
        ? h("div", { class: "small muted s-accepts", "data-testid": "accepts" }, "accepts exactly ",
          accepts.map((v, i) => [i ? (i === accepts.length - 1 ? " or " : ", ") : "", h("code", {}, shown(v))]))
        : sus.value_schema ? h("div", { class: "small muted s-accepts", "data-testid": "accepts" }, "expects ", h("code", {}, JSON.stringify(sus.value_schema))) : null;
      if (sus.kind === "approval") {
        return { nodes: [note, h("div", { class: "s-actions" },
          h("button", { type: "button", class: "btn btn-ok", "data-testid": "resolve-allow", onclick: (ev) => send("allow", ev.target) }, "Allow"),
          h("button", { type: "button", class: "btn btn-danger", "data-testid": "resolve-deny", onclick: (ev) => send("deny", ev.target) }, "Deny"), msg)] };
      }
      const submit = h("button", { type: "submit", class: "btn btn-primary", "data-testid": "resolve" }, "Resolve");
      if (accepts) {
        const choice = h("select", { name: "value", "aria-label": "value for " + sus.key, "data-testid": "resolve-choice" },
          accepts.map((v, i) => h("option", { value: String(i) }, shown(v))));
        return { nodes: [note, h("div", { class: "s-actions" }, choice, submit, msg)],
          submit: (ev) => send(accepts[Number(choice.value)], ev.submitter || submit) };
      }
      const area = h("textarea", { name: "value", "aria-label": "value for " + sus.key, "data-testid": "resolve-value",
        placeholder: sus.value_schema ? "value: JSON matching the schema above" : "value: JSON (true, 42, {\"ok\": true}) or plain text" });
      const parse = (text) => { try { return JSON.parse(text); } catch (_) { return text; } };
      return { nodes: [note, area, h("div", { class: "s-actions" }, submit, msg)],
        submit: (ev) => send(parse(area.value.trim()), ev.submitter || submit) };
    }

    function renderOutcome(det) {
      const o = det.outcome;
      if (!o) { fill(el.outcome, h("div", { class: "empty" }, det.status === "running" ? "Still running." : "No settle recorded.")); return; }
      fill(el.outcome, h("dl", { class: "kv" },
        h("dt", {}, "status"), h("dd", {}, pill(o.status)),
        h("dt", {}, "settled"), h("dd", {}, stamp(o.at)),
        o.pending.length ? [h("dt", {}, "pending"), h("dd", { class: "mono" }, o.pending.join(", "))] : null,
        o.error ? [h("dt", {}, "error"), h("dd", {}, typeof o.error.message === "string"
          ? [h("div", { "data-testid": "outcome-error" }, o.error.message), json(o.error)] : json(o.error))] : null,
        h("dt", {}, "value"), h("dd", {}, o.value === null ? h("span", { class: "muted" }, "none") : json(o.value)),
        h("dt", {}, "args"), h("dd", {}, json(det.args))));
    }

    function renderJournal(det, entries, reuse) {
      const t0 = det.started_at || det.created_at;
      const cut = new Set(det.cut_seqs || []);
      el.journalHint.textContent = entries.length + " entries";
      const removers = new Map(entries.filter((x) => x.kind === "decision" && x.value && (x.value.decision === "archive" || x.value.decision === "redact"))
        .map((x) => [x.seq, x.value]));
      if (removers.size) {
        const last = [...removers.values()].pop();
        el.journalHint.append(" · ", h("span", { class: "pill static", "data-status": "cancelled", "data-testid": "retention-mark",
          title: "payloads removed by " + (last.by || "?") + (last.why ? ": " + last.why : "") + "; digests, costs and the chain kept (tether verify)" },
          last.decision === "archive" ? "archived" : "redacted"));
      }
      const rows = [];
      for (const e of entries) {
        const at = e.ended_at || e.started_at;
        const tokens = e.usage ? e.usage.input_tokens + e.usage.output_tokens : null;
        const open = page.expanded.has(e.seq);
        const copy = reuse.get(e.seq);
        const copyMark = copy ? h("span", { class: "pill static reuse" + (copy.reused ? "" : " unreached"), "data-testid": copy.reused ? "reused" : "unreached",
          title: (copy.reused ? "copied from the source and reused: the source paid for it" : "copied from the source, but the fork's code did not reach it")
            + (copy.source_seq ? " (source seq " + copy.source_seq + ")" : "") }, copy.reused ? "reused" : "not reused") : null;
        const remover = e.redacted === null || e.redacted === undefined ? null : (removers.get(e.redacted) || {});
        const goneMark = remover ? h("span", { class: "pill static", "data-status": "cancelled", "data-testid": "no-payload",
          title: "payload removed by the decision at seq " + e.redacted + (remover.why ? " (" + remover.why + ")" : "") + "; its sha256 is kept, so the chain still verifies" },
          remover.decision === "archive" ? "archived" : "redacted") : null;
        rows.push(h("tr", { class: "clickable" + (copy ? " copied" : ""), "data-seq": e.seq, "data-reuse": copy ? (copy.reused ? "reused" : "unreached") : null,
          "data-redacted": remover ? String(e.redacted) : null,
          onclick: () => { if (open) page.expanded.delete(e.seq); else page.expanded.add(e.seq); renderJournal(det, entries, reuse); } },
          h("td", { class: "num mono" }, e.seq), h("td", { class: "num mono muted hide-sm" }, e.ref === null ? "" : e.ref),
          h("td", {}, h("span", { class: "kind kind-" + e.kind }, e.kind)),
          h("td", {}, e.status ? h("span", { class: "pill static", "data-status": e.status }, e.status) : ""),
          h("td", { class: "mono small hide-sm" }, e.scope || "·"),
          h("td", {}, e.kind === "tree" || !e.label ? describe(e) : e.label,
            copyMark, goneMark, cut.has(e.seq) ? h("span", { class: "pill", "data-status": "suspended", "data-testid": "cut-dispatch", title: "a crash cut this call off: it is charged at its worst case" }, "cut") : null),
          h("td", { class: "num" }, tokens === null ? "" : int(tokens)),
          h("td", { class: "num" }, e.cost_usd !== null ? usd(e.cost_usd) : worst(e)),
          copy ? h("td", { class: "num muted", title: "the source's time: copied from the source run", "data-testid": "source-time" }, at ? "src " + new Date(at * 1000).toLocaleTimeString() : "")
            : h("td", { class: "num muted", title: stamp(at) }, at ? "+" + dur(at - t0) : "")));
        if (open) rows.push(h("tr", { class: "detail" }, h("td", { colspan: 9 }, json(e))));
      }
      fill(el.journal, h("table", { "data-testid": "journal" },
        h("thead", {}, h("tr", {}, h("th", { class: "num" }, "seq"), h("th", { class: "num hide-sm" }, "ref"), h("th", {}, "kind"), h("th", {}, "status"),
          h("th", { class: "hide-sm" }, "scope"), h("th", {}, "what"), h("th", { class: "num" }, "tokens"), h("th", { class: "num" }, "cost"), h("th", { class: "num" }, "at"))),
        h("tbody", {}, rows)));
    }
    function worst(e) {
      const v = e.value && typeof e.value === "object" ? e.value : {};
      return e.kind === "decision" && v.decision === "dispatch" && typeof v.worst_usd === "number" ? "≤ " + usd(v.worst_usd) : "";
    }
    function describe(e) {
      const v = e.value && typeof e.value === "object" ? e.value : {};
      if (e.kind === "decision") return v.decision || "";
      if (e.kind === "tree") {
        const who = v.agent_id ? " #" + v.agent_id : " (workflow)";
        if (v.kind === "budget_draw") return "budget draw" + who + " · " + int(v.tokens) + " tok" + (v.usd ? " · " + usd(v.usd) : "");
        if (v.kind === "spawn") return "spawn #" + v.child_agent_id + " by" + who + (v.detail ? ": " + String(v.detail).slice(0, 60) : "");
        if (v.kind === "spawn_refused") return "spawn refused by the " + v.detail + " cap (asked by" + who + ")";
        return v.kind || "";
      }
      if (e.kind === "rand") return v.subtype || "";
      if (e.kind === "resolution") return "closes #" + e.ref;
      if (e.kind === "abandon") return "abandons #" + e.ref;
      return "";
    }

    function renderLedger(ledger) {
      if (!ledger.records.length) { fill(el.ledger, h("div", { class: "empty" }, "No tool dispatched through a ledgered executor.")); return; }
      fill(el.ledger, h("table", { "data-testid": "ledger" },
        h("thead", {}, h("tr", {}, h("th", {}, "tool"), h("th", {}, "executor"), h("th", {}, "outcome"), h("th", { class: "num" }, "exit"),
          h("th", { class: "hide-sm" }, "signal"), h("th", { class: "num" }, "duration"), h("th", { class: "hide-sm" }, "attempt"), h("th", { class: "hide-sm" }, "args sha256"))),
        h("tbody", {}, ledger.records.map((r) => h("tr", {},
          h("td", { class: "mono" }, r.tool), h("td", {}, r.executor),
          h("td", {}, r.outcome ? h("span", { class: "pill", "data-status": r.outcome === "ok" ? "ok" : "error" }, r.outcome)
            : h("span", { class: "pill", "data-status": "suspended", title: "intent without outcome: the effect is unknown" }, "orphan")),
          h("td", { class: "num" }, r.exit_code === null ? "" : r.exit_code), h("td", { class: "hide-sm" }, r.signal || ""),
          h("td", { class: "num" }, r.duration_ms === null ? "" : dur(r.duration_ms / 1000)),
          h("td", { class: "mono small hide-sm" }, r.attempt_id.slice(0, 12)), h("td", { class: "mono small hide-sm" }, r.args_hash.slice(0, 12)))))));
    }

    refresh();
    // Without a stream (a settled or suspended run), look again now and then: another process may resume it.
    page.timer = setInterval(() => { if (!stream && document.visibilityState === "visible") refresh(); }, 5000);
    return { runId, refresh, stop: () => { clearInterval(page.timer); clearTimeout(debounce); } };
  }

  // -- diff of two runs (a fork beside its source): engine.diff, call by call ------------------------
  function diffPage(a, b) {
    const path = "/api/runs/" + encodeURIComponent(a) + "/diff/" + encodeURIComponent(b);
    const link = (id) => h("a", { href: "#/runs/" + encodeURIComponent(id), class: "mono" }, id);
    crumbs(h("a", { href: "#/" }, "Runs"), link(a), h("span", {}, "diff"), link(b));
    const body = h("div", { class: "card-body flush" }, h("div", { class: "muted" }, "loading…"));
    fill(view, h("div", { class: "page-head" }, h("div", { class: "title" }, h("span", { class: "run-id" }, "Diff"),
      h("span", { class: "muted" }, link(a), " against ", link(b)))), h("section", { class: "card" }, body));
    const side = (sd, reused) => sd === null
      ? [h("td", { class: "muted", colspan: 3 }, "no such call")]
      : [h("td", { class: "mono small" }, sd.model || "—"),
         h("td", { class: "num", "data-usd": sd.usd, "data-reused": String(reused) }, reused ? h("span", { class: "pill static reuse", title: "a copy the fork reused: its source paid " + usd(sd.usd) + ", not paid for again" }, "reused " + usd(sd.usd)) : usd(sd.usd)),
         h("td", { class: "diff-out" }, typeof sd.output === "string" ? sd.output : JSON.stringify(sd.output))];
    api(path).then((d) => {
      const same = (c) => c.a && c.b && JSON.stringify(c.a.output) === JSON.stringify(c.b.output);
      fill(body, h("div", { class: "table-wrap" }, h("table", { "data-testid": "diff" },
        h("thead", {},
          h("tr", {}, h("th", {}), h("th", { colspan: 3 }, d.run_a), h("th", { colspan: 3 }, d.run_b)),
          h("tr", {}, h("th", {}, "agent call"), ["model", "cost", "output"].map((t) => h("th", {}, t)), ["model", "cost", "output"].map((t) => h("th", {}, t)))),
        h("tbody", {}, d.calls.map((c) => h("tr", { "data-testid": "diff-row", "data-label": c.label, "data-same": String(!!same(c)), "data-reused": String(c.reused) },
          h("td", { class: "mono" }, c.label, same(c) ? "" : h("span", { class: "pill static", "data-status": "suspended" }, "changed")),
          side(c.a, false), side(c.b, c.reused)))),
        h("tfoot", {}, h("tr", {}, h("th", {}, "spent"), h("th", { colspan: 3, class: "num", "data-testid": "diff-a-usd" }, usd(d.a_usd)),
          h("th", { colspan: 3, class: "num", "data-testid": "diff-b-usd" }, usd(d.b_usd) + (d.b_reused_usd ? " (+ " + usd(d.b_reused_usd) + " reused)" : "")))))));
    }).catch((e) => fill(body, h("div", { class: "error-box", "data-testid": "diff-error" }, e.message)));
    return { diffKey: a + "\u0000" + b, stop: () => {} };
  }

  // -- sessions: the list, and one session's turn tree (every line, per-turn status and cost) -----
  function sessionListPage() {
    crumbs(h("a", { href: "#/" }, "Runs"), h("span", {}, "Sessions"));
    const body = h("div", { class: "card-body flush" }, h("div", { class: "muted" }, "loading…"));
    fill(view, h("div", { class: "page-head" }, h("h1", {}, "Sessions")), h("section", { class: "card" }, body));
    api("/api/sessions").then((d) => fill(body, d.sessions.length === 0 ? h("div", { class: "muted" }, "no sessions") :
      h("div", { class: "table-wrap" }, h("table", { "data-testid": "session-list" },
        h("thead", {}, h("tr", {}, h("th", {}, "Session"), h("th", {}, "Workspace"), h("th", {}, "Head"), h("th", { class: "num" }, "Ceiling"))),
        h("tbody", {}, d.sessions.map((x) => h("tr", { "data-session-id": x.session_id },
          h("td", {}, h("a", { href: "#/sessions/" + encodeURIComponent(x.session_id), class: "mono" }, x.session_id)),
          h("td", {}, x.workspace), h("td", { class: "mono" }, x.head || "—"), h("td", { class: "num" }, usd(x.budget_usd))))))))
    ).catch((e) => fill(body, h("div", { class: "error-box" }, e.message)));
    return { sessionKey: "session\u0000", stop: () => {} };
  }

  function sessionPage(id) {
    crumbs(h("a", { href: "#/" }, "Runs"), h("a", { href: "#/sessions" }, "Sessions"), h("span", { class: "mono" }, id));
    const body = h("div", { class: "card-body" }, h("div", { class: "muted" }, "loading…"));
    const head = h("div", { class: "page-head" });
    fill(view, head, h("section", { class: "card" }, body));
    function node(t, children, d) {
      const kids = children.get(t.run_id) || [];
      const isHead = t.run_id === d.head;
      return h("li", { class: "turn", "data-testid": "turn", "data-index": t.index, "data-run-id": t.run_id, "data-parent": t.parent || "",
          "data-status": t.status, "data-cost": t.cost_usd, "data-head": String(isHead) },
        h("div", { class: "turn-row" },
          h("span", { class: "turn-index" }, "turn " + t.index),
          h("a", { href: "#/runs/" + encodeURIComponent(t.run_id), class: "mono" }, t.run_id),
          h("span", { class: "pill static", "data-status": t.status }, t.status),
          h("span", { class: "num", "data-testid": "turn-cost" }, usd(t.cost_usd)),
          t.stop ? h("span", { class: "muted small", title: t.why || "" }, t.stop) : null,
          isHead ? h("span", { class: "pill static reuse", "data-testid": "head" }, "head") : null,
          kids.length > 1 ? h("span", { class: "muted small", "data-testid": "branch-point" }, kids.length + " lines") : null),
        kids.length ? h("ul", { class: "turn-tree" }, kids.map((k) => node(k, children, d))) : null);
    }
    api("/api/sessions/" + encodeURIComponent(id)).then((d) => {
      fill(head, h("div", { class: "title" }, h("span", { class: "run-id" }, d.session_id),
        h("span", { class: "muted" }, "workspace " + d.workspace + " · spent " + usd(d.spent_usd) +
          (d.budget_usd === null ? "" : " of " + usd(d.budget_usd)))));
      const children = new Map();
      for (const t of d.turns) { const k = t.parent || ""; if (!children.has(k)) children.set(k, []); children.get(k).push(t); }
      const roots = children.get("") || [];
      fill(body, roots.length === 0 ? h("div", { class: "muted" }, "no turns yet") :
        h("ul", { class: "turn-tree root", "data-testid": "turn-tree" }, roots.map((t) => node(t, children, d))));
    }).catch((e) => fill(body, h("div", { class: "error-box", "data-testid": "session-error" }, e.message)));
    return { sessionKey: "session\u0000" + id, stop: () => {} };
  }

  // -- spend chart (inline SVG) -----------------------------------------------------------------
  function niceStep(span, count) {
    const raw = span / Math.max(count, 1);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const n = raw / mag;
    return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 2.5 ? 2.5 : n <= 5 ? 5 : 10) * mag;
  }
  function spendChart(det, entries) {
    const ceiling = det.ceilings.budget_usd;
    // One point per agent, from the same fold as the cards: the line ends at the run's total spend.
    const points = (det.spend || []).map((p) => ({ t: p.t, v: p.total_usd, usd: p.usd, orphaned: p.orphaned_usd, settled: p.settled, label: p.label || "agent #" + p.agent_id }));
    const cum = det.cost.total_usd;
    const t0 = det.started_at || det.created_at;
    const lastEntry = entries.reduce((m, e) => Math.max(m, e.ended_at || e.started_at || 0), 0);
    const tEnd = Math.max(det.status === "running" ? Date.now() / 1000 - t0 : lastEntry - t0, points.length ? points[points.length - 1].t : 0, 0.001);
    // Nothing spent and no ceiling: a scale of cents, not of fractions of a micro-dollar.
    const yTop = (Math.max(ceiling || 0, cum) || 0.01) * 1.12;
    const yStep = niceStep(yTop, 4);
    const ticks = [];
    for (let i = 0; i * yStep <= yTop + yStep * 1e-9; i++) ticks.push({ v: i * yStep, text: usd(i * yStep) });
    // The left margin fits the widest USD label (12px tabular digits: about 7.2px a character), so none is cut.
    const W = 520, H = 230, R = 14, T = 18, B = 30;
    const L = Math.max(44, Math.ceil(16 + 7.2 * Math.max(...ticks.map((k) => k.text.length))));
    const x = (t) => L + (W - L - R) * (t / tEnd);
    const y = (v) => T + (H - T - B) * (1 - v / yTop);
    const svg = s("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "spend over time against the ceiling", "data-points": points.length });
    svg.append(s("text", { class: "axis-title", x: 4, y: 11, "text-anchor": "start", "data-testid": "y-axis-title" }, "USD"));
    for (const k of ticks) {
      svg.append(s("line", { class: "grid-line", x1: L, x2: W - R, y1: y(k.v), y2: y(k.v) }),
        s("text", { class: "y-label", x: L - 8, y: y(k.v) + 4, "text-anchor": "end", "data-testid": "y-label", "data-usd": k.v }, k.text));
    }
    const xStep = niceStep(tEnd, 5);
    for (let t = 0; t <= tEnd + 1e-9; t += xStep) {
      const anchor = t === 0 ? "start" : x(t) > W - R - 24 ? "end" : "middle";
      svg.append(s("text", { x: x(t), y: H - 10, "text-anchor": anchor }, dur(t)));
    }
    svg.append(s("line", { class: "axis", x1: L, x2: W - R, y1: y(0), y2: y(0) }));
    let d = "M" + x(0) + " " + y(0);
    for (const p of points) d += " H" + x(p.t).toFixed(1) + " V" + y(p.v).toFixed(1);
    d += " H" + x(tEnd).toFixed(1);
    svg.append(s("path", { class: "spend-area", d: d + " V" + y(0) + " Z" }), s("path", { class: "spend-line", d, "data-testid": "spend-line" }));
    if (ceiling) {
      svg.append(s("line", { class: "ceiling", x1: L, x2: W - R, y1: y(ceiling), y2: y(ceiling), "data-testid": "ceiling-line" }),
        s("text", { class: "ceiling-label", x: W - R, y: y(ceiling) - 6, "text-anchor": "end" }, "ceiling " + usd(ceiling)));
    }
    for (const p of points) {
      svg.append(s("circle", { class: "point" + (p.orphaned ? " orphaned" : ""), cx: x(p.t), cy: y(p.v), r: 3.5 },
        s("title", {}, p.label + ": +" + usd(p.usd) + (p.orphaned ? " (" + usd(p.orphaned) + " orphaned)" : "") + (p.settled ? "" : " so far") + " → " + usd(p.v) + " at +" + dur(p.t))));
    }
    return h("div", {}, svg, h("div", { class: "legend" },
      h("span", { "data-testid": "chart-total" }, h("i"), "spent " + usd(cum) + (det.cost.orphaned_usd ? " (" + usd(det.cost.orphaned_usd) + " orphaned)" : "")),
      ceiling ? h("span", {}, h("i", { class: "ceil" }), "ceiling " + usd(ceiling) + " (" + (100 * cum / ceiling).toFixed(1) + "% used)") : h("span", { class: "muted" }, "no USD ceiling"),
      h("span", { class: "muted" }, points.length + " agents")));
  }

  // -- transcript drawer -----------------------------------------------------------------------
  const drawer = document.getElementById("drawer");
  function closeDrawer() { drawer.hidden = true; }
  drawer.addEventListener("click", (ev) => { if (ev.target === drawer) closeHere(); });
  document.getElementById("drawer-close").addEventListener("click", (ev) => { ev.preventDefault(); closeHere(); });
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape" && !drawer.hidden) closeHere(); });
  function closeHere() { const m = location.hash.match(/^#\/runs\/[^/]+/); location.hash = m ? m[0] : "#/"; }
  async function openTranscript(runId, agentId) {
    const path = "/api/runs/" + encodeURIComponent(runId) + "/agents/" + encodeURIComponent(agentId) + "/transcript";
    const body = document.getElementById("drawer-body");
    document.getElementById("drawer-raw").href = path;
    document.getElementById("drawer-title").textContent = "Agent #" + agentId;
    fill(body, h("div", { class: "muted" }, "loading…"));
    drawer.hidden = false;
    try {
      const t = await api(path);
      document.getElementById("drawer-title").textContent = (t.label || "agent") + " · #" + t.agent_id;
      const msgs = t.messages.map((m) => h("div", { class: "msg " + m.role },
        h("div", { class: "role" }, m.role),
        m.parts.map((p) => p.type === "text" ? h("div", { class: "text" }, p.text)
          : p.type === "tool_call" ? h("div", { class: "call" }, "→ " + p.name + "(" + JSON.stringify(p.args) + ")")
          : p.type === "tool_result" ? h("div", { class: "text" + (p.is_error ? " muted" : "") }, p.name + ": " + p.content)
          : h("div", { class: "muted small" }, "[" + (p.family || p.type) + " part]"))));
      fill(body, 
        h("dl", { class: "kv" }, h("dt", {}, "status"), h("dd", {}, pill(t.status)), h("dt", {}, "turns"), h("dd", {}, t.turns),
          h("dt", {}, "served by"), h("dd", { class: "mono" }, t.served_by || "—"),
          h("dt", {}, "tokens"), h("dd", {}, int(t.usage.input_tokens) + " in · " + int(t.usage.output_tokens) + " out")),
        t.redacted ? h("div", { class: "muted small", "data-testid": "transcript-redacted" }, "Its text was removed by archive or redact; the digests its terminal journaled still check (tether verify).")
          : t.checkpointed ? msgs : h("div", { class: "muted small" }, "No checkpoint: the agent answered in its first turn, so its output below is the whole transcript."),
        t.output !== null ? h("div", { class: "msg assistant" }, h("div", { class: "role" }, "output"), typeof t.output === "string" ? h("div", { class: "text" }, t.output) : json(t.output)) : null,
        t.error ? h("div", { class: "msg" }, h("div", { class: "role" }, "error"), json(t.error)) : null);
    } catch (e) { fill(body, h("div", { class: "error-box" }, e.message)); }
  }

  // -- start -----------------------------------------------------------------------------------
  api("/healthz").then((hz) => {
    document.getElementById("mode").textContent = hz.mode === "app" ? "app engine" : "store · read side";
  }).catch(() => {});
  route();
})();
