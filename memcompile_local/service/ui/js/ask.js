// Ask: a question (and optional question date and filters) -> the selected turns in rank order,
// each with its score and, when the server explains its selections, the per-channel
// contributions; the context exactly as the reader model gets it; per-stage timings; and an
// answer when the server has an answer model.
//
// The request asks for ``explain: true``. A server without that field refuses it (400 naming the
// field): the page then asks again without it, remembers that for the tab, and shows scores only.
// Channels are rendered as the server names them; the page knows no fixed channel list.

import {api, ApiError, seg} from "./api.js";
import {deflist, fill, fmtInt, fmtNum, h, inline, meter, textBlock} from "./dom.js";
import {announce, failure, go, route, state} from "./app.js";
import {locate} from "./timeline.js";

const FILTERS = [
  ["speaker", "Speaker"], ["session_id", "Session"], ["agent_id", "Agent"],
  ["metadata", "Metadata (JSON object)"], ["from", "From"], ["to", "To"],
];

function explainRefused(err) {
  return err instanceof ApiError && err.status === 400 && (err.field === "explain" || /explain/.test(err.message));
}

async function ask(kind, user, body) {
  const path = `v1/memories/${seg(user)}/${kind}`;
  // Remembered per route: a server may explain its searches before its answers.
  if (state.explain[kind] !== false) {
    try {
      const data = await api("POST", path, {body: {...body, explain: true}});
      if (data.packets && data.packets.length) state.explain[kind] = data.packets.some(p => p.explain);
      return data;
    } catch (err) {
      if (!explainRefused(err)) throw err;
      state.explain[kind] = false;
    }
  }
  return api("POST", path, {body});
}

function channelTable(ex, rank) {
  const channels = Array.isArray(ex.channels) ? ex.channels : [];
  const top = Math.max(1e-12, ...channels.map(c => Math.abs(typeof c.contribution === "number" ? c.contribution : 0)));
  const caption = [`Why turn #${rank} was chosen: ranked by `, h("strong", {}, inline(ex.selector ?? "?"))];
  if (ex.raw !== null && ex.raw !== undefined) caption.push(`, raw score ${fmtNum(ex.raw)}`);
  return h("table", {class: "grid channels", "data-rank": String(rank)},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, h("th", {scope: "col"}, "Channel"), h("th", {scope: "col", class: "num"}, "Value"),
                     h("th", {scope: "col", class: "num"}, "Contribution"), h("th", {scope: "col"}, "Share"))),
    h("tbody", {}, channels.map(c => {
      const contrib = typeof c.contribution === "number" ? c.contribution : null;
      return h("tr", {"data-channel": String(c.name)},
        h("th", {scope: "row"}, inline(c.name)),
        h("td", {class: "num"}, fmtNum(c.value)),
        h("td", {class: "num"}, contrib === null ? "— (not a weighted sum)" : `${contrib < 0 ? "−" : "+"}${fmtNum(Math.abs(contrib))}`),
        h("td", {}, contrib === null ? "" : h("span", {class: `meter ${contrib < 0 ? "neg" : ""}`, role: "img",
          "aria-label": `${contrib < 0 ? "negative " : ""}share ${fmtNum(Math.abs(contrib) / top, 2)}`},
          h("span", {class: "meter-fill", style: {width: `${(100 * Math.abs(contrib) / top).toFixed(1)}%`}}))));
    })));
}

function hitItem(user, p) {
  const showIn = h("button", {type: "button", class: "secondary small"}, "Show in timeline");
  showIn.addEventListener("click", async () => {
    showIn.disabled = true;
    try {
      const pos = await locate(user, p.id, p.session_id);
      if (pos === null) {
        announce(`Turn ${p.id} is no longer in the timeline.`);
        return;
      }
      go(route("timeline", [user], {offset: Math.floor(pos / 100) * 100 || null, focus: p.id}));
    } catch (err) {
      announce(`Could not find turn ${p.id}: ${err.message}`);
    } finally {
      showIn.disabled = false;
    }
  });
  const score = typeof p.score === "number" ? p.score : null;
  return h("li", {class: "hit", "data-turn": p.id, "data-rank": String(p.rank)},
    h("article", {class: "turn selected", "aria-label": `rank ${p.rank}, turn ${p.id}`},
      h("header", {class: "turn-head"},
        h("span", {class: "rank"}, `#${p.rank}`),
        h("span", {class: "score"}, "score ", h("strong", {}, score === null ? "—" : fmtNum(score)), " ",
          score !== null && score >= 0 && score <= 1 ? meter(score, "score") : null),
        h("strong", {class: "speaker"}, inline(p.speaker)),
        h("span", {class: "muted"}, inline(p.time)),
        h("span", {class: "id", title: "turn id"}, inline(p.id)),
        h("span", {class: "muted"}, "session ", inline(p.session_id)),
        showIn),
      textBlock(p.text),
      p.image_caption ? h("p", {class: "caption"}, h("span", {class: "label"}, "Image: "), inline(p.image_caption)) : null,
      p.metadata ? h("p", {class: "metadata"}, h("span", {class: "label"}, "Metadata: "),
                     h("code", {}, inline(JSON.stringify(p.metadata)))) : null,
      p.explain ? h("div", {class: "scroll"}, channelTable(p.explain, p.rank)) : null));
}

function results(user, saved) {
  const {data, kind, roundTripMs} = saved;
  const timings = Object.entries(data.timings_ms || {});
  const explained = data.packets.some(p => p.explain);
  const total = timings.reduce((a, [, v]) => a + v, 0);
  return h("section", {class: "results", "aria-labelledby": "results-h", id: "results"},
    h("h2", {id: "results-h", tabindex: "-1"}, `${fmtInt(data.packets.length)} turns selected`),
    h("p", {}, `For “`, inline(data.query), `”. `, data.pending_turns
      ? `${fmtInt(data.pending_turns)} newer turns were not built yet and could not be chosen. ` : "",
      h("a", {href: route("timeline", [user])}, "See them marked in the timeline"), "."),
    !explained ? h("p", {class: "notice", id: "no-explain"},
      "This server does not report per-channel contributions (the ", h("code", {}, "explain"),
      " option): each turn shows its score only.") : null,
    kind === "answer" ? h("section", {class: "answer card", "aria-label": "Answer"},
      h("h3", {}, "Answer", data.answer_model ? h("span", {class: "muted"}, " · ", inline(data.answer_model)) : ""),
      textBlock(data.answer)) : null,
    h("ol", {class: "hits"}, data.packets.map(p => hitItem(user, p))),
    h("details", {class: "context card", open: true},
      h("summary", {}, `Context as the reader model gets it (${fmtInt((data.context || "").length)} characters)`),
      h("pre", {class: "context-text", tabindex: "0"}, inline(data.context))),
    h("section", {class: "timings", "aria-label": "Timings"},
      h("h3", {}, "Timings"),
      h("table", {class: "grid"},
        h("thead", {}, h("tr", {}, h("th", {scope: "col"}, "Stage"), h("th", {scope: "col", class: "num"}, "ms"))),
        h("tbody", {}, timings.map(([k, v]) => h("tr", {}, h("th", {scope: "row"}, inline(k)), h("td", {class: "num"}, v.toFixed(2)))),
          h("tr", {class: "total"}, h("th", {scope: "row"}, "stages, summed"), h("td", {class: "num"}, total.toFixed(2))),
          h("tr", {}, h("th", {scope: "row"}, "round trip seen by this page"), h("td", {class: "num"}, roundTripMs.toFixed(1)))))));
}

export async function render(container, ctx) {
  const user = ctx.user;
  if (!user) {
    fill(container, h("h1", {tabindex: "-1"}, "Ask"), h("p", {}, "Choose a user on the ", h("a", {href: route("users")}, "Users"), " page."));
    return ctx.ready();
  }
  const saved = state.lastAsk.get(user);
  const form0 = saved ? saved.form : {};
  const q = h("textarea", {id: "q", name: "query", rows: "2", required: true, "data-autofocus": saved ? null : ""},
              form0.query || "");
  const date = h("input", {id: "q-date", name: "question_date", type: "text", placeholder: "2024-06-01 (optional)",
                           value: form0.question_date || ""});
  const k = h("input", {id: "q-k", name: "k", type: "number", min: "1", max: "50", placeholder: "server default",
                        value: form0.k || ""});
  const filterInputs = {};
  const error = h("p", {class: "error", role: "alert"});
  const out = h("div", {id: "ask-results"});
  const buttons = [h("button", {type: "submit", name: "kind", value: "search"}, "Search"),
                   h("button", {type: "submit", name: "kind", value: "answer", class: "secondary"}, "Answer with the model")];
  const form = h("form", {class: "card ask-form"},
    h("div", {class: "field wide"}, h("label", {for: "q"}, "Question"), q),
    h("div", {class: "row"},
      h("div", {class: "field"}, h("label", {for: "q-date"}, "Question date"), date),
      h("div", {class: "field"}, h("label", {for: "q-k"}, "Turns to select (k)"), k)),
    h("details", {open: FILTERS.some(([n]) => form0[n]) || null}, h("summary", {}, "Filters"),
      h("div", {class: "filter-grid"}, FILTERS.map(([name, label]) => {
        filterInputs[name] = h("input", {id: `a-${name}`, name, type: "text", value: form0[name] || "", spellcheck: "false"});
        return h("div", {class: "field"}, h("label", {for: `a-${name}`}, label), filterInputs[name]);
      }))),
    h("div", {class: "actions"}, buttons), error);
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const kind = ev.submitter && ev.submitter.value === "answer" ? "answer" : "search";
    fill(error);
    const values = {query: q.value, question_date: date.value.trim(), k: k.value.trim()};
    for (const [name] of FILTERS) values[name] = filterInputs[name].value.trim();
    const body = {query: values.query};
    if (values.question_date) body.question_date = values.question_date;
    if (values.k) body.k = parseInt(values.k, 10);
    for (const [name] of FILTERS) {
      if (!values[name]) continue;
      if (name === "metadata") {
        try {
          body.metadata = JSON.parse(values.metadata);
        } catch {
          fill(error, "Metadata must be a JSON object, e.g. {\"topic\": \"travel\"}.");
          filterInputs.metadata.focus();
          return;
        }
      } else {
        body[name] = values[name];
      }
    }
    buttons.forEach(b => { b.disabled = true; });
    ctx.rootState("loading");
    performance.clearMarks("ask");
    performance.mark("ask");
    const t0 = performance.now();
    let data;
    try {
      data = await ask(kind, user, body);
    } catch (err) {
      buttons.forEach(b => { b.disabled = false; });
      fill(error, err.status === 503 && kind === "answer"
        ? `No answer model is available on this server: ${err.message}` : err.message);
      ctx.rootState("error");
      return;
    }
    buttons.forEach(b => { b.disabled = false; });
    const hits = new Map(data.packets.map(p => [p.id, {rank: p.rank, score: p.score}]));
    const entry = {query: data.query, hits, data, kind, roundTripMs: performance.now() - t0, form: values};
    state.lastAsk.set(user, entry);
    fill(out, results(user, entry));
    performance.measure(`ask:${kind}`, "ask");
    ctx.rootState("ready");
    out.querySelector("#results-h").focus();
    announce(`${data.packets.length} turns selected.`);
  });
  fill(container, h("h1", {tabindex: "-1"}, "Ask ", inline(user), "’s memory"),
       h("p", {class: "muted"}, "Searches compile the evidence a reader model would get; ",
         "“Answer with the model” also answers (when the server has an answer model)."),
       form, out);
  if (saved) fill(out, results(user, saved));
  // Check that the user exists, so a wrong link says so at once.
  try {
    await api("GET", `v1/memories/${seg(user)}`);
  } catch (err) {
    if (!ctx.current()) return;
    return failure(container, ctx, `the memory of ${user}`, err);
  }
  ctx.ready();
}
