// The rows of the SDK scenario matrix sdk_test.js's other steps do not cover (checked by
// tests/integration/test_amqp_sdk_js.py): every message field, application properties of every
// AMQP type rhea can express (sent as rhea typed values; one copy is left in m-types for the
// wrapper to read through `sbctl peek -o json`), paging peek over a partitioned queue, abandon to
// delivery count 2 and the max delivery count, TTL expiry to the DLQ, lock expiry, the batch size
// limit. (The JavaScript SDK has no transactions.)
//
// Queues, made by the wrapper: m-parted (partitioned), m-retries (max delivery count 3),
// m-expiring (dead-lettering on expiry), m-short (lock duration 5 s), m-fields, m-types.
// The waits (lock expiry, TTL, the scheduled message) overlap the other steps.
"use strict";

// rhea is the SDK's own AMQP stack (a dependency of @azure/core-amqp): its typed wrappers are
// how a JavaScript application sends long, short, float... rather than rhea's default guess.
const { types } = require("rhea");

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
    got.push(...(await receiver.receiveMessages(n - got.length, { maxWaitTimeInMs })));
  }
  return got;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function typedProperties() {
  return {
    int: types.wrap_int(-7),
    long: types.wrap_long(42),
    short: types.wrap_short(12),
    byte: types.wrap_byte(5),
    ubyte: types.wrap_ubyte(200),
    ushort: types.wrap_ushort(60000),
    uint: types.wrap_uint(4000000000),
    ulong: types.wrap_ulong(9007199254740991),
    float: types.wrap_float(1.5),
    double: types.wrap_double(2.5),
    bool: true,
    string: "text",
    symbol: types.wrap_symbol("sym"),
    timestamp: new Date(1772600767891),
    uuid: types.wrap_uuid(Buffer.from("0f8fad5bd9cb469fa16570867728950e", "hex")),
    binary: Buffer.from([0, 1, 254, 255]),
  };
}

function shown(v) {
  if (v instanceof Date) return ["Date", v.getTime()];
  // The SDK's convertDatesToNumbers copies a Buffer (binary, uuid) into a plain object of its
  // bytes, as it does against Azure: shown as those bytes.
  if (typeof v === "object" && v !== null) return ["object", Buffer.from(Object.values(v)).toString("hex")];
  return [typeof v, v];
}

async function propertyTypes(client) {
  const sender = client.createSender("m-types");
  await sender.sendMessages({ body: "types", applicationProperties: typedProperties() });
  await sender.sendMessages({ body: "types-for-cli", applicationProperties: typedProperties() });
  await sender.close();
  const receiver = client.createReceiver("m-types");
  const [got] = await receiveN(receiver, 1);
  check(got && bodyText(got) === "types", "the typed message arrives");
  await receiver.completeMessage(got);
  await receiver.close();
  const out = {};
  for (const [k, v] of Object.entries(got.applicationProperties)) out[k] = shown(v);
  return out;
}

async function partitionedPeek(client) {
  const sender = client.createSender("m-parted");
  for (let k = 0; k < 8; k++) {
    const group = [];
    for (let i = 0; i < 5; i++) group.push({ body: `k${k}-${i}`, partitionKey: `key-${k}` });
    await sender.sendMessages(group);
  }
  await sender.close();
  const receiver = client.createReceiver("m-parted");
  const pages = [];
  const seqs = [];
  for (let page = 0; page < 10; page++) {
    const got = await receiver.peekMessages(10);
    if (!got.length) break;
    pages.push(got.length);
    seqs.push(...got.map((m) => BigInt(m.sequenceNumber.toString())));
  }
  await receiver.close();
  const ascending = seqs.every((s, i) => i === 0 || s > seqs[i - 1]);
  const partitions = new Set(seqs.map((s) => s >> 48n)).size;
  return { pages, seen: seqs.length, ascending, partitions };
}

async function retries(client) {
  const sender = client.createSender("m-retries");
  await sender.sendMessages({ body: "retry-me" });
  await sender.close();
  const receiver = client.createReceiver("m-retries");
  const counts = [];
  for (let i = 0; i < 3; i++) {
    const [m] = await receiveN(receiver, 1);
    counts.push(m.deliveryCount);
    await receiver.abandonMessage(m);
  }
  const left = await receiver.receiveMessages(1, { maxWaitTimeInMs: 1000 });
  await receiver.close();
  const dlq = client.createReceiver("m-retries", { subQueueType: "deadLetter" });
  const [dead] = await receiveN(dlq, 1);
  await dlq.completeMessage(dead);
  await dlq.close();
  return {
    delivery_counts: counts,
    main_empty: left.length === 0,
    dead_letter_reason: dead.deadLetterReason,
    body: bodyText(dead),
  };
}

async function batchLimit(client) {
  const sender = client.createSender("m-fields");
  const batch = await sender.createMessageBatch();
  const added = batch.tryAddMessage({ body: Buffer.alloc(300 * 1024) });
  let single = "no error";
  try {
    await sender.sendMessages({ body: Buffer.alloc(300 * 1024) });
  } catch (e) {
    single = e.code || e.name;
  }
  await sender.close();
  return { max_size_in_bytes: batch.maxSizeInBytes, oversized_added: added, oversized_send: single };
}

async function receivedFields(client) {
  const receiver = client.createReceiver("m-fields");
  const [m] = await receiveN(receiver, 1);
  await receiver.completeMessage(m);
  await receiver.close();
  const at = m.scheduledEnqueueTimeUtc;
  return {
    message_id: m.messageId,
    correlation_id: m.correlationId,
    subject: m.subject,
    to: m.to,
    reply_to: m.replyTo,
    reply_to_session_id: m.replyToSessionId,
    content_type: m.contentType,
    time_to_live_ms: m.timeToLive,
    partition_key: m.partitionKey,
    scheduled_enqueue_time: at ? at.getTime() : null,
    enqueued_not_before_due: Boolean(at) && m.enqueuedTimeUtc.getTime() >= at.getTime(),
  };
}

async function ttlExpiry(client) {
  const receiver = client.createReceiver("m-expiring");
  const live = await receiver.receiveMessages(1, { maxWaitTimeInMs: 1000 });
  await receiver.close();
  const dlq = client.createReceiver("m-expiring", { subQueueType: "deadLetter" });
  const [dead] = await receiveN(dlq, 1);
  await dlq.completeMessage(dead);
  await dlq.close();
  return { received_after_expiry: live.length, body: bodyText(dead), dead_letter_reason: dead.deadLetterReason };
}

async function lockExpiry(receiver, locked, lockedAt) {
  await sleep(Math.max(0, 5500 - (Date.now() - lockedAt)));
  let error = "no error";
  try {
    await receiver.completeMessage(locked);
  } catch (e) {
    error = e.code || e.name;
  }
  const [again] = await receiveN(receiver, 1);
  await receiver.completeMessage(again);
  await receiver.close();
  return { complete_after_expiry: error, body: bodyText(again), delivery_count: again.deliveryCount };
}

async function matrix(client) {
  // Started first, checked last: a lock left to expire, a message left to expire, one scheduled.
  const shortSender = client.createSender("m-short");
  await shortSender.sendMessages({ body: "lock-me" });
  await shortSender.close();
  const shortReceiver = client.createReceiver("m-short", { maxAutoLockRenewalDurationInMs: 0 });
  const [locked] = await receiveN(shortReceiver, 1);
  const lockedAt = Date.now();
  const expiring = client.createSender("m-expiring");
  await expiring.sendMessages({ body: "short-lived", timeToLive: 1000 });
  await expiring.close();
  const due = new Date(Math.floor(Date.now() / 1000) * 1000 + 2000);
  const fields = client.createSender("m-fields");
  await fields.sendMessages({
    body: "fields",
    messageId: "mid-1",
    correlationId: "cid-1",
    subject: "subj",
    to: "to-1",
    replyTo: "reply-1",
    replyToSessionId: "rs-1",
    contentType: "text/plain",
    timeToLive: 90000,
    partitionKey: "pk-1",
    scheduledEnqueueTimeUtc: due,
  });
  await fields.close();

  const out = {};
  out.property_types = await propertyTypes(client);
  out.partitioned_peek = await partitionedPeek(client);
  out.retries = await retries(client);
  out.batch_limit = await batchLimit(client);
  out.fields = await receivedFields(client);
  out.fields_due = due.getTime();
  out.ttl_expiry = await ttlExpiry(client);
  out.lock_expiry = await lockExpiry(shortReceiver, locked, lockedAt);
  return out;
}

module.exports = { check, bodyText, receiveN, matrix };
