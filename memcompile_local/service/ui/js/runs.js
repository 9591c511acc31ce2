// Runs: evaluation run folders the server was started with (serve --runs DIR).
//
// #/runs lists them; #/runs/NAME shows per-category recall and accuracy (a table and a bar chart
// whose two series differ by pattern and label, not only colour) and the questions, a page at a
// time, each with its gold turns against the selected ones (✓ hit, ✗ miss).

import {api, ApiError, seg} from "./api.js";
import {deflist, fill, fmtInt, fmtPct, h, inline, textBlock} from "./dom.js";
import {failure, go, route} from "./app.js";

const PAGE = 50;

function notServed(container, ctx) {
  fill(container, h("h1", {tabindex: "-1"}, "Runs"),
    h("p", {}, "This server serves no run folders. Start it with ", h("code", {}, "memcompile-local serve --runs DIR"),
      " to open the eval runs under DIR here, or write one run as a single page with ",
      h("code", {}, "memcompile-local report RUN_DIR"), "."));
  ctx.ready();
}

/** A bar chart of recall (solid) and accuracy (hatched) per group, as inline SVG. */
export function barChart(groups, title) {
  const rowH = 44;
  const barH = 16;
  const labelW = 190;
  const plotW = 360;
  const height = 40 + rowH * groups.length + 30;
  const width = labelW + plotW + 70;
  const svg = h("svg:svg", {viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-labelledby": "chart-t",
                            class: "chart"});
  svg.appendChild(h("svg:title", {id: "chart-t"}, title));
  const defs = h("svg:defs", {},
    h("svg:pattern", {id: "hatch", width: "6", height: "6", patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)"},
      h("svg:rect", {width: "6", height: "6", class: "hatch-bg"}),
      h("svg:line", {x1: "0", y1: "0", x2: "0", y2: "6", class: "hatch-line"})));
  svg.appendChild(defs);
  svg.append(h("svg:rect", {x: labelW, y: 8, width: 14, height: 10, class: "bar-recall"}),
             h("svg:text", {x: labelW + 18, y: 17, class: "small"}, "recall (solid)"),
             h("svg:rect", {x: labelW + 120, y: 8, width: 14, height: 10, class: "bar-accuracy"}),
             h("svg:text", {x: labelW + 138, y: 17, class: "small"}, "accuracy (hatched)"));
  groups.forEach((g, i) => {
    const y = 34 + i * rowH;
    svg.appendChild(h("svg:text", {x: labelW - 8, y: y + barH, "text-anchor": "end"}, `${g.name} (n=${g.count})`));
    [["recall", "bar-recall"], ["accuracy", "bar-accuracy"]].forEach(([key, cls], j) => {
      const v = g[key];
      const yy = y + j * (barH + 2);
      const w = v === null || v === undefined ? 0 : Math.max(1, plotW * v);
      svg.appendChild(h("svg:rect", {x: labelW, y: yy, width: w.toFixed(1), height: barH, class: cls},
                        h("svg:title", {}, `${key} ${fmtPct(v)}`)));
      svg.appendChild(h("svg:text", {x: (labelW + w + 4).toFixed(1), y: yy + barH - 4, class: "small"},
                        `${key[0].toUpperCase()} ${fmtPct(v)}`));
    });
  });
  const axisY = 34 + rowH * groups.length;
  for (const f of [0, 0.5, 1]) {
    const x = labelW + plotW * f;
    svg.append(h("svg:line", {x1: x, y1: 28, x2: x, y2: axisY, class: "grid-line"}),
               h("svg:text", {x, y: axisY + 14, "text-anchor": "middle", class: "small"}, `${f * 100}%`));
  }
  return svg;
}

async function listRuns(container, ctx) {
  let data;
  try {
    data = await api("GET", "v1/runs");
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return notServed(container, ctx);
    return failure(container, ctx, "the run folders", err);
  }
  if (!ctx.current()) return;
  fill(container, h("h1", {tabindex: "-1"}, "Runs"),
    data.runs.length ? h("div", {class: "scroll"}, h("table", {class: "grid"},
      h("thead", {}, h("tr", {}, ["Run", "Benchmark", "Preset", "Questions", "Recall", "Accuracy"].map(
        t => h("th", {scope: "col", class: ["Questions", "Recall", "Accuracy"].includes(t) ? "num" : null}, t)))),
      h("tbody", {}, data.runs.map(r => r.error
        ? h("tr", {}, h("th", {scope: "row"}, inline(r.name)), h("td", {colspan: "5", class: "error"}, r.error))
        : h("tr", {"data-run": r.name},
          h("th", {scope: "row"}, h("a", {href: route("runs", [r.name])}, inline(r.name))),
          h("td", {}, r.benchmark), h("td", {}, inline(r.preset || "")), h("td", {class: "num"}, fmtInt(r.questions)),
          h("td", {class: "num"}, fmtPct(r.recall)), h("td", {class: "num"}, fmtPct(r.accuracy)))))))
      : h("p", {}, "No run folder (one holding config.json, metrics.json and predictions.jsonl) was found."));
  ctx.ready();
}

/** Id tags: ✓ for a hit; for the rest ✗ when it is a loss (a missed gold turn), · when neutral. */
function idTags(items, flag, yes, no, lossWhenUnset) {
  if (!items.length) return "—";
  return h("ul", {class: "ids"}, items.map(it => h("li", {class: `tag ${it[flag] ? "hit" : lossWhenUnset ? "miss" : "other"}`},
    it[flag] ? "✓ " : lossWhenUnset ? "✗ " : "· ", inline(it.id), h("small", {}, ` (${it[flag] ? yes : no})`))));
}

function questionRow(q) {
  const failing = q.outcome === "miss" || q.outcome === "partial" || q.judge_label === "WRONG" || q.judge_error;
  return h("tr", {"data-question": q.question_id, class: failing ? "failing" : null},
    h("th", {scope: "row"}, inline(q.question_id), h("br"), h("strong", {}, failing ? "✗ failing" : "✓ ok")),
    h("td", {}, inline(q.category_name)),
    h("td", {}, textBlock(q.question, {limit: 400}),
      h("div", {}, h("small", {}, "gold answer: "), textBlock(q.gold, {limit: 400, cls: "text inline"})),
      h("div", {}, h("small", {}, "prediction: "), textBlock(q.prediction, {limit: 400, cls: "text inline"}))),
    h("td", {class: "num"}, fmtPct(q.recall), h("br"), h("small", {}, q.outcome.replace("_", " "))),
    h("td", {}, q.judge_label || (q.judge_error ? "error" : "not judged")),
    h("td", {}, idTags(q.gold_ids, "selected", "selected", "missed", true),
      q.unreachable_ids.length ? h("p", {}, h("small", {}, "⊘ not in the history: "), q.unreachable_ids.join(", ")) : null),
    h("td", {}, idTags(q.selected_ids, "gold", "gold", "not gold", false)));
}

async function showRun(container, ctx, name) {
  const offset = Math.max(0, parseInt(ctx.query.get("offset") || "0", 10) || 0);
  const category = ctx.query.get("category") || "";
  const failingOnly = ctx.query.get("failing") === "true";
  let summary;
  let page;
  try {
    [summary, page] = await Promise.all([
      api("GET", `v1/runs/${seg(name)}`),
      api("GET", `v1/runs/${seg(name)}/questions`, {query: {offset, limit: PAGE, category, failing: failingOnly ? "true" : null}}),
    ]);
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      // Either no such run, or no run folders served at all: the list route tells which.
      try {
        await api("GET", "v1/runs");
      } catch (inner) {
        if (inner instanceof ApiError && inner.status === 404) return notServed(container, ctx);
      }
    }
    return failure(container, ctx, `run ${name}`, err);
  }
  if (!ctx.current()) return;
  const groups = [...summary.categories, summary.overall];
  const table = h("table", {class: "grid", id: "category-table", "aria-describedby": "category-note"},
    h("thead", {}, h("tr", {}, ["Category", "Questions", "Recall", "Fully covered", "Accuracy", "Correct / judged", "Judge errors"].map(
      (t, i) => h("th", {scope: "col", class: i ? "num" : null}, t)))),
    h("tbody", {}, groups.map(g => h("tr", {"data-category": g.key, class: g.key === "overall" ? "total" : null},
      h("th", {scope: "row"}, inline(g.name)), h("td", {class: "num"}, fmtInt(g.count)),
      h("td", {class: "num recall"}, fmtPct(g.recall)), h("td", {class: "num"}, `${g.fully_covered}/${g.recall_n}`),
      h("td", {class: "num accuracy"}, fmtPct(g.accuracy)), h("td", {class: "num"}, `${g.correct}/${g.judged}`),
      h("td", {class: "num"}, fmtInt(g.judge_errors))))));
  const c = summary.config;
  const o = summary.outcomes;
  const catSelect = h("select", {id: "run-cat"}, h("option", {value: ""}, "every category"),
    summary.categories.map(g => h("option", {value: g.key, selected: g.key === category}, g.name)));
  const failBox = h("input", {id: "run-failing", type: "checkbox", checked: failingOnly});
  const filter = h("form", {class: "row filters-inline"},
    h("div", {class: "field"}, h("label", {for: "run-cat"}, "Category"), catSelect),
    h("div", {class: "field check"}, failBox, h("label", {for: "run-failing"}, "only failing questions")),
    h("div", {class: "actions"}, h("button", {type: "submit", class: "secondary"}, "Show")));
  filter.addEventListener("submit", ev => {
    ev.preventDefault();
    go(route("runs", [name], {category: catSelect.value, failing: failBox.checked ? "true" : null}));
  });
  const pageLink = (off, label) => h("a", {href: route("runs", [name], {category, failing: failingOnly ? "true" : null,
                                                                           offset: off || null})}, label);
  fill(container,
    h("h1", {tabindex: "-1"}, "Run ", inline(summary.name)),
    deflist([["Benchmark", summary.benchmark], ["Preset", c.preset], ["Data", c.data || "—"],
             ["Answer model", c.model], ["Embedder", c.embedder || "—"], ["Judge", c.judge],
             ["Questions", fmtInt(summary.questions)],
             ["Overall recall", h("span", {id: "overall-recall"}, fmtPct(summary.overall.recall))],
             ["Overall accuracy", h("span", {id: "overall-accuracy"}, fmtPct(summary.overall.accuracy))],
             ["Wall time", summary.wall_s === null ? "n/a" : `${summary.wall_s.toFixed(1)} s`]]),
    summary.torn_lines ? h("p", {class: "notice"}, "predictions.jsonl ends in a torn line (a run killed mid-write); it is left out.") : null,
    h("h2", {}, "Per category"),
    h("p", {id: "category-note"}, `Recall: the mean share of each question's gold turns among those selected at stage `,
      `“${summary.stage}”. Accuracy: the share of judged answers labelled correct.`),
    h("div", {class: "scroll"}, table),
    h("figure", {class: "chart-box"}, barChart(groups, "Recall and accuracy per category"),
      h("figcaption", {}, "Recall (solid) and accuracy (hatched) per category; every bar carries its value.")),
    h("p", {}, `Questions by evidence: ${o.hit} with every gold turn selected, ${o.partial} with some, ${o.miss} with none, `,
      `${o.no_gold} without gold turns.`),
    h("h2", {id: "questions-h"}, "Questions"),
    h("p", {class: "muted"}, "Gold turns: ✓ selected, ✗ missed, ⊘ absent from the history. Selected turns (rank order): ",
      "✓ gold, · not gold. A question is failing when it missed a gold turn or was judged wrong."),
    filter,
    h("p", {id: "question-count"}, page.total
      ? `Questions ${fmtInt(offset + 1)}–${fmtInt(offset + page.questions.length)} of ${fmtInt(page.total)}.`
      : "No question matches."),
    h("div", {class: "scroll"}, h("table", {class: "grid questions"},
      h("thead", {}, h("tr", {}, ["Question", "Category", "Question, gold answer, prediction", "Recall", "Judge",
                                  "Gold turns", "Selected turns"].map(t => h("th", {scope: "col"}, t)))),
      h("tbody", {}, page.questions.map(questionRow)))),
    h("nav", {class: "pager", "aria-label": "Pages of questions"},
      offset > 0 ? pageLink(Math.max(0, offset - PAGE), "← Previous") : h("span", {class: "disabled"}, "← Previous"), " ",
      page.next_offset !== null ? pageLink(page.next_offset, "Next →") : h("span", {class: "disabled"}, "Next →")));
  ctx.ready();
}

export async function render(container, ctx) {
  fill(container, h("h1", {tabindex: "-1"}, "Runs"), h("p", {class: "muted"}, "Loading…"));
  if (!ctx.rest.length) return listRuns(container, ctx);
  return showRun(container, ctx, ctx.rest.join("/"));
}
