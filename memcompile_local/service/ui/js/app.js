// The inspector's shell: sign-in, the navigation, and a hash router over the pages.
//
// Routes (the hash keeps every page bookmarkable and the back button working):
//   #/users               the tenant's users         #/timeline/USER?offset=&speaker=...
//   #/ask/USER            a question and its turns   #/edit/USER?turn=ID   (#/edit: import only)
//   #/runs, #/runs/NAME   evaluation run folders
// Each page module exports render(main, ctx); ctx.ready() marks the page as shown (and records a
// performance measure named after the page, which scripts/bench_ui.py reads).

import {api, ApiError, setKey, storedKey} from "./api.js";
import {fill, h} from "./dom.js";
import * as users from "./users.js";
import * as timeline from "./timeline.js";
import * as ask from "./ask.js";
import * as edit from "./edit.js";
import * as runs from "./runs.js";

const PAGES = {users, timeline, ask, edit, runs};
const USER_KEY = "memcompile-inspector.user";

export const state = {
  auth: "unknown", // "none" (no keys file: the local tenant), "key", or "signin"
  explain: {search: null, answer: null}, // whether each route explains its hits (null: not asked yet)
  lastAsk: new Map(), // user -> {query, hits: Map(id -> {rank, score})}, highlighted in the timeline
};

export function currentUser() {
  return sessionStorage.getItem(USER_KEY) || "";
}

function setCurrentUser(user) {
  if (user) sessionStorage.setItem(USER_KEY, user);
}

/** Parse location.hash into {page, rest: [segments], query: URLSearchParams}. */
export function parseRoute(hash = location.hash) {
  const raw = hash.replace(/^#\/?/, "");
  const [path, qs] = raw.split("?", 2);
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return {page: parts[0] || "users", rest: parts.slice(1), query: new URLSearchParams(qs || "")};
}

/** The hash of a route: route("timeline", ["alice"], {offset: 100}). */
export function route(page, rest = [], query = {}) {
  const path = [page, ...rest.map(s => String(s).split("/").map(encodeURIComponent).join("/"))].join("/");
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== null && v !== undefined && v !== "") q.set(k, String(v));
  const qs = q.toString();
  return `#/${path}${qs ? `?${qs}` : ""}`;
}

export function go(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

export function announce(text) {
  const el = document.getElementById("status");
  el.textContent = "";
  // A fresh text node after a tick, so screen readers read a repeated message again.
  setTimeout(() => { el.textContent = text; }, 30);
}

function navLinks(active) {
  const user = currentUser();
  const items = [
    ["users", "Users", route("users")],
    ["timeline", "Timeline", user ? route("timeline", [user]) : null],
    ["ask", "Ask", user ? route("ask", [user]) : null],
    ["edit", "Edit", user ? route("edit", [user]) : route("edit")],
    ["runs", "Runs", route("runs")],
  ];
  return h("ul", {}, items.map(([page, label, href]) =>
    h("li", {}, href
      ? h("a", {href, "aria-current": page === active ? "page" : null}, label)
      : h("span", {class: "disabled", title: "choose a user on the Users page first"}, label))));
}

function sessionBox() {
  const box = document.getElementById("session");
  if (state.auth === "none") {
    fill(box, h("span", {class: "badge"}, "local tenant"), " no API keys on this server");
  } else if (state.auth === "key") {
    const key = storedKey() || "";
    fill(box, h("span", {class: "badge"}, "signed in"), ` key …${key.slice(-4)} `,
         h("button", {type: "button", class: "link", onclick: signOut}, "Sign out"));
  } else {
    fill(box);
  }
}

function signOut() {
  setKey(null);
  state.auth = "signin";
  state.lastAsk.clear();
  sessionStorage.removeItem(USER_KEY);
  announce("Signed out; the key was removed from this tab.");
  render();
}

function signInForm(main, message) {
  const input = h("input", {id: "api-key", name: "key", type: "password", autocomplete: "off", required: true,
                            spellcheck: "false", "aria-describedby": "key-help"});
  const error = h("p", {class: "error", role: "alert"}, message || "");
  const form = h("form", {class: "card signin"},
    h("h1", {tabindex: "-1"}, "Sign in"),
    h("p", {id: "key-help"}, "This server has API keys. Paste a key of your tenant: it is kept for this tab only ",
      "(it is gone when the tab closes) and sent to this server as ", h("code", {}, "Authorization: Bearer"), "."),
    h("label", {for: "api-key"}, "API key"), input,
    h("div", {class: "actions"}, h("button", {type: "submit"}, "Sign in")), error);
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const key = input.value.trim();
    try {
      await api("GET", "v1/memories", {query: {limit: 1}, key});
    } catch (err) {
      fill(error, err.status === 401 || err.status === 403 ? `That key was refused: ${err.message}` : err.message);
      input.focus();
      return;
    }
    setKey(key);
    state.auth = "key";
    announce("Signed in.");
    render();
  });
  fill(main, form);
  main.dataset.page = "signin";
  main.dataset.state = "ready";
  form.querySelector("h1").focus();
}

/** Whether this server needs a key, and whether the stored one is good. */
async function probe() {
  const key = storedKey();
  try {
    await api("GET", "v1/memories", {query: {limit: 1}, key});
    state.auth = key ? "key" : "none";
    return null;
  } catch (err) {
    if (err.status === 401 || err.status === 403) {
      if (key) setKey(null);
      state.auth = "signin";
      return key ? `The key kept in this tab was refused (${err.message}); sign in again.` : "";
    }
    throw err;
  }
}

let renderCount = 0;

export async function render() {
  const main = document.getElementById("main");
  const token = ++renderCount;
  const {page, rest, query} = parseRoute();
  main.dataset.state = "loading";
  if (state.auth === "unknown" || state.auth === "signin") {
    let message = null;
    try {
      message = await probe();
    } catch (err) {
      fill(main, h("h1", {tabindex: "-1"}, "The server is not answering"), h("p", {class: "error"}, err.message));
      main.dataset.state = "error";
      return;
    }
    if (state.auth === "signin") {
      fill(document.getElementById("nav"));
      sessionBox();
      signInForm(main, message);
      return;
    }
  }
  const mod = PAGES[page];
  if (["timeline", "ask", "edit"].includes(page) && rest[0]) setCurrentUser(rest[0]);
  fill(document.getElementById("nav"), navLinks(page));
  sessionBox();
  const container = h("div", {class: "page"});
  fill(main, container);
  main.dataset.page = mod ? page : "missing";
  performance.clearMarks(`page:${page}`);
  performance.mark(`page:${page}`);
  const ctx = {
    user: rest[0] || "",
    rest,
    query,
    current: () => token === renderCount,
    ready: () => {
      if (token !== renderCount) return;
      performance.measure(`page:${page}`, `page:${page}`);
      main.dataset.state = "ready";
    },
    fail: () => {
      if (token === renderCount) main.dataset.state = "error";
    },
    rootState: value => {
      if (token === renderCount) main.dataset.state = value;
    },
  };
  if (!mod) {
    fill(container, h("h1", {tabindex: "-1"}, "No such page"), h("p", {}, h("a", {href: route("users")}, "Users")));
    ctx.ready();
    return;
  }
  try {
    await mod.render(container, ctx);
  } catch (err) {
    if (!ctx.current()) return;
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
      setKey(null);
      state.auth = "signin";
      return render();
    }
    container.appendChild(h("p", {class: "error", role: "alert"}, err.message));
    ctx.fail();
  }
  if (ctx.current()) {
    document.title = `${container.querySelector("h1")?.textContent || "Inspector"} · memory inspector`;
    const focusTarget = container.querySelector("[data-autofocus]") || container.querySelector("h1");
    if (focusTarget && !container.contains(document.activeElement)) focusTarget.focus({preventScroll: false});
  }
}

/** A standard "could not load" block for a page, naming what failed. */
export function failure(container, ctx, what, err) {
  const notFound = err instanceof ApiError && err.status === 404;
  fill(container, h("h1", {tabindex: "-1"}, notFound ? "Not found" : `Could not load ${what}`),
       h("p", {class: "error", role: "alert"}, err.message),
       h("p", {}, h("a", {href: route("users")}, "Back to the users")));
  ctx.fail();
}

window.addEventListener("hashchange", () => {
  document.getElementById("status").textContent = ""; // an old page's message does not follow
  render();
});
// The skip link moves the focus itself: following its #main would be read as a route.
document.querySelector(".skip").addEventListener("click", ev => {
  ev.preventDefault();
  document.getElementById("main").focus();
});
// Module scripts run once the document is parsed: the first render can start now.
render();
