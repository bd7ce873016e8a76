// Small charts drawn as inline SVG through the DOM (no library, no HTML parsing). Text from the API
// lands in <text> and <title> nodes as text.

import { h, s } from "./dom.js";

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** The drawing width: the page's width, so text keeps its size (the SVG scales to fit). */
function drawWidth() {
  const page = document.getElementById("page");
  const w = page ? page.clientWidth - 60 : 820;
  return Math.max(480, Math.min(1400, w || 820));
}

function legend(items) {
  return h(
    "div",
    { class: "legend" },
    items.map((it) => {
      const sw = h("span", { class: ["swatch", it.dashed && "dashed"] });
      sw.style.background = it.colour;
      return h("span", { class: "legend-item" }, sw, it.label);
    }),
  );
}

/**
 * Bars over time (stacked), with an optional line on a 0..1 right axis.
 * opts: {labels: [x label], series: [{label, colour, values}], yFormat, line: {label, colour, values, format}, title}
 */
export function barChart(opts) {
  const W = drawWidth(), H = 280, L = 64, R = opts.line ? 52 : 16, T = 12, B = 40;
  const n = opts.labels.length;
  const totals = Array.from({ length: n }, (_, i) => opts.series.reduce((a, se) => a + (Number(se.values[i]) || 0), 0));
  const top = niceMax(Math.max(0, ...totals));
  const pw = W - L - R, ph = H - T - B;
  const bw = n ? pw / n : pw;
  const y = (v) => T + ph - (v / top) * ph;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": opts.title || "chart" });
  for (let k = 0; k <= 4; k++) {
    const v = (top * k) / 4;
    svg.append(s("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }));
    svg.append(s("text", { x: L - 6, y: y(v) + 4, class: "tick", "text-anchor": "end" }, opts.yFormat(v)));
  }
  const every = Math.max(1, Math.ceil((n * 90) / (W - L - R)));
  for (let i = 0; i < n; i++) {
    let base = 0;
    for (const se of opts.series) {
      const v = Number(se.values[i]) || 0;
      if (v <= 0) continue;
      const rect = s("rect", {
        x: L + i * bw + bw * 0.12,
        width: Math.max(1, bw * 0.76),
        y: y(base + v),
        height: Math.max(0.5, y(base) - y(base + v)),
        fill: se.colour,
        class: "bar",
      });
      rect.append(s("title", {}, `${opts.labels[i]} · ${se.label}: ${opts.yFormat(v)}`));
      svg.append(rect);
      base += v;
    }
    if (i % every === 0) {
      svg.append(s("text", { x: L + i * bw + bw / 2, y: H - B + 16, class: "tick", "text-anchor": "middle" }, opts.labels[i]));
    }
  }
  svg.append(s("line", { x1: L, x2: W - R, y1: T + ph, y2: T + ph, class: "axis" }));
  const items = opts.series.map((se) => ({ label: se.label, colour: se.colour }));
  if (opts.line) {
    const ly = (v) => T + ph - Math.max(0, Math.min(1, v)) * ph;
    const pts = [];
    opts.line.values.forEach((v, i) => {
      if (v === null || v === undefined || !Number.isFinite(v)) return;
      pts.push(`${L + i * bw + bw / 2},${ly(v)}`);
      const dot = s("circle", { cx: L + i * bw + bw / 2, cy: ly(v), r: 3, fill: opts.line.colour });
      dot.append(s("title", {}, `${opts.labels[i]} · ${opts.line.label}: ${opts.line.format(v)}`));
      svg.append(dot);
    });
    if (pts.length > 1) {
      svg.append(s("polyline", { points: pts.join(" "), fill: "none", stroke: opts.line.colour, "stroke-width": 2 }));
    }
    for (let k = 0; k <= 4; k++) {
      svg.append(s("text", { x: W - R + 6, y: ly(k / 4) + 4, class: "tick" }, opts.line.format(k / 4)));
    }
    items.push({ label: opts.line.label, colour: opts.line.colour });
  }
  return h("figure", { class: "chart-box" }, opts.title ? h("figcaption", {}, opts.title) : null, svg, legend(items));
}

/** Horizontal bars, one per item: [{label, value, colour, note}], biggest first as given. */
export function hbars(items, format, title) {
  const W = drawWidth(), rowH = 26, L = 240, R = 110;
  const H = Math.max(1, items.length) * rowH + 8;
  const top = Math.max(1e-12, ...items.map((it) => Math.abs(Number(it.value) || 0)));
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart hbars", role: "img", "aria-label": title || "bars" });
  items.forEach((it, i) => {
    const v = Math.abs(Number(it.value) || 0);
    const yy = 4 + i * rowH;
    const label = String(it.label);
    svg.append(s("text", { x: L - 8, y: yy + 17, class: "tick", "text-anchor": "end" }, label.length > 32 ? `${label.slice(0, 31)}…` : label));
    const rect = s("rect", { x: L, y: yy + 4, height: rowH - 8, width: Math.max(1, ((W - L - R) * v) / top), fill: it.colour, class: "bar" });
    rect.append(s("title", {}, `${label}: ${format(it.value)}${it.note ? ` · ${it.note}` : ""}`));
    svg.append(rect);
    svg.append(s("text", { x: L + ((W - L - R) * v) / top + 6, y: yy + 17, class: "tick" }, format(it.value)));
  });
  return h("figure", { class: "chart-box" }, title ? h("figcaption", {}, title) : null, svg);
}

/**
 * A budget gauge: spend (solid), committed (lighter), projected (marker) against the limit.
 */
export function budgetGauge(st) {
  const W = drawWidth(), H = 46, L = 4, R = 4;
  const top = Math.max(st.limit_usd, st.projected_usd, st.committed_usd, st.spend_usd) * 1.05 || 1;
  const x = (v) => L + ((W - L - R) * Math.max(0, v)) / top;
  const over = st.spend_usd > st.limit_usd;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart gauge", role: "img", "aria-label": "budget" });
  svg.append(s("rect", { x: L, y: 10, width: W - L - R, height: 20, class: "gauge-bg" }));
  const committed = s("rect", { x: L, y: 10, width: x(st.committed_usd) - L, height: 20, class: "gauge-committed" });
  committed.append(s("title", {}, `committed $${st.committed_usd.toFixed(2)}`));
  svg.append(committed);
  const spent = s("rect", { x: L, y: 10, width: x(st.spend_usd) - L, height: 20, class: ["gauge-spend", over && "over"] });
  spent.append(s("title", {}, `spent $${st.spend_usd.toFixed(2)}`));
  svg.append(spent);
  const proj = s("line", { x1: x(st.projected_usd), x2: x(st.projected_usd), y1: 4, y2: 36, class: "gauge-projected" });
  proj.append(s("title", {}, `projected $${st.projected_usd.toFixed(2)} at the period's end`));
  svg.append(proj);
  const lim = s("line", { x1: x(st.limit_usd), x2: x(st.limit_usd), y1: 2, y2: 40, class: "gauge-limit" });
  lim.append(s("title", {}, `limit $${st.limit_usd.toFixed(2)}`));
  svg.append(lim);
  return h(
    "figure",
    { class: "chart-box gauge-box" },
    svg,
    legend([
      { label: "spent", colour: "var(--spend)" },
      { label: "committed (spent + running jobs' estimated rest)", colour: "var(--committed)" },
      { label: "projected at period end", colour: "var(--projected)" },
      { label: "limit", colour: "var(--limit)" },
    ]),
  );
}
