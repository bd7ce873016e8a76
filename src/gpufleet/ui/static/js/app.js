// The console's shell: login, navigation (hash routes), live refresh and the pages.

import * as api from "./api.js";
import { fill, h } from "./dom.js";
import { advicePage } from "./pages/advice.js";
import { budgetsPage } from "./pages/budgets.js";
import { costPage } from "./pages/cost.js";
import { jobPage, jobsPage } from "./pages/jobs.js";
import { nodesPage } from "./pages/nodes.js";
import { proposalsPage } from "./pages/proposals.js";
import { queuePage } from "./pages/queue.js";

const PAGES = [
  { path: "queue", label: "Queue", page: queuePage },
  { path: "jobs", label: "Jobs", page: jobsPage },
  { path: "nodes", label: "Nodes", page: nodesPage },
  { path: "cost", label: "Cost", page: costPage },
  { path: "budgets", label: "Budgets", page: budgetsPage },
  { path: "advice", label: "Advice", page: advicePage },
  { path: "proposals", label: "Proposals", page: proposalsPage },
];

const root = document.getElementById("app");
const ctx = {
  me: null, // WhoAmI
  teams: [], // TeamOut visible to the token
  get isAdmin() {
    return this.me?.role === "admin";
  },
  get canWrite() {
    return this.me && this.me.role !== "viewer";
  },
  navigate(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  },
};

let current = null; // {view, timer, busy, path}
let loginMessage = "";

// -- login ------------------------------------------------------------------------------------------

function showLogin(message) {
  stopPage();
  const error = h("p", { class: "login-error", role: "alert", id: "login-error", hidden: !message }, message || "");
  const input = h("input", {
    id: "token",
    name: "token",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    placeholder: "gpf_…",
    required: true,
  });
  const button = h("button", { type: "submit", id: "login-button" }, "Sign in");
  const form = h(
    "form",
    { class: "login", id: "login-form" },
    h("h1", {}, "gpufleet"),
    h("p", { class: "muted" }, "Sign in with an API token (admin, member or viewer). It is kept in this tab only."),
    h("label", { for: "token" }, "Token"),
    input,
    button,
    error,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    button.disabled = true;
    error.hidden = true;
    try {
      ctx.me = await api.whoami(token);
      api.setToken(token);
      loginMessage = "";
      await start();
    } catch (e) {
      error.textContent =
        e instanceof api.ApiError && e.status === 401
          ? `That token was refused: ${e.message}`
          : `Could not sign in: ${e.message}`;
      error.hidden = false;
    } finally {
      button.disabled = false;
    }
  });
  fill(root, h("main", { class: "login-page" }, form));
  input.focus();
}

function signOut(message) {
  api.clearToken();
  ctx.me = null;
  loginMessage = message || "";
  showLogin(loginMessage);
}

api.setUnauthorizedHandler(() => {
  if (ctx.me) signOut("Your token was refused (expired or revoked): sign in again.");
});

// -- shell ------------------------------------------------------------------------------------------

const status = h("span", { class: "status", id: "live-status" }, "");
const main = h("main", { id: "page" });

function shell() {
  const nav = h(
    "nav",
    {},
    PAGES.map((p) => h("a", { href: `#/${p.path}`, id: `nav-${p.path}`, "data-path": p.path }, p.label)),
  );
  const who = h(
    "span",
    { class: "whoami", id: "whoami" },
    h("strong", {}, ctx.me.team),
    ` · ${ctx.me.role}`,
  );
  const out = h("button", { type: "button", class: "link", id: "sign-out", onclick: () => signOut("Signed out.") }, "Sign out");
  fill(root, h("header", {}, h("a", { class: "brand", href: "#/queue" }, "gpufleet"), nav, h("span", { class: "spacer" }), status, who, out), main);
}

async function start() {
  try {
    if (!ctx.me) ctx.me = await api.get("/v1/whoami");
    ctx.teams = await api.get("/v1/teams");
  } catch (e) {
    if (e instanceof api.ApiError && e.status === 401) {
      signOut("Your token was refused (expired or revoked): sign in again.");
      return;
    }
    if (!ctx.me) {
      showLogin(`The server did not answer: ${e.message}`);
      return;
    }
    ctx.teams = [];
  }
  shell();
  route();
}

// -- routing and live refresh ---------------------------------------------------------------------

function stopPage() {
  if (!current) return;
  clearTimeout(current.timer);
  current.view.unmount?.();
  current = null;
}

async function tick(cur) {
  if (current !== cur) return;
  clearTimeout(cur.timer);
  if (cur.busy) {
    cur.again = true; // asked again while a refresh is in flight: once more when it is done
    return;
  }
  if (!document.hidden) {
    cur.busy = true;
    try {
      await cur.view.refresh();
      status.textContent = `● live · updated ${new Date().toLocaleTimeString()}`;
      status.classList.remove("stale");
    } catch (e) {
      if (!(e instanceof api.ApiError && e.status === 401)) {
        status.textContent = `● not updated: ${e.message}`;
        status.classList.add("stale");
      }
    } finally {
      cur.busy = false;
    }
  }
  if (current !== cur) return;
  if (cur.again) {
    cur.again = false;
    await tick(cur);
    return;
  }
  cur.timer = setTimeout(() => tick(cur), cur.view.interval || 3000);
}

function route() {
  if (!ctx.me) return;
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const name = parts[0] || "queue";
  let def = PAGES.find((p) => p.path === name);
  let view;
  stopPage();
  const el = h("section", { class: "page", id: `page-${name}` });
  fill(main, el);
  if (name === "jobs" && parts[1]) {
    view = jobPage(el, ctx, parts[1]);
  } else {
    if (!def) def = PAGES[0];
    view = def.page(el, ctx);
  }
  for (const a of root.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.path === (def?.path || "jobs"));
  document.title = `${def ? def.label : "Job"} · gpufleet`;
  current = { view, timer: null, busy: false, again: false };
  view.refreshNow = () => {
    const cur = current;
    if (!cur || cur.view !== view) return Promise.resolve();
    return tick(cur);
  };
  tick(current);
}

window.addEventListener("hashchange", route);
document.addEventListener("visibilitychange", () => {
  if (!document.hidden && current) current.view.refreshNow?.();
});

if (api.getToken()) {
  start();
} else {
  showLogin(loginMessage);
}
