// tidelog console: live numbers and charts without reloading the page. No library, no build step.
//
// A page whose <main> has data-live="/api/..." is refreshed every data-every ms (console.refresh.ms): the JSON answer has
// "values" (a flat map); every element with data-k="KEY" gets values[KEY] as its text (and, for a
// .status badge, as its class). A group page also gets "history" and redraws its lag chart.
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
    document.body.setAttribute("data-refreshed", String(Date.now()));
  } catch (e) { /* the console or the network is away: try again at the next tick */ }
}

document.addEventListener("DOMContentLoaded", () => {
  const initial = document.getElementById("lag-history");
  if (initial) drawCharts(JSON.parse(initial.textContent));
  document.querySelectorAll(".status").forEach((el) => { el.className = "status " + el.textContent.trim(); });
  const live = document.querySelector("main[data-live]");
  const every = Number(document.querySelector("main").getAttribute("data-every")) || REFRESH_MS;
  if (live) setInterval(() => refresh(live.getAttribute("data-live")), every);
});
