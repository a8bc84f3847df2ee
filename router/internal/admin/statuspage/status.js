// The status page: polls /admin/status on the listener that served it
// (the Content-Security-Policy allows nothing else) and draws it. The
// admin token, when the API needs one, is asked for once, kept in this
// tab's sessionStorage and sent as a bearer header, never in a URL.
"use strict";

const COLORS = ["#4c9be8", "#3fb96b", "#e0a82e", "#b07ce8", "#e5534b", "#4cc7c7", "#d97ab0", "#9aa5b1"];
const $ = (id) => document.getElementById(id);
let prevClassifier = null;
let poolColors = {};
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
  for (const p of d.pools.map((p) => p.name).concat(pools)) {
    if (!(p in poolColors)) poolColors[p] = COLORS[Object.keys(poolColors).length % COLORS.length];
  }
  drawChart(d.split, pools);
  drawSplit(d, pools);
  drawReplicas(d.pools);
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

function drawSplit(d, pools) {
  const split = d.split, last = 60;
  const apis = ["chat", "completions", "responses", "messages", "other"];
  const byPool = {}, byAPI = {};
  let all = 0;
  for (const p of pools) {
    byPool[p] = { total: 0, recent: 0, errors: 0, apis: {} };
    for (const a of apis) {
      const vals = split.pools[p][a] || [];
      const recent = vals.slice(-last).reduce((s, v) => s + v, 0);
      byPool[p].recent += recent;
      byPool[p].total += vals.reduce((s, v) => s + v, 0);
      byPool[p].apis[a] = recent;
      byAPI[a] = (byAPI[a] || 0) + recent;
    }
    byPool[p].errors = (split.errors[p] || []).slice(-last).reduce((s, v) => s + v, 0);
    all += byPool[p].recent;
  }
  const t = $("split");
  const head = document.createElement("tr");
  for (const s of ["pool", "share", "req/s", "errors"].concat(apis.filter((a) => byAPI[a] > 0))) {
    const th = document.createElement("th");
    th.textContent = s;
    head.appendChild(th);
  }
  t.tHead.replaceChildren(head);
  const body = t.tBodies[0];
  body.replaceChildren();
  for (const p of pools) {
    const row = document.createElement("tr");
    row.id = "share-" + p;
    row.dataset.pool = p;
    row.dataset.share = all ? (byPool[p].recent / all).toFixed(4) : "0";
    row.dataset.total = String(byPool[p].total);
    cell(row, p).style.color = poolColors[p];
    cell(row, all ? pct(byPool[p].recent / all) : "–", "num");
    cell(row, (byPool[p].recent / last).toFixed(1), "num");
    cell(row, String(byPool[p].errors), byPool[p].errors ? "num bad" : "num");
    for (const a of apis.filter((a) => byAPI[a] > 0)) {
      cell(row, byAPI[a] ? pct(byPool[p].apis[a] / byAPI[a]) : "–", "num").title = "share of " + a + " requests";
    }
    body.appendChild(row);
  }
  const ctl = $("control");
  ctl.replaceChildren();
  const share = d.control && d.control.share;
  if (share) {
    const mine = byPool[share.pool] ? byPool[share.pool].recent / Math.max(all, 1) : 0;
    text(ctl, "control.share: " + share.pool + " at " + pct(mine) + " of the last minute, target " +
      (typeof share.target === "number" ? pct(share.target) : share.target) + " (controller measures " + pct(share.share || 0) + ")");
  }
}

const DOWN = { unhealthy: 1, ejected: 1, misconfigured: 1 };
const WARN = { probing: 1, draining: 1 };

function drawReplicas(pools) {
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
      if (r.state === "ejected" && r.ejected_until) state += " (" + dur(new Date(r.ejected_until) - Date.now()) + " left)";
      cell(row, state, "state");
      cell(row, String(r.inflight), "num");
      cell(row, String(r.waiting), "num");
      cell(row, r.queue === undefined ? "–" : String(r.queue), "num");
      cell(row, r.kv_cache_usage === undefined ? "–" : pct(r.kv_cache_usage), "num");
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
  const add = (el, k, v, cls) => {
    const dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = k; dd.textContent = v;
    if (cls) dd.className = cls;
    el.append(dt, dd);
  };
  const c = d.classifier;
  if (!c) add(dl, "kind", "none configured");
  else {
    const now = new Date(d.now).getTime();
    const total = Object.values(c.results).reduce((s, v) => s + v, 0);
    add(dl, "kind", c.kind);
    add(dl, "breaker", c.breaker_open ? "OPEN: every request gets on_error's label" : "closed", c.breaker_open ? "bad" : "good");
    if (prevClassifier && now > prevClassifier.at) {
      const secs = (now - prevClassifier.at) / 1000;
      const calls = c.calls - prevClassifier.calls;
      const all = total - prevClassifier.total;
      const hits = (c.results.cache_hit || 0) - prevClassifier.hits;
      add(dl, "classifications/s", (all / secs).toFixed(1));
      add(dl, "calls to its pool/s", (calls / secs).toFixed(1));
      add(dl, "cache hit rate", all > 0 ? pct(hits / all) : "–");
      add(dl, "latency (mean)", calls > 0 ? fmtMS(1000 * (c.duration_seconds_sum - prevClassifier.sum) / calls) : "–");
    }
    const fallbacks = ["timeout", "error", "circuit_open", "refused"].map((k) => c.results[k] || 0).reduce((s, v) => s + v, 0);
    add(dl, "fell back (all time)", total ? pct(fallbacks / total) : "–", fallbacks ? "bad" : "");
    prevClassifier = { at: now, calls: c.calls, total, hits: c.results.cache_hit || 0, sum: c.duration_seconds_sum };
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
