// A bounded end-to-end run of @azure/service-bus (rhea) against sbctl: node sb_smoke.mjs
// CONNECTION_STRING QUEUE SESSION_QUEUE prints what it saw as one JSON line.
import { ServiceBusClient } from "@azure/service-bus";

const [conn, queue, sessionQueue] = process.argv.slice(2);
const client = new ServiceBusClient(conn, { retryOptions: { maxRetries: 1, timeoutInMs: 20000 } });
const out = {};
try {
  const sender = client.createSender(queue);
  await sender.sendMessages({ body: "js-1", applicationProperties: { n: 5, s: "x" } });
  const batch = await sender.createMessageBatch();
  batch.tryAddMessage({ body: "js-2" });
  batch.tryAddMessage({ body: "js-3" });
  await sender.sendMessages(batch);
  const [seq] = await sender.scheduleMessages({ body: "later" }, new Date(Date.now() + 600000));
  out.scheduled = Number(seq) > 0;
  const receiver = client.createReceiver(queue);
  out.peek = (await receiver.peekMessages(10)).map((m) => m.body);
  const got = await receiver.receiveMessages(3, { maxWaitTimeInMs: 5000 });
  out.received = got.map((m) => m.body);
  out.props = got[0]?.applicationProperties;
  await receiver.abandonMessage(got[0]);
  await receiver.deadLetterMessage(got[1], { deadLetterReason: "bad", deadLetterErrorDescription: "very" });
  await receiver.completeMessage(got[2]);
  const again = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
  out.again = again.map((m) => [m.body, m.deliveryCount]);
  for (const m of again) await receiver.completeMessage(m);
  await sender.cancelScheduledMessages([seq]);
  await receiver.close();
  const dlq = client.createReceiver(queue, { subQueueType: "deadLetter" });
  const dead = await dlq.receiveMessages(1, { maxWaitTimeInMs: 5000 });
  out.dead = dead.map((m) => [m.body, m.deadLetterReason]);
  for (const m of dead) await dlq.completeMessage(m);
  await dlq.close();
  const ssender = client.createSender(sessionQueue);
  await ssender.sendMessages({ body: "s-1", sessionId: "S1" });
  const sr = await client.acceptNextSession(sessionQueue, { maxAutoLockRenewalDurationInMs: 0 });
  await sr.setSessionState("st");
  out.sessionId = sr.sessionId;
  out.state = String(await sr.getSessionState());
  const sm = await sr.receiveMessages(1, { maxWaitTimeInMs: 5000 });
  out.sessionMessages = sm.map((m) => m.body);
  for (const m of sm) await sr.completeMessage(m);
  await sr.close();
  await sender.close();
  await ssender.close();
  console.log(JSON.stringify(out));
} catch (e) {
  console.error("ERROR", e?.code, e?.message, JSON.stringify(out));
  process.exitCode = 1;
} finally {
  await client.close();
}
