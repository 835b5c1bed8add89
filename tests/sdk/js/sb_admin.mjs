// The JavaScript SDK's ServiceBusAdministrationClient against sbctl's HTTP endpoint on the
// connection string's port, then its messaging client over AMQP with TLS on the same port
// (the connection string without UseDevelopmentEmulator=true); run by
// tests/integration/test_amqp_sdk_js.py with the certificate in NODE_EXTRA_CA_CERTS. Prints
// one JSON line of what it saw.
import { ServiceBusAdministrationClient, ServiceBusClient } from "@azure/service-bus";

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
// The first rule given with the subscription (sent as its DefaultRuleDescription).
await admin.createSubscription("js-events", "js-blue", {
  defaultRuleOptions: {
    name: "BlueRule",
    filter: { sqlExpression: "Color = @color", sqlParameters: { "@color": "Blue" } },
    action: { sqlExpression: "SET Color = 'BlueProcessed'" },
  },
});
const blue = await admin.getRule("js-events", "js-blue", "BlueRule");
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
  defaultRule: {
    rules: await names(admin.listRules("js-events", "js-blue")),
    filter: [blue.filter.sqlExpression, blue.filter.sqlParameters],
    action: blue.action.sqlExpression,
  },
  overTls: await overTls(),
  sqlRouting: await sqlRouting(),
};
await admin.deleteRule("js-events", "js-all", "js-sql");
await admin.deleteTopic("js-events");
await admin.deleteQueue("js-orders");
seen.after = await names(admin.listQueues());
console.log(JSON.stringify(seen));

// AMQP over TLS: what a connection string without UseDevelopmentEmulator=true (or a host name
// with a credential) makes the SDK use. RuleManager adds a correlation rule whose properties
// are a number (rhea: uint), a Date (timestamp) and a boolean; only the matching message
// reaches the subscription.
async function overTls() {
  await admin.createSubscription("js-events", "js-typed");
  const client = new ServiceBusClient(connectionString.replace("UseDevelopmentEmulator=true;", ""));
  try {
    const rules = client.createRuleManager("js-events", "js-typed");
    await rules.deleteRule("$Default");
    const when = new Date(Date.UTC(2000, 0, 1));
    await rules.createRule("js-typed", { applicationProperties: { n: 2, ok: true, when } });
    let props = null;
    for await (const rule of rules.listRules()) {
      if (rule.name === "js-typed") props = rule.filter.applicationProperties;
    }
    const sender = client.createSender("js-events");
    await sender.sendMessages([
      { body: "miss", applicationProperties: { n: 3, ok: true, when: when.toISOString() } },
      { body: "hit", applicationProperties: { n: 2, ok: true, when: when.toISOString() } },
    ]);
    const receiver = client.createReceiver("js-events", "js-typed", { receiveMode: "receiveAndDelete" });
    const got = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
    const left = await receiver.peekMessages(5);
    return { props, received: got.map((m) => m.body), left: left.length };
  } finally {
    await client.close();
  }
}

// A subscription made by the administration client with a SQL rule only: a message sent to
// the topic reaches it when the filter matches, not otherwise.
async function sqlRouting() {
  await admin.createSubscription("js-events", "js-reds", {
    defaultRuleOptions: { name: "RedOnly", filter: { sqlExpression: "color = 'red'" } },
  });
  const client = new ServiceBusClient(connectionString);
  try {
    const sender = client.createSender("js-events");
    await sender.sendMessages([
      { body: "blue", applicationProperties: { color: "blue" } },
      { body: "red", applicationProperties: { color: "red" } },
    ]);
    const receiver = client.createReceiver("js-events", "js-reds", { receiveMode: "receiveAndDelete" });
    const got = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
    const left = await receiver.peekMessages(5);
    return { received: got.map((m) => m.body), left: left.length };
  } finally {
    await client.close();
  }
}
