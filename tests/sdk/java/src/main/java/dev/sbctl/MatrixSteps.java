package dev.sbctl;

import static dev.sbctl.SdkTest.check;
import static dev.sbctl.SdkTest.receive;
import static dev.sbctl.SdkTest.text;

import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusException;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusMessageBatch;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.ServiceBusTransactionContext;
import com.azure.messaging.servicebus.models.CompleteOptions;
import com.azure.messaging.servicebus.models.SubQueue;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Date;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.qpid.proton.amqp.UnsignedByte;
import org.apache.qpid.proton.amqp.UnsignedInteger;
import org.apache.qpid.proton.amqp.UnsignedLong;
import org.apache.qpid.proton.amqp.UnsignedShort;

/**
 * The rows of the SDK scenario matrix the other steps do not cover (tests/integration/
 * test_amqp_sdk_java.py checks the report): every message field, every application property type
 * (the class the SDK hands back), paging peek over a partitioned queue, abandon to delivery count 2
 * and the max delivery count, TTL expiry to the DLQ, lock expiry, the batch size limit, and
 * scheduling inside a transaction (refused; a send with ScheduledEnqueueTime is the transactional
 * way) plus deferred messages settled in a transaction (commit and rollback).
 *
 * <p>Queues, made by the wrapper: m-parted (partitioned), m-retries (max delivery count 3),
 * m-expiring (dead-lettering on expiry), m-short (lock duration 5 s), m-fields, m-types, m-tx.
 * The waits (lock expiry, TTL, the scheduled message) overlap the other steps.
 */
final class MatrixSteps {
    private MatrixSteps() {}

    static Map<String, Object> run(String cs) {
        ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(cs);
        Map<String, Object> out = new LinkedHashMap<>();
        // Started first, checked last: a lock left to expire, a message left to expire.
        ServiceBusSenderClient shortSender = builder.sender().queueName("m-short").buildClient();
        shortSender.sendMessage(new ServiceBusMessage("lock-me"));
        shortSender.close();
        ServiceBusReceiverClient shortReceiver = builder.receiver().queueName("m-short").disableAutoComplete()
            .maxAutoLockRenewDuration(Duration.ZERO).buildClient();
        ServiceBusReceivedMessage locked = receive(shortReceiver, 1).get(0);
        long lockedAt = System.nanoTime();
        ServiceBusSenderClient expiring = builder.sender().queueName("m-expiring").buildClient();
        expiring.sendMessage(new ServiceBusMessage("short-lived").setTimeToLive(Duration.ofSeconds(1)));
        expiring.close();
        OffsetDateTime due = OffsetDateTime.now(ZoneOffset.UTC).plusSeconds(2).withNano(0);
        ServiceBusSenderClient fieldsSender = builder.sender().queueName("m-fields").buildClient();
        fieldsSender.sendMessage(allFields(due));
        fieldsSender.close();

        out.put("property_types", propertyTypes(builder));
        out.put("partitioned_peek", partitionedPeek(builder));
        out.put("retries", retries(builder));
        out.put("transaction_schedule", transactionSchedule(builder));
        out.put("batch_limit", batchLimit(builder));
        out.put("fields", receivedFields(builder));
        out.put("ttl_expiry", ttlExpiry(builder));
        out.put("lock_expiry", lockExpiry(builder, shortReceiver, locked, lockedAt));
        return out;
    }

    private static ServiceBusMessage allFields(OffsetDateTime due) {
        ServiceBusMessage m = new ServiceBusMessage("fields")
            .setMessageId("mid-1").setCorrelationId("cid-1").setSubject("subj").setTo("to-1")
            .setReplyTo("reply-1").setReplyToSessionId("rs-1").setContentType("text/plain")
            .setTimeToLive(Duration.ofSeconds(90)).setPartitionKey("pk-1");
        m.setScheduledEnqueueTime(due);
        return m;
    }

    private static Map<String, Object> receivedFields(ServiceBusClientBuilder builder) {
        ServiceBusReceiverClient r = builder.receiver().queueName("m-fields").disableAutoComplete().buildClient();
        ServiceBusReceivedMessage m = receive(r, 1).get(0);
        r.complete(m);
        r.close();
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("message_id", m.getMessageId());
        f.put("correlation_id", m.getCorrelationId());
        f.put("subject", m.getSubject());
        f.put("to", m.getTo());
        f.put("reply_to", m.getReplyTo());
        f.put("reply_to_session_id", m.getReplyToSessionId());
        f.put("content_type", m.getContentType());
        f.put("time_to_live_s", m.getTimeToLive() == null ? null : m.getTimeToLive().getSeconds());
        f.put("partition_key", m.getPartitionKey());
        OffsetDateTime at = m.getScheduledEnqueueTime();
        f.put("scheduled_enqueue_time", at == null ? null : at.toInstant().toEpochMilli());
        f.put("enqueued_not_before_due", !m.getEnqueuedTime().isBefore(at == null ? m.getEnqueuedTime() : at));
        return f;
    }

    /** Every property type the SDK takes, sent and received: the class that comes back. */
    private static Map<String, Object> propertyTypes(ServiceBusClientBuilder builder) {
        ServiceBusMessage m = new ServiceBusMessage("types");
        Map<String, Object> p = m.getApplicationProperties();
        p.put("int", 7);
        p.put("long", 42L);
        p.put("short", (short) 12);
        p.put("byte", (byte) 5);
        p.put("float", 1.5f);
        p.put("double", 2.5d);
        p.put("bool", true);
        p.put("string", "text");
        p.put("char", 'c');
        p.put("uuid", UUID.fromString("0f8fad5b-d9cb-469f-a165-70867728950e"));
        p.put("date", new Date(1_772_600_767_891L));
        p.put("ubyte", UnsignedByte.valueOf((byte) 200));
        p.put("ushort", UnsignedShort.valueOf((short) 60000));
        p.put("uint", UnsignedInteger.valueOf(4_000_000_000L));
        p.put("ulong", UnsignedLong.valueOf(Long.MAX_VALUE));
        ServiceBusSenderClient s = builder.sender().queueName("m-types").buildClient();
        s.sendMessage(m);
        s.close();
        ServiceBusReceiverClient r = builder.receiver().queueName("m-types").disableAutoComplete().buildClient();
        ServiceBusReceivedMessage got = receive(r, 1).get(0);
        r.complete(got);
        r.close();
        Map<String, Object> types = new LinkedHashMap<>();
        for (Map.Entry<String, Object> e : got.getApplicationProperties().entrySet()) {
            Object v = e.getValue();
            String shown = v instanceof Date ? String.valueOf(((Date) v).getTime()) : String.valueOf(v);
            types.put(e.getKey(), List.of(v == null ? "null" : v.getClass().getSimpleName(), shown));
        }
        return types;
    }

    /** 40 messages over several partitions, paged 10 at a time with peekMessages(10). */
    private static Map<String, Object> partitionedPeek(ServiceBusClientBuilder builder) {
        ServiceBusSenderClient s = builder.sender().queueName("m-parted").buildClient();
        for (int k = 0; k < 8; k++) {
            List<ServiceBusMessage> group = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                group.add(new ServiceBusMessage("k" + k + "-" + i).setPartitionKey("key-" + k));
            }
            s.sendMessages(group);
        }
        s.close();
        ServiceBusReceiverClient r = builder.receiver().queueName("m-parted").buildClient();
        List<Integer> pages = new ArrayList<>();
        List<Long> seqs = new ArrayList<>();
        for (int page = 0; page < 10; page++) {
            int n = 0;
            for (ServiceBusReceivedMessage m : r.peekMessages(10)) {
                seqs.add(m.getSequenceNumber());
                n++;
            }
            if (n == 0) {
                break;
            }
            pages.add(n);
        }
        r.close();
        List<Long> partitions = new ArrayList<>();
        boolean ordered = true;
        for (int i = 0; i < seqs.size(); i++) {
            long pid = seqs.get(i) >> 48;
            if (!partitions.contains(pid)) {
                partitions.add(pid);
            }
            ordered &= i == 0 || seqs.get(i) > seqs.get(i - 1);
        }
        return Map.of("pages", pages, "seen", seqs.size(), "ascending", ordered, "partitions", partitions.size());
    }

    /** Abandoned twice: delivery count 2; the third abandon reaches the max delivery count (3). */
    private static Map<String, Object> retries(ServiceBusClientBuilder builder) {
        ServiceBusSenderClient s = builder.sender().queueName("m-retries").buildClient();
        s.sendMessage(new ServiceBusMessage("retry-me"));
        s.close();
        ServiceBusReceiverClient r = builder.receiver().queueName("m-retries").disableAutoComplete().buildClient();
        List<Long> counts = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            ServiceBusReceivedMessage m = receive(r, 1).get(0);
            counts.add(m.getDeliveryCount());
            r.abandon(m);
        }
        boolean mainEmpty = r.receiveMessages(1, Duration.ofSeconds(1)).stream().count() == 0;
        r.close();
        ServiceBusReceiverClient dlq = builder.receiver().queueName("m-retries").subQueue(SubQueue.DEAD_LETTER_QUEUE)
            .disableAutoComplete().buildClient();
        ServiceBusReceivedMessage dead = receive(dlq, 1).get(0);
        dlq.complete(dead);
        dlq.close();
        return Map.of("delivery_counts", counts, "main_empty", mainEmpty,
            "dead_letter_reason", String.valueOf(dead.getDeadLetterReason()), "body", text(dead));
    }

    private static Map<String, Object> ttlExpiry(ServiceBusClientBuilder builder) {
        ServiceBusReceiverClient r = builder.receiver().queueName("m-expiring").disableAutoComplete().buildClient();
        int live = (int) r.receiveMessages(1, Duration.ofSeconds(1)).stream().count();
        r.close();
        ServiceBusReceiverClient dlq = builder.receiver().queueName("m-expiring").subQueue(SubQueue.DEAD_LETTER_QUEUE)
            .disableAutoComplete().buildClient();
        ServiceBusReceivedMessage dead = receive(dlq, 1).get(0);
        dlq.complete(dead);
        dlq.close();
        return Map.of("received_after_expiry", live, "body", text(dead),
            "dead_letter_reason", String.valueOf(dead.getDeadLetterReason()));
    }

    private static Map<String, Object> lockExpiry(ServiceBusClientBuilder builder, ServiceBusReceiverClient r,
            ServiceBusReceivedMessage locked, long lockedAt) {
        long left = Duration.ofMillis(5500).toNanos() - (System.nanoTime() - lockedAt);
        if (left > 0) {
            try {
                Thread.sleep(left / 1_000_000);
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        }
        String error;
        try {
            r.complete(locked);
            error = "no error";
        } catch (ServiceBusException e) {
            error = String.valueOf(e.getReason());
        }
        ServiceBusReceivedMessage again = receive(r, 1).get(0);
        r.complete(again);
        r.close();
        return Map.of("complete_after_expiry", error, "body", text(again), "delivery_count", again.getDeliveryCount());
    }

    private static Map<String, Object> batchLimit(ServiceBusClientBuilder builder) {
        ServiceBusSenderClient s = builder.sender().queueName("m-fields").buildClient();
        ServiceBusMessageBatch batch = s.createMessageBatch();
        String added; // a message over the limit: the SDK's answer (false, or its exception)
        try {
            added = String.valueOf(batch.tryAddMessage(new ServiceBusMessage(new byte[300 * 1024])));
        } catch (ServiceBusException e) {
            added = String.valueOf(e.getReason());
        }
        String single;
        try {
            s.sendMessage(new ServiceBusMessage(new byte[300 * 1024]));
            single = "no error";
        } catch (ServiceBusException e) {
            single = String.valueOf(e.getReason());
        } catch (RuntimeException e) {
            single = e.getClass().getSimpleName();
        }
        s.close();
        return Map.of("max_size_in_bytes", batch.getMaxSizeInBytes(), "oversized_added", added,
            "oversized_send", single);
    }

    /**
     * scheduleMessage(msg, at, tx) is refused (sbctl cannot give a sequence number inside a
     * transaction); a send with ScheduledEnqueueTime inside one is scheduled at the commit and
     * dropped by a rollback. Deferred messages (settled through $management) in a transaction.
     */
    private static Map<String, Object> transactionSchedule(ServiceBusClientBuilder builder) {
        ServiceBusSenderClient s = builder.sender().queueName("m-tx").buildClient();
        ServiceBusReceiverClient r = builder.receiver().queueName("m-tx").disableAutoComplete().buildClient();
        OffsetDateTime later = OffsetDateTime.now().plusHours(1);
        ServiceBusTransactionContext tx = s.createTransaction();
        String refused;
        try {
            s.scheduleMessage(new ServiceBusMessage("schedule-in-tx"), later, tx);
            refused = "no error";
        } catch (RuntimeException e) {
            refused = String.valueOf(e.getMessage());
        }
        s.sendMessage(new ServiceBusMessage("sched-committed").setScheduledEnqueueTime(later), tx);
        s.commitTransaction(tx);
        ServiceBusTransactionContext tx2 = s.createTransaction();
        s.sendMessage(new ServiceBusMessage("sched-rolled-back").setScheduledEnqueueTime(later), tx2);
        s.rollbackTransaction(tx2);

        s.sendMessages(List.of(new ServiceBusMessage("d1"), new ServiceBusMessage("d2")));
        List<ServiceBusReceivedMessage> ds = receive(r, 2);
        check(SdkTest.bodies(ds).equals(List.of("d1", "d2")), "d1, d2");
        for (ServiceBusReceivedMessage m : ds) {
            r.defer(m);
        }
        ServiceBusReceivedMessage d1 = r.receiveDeferredMessage(ds.get(0).getSequenceNumber());
        ServiceBusTransactionContext tx3 = s.createTransaction();
        r.complete(d1, new CompleteOptions().setTransactionContext(tx3));
        List<String> during = peekStates(r);
        s.commitTransaction(tx3);
        ServiceBusReceivedMessage d2 = r.receiveDeferredMessage(ds.get(1).getSequenceNumber());
        ServiceBusTransactionContext tx4 = s.createTransaction();
        r.complete(d2, new CompleteOptions().setTransactionContext(tx4));
        s.rollbackTransaction(tx4);
        List<String> after = peekStates(r);
        r.close();
        s.close();
        return Map.of("schedule_refused", refused, "deferred_complete_during", during, "after", after);
    }

    private static List<String> peekStates(ServiceBusReceiverClient r) {
        List<String> out = new ArrayList<>();
        r.peekMessages(10, 1).forEach(m -> out.add(text(m) + ":" + m.getState()));
        return out;
    }
}
