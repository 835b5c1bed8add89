// The JavaScript SDK's ServiceBusAdministrationClient against sbctl's HTTP endpoint on the
// connection string's port; run by tests/integration/test_http_js_admin.py. Prints one JSON
// line of what it saw.
import { ServiceBusAdministrationClient } from "@azure/service-bus";

const [connectionString] = process.argv.slice(2);
const admin = new ServiceBusAdministrationClient(connectionString);
const names = async (iter) => {
  const out = [];
  for await (const item of iter) out.push(item.name ?? item.subscriptionName);
  return out;
};

const created = await admin.createQueue("js-orders", { maxDeliveryCount: 4, lockDuration: "PT30S" });
const queue = await admin.getQueue("js-orders");
queue.maxDeliveryCount = 6;
await admin.updateQueue(queue);
await admin.createTopic("js-events");
await admin.createSubscription("js-events", "js-all");
await admin.createRule("js-events", "js-all", "js-sql", { sqlExpression: "n > 1" });
await admin.createRule("js-events", "js-all", "js-corr", { correlationId: "c1", applicationProperties: { k: "v" } });
let conflict = null;
try {
  await admin.createQueue("js-orders");
} catch (err) {
  conflict = err.code ?? err.statusCode;
}
const seen = {
  created: [created.name, created.maxDeliveryCount, created.lockDuration],
  updated: (await admin.getQueue("js-orders")).maxDeliveryCount,
  exists: [await admin.queueExists("js-orders"), await admin.queueExists("js-none")],
  queues: await names(admin.listQueues()),
  topics: await names(admin.listTopics()),
  subscriptions: await names(admin.listSubscriptions("js-events")),
  rules: await names(admin.listRules("js-events", "js-all")),
  sqlRule: (await admin.getRule("js-events", "js-all", "js-sql")).filter.sqlExpression,
  runtime: (await admin.getQueueRuntimeProperties("js-orders")).totalMessageCount,
  namespace: (await admin.getNamespaceProperties()).name,
  conflict,
};
await admin.deleteRule("js-events", "js-all", "js-sql");
await admin.deleteTopic("js-events");
await admin.deleteQueue("js-orders");
seen.after = await names(admin.listQueues());
console.log(JSON.stringify(seen));
