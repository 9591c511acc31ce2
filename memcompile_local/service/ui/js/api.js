// The public REST API, called with the key the person signed in with.
//
// The key lives in sessionStorage: it stays for this tab (and survives a reload) and is gone when
// the tab closes; it is never written to localStorage, a cookie or a URL. Paths resolve against
// the page's own address, so the inspector works behind a reverse proxy that mounts the server
// under a prefix.

const KEY = "memcompile-inspector.key";

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

export function storedKey() {
  return sessionStorage.getItem(KEY);
}

export function setKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

export function apiUrl(path, query) {
  const url = new URL(`../${path.replace(/^\//, "")}`, new URL(".", location.href));
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== null && v !== undefined && v !== "") url.searchParams.set(k, String(v));
  }
  return url;
}

/** A user id or run name as one or more path segments. */
export function seg(text) {
  return String(text).split("/").map(encodeURIComponent).join("/");
}

/**
 * ``method`` ``path`` (e.g. "v1/memories") with ``query`` parameters and a JSON ``body`` (or a
 * ``raw`` Blob). Returns the parsed JSON; throws ApiError with the server's typed error.
 */
export async function api(method, path, {query, body, raw, key = storedKey()} = {}) {
  const headers = {};
  if (key) headers.Authorization = `Bearer ${key}`;
  let payload;
  if (raw !== undefined) {
    payload = raw;
    headers["Content-Type"] = "application/octet-stream";
  } else if (body !== undefined) {
    payload = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(apiUrl(path, query), {method, headers, body: payload, cache: "no-store"});
  } catch (err) {
    throw new ApiError(0, "network", `the server could not be reached (${err.message})`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const e = data && data.error ? data.error : {};
    throw new ApiError(response.status, e.code || "http_error", e.message || `HTTP ${response.status}`, e.field);
  }
  return data;
}

/** Run ``fn`` over ``items`` with at most ``width`` calls in flight; results in input order. */
export async function pooled(items, width, fn) {
  const out = new Array(items.length);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const i = next++;
      try {
        out[i] = await fn(items[i], i);
      } catch (err) {
        out[i] = err;
      }
    }
  }
  await Promise.all(Array.from({length: Math.min(width, items.length)}, worker));
  return out;
}
