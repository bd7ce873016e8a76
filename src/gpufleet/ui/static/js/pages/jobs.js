// Jobs: the list (with a submit form and cancel buttons) and one job's detail, events and logs.

import * as api from "../api.js";
import {
  ago,
  confirmButton,
  duration,
  fill,
  h,
  money,
  randomKey,
  shape,
  splitWords,
  stateBadge,
  syncRows,
  table,
  when,
} from "../dom.js";

const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"]);
const ALL_CLASSES = ["background", "low", "normal", "high", "urgent"];
const STATE_FILTERS = [
  ["", "all states"],
  ["active", "active (waiting or running)"],
  ["PENDING", "pending"],
  ["RUNNING", "running"],
  ["PREEMPTED", "preempted"],
  ["SUCCEEDED", "succeeded"],
  ["FAILED", "failed"],
  ["CANCELLED", "cancelled"],
  ["TIMED_OUT", "timed out"],
];
const LIMIT = 200;

function jobLink(id) {
  return h("a", { href: `#/jobs/${encodeURIComponent(id)}` }, id);
}

async function cancel(id, report) {
  try {
    const out = await api.post(`/v1/jobs/${encodeURIComponent(id)}/cancel`, undefined);
    report(`Cancel of ${id}: ${out.state === "CANCELLED" ? "cancelled" : "stopping"}.`, false);
  } catch (e) {
    report(`Cancel of ${id} failed: ${e instanceof api.ApiError ? e.explain() : e.message}`, true);
  }
}

function notice() {
  const el = h("p", { class: "notice", role: "status", hidden: true });
  const show = (msg, bad) => {
    el.textContent = msg;
    el.classList.toggle("bad", Boolean(bad));
    el.hidden = false;
  };
  return [el, show];
}

// -- the submit form ------------------------------------------------------------------------------

function submitForm(ctx, onSubmitted) {
  const teams = ctx.teams.length ? ctx.teams : [{ name: ctx.me.team, priority_classes: ["background", "low", "normal"] }];
  const team = h(
    "select",
    { id: "submit-team", name: "team" },
    teams.map((t) => h("option", { value: t.name, selected: t.name === ctx.me.team }, t.name)),
  );
  const priority = h("select", { id: "submit-priority", name: "priority" });
  const setClasses = () => {
    const t = teams.find((x) => x.name === team.value);
    const classes = ctx.isAdmin ? ALL_CLASSES : t?.priority_classes || ["background", "low", "normal"];
    const was = priority.value || "normal";
    fill(priority, classes.map((c) => h("option", { value: c, selected: c === was }, c)));
  };
  team.addEventListener("change", setClasses);
  setClasses();
  const kind = h(
    "select",
    { id: "submit-gpu-kind", name: "gpu_kind" },
    h("option", { value: "gpus" }, "whole GPUs"),
    h("option", { value: "milli" }, "a fraction of one GPU (milli)"),
    h("option", { value: "mig" }, "a MIG slice"),
    h("option", { value: "none" }, "no GPU"),
  );
  const amount = h("input", { id: "submit-gpus", name: "gpus", type: "text", value: "1", size: 8, inputmode: "numeric" });
  const command = h("textarea", {
    id: "submit-command",
    name: "command",
    rows: 2,
    required: true,
    placeholder: "python train.py --epochs 3",
    spellcheck: "false",
  });
  const shell = h("input", { id: "submit-shell", type: "checkbox", checked: true });
  const name = h("input", { id: "submit-name", name: "name", type: "text", maxlength: 255, placeholder: "optional" });
  const project = h("input", { id: "submit-project", name: "project", type: "text", maxlength: 255, placeholder: "optional" });
  const preemptible = h("input", { id: "submit-preemptible", name: "preemptible", type: "checkbox" });
  const runtime = h("input", { id: "submit-runtime", name: "runtime", type: "text", size: 8, placeholder: "minutes" });
  const [msg, show] = notice();
  msg.id = "submit-result";
  const button = h("button", { type: "submit", id: "submit-button" }, "Submit");
  const field = (label, input, hint) => h("label", { class: "field" }, h("span", {}, label), input, hint ? h("small", { class: "muted" }, hint) : null);
  const form = h(
    "form",
    { class: "submit-form", id: "submit-form" },
    h("div", { class: "row" }, field("Command", command, null), h("label", { class: "check" }, shell, " run with sh -c")),
    h(
      "div",
      { class: "row" },
      field("Name", name),
      field("Team", team),
      field("Project", project),
      field("Priority", priority),
    ),
    h(
      "div",
      { class: "row" },
      field("GPUs", kind),
      field("How many / milli / profile", amount, "e.g. 2, 500 or 1g.10gb"),
      field("Estimated runtime", runtime, "optional, minutes"),
      h("label", { class: "check" }, preemptible, " preemptible"),
    ),
    h("div", { class: "row" }, button, msg),
  );
  kind.addEventListener("change", () => {
    amount.disabled = kind.value === "none";
    amount.value = { gpus: "1", milli: "500", mig: "1g.10gb", none: "" }[kind.value];
  });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let body;
    try {
      const text = command.value.trim();
      if (!text) throw new Error("the command is empty");
      body = {
        command: shell.checked ? ["sh", "-c", text] : splitWords(text),
        team: team.value,
        priority: priority.value,
        preemptible: preemptible.checked,
      };
      if (name.value.trim()) body.name = name.value.trim();
      if (project.value.trim()) body.project = project.value.trim();
      const amt = amount.value.trim();
      if (kind.value === "gpus") body.gpus = Number.parseInt(amt || "0", 10);
      if (kind.value === "milli") body.gpu_milli = Number.parseInt(amt, 10);
      if (kind.value === "mig") body.mig = amt;
      if ((kind.value === "gpus" || kind.value === "milli") && !Number.isInteger(body.gpus ?? body.gpu_milli)) {
        throw new Error("the GPU amount must be a whole number");
      }
      if (runtime.value.trim()) {
        const m = Number(runtime.value.trim());
        if (!(m > 0)) throw new Error("the estimated runtime must be a positive number of minutes");
        body.estimated_runtime_s = m * 60;
      }
    } catch (e) {
      show(e.message, true);
      return;
    }
    button.disabled = true;
    try {
      const job = await api.post("/v1/jobs", body, { headers: { "Idempotency-Key": randomKey() } });
      fill(msg, "Submitted ", jobLink(job.id), ` (${job.state}).`);
      msg.classList.remove("bad");
      msg.hidden = false;
      command.value = "";
      name.value = "";
      await onSubmitted(job);
    } catch (e) {
      show(`Not submitted: ${e instanceof api.ApiError ? e.explain() : e.message}`, true);
    } finally {
      button.disabled = false;
    }
  });
  return h("details", { class: "panel", id: "submit-panel" }, h("summary", {}, "Submit a job"), form);
}

// -- the list -------------------------------------------------------------------------------------

export function jobsPage(el, ctx) {
  const stateSel = h("select", { id: "jobs-state" }, STATE_FILTERS.map(([v, l]) => h("option", { value: v }, l)));
  const teamSel = ctx.isAdmin
    ? h("select", { id: "jobs-team" }, h("option", { value: "" }, "all teams"), ctx.teams.map((t) => h("option", { value: t.name }, t.name)))
    : null;
  const [msg, show] = notice();
  msg.id = "jobs-notice";
  const tbody = h("tbody", {});
  const info = h("p", { class: "muted", id: "jobs-count" }, "Loading…");
  const headers = ["Job", "Name", "Team", "State", "Resources", "Priority", "Submitted", "Ran", ""];
  let view;
  const render = (j) =>
    h(
      "tr",
      { "data-job": j.id, "data-name": j.name },
      h("td", {}, jobLink(j.id)),
      h("td", { class: "job-name" }, j.name || "–"),
      h("td", {}, j.team),
      h("td", {}, stateBadge(j.state), j.cancel_requested && !TERMINAL.has(j.state) ? h("small", { class: "muted" }, " stopping") : null),
      h("td", {}, shape(j), j.preemptible ? h("small", { class: "muted" }, " · preemptible") : null),
      h("td", {}, j.priority),
      h("td", { title: j.submitted_at }, ago(j.submitted_at)),
      h("td", {}, j.run_seconds ? duration(j.run_seconds) : "–"),
      h(
        "td",
        { class: "actions" },
        ctx.canWrite && !TERMINAL.has(j.state) && !j.cancel_requested ? cancelButton(j.id) : null,
      ),
    );
  const empty = () => h("tr", {}, h("td", { colspan: headers.length, class: "empty" }, "No jobs."));
  // one cancel button per job, moved into its row when the row is redrawn (an armed one stays armed)
  const buttons = new Map();
  const cancelButton = (id) => {
    if (!buttons.has(id)) {
      buttons.set(
        id,
        confirmButton("Cancel", "Really cancel?", async () => {
          await cancel(id, show);
          await view.refreshNow();
        }, { "data-action": "cancel" }),
      );
    }
    return buttons.get(id);
  };
  fill(
    el,
    h("h2", {}, "Jobs"),
    ctx.canWrite ? submitForm(ctx, () => view.refreshNow()) : h("p", { class: "muted" }, "A viewer token can read jobs, not submit or cancel them."),
    h("div", { class: "toolbar" }, h("label", {}, "State ", stateSel), teamSel ? h("label", {}, "Team ", teamSel) : null, info),
    msg,
    h("table", { class: "data", "data-testid": "jobs-table", id: "jobs-table" }, h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))), tbody),
  );
  let asked = 0; // bumped by every change of the filters: a refresh begun before one is not drawn
  view = {
    interval: 3000,
    async refresh() {
      const mine = asked;
      const st = stateSel.value;
      const params = { limit: LIMIT, team: teamSel?.value || undefined };
      params.state = st === "active" ? ["PENDING", "ADMITTED", "RUNNING", "PREEMPTED"] : st || undefined;
      const page = await api.get("/v1/jobs", params);
      if (mine !== asked) return;
      const live = new Set(page.items.filter((j) => !TERMINAL.has(j.state) && !j.cancel_requested).map((j) => j.id));
      for (const id of buttons.keys()) if (!live.has(id)) buttons.delete(id);
      syncRows(tbody, page.items, (j) => j.id, render, empty);
      info.textContent = page.next_cursor
        ? `The newest ${page.items.length} shown; filter by state or team to see others.`
        : `${page.items.length} job${page.items.length === 1 ? "" : "s"}.`;
    },
  };
  for (const c of [stateSel, teamSel]) {
    c?.addEventListener("change", () => {
      asked++;
      view.refreshNow();
    });
  }
  return view;
}

// -- one job --------------------------------------------------------------------------------------

const MAX_LOG_CHARS = 2_000_000;

export function jobPage(el, ctx, id) {
  const title = h("h2", {}, "Job ", h("code", {}, id));
  const badge = h("span", { id: "job-state" });
  const actions = h("span", { class: "actions" });
  const [msg, show] = notice();
  msg.id = "job-notice";
  const facts = h("dl", { class: "facts", id: "job-facts" });
  const forecast = h("div", { id: "job-forecast" });
  const events = h("div", { id: "job-events" });
  const log = h("pre", { class: "log", id: "job-log", tabindex: 0 });
  const logState = h("span", { class: "muted", id: "log-state" }, "");
  const follow = h("input", { type: "checkbox", id: "log-follow", checked: true });
  let offset = 0;
  let stream = null; // AbortController of the follow stream
  let streamDone = false;
  let terminal = false;
  let logChars = 0;

  const addText = (text, bytes) => {
    if (!text && !bytes) return;
    offset += bytes;
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.append(document.createTextNode(text));
    logChars += text.length;
    while (logChars > MAX_LOG_CHARS && log.firstChild) {
      logChars -= log.firstChild.textContent.length;
      log.firstChild.remove();
    }
    if (atBottom) log.scrollTop = log.scrollHeight;
  };
  const startLogs = () => {
    if (stream || streamDone) return;
    if (!follow.checked) return;
    logState.textContent = terminal ? "" : "following…";
    stream = api.followLogs(
      id,
      offset,
      addText,
      () => {
        stream = null;
        streamDone = terminal;
        logState.textContent = terminal ? "end of log" : "stream closed";
      },
      (e) => {
        stream = null;
        logState.textContent = `log: ${e.message}`;
      },
    );
  };
  const stopLogs = () => {
    stream?.abort();
    stream = null;
  };
  follow.addEventListener("change", () => {
    if (follow.checked) startLogs();
    else {
      stopLogs();
      logState.textContent = "paused";
    }
  });

  fill(
    el,
    h("p", {}, h("a", { href: "#/jobs" }, "← all jobs")),
    h("div", { class: "title-row" }, title, badge, actions),
    msg,
    facts,
    forecast,
    h("h3", {}, "Events"),
    events,
    h("h3", {}, "Logs ", h("label", { class: "check small" }, follow, " follow"), " ", logState),
    log,
  );

  const fact = (k, v) => [h("dt", {}, k), h("dd", {}, v ?? "–")];
  let lastSig = "";
  let endedCost = null; // the cost line of an ended job, once read
  const view = {
    interval: 3000,
    async refresh() {
      let job;
      try {
        job = await api.get(`/v1/jobs/${encodeURIComponent(id)}`);
      } catch (e) {
        if (e instanceof api.ApiError && e.status === 404) {
          fill(facts, h("p", { class: "notice bad" }, `No job '${id}' (or not one this token may see).`));
          return;
        }
        throw e;
      }
      const evs = await api.get(`/v1/jobs/${encodeURIComponent(id)}/events`);
      terminal = TERMINAL.has(job.state);
      fill(title, job.name || "Job", " ", h("code", {}, job.id));
      fill(badge, stateBadge(job.state), job.cancel_requested && !terminal ? h("small", { class: "muted" }, " stopping") : null);
      const sig = JSON.stringify([job.state, job.cancel_requested]);
      if (sig !== lastSig) {
        lastSig = sig;
        fill(
          actions,
          ctx.canWrite && !terminal && !job.cancel_requested
            ? confirmButton("Cancel job", "Really cancel?", async () => {
                await cancel(job.id, show);
                await view.refreshNow();
              }, { id: "job-cancel" })
            : null,
        );
      }
      const placement = job.placement
        .map((p) => (p.gpus.length ? `${p.node} GPU ${p.gpus.join(", ")}${p.milli < 1000 ? ` (${p.milli / 10}% of it)` : ""}` : `${p.node} (no GPU)`))
        .join("; ");
      fill(
        facts,
        fact("Team", job.team),
        fact("Project / namespace", `${job.project || "–"} / ${job.namespace}`),
        fact("Priority", job.priority),
        fact("Resources", `${shape(job)}${job.preemptible ? " · preemptible" : ""}${job.gpu_types.length ? ` · ${job.gpu_types.join(", ")}` : ""}`),
        fact("Command", h("code", { class: "command" }, job.command.join(" "))),
        fact("State", `${job.state}${job.reason ? ` — ${job.reason}` : ""}`),
        fact("Submitted", when(job.submitted_at)),
        fact("Started", when(job.started_at)),
        fact("Ended", when(job.ended_at)),
        fact("Ran", job.run_seconds ? duration(job.run_seconds) : "–"),
        fact("Runs / restarts / preemptions", `${job.run} / ${job.restarts} / ${job.preemptions}`),
        fact("Exit code", job.exit_code === null ? "–" : String(job.exit_code)),
        fact("Placement", placement || "–"),
        Object.keys(job.labels).length ? fact("Labels", Object.entries(job.labels).map(([k, v]) => `${k}=${v}`).join(", ")) : null,
      );
      if (job.state === "RUNNING" || job.state === "ADMITTED") {
        try {
          const f = await api.get(`/v1/jobs/${encodeURIComponent(id)}/forecast`);
          const rest =
            f.remaining_usd === null
              ? "no estimate of the rest (report progress or give an estimated runtime)"
              : `${money(f.remaining_usd)} more (${money(f.remaining_usd_low)}–${f.remaining_usd_high === null ? "?" : money(f.remaining_usd_high)}), ${f.remaining_s === null ? "" : `about ${duration(f.remaining_s)} left`}`;
          fill(forecast, h("p", { class: "panel" }, h("strong", {}, "Cost: "), `${money(f.spent_usd)} spent at ${money(f.cost_rate_usd_per_hour)}/h; ${rest}.`));
        } catch {
          fill(forecast);
        }
      } else if (terminal) {
        // an ended job's cost is final: what the ledger charged its runs, read once
        if (endedCost === null) {
          try {
            const f = await api.get(`/v1/jobs/${encodeURIComponent(id)}/forecast`);
            endedCost = h("p", { class: "panel" }, h("strong", {}, "Cost: "), `${money(f.spent_usd)} (from the ledger).`);
          } catch {
            endedCost = null;
          }
        }
        fill(forecast, endedCost);
      } else {
        fill(forecast);
      }
      fill(
        events,
        table(
          ["Time", "From", "To", "Why"],
          evs.map((e) => h("tr", {}, h("td", {}, when(e.time)), h("td", {}, e.old || "–"), h("td", {}, stateBadge(e.new)), h("td", {}, e.reason))),
          { testid: "events-table", empty: "No events." },
        ),
      );
      startLogs();
    },
    unmount() {
      stopLogs();
    },
  };
  return view;
}
