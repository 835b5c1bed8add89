// sbctl explorer: the page's state, its API calls, the entity tree and the namespace view.
// A plain ES module, no build step; every text shown is set as text (never as HTML).
import { entityView, onRerender } from "./entity.js";
import { h, fmtBytes, fmtTime, table, cards, field, toast, confirmText } from "./ui.js";

export const state = {
  token: null, ns: null, namespaces: [], overview: null, rules: {},
  sel: { kind: "namespace", path: null }, tab: "overview", filter: "", prevThrottled: null,
  throttledAt: 0,
};

// ---------------------------------------------------------------- the API

export async function op(name, args = {}) {
  const r = await fetch(`/explorer/api/op/${name}`, {
    method: "POST",
    headers: { Authorization: `Bearer ${state.token}`, "Content-Type": "application/json" },
    body: JSON.stringify(args),
  });
  let data = null;
  try { data = await r.json(); } catch { data = null; }
  if (!r.ok) {
    const err = new Error(data && data.error ? data.error.message : `${r.status} ${r.statusText}`);
    err.status = r.status;
    throw err;
  }
  return data;
}

export async function run(what, fn) {
  try {
    const result = await fn();
    await refresh({ full: true });
    if (what) toast(what);  // once the page shows the change
    return result;
  } catch (e) {
    toast(e.message, true);
    return undefined;
  }
}

// ---------------------------------------------------------------- start

function readToken() {
  const m = /token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem("sbctl-explorer-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("sbctl-explorer-token");
}

// The daemon restarted (a new token) or the token is wrong: say so once, stop refreshing.
function lostToken(why) {
  document.getElementById("live").checked = false;
  sessionStorage.removeItem("sbctl-explorer-token");
  document.getElementById("main").replaceChildren(
    h("h2", { class: "title" }, "The daemon no longer accepts this page's token"),
    h("p", {}, why),
    h("p", {}, "It makes a new token each time it starts: open the page again with `sbctl explorer`."));
}

function askToken() {
  const main = document.getElementById("main");
  const input = h("input", { type: "password", id: "token-input", autocomplete: "off" });
  main.replaceChildren(
    h("h2", { class: "title" }, "A token is needed"),
    h("p", {}, "Open this page with `sbctl explorer`, which puts the daemon's token in the URL, or paste the token:"),
    h("form", { onsubmit: (e) => { e.preventDefault(); sessionStorage.setItem("sbctl-explorer-token", input.value.trim()); location.reload(); } },
      field("Token", input), h("button", { class: "b primary" }, "Use it")),
  );
}

async function start() {
  state.token = readToken();
  if (!state.token) { askToken(); return; }
  const wanted = new URLSearchParams(location.search).get("namespace");
  document.getElementById("filter").addEventListener("input", (e) => {
    state.filter = e.target.value.trim().toLowerCase(); renderTree();
  });
  document.getElementById("ns").addEventListener("change", (e) => selectNamespace(e.target.value));
  document.getElementById("refresh").addEventListener("click", () => refresh({ live: true }));
  document.addEventListener("keydown", (e) => {  // "/" jumps to the filter, as on many sites
    if (e.key === "/" && !["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement.tagName)) {
      e.preventDefault(); document.getElementById("filter").focus();
    }
  });
  try {
    state.namespaces = await op("namespace_list");
  } catch (e) {
    if (e.status === 401) lostToken(e.message);
    else document.getElementById("main").replaceChildren(h("p", { class: "error" }, e.message));
    return;
  }
  const names = state.namespaces.map((n) => n.name);
  state.ns = names.find((n) => n.toLowerCase() === (wanted || "").toLowerCase()) || names[0];
  await refresh();
  setInterval(() => { if (document.getElementById("live").checked) refresh({ background: true, live: true }); }, 2000);
}

export function selectNamespace(name) {
  state.ns = name; state.sel = { kind: "namespace", path: null }; state.rules = {};
  refresh();
}

export function select(kind, path, tab) {
  state.sel = { kind, path };
  state.tab = tab || "overview";
  renderTree();
  renderMain();
  document.getElementById("main").focus();
  if (kind === "subscription" || kind === "rule") refresh({ live: true });
}

// ---------------------------------------------------------------- refresh

// background: the live poll (skipped while another refresh runs, errors not shown);
// live: only the [data-live] parts of the view shown are replaced (forms keep what is typed
// in them); full: an action changed the view, which is built anew.
let busy = false;
export async function refresh({ background = false, live = false, full = false } = {}) {
  if (busy && background) return;
  busy = true;
  try {
    state.namespaces = await op("namespace_list");
    if (!state.namespaces.some((n) => n.name === state.ns) && state.namespaces.length) {
      state.ns = state.namespaces[0].name;
    }
    state.overview = state.ns ? await op("overview", { name: state.ns }) : null;
    if (!background) await loadRules();  // rule reads cost management credits: not every 2 s
    noteThrottling();
    renderHeader();
    renderTree();
    renderMain(live && !full);
  } catch (e) {
    if (e.status === 401) lostToken(e.message);
    else if (!background) toast(e.message, true);
  } finally {
    busy = false;
  }
}

async function loadRules() {
  const subs = (state.overview ? state.overview.entities : []).filter((e) => e.kind === "subscription");
  const rules = {};
  for (const s of subs) {
    if (state.sel.path && (state.sel.path === s.path || state.sel.path.startsWith(`${s.path}/rules/`)
        || state.rules[s.path])) {
      const [topic] = s.path.split("/subscriptions/");
      try { rules[s.path] = await op("rule_list", { namespace: state.ns, topic, name: s.description.name }); }
      catch { rules[s.path] = []; }
    }
  }
  state.rules = rules;
}

function noteThrottling() {
  const c = state.overview && state.overview.credits;
  if (!c) return;
  if (state.prevThrottled !== null && c.throttled_requests > state.prevThrottled) state.throttledAt = Date.now();
  state.prevThrottled = c.throttled_requests;
}

export function throttledNow() {
  const c = state.overview && state.overview.credits;
  return !!c && (Date.now() - state.throttledAt < 5000 || c.remaining === 0);
}

function renderHeader() {
  const sel = document.getElementById("ns");
  const names = state.namespaces.map((n) => n.name);
  if ([...sel.options].map((o) => o.value).join() !== names.join()) {
    sel.replaceChildren(...names.map((n) => h("option", { value: n }, n)));
  }
  sel.value = state.ns;
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  renderClock();
}

// The namespace's clock (time travel), when the daemon reports one in the overview: shown in
// the header's #clock. Nothing to show from a daemon without it.
function renderClock() {
  const el = document.getElementById("clock");
  const clock = state.overview && (state.overview.clock || state.overview.namespace.clock);
  el.hidden = !clock;
  if (clock) el.textContent = `clock ${clock.now_utc || clock.now || JSON.stringify(clock)}`;
}

// ---------------------------------------------------------------- the tree

function counts(d) {
  const b = [];
  if (d.active_message_count !== undefined) b.push(h("span", { class: "badge", title: "active" }, String(d.active_message_count)));
  if (d.dead_letter_message_count) b.push(h("span", { class: "badge dlq", title: "dead-lettered" }, `DLQ ${d.dead_letter_message_count}`));
  if (d.availability_status && d.availability_status !== "Available") b.push(h("span", { class: "badge bad" }, d.availability_status));
  return h("span", { class: "badges" }, ...b);
}

function item(kind, path, label, d) {
  const current = state.sel.kind === kind && state.sel.path === path;
  return h("li", {}, h("button", {
    class: "item", "data-kind": kind, "data-path": path, "aria-current": String(current),
    onclick: () => select(kind, path),
  }, h("span", {}, label), d ? counts(d) : ""));
}

function visible(path) { return !state.filter || path.toLowerCase().includes(state.filter); }

export function entities(kind) {
  return state.overview ? state.overview.entities.filter((e) => e.kind === kind) : [];
}

function renderTree() {
  const nav = document.getElementById("tree");
  if (!state.overview) { nav.replaceChildren(); return; }
  const queues = entities("queue").filter((e) => visible(e.path));
  const subs = entities("subscription");
  const topics = entities("topic").filter((t) => visible(t.path)
    || subs.some((s) => s.path.startsWith(`${t.path}/`) && visible(s.path)));
  const focused = nav.contains(document.activeElement) ? document.activeElement : null;
  const again = focused && [focused.dataset.kind, focused.dataset.path];
  nav.replaceChildren(
    h("ul", {}, item("namespace", null, `Namespace ${state.ns}`, null)),
    h("h2", {}, `Queues (${queues.length})`),
    h("ul", {}, ...queues.map((q) => item("queue", q.path, q.path, q.description))),
    h("h2", {}, `Topics (${topics.length})`),
    h("ul", {}, ...topics.map((t) => topicItem(t, subs))),
  );
  if (again) {
    const same = [...nav.querySelectorAll("button.item")].find((b) => b.dataset.kind === again[0] && (b.dataset.path || "") === (again[1] || ""));
    if (same) same.focus();
  }
}

function topicItem(t, subs) {
  const mine = subs.filter((s) => s.path.startsWith(`${t.path}/subscriptions/`));
  const li = item("topic", t.path, t.path, t.description);
  li.append(h("ul", {}, ...mine.map((s) => {
    const sub = item("subscription", s.path, s.description.name, s.description);
    const rules = state.rules[s.path] || [];
    if (rules.length) {
      sub.append(h("ul", {}, ...rules.map((r) => item("rule", `${s.path}/rules/${r.name}`, `rule ${r.name}`, null))));
    }
    return sub;
  })));
  return li;
}

// ---------------------------------------------------------------- the main panel

// What the main panel shows; a live refresh of the same view only replaces its
// [data-live] parts (counts, tables), never a form being filled in.
let shown = null;
export function renderMain(liveOnly = false) {
  const main = document.getElementById("main");
  if (!state.overview) return;
  let nodes = state.sel.kind === "namespace" ? namespaceView() : entityView(state);
  if (!nodes) { state.sel = { kind: "namespace", path: null }; nodes = namespaceView(); }
  const key = `${state.ns}|${state.sel.kind}|${state.sel.path}|${state.tab}`;
  if (liveOnly && key === shown) {
    const fresh = h("div", {}, ...nodes);
    for (const el of fresh.querySelectorAll("[data-live]")) {
      const old = main.querySelector(`[data-live="${el.dataset.live}"]`);
      if (old) old.replaceWith(el);
    }
    return;
  }
  shown = key;
  main.replaceChildren(...nodes);
}
onRerender(() => { shown = null; renderMain(); });

function namespaceView() {
  const o = state.overview;
  const ns = o.namespace;
  return [
    h("h2", { class: "title" }, `Namespace ${ns.name}`),
    live("summary", cards([["SKU", ns.sku], ["Queues", ns.queue_count], ["Topics", ns.topic_count],
      ["Partitioned", ns.partitioned_entity_count], ["Max message", `${ns.max_message_size_in_kilobytes} KB`]])),
    creditsSection(o.credits),
    pairingSection(o.pairing),
    faultsSection(o.faults),
    h("h3", {}, "Entities"),
    live("entities", entitiesTable()),
    createEntityForm(),
  ];
}

function live(key, ...els) { return h("div", { "data-live": key }, ...els); }

function creditsSection(c) {
  const throttled = throttledNow();
  const consumed = c.consumed.this_period || {};
  return h("section", { id: "throttling", "aria-label": "Throttling" },
    live("throttling", h("h3", {}, "Throttling ", h("span", { class: `badge ${throttled ? "bad" : "ok"}`, id: "throttle-state" },
      throttled ? "Throttled" : "Not throttled")),
    cards([
      ["Credits / s", c.credits_per_second ? c.credits_per_second : "unlimited"],
      ["Remaining", c.remaining === null ? "∞" : c.remaining],
      ["Throttled requests", c.throttled_requests],
      ["Requests served", c.requests_served],
      ["Used now (data/mgmt/filter)", `${consumed.data || 0}/${consumed.management || 0}/${consumed.filter || 0}`],
    ])),
    h("form", { onsubmit: (e) => { e.preventDefault(); setCredits(e.target); } },
      field("Credits per second (0: unlimited)", h("input", { name: "cps", type: "number", min: "0", value: c.credits_per_second || 0 })),
      h("button", { class: "b" }, "Set throttling")),
  );
}

function setCredits(form) {
  const n = Number(form.cps.value);
  run(`credits per second set to ${n}`, () => op("namespace_update", { name: state.ns, credits_per_second: n }));
}

function pairingSection(p) {
  if (!p) return live("pairing", h("section", { id: "pairing" }, h("h3", {}, "Pairing"), h("p", { class: "muted" }, "Not paired (sbctl namespace pair).")));
  const rows = Object.entries(p).filter(([, v]) => typeof v !== "object" || v === null)
    .map(([k, v]) => [k, String(v)]);
  const backlog = Array.isArray(p.backlog_queues) ? p.backlog_queues : [];
  return live("pairing", h("section", { id: "pairing" }, h("h3", {}, "Pairing"),
    table(["Setting", "Value"], rows),
    backlog.length ? table(Object.keys(backlog[0]), backlog.map((b) => Object.values(b).map(String))) : ""));
}

function faultsSection(faults) {
  const rows = faults.map((f) => [f.id, f.entity || "(every entity)", (f.partitions || []).join(", ") || "all",
    f.kind, h("button", { class: "b", onclick: () => run(`fault ${f.id} cleared`, () => op("fault_clear", { namespace: state.ns, ids: [f.id] })) }, `Clear ${f.id}`)]);
  const names = [...entities("queue"), ...entities("topic")].map((e) => e.path);
  return h("section", { id: "faults", "aria-label": "Fault injection" },
    live("faults", h("div", {}, h("h3", {}, "Fault injection ", h("span", { class: `badge ${faults.length ? "bad" : "ok"}`, id: "fault-state" }, faults.length ? `${faults.length} on` : "off")),
    faults.length ? table(["Id", "Entity", "Partitions", "Kind", ""], rows, { id: "faults-table" }) : "")),
    h("form", { id: "fault-form", onsubmit: (e) => { e.preventDefault(); addFault(e.target); } },
      field("Entity", h("select", { name: "entity" }, h("option", { value: "" }, "(every entity)"), ...names.map((n) => h("option", { value: n }, n)))),
      field("Partitions (e.g. 0,3)", h("input", { name: "partitions", size: 8 })),
      field("Kind", h("select", { name: "kind" }, h("option", {}, "unavailable"), h("option", {}, "slow"))),
      field("Latency ms (slow)", h("input", { name: "latency", type: "number", min: "1", size: 6 })),
      h("button", { class: "b" }, "Inject fault"),
      faults.length ? h("button", { type: "button", class: "b", onclick: () => run("faults cleared", () => op("fault_clear", { namespace: state.ns })) }, "Clear all") : ""),
  );
}

function addFault(form) {
  const args = { namespace: state.ns, kind: form.kind.value };
  if (form.entity.value) args.entity = form.entity.value;
  const parts = form.partitions.value.split(",").map((s) => s.trim()).filter(Boolean).map(Number);
  if (parts.length) args.partitions = parts;
  if (form.latency.value) args.latency_ms = Number(form.latency.value);
  run("fault injected", () => op("fault_add", args));
}

function entitiesTable() {
  const rows = state.overview.entities.filter((e) => visible(e.path)).map((e) => {
    const d = e.description;
    return { cells: [e.kind, e.path, d.status, d.active_message_count ?? "", d.scheduled_message_count ?? "",
      d.deferred_message_count ?? "", d.dead_letter_message_count ?? "", d.transfer_dead_letter_message_count ?? "",
      d.size_in_bytes !== undefined ? fmtBytes(d.size_in_bytes) : "", d.availability_status],
    onclick: () => select(e.kind, e.path) };
  });
  return table(["Kind", "Path", "Status", "Active", "Scheduled", "Deferred", "Dead-lettered", "Transfer DLQ", "Size", "Availability"], rows, { id: "entities" });
}

function createEntityForm() {
  return h("section", {}, h("h3", {}, "Create a queue or topic"),
    h("form", { id: "create-entity", class: "stack", onsubmit: (e) => { e.preventDefault(); createEntity(e.target); } },
      field("Kind", h("select", { name: "kind" }, h("option", {}, "queue"), h("option", {}, "topic"))),
      field("Name", h("input", { name: "name", required: true })),
      field("Options (JSON, e.g. {\"enable_partitioning\": true, \"lock_duration\": \"PT30S\"})",
        h("textarea", { name: "options", rows: 3 }, "{}"), "wide"),
      h("div", {}, h("button", { class: "b primary" }, "Create"))));
}

function createEntity(form) {
  let options;
  try { options = JSON.parse(form.options.value || "{}"); } catch (e) { toast(`options: ${e.message}`, true); return; }
  const kind = form.kind.value, name = form.name.value.trim();
  run(`${kind} ${name} created`, async () => {
    await op(`${kind}_create`, { namespace: state.ns, name, options });
    state.sel = { kind, path: name };
  });
}

export { fmtTime, confirmText };
start();
