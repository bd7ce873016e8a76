// Advice: recommendations with their dollars and what-if changes, cost anomalies, and ROI.
// The API has no what-if endpoint (a what-if is a local replay: `gpufleet whatif`), so each
// recommendation shows the change that backs its figure and the command that replays it.

import * as api from "../api.js";
import { hbars } from "../charts.js";
import { fill, h, money, num, paletteAt, pct, table } from "../dom.js";
import { card } from "./nodes.js";

const WINDOWS = [
  ["24h", "last 24 hours"],
  ["7d", "last 7 days"],
  ["30d", "last 30 days"],
];

function evidence(ev) {
  return h(
    "ul",
    { class: "evidence" },
    Object.entries(ev).map(([k, v]) => h("li", {}, h("span", { class: "muted" }, `${k.replaceAll("_", " ")}: `), typeof v === "number" ? num(v, 3) : v)),
  );
}

export function advicePage(el, ctx) {
  const win = h("select", { id: "advice-window" }, WINDOWS.map(([v, l]) => h("option", { value: v, selected: v === "7d" }, l)));
  const recs = h("div", { id: "recommendations" });
  const anomalies = h("div", { id: "anomalies" });
  const roi = h("div", { id: "roi" });
  fill(
    el,
    h("h2", {}, "Advice"),
    h("div", { class: "toolbar" }, h("label", {}, "Judge the ", win)),
    h("h3", {}, "Recommendations"),
    recs,
    h("h3", {}, "Cost anomalies (last 30 days)"),
    anomalies,
    h("h3", {}, "Return on investment"),
    roi,
  );
  let asked = 0; // bumped by every change of the window: a refresh begun before one is not drawn
  const view = {
    interval: 30000,
    async refresh() {
      const mine = asked;
      const w = win.value;
      const [list, anoms, r] = await Promise.all([
        api.get("/v1/recommendations", { window: w }),
        api.get("/v1/anomalies", { days: 30 }).catch(() => []),
        api.get("/v1/roi", { window: w === "24h" ? "24h" : "30d" }).catch(() => null),
      ]);
      if (mine !== asked) return;
      const sum = list.reduce((a, x) => a + x.monthly_savings_usd, 0);
      fill(
        recs,
        h("div", { class: "cards" }, card("Possible savings", `${money(sum)}/month`, `${list.length} recommendation${list.length === 1 ? "" : "s"}`)),
        list.length
          ? hbars(
              list.map((x, i) => ({ label: `${x.kind} · ${x.target}`, value: x.monthly_savings_usd, colour: paletteAt(i), note: x.action })),
              (v) => `${money(v)}/mo`,
              "Monthly savings by recommendation",
            )
          : null,
        table(
          ["Kind", "Target", "Team", "Action", { label: "$/month", cls: "num" }, "Confidence", "Evidence", "What-if"],
          list.map((x) =>
            h(
              "tr",
              { "data-rec": x.id },
              h("td", {}, x.kind),
              h("td", {}, x.target),
              h("td", {}, x.team || "–"),
              h("td", {}, x.action),
              h("td", { class: "num" }, money(x.monthly_savings_usd), x.monthly_basis ? h("div", { class: "muted small" }, x.monthly_basis) : null),
              h("td", {}, pct(100 * x.confidence), x.enough_history === false ? h("div", { class: "muted small", "data-flag": "history" }, "not enough history") : null),
              h("td", {}, evidence(x.evidence)),
              h(
                "td",
                {},
                x.whatif
                  ? [h("code", {}, x.whatif), h("div", { class: "muted small" }, "replay: ", h("code", {}, `gpufleet whatif --change ${x.whatif} --trace history:${w}`))]
                  : "–",
              ),
            ),
          ),
          { testid: "recommendations-table", empty: "No recommendation for this window: nothing to save that the data shows." },
        ),
        h(
          "p",
          { class: "muted small" },
          "What-if replays run on your machine with the CLI (the API does not run them): each row names the change that backs its figure.",
        ),
      );
      fill(
        anomalies,
        table(
          ["Day", "Scope", { label: "Spend", cls: "num" }, { label: "Baseline", cls: "num" }, { label: "Increase", cls: "num" }, "Causes", "What to do"],
          anoms.map((a) =>
            h(
              "tr",
              {},
              h("td", {}, a.day),
              h("td", {}, a.scope),
              h("td", { class: "num" }, money(a.spend_usd)),
              h("td", { class: "num" }, money(a.baseline_usd)),
              h("td", { class: "num" }, `${money(a.increase_usd)} (${pct(a.increase_pct)})`),
              h("td", {}, a.causes.map((c) => h("div", {}, `${c.dimension} ${c.key}: +${money(c.increase_usd)}`))),
              h("td", {}, a.message || a.action),
            ),
          ),
          { testid: "anomalies-table", empty: "No anomaly: every day was within its usual range." },
        ),
      );
      fill(
        roi,
        r
          ? [
              h(
                "div",
                { class: "cards" },
                card("Actual spend", money(r.actual_usd), `${num(r.hours, 1)} h observed`),
                card("Fixed on-demand cluster", money(r.counterfactual_usd), `${r.peak_gpus} × ${r.reference_gpu} at ${money(r.reference_usd_per_gpu_hour, 3)}/GPU-h`),
                card("Savings", money(r.savings_usd), r.savings_pct !== null ? `${pct(100 * r.savings_pct, 1)} of the fixed cluster` : r.enough_history ? "" : "not enough history for a percentage"),
                card(
                  "Projected per year",
                  r.projected_annual_savings_usd === null ? "–" : money(r.projected_annual_savings_usd),
                  r.enough_history ? "" : "too little history to project",
                ),
              ),
              hbars(
                Object.entries(r.levers_usd).filter(([k, v]) => k !== "other" || Math.abs(v) >= 0.005).map(([k, v], i) => ({ label: k.replaceAll("_", " "), value: v, colour: v >= 0 ? paletteAt(i) : "#e15759" })),
                (v) => money(v),
                "Savings by lever (a negative lever cost money)",
              ),
              h("ul", { class: "muted small" }, r.assumptions.map((a) => h("li", {}, a))),
            ]
          : h("p", { class: "muted" }, "ROI unavailable."),
      );
    },
  };
  win.addEventListener("change", () => {
    asked++;
    view.refreshNow();
  });
  return view;
}
