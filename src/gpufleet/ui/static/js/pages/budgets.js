// Budgets: each budget's spend, limit, committed and projected spend, and its state; and the
// spend forecast of the caller's scope for the month.

import * as api from "../api.js";
import { budgetGauge } from "../charts.js";
import { day, duration, fill, h, money, num, pct, table, when } from "../dom.js";
import { card } from "./nodes.js";

function stateOf(b, st) {
  if (!b.enabled) return ["disabled", "muted"];
  if (st.enforcing) return [b.action === "block" ? "blocking" : b.action === "throttle" ? "throttling" : "over limit", "bad"];
  if (st.spend_usd > st.limit_usd) return ["over limit", "bad"];
  if (st.committed_usd > st.limit_usd) return ["committed over limit", "bad"];
  if (st.projected_usd > st.limit_usd) return ["projected over", "warn"];
  if (st.thresholds_crossed.length) return [`${Math.max(...st.thresholds_crossed)}% crossed`, "warn"];
  return ["on track", "ok"];
}

export function budgetsPage(el, ctx) {
  const forecast = h("div", { id: "budget-forecast" });
  const list = h("div", { id: "budgets-list" });
  fill(
    el,
    h("h2", {}, "Budgets"),
    h("p", { class: "muted" }, ctx.isAdmin ? "Every budget." : "Your team's budgets (and the cluster-wide ones an admin shares)."),
    forecast,
    list,
  );
  return {
    interval: 10000,
    async refresh() {
      const [budgets, fc] = await Promise.all([api.get("/v1/budgets"), api.get("/v1/forecast").catch(() => null)]);
      const statuses = await api.pool(
        budgets.map((b) => () => api.get(`/v1/budgets/${encodeURIComponent(b.id)}/status`).catch(() => null)),
        4,
      );
      fill(
        forecast,
        fc
          ? h(
              "div",
              { class: "cards" },
              card(`Spent this month (${fc.scope === "all" ? "cluster" : fc.scope})`, money(fc.spent_usd), fc.basis_note || (fc.basis === "jobs" ? "jobs' charges" : "node cost, idle included")),
              card("Forecast at month end", money(fc.total_usd), `${Math.round(fc.level * 100)}% interval ${money(fc.low_usd)} – ${money(fc.high_usd)} · at least ${money(fc.floor_usd)} (spent + unfinished jobs)`),
              card(fc.method === "rate" ? "Rate so far" : "Run rate", `${money(fc.rate_usd_per_day)}/day`, `${fc.days_left} days left · ${fc.projection_note || `${duration(fc.history_days * 86400)} of history`}`),
            )
          : null,
      );
      fill(
        list,
        budgets.length ? null : h("p", { class: "empty" }, "No budgets" + (ctx.isAdmin ? " (create them with `gpufleet budget create`)." : " for your team.")),
        budgets.map((b, i) => {
          const st = statuses[i];
          if (!st) return h("article", { class: "panel budget", "data-budget": b.name }, h("h3", {}, b.name), h("p", { class: "muted" }, "status unavailable"));
          const [label, tone] = stateOf(b, st);
          return h(
            "article",
            { class: "panel budget", "data-budget": b.name },
            h(
              "header",
              {},
              h("h3", {}, b.name),
              h("span", { class: ["badge", tone], "data-testid": "budget-state" }, label),
              h("span", { class: "muted" }, `${b.scope} · ${b.period} · action: ${b.action}`),
            ),
            h(
              "div",
              { class: "cards" },
              card("Spent", money(st.spend_usd), `${pct(st.percent, 1)} of the limit · ${st.basis === "nodes" ? "node cost, idle included" : "jobs' charges (idle not counted)"}`),
              card("Limit", money(st.limit_usd), `${day(st.period_start)} – ${day(st.period_end)}`),
              card("Committed", money(st.committed_usd), "spent + running and queued jobs' estimated rest"),
              card("Projected", money(st.projected_usd), st.projection_note ? `at the period's end, ${st.projection_note}` : "at the period's end, at its run rate so far"),
              card(st.remaining_usd < 0 ? "Over by" : "Left", money(Math.abs(st.remaining_usd)), `${num(st.days_left, 1)} days left`),
            ),
            budgetGauge(st),
            st.alerts.length
              ? h(
                  "details",
                  {},
                  h("summary", {}, `${st.alerts.length} alert${st.alerts.length === 1 ? "" : "s"} this period`),
                  table(
                    ["Fired", "Kind", "Threshold", "Severity", "Spend", "Limit"],
                    st.alerts.map((a) =>
                      h("tr", {}, h("td", {}, when(a.fired_at)), h("td", {}, a.kind), h("td", {}, pct(a.threshold)), h("td", {}, a.severity), h("td", {}, money(a.spend_usd)), h("td", {}, money(a.limit_usd))),
                    ),
                  ),
                )
              : null,
          );
        }),
      );
    },
  };
}
