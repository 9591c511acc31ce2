// Timeline: one user's turns in dialogue order, by session, a page at a time, with the filters of
// GET /v1/memories/{user}/turns (speaker, session, agent, metadata, time range).
//
// Turns the last question on the Ask page selected are marked with their rank and score. The
// arrow keys (and Home/End) move between turns while one has the focus.

import {api, ApiError, seg} from "./api.js";
import {deflist, fill, fmtInt, fmtNum, h, inline, textBlock} from "./dom.js";
import {failure, go, route, state} from "./app.js";

const FILTERS = [
  ["speaker", "Speaker", "text", "e.g. Alice"],
  ["session_id", "Session", "text", "a session id"],
  ["agent_id", "Agent", "text", "an agent id"],
  ["metadata", "Metadata", "text", '{"topic": "travel"}'],
  ["from", "From", "text", "2024-05-01"],
  ["to", "To", "text", "2024-05-31 18:00"],
];
const SIZES = [50, 100, 200, 500];
const DEFAULT_SIZE = 100;

/** The current filters of a route's query (only the set ones). */
function filtersOf(query) {
  const out = {};
  for (const [name] of FILTERS) {
    const v = query.get(name);
    if (v) out[name] = v;
  }
  return out;
}

/**
 * The position (0-based, dialogue order, no filter) of turn ``id`` of ``session``, for paging the
 * timeline to it. Its ordinal is read from its session's turns; positions equal ordinals until a
 * turn is deleted, after which a binary search over one-turn pages finds it.
 */
export async function locate(user, id, session) {
  let ordinal = null;
  for (let offset = 0; ordinal === null;) {
    const page = await api("GET", `v1/memories/${seg(user)}/turns`, {query: {session_id: session, offset, limit: 500}});
    const hit = page.turns.find(t => t.id === id);
    if (hit) ordinal = hit.ordinal;
    else if (page.next_offset === null) return null;
    else offset = page.next_offset;
  }
  const at = async pos => (await api("GET", `v1/memories/${seg(user)}/turns`, {query: {offset: pos, limit: 1}})).turns[0];
  const guess = await at(ordinal);
  if (guess && guess.id === id) return ordinal;
  let lo = 0;
  let hi = ordinal; // ordinals only grow past positions, so the turn is at or before its ordinal
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const t = await at(mid);
    if (!t || t.ordinal > ordinal) hi = mid - 1;
    else if (t.ordinal < ordinal) lo = mid + 1;
    else return mid;
  }
  return null;
}

function filterForm(ctx, filters, limit) {
  const inputs = {};
  const form = h("form", {class: "filters card", "aria-label": "Filter the timeline"},
    h("fieldset", {}, h("legend", {}, "Filters"),
      h("div", {class: "filter-grid"}, FILTERS.map(([name, label, type, placeholder]) => {
        inputs[name] = h("input", {id: `f-${name}`, name, type, placeholder, value: filters[name] || "",
                                   spellcheck: "false"});
        return h("div", {class: "field"}, h("label", {for: `f-${name}`}, label), inputs[name]);
      }),
      h("div", {class: "field"}, h("label", {for: "f-limit"}, "Turns per page"),
        (inputs.limit = h("select", {id: "f-limit", name: "limit"},
          SIZES.map(n => h("option", {value: String(n), selected: n === limit}, String(n))))))),
      h("div", {class: "actions"},
        h("button", {type: "submit"}, "Apply filters"),
        h("button", {type: "button", class: "secondary", onclick: () => go(route("timeline", [ctx.user]))}, "Clear"))));
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const q = {};
    for (const [name] of FILTERS) q[name] = inputs[name].value.trim();
    const n = parseInt(inputs.limit.value, 10);
    if (n !== DEFAULT_SIZE) q.limit = n;
    go(route("timeline", [ctx.user], q));
  });
  return form;
}

function turnArticle(user, t, position, hits) {
  const hit = hits ? hits.get(t.id) : null;
  const meta = [
    h("span", {class: "pos"}, `#${fmtInt(position + 1)}`),
    h("strong", {class: "speaker"}, inline(t.speaker)),
    h("span", {class: "id", title: "turn id"}, inline(t.id)),
    t.agent_id ? h("span", {class: "agent"}, "agent ", inline(t.agent_id)) : null,
    hit ? h("span", {class: "badge hit-badge"}, `★ selected #${hit.rank}`, hit.score !== null && hit.score !== undefined
      ? ` · score ${fmtNum(hit.score)}` : "") : null,
  ];
  return h("li", {},
    h("article", {class: `turn${hit ? " selected" : ""}`, id: `turn-${t.id}`, tabindex: "0", "data-turn": t.id,
                  "aria-label": `turn ${position + 1}, ${t.speaker}${hit ? `, selected rank ${hit.rank}` : ""}`},
      h("header", {class: "turn-head"}, meta),
      textBlock(t.text),
      t.image_caption ? h("p", {class: "caption"}, h("span", {class: "label"}, "Image: "), inline(t.image_caption)) : null,
      t.metadata ? h("p", {class: "metadata"}, h("span", {class: "label"}, "Metadata: "),
                     h("code", {}, inline(JSON.stringify(t.metadata)))) : null,
      h("p", {class: "turn-actions"},
        h("a", {href: route("edit", [user], {turn: t.id}), "aria-label": `Delete turn ${t.id}…`}, "Delete…"))));
}

function keyboardNav(list) {
  list.addEventListener("keydown", ev => {
    const turns = [...list.querySelectorAll("article.turn")];
    const i = turns.indexOf(document.activeElement);
    if (i < 0) return;
    let j = null;
    if (ev.key === "ArrowDown") j = Math.min(turns.length - 1, i + 1);
    else if (ev.key === "ArrowUp") j = Math.max(0, i - 1);
    else if (ev.key === "Home") j = 0;
    else if (ev.key === "End") j = turns.length - 1;
    if (j === null) return;
    ev.preventDefault();
    turns[j].focus();
  });
}

function pager(ctx, offset, limit, total, filters, where) {
  const pages = Math.max(1, Math.ceil(total / limit));
  const current = Math.floor(offset / limit) + 1;
  const to = p => route("timeline", [ctx.user], {...filters, limit: limit === DEFAULT_SIZE ? null : limit,
                                                 offset: (p - 1) * limit || null});
  const link = (p, label, rel) => (p >= 1 && p <= pages && p !== current)
    ? h("a", {href: to(p), rel: rel || null}, label) : h("span", {class: "disabled", "aria-disabled": "true"}, label);
  const input = h("input", {id: `page-no${where}`, type: "number", min: "1", max: String(pages), value: String(current),
                            inputmode: "numeric"});
  const form = h("form", {class: "jump"}, h("label", {for: `page-no${where}`}, "Page"), input, ` of ${fmtInt(pages)} `,
                 h("button", {type: "submit", class: "secondary"}, "Go"));
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const p = Math.min(pages, Math.max(1, parseInt(input.value, 10) || 1));
    go(to(p));
  });
  return h("nav", {class: "pager", "aria-label": where ? "Pages of turns (end)" : "Pages of turns"},
    link(1, "⇤ First"), link(current - 1, "← Previous", "prev"), form, link(current + 1, "Next →", "next"),
    link(pages, "Last ⇥"));
}

export async function render(container, ctx) {
  const user = ctx.user;
  if (!user) {
    fill(container, h("h1", {tabindex: "-1"}, "Timeline"), h("p", {}, "Choose a user on the ",
         h("a", {href: route("users")}, "Users"), " page."));
    return ctx.ready();
  }
  const filters = filtersOf(ctx.query);
  const limit = SIZES.includes(parseInt(ctx.query.get("limit"), 10)) ? parseInt(ctx.query.get("limit"), 10) : DEFAULT_SIZE;
  const offset = Math.max(0, parseInt(ctx.query.get("offset") || "0", 10) || 0);
  fill(container, h("h1", {tabindex: "-1"}, "Timeline of ", inline(user)), h("p", {class: "muted"}, "Loading turns…"));
  let stats;
  let page;
  try {
    [stats, page] = await Promise.all([
      api("GET", `v1/memories/${seg(user)}`),
      api("GET", `v1/memories/${seg(user)}/turns`, {query: {...filters, offset, limit}}),
    ]);
  } catch (err) {
    if (err instanceof ApiError && err.status === 400) {
      // A bad filter value: keep the form so it can be corrected.
      fill(container, h("h1", {tabindex: "-1"}, "Timeline of ", inline(user)), filterForm(ctx, filters, limit),
           h("p", {class: "error", role: "alert"}, `The filter was refused: ${err.message}`));
      return ctx.fail();
    }
    return failure(container, ctx, `the timeline of ${user}`, err);
  }
  if (!ctx.current()) return;
  const ask = state.lastAsk.get(user);
  const filtered = Object.keys(filters).length > 0;
  const shown = page.turns.length;
  const summary = shown
    ? `Turns ${fmtInt(offset + 1)}–${fmtInt(offset + shown)} of ${fmtInt(page.total)}${filtered ? " matching the filters" : ""}`
    : (page.total ? `No turns on this page (${fmtInt(page.total)} in all).` : (filtered ? "No turn matches the filters." : "No turns."));
  const list = h("div", {class: "turn-list", "aria-label": "Turns"});
  let group = null;
  let lastSession = null;
  page.turns.forEach((t, i) => {
    if (t.session_id !== lastSession || group === null) {
      lastSession = t.session_id;
      group = h("ol", {class: "turns", start: String(offset + i + 1)});
      list.appendChild(h("section", {class: "session", "aria-label": `session ${t.session_id}`},
        h("h2", {class: "session-head"}, "Session ", inline(t.session_id), h("span", {class: "muted"}, " · ", inline(t.time))),
        group));
    }
    group.appendChild(turnArticle(user, t, offset + i, ask ? ask.hits : null));
  });
  keyboardNav(list);
  const s = stats;
  fill(container,
    h("h1", {tabindex: "-1"}, "Timeline of ", inline(user)),
    deflist([["Turns", fmtInt(s.turns)], ["Sessions", fmtInt(s.sessions)],
             ["Build", `${s.build.state}${s.pending_turns ? ` (${fmtInt(s.pending_turns)} waiting)` : ""}`],
             ["Descriptors", fmtInt(s.descriptors)]], "facts inline-facts"),
    filterForm(ctx, filters, limit),
    ask ? h("p", {class: "notice"}, "★ marks the ", fmtInt(ask.hits.size), " turns selected for “", inline(ask.query),
            "” on the ", h("a", {href: route("ask", [user])}, "Ask"), " page. ",
            h("button", {type: "button", class: "link", onclick: () => { state.lastAsk.delete(user); go(location.hash); }},
              "Clear the marks")) : null,
    h("p", {class: "count", id: "turn-count", "data-total": String(page.total)}, summary),
    page.total > limit ? pager(ctx, offset, limit, page.total, filters, "") : null,
    list,
    page.total > limit && shown > 10 ? pager(ctx, offset, limit, page.total, filters, "-end") : null);
  const focus = ctx.query.get("focus");
  if (focus) {
    const el = document.getElementById(`turn-${focus}`);
    if (el) {
      el.classList.add("focused");
      el.setAttribute("data-autofocus", "");
      el.scrollIntoView({block: "center"});
    }
  }
  ctx.ready();
}
