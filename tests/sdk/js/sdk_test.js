// End-to-end test program: @azure/service-bus (on rhea) against a real sbctl daemon over AMQP.
//
// Run by tests/integration/test_amqp_sdk_js.py, which starts the daemon and creates the
// entities. Inputs (environment): SBCTL_CONNECTION_STRING, SBCTL_QUEUE (plain queue, empty),
// SBCTL_SESSION_QUEUE (session-enabled queue, empty), SBCTL_WORK_QUEUE (plain queue, empty),
// SBCTL_TOPIC and SBCTL_SUBSCRIPTION (a topic and one subscription with the default rule),
// SBCTL_CLI_QUEUE (holds one message "from-cli" sent by `sbctl send` without a message id),
// SBCTL_BULK_QUEUE (plain queue, empty), and the m-* queues matrix.js names.
// Output: one JSON object on stdout, {"ok": bool, "steps": {name: result}, "error": ...};
// exit code 0 only when every step did what the Service Bus semantics say.
"use strict";

const { ServiceBusClient } = require("@azure/service-bus");

const cs = process.env.SBCTL_CONNECTION_STRING;
const queue = process.env.SBCTL_QUEUE;
const sessionQueue = process.env.SBCTL_SESSION_QUEUE;
const steps = {};

const { check, bodyText, receiveN, matrix } = require("./matrix");

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

// More of what applications do: topics, deferral, lock renewal, receive-and-delete, the
// streaming subscribe() API, and the error codes the SDK maps broker errors to.
async function more(client) {
  const work = process.env.SBCTL_WORK_QUEUE;
  const topic = process.env.SBCTL_TOPIC;
  const subscription = process.env.SBCTL_SUBSCRIPTION;

  // topic -> subscription
  const ts = client.createSender(topic);
  await ts.sendMessages({ body: "event-1", subject: "created" });
  await ts.close();
  const tr = client.createReceiver(topic, subscription);
  const [ev] = await receiveN(tr, 1);
  check(ev && bodyText(ev) === "event-1" && ev.subject === "created", "subscription gets event-1");
  await tr.completeMessage(ev);
  await tr.close();
  steps.topic = { body: bodyText(ev) };

  // defer, then receive the deferred message by sequence number; renew a lock
  const ws = client.createSender(work);
  await ws.sendMessages([{ body: "w1" }, { body: "w2" }]);
  const wr = client.createReceiver(work);
  const [w1] = await receiveN(wr, 1);
  check(bodyText(w1) === "w1", "w1 first");
  await wr.deferMessage(w1);
  const [w2] = await receiveN(wr, 1);
  check(bodyText(w2) === "w2", "w2 next (w1 deferred)");
  const before = w2.lockedUntilUtc.getTime();
  await new Promise((r) => setTimeout(r, 20));
  const renewed = await wr.renewMessageLock(w2);
  check(renewed.getTime() >= before, "renewed lock does not end earlier");
  await wr.completeMessage(w2);
  const [deferred] = await wr.receiveDeferredMessages(w1.sequenceNumber);
  check(deferred && bodyText(deferred) === "w1", "the deferred w1 by sequence number");
  await wr.completeMessage(deferred);
  await wr.close();
  steps.defer_renew = { deferred: bodyText(deferred), renewed: renewed > 0 };

  // receive-and-delete
  await ws.sendMessages({ body: "w3" });
  const rd = client.createReceiver(work, { receiveMode: "receiveAndDelete" });
  const [w3] = await receiveN(rd, 1);
  check(w3 && bodyText(w3) === "w3", "receive-and-delete gets w3");
  await rd.close();
  steps.receive_and_delete = { body: bodyText(w3) };

  // subscribe(): the streaming receiver most applications use, auto-completing
  const bodies = ["s1", "s2", "s3", "s4", "s5"];
  await ws.sendMessages(bodies.map((body) => ({ body })));
  await ws.close();
  const sr = client.createReceiver(work);
  const seen = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`subscribe saw only ${seen}`)), 15000);
    sr.subscribe(
      {
        async processMessage(m) {
          seen.push(bodyText(m));
          if (seen.length === bodies.length) {
            clearTimeout(timer);
            resolve();
          }
        },
        async processError(args) {
          clearTimeout(timer);
          reject(args.error);
        },
      },
      { autoCompleteMessages: true, maxConcurrentCalls: 1 },
    );
  });
  await new Promise((r) => setTimeout(r, 300)); // the last auto-complete goes out
  await sr.close();
  check(JSON.stringify(seen) === JSON.stringify(bodies), `subscribe saw ${seen}`);
  steps.subscribe = { received: seen };

  // what the CLI sent before the program started (no message id): received and completed
  const cliQueue = process.env.SBCTL_CLI_QUEUE;
  const cr = client.createReceiver(cliQueue);
  const [fromCli] = await receiveN(cr, 1);
  check(fromCli && bodyText(fromCli) === "from-cli", "the CLI's message arrives");
  await cr.completeMessage(fromCli);
  await cr.close();
  steps.from_cli = {
    body: bodyText(fromCli),
    subject: fromCli.subject,
    application_properties: fromCli.applicationProperties,
    has_message_id: Boolean(fromCli.messageId),
  };

  // errors, as the SDK reports them
  const errors = {};
  try {
    const nope = client.createSender("no-such-queue");
    await nope.sendMessages({ body: "x" });
    errors.not_found = "no error";
  } catch (e) {
    errors.not_found = e.code;
  }
  const sessionQueue = process.env.SBCTL_SESSION_QUEUE;
  const hs = client.createSender(sessionQueue);
  await hs.sendMessages({ body: "held", sessionId: "H" });
  await hs.close();
  const holder = await client.acceptSession(sessionQueue, "H");
  try {
    await client.acceptSession(sessionQueue, "H", { maxAutoLockRenewalDurationInMs: 0 });
    errors.session_taken = "no error";
  } catch (e) {
    errors.session_taken = e.code;
  }
  const [held] = await receiveN(holder, 1);
  await holder.completeMessage(held);
  await holder.close();
  steps.errors = errors;
  check(errors.not_found === "MessagingEntityNotFound", `not found code ${errors.not_found}`);
  check(errors.session_taken === "SessionCannotBeLocked", `session taken code ${errors.session_taken}`);
}

// Sizes: a 200 KB message (split over several AMQP frames both ways), then a batch filled to
// the SDK's size limit on the same link, all received and completed.
async function volume(client) {
  const bulk = process.env.SBCTL_BULK_QUEUE;
  const sender = client.createSender(bulk);
  const receiver = client.createReceiver(bulk);
  const big = Buffer.alloc(200 * 1024);
  for (let i = 0; i < big.length; i++) big[i] = (i * 31) & 0xff;
  await sender.sendMessages({ body: big, messageId: "big" });
  const [large] = await receiveN(receiver, 1);
  check(large && Buffer.from(large.body).equals(big), "the 200 KB body comes back intact");
  await receiver.completeMessage(large);
  const batch = await sender.createMessageBatch();
  let n = 0;
  while (batch.tryAddMessage({ body: Buffer.alloc(1000, n & 0xff), messageId: `bulk-${n}` })) n++;
  await sender.sendMessages(batch);
  await sender.close();
  let got = 0;
  const deadline = Date.now() + 30000;
  while (got < n && Date.now() < deadline) {
    const ms = await receiver.receiveMessages(100, { maxWaitTimeInMs: 3000 });
    for (const m of ms) await receiver.completeMessage(m);
    got += ms.length;
  }
  await receiver.close();
  check(got === n, `the whole batch received: ${got} of ${n}`);
  steps.volume = { large_bytes: big.length, batch: n, received: got };
}

async function main() {
  const client = new ServiceBusClient(cs, { retryOptions: { maxRetries: 1, timeoutInMs: 20000 } });
  let ok = false;
  let error = null;
  try {
    await run(client);
    await more(client);
    await volume(client);
    const matrixStart = Date.now();
    steps.matrix = await matrix(client);
    steps.matrix_ms = Date.now() - matrixStart;
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
