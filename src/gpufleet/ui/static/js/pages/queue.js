// Queue: the waiting jobs in the scheduler's order, why each waits and when it should start.

import * as api from "../api.js";
import { ago, fill, h, table, when } from "../dom.js";

export function queuePage(el, ctx) {
  const summary = h("p", { class: "muted", id: "queue-summary" }, "Loading…");
  const body = h("div", {});
  fill(
    el,
    h("h2", {}, "Queue"),
    h(
      "p",
      { class: "muted" },
      ctx.isAdmin
        ? "Every waiting job, first to start first."
        : `Your team's waiting jobs; positions are in the whole queue.`,
    ),
    summary,
    body,
  );
  return {
    interval: 3000,
    async refresh() {
      const queue = await api.get("/v1/queue");
      const blocked = queue.filter((e) => e.blocked).length;
      summary.textContent = queue.length
        ? `${queue.length} waiting${blocked ? `, ${blocked} blocked (quota, budget or capacity)` : ""}.`
        : "No job is waiting.";
      const rows = queue.map((e) =>
        h(
          "tr",
          { "data-job": e.job_id },
          h("td", { class: "num" }, String(e.position)),
          h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(e.job_id)}` }, e.job_id)),
          h("td", {}, e.name || "–"),
          h("td", {}, e.team),
          h("td", {}, e.priority),
          h("td", { class: "reason" }, e.reason || "–"),
          h("td", {}, e.blocked ? h("span", { class: "badge warn" }, e.blocked) : "–"),
          h(
            "td",
            {},
            e.estimated_start
              ? [when(e.estimated_start), h("span", { class: "muted" }, ` (${ago(e.estimated_start)})`)]
              : h("span", { class: "muted" }, e.blocked ? "blocked" : "unknown"),
          ),
          h("td", {}, ago(e.submitted_at)),
        ),
      );
      fill(
        body,
        table(
          ["#", "Job", "Name", "Team", "Priority", "Why it waits", "Blocked by", "Estimated start", "Submitted"],
          rows,
          { testid: "queue-table", empty: "The queue is empty." },
        ),
      );
    },
  };
}
