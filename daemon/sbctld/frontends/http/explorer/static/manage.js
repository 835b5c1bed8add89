// Management: update and delete queues, topics and subscriptions; create subscriptions and
// rules (SQL or correlation filters, SQL actions); a rule's view. The service validates:
// its error message is shown as it is.
import { op, run, select } from "./app.js";
import { h, table, field, toast, confirmText } from "./ui.js";

const EDITABLE = ["lock_duration", "max_delivery_count", "default_message_time_to_live",
  "duplicate_detection_history_time_window", "dead_lettering_on_message_expiration",
  "dead_lettering_on_filter_evaluation_exceptions", "auto_delete_on_idle", "enable_batched_operations",
  "support_ordering", "forward_to", "forward_dead_lettered_messages_to", "user_metadata", "status",
  "max_size_in_megabytes"];

function names(e) {
  const [topic, sub] = e.path.split("/subscriptions/");
  return { topic, sub };
}

function editable(d) {
  const out = {};
  for (const k of EDITABLE) {
    if (d[k] !== undefined) out[k] = d[k];
    else if (d[`${k}_ms`] !== undefined) out[k] = d[`${k}_ms`];
  }
  return out;
}

function parseJson(text, what) {
  try { return JSON.parse(text || "{}"); } catch (err) { throw new Error(`${what}: ${err.message}`); }
}

export function manageView(state, e) {
  const out = [updateForm(state, e)];
  if (e.kind === "topic") out.push(subscriptionForm(state, e));
  if (e.kind === "subscription") out.push(...rulesSection(state, e));
  out.push(h("h3", {}, "Delete"), h("button", { class: "b danger", id: "delete-entity", onclick: () => deleteEntity(state, e) }, `Delete ${e.kind} ${e.path}…`));
  return out;
}

function updateForm(state, e) {
  const text = h("textarea", { name: "options", rows: 8 }, JSON.stringify(editable(e.description), null, 2));
  return h("form", { id: "update-form", class: "stack", onsubmit: (ev) => {
    ev.preventDefault();
    let options;
    try { options = parseJson(text.value, "settings"); } catch (err) { toast(err.message, true); return; }
    const { topic, sub } = names(e);
    const call = e.kind === "subscription"
      ? () => op("subscription_update", { namespace: state.ns, topic, name: sub, options })
      : () => op(`${e.kind}_update`, { namespace: state.ns, name: e.path, options });
    run(`${e.kind} ${e.path} updated`, call);
  } }, h("h3", { class: "wide" }, "Settings"), field("Settings (JSON; durations in milliseconds or ISO 8601)", text, "wide"),
  h("div", {}, h("button", { class: "b primary", id: "update" }, "Update")));
}

function deleteEntity(state, e) {
  if (!confirmText(`Delete ${e.kind} ${e.path} and every message in it?`, "delete")) { toast("delete cancelled"); return; }
  const { topic, sub } = names(e);
  const call = e.kind === "subscription"
    ? () => op("subscription_delete", { namespace: state.ns, topic, name: sub })
    : () => op(`${e.kind}_delete`, { namespace: state.ns, name: e.path });
  run(`${e.kind} ${e.path} deleted`, async () => { await call(); state.sel = { kind: "namespace", path: null }; });
}

// A filter from the form's kind and text: SQL expression, or a correlation filter as JSON.
function filterOf(kind, text) {
  if (kind === "none") return null;
  if (kind === "sql") return { type: "sql", sql_expression: text };
  if (kind === "false") return { type: "false" };
  return { type: "correlation", ...parseJson(text, "correlation filter") };
}

function filterFields(prefix) {
  return [
    field("Filter", h("select", { name: "fkind", id: `${prefix}-filter-kind` },
      h("option", { value: "sql" }, "SQL filter"), h("option", { value: "correlation" }, "Correlation filter (JSON)"),
      h("option", { value: "none" }, "Every message (TrueFilter)"), h("option", { value: "false" }, "No message (FalseFilter)"))),
    field("SQL expression, or correlation JSON (e.g. {\"subject\": \"red\", \"properties\": {\"region\": \"eu\"}})",
      h("textarea", { name: "ftext", id: `${prefix}-filter`, rows: 2 }), "wide"),
    field("SQL action (optional, e.g. SET priority = 'high')", h("input", { name: "action", id: `${prefix}-action` }), "wide"),
  ];
}

function subscriptionForm(state, e) {
  return h("section", {}, h("h3", {}, "Create a subscription"),
    h("form", { id: "subscription-form", class: "stack", onsubmit: (ev) => { ev.preventDefault(); createSubscription(state, e, ev.target); } },
      field("Name", h("input", { name: "name", id: "sub-name", required: true })),
      ...filterFields("sub"),
      field("Options (JSON)", h("textarea", { name: "options", rows: 2 }, "{}"), "wide"),
      h("div", {}, h("button", { class: "b primary", id: "create-subscription" }, "Create subscription"))));
}

function createSubscription(state, e, form) {
  let filter, options;
  try { filter = filterOf(form.fkind.value, form.ftext.value); options = parseJson(form.options.value, "options"); }
  catch (err) { toast(err.message, true); return; }
  const name = form.name.value.trim();
  const action = form.action.value.trim() || null;
  run(`subscription ${name} created`, async () => {
    await op("subscription_create", { namespace: state.ns, topic: e.path, name, options });
    if (filter || action) {
      try {
        // the filter replaces the rule $Default, as Azure's default rule description does
        await op("rule_delete", { namespace: state.ns, topic: e.path, subscription: name, name: "$Default" });
        await op("rule_create", { namespace: state.ns, topic: e.path, subscription: name, name: "$Default", filter, action });
      } catch (err) {
        await op("subscription_delete", { namespace: state.ns, topic: e.path, name });  // all or nothing
        throw err;
      }
    }
    state.sel = { kind: "subscription", path: `${e.path}/subscriptions/${name}` };
  });
}

function describeFilter(f) {
  if (f.type === "sql") return `SQL: ${f.sql_expression}`;
  if (f.type === "correlation") { const { type, ...rest } = f; return `Correlation: ${JSON.stringify(rest)}`; }
  return f.type === "true" ? "every message" : "no message";
}

function rulesSection(state, e) {
  const { topic, sub } = names(e);
  const rules = state.rules[e.path] || [];
  const rows = rules.map((r) => ({ cells: [r.name, describeFilter(r.filter), r.action || "",
    h("button", { class: "b danger", onclick: () => run(`rule ${r.name} deleted`, () => op("rule_delete", { namespace: state.ns, topic, subscription: sub, name: r.name })) }, `Delete ${r.name}`)],
  onclick: () => select("rule", `${e.path}/rules/${r.name}`) }));
  return [h("div", { "data-live": "rules" }, h("h3", {}, `Rules (${rules.length})`), table(["Name", "Filter", "Action", ""], rows, { id: "rules" })),
    h("form", { id: "rule-form", class: "stack", onsubmit: (ev) => { ev.preventDefault(); createRule(state, topic, sub, ev.target); } },
      field("Rule name", h("input", { name: "name", id: "rule-name", required: true })), ...filterFields("rule"),
      h("div", {}, h("button", { class: "b primary", id: "create-rule" }, "Create rule")))];
}

function createRule(state, topic, sub, form, replacing) {
  let filter;
  try { filter = filterOf(form.fkind.value, form.ftext.value); } catch (err) { toast(err.message, true); return; }
  const name = replacing ? replacing.name : form.name.value.trim();
  const action = form.action.value.trim() || null;
  const args = { namespace: state.ns, topic, subscription: sub, name };
  run(`rule ${name} ${replacing ? "replaced" : "created"}`, async () => {
    if (!replacing) { await op("rule_create", { ...args, filter, action }); return; }
    await op("rule_delete", args);
    try { await op("rule_create", { ...args, filter, action }); }
    catch (err) { await op("rule_create", { ...args, filter: replacing.filter, action: replacing.action }); throw err; }
  });
}

export function ruleView(state) {
  const [subPath, name] = state.sel.path.split("/rules/");
  const rule = (state.rules[subPath] || []).find((r) => r.name === name);
  if (!rule) return null;
  const [topic, sub] = subPath.split("/subscriptions/");
  const kind = rule.filter.type === "true" ? "none" : rule.filter.type;
  const { type, ...corr } = rule.filter;
  const text = kind === "sql" ? rule.filter.sql_expression : kind === "correlation" ? JSON.stringify(corr) : "";
  const form = h("form", { id: "rule-form", class: "stack", onsubmit: (ev) => { ev.preventDefault(); createRule(state, topic, sub, ev.target, rule); } },
    ...filterFields("rule"), h("div", {}, h("button", { class: "b primary", id: "replace-rule" }, "Replace rule")));
  form.fkind.value = kind; form.ftext.value = text; form.action.value = rule.action || "";
  return [h("h2", { class: "title" }, `Rule ${name} of ${subPath}`),
    table(["", ""], [["Filter", describeFilter(rule.filter)], ["Action", rule.action || "(none)"]], { id: "rule" }),
    form,
    h("button", { class: "b danger", id: "delete-rule", onclick: () => run(`rule ${name} deleted`, async () => {
      await op("rule_delete", { namespace: state.ns, topic, subscription: sub, name }); state.sel = { kind: "subscription", path: subPath };
    }) }, `Delete rule ${name}`)];
}
