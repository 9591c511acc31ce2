// Users: the tenant's users, a page at a time, with turn counts, latest turn and build state.
//
// GET /v1/memories lists ids; each row then asks GET /v1/memories/{user} (counts and build
// state) and GET .../turns?offset=<last>&limit=1 (the latest turn's time), a few at a time.

import {api, pooled, seg} from "./api.js";
import {fill, fmtInt, h, inline} from "./dom.js";
import {failure, route} from "./app.js";

const PAGE = 20;

function buildCell(stats) {
  const b = stats.build || {};
  const words = {built: "✓ built", pending: "… pending", failing: "✗ failing"}[b.state] || b.state;
  const extra = b.state === "built" ? "" : ` (${fmtInt(stats.pending_turns)} turns waiting)`;
  return h("span", {class: `state state-${b.state}`, title: b.last_error || null}, words + extra);
}

async function userRow(user) {
  const stats = await api("GET", `v1/memories/${seg(user)}`);
  let latest = null;
  if (stats.turns > 0) {
    const last = await api("GET", `v1/memories/${seg(user)}/turns`, {query: {offset: stats.turns - 1, limit: 1}});
    latest = last.turns[0] ? last.turns[0].time : null;
  }
  return {stats, latest};
}

export async function render(container, ctx) {
  const offset = Math.max(0, parseInt(ctx.query.get("offset") || "0", 10) || 0);
  const limit = Math.min(500, Math.max(1, parseInt(ctx.query.get("limit") || String(PAGE), 10) || PAGE));
  fill(container, h("h1", {tabindex: "-1"}, "Users"), h("p", {class: "muted"}, "Loading the tenant's users…"));
  let page;
  try {
    page = await api("GET", "v1/memories", {query: {offset, limit}});
  } catch (err) {
    return failure(container, ctx, "the users", err);
  }
  if (!ctx.current()) return;
  const rows = await pooled(page.users, 6, userRow);
  if (!ctx.current()) return;
  const intro = page.total
    ? `Users ${fmtInt(offset + 1)}–${fmtInt(offset + page.users.length)} of ${fmtInt(page.total)}.`
    : "This tenant has no memories yet.";
  const table = h("table", {class: "grid users"},
    h("caption", {class: "sr"}, "The tenant's users"),
    h("thead", {}, h("tr", {}, ["User", "Turns", "Sessions", "Build", "Latest turn", "Open"].map(
      t => h("th", {scope: "col", class: ["Turns", "Sessions"].includes(t) ? "num" : null}, t)))),
    h("tbody", {}, page.users.map((user, i) => {
      const r = rows[i];
      if (r instanceof Error) {
        return h("tr", {}, h("th", {scope: "row"}, inline(user)),
                 h("td", {colspan: "5", class: "error"}, r.status === 404 ? "forgotten meanwhile" : r.message));
      }
      return h("tr", {"data-user": user},
        h("th", {scope: "row"}, h("a", {href: route("timeline", [user])}, inline(user))),
        h("td", {class: "num"}, fmtInt(r.stats.turns)),
        h("td", {class: "num"}, fmtInt(r.stats.sessions)),
        h("td", {}, buildCell(r.stats)),
        h("td", {}, r.latest ? inline(r.latest) : "—"),
        h("td", {class: "links"},
          h("a", {href: route("timeline", [user]), "aria-label": `Timeline of ${user}`}, "Timeline"), " · ",
          h("a", {href: route("ask", [user]), "aria-label": `Ask ${user}'s memory`}, "Ask"), " · ",
          h("a", {href: route("edit", [user]), "aria-label": `Edit ${user}'s memory`}, "Edit")));
    })));
  const pager = h("nav", {class: "pager", "aria-label": "Pages of users"},
    offset > 0 ? h("a", {href: route("users", [], {offset: Math.max(0, offset - limit), limit: limit === PAGE ? null : limit}),
                         rel: "prev"}, "← Previous") : h("span", {class: "disabled"}, "← Previous"),
    h("span", {}, page.total ? ` page ${Math.floor(offset / limit) + 1} of ${Math.max(1, Math.ceil(page.total / limit))} ` : " "),
    page.next_offset !== null ? h("a", {href: route("users", [], {offset: page.next_offset, limit: limit === PAGE ? null : limit}),
                                        rel: "next"}, "Next →") : h("span", {class: "disabled"}, "Next →"));
  fill(container,
    h("h1", {tabindex: "-1"}, "Users"),
    h("p", {}, intro, " ", h("a", {href: route("edit")}, "Import a history"), " for a new or existing user."),
    page.users.length ? h("div", {class: "scroll"}, table) : null,
    page.total > limit ? pager : null);
  ctx.ready();
}
