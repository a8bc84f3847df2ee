// The status page: polls /admin/status on the listener that served it
// (the Content-Security-Policy allows nothing else) and draws it. The
// admin token, when the API needs one, is asked for once, kept in this
// tab's sessionStorage and sent as a bearer header, never in a URL.
"use strict";

const COLORS = ["#4c9be8", "#3fb96b", "#e0a82e", "#b07ce8", "#e5534b", "#4cc7c7", "#d97ab0", "#9aa5b1"];
const $ = (id) => document.getElementById(id);
let poolColors = {};
// The grey of a pool that is no longer in the config (its past traffic).
const GONE = "#6b7480";
let failures = 0;

function token() { return sessionStorage.getItem("switchyard-admin-token") || ""; }

async function poll() {
  const headers = {};
  if (token()) headers["Authorization"] = "Bearer " + token();
  let resp;
  try {
    resp = await fetch("admin/status", { headers, cache: "no-store" });
  } catch (e) {
    stale();
    return;
  }
  if (resp.status === 401) {
    askToken(token() ? "That token was refused." : "");
    return;
  }
  if (!resp.ok) { stale(); return; }
  failures = 0;
  $("live").classList.remove("stale");
  $("login").hidden = true;
  draw(await resp.json());
}

function stale() {
  if (++failures > 2) $("live").classList.add("stale");
}

function askToken(msg) {
  $("login").hidden = false;
  $("login-error").textContent = msg;
  $("token").focus();
}

function text(el, s) { el.textContent = s; return el; }
function cell(row, s, cls) {
  const td = document.createElement("td");
  td.textContent = s;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}
function fmtMS(v) {
  if (v === undefined || v === null) return "–";
  return v < 1 ? (v * 1000).toFixed(0) + " µs" : v < 1000 ? v.toFixed(1) + " ms" : (v / 1000).toFixed(2) + " s";
}
function pct(v) { return (100 * v).toFixed(0) + "%"; }
function dur(ms) {
  const s = Math.floor(ms / 1000);
  return s < 120 ? s + "s" : s < 7200 ? Math.floor(s / 60) + "m" : Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
}

function draw(d) {
  text($("version"), "version " + d.version);
  text($("generation"), "config generation " + d.generation);
  const r = d.last_reload;
  const reload = $("reload");
  if (!r) { text(reload, "no reload yet"); reload.className = "muted"; }
  else if (r.ok) { text(reload, "last reload ok at " + new Date(r.at).toLocaleTimeString()); reload.className = "good"; }
  else { text(reload, "last reload FAILED at " + new Date(r.at).toLocaleTimeString() + ": " + r.error); reload.className = "bad"; }
  text($("uptime"), "up " + dur(new Date(d.now) - new Date(d.started)));
  const pools = Object.keys(d.split.pools).sort();
  // A pool's colour is fixed by its place in the config's pool list.
  poolColors = {};
  for (const p of pools) poolColors[p] = GONE;
  d.pools.forEach((p, i) => { poolColors[p.name] = COLORS[i % COLORS.length]; });
  drawChart(d.split, pools);
  drawSplit(d, pools);
  drawReplicas(d);
  drawClassifier(d);
  drawDecisions(d.decisions);
}

// perSecond sums a pool's APIs into one series.
function perSecond(split, pool) {
  const out = new Array(split.seconds).fill(0);
  for (const vals of Object.values(split.pools[pool])) vals.forEach((v, i) => { out[i] += v; });
  return out;
}

function drawChart(split, pools) {
  const c = $("chart"), g = c.getContext("2d");
  const w = c.width, h = c.height, pad = 28;
  g.clearRect(0, 0, w, h);
  const series = pools.map((p) => perSecond(split, p));
  // 10-second buckets keep the line readable over 15 minutes.
  const bucket = 10, n = Math.ceil(split.seconds / bucket);
  const stacked = [];
  let top = 1;
  for (let b = 0; b < n; b++) {
    let acc = 0;
    const col = [];
    for (const s of series) {
      let sum = 0;
      for (let i = b * bucket; i < Math.min((b + 1) * bucket, s.length); i++) sum += s[i];
      acc += sum / bucket;
      col.push(acc);
    }
    stacked.push(col);
    top = Math.max(top, acc);
  }
  const x = (b) => pad + (b / Math.max(1, n - 1)) * (w - pad - 4);
  const y = (v) => h - 16 - (v / top) * (h - 24);
  g.strokeStyle = "#262c35"; g.fillStyle = "#8a94a3"; g.font = "10px system-ui";
  for (const f of [0, 0.5, 1]) {
    g.beginPath(); g.moveTo(pad, y(top * f)); g.lineTo(w - 4, y(top * f)); g.stroke();
    g.fillText((top * f).toFixed(top < 10 ? 1 : 0), 2, y(top * f) + 3);
  }
  g.fillText("-15m", pad, h - 3); g.fillText("now", w - 24, h - 3);
  for (let k = pools.length - 1; k >= 0; k--) {
    g.beginPath();
    g.moveTo(x(0), y(0));
    for (let b = 0; b < n; b++) g.lineTo(x(b), y(stacked[b][k]));
    g.lineTo(x(n - 1), y(0));
    g.closePath();
    g.fillStyle = poolColors[pools[k]];
    g.globalAlpha = 0.75; g.fill(); g.globalAlpha = 1;
  }
  const legend = $("legend");
  legend.replaceChildren();
  for (const p of pools) {
    const span = document.createElement("span");
    const i = document.createElement("i");
    i.style.background = poolColors[p];
    span.append(i, p);
    legend.appendChild(span);
  }
}

// drawSplit shows the split over d.figures.window_seconds (the last
// minute, or the uptime while the gateway is younger): the numbers are
// the gateway's (docs/observability.md defines each), not the page's.
function drawSplit(d, pools) {
  const f = d.figures, apis = ["chat", "completions", "responses", "messages", "other"];
  const byAPI = {};
  for (const p of pools) {
    const pf = f.pools[p];
    if (!pf) continue;
    for (const a of apis) byAPI[a] = (byAPI[a] || 0) + (pf.apis[a] || 0);
  }
  const shown = apis.filter((a) => byAPI[a] > 0);
  const t = $("split");
  const head = document.createElement("tr");
  ["pool", "share", "req/s", "errors"].concat(shown).forEach((s, i) => {
    const th = document.createElement("th");
    th.textContent = s;
    if (i > 0) th.className = "num";
    head.appendChild(th);
  });
  t.tHead.replaceChildren(head);
  $("split-window").textContent = f.window_seconds >= 60 ? "last minute" : "last " + Math.round(f.window_seconds) + "s (uptime)";
  const body = t.tBodies[0];
  body.replaceChildren();
  for (const p of pools) {
    const pf = f.pools[p] || { requests: 0, requests_per_second: 0, share: 0, errors: 0, apis: {} };
    const row = document.createElement("tr");
    row.id = "share-" + p;
    row.dataset.pool = p;
    row.dataset.share = pf.share.toFixed(4);
    row.dataset.rate = pf.requests_per_second.toFixed(4);
    row.dataset.total = String(Object.values(d.split.pools[p]).flat().reduce((s, v) => s + v, 0));
    cell(row, p).style.color = poolColors[p];
    cell(row, pf.requests ? pct(pf.share) : "–", "num");
    cell(row, pf.requests_per_second.toFixed(1), "num");
    cell(row, String(pf.errors), pf.errors ? "num bad" : "num");
    for (const a of shown) {
      cell(row, byAPI[a] ? pct((pf.apis[a] || 0) / byAPI[a]) : "–", "num").title = "share of " + a + " requests";
    }
    body.appendChild(row);
  }
  const ctl = $("control");
  ctl.replaceChildren();
  const share = d.control && d.control.share;
  if (share) {
    const mine = f.pools[share.pool] ? f.pools[share.pool].share : 0;
    text(ctl, "control.share: " + share.pool + " at " + pct(mine) + " of the window, target " +
      (typeof share.target === "number" ? pct(share.target) : share.target) + " (controller measures " + pct(share.share || 0) + ")");
  }
}

const DOWN = { unhealthy: 1, ejected: 1, misconfigured: 1 };
const WARN = { probing: 1, draining: 1 };

function drawReplicas(d) {
  const pools = d.pools;
  const body = $("replicas").tBodies[0];
  body.replaceChildren();
  for (const p of pools) {
    for (const r of p.replicas) {
      const row = document.createElement("tr");
      row.className = "replica " + (DOWN[r.state] ? "down" : WARN[r.state] ? "warn" : "up");
      row.dataset.pool = p.name;
      row.dataset.replica = r.name;
      row.dataset.state = r.state;
      cell(row, p.name).style.color = poolColors[p.name];
      cell(row, r.name + (r.source && r.source !== "config" ? " (" + r.source + ")" : "")).title = r.url;
      let state = r.state;
      if (r.state === "ejected" && r.ejected_until) state += " (" + dur(Math.max(0, new Date(r.ejected_until) - new Date(d.now))) + " left)";
      cell(row, state, "state");
      cell(row, String(r.inflight), "num");
      cell(row, String(r.waiting), "num");
      // A dash says why there is no value (the note under the table says the rest).
      const unscraped = r.scrape_error ? "no fresh scrape: " + r.scrape_error :
        r.last_scrape ? "vLLM did not report it" : "not scraped: this pool does not read vLLM's /metrics (balance kv_aware or p2c, or a route's spill, turns it on)";
      const q = cell(row, r.queue === undefined ? "–" : String(r.queue), "num");
      if (r.queue === undefined) q.title = unscraped;
      const kv = cell(row, r.kv_cache_usage === undefined ? "–" : pct(r.kv_cache_usage), "num");
      if (r.kv_cache_usage === undefined) kv.title = unscraped;
      cell(row, fmtMS(r.recent.ttft_p50_ms), "num");
      cell(row, fmtMS(r.recent.ttft_p99_ms), "num");
      cell(row, r.recent.requests ? pct(r.recent.error_rate) + " of " + r.recent.requests : "–", r.recent.error_rate > 0 ? "num bad" : "num");
      const why = [r.why, r.missing_signals ? "missing " + r.missing_signals.join(", ") : ""].filter((s) => s).join("; ");
      cell(row, why, "why");
      body.appendChild(row);
    }
  }
}

function drawClassifier(d) {
  const dl = $("classifier");
  dl.replaceChildren();
  const add = (el, k, v, cls, id) => {
    const dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = k; dd.textContent = v;
    if (cls) dd.className = cls;
    if (id) dd.id = "figure-" + id;
    el.append(dt, dd);
  };
  const c = d.classifier, f = d.figures.classifier;
  if (!c) add(dl, "kind", "none configured");
  else {
    const total = Object.values(c.results).reduce((s, v) => s + v, 0);
    add(dl, "kind", c.kind);
    add(dl, "breaker", c.breaker_open ? "OPEN: every request gets on_error's label" : "closed", c.breaker_open ? "bad" : "good");
    if (f) {
      dl.dataset.window = f.window_seconds;
      add(dl, "classifications/s", f.classifications_per_second.toFixed(1), "num", "classifications-per-second");
      add(dl, "calls to its pool/s", f.calls_per_second.toFixed(1), "num", "calls-per-second");
      add(dl, "cache hit rate", f.cache_hit_rate === null ? "–" : pct(f.cache_hit_rate), "num", "cache-hit-rate");
      add(dl, "latency (mean)", fmtMS(f.latency_mean_ms), "num", "latency-mean");
    }
    const fallbacks = ["timeout", "error", "circuit_open", "refused"].map((k) => c.results[k] || 0).reduce((s, v) => s + v, 0);
    add(dl, "fell back (all time)", total ? pct(fallbacks / total) : "–", fallbacks ? "bad" : "");
  }
  const outcomes = d.figures.turn_outcomes || {};
  for (const pool of Object.keys(outcomes).sort()) {
    const o = outcomes[pool];
    add(dl, "bad turns: " + pool, o.bad_share === null ? "–" : pct(o.bad_share) + " of " + o.judged, o.bad_share > 0.2 ? "bad num" : "num", "bad-turns-" + pool);
  }
  const sh = $("shadow");
  sh.replaceChildren();
  $("shadow-title").hidden = !(d.shadow && d.shadow.enabled);
  if (d.shadow && d.shadow.enabled) {
    add(sh, "file", d.shadow.file || "");
    add(sh, "agreement", pct(d.shadow.agreement) + " of " + d.shadow.decisions);
  }
}

function drawDecisions(ds) {
  const body = $("decisions").tBodies[0];
  body.replaceChildren();
  for (const x of ds) {
    const row = document.createElement("tr");
    if (x.status >= 500) row.className = "down";
    cell(row, new Date(x.at).toLocaleTimeString());
    cell(row, x.key || "–");
    cell(row, x.api);
    cell(row, x.model || "");
    cell(row, x.route || "");
    cell(row, x.class ? x.class + (x.score !== undefined ? " " + x.score.toFixed(2) : "") : "");
    cell(row, x.pool || "").style.color = poolColors[x.pool] || "";
    cell(row, x.replica || "");
    cell(row, String(x.status), x.status >= 400 ? "num bad" : "num");
    cell(row, fmtMS(x.latency_ms), "num");
    body.appendChild(row);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem("switchyard-admin-token", $("token").value);
    $("token").value = "";
    poll();
  });
  poll();
  setInterval(poll, 1000);
});
