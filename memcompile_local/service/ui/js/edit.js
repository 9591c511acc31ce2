// Edit: delete one turn, forget a user (the user id typed as confirmation), import a file.
//
// Each action says what it erased or wrote, from the server's own answer (rows deleted per
// table; an import job's progress and outcome).

import {api, seg} from "./api.js";
import {deflist, fill, fmtInt, h, inline} from "./dom.js";
import {announce, route} from "./app.js";

const USER_RE = /^[A-Za-z0-9_@-][A-Za-z0-9._@-]{0,63}$/;

function deletedList(deleted) {
  const entries = Object.entries(deleted || {});
  if (!entries.length) return h("p", {}, "Nothing was stored for it.");
  return h("ul", {class: "erased"}, entries.map(([table, n]) => h("li", {}, `${fmtInt(n)} ${table}`)));
}

function deleteTurnSection(user, preset) {
  const input = h("input", {id: "del-turn", name: "turn", type: "text", value: preset || "", required: true,
                            spellcheck: "false", "data-autofocus": preset ? "" : null});
  const out = h("div", {class: "result", "aria-live": "polite", id: "delete-result"});
  const confirmBox = h("div", {class: "confirm", hidden: true});
  const form = h("form", {class: "card", "aria-labelledby": "del-h"},
    h("h2", {id: "del-h"}, "Delete one turn"),
    h("p", {}, "Erases the turn and everything derived from it (descriptors, embeddings, cells). ",
      "To change a turn, delete it and append the new text."),
    h("label", {for: "del-turn"}, "Turn id"), input,
    h("div", {class: "actions"}, h("button", {type: "submit"}, "Delete turn…")),
    confirmBox, out);
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const id = input.value.trim();
    if (!id) return;
    const yes = h("button", {type: "button", class: "danger"}, `Yes, delete turn ${id}`);
    const no = h("button", {type: "button", class: "secondary"}, "Cancel");
    fill(confirmBox, h("p", {}, "Delete turn ", inline(id), " of ", inline(user), "? This cannot be undone."), yes, " ", no);
    confirmBox.hidden = false;
    yes.focus();
    no.addEventListener("click", () => { confirmBox.hidden = true; input.focus(); });
    yes.addEventListener("click", async () => {
      yes.disabled = true;
      try {
        const res = await api("DELETE", `v1/memories/${seg(user)}/turns/${seg(id)}`);
        confirmBox.hidden = true;
        fill(out, h("p", {class: "ok"}, "✓ Deleted turn ", inline(res.turn_id), " of ", inline(res.user_id), ". Erased:"),
             deletedList(res.deleted), h("p", {}, h("a", {href: route("timeline", [user])}, "Back to the timeline")));
        announce(`Deleted turn ${res.turn_id}.`);
        input.value = "";
      } catch (err) {
        confirmBox.hidden = true;
        fill(out, h("p", {class: "error", role: "alert"}, "✗ ", err.message));
      }
    });
  });
  return form;
}

function forgetSection(user) {
  const input = h("input", {id: "forget-confirm", type: "text", autocomplete: "off", spellcheck: "false",
                            "aria-describedby": "forget-help"});
  const button = h("button", {type: "submit", class: "danger", disabled: true}, `Forget ${user}`);
  const out = h("div", {class: "result", "aria-live": "polite", id: "forget-result"});
  input.addEventListener("input", () => { button.disabled = input.value !== user; });
  const form = h("form", {class: "card", "aria-labelledby": "forget-h"},
    h("h2", {id: "forget-h"}, "Forget this user"),
    h("p", {id: "forget-help"}, "Erases every turn of ", inline(user), " and everything derived from them, ",
      "and scrubs them from the store file. Type the user id, ", h("code", {}, inline(user)), ", to confirm."),
    h("label", {for: "forget-confirm"}, "User id to forget"), input,
    h("div", {class: "actions"}, button), out);
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    if (input.value !== user) return;
    button.disabled = true;
    try {
      const res = await api("DELETE", `v1/memories/${seg(user)}`);
      fill(out, h("p", {class: "ok"}, "✓ Forgot user ", inline(res.user_id), ". Erased:"), deletedList(res.deleted),
           h("p", {}, h("a", {href: route("users")}, "Back to the users")));
      announce(`Forgot user ${res.user_id}.`);
      input.value = "";
    } catch (err) {
      fill(out, h("p", {class: "error", role: "alert"}, "✗ ", err.message));
      button.disabled = input.value !== user;
    }
  });
  return form;
}

function progressView(job) {
  const total = job.turns_total || 0;
  const bar = h("progress", {max: String(Math.max(1, total)), value: String(job.turns_written + job.turns_skipped),
                             "aria-label": "turns imported"});
  const words = {queued: "queued", running: "running", done: "✓ done", failed: "✗ failed"}[job.state] || job.state;
  return h("div", {class: "job", "data-state": job.state},
    h("p", {}, h("strong", {}, words), ` · ${fmtInt(job.turns_written)} turns written, ${fmtInt(job.turns_skipped)} already stored, of ${fmtInt(total)}`,
      ` · conversations ${fmtInt(job.conversations_done)} of ${fmtInt(job.conversations_total)}`),
    bar,
    job.state === "done" ? h("p", {}, job.built ? "The memory was built in the job." : "The memory is queued for its build.",
                            " ", h("a", {href: route("timeline", [job.user_id])}, "Open the timeline")) : null,
    job.error ? h("p", {class: "error", role: "alert"}, `${job.error.code}: ${job.error.message}`) : null);
}

function importSection(user) {
  const who = h("input", {id: "imp-user", type: "text", value: user || "", required: true, spellcheck: "false",
                          "data-autofocus": user ? null : ""});
  const file = h("input", {id: "imp-file", type: "file", required: true, accept: ".json,.jsonl,application/json"});
  const format = h("select", {id: "imp-format"}, ["auto", "plain", "locomo", "longmemeval", "turns"].map(
    f => h("option", {value: f}, f)));
  const conv = h("input", {id: "imp-conv", type: "number", min: "0", placeholder: "all"});
  const out = h("div", {class: "result", "aria-live": "polite", id: "import-result"});
  const button = h("button", {type: "submit"}, "Import");
  const form = h("form", {class: "card", "aria-labelledby": "imp-h"},
    h("h2", {id: "imp-h"}, "Import a history"),
    h("p", {}, "A conversation file as the command line's ingest reads it (plain JSON or JSONL, LoCoMo, LongMemEval) ",
      "or a JSON list of turns. It is imported in the background; turns already stored are skipped."),
    h("div", {class: "row"},
      h("div", {class: "field"}, h("label", {for: "imp-user"}, "Into user"), who),
      h("div", {class: "field"}, h("label", {for: "imp-file"}, "File"), file),
      h("div", {class: "field"}, h("label", {for: "imp-format"}, "Format"), format),
      h("div", {class: "field"}, h("label", {for: "imp-conv"}, "Only conversation (0-based)"), conv)),
    h("div", {class: "actions"}, button), out);
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const target = who.value.trim();
    if (!USER_RE.test(target)) {
      fill(out, h("p", {class: "error", role: "alert"}, "A user id is 1 to 64 letters, digits and . _ @ - (not starting with a dot)."));
      who.focus();
      return;
    }
    if (!file.files.length) {
      fill(out, h("p", {class: "error", role: "alert"}, "Choose a file to import."));
      file.focus();
      return;
    }
    button.disabled = true;
    const query = {format: format.value};
    if (conv.value !== "") query.conversation = conv.value;
    let job;
    try {
      job = await api("POST", `v1/memories/${seg(target)}/imports`, {query, raw: file.files[0]});
    } catch (err) {
      button.disabled = false;
      fill(out, h("p", {class: "error", role: "alert"}, "✗ ", err.message));
      return;
    }
    fill(out, progressView(job));
    while (job.state === "queued" || job.state === "running") {
      await new Promise(r => setTimeout(r, 400));
      try {
        job = await api("GET", `v1/memories/${seg(target)}/imports/${job.id}`);
      } catch (err) {
        fill(out, h("p", {class: "error", role: "alert"}, `Lost track of the import: ${err.message}`));
        break;
      }
      fill(out, progressView(job));
    }
    button.disabled = false;
    announce(job.state === "done" ? `Import done: ${job.turns_written} turns written.` : `Import ${job.state}.`);
  });
  return form;
}

export async function render(container, ctx) {
  const user = ctx.user;
  const parts = [h("h1", {tabindex: "-1"}, user ? ["Edit ", inline(user), "’s memory"] : "Import a history")];
  if (user) {
    let stats = null;
    try {
      stats = await api("GET", `v1/memories/${seg(user)}`);
    } catch (err) {
      if (err.status !== 404) throw err;
    }
    if (!ctx.current()) return;
    parts.push(stats
      ? deflist([["Turns", fmtInt(stats.turns)], ["Sessions", fmtInt(stats.sessions)]], "facts inline-facts")
      : h("p", {class: "notice"}, "No memory is stored for ", inline(user), " (yet): only an import can write one."));
    if (stats) parts.push(deleteTurnSection(user, ctx.query.get("turn")), forgetSection(user));
  }
  parts.push(importSection(user));
  fill(container, parts);
  ctx.ready();
}
