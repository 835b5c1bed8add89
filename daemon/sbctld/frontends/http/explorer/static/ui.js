// Small DOM helpers: elements are built with text nodes only (message bodies and names are
// untrusted: nothing is ever parsed as HTML).

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "value" && (tag === "input" || tag === "select")) el.value = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === "" || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function field(label, control, cls) {
  return h("label", { class: `f ${cls || ""}` }, label, control);
}

export function cards(pairs) {
  return h("div", { class: "cards" }, ...pairs.map(([k, v]) =>
    h("div", { class: "card", "data-card": k }, h("div", { class: "v" }, String(v)), h("div", { class: "k" }, k))));
}

// rows: arrays of cells, or {cells, onclick, selected, attrs}
export function table(headers, rows, attrs = {}) {
  const body = rows.map((r) => {
    const row = Array.isArray(r) ? { cells: r } : r;
    const tr = h("tr", { ...(row.attrs || {}), "aria-selected": row.selected ? "true" : null });
    if (row.onclick) {
      tr.className = "clickable";
      tr.tabIndex = 0;
      tr.addEventListener("click", (e) => { if (!["INPUT", "BUTTON"].includes(e.target.tagName)) row.onclick(); });
      tr.addEventListener("keydown", (e) => { if (e.key === "Enter" && e.target === tr) row.onclick(); });
    }
    row.cells.forEach((c) => tr.append(h("td", { class: typeof c === "number" ? "num" : null }, c)));
    return tr;
  });
  return h("table", attrs, h("thead", {}, h("tr", {}, ...headers.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, ...body));
}

export function fmtBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

export function fmtTime(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC") : "";
}

export function fmtMs(ms) {
  if (ms >= 9e14) return "never";
  if (ms % 3600000 === 0) return `${ms / 3600000} h`;
  if (ms % 60000 === 0) return `${ms / 60000} min`;
  return `${ms / 1000} s`;
}

export function toast(text, error = false) {
  const box = document.getElementById("toast");
  const el = h("div", { class: error ? "error" : "", role: error ? "alert" : null }, text);
  box.append(el);
  while (box.children.length > 4) box.firstChild.remove();  // the latest few only
  setTimeout(() => el.remove(), error ? 8000 : 4000);
}

// A confirmation the user must type (purge, delete): true when confirmed.
export function confirmText(what, word) {
  const answer = window.prompt(`${what}\nType "${word}" to confirm.`);
  return answer !== null && answer.trim() === word;
}

export function b64bytes(b64) {
  const bin = atob(b64 || "");
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function hexdump(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const chunk = [...bytes.slice(i, i + 16)];
    const hex = chunk.map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const text = chunk.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${i.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${text}`);
  }
  return lines.join("\n");
}
