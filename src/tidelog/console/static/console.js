// tidelog console: live numbers and charts without reloading the page. No library, no build step.
//
// A page whose <main> has data-live="/api/..." is refreshed every data-every ms (console.refresh.ms): the JSON answer has
// "values" (a flat map); every element with data-k="KEY" gets values[KEY] as its text (and, for a
// .status badge, as its class). A group page also gets "history" and redraws its lag chart; the overview gets
// "charts" (the brokers' throughput and disk use over time) whose paths the server has already computed
// (console/charts.py): this script only places the axes, the labels and those paths.
"use strict";
const REFRESH_MS = 5000;

function applyValues(values) {
  document.querySelectorAll("[data-k]").forEach((el) => {
    const key = el.getAttribute("data-k");
    if (!(key in values)) return;
    const text = values[key] === null ? "" : String(values[key]);
    if (el.textContent !== text) el.textContent = text;
    if (el.classList.contains("status")) el.className = "status " + text;
  });
}

function drawChart(svg, points) {
  const W = 600, H = 160, L = 48, R = 8, T = 10, B = 22;
  const ns = "http://www.w3.org/2000/svg";
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const add = (tag, attrs, text) => {
    const el = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    svg.appendChild(el);
    return el;
  };
  if (points.length === 0) { add("text", {x: L, y: H / 2}, "no samples yet"); return; }
  const t0 = points[0].t, t1 = Math.max(points[points.length - 1].t, t0 + 1);
  const maxLag = Math.max(1, ...points.map((p) => p.lag));
  const x = (t) => L + (W - L - R) * (t - t0) / (t1 - t0);
  const y = (v) => T + (H - T - B) * (1 - v / maxLag);
  for (const f of [0, 0.5, 1]) {
    add("line", {x1: L, x2: W - R, y1: y(maxLag * f), y2: y(maxLag * f), class: "grid"});
    add("text", {x: 4, y: y(maxLag * f) + 3}, Math.round(maxLag * f).toString());
  }
  add("text", {x: L, y: H - 6}, new Date(t0).toLocaleTimeString());
  add("text", {x: W - R - 60, y: H - 6}, new Date(t1).toLocaleTimeString());
  add("polyline", {class: "line", points: points.map((p) => `${x(p.t).toFixed(1)},${y(p.lag).toFixed(1)}`).join(" ")});
  const maxS = Math.max(0, ...points.map((p) => p.seconds || 0));
  if (maxS > 0) {
    const ys = (v) => T + (H - T - B) * (1 - v / maxS);
    add("polyline", {class: "line2", points: points.map((p) => `${x(p.t).toFixed(1)},${ys(p.seconds || 0).toFixed(1)}`).join(" ")});
    add("text", {x: W / 2 - 60, y: H - 6}, `— records (max ${maxLag})   - - seconds (max ${maxS.toFixed(1)})`);
  }
}

function formatAmount(n, unit) {
  const units = ["", "Ki", "Mi", "Gi", "Ti"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return (i === 0 ? Math.round(n).toString() : n.toFixed(n >= 100 ? 0 : 1)) + " " + units[i] + unit;
}

function drawSeriesChart(svg, doc) {
  const ns = "http://www.w3.org/2000/svg";
  const unit = svg.getAttribute("data-unit") || "";
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const add = (tag, attrs, text) => {
    const el = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    svg.appendChild(el);
    return el;
  };
  const [W, H, L, R, T, B] = doc.box || [600, 160, 64, 8, 10, 22];
  if (!doc.lines || doc.lines.length === 0) { add("text", {x: L, y: H / 2}, "no samples yet"); return; }
  for (const f of [0, 0.5, 1]) {
    const y = T + (H - T - B) * (1 - f);
    add("line", {x1: L, x2: W - R, y1: y, y2: y, class: "grid"});
    add("text", {x: 4, y: y + 3}, formatAmount(doc.top * f, unit));
  }
  add("text", {x: L, y: H - 6}, new Date(doc.t0).toLocaleTimeString());
  add("text", {x: W - R - 60, y: H - 6}, new Date(doc.t1).toLocaleTimeString());
  doc.lines.forEach((line, i) => {
    add("path", {class: `series s${i % 6}`, d: line.d, "data-name": line.name});
    const last = line.last === null ? "–" : formatAmount(line.last, unit);
    add("text", {x: L + 8 + (i % 3) * 170, y: T + 10 + Math.floor(i / 3) * 11, class: `legend s${i % 6}`}, `${line.name}: ${last}`);
  });
}

function drawSeriesCharts(charts) {
  document.querySelectorAll("svg[data-series-chart]").forEach((svg) => {
    const doc = charts[svg.getAttribute("data-series-chart")];
    if (doc) drawSeriesChart(svg, doc);
  });
}

function drawCharts(history) {
  document.querySelectorAll("svg[data-chart]").forEach((svg) => drawChart(svg, history));
}

async function refresh(url) {
  try {
    const answer = await fetch(url, {headers: {accept: "application/json"}, credentials: "same-origin"});
    if (!answer.ok) return;
    const doc = await answer.json();
    if (doc.values) applyValues(doc.values);
    if (doc.history) drawCharts(doc.history);
    if (doc.charts) drawSeriesCharts(doc.charts);
    document.body.setAttribute("data-refreshed", String(Date.now()));
  } catch (e) { /* the console or the network is away: try again at the next tick */ }
}

document.addEventListener("DOMContentLoaded", () => {
  const initial = document.getElementById("lag-history");
  if (initial) drawCharts(JSON.parse(initial.textContent));
  const brokerCharts = document.getElementById("broker-charts");
  if (brokerCharts) drawSeriesCharts(JSON.parse(brokerCharts.textContent));
  document.querySelectorAll(".status").forEach((el) => { el.className = "status " + el.textContent.trim(); });
  const live = document.querySelector("main[data-live]");
  const every = Number(document.querySelector("main").getAttribute("data-every")) || REFRESH_MS;
  if (live) setInterval(() => refresh(live.getAttribute("data-live")), every);
});
