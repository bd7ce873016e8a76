// DOM helpers. Every string from the API reaches the page as a text node or an attribute value set
// through the DOM: nothing is ever parsed as HTML (no HTML-string property or method is used anywhere).

const SVG_NS = "http://www.w3.org/2000/svg";

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") {
      el.addEventListener(k.slice(2), v);
    } else if (k === "class") {
      el.setAttribute("class", Array.isArray(v) ? v.filter(Boolean).join(" ") : String(v));
    } else if (k === "dataset") {
      Object.assign(el.dataset, v);
    } else if (k === "value" && "value" in el) {
      el.value = String(v);
    } else if (k === "checked" || k === "disabled" || k === "selected") {
      el[k] = Boolean(v);
    } else if (k === "href" && typeof v === "string" && /^\s*javascript:/i.test(v)) {
      continue; // never a script URL
    } else {
      el.setAttribute(k, v === true ? "" : String(v));
    }
  }
}

/** h("td", {class: "x"}, "text", child, ...): an HTML element with text children. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/** s("rect", {x: 1}): an SVG element (attributes set with setAttribute, children as text nodes). */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/** Replace the children of `el` with `children`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function table(headers, rows, opts = {}) {
  const thead = h("thead", {}, h("tr", {}, headers.map((x) => h("th", { class: x.cls }, x.label ?? x))));
  const body = rows.length
    ? rows
    : [h("tr", {}, h("td", { colspan: headers.length, class: "empty" }, opts.empty || "nothing here"))];
  return h("table", { class: ["data", opts.cls], "data-testid": opts.testid }, thead, h("tbody", {}, body));
}

// -- formatting -------------------------------------------------------------------------------------

export function money(x, digits = 2) {
  const n = Number(x);
  if (!Number.isFinite(n)) return "–";
  const abs = Math.abs(n) < 5e-5 ? 0 : Math.abs(n); // float dust is $0.00, not −$0.0000
  const d = abs > 0 && abs < 0.01 ? 4 : digits;
  return (n < 0 && abs > 0 ? "−$" : "$") + abs.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
}

export function num(x, digits = 2) {
  const n = Number(x);
  return Number.isFinite(n) ? n.toLocaleString("en-US", { maximumFractionDigits: digits }) : "–";
}

/** Hours (GPU-hours): small amounts keep two significant digits instead of rounding to 0. */
export function hrs(x) {
  const n = Number(x);
  if (!Number.isFinite(n)) return "–";
  if (n !== 0 && Math.abs(n) < 0.1) return n.toPrecision(2);
  return n.toLocaleString("en-US", { maximumFractionDigits: 2 });
}

export function pct(x, digits = 0) {
  const n = Number(x);
  return Number.isFinite(n) ? `${n.toFixed(digits)}%` : "–";
}

export function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

export function day(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleDateString(undefined, { dateStyle: "medium" });
}

export function ago(iso) {
  if (!iso) return "–";
  const s = (Date.now() - new Date(iso).getTime()) / 1000;
  if (!Number.isFinite(s)) return "–";
  return s >= 0 ? `${duration(s)} ago` : `in ${duration(-s)}`;
}

export function duration(seconds) {
  const s = Number(seconds);
  if (!Number.isFinite(s)) return "–";
  if (s < 60) return `${Math.round(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.round(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.round((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.round((s % 86400) / 3600)}h`;
}

/** What a job asks for, in short: "2 GPUs", "0.5 GPU", "MIG 1g.10gb", "CPU". */
export function shape(job) {
  const pods = job.pods > 1 ? ` × ${job.pods} pods` : "";
  if (job.mig) return `MIG ${job.mig}${pods}`;
  if (job.gpu_milli) return `${job.gpu_milli / 1000} GPU${pods}`;
  if (job.gpus) return `${job.gpus} GPU${job.gpus > 1 ? "s" : ""}${pods}`;
  return `CPU${pods}`;
}

export function stateBadge(state) {
  return h("span", { class: ["badge", `state-${String(state).toLowerCase()}`] }, state);
}

/**
 * A stable colour for a key (job id, team), from a string hash: the same key has the same colour on
 * every page and every refresh (never its rank, which changes as spend changes). The hash picks one
 * of 1,080 slots — 360 hues × 3 lightnesses at one saturation — so keys rarely share a colour (a
 * palette of 12 repeated colours on a busy node map); every slot is dark enough for the map's white
 * labels and distinct from the greys of idle and "other" on the light theme.
 */
const HUES = 360;
const LIGHTNESS = [42, 34, 50];
const SLOTS = HUES * LIGHTNESS.length;
const PROBE = 397; // prime, coprime with SLOTS: a taken slot's next try is another hue and lightness
function hashOf(key) {
  let hsh = 0;
  for (const ch of String(key)) hsh = (hsh * 31 + ch.codePointAt(0)) >>> 0;
  return hsh;
}
function slotColour(slot) {
  return `hsl(${slot % HUES}, 62%, ${LIGHTNESS[Math.floor(slot / HUES)]}%)`;
}
export function colour(key) {
  return slotColour(hashOf(key) % SLOTS);
}
/**
 * Colours for keys drawn side by side (jobs on the node map, a chart's series): each key's own
 * colour(key) unless another key drawn with it already took that slot, then the next free slot
 * (keys taken in hash order, so the answer does not depend on their order or rank).
 */
export function colours(keys) {
  const uniq = [...new Set(keys.map(String))].sort((a, b) => hashOf(a) - hashOf(b) || (a < b ? -1 : a > b ? 1 : 0));
  const taken = new Set();
  const out = new Map();
  for (const k of uniq) {
    let slot = hashOf(k) % SLOTS;
    while (taken.has(slot)) slot = (slot + PROBE) % SLOTS;
    taken.add(slot);
    out.set(k, slotColour(slot));
  }
  return out;
}
const PALETTE = [
  "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
  "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#a0cbe8",
];
/** The i-th of a fixed palette: for lists whose order is their meaning (advice's ranked items). */
export function paletteAt(i) {
  return PALETTE[i % PALETTE.length];
}

/**
 * Keep `tbody`'s rows in step with `items` without rebuilding rows whose data did not change (a
 * focused or half-clicked button survives the live refresh). `render(item)` makes a <tr>;
 * `key(item)` identifies it; a row is rebuilt when JSON.stringify(item) changes.
 */
export function syncRows(tbody, items, key, render, emptyRow) {
  const old = new Map();
  for (const tr of Array.from(tbody.children)) if (tr.dataset.key) old.set(tr.dataset.key, tr);
  const rows = items.map((it) => {
    const k = String(key(it));
    const sig = JSON.stringify(it);
    const prev = old.get(k);
    if (prev && prev.dataset.sig === sig) return prev;
    const tr = render(it);
    tr.dataset.key = k;
    tr.dataset.sig = sig;
    return tr;
  });
  if (!rows.length && emptyRow) rows.push(emptyRow());
  const same = rows.length === tbody.children.length && rows.every((r, i) => tbody.children[i] === r);
  if (!same) tbody.replaceChildren(...rows);
}

/** A button that asks once more before acting: first click arms it, the second within 5 s acts. */
export function confirmButton(label, confirmLabel, action, attrs = {}) {
  const btn = h("button", { type: "button", class: "danger", ...attrs }, label);
  let armed = null;
  btn.addEventListener("click", async () => {
    if (!armed) {
      btn.textContent = confirmLabel;
      btn.classList.add("armed");
      armed = setTimeout(() => {
        armed = null;
        btn.textContent = label;
        btn.classList.remove("armed");
      }, 5000);
      return;
    }
    clearTimeout(armed);
    armed = null;
    btn.disabled = true;
    btn.textContent = "…";
    try {
      await action();
    } finally {
      btn.disabled = false;
      btn.textContent = label;
      btn.classList.remove("armed");
    }
  });
  return btn;
}

/** A random Idempotency-Key (crypto.randomUUID needs a secure context; this does not). */
export function randomKey() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** Split a command line into words the way a POSIX shell would for plain words and quotes. */
export function splitWords(text) {
  const out = [];
  let cur = "";
  let inWord = false;
  let quote = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote === "'") {
      if (c === "'") quote = null;
      else cur += c;
    } else if (quote === '"') {
      if (c === '"') quote = null;
      else if (c === "\\" && i + 1 < text.length && '"\\$`'.includes(text[i + 1])) cur += text[++i];
      else cur += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
    } else if (c === "\\" && i + 1 < text.length) {
      cur += text[++i];
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) out.push(cur);
      cur = "";
      inWord = false;
    } else {
      cur += c;
      inWord = true;
    }
  }
  if (quote) throw new Error(`unclosed ${quote} quote in the command`);
  if (inWord) out.push(cur);
  return out;
}
