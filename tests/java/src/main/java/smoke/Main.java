package smoke;

import com.azure.core.amqp.AmqpRetryOptions;
import com.azure.messaging.servicebus.*;
import com.azure.messaging.servicebus.models.*;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.*;

/**
 * A bounded end-to-end run of azure-messaging-servicebus (Java, proton-j) against sbctl:
 * java smoke.Main CONNECTION_STRING QUEUE SESSION_QUEUE prints what it saw on one line.
 */
public class Main {
    public static void main(String[] args) {
        String conn = args[0], queue = args[1], sessionQueue = args[2];
        Map<String, Object> out = new TreeMap<>();
        ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(conn)
            .retryOptions(new AmqpRetryOptions().setMaxRetries(1).setTryTimeout(Duration.ofSeconds(20)));
        try (ServiceBusSenderClient sender = builder.sender().queueName(queue).buildClient();
             ServiceBusReceiverClient receiver = builder.receiver().queueName(queue)
                 .disableAutoComplete().buildClient()) {
            sender.sendMessage(new ServiceBusMessage("j-1"));
            ServiceBusMessageBatch batch = sender.createMessageBatch();
            batch.tryAddMessage(new ServiceBusMessage("j-2"));
            batch.tryAddMessage(new ServiceBusMessage("j-3"));
            sender.sendMessages(batch);
            long seq = sender.scheduleMessage(new ServiceBusMessage("later"), OffsetDateTime.now().plusMinutes(10));
            List<String> peeked = new ArrayList<>();
            receiver.peekMessages(10).forEach(m -> peeked.add(m.getBody().toString()));
            out.put("peek", peeked);
            List<ServiceBusReceivedMessage> got = new ArrayList<>();
            receiver.receiveMessages(3, Duration.ofSeconds(5)).forEach(got::add);
            List<String> bodies = new ArrayList<>();
            got.forEach(m -> bodies.add(m.getBody().toString()));
            out.put("received", bodies);
            receiver.abandon(got.get(0));
            receiver.deadLetter(got.get(1), new DeadLetterOptions().setDeadLetterReason("bad"));
            receiver.complete(got.get(2));
            sender.cancelScheduledMessage(seq);
            ServiceBusTransactionContext tx = sender.createTransaction();
            sender.sendMessage(new ServiceBusMessage("in-tx"), tx);
            sender.commitTransaction(tx);
            ServiceBusTransactionContext rollback = sender.createTransaction();
            sender.sendMessage(new ServiceBusMessage("rolled-back"), rollback);
            sender.rollbackTransaction(rollback);
            List<String> after = new ArrayList<>();
            for (ServiceBusReceivedMessage m : receiver.receiveMessages(3, Duration.ofSeconds(5))) {
                after.add(m.getBody() + "/" + m.getDeliveryCount());
                receiver.complete(m);
            }
            out.put("after", after);
        }
        try (ServiceBusSenderClient s = builder.sender().queueName(sessionQueue).buildClient();
             ServiceBusSessionReceiverClient sessions = builder.sessionReceiver().queueName(sessionQueue)
                 .disableAutoComplete().buildClient()) {
            s.sendMessage(new ServiceBusMessage("s-1").setSessionId("J1"));
            try (ServiceBusReceiverClient r = sessions.acceptNextSession()) {
                r.setSessionState("st".getBytes());
                out.put("session", r.getSessionId() + ":" + new String(r.getSessionState()));
                for (ServiceBusReceivedMessage m : r.receiveMessages(1, Duration.ofSeconds(5))) {
                    out.put("sessionMessage", m.getBody().toString());
                    r.complete(m);
                }
            }
        }
        System.out.println(out);
        System.exit(0);
    }
}
