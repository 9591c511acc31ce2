// Building the page from data without ever parsing it as markup.
//
// Every text that comes from the API (a turn's text, a speaker, metadata, a question) becomes a
// text node: h() turns strings into text nodes, and nothing in the app assigns innerHTML. Invisible
// direction controls (which can make "exe.txt" read as "txt.exe") are shown as visible [U+XXXX]
// marks, and each text sits in its own bidi-isolated element so a right-to-left run cannot spill
// into the labels around it. Long texts are cut to a preview with a button that shows the rest in a
// scroll box, so a 300,000-character reply costs no more to lay out than a short one until asked.

const BIDI = /[\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]/g;

/** An element: h("a", {href: "#/x", class: "c", onclick: fn}, "text", child, [more]). */
export function h(tag, attrs, ...children) {
  const el = tag.includes(":")
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.split(":")[1])
    : document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) {
      // Handlers are functions of the app, never text (text would be run as script).
      if (typeof value !== "function") throw new TypeError(`${name} must be a function`);
      el.addEventListener(name.slice(2), value);
    } else if (name === "dataset") {
      Object.assign(el.dataset, value);
    } else if (name === "style") {
      Object.assign(el.style, value); // CSSOM, allowed by the page's style-src 'self' policy
    } else if (name === "value" && "value" in el && !(el instanceof SVGElement)) {
      el.value = value;
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

/** Remove every child of ``el`` and append ``children``. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** ``text`` as a fragment of text nodes, with direction controls as visible marks. */
export function marked(text) {
  const frag = document.createDocumentFragment();
  const value = text === null || text === undefined ? "" : String(text);
  let last = 0;
  for (const m of value.matchAll(BIDI)) {
    if (m.index > last) frag.appendChild(document.createTextNode(value.slice(last, m.index)));
    const code = m[0].codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
    frag.appendChild(h("span", {class: "ctl", title: "an invisible direction-control character"}, `[U+${code}]`));
    last = m.index + m[0].length;
  }
  if (last < value.length) frag.appendChild(document.createTextNode(value.slice(last)));
  return frag;
}

/** A short text (a name, an id) in an isolated inline element. */
export function inline(text, cls = "") {
  return h("bdi", {class: cls || null}, marked(text));
}

export const PREVIEW_CHARS = 1500;

/**
 * A block of user text: whole when short; else a preview of ``limit`` characters, a note of how
 * many more there are, and a button that shows everything in a bounded scroll box (and back).
 */
export function textBlock(text, {limit = PREVIEW_CHARS, cls = "text"} = {}) {
  const value = text === null || text === undefined ? "" : String(text);
  const box = h("div", {class: cls, dir: "auto"});
  if (value.length <= limit) {
    box.appendChild(marked(value));
    return box;
  }
  // Cut at a whitespace near the limit when there is one, never inside a surrogate pair.
  let cut = value.lastIndexOf(" ", limit);
  if (cut < limit * 0.8) cut = limit;
  if (/[\ud800-\udbff]/.test(value[cut - 1] || "")) cut -= 1;
  const preview = h("div", {class: "preview"}, marked(value.slice(0, cut)), "…");
  const more = value.length - cut;
  const full = h("div", {class: "full", hidden: true, tabindex: "0", role: "region",
                         "aria-label": `whole text, ${value.length.toLocaleString("en")} characters`});
  let filled = false;
  const button = h("button", {type: "button", class: "link", "aria-expanded": "false"},
                   `Show all ${value.length.toLocaleString("en")} characters`);
  button.addEventListener("click", () => {
    const open = full.hidden;
    if (open && !filled) {
      full.appendChild(marked(value));
      filled = true;
    }
    full.hidden = !open;
    preview.hidden = open;
    button.setAttribute("aria-expanded", String(open));
    button.textContent = open ? "Show less" : `Show all ${value.length.toLocaleString("en")} characters`;
  });
  box.append(preview, full,
             h("p", {class: "collapsed-note"}, h("span", {class: "more"}, `${more.toLocaleString("en")} more characters hidden. `), button));
  box.dataset.collapsed = "true";
  return box;
}

export function fmtInt(n) {
  return n === null || n === undefined ? "n/a" : Number(n).toLocaleString("en");
}

export function fmtPct(x, digits = 1) {
  return x === null || x === undefined ? "n/a" : `${(100 * x).toFixed(digits)}%`;
}

export function fmtNum(x, digits = 3) {
  if (x === null || x === undefined) return "—";
  if (typeof x !== "number") return String(x);
  return Math.abs(x) >= 1000 ? x.toFixed(0) : x.toFixed(digits);
}

/** A labelled horizontal bar for a value in [0, 1] (the number is always printed beside it). */
export function meter(value, label) {
  const v = typeof value === "number" && isFinite(value) ? Math.max(0, Math.min(1, value)) : null;
  return h("span", {class: "meter", role: "img", "aria-label": `${label} ${v === null ? "n/a" : fmtNum(value)}`},
           h("span", {class: "meter-fill", style: {width: v === null ? "0" : `${(100 * v).toFixed(1)}%`}}));
}

/** A definition list from [term, value] pairs (values may be nodes). */
export function deflist(pairs, cls = "facts") {
  return h("dl", {class: cls}, pairs.filter(p => p[1] !== undefined).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}
