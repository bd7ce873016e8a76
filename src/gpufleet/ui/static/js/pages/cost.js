// Cost: spend over time by any dimension (one /v1/usage call per step: the API takes any
// start,end window), the breakdown over the whole range, and GPU utilization against cost.

import * as api from "../api.js";
import { barChart, hbars } from "../charts.js";
import { colours, fill, h, hrs, money, pct, table } from "../dom.js";
import { card } from "./nodes.js";

const RANGES = [
  { id: "1h", label: "last hour", span: 3600, step: 300 },
  { id: "6h", label: "last 6 hours", span: 6 * 3600, step: 1800 },
  { id: "24h", label: "last 24 hours", span: 86400, step: 3600 },
  { id: "7d", label: "last 7 days", span: 7 * 86400, step: 12 * 3600 },
  { id: "30d", label: "last 30 days", span: 30 * 86400, step: 86400 },
];
const DIMENSIONS = ["team", "project", "namespace", "experiment", "cost_center", "job", "node", "pool", "gpu_model", "capacity_type", "priority"];
const DEFAULT_RANGE = "24h";
const TOP = 8;
const GREY = { rest: "#9aa5b1", other: "#c3cad3", idle: "#e4e8ee" };

const total = (line) => Number(line?.total_cost_usd || 0);
const hours = (line) => Number(line?.gpu_hours || 0);

function keyOf(row, dim) {
  const v = row.key[dim];
  return v === "" || v === undefined ? "(none)" : v;
}

function tickLabel(t, step) {
  const d = new Date(t * 1000);
  if (step >= 86400) return d.toLocaleDateString(undefined, { month: "short", day: "numeric" });
  if (step >= 43200) return `${d.toLocaleDateString(undefined, { month: "short", day: "numeric" })} ${d.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" })}`;
  return d.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
}

/**
 * The range the page opens on: 24 hours, or on a server younger than that the shortest range that
 * covers its whole life (a 20-minute-old server's 24 hours are 23 hours of empty bars). The server's
 * age is its ledger's start, which /v1/forecast reports as `history_since`; unknown: 24 hours.
 */
async function openingRange() {
  const def = RANGES.find((r) => r.id === DEFAULT_RANGE);
  let since;
  try {
    since = (await api.get("/v1/forecast")).history_since;
  } catch {
    return def.id;
  }
  const born = since ? new Date(since).getTime() / 1000 : NaN;
  if (!Number.isFinite(born)) return def.id;
  const age = Math.max(0, Date.now() / 1000 - born);
  if (age >= def.span) return def.id;
  return (RANGES.find((r) => r.span >= age) || def).id;
}

function used(rep) {
  return rep.rows.reduce((a, r) => a + hours(r), 0) + hours(rep.other);
}

export function costPage(el, ctx) {
  const range = h("select", { id: "cost-range" }, RANGES.map((r) => h("option", { value: r.id, selected: r.id === DEFAULT_RANGE }, r.label)));
  const dim = h("select", { id: "cost-dimension" }, DIMENSIONS.map((d) => h("option", { value: d }, d.replace("_", " "))));
  const label = h("input", { id: "cost-label", type: "text", size: 12, placeholder: "label key" });
  const cards = h("div", { class: "cards", id: "cost-cards" });
  const timeChart = h("div", { id: "cost-time" });
  const breakdown = h("div", { id: "cost-breakdown" });
  fill(
    el,
    h("h2", {}, "Cost"),
    h(
      "p",
      { class: "muted" },
      ctx.isAdmin
        ? "What the GPUs cost, by any dimension; idle is capacity no job held."
        : `Your team's cost by any dimension; other teams' spend is one line, and idle and totals are the cluster's.`,
    ),
    h("div", { class: "toolbar" }, h("label", {}, "Range ", range), h("label", {}, "By ", dim), h("label", {}, "or label ", label)),
    cards,
    timeChart,
    breakdown,
  );
  const dimension = () => (label.value.trim() ? `label:${label.value.trim()}` : dim.value);
  let asked = 0; // bumped by every change of the controls: a refresh begun before one is not drawn
  let opened = false; // the opening range is chosen once, before the first draw, unless one was picked
  const view = {
    interval: 15000,
    async refresh() {
      if (!opened) {
        const first = await openingRange();
        if (!opened && asked === 0) range.value = first;
        opened = true;
      }
      const mine = asked;
      const r = RANGES.find((x) => x.id === range.value) || RANGES[2];
      const d = dimension();
      const now = Date.now() / 1000;
      const last = Math.ceil(now / r.step) * r.step;
      const n = Math.round(r.span / r.step);
      const starts = Array.from({ length: n }, (_, i) => last - (n - i) * r.step);
      const whole = await api.get("/v1/usage", { window: `${last - r.span},${now}`, aggregate: d });
      const steps = await api.pool(
        starts.map((t) => () => api.get("/v1/usage", { window: `${t},${Math.min(t + r.step, now)}`, aggregate: d })),
        4,
      );
      if (mine !== asked) return; // the controls changed meanwhile: the next refresh draws them
      // -- the cards: the range's spend, idle, and what a used GPU-hour cost -------------------------
      const rowsTotal = whole.rows.reduce((a, x) => a + total(x), 0);
      const usedH = used(whole);
      const capH = usedH + hours(whole.idle);
      const nodeCost = Number(whole.node_cost_usd ?? total(whole.totals));
      fill(
        cards,
        card(ctx.isAdmin ? "Spend (jobs)" : `Spend (${ctx.me.team})`, money(rowsTotal), `${hrs(whole.rows.reduce((a, x) => a + hours(x), 0))} GPU-hours`),
        card("Idle (cluster)", money(total(whole.idle)), `${hrs(hours(whole.idle))} GPU-hours no job held`),
        card("Nodes cost (cluster)", money(nodeCost), ctx.isAdmin ? "" : `other teams: ${money(total(whole.other))}`),
        card("GPU utilization", capH > 0 ? pct((100 * usedH) / capH) : "–", "GPU-hours held by jobs / GPU-hours of the nodes"),
        card(
          "Cost per used GPU-hour",
          usedH > 0 ? money(nodeCost / usedH) : "–",
          capH > 0 ? `list ${money(nodeCost / capH)} per GPU-hour: the gap is idle capacity` : "",
        ),
      );
      // -- over time ---------------------------------------------------------------------------
      const ranked = [...whole.rows].sort((a, b) => total(b) - total(a));
      const top = ranked.slice(0, TOP).map((x) => keyOf(x, d));
      // a key's colour is its own (by its hash), not its rank: a team keeps its colour as the ranking changes
      const paint = colours(top);
      const series = top.map((k) => ({ label: k, colour: paint.get(k), values: [] }));
      const rest = { label: "other keys", colour: GREY.rest, values: [] };
      const other = { label: ctx.isAdmin ? "filtered out" : "other teams", colour: GREY.other, values: [] };
      const idle = { label: "idle", colour: GREY.idle, values: [] };
      const util = [];
      for (const rep of steps) {
        const by = new Map();
        let restV = 0;
        for (const row of rep.rows) {
          const k = keyOf(row, d);
          if (top.includes(k)) by.set(k, (by.get(k) || 0) + total(row));
          else restV += total(row);
        }
        series.forEach((se) => se.values.push(by.get(se.label) || 0));
        rest.values.push(restV);
        other.values.push(total(rep.other));
        idle.values.push(total(rep.idle));
        const u = used(rep);
        const cap = u + hours(rep.idle);
        util.push(cap > 0 ? u / cap : null);
      }
      const all = [...series, rest, other, idle].filter((se) => se.values.some((v) => v > 0));
      fill(
        timeChart,
        barChart({
          title: `Cost per ${r.step >= 86400 ? "day" : r.step >= 3600 ? `${r.step / 3600} h` : `${r.step / 60} min`} by ${d} over the ${r.label}, with GPU utilization`,
          labels: starts.map((t) => tickLabel(t, r.step)),
          series: all.length ? all : [idle],
          yFormat: (v) => money(v, v >= 100 ? 0 : 2),
          line: { label: "GPU utilization", colour: "#1f2937", values: util, format: (v) => pct(100 * v) },
        }),
      );
      // -- the breakdown -----------------------------------------------------------------------
      const share = (x) => (rowsTotal > 0 ? pct((100 * total(x)) / rowsTotal, 1) : "–");
      fill(
        breakdown,
        h("h3", {}, `By ${d}`),
        ranked.length
          ? hbars(ranked.slice(0, 15).map((x, i) => ({ label: keyOf(x, d), value: total(x), colour: i < TOP ? paint.get(keyOf(x, d)) : GREY.rest })), (v) => money(v))
          : null,
        table(
          [d, "GPU-hours", "GPU", "CPU", "Memory", "Priority adj.", "Total", "Share"].map((x, i) => (i ? { label: x, cls: "num" } : x)),
          ranked.map((x) =>
            h(
              "tr",
              {},
              h("td", {}, keyOf(x, d)),
              h("td", { class: "num" }, hrs(x.gpu_hours)),
              h("td", { class: "num" }, money(x.gpu_cost_usd)),
              h("td", { class: "num" }, money(x.cpu_cost_usd)),
              h("td", { class: "num" }, money(x.memory_cost_usd)),
              h("td", { class: "num" }, money(x.adjustment_usd)),
              h("td", { class: "num" }, money(x.total_cost_usd)),
              h("td", { class: "num" }, share(x)),
            ),
          ),
          { testid: "cost-table", empty: "No spend in this range." },
        ),
        whole.rules ? h("p", { class: "muted" }, `Priced with the pricing rules of ${whole.rules}.`) : null,
      );
    },
  };
  for (const c of [range, dim, label]) {
    c.addEventListener("change", () => {
      asked++;
      opened = true;
      view.refreshNow();
    });
  }
  return view;
}
