// Proposals: actions an agent proposed, pending until a person approves (which executes them) or
// rejects them; then the decided ones with the measured effect next to the estimate.
// Who may decide is the API's rule (docs/proposals.md): a job action, a member of the job's team or
// an admin; a quota or budget change, an admin; a viewer never; the proposing token never (the API
// refuses it with 403 self_approval, shown as a message).

import * as api from "../api.js";
import { ago, confirmButton, fill, h, money, pct, stateBadge, syncRows, when } from "../dom.js";
import { card } from "./nodes.js";

const JOB_ACTIONS = new Set(["resize", "change_gpu_type", "move_to_spot", "reschedule_off_peak", "cancel_idle_job"]);
const HOURS_PER_MONTH = 730.5; // as the API's measured $/month
const DECIDED_FILTERS = [
  ["", "all decided"],
  ["executed", "executed"],
  ["failed", "failed"],
  ["rejected", "rejected"],
  ["expired", "expired"],
];
const LIMIT = 200;

/** A value of params or of a change, as short text ({"*": 2} → "*=2", lists joined). */
function valueText(v) {
  if (v === null || v === undefined) return "none";
  if (Array.isArray(v)) return v.map(valueText).join(", ") || "none";
  if (typeof v === "object") return Object.entries(v).map(([k, x]) => `${k}=${valueText(x)}`).join(", ") || "none";
  return String(v);
}

function paramsText(params) {
  const items = Object.entries(params || {});
  return items.length ? items.map(([k, v]) => `${k}=${valueText(v)}`).join(" · ") : "";
}

/** "limit_usd: 5 → 4; …" for each key the change's before/after name. */
function changeText(change) {
  const before = change?.before || {};
  const after = change?.after || {};
  const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])];
  return keys.map((k) => `${k}: ${valueText(before[k])} → ${valueText(after[k])}`).join("; ");
}

function jobLink(id) {
  return h("a", { href: `#/jobs/${encodeURIComponent(id)}` }, id);
}

function targetCell(p) {
  return h(
    "td",
    { class: "nowrap" },
    JOB_ACTIONS.has(p.action) ? jobLink(p.target) : p.target,
    h("div", { class: "muted small" }, p.team ? `team ${p.team}` : "cluster-wide"),
  );
}

function actionCell(p) {
  const params = paramsText(p.params);
  return h("td", {}, h("code", {}, p.action), params ? h("div", { class: "muted small" }, params) : null);
}

function estimateCells(p) {
  const est = p.estimate;
  return [
    h("td", { class: "num", "data-field": "estimate" }, est ? `${money(est.monthly_savings_usd)}/mo` : "–"),
    h("td", { class: "num", "data-field": "confidence" }, est ? pct(100 * est.confidence) : "–"),
  ];
}

function rate(usdPerHour) {
  return [`${money(usdPerHour)}/h`, h("div", { class: "muted small" }, `${money(usdPerHour * HOURS_PER_MONTH)}/mo`)];
}

function notice() {
  const el = h("p", { class: "notice", role: "status", hidden: true, id: "proposals-notice" });
  const show = (msg, bad) => {
    el.textContent = msg;
    el.classList.toggle("bad", Boolean(bad));
    el.hidden = false;
  };
  return [el, show];
}

export function proposalsPage(el, ctx) {
  const decidedSel = h("select", { id: "proposals-state" }, DECIDED_FILTERS.map(([v, l]) => h("option", { value: v }, l)));
  const [msg, show] = notice();
  const cards = h("div", { class: "cards", id: "proposals-cards" });
  const pendingBody = h("tbody", {});
  const decidedBody = h("tbody", {});
  const pendingHeaders = [
    "Proposal",
    "Action",
    "Target",
    "Rationale",
    { label: "Est. saving", cls: "num" },
    { label: "Confidence", cls: "num" },
    "Proposed by",
    "Age",
    "",
  ];
  const decidedHeaders = [
    "Proposal",
    "Action",
    "Target",
    "State",
    "Decided by",
    "Reason and result",
    { label: "Est. saving", cls: "num" },
    { label: "Before", cls: "num" },
    { label: "After", cls: "num" },
    { label: "Measured saving", cls: "num" },
    { label: "Estimate error", cls: "num" },
  ];
  const thead = (headers) => h("thead", {}, h("tr", {}, headers.map((x) => h("th", { class: x.cls }, x.label ?? x))));
  const names = new Map(); // token id → name (admins read /v1/tokens; others know only their own)
  let view;

  const who = (id) => {
    if (!id) return "–";
    const mine = id === ctx.me.token_id;
    const name = names.get(id);
    return h("span", { class: "who", title: id }, mine ? "you" : name || id, mine || name ? h("small", { class: "muted" }, ` ${id}`) : null);
  };
  // the API's rule, by role; the team is the API's to check (a member sees only its team's)
  const mayDecide = (p) => ctx.isAdmin || (ctx.canWrite && JOB_ACTIONS.has(p.action));

  const decide = async (p, verb, body) => {
    try {
      const out = await api.post(`/v1/proposals/${encodeURIComponent(p.id)}/${verb}`, body);
      if (out.state === "executed") show(`Approved ${p.id}: executed — ${out.result}`, false);
      else if (out.state === "failed") show(`Approved ${p.id}, but its action failed (nothing was kept): ${out.result}`, true);
      else show(`Rejected ${p.id}${out.reason ? `: ${out.reason}` : ""}.`, false);
    } catch (e) {
      const what = verb === "approve" ? "Approval" : "Rejection";
      show(`${what} of ${p.id} refused: ${e instanceof api.ApiError ? e.explain() : e.message}`, true);
    }
    await view.refreshNow();
  };

  // one set of controls per pending proposal, moved into its row when the row is redrawn (an armed
  // button or a half-typed reason survives the live refresh)
  const controls = new Map();
  const controlsOf = (p) => {
    if (controls.has(p.id)) return controls.get(p.id);
    const approve = confirmButton("Approve", "Really approve?", () => decide(p, "approve", {}), {
      class: "approve",
      "data-action": "approve",
    });
    const reason = h("input", {
      type: "text",
      class: "reason-input",
      "data-field": "reason",
      maxlength: 2000,
      size: 22,
      placeholder: "why not (required)",
      "aria-label": "reason for rejecting",
      hidden: true,
    });
    const reject = h("button", { type: "button", class: "danger", "data-action": "reject" }, "Reject");
    const keep = h("button", { type: "button", "data-action": "keep", hidden: true }, "Keep");
    let armed = false;
    const disarm = () => {
      armed = false;
      reason.hidden = true;
      keep.hidden = true;
      reject.textContent = "Reject";
      reject.classList.remove("armed");
    };
    reject.addEventListener("click", async () => {
      if (!armed) {
        armed = true; // the first click asks for the reason; the second rejects with it
        reason.hidden = false;
        keep.hidden = false;
        reject.textContent = "Really reject?";
        reject.classList.add("armed");
        reason.focus();
        return;
      }
      const why = reason.value.trim();
      if (!why) {
        show(`A rejection of ${p.id} needs a reason.`, true);
        reason.focus();
        return;
      }
      reject.disabled = true;
      reject.textContent = "…";
      try {
        await decide(p, "reject", { reason: why });
      } finally {
        reject.disabled = false;
        disarm();
      }
    });
    keep.addEventListener("click", disarm);
    reason.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter") reject.click();
      if (ev.key === "Escape") disarm();
    });
    const box = h("span", { class: "decide" }, approve, " ", reason, " ", reject, " ", keep);
    controls.set(p.id, box);
    return box;
  };

  const renderPending = (p) =>
    h(
      "tr",
      { "data-proposal": p.id, "data-action": p.action },
      h("td", { class: "nowrap" }, h("code", {}, p.id)),
      actionCell(p),
      targetCell(p),
      h(
        "td",
        { class: "reason", "data-field": "rationale" },
        p.rationale || "–",
        p.estimate?.basis ? h("div", { class: "muted small" }, `basis: ${p.estimate.basis}`) : null,
        changeText(p.change?.proposed)
          ? h("div", { class: "small", "data-field": "change" }, h("span", { class: "muted" }, "would change "), changeText(p.change.proposed))
          : null,
      ),
      estimateCells(p),
      h("td", { "data-field": "proposed-by" }, who(p.proposed_by)),
      h("td", { title: p.created_at }, ago(p.created_at), h("div", { class: "muted small" }, `expires ${ago(p.expires_at)}`)),
      h("td", { class: "actions" }, mayDecide(p) ? controlsOf(p) : null),
    );

  const measuredCells = (p) => {
    const m = p.measured;
    if (m) {
      return [
        h("td", { class: "num", "data-field": "before" }, rate(m.before_usd_per_hour)),
        h("td", { class: "num", "data-field": "after" }, rate(m.after_usd_per_hour)),
        h(
          "td",
          { class: "num", "data-field": "measured", title: `measured ${when(m.measured_at)} over ${m.window_s} s either side` },
          `${money(m.monthly_savings_usd)}/mo`,
          m.note ? h("div", { class: "muted small" }, m.note) : null,
        ),
        h("td", { class: "num", "data-field": "error" }, p.estimate_error_usd === null ? "–" : `${money(p.estimate_error_usd)}/mo`),
      ];
    }
    const why = p.state === "executed" && p.effect_due_at ? `measured after ${when(p.effect_due_at)}` : "nothing to measure";
    return [h("td", { class: "muted small", colspan: 4, "data-field": "measured" }, why)];
  };

  const renderDecided = (p) =>
    h(
      "tr",
      { "data-proposal": p.id, "data-state": p.state },
      h("td", { class: "nowrap" }, h("code", {}, p.id), h("div", { class: "muted small", title: p.created_at }, `proposed ${ago(p.created_at)}`)),
      actionCell(p),
      targetCell(p),
      h("td", {}, stateBadge(p.state)),
      h("td", { "data-field": "decided-by" }, who(p.decided_by), p.decided_at ? h("div", { class: "muted small" }, when(p.decided_at)) : null),
      h(
        "td",
        { class: "reason", "data-field": "result" },
        p.reason ? h("div", {}, h("span", { class: "muted" }, "reason: "), p.reason) : null,
        p.result ? h("div", {}, p.result) : null,
        p.result_job_id ? h("div", { class: "small" }, "new job: ", jobLink(p.result_job_id)) : null,
      ),
      h("td", { class: "num", "data-field": "estimate" }, p.estimate ? `${money(p.estimate.monthly_savings_usd)}/mo` : "–"),
      measuredCells(p),
    );

  const emptyRow = (headers, text) => () => h("tr", {}, h("td", { colspan: headers.length, class: "empty" }, text));

  fill(
    el,
    h("h2", {}, "Proposals"),
    h(
      "p",
      { class: "muted" },
      !ctx.canWrite
        ? "A viewer token reads proposals; approving or rejecting them takes a member (job actions) or an admin."
        : ctx.isAdmin
          ? "Actions proposed by agents and scripts. Approving executes the action at once; the token that proposed it cannot approve it."
          : "Your team's proposals. A member approves job actions; quota and budget changes take an admin. The token that proposed an action cannot approve it.",
    ),
    cards,
    msg,
    h("h3", {}, "Pending"),
    h("table", { class: "data proposals", id: "proposals-pending", "data-testid": "proposals-pending" }, thead(pendingHeaders), pendingBody),
    h("h3", {}, "Decided"),
    h("div", { class: "toolbar" }, h("label", {}, "Show ", decidedSel)),
    h("table", { class: "data proposals", id: "proposals-decided", "data-testid": "proposals-decided" }, thead(decidedHeaders), decidedBody),
  );

  let asked = 0; // bumped by every change of the filter: a refresh begun before one is not drawn
  view = {
    interval: 5000,
    async refresh() {
      const mine = asked;
      const st = decidedSel.value;
      const [pending, rest] = await Promise.all([
        api.get("/v1/proposals", { state: "pending", limit: LIMIT }),
        api.get("/v1/proposals", { state: st || undefined, limit: LIMIT }),
      ]);
      if (mine !== asked) return;
      const decided = rest.filter((p) => p.state !== "pending");
      if (ctx.isAdmin) {
        const ids = [...pending, ...decided].flatMap((p) => [p.proposed_by, p.decided_by]).filter(Boolean);
        if (ids.some((id) => !names.has(id))) {
          try {
            for (const t of await api.get("/v1/tokens")) names.set(t.id, t.name);
          } catch {
            // names are a nicety: the ids stand in
          }
        }
      }
      const live = new Set(pending.map((p) => p.id));
      for (const id of controls.keys()) if (!live.has(id)) controls.delete(id);
      const named = (p) => ({ ...p, _names: [names.get(p.proposed_by) || "", names.get(p.decided_by) || ""] });
      syncRows(pendingBody, pending.map(named), (p) => p.id, renderPending, emptyRow(pendingHeaders, "No proposal is waiting for a decision."));
      syncRows(decidedBody, decided.map(named), (p) => p.id, renderDecided, emptyRow(decidedHeaders, "No decided proposal."));
      const estimated = pending.reduce((a, p) => a + (p.estimate?.monthly_savings_usd || 0), 0);
      const measured = decided.filter((p) => p.measured);
      fill(
        cards,
        card("Pending", String(pending.length), pending.length ? `${money(estimated)}/mo estimated` : "nothing to decide"),
        card(
          "Executed",
          String(decided.filter((p) => p.state === "executed").length),
          `${decided.filter((p) => p.state === "rejected").length} rejected, ${decided.filter((p) => p.state === "failed").length} failed, ${decided.filter((p) => p.state === "expired").length} expired`,
        ),
        card(
          "Measured saving",
          measured.length ? `${money(measured.reduce((a, p) => a + p.measured.monthly_savings_usd, 0))}/mo` : "–",
          measured.length
            ? `estimated ${money(measured.reduce((a, p) => a + (p.estimate?.monthly_savings_usd || 0), 0))}/mo for the same ${measured.length}`
            : "none measured yet",
        ),
      );
    },
  };
  decidedSel.addEventListener("change", () => {
    asked++;
    view.refreshNow();
  });
  return view;
}
