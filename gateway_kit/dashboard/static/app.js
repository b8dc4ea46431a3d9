// gateway-kit's dashboard: plain JavaScript over the gateway's own API, no build step.
// The key (or operator token) the user types stays in this tab's sessionStorage and goes only
// to this origin, in the Authorization header. Every value shown is set as text, never as HTML.
"use strict";

const TOKEN = "gk.dashboard.token";
const ROLE = "gk.dashboard.role";
const COLORS = ["#2f6fde", "#e0793a", "#1b9e77", "#a05fd6", "#d4a017", "#c2417a", "#5b6475"];

const $ = (id) => document.getElementById(id);
// Where the gateway's routes are: the page is served at <root>/dashboard, and the gateway may
// be mounted under a path of the host application (create_app under /llm, say).
const ROOT = location.pathname.replace(/\/dashboard\/?$/, "");

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function svg(tag, attributes) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
  return node;
}

function usd(amount, places = 2) {
  if (amount === null || amount === undefined) return "unknown";
  return "$" + Number(amount).toFixed(places);
}

function micro(amount) {
  return amount === null || amount === undefined ? "-" : "$" + (amount / 1e6).toFixed(6);
}

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || "HTTP " + status);
    this.status = status;
  }
}

async function api(path) {
  const response = await fetch(ROOT + path, {
    headers: { authorization: "Bearer " + sessionStorage.getItem(TOKEN) },
    cache: "no-store",
  });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

function fill(id, ...nodes) {
  const body = $(id).querySelector(".body");
  body.replaceChildren(...nodes);
}

function failed(id, error) {
  const text = error.status === 403
    ? "This key may not read this (" + error.message + ")"
    : "Could not load: " + error.message;
  fill(id, el("p", text, "note"));
}

function table(headers, rows) {
  const node = el("table");
  const head = el("tr");
  for (const h of headers) head.append(el("th", h));
  node.append(head);
  for (const row of rows) {
    const line = el("tr");
    for (const cell of row) {
      if (cell instanceof Node) {
        const td = el("td");
        td.append(cell);
        line.append(td);
      } else {
        line.append(el("td", cell, typeof cell === "number" ? "num" : undefined));
      }
    }
    node.append(line);
  }
  return node;
}

// -- the workspace's view ---------------------------------------------------------------------

function showQuota(me) {
  const used = me.used_requests, included = me.included_requests;
  const share = included ? Math.min(100, (100 * used) / included) : 0;
  const bar = el("div", null, "bar");
  const fillBar = el("div");
  fillBar.style.width = share.toFixed(1) + "%";
  bar.append(fillBar);
  fill("quota",
    el("div", used.toLocaleString() + " / " + included.toLocaleString(), "figure"),
    bar,
    el("div", "resets " + me.reset_at, "sub"),
    el("div", "burst limit " + me.burst_limit_rpm + " requests a minute", "sub"));
  fill("savings", el("div", usd(me.savings_usd), "figure"),
    el("div", "saved against the flagship model", "sub"));
}

function showBudget(budget) {
  const band = budget.verdict;
  const cls = band === "ok" ? "status-ok" : band === "warn" ? "status-warn" : "status-bad";
  const cap = budget.cap_usd === null ? "no cap" : "of " + usd(budget.cap_usd) + " (" + budget.cap_source + ")";
  fill("budget",
    el("div", usd(budget.spent_usd), "figure"),
    el("div", cap + ", period " + budget.period, "sub"),
    el("div", "verdict: " + band, cls));
  const wallet = budget.wallet || {};
  fill("wallet",
    el("div", usd(wallet.balance_usd), "figure"),
    el("div", wallet.billing ? "billing from the wallet" : "billing off", "sub"));
}

function barChart(rows, value, unit) {
  const days = [...new Set(rows.map((r) => r.day))].sort();
  const models = [...new Set(rows.map((r) => r.model))].sort();
  if (!days.length) return el("p", "Nothing used in this period yet.", "note");
  const totals = days.map((d) => rows.filter((r) => r.day === d).reduce((s, r) => s + value(r), 0));
  const top = Math.max(...totals, 1);
  const width = 720, height = 180, left = 48, bottom = 20;
  const step = (width - left) / days.length;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height + bottom}`, width: "100%", role: "img" });
  chart.append(svg("line", { x1: left, y1: height, x2: width, y2: height, stroke: "#dde1e8" }));
  const label = svg("text", { x: 0, y: 10 });
  label.textContent = unit(top);
  chart.append(label);
  days.forEach((day, i) => {
    let y = height;
    models.forEach((model, m) => {
      const row = rows.find((r) => r.day === day && r.model === model);
      const amount = row ? value(row) : 0;
      const h = (amount / top) * (height - 12);
      if (h > 0) {
        const bar = svg("rect", {
          x: left + i * step + 2, y: y - h, width: Math.max(1, step - 4), height: h,
          fill: COLORS[m % COLORS.length],
        });
        const tip = svg("title");
        tip.textContent = `${day} ${model}: ${unit(amount)}`;
        bar.append(tip);
        chart.append(bar);
        y -= h;
      }
    });
    if (days.length <= 14 || i % Math.ceil(days.length / 14) === 0) {
      const text = svg("text", { x: left + i * step + 2, y: height + 14 });
      text.textContent = day.slice(5);
      chart.append(text);
    }
  });
  const legend = el("div", null, "legend");
  models.forEach((model, m) => {
    const item = el("span", model);
    const swatch = el("i");
    swatch.style.background = COLORS[m % COLORS.length];
    item.prepend(swatch);
    legend.append(item);
  });
  const box = el("div");
  box.append(chart, legend);
  return box;
}

function showUsage(usage) {
  const rows = usage.data;
  const t = usage.totals;
  fill("usage",
    barChart(rows, (r) => r.requests, (n) => Math.round(n).toLocaleString() + " requests"),
    el("p", `${t.requests.toLocaleString()} requests, ${t.errors} errors, ${t.cache_hits} cache hits, ` +
      `${(t.input_tokens + t.output_tokens).toLocaleString()} tokens, cost ${micro(t.cost_micro_usd)} ` +
      `from ${usage.since} to ${usage.until}`, "sub"));
  fill("savings-chart",
    barChart(rows, (r) => r.savings_micro_usd, (n) => "$" + (n / 1e6).toFixed(4)),
    el("p", "saved " + micro(t.savings_micro_usd) + " in the period", "sub"));
}

function verdictPills(verdicts) {
  const box = el("span");
  for (const [layer, verdict] of Object.entries(verdicts)) {
    if (layer === "auth") continue;
    box.append(el("span", layer + ": " + verdict.action, "pill"));
  }
  return box;
}

function showRequests(page) {
  if (!page.data.length) return fill("requests", el("p", "No request yet.", "note"));
  const rows = page.data.map((r) => {
    const status = el("span", r.status + (r.error_code ? " " + r.error_code : ""),
      r.status < 400 ? "status-ok" : r.status < 500 ? "status-warn" : "status-bad");
    const model = r.served_model && r.served_model !== r.model ? `${r.model} → ${r.served_model}` : r.model || "-";
    return [r.created_at.replace("T", " ").slice(0, 19), r.key_id || "-", model, status,
      r.latency_ms.total.toFixed(1) + " ms", r.usage.input_tokens + r.usage.output_tokens,
      micro(r.cost_micro_usd), verdictPills(r.verdicts)];
  });
  fill("requests", table(["time", "key", "model", "status", "latency", "tokens", "cost", "verdicts"], rows));
}

async function showWebhooks(workspace, hooks) {
  if (!hooks.data.length) return fill("webhooks", el("p", "No webhook.", "note"));
  const nodes = [];
  for (const hook of hooks.data) {
    const summary = el("summary", `${hook.name} (${hook.status}): last status ${hook.last_status ?? "-"}, ` +
      `last fired ${hook.last_fired_at ?? "never"}`);
    const details = el("details");
    details.append(summary);
    try {
      const log = await api(`/api/v1/workspaces/${workspace}/webhooks/${hook.id}/deliveries?limit=20`);
      const rows = log.data.map((a) => [a.started_at, a.event, a.attempt, a.status,
        a.error_class || "", a.duration_ms + " ms"]);
      details.append(rows.length ? table(["when", "event", "attempt", "status", "error", "took"], rows)
        : el("p", "No delivery yet.", "note"));
    } catch (error) {
      details.append(el("p", "Delivery log: " + error.message, "note"));
    }
    nodes.push(details);
  }
  fill("webhooks", ...nodes);
}

function showEvents(events) {
  if (!events.data.length) return fill("events", el("p", "No event yet.", "note"));
  fill("events", table(["time", "event", "id"], events.data.map((e) => [e.timestamp, e.event, e.event_id])));
}

async function loadWorkspace() {
  const me = await api("/v1/me");
  $("who").textContent = `${me.workspace_id} · ${me.email} · plan ${me.plan}`;
  $("workspace").hidden = false;
  showQuota(me);
  const ws = me.workspace_id;
  const base = `/api/v1/workspaces/${ws}`;
  const parts = [
    ["budget", `${base}/budget`, showBudget],
    ["usage", `${base}/usage`, showUsage],
    ["requests", `${base}/requests?limit=25`, showRequests],
    ["webhooks", `${base}/webhooks`, (hooks) => showWebhooks(ws, hooks)],
    ["events", `${base}/events?limit=25`, showEvents],
  ];
  await Promise.all(parts.map(async ([id, path, show]) => {
    try {
      await show(await api(path));
    } catch (error) {
      failed(id, error);
      if (id === "budget") failed("wallet", error);
      if (id === "usage") failed("savings-chart", error);
    }
  }));
}

// -- the operator's view ----------------------------------------------------------------------

async function loadOperator() {
  $("who").textContent = "operator";
  $("operator").hidden = false;
  const page = await api("/api/v1/admin/workspaces?limit=500");
  const rows = page.data.map((w) => [w.workspace_id, w.email, w.plan, w.status]);
  fill("workspaces", rows.length ? table(["workspace", "e-mail", "plan", "status"], rows)
    : el("p", "No workspace yet.", "note"));
}

// -- signing in and out -----------------------------------------------------------------------

async function start() {
  const token = sessionStorage.getItem(TOKEN);
  if (!token) {
    $("sign-in").hidden = false;
    return;
  }
  $("sign-in").hidden = true;
  $("sign-out").hidden = false;
  try {
    if (sessionStorage.getItem(ROLE) === "operator") await loadOperator();
    else await loadWorkspace();
    document.body.dataset.loaded = "true";
    document.body.dataset.loadedAfterMs = String(Math.round(performance.now()));
  } catch (error) {
    signOut();
    $("sign-in-error").textContent = error.status === 401
      ? "That key or token was not accepted." : "Could not load: " + error.message;
  }
}

function signOut() {
  sessionStorage.removeItem(TOKEN);
  sessionStorage.removeItem(ROLE);
  $("workspace").hidden = true;
  $("operator").hidden = true;
  $("sign-out").hidden = true;
  $("sign-in").hidden = false;
  $("who").textContent = "";
}

document.addEventListener("DOMContentLoaded", () => {
  $("sign-in-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = event.target;
    sessionStorage.setItem(TOKEN, form.token.value.trim());
    sessionStorage.setItem(ROLE, form.role.value);
    form.token.value = "";
    $("sign-in-error").textContent = "";
    start();
  });
  $("sign-out").addEventListener("click", () => signOut());
  start();
});
