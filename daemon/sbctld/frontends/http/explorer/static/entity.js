// The views of one queue, topic, subscription or rule: overview, messages, send, manage.
import { op, run, select, entities, refresh } from "./app.js";
import { manageView, ruleView } from "./manage.js";
import { h, cards, table, field, fmtBytes, fmtTime, fmtMs, toast, confirmText, b64bytes, hexdump } from "./ui.js";

// What the messages tab remembers between renders (per entity).
const view = { path: null, sub: "", from: "", count: 20, messages: [], checked: new Set(),
  current: null, format: "json", mode: "peek", session: "", sessionLock: null };

export function entityView(state) {
  const { kind, path } = state.sel;
  if (kind === "rule") return ruleView(state);
  const e = state.overview.entities.find((x) => x.kind === kind && x.path === path);
  if (!e) return null;
  if (view.path !== path) Object.assign(view, { path, sub: "", from: "", messages: [], checked: new Set(), current: null, session: "", sessionLock: null, next: null });
  const tabs = ["overview", ...(kind !== "topic" ? ["messages"] : []), ...(kind !== "subscription" ? ["send"] : []), "manage"];
  if (!tabs.includes(state.tab)) state.tab = "overview";
  const d = e.description;
  const label = { queue: "Queue", topic: "Topic", subscription: "Subscription" }[kind];
  return [
    h("h2", { class: "title" }, `${label} ${path} `, h("span", { class: `badge ${d.status === "Active" ? "ok" : "warn"}` }, d.status)),
    h("div", { "data-live": "counts" }, countCards(d)),
    h("div", { class: "tabs", role: "tablist" }, ...tabs.map((t) => h("button", {
      role: "tab", id: `tab-${t}`, "aria-selected": String(state.tab === t),
      onclick: () => select(kind, path, t),
    }, t[0].toUpperCase() + t.slice(1)))),
    h("div", { role: "tabpanel", "aria-labelledby": `tab-${state.tab}` },
      ...tabBody(state, e)),
  ];
}

function tabBody(state, e) {
  if (state.tab === "messages") return messagesTab(state, e);
  if (state.tab === "send") return [sendForm(state, e)];
  if (state.tab === "manage") return manageView(state, e);
  return overviewTab(e);
}

function countCards(d) {
  const c = [];
  if (d.active_message_count !== undefined) c.push(["Active", d.active_message_count]);
  c.push(["Scheduled", d.scheduled_message_count ?? 0]);
  if (d.deferred_message_count !== undefined) c.push(["Deferred", d.deferred_message_count]);
  if (d.dead_letter_message_count !== undefined) c.push(["Dead-lettered", d.dead_letter_message_count]);
  if (d.transfer_dead_letter_message_count !== undefined) c.push(["Transfer DLQ", d.transfer_dead_letter_message_count]);
  if (d.size_in_bytes !== undefined) c.push(["Size", fmtBytes(d.size_in_bytes)]);
  if (d.subscription_count !== undefined) c.push(["Subscriptions", d.subscription_count]);
  if (d.rule_count !== undefined) c.push(["Rules", d.rule_count]);
  c.push(["Availability", d.availability_status]);
  return cards(c);
}

// ---------------------------------------------------------------- overview

function overviewTab(e) {
  const d = e.description;
  const out = [];
  if (d.partitions) {
    const rows = d.partitions.map((p) => ({
      cells: [p.partition_id, p.availability_status || "Available", p.active_message_count ?? "",
        p.dead_letter_message_count ?? "", p.scheduled_message_count ?? "",
        p.size_in_bytes !== undefined ? fmtBytes(p.size_in_bytes) : "", (p.faults || []).join(", ")],
      attrs: { "data-partition": p.partition_id, class: p.availability_status && p.availability_status !== "Available" ? "faulted" : null },
    }));
    out.push(h("h3", {}, `Partitions (${d.partitions.length})`),
      h("div", { "data-live": "partitions" }, table(["Partition", "Availability", "Active", "Dead-lettered", "Scheduled", "Size", "Faults"], rows, { id: "partitions" })));
  }
  const settings = Object.entries(d).filter(([k, v]) => k !== "partitions" && (typeof v !== "object" || v === null))
    .map(([k, v]) => [k, k.endsWith("_at_ms") ? fmtTime(v) : k.endsWith("_ms") ? fmtMs(v) : String(v)]);
  out.push(h("h3", {}, "Settings"), table(["Setting", "Value"], settings, { id: "settings" }));
  return out;
}

// ---------------------------------------------------------------- messages

function source(state, e) {
  return view.sub ? `${e.path}/${view.sub}` : e.path;
}

function messagesTab(state, e) {
  const form = h("form", { class: "bar", id: "peek-form", onsubmit: (ev) => { ev.preventDefault(); peek(state, e, false); } },
    field("Sub-queue", h("select", { name: "sub", onchange: (ev) => { view.sub = ev.target.value; view.messages = []; view.current = null; view.checked.clear(); view.next = null; peek(state, e, false); } },
      h("option", { value: "" }, "Active messages"),
      h("option", { value: "$deadletterqueue", selected: view.sub === "$deadletterqueue" }, "Dead-letter queue"),
      h("option", { value: "$Transfer/$DeadLetterQueue", selected: view.sub === "$Transfer/$DeadLetterQueue" }, "Transfer dead-letter queue"))),
    field("From sequence number", h("input", { name: "from", type: "number", min: "0", value: view.from, onchange: (ev) => { view.from = ev.target.value; view.next = null; } })),
    field("Count", h("input", { name: "count", type: "number", min: "1", max: "250", value: view.count, onchange: (ev) => { view.count = Number(ev.target.value) || 20; } })),
    e.description.requires_session ? field("Session id (empty: the next one)", h("input", { name: "session", id: "session-id", value: view.session, onchange: (ev) => { view.session = ev.target.value.trim(); } })) : "",
    h("button", { class: "b primary", id: "peek" }, "Peek"),
    h("button", { type: "button", class: "b", id: "next-page", disabled: !view.messages.length, onclick: () => peek(state, e, true) }, "Next page"),
    h("button", { type: "button", class: "b", id: "receive-lock", onclick: () => receive(state, e, "peek-lock") }, "Receive (peek-lock)"),
    h("button", { type: "button", class: "b", id: "receive-delete", onclick: () => receive(state, e, "receive-and-delete") }, "Receive and delete"),
    h("button", { type: "button", class: "b danger", id: "purge", onclick: () => purge(state, e) }, "Purge…"));
  const out = [form];
  if (view.sessionLock) {
    out.push(h("div", { class: "bar" }, `Session ${view.sessionLock.session_id} locked until ${fmtTime(view.sessionLock.locked_until_ms)}`,
      h("button", { type: "button", class: "b", id: "release-session", onclick: () => releaseSession(state, e) }, "Release session")));
  }
  if (view.sub) {
    out.push(h("div", { class: "bar" },
      h("button", { type: "button", class: "b", id: "resubmit-selected", disabled: !view.checked.size, onclick: () => resubmitSelected(state, e) }, `Resubmit selected (${view.checked.size})`),
      h("button", { type: "button", class: "b", id: "resubmit-all", onclick: () => resubmitAll(state, e) }, "Resubmit all")));
  }
  out.push(h("div", { class: "split" }, h("div", {}, messagesTable()), h("div", { id: "message-detail" }, view.current ? messageDetail(state, e, view.current) : h("p", { class: "muted" }, "Peek or receive, then choose a message."))));
  return out;
}

function messagesTable() {
  if (!view.messages.length) return h("p", { class: "muted", id: "no-messages" }, view.mode === "none" ? "No message." : "No messages shown yet.");
  const rows = view.messages.map((m) => ({
    cells: [h("input", { type: "checkbox", "aria-label": `select message ${m.sequence_number}`, checked: view.checked.has(m.sequence_number),
      onchange: (ev) => { if (ev.target.checked) view.checked.add(m.sequence_number); else view.checked.delete(m.sequence_number); rerender(); } }),
    m.sequence_number, m.message_id || "", m.state + (m.lock_token ? " (locked)" : ""),
    h("time", { datetime: m.enqueued_time_utc, title: m.enqueued_time_utc }, m.enqueued_time_utc.slice(11, 19)), preview(m)],
    selected: view.current && view.current.sequence_number === m.sequence_number,
    attrs: { "data-seq": m.sequence_number },
    onclick: () => { view.current = m; rerender(); },
  }));
  return table(["", "Seq", "Message id", "State", "Enqueued", "Body"], rows, { id: "messages" });
}

function preview(m) {
  const text = m.body !== undefined ? m.body : `(binary, ${b64bytes(m.body_base64).length} bytes)`;
  return text.length > 32 ? `${text.slice(0, 32)}…` : text;
}

let rerenderHook = () => {};
function rerender() { rerenderHook(); }
export function onRerender(fn) { rerenderHook = fn; }

// A peek on a partitioned entity answers from one partition (daemon/README.md §0.1.7): the
// page peeks each partition from its own position (the partition id is the sequence
// number's top 16 bits) and shows them together, oldest first.
const PARTITION_SPAN = 2 ** 48;

function partitionCount(state, e) {
  const owner = e.kind === "subscription"
    ? state.overview.entities.find((x) => x.kind === "topic" && x.path === e.path.split("/subscriptions/")[0])
    : e;
  return owner && owner.description.enable_partitioning ? owner.description.partition_count : 0;
}

async function peekOne(state, e, from) {
  const args = { namespace: state.ns, entity: source(state, e), count: Math.min(250, view.count || 20) };
  if (from !== null && from !== undefined && from !== "") args.from_sequence = Number(from);
  return op("peek", args);
}

async function peekPartitions(state, e, n, next) {
  if (!next || !view.next) view.next = Array.from({ length: n }, (_, p) => Math.max(p * PARTITION_SPAN, Number(view.from || 0)));
  const out = [];
  for (let p = 0; p < n; p++) {
    if (view.next[p] === null) continue;
    try {
      const got = (await peekOne(state, e, view.next[p])).filter((m) => Math.floor(m.sequence_number / PARTITION_SPAN) === p);
      view.next[p] = got.length ? got[got.length - 1].sequence_number + 1 : null;
      out.push(...got);
    } catch (err) { toast(`partition ${p}: ${err.message}`, true); }
  }
  return out.sort((a, b) => Date.parse(a.enqueued_time_utc) - Date.parse(b.enqueued_time_utc) || a.sequence_number - b.sequence_number);
}

async function peek(state, e, next) {
  const n = partitionCount(state, e);
  try {
    if (n) view.messages = await peekPartitions(state, e, n, next);
    else {
      if (next && view.messages.length) view.from = String(view.messages[view.messages.length - 1].sequence_number + 1);
      view.messages = await peekOne(state, e, view.from);
    }
    view.mode = view.messages.length ? "peek" : "none";
    view.current = view.messages[0] || null;
    view.checked.clear();
    rerender();
  } catch (err) { toast(err.message, true); }
}

// A session-enabled entity is received from one session at a time: accept it first.
async function acceptSession(state, e) {
  if (!e.description.requires_session || view.sub) return null;
  if (view.sessionLock && view.sessionLock.locked_until_ms < Date.now()) view.sessionLock = null;  // expired
  if (view.sessionLock && (!view.session || view.session === view.sessionLock.session_id)) return view.sessionLock.session_lock_token;
  if (view.sessionLock) await releaseSession(state, e, true);
  view.sessionLock = await op("session_accept", { namespace: state.ns, entity: e.path, session_id: view.session || null });
  return view.sessionLock.session_lock_token;
}

async function releaseSession(state, e, quiet) {
  const lock = view.sessionLock;
  view.sessionLock = null;
  if (!lock) return;
  try {
    await op("session_close", { namespace: state.ns, entity: e.path, session_lock_token: lock.session_lock_token });
    if (!quiet) toast(`session ${lock.session_id} released`);
  } catch (err) { if (!quiet) toast(err.message, true); }
  if (!quiet) rerender();
}

async function receive(state, e, mode) {
  try {
    const args = { namespace: state.ns, entity: source(state, e), count: Math.min(view.count || 1, 250), mode };
    const token = await acceptSession(state, e);
    if (token) args.session_lock_token = token;
    const got = await op("receive", args);
    if (token && mode === "receive-and-delete") await releaseSession(state, e, true);
    view.messages = got; view.mode = got.length ? mode : "none"; view.current = got[0] || null; view.checked.clear();
    await refresh({ full: true });
    toast(`${got.length} message(s) received${mode === "receive-and-delete" ? " and deleted" : " and locked"}`);
  } catch (err) { toast(err.message, true); }
}

async function purge(state, e) {
  const what = source(state, e);
  if (!confirmText(`Purge every message of ${what}? This cannot be undone.`, "purge")) { toast("purge cancelled"); return; }
  const r = await run(null, () => op("purge", { namespace: state.ns, entity: what }));
  if (r) { toast(`${r.purged} message(s) purged`); view.messages = []; view.current = null; rerender(); }
}

async function resubmitAll(state, e) {
  const r = await run(null, () => op("dlq_resubmit", { namespace: state.ns, entity: source(state, e) }));
  if (r) { toast(`${r.resubmitted} message(s) resubmitted to ${r.to}`); view.messages = []; view.current = null; rerender(); }
}

// Selected: receive the sub-queue's messages in peek-lock, send a copy of each selected one
// to the entity (without its dead-letter properties) and complete it; abandon the others.
async function resubmitSelected(state, e) {
  const wanted = new Set(view.checked);
  const from = source(state, e);
  const target = e.kind === "subscription" ? e.path.split("/subscriptions/")[0] : e.path;
  try {
    const got = await op("receive", { namespace: state.ns, entity: from, count: 5000, mode: "peek-lock" });
    const mine = got.filter((m) => wanted.has(m.sequence_number));
    const others = got.filter((m) => !wanted.has(m.sequence_number));
    if (mine.length) await op("send", { namespace: state.ns, entity: target, messages: mine.map(copyOf) });
    if (mine.length) await op("settle", { namespace: state.ns, entity: from, op: "complete", lock_tokens: mine.map((m) => m.lock_token) });
    if (others.length) await op("settle", { namespace: state.ns, entity: from, op: "abandon", lock_tokens: others.map((m) => m.lock_token) });
    view.messages = view.messages.filter((m) => !wanted.has(m.sequence_number)); view.checked.clear(); view.current = null;
    await refresh({ full: true });
    toast(`${mine.length} message(s) resubmitted to ${target}`);
  } catch (err) { toast(err.message, true); }
}

const COPIED = ["message_id", "session_id", "partition_key", "correlation_id", "subject", "content_type", "to", "reply_to", "reply_to_session_id"];
const DLQ_PROPS = new Set(["DeadLetterReason", "DeadLetterErrorDescription"]);
function copyOf(m) {
  const out = { body_base64: m.body_base64, application_properties: {} };
  for (const k of COPIED) if (m[k] !== null && m[k] !== undefined) out[k] = m[k];
  for (const p of m.properties) if (!DLQ_PROPS.has(p.name)) out.application_properties[p.name] = p.value;
  return out;
}

function messageDetail(state, e, m) {
  const sys = ["sequence_number", "message_id", "state", "enqueued_time_utc", "delivery_count", "lock_token", "locked_until_utc",
    "expires_at_utc", "scheduled_enqueue_time_utc", "time_to_live", "content_type", "correlation_id", "subject", "session_id",
    "partition_key", "to", "reply_to", "reply_to_session_id", "partition_id", "enqueued_sequence_number",
    "dead_letter_reason", "dead_letter_error_description", "dead_letter_source"]
    .filter((k) => m[k] !== null && m[k] !== undefined).map((k) => [k, String(m[k])]);
  const props = m.properties.map((p) => [p.name, p.type, typeof p.value === "object" && p.value !== null ? String(p.value.value) : String(p.value)]);
  return h("section", { class: "msg-detail", "aria-label": `Message ${m.sequence_number}` },
    h("h3", {}, `Message ${m.sequence_number}`),
    m.lock_token ? settleBar(state, e, m) : stateActions(state, e, m),
    h("h4", {}, "System properties"), table(["Property", "Value"], sys, { id: "system-properties" }),
    h("h4", {}, "Application properties"), props.length ? table(["Name", "Type", "Value"], props, { id: "application-properties" }) : h("p", { class: "muted" }, "None."),
    h("h4", {}, "Body ", ...["json", "text", "hex"].map((f) => h("button", { class: "b", "aria-pressed": String(view.format === f), id: `body-${f}`, onclick: () => { view.format = f; rerender(); } }, f.toUpperCase()))),
    h("pre", { class: "body", id: "body" }, bodyAs(m, view.format)));
}

function bodyAs(m, format) {
  const bytes = b64bytes(m.body_base64);
  if (format === "hex") return hexdump(bytes);
  const text = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  if (format === "json") {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return `(not JSON)\n${text}`; }
  }
  return text;
}

// A deferred message is received by its sequence number; a scheduled one can be cancelled.
function stateActions(state, e, m) {
  if (m.state === "deferred") {
    return h("div", { class: "bar" }, h("button", { class: "b", id: "receive-deferred", onclick: async () => {
      try {
        const [got] = await op("receive_deferred", { namespace: state.ns, entity: source(state, e), sequence_numbers: [m.sequence_number], mode: "peek-lock" });
        view.messages = view.messages.map((x) => (x === m ? got : x)); view.current = got; rerender();
      } catch (err) { toast(err.message, true); }
    } }, "Receive deferred (peek-lock)"));
  }
  if (m.state === "scheduled") {
    return h("div", { class: "bar" }, h("button", { class: "b danger", id: "cancel-scheduled", onclick: () => run(`message ${m.sequence_number} cancelled`, async () => {
      await op("cancel_scheduled", { namespace: state.ns, entity: e.path, sequence_numbers: [m.sequence_number] });
      view.messages = view.messages.filter((x) => x !== m); view.current = null;
    }) }, "Cancel scheduled message"));
  }
  return "";
}

function settleBar(state, e, m) {
  const settle = (opName, extra = {}) => run(`message ${m.sequence_number}: ${opName}`, async () => {
    await op("settle", { namespace: state.ns, entity: source(state, e), op: opName, lock_tokens: [m.lock_token], ...extra });
    view.messages = view.messages.filter((x) => x !== m); view.current = null;
  });
  const reason = h("input", { id: "dl-reason", placeholder: "reason" });
  const desc = h("input", { id: "dl-description", placeholder: "description" });
  return h("div", { class: "bar", id: "settle" },
    h("button", { class: "b primary", id: "complete", onclick: () => settle("complete") }, "Complete"),
    h("button", { class: "b", id: "abandon", onclick: () => settle("abandon") }, "Abandon"),
    h("button", { class: "b", id: "defer", onclick: () => settle("defer") }, "Defer"),
    field("Dead-letter reason", reason), field("Description", desc),
    h("button", { class: "b danger", id: "dead-letter", onclick: () => settle("dead-letter", { reason: reason.value || null, description: desc.value || null }) }, "Dead-letter"));
}

// ---------------------------------------------------------------- send

const TYPES = ["string", "int", "double", "boolean", "null", "timestamp", "uuid", "binary"];

function propRow() {
  const row = h("div", { class: "props-row" },
    h("input", { class: "p-name", placeholder: "name", "aria-label": "property name" }),
    h("select", { class: "p-type", "aria-label": "property type" }, ...TYPES.map((t) => h("option", {}, t))),
    h("input", { class: "p-value", placeholder: "value", "aria-label": "property value" }),
    h("button", { type: "button", class: "b", "aria-label": "remove property", onclick: () => row.remove() }, "×"));
  return row;
}

function sendForm(state, e) {
  const props = h("div", { id: "send-props" });
  return h("form", { id: "send-form", class: "stack", onsubmit: (ev) => { ev.preventDefault(); send(state, e, ev.target, props); } },
    field("Body", h("textarea", { name: "body", rows: 6 }), "wide"),
    field("Content type", h("input", { name: "content_type", placeholder: "application/json" })),
    field("Message id", h("input", { name: "message_id" })),
    field("Session id", h("input", { name: "session_id" })),
    field("Partition key", h("input", { name: "partition_key" })),
    field("Subject", h("input", { name: "subject" })),
    field("Correlation id", h("input", { name: "correlation_id" })),
    field("Scheduled enqueue time (UTC)", h("input", { name: "scheduled", type: "datetime-local", step: "1" })),
    field("Repeat N times", h("input", { name: "repeat", type: "number", min: "1", max: "1000", value: 1 })),
    h("fieldset", { class: "wide" }, h("legend", {}, "Application properties"), props,
      h("button", { type: "button", class: "b", id: "add-property", onclick: () => props.append(propRow()) }, "Add property")),
    h("div", { class: "wide" }, h("button", { class: "b primary", id: "send" }, "Send")));
}

function typed(type, raw, name) {
  switch (type) {
    case "string": return raw;
    case "int": { if (!/^-?\d+$/.test(raw.trim())) throw new Error(`property ${name}: ${raw} is not an integer`); return Number(raw); }
    case "double": { const n = Number(raw); if (raw.trim() === "" || Number.isNaN(n)) throw new Error(`property ${name}: ${raw} is not a number`); return n; }
    case "boolean": { if (!["true", "false"].includes(raw.trim())) throw new Error(`property ${name}: use true or false`); return raw.trim() === "true"; }
    case "null": return null;
    default: return { $type: type, value: raw };
  }
}

function send(state, e, form, props) {
  let message;
  try {
    message = { body: form.body.value };
    for (const k of ["content_type", "message_id", "session_id", "partition_key", "subject", "correlation_id"]) {
      if (form[k].value.trim()) message[k] = form[k].value.trim();
    }
    if (form.scheduled.value) message.scheduled_enqueue_time_utc = `${form.scheduled.value}Z`;
    const ap = {};
    for (const row of props.querySelectorAll(".props-row")) {
      const name = row.querySelector(".p-name").value.trim();
      if (name) ap[name] = typed(row.querySelector(".p-type").value, row.querySelector(".p-value").value, name);
    }
    if (Object.keys(ap).length) message.application_properties = ap;
  } catch (err) { toast(err.message, true); return; }
  const n = Math.max(1, Math.min(1000, Number(form.repeat.value) || 1));
  run(null, async () => {
    const r = await op("send", { namespace: state.ns, entity: e.path, messages: Array(n).fill(message), report: true });
    const where = r.diverted_to ? ` (diverted to ${r.diverted_namespace}/${r.diverted_to})` : "";
    toast(`${n} message(s) sent to ${e.path}${where}`);
  });
}

export { entities };
