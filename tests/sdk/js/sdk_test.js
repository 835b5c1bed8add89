// End-to-end test program: @azure/service-bus (on rhea) against a real sbctl daemon over AMQP.
//
// Run by tests/integration/test_amqp_sdk_js.py, which starts the daemon and creates the
// entities. Inputs (environment): SBCTL_CONNECTION_STRING, SBCTL_QUEUE (plain queue, empty),
// SBCTL_SESSION_QUEUE (session-enabled queue, empty).
// Output: one JSON object on stdout, {"ok": bool, "steps": {name: result}, "error": ...};
// exit code 0 only when every step did what the Service Bus semantics say.
"use strict";

const { ServiceBusClient } = require("@azure/service-bus");

const cs = process.env.SBCTL_CONNECTION_STRING;
const queue = process.env.SBCTL_QUEUE;
const sessionQueue = process.env.SBCTL_SESSION_QUEUE;
const steps = {};

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

function bodyText(m) {
  return typeof m.body === "string" ? m.body : Buffer.from(m.body).toString("utf8");
}

async function receiveN(receiver, n, maxWaitTimeInMs = 5000) {
  const got = [];
  const deadline = Date.now() + 15000;
  while (got.length < n && Date.now() < deadline) {
    const batch = await receiver.receiveMessages(n - got.length, { maxWaitTimeInMs });
    got.push(...batch);
  }
  return got;
}

async function run(client) {
  const sender = client.createSender(queue);

  // 1. send: one message with every settable property.
  await sender.sendMessages({
    body: "single",
    messageId: "js-1",
    correlationId: "corr-1",
    subject: "greeting",
    contentType: "text/plain",
    to: "someone",
    replyTo: "replies",
    timeToLive: 90000,
    applicationProperties: { n: 7, f: 2.5, ok: true, s: "text" },
  });
  steps.send = { sent: 1 };

  // 2. batch: three messages in one transfer (message format 0x80013700).
  const batch = await sender.createMessageBatch();
  for (const body of ["b1", "b2", "b3"]) {
    check(batch.tryAddMessage({ body, messageId: `js-${body}` }), `batch takes ${body}`);
  }
  await sender.sendMessages(batch);
  steps.batch = { count: batch.count, max_size_in_bytes: batch.maxSizeInBytes };

  // 3. scheduled send: one due in 2 s (must stay invisible until then), one cancelled.
  const due = new Date(Date.now() + 2000);
  const [schedSeq] = await sender.scheduleMessages({ body: "scheduled", messageId: "js-s" }, due);
  const [cancelSeq] = await sender.scheduleMessages(
    { body: "cancelled", messageId: "js-c" },
    new Date(Date.now() + 3600000),
  );
  await sender.cancelScheduledMessages(cancelSeq);
  steps.schedule = { sequence_number: Number(schedSeq), cancelled: Number(cancelSeq) };

  // 4. peek: everything visible, in order, without locking; the scheduled one is shown too.
  const peekReceiver = client.createReceiver(queue);
  const peeked = await peekReceiver.peekMessages(10, { fromSequenceNumber: undefined });
  await peekReceiver.close();
  steps.peek = peeked.map((m) => ({
    body: bodyText(m),
    sequence_number: Number(m.sequenceNumber),
    state: m.state,
  }));
  check(
    JSON.stringify(peeked.slice(0, 4).map(bodyText)) === JSON.stringify(["single", "b1", "b2", "b3"]),
    "peek shows the four sends in order",
  );

  // 5. receive (peek-lock) and complete the single message; check its properties came back.
  const receiver = client.createReceiver(queue, { receiveMode: "peekLock" });
  const [first] = await receiveN(receiver, 1);
  check(first && bodyText(first) === "single", "first received is 'single'");
  check(first.messageId === "js-1" && first.subject === "greeting", "message-id and subject");
  check(first.applicationProperties.n === 7 && first.applicationProperties.ok === true, "app props");
  check(first.deliveryCount === 0 && first.lockToken, "fresh lock");
  await receiver.completeMessage(first);
  steps.receive_complete = {
    body: bodyText(first),
    message_id: first.messageId,
    correlation_id: first.correlationId,
    application_properties: first.applicationProperties,
    sequence_number: Number(first.sequenceNumber),
    locked_until: first.lockedUntilUtc ? first.lockedUntilUtc.toISOString() : null,
  };

  // 6. abandon: b1 comes back with delivery count 1.
  const [b1] = await receiveN(receiver, 1);
  check(bodyText(b1) === "b1", "next is b1");
  await receiver.abandonMessage(b1, { why: "retry" });
  const [b1again] = await receiveN(receiver, 1);
  check(bodyText(b1again) === "b1", "abandoned b1 comes back first");
  check(b1again.deliveryCount === 1, `abandoned b1 delivery count 1 (got ${b1again.deliveryCount})`);
  steps.abandon = { delivery_count_after: b1again.deliveryCount };

  // 7. dead-letter b1 with reason and description; read it from the DLQ and complete it.
  await receiver.deadLetterMessage(b1again, {
    deadLetterReason: "bad-order",
    deadLetterErrorDescription: "total is negative",
  });
  const dlq = client.createReceiver(queue, { subQueueType: "deadLetter" });
  const [dead] = await receiveN(dlq, 1);
  check(dead && bodyText(dead) === "b1", "b1 is in the DLQ");
  check(dead.deadLetterReason === "bad-order", `DLQ reason (got ${dead.deadLetterReason})`);
  check(dead.deadLetterErrorDescription === "total is negative", "DLQ description");
  await dlq.completeMessage(dead);
  await dlq.close();
  steps.dead_letter = {
    reason: dead.deadLetterReason,
    description: dead.deadLetterErrorDescription,
  };

  // 8. receive the rest: b2, b3 now; the scheduled one once it is due.
  const rest = await receiveN(receiver, 2);
  check(JSON.stringify(rest.map(bodyText)) === JSON.stringify(["b2", "b3"]), "b2, b3");
  for (const m of rest) await receiver.completeMessage(m);
  const [sched] = await receiveN(receiver, 1, 6000);
  check(sched && bodyText(sched) === "scheduled", "the scheduled message arrives");
  const lateByMs = sched.enqueuedTimeUtc.getTime() - due.getTime();
  check(Date.now() >= due.getTime(), "scheduled not before it was due");
  await receiver.completeMessage(sched);
  steps.scheduled_receive = { enqueued_late_by_ms: lateByMs };
  await receiver.close();

  // 9. leave one message for the wrapper to cross-check through `sbctl peek -o json`.
  await sender.sendMessages({
    body: "left-for-cli",
    messageId: "js-left",
    subject: "cross",
    applicationProperties: { count: 3, name: "x", ratio: 2.5, flag: true },
  });
  await sender.close();

  // 10. session: send to two sessions, accept the next one, set and read its state, receive
  //     its messages in order, complete them; then the named other session.
  const ss = client.createSender(sessionQueue);
  await ss.sendMessages([
    { body: "a1", sessionId: "A" },
    { body: "b1", sessionId: "B" },
    { body: "a2", sessionId: "A" },
  ]);
  await ss.close();
  const sr = await client.acceptNextSession(sessionQueue, { maxAutoLockRenewalDurationInMs: 0 });
  check(sr.sessionId === "A", `next session is A (got ${sr.sessionId})`);
  await sr.setSessionState(Buffer.from("checkpoint-1"));
  const state = await sr.getSessionState();
  check(Buffer.from(state).toString() === "checkpoint-1", "session state round trip");
  const sessMsgs = await receiveN(sr, 2);
  check(JSON.stringify(sessMsgs.map(bodyText)) === JSON.stringify(["a1", "a2"]), "a1, a2");
  for (const m of sessMsgs) await sr.completeMessage(m);
  const lockedBefore = sr.sessionLockedUntilUtc;
  const renewed = await sr.renewSessionLock();
  await sr.close();
  const srB = await client.acceptSession(sessionQueue, "B");
  const [mb] = await receiveN(srB, 1);
  check(mb && bodyText(mb) === "b1" && mb.sessionId === "B", "session B gives b1");
  await srB.completeMessage(mb);
  await srB.close();
  steps.session = {
    session_id: "A",
    state: Buffer.from(state).toString(),
    received: sessMsgs.map(bodyText),
    locked_until: lockedBefore ? lockedBefore.toISOString() : null,
    renewed_until: renewed ? renewed.toISOString() : null,
    named_session: mb.sessionId,
  };
}

async function main() {
  const client = new ServiceBusClient(cs, { retryOptions: { maxRetries: 1, timeoutInMs: 20000 } });
  let ok = false;
  let error = null;
  try {
    await run(client);
    ok = true;
  } catch (e) {
    error = `${e && e.name}: ${e && e.message}`;
  } finally {
    try {
      await client.close();
    } catch (e) {
      error = error || `close: ${e.message}`;
    }
  }
  process.stdout.write(JSON.stringify({ ok, steps, error }) + "\n");
  process.exit(ok ? 0 : 1);
}

main();
