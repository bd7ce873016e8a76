// Nodes: each node's shape and price, and a map of its GPUs — who holds each one, whole, in
// fractions or in MIG slices (the per-GPU `gpus` field of /v1/nodes).

import * as api from "../api.js";
import { colours, fill, h, money, num } from "../dom.js";

const MIG_SLICES = 8;

function shareLabel(sh) {
  return sh.job_id ?? "another team's job";
}

function segment(sh, widthPct, text, paint) {
  const seg = h(
    "a",
    {
      class: ["seg", !sh.job_id && "hidden-job"],
      href: sh.job_id ? `#/jobs/${encodeURIComponent(sh.job_id)}` : null,
      title: `${shareLabel(sh)}${sh.team ? ` (${sh.team})` : ""}: ${sh.mig ? `MIG ${sh.mig}` : `${sh.milli / 10}% of the GPU`}`,
      "data-job": sh.job_id || "",
    },
    text,
  );
  seg.style.width = `${widthPct}%`;
  if (sh.job_id) seg.style.background = paint.get(sh.job_id);
  return seg;
}

function gpuTile(g, sharing, paint) {
  const migShares = g.shares.filter((sh) => sh.mig_mask);
  let bar;
  if (migShares.length || sharing === "mig") {
    // eight memory slices; a run of slices one job holds is one segment, named by its profile
    const cells = [];
    for (let i = 0; i < MIG_SLICES; ) {
      const sh = migShares.find((x) => (x.mig_mask >> i) & 1);
      let j = i + 1;
      while (j < MIG_SLICES && (sh ? (sh.mig_mask >> j) & 1 : !migShares.some((x) => (x.mig_mask >> j) & 1))) j++;
      const width = (100 * (j - i)) / MIG_SLICES;
      if (sh) cells.push(segment(sh, width, sh.mig || "MIG", paint));
      else for (let k = i; k < j; k++) cells.push(freeCell(100 / MIG_SLICES));
      i = j;
    }
    bar = h("div", { class: "gpu-bar mig" }, cells);
  } else {
    const segs = g.shares.map((sh) =>
      segment(sh, Math.min(100, sh.milli / 10), sh.milli >= 1000 ? shareLabel(sh) : `${sh.milli / 10}%`, paint),
    );
    const free = Math.max(0, 1000 - g.allocated_milli);
    if (free > 0) segs.push(freeCell(free / 10));
    bar = h("div", { class: "gpu-bar" }, segs);
  }
  const state = g.allocated_milli >= 1000 ? "full" : g.allocated_milli > 0 ? "partial" : "free";
  return h(
    "div",
    { class: ["gpu", `gpu-${state}`], "data-gpu": String(g.index) },
    h("div", { class: "gpu-head" }, h("span", {}, `GPU ${g.index}`), h("span", { class: "muted" }, `${g.allocated_milli / 10}%`)),
    bar,
  );
}

function freeCell(widthPct) {
  const c = h("span", { class: "seg free", title: "free" });
  c.style.width = `${widthPct}%`;
  return c;
}

/** The jobs holding a node's GPUs, each with its colour, what it holds and where. */
function holders(n, paint) {
  const by = new Map();
  for (const g of n.gpus) {
    for (const sh of g.shares) {
      const k = sh.job_id ?? "";
      const it = by.get(k) || { sh, gpus: [], milli: 0 };
      it.gpus.push(g.index);
      it.milli += sh.milli;
      by.set(k, it);
    }
  }
  if (!by.size) return h("p", { class: "muted small" }, "No job holds a GPU here.");
  return h(
    "ul",
    { class: "holders" },
    [...by.values()].map(({ sh, gpus, milli }) => {
      const sw = h("span", { class: ["swatch", !sh.job_id && "hidden-job"] });
      if (sh.job_id) sw.style.background = paint.get(sh.job_id);
      const what = sh.mig ? `MIG ${sh.mig}` : milli >= 1000 * gpus.length ? `${gpus.length} GPU${gpus.length > 1 ? "s" : ""}` : `${num(milli / 1000, 3)} GPU`;
      return h(
        "li",
        {},
        sw,
        sh.job_id ? h("a", { href: `#/jobs/${encodeURIComponent(sh.job_id)}` }, sh.job_id) : h("span", { class: "muted" }, "other teams' jobs"),
        sh.team ? h("span", { class: "muted" }, ` (${sh.team})`) : null,
        ` — ${sh.job_id ? what : `${num(milli / 1000, 3)} GPU in all`} on GPU ${gpus.join(", ")}`,
      );
    }),
  );
}

export function nodesPage(el, ctx) {
  const summary = h("div", { class: "cards", id: "nodes-summary" });
  const list = h("div", { id: "nodes-list" });
  fill(
    el,
    h("h2", {}, "Nodes"),
    h(
      "p",
      { class: "muted" },
      "Each GPU's allocation: whole GPUs, fractions of a shared GPU, or MIG slices (eight memory slices per GPU). ",
      ctx.isAdmin ? "" : "Other teams' jobs are shown without their ids.",
    ),
    summary,
    list,
  );
  return {
    interval: 3000,
    async refresh() {
      const nodes = await api.get("/v1/nodes");
      const gpus = nodes.reduce((a, n) => a + n.gpu_count, 0);
      const held = nodes.reduce((a, n) => a + n.allocated_gpus, 0);
      const hourly = nodes.reduce((a, n) => a + n.hourly_price_usd, 0);
      // one colour per job across the whole map: two jobs never share one
      const paint = colours(nodes.flatMap((n) => (n.gpus || []).flatMap((g) => g.shares.map((sh) => sh.job_id).filter(Boolean))));
      fill(
        summary,
        card("Nodes", String(nodes.length)),
        card("GPUs", String(gpus)),
        card("Allocated", `${num(held, 2)} GPUs`, gpus ? `${Math.round((100 * held) / gpus)}%` : ""),
        card("Cost now", `${money(hourly)}/h`, gpus ? `${money(hourly * Math.max(0, 1 - held / gpus))}/h of it idle` : ""),
      );
      fill(
        list,
        nodes.length ? null : h("p", { class: "empty" }, "No nodes."),
        nodes.map((n) =>
          h(
            "article",
            { class: "node panel", "data-node": n.name },
            h(
              "header",
              {},
              h("h3", {}, n.name),
              h("span", { class: ["badge", n.state === "ready" ? "ok" : "warn"] }, n.state),
              h("span", { class: "muted" }, `${n.gpu_count}× ${n.gpu_model || "no GPU"} · ${n.sharing} · ${n.pool} · ${n.capacity_type} · ${money(n.hourly_price_usd)}/h`),
              h("span", { class: "spacer" }),
              h("span", {}, `${num(n.allocated_gpus, 3)} / ${n.gpu_count} GPUs held by ${n.running_jobs} job${n.running_jobs === 1 ? "" : "s"}`),
            ),
            n.gpus && n.gpus.length
              ? [h("div", { class: "gpu-map" }, n.gpus.map((g) => gpuTile(g, n.sharing, paint))), holders(n, paint)]
              : h("p", { class: "muted" }, n.gpu_count ? "This server does not report per-GPU allocation." : "No GPUs."),
          ),
        ),
      );
    },
  };
}

export function card(label, value, note) {
  return h("div", { class: "card" }, h("div", { class: "card-label" }, label), h("div", { class: "card-value" }, value), note ? h("div", { class: "muted" }, note) : null);
}
