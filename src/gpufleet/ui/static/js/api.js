// The REST API, with the token from sessionStorage in `Authorization: Bearer`. No cookies: the
// browser never sends the token by itself, so there is no cross-site request to forge.

const TOKEN_KEY = "gpufleet.token";

// The server's root, also behind a proxy that serves the console under a prefix (/prefix/ui/).
export const ROOT = location.pathname.replace(/\/ui(\/.*)?$/, "");

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
    this.code = problem?.code || "";
  }
  /** "detail (field: message; ...)" */
  explain() {
    const errs = (this.problem.errors || []).map((e) => `${e.field}: ${e.message}`);
    return errs.length ? `${this.message} (${errs.join("; ")})` : this.message;
  }
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}
export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}
export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

// Called on any 401: the app returns to the login page.
let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

function url(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === null || v === undefined || v === "") continue;
    for (const item of Array.isArray(v) ? v : [v]) q.append(k, String(item));
  }
  const qs = q.toString();
  return `${ROOT}${path}${qs ? `?${qs}` : ""}`;
}

async function problemOf(resp) {
  try {
    return await resp.json();
  } catch {
    return { detail: `${resp.status} ${resp.statusText}` };
  }
}

/** fetch with the token; a 401 logs out (unless `token` is given: the login check). */
export async function raw(method, path, { params, body, headers, signal, token } = {}) {
  const tok = token ?? getToken();
  const h = { Accept: "application/json", ...(headers || {}) };
  if (tok) h.Authorization = `Bearer ${tok}`;
  if (body !== undefined) h["Content-Type"] = "application/json";
  const resp = await fetch(url(path, params), {
    method,
    headers: h,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    credentials: "omit",
    cache: "no-store",
  });
  if (resp.status === 401 && token === undefined) onUnauthorized();
  if (!resp.ok) throw new ApiError(resp.status, await problemOf(resp));
  return resp;
}

export async function get(path, params, opts = {}) {
  return (await raw("GET", path, { params, ...opts })).json();
}

export async function post(path, body, opts = {}) {
  const resp = await raw("POST", path, { body, ...opts });
  return resp.status === 204 ? null : resp.json();
}

/** Check a token (GET /v1/whoami) without touching the stored one. */
export async function whoami(token) {
  return (await raw("GET", "/v1/whoami", { token })).json();
}

/**
 * Stream a job's log with `follow=true` (fetch + ReadableStream): `onText` gets each decoded chunk,
 * `onEnd` is called once when the stream closes (the job ended and its log was drained).
 * Returns an AbortController to stop following.
 */
export function followLogs(jobId, offset, onText, onEnd, onError) {
  const ctl = new AbortController();
  (async () => {
    try {
      const resp = await raw("GET", `/v1/jobs/${encodeURIComponent(jobId)}/logs`, {
        params: { follow: "true", offset },
        headers: { Accept: "text/plain" },
        signal: ctl.signal,
      });
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        onText(decoder.decode(value, { stream: true }), value.byteLength);
      }
      const rest = decoder.decode();
      if (rest) onText(rest, 0);
      onEnd();
    } catch (e) {
      if (e.name !== "AbortError") onError(e);
    }
  })();
  return ctl;
}

/** Run `fns` (functions returning promises) with at most `limit` in flight; results in order. */
export async function pool(fns, limit = 4) {
  const out = new Array(fns.length);
  let next = 0;
  async function worker() {
    while (next < fns.length) {
      const i = next++;
      out[i] = await fns[i]();
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, fns.length) }, worker));
  return out;
}
