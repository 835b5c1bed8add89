package dev.sbctl;

import com.azure.core.amqp.AmqpRetryOptions;
import com.azure.core.http.HttpClient;
import com.azure.core.http.netty.NettyAsyncHttpClientBuilder;
import com.azure.core.http.policy.HttpPipelinePolicy;
import com.azure.core.util.UrlBuilder;
import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusException;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClientBuilder;
import com.azure.messaging.servicebus.administration.models.CorrelationRuleFilter;
import com.azure.messaging.servicebus.administration.models.CreateRuleOptions;
import com.azure.messaging.servicebus.administration.models.EntityStatus;
import com.azure.messaging.servicebus.administration.models.QueueProperties;
import com.azure.messaging.servicebus.administration.models.RuleProperties;
import com.azure.messaging.servicebus.administration.models.SqlRuleAction;
import com.azure.messaging.servicebus.administration.models.SqlRuleFilter;
import com.azure.messaging.servicebus.models.ServiceBusReceiveMode;
import io.netty.handler.ssl.SslContext;
import io.netty.handler.ssl.SslContextBuilder;
import java.io.File;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.net.ssl.SSLException;

/**
 * ServiceBusAdministrationClient over HTTPS, as the SDK's published samples use it
 * (AdministrationClientUpdateQueueSample, AdministrationClientDisableQueueSample,
 * TopicSubscriptionWithRuleOperationsSample): update a queue, disable it, replace a
 * subscription's $Default rule with SQL and correlation rules, runtime properties, delete.
 *
 * <p>The Java administration client keeps only the host of the connection string's Endpoint
 * and calls https://HOST (port 443), so an application reaches sbctl when the daemon serves
 * HTTPS on port 443 (`daemon start --http-port 443`). Binding 443 needs privileges a test does
 * not have, so here a pipeline policy puts the AMQP port (which answers HTTPS too) back into
 * each request's URL; everything else is the SDK's own. The daemon's certificate
 * (SBCTL_CERT, `sbctl daemon cert`) is the only one trusted.
 */
final class AdminSteps {
    private AdminSteps() {}

    private static void check(boolean cond, String what) {
        if (!cond) {
            throw new IllegalStateException("check failed: " + what);
        }
    }

    static ServiceBusAdministrationClient client(String cs, String certPath) {
        Matcher m = Pattern.compile("Endpoint=sb://[^:;/]+:(\\d+)").matcher(cs);
        check(m.find(), "the connection string names a port");
        int port = Integer.parseInt(m.group(1));
        SslContext ssl;
        try {
            ssl = SslContextBuilder.forClient().trustManager(new File(certPath)).build();
        } catch (SSLException e) {
            throw new IllegalStateException("cannot read the daemon's certificate " + certPath, e);
        }
        HttpClient http = new NettyAsyncHttpClientBuilder(
            reactor.netty.http.client.HttpClient.create().secure(spec -> spec.sslContext(ssl))).build();
        HttpPipelinePolicy toDaemonPort = (context, next) -> {
            UrlBuilder url = UrlBuilder.parse(context.getHttpRequest().getUrl());
            context.getHttpRequest().setUrl(url.setPort(port).toString());
            return next.process();
        };
        return new ServiceBusAdministrationClientBuilder().connectionString(cs)
            .httpClient(http).addPolicy(toDaemonPort).buildClient();
    }

    static Map<String, Object> run(String cs, String certPath) {
        ServiceBusAdministrationClient admin = client(cs, certPath);
        Map<String, Object> out = new LinkedHashMap<>();

        // AdministrationClientUpdateQueueSample: read, change, write back.
        QueueProperties q = admin.createQueue("java-admin");
        q.setMaxDeliveryCount(10).setLockDuration(Duration.ofSeconds(60));
        QueueProperties updated = admin.updateQueue(q);
        QueueProperties reread = admin.getQueue("java-admin");
        out.put("updated", List.of(updated.getLockDuration().getSeconds(), updated.getMaxDeliveryCount(),
            reread.getLockDuration().getSeconds(), reread.getMaxDeliveryCount()));

        // AdministrationClientDisableQueueSample, then a send to the disabled queue.
        QueueProperties disabled = admin.updateQueue(admin.getQueue("java-admin").setStatus(EntityStatus.DISABLED));
        String sendReason;
        ServiceBusSenderClient sender = new ServiceBusClientBuilder().connectionString(cs)
            .retryOptions(new AmqpRetryOptions().setMaxRetries(0).setTryTimeout(Duration.ofSeconds(10)))
            .sender().queueName("java-admin").buildClient();
        try {
            sender.sendMessage(new ServiceBusMessage("x"));
            sendReason = "no error";
        } catch (ServiceBusException e) {
            sendReason = String.valueOf(e.getReason());
        }
        sender.close();
        out.put("disabled", List.of(String.valueOf(disabled.getStatus()), sendReason));

        // TopicSubscriptionWithRuleOperationsSample (with the SDK's argument order:
        // createRule(topic, rule, subscription, options)).
        admin.createTopic("java-admin-topic");
        admin.createSubscription("java-admin-topic", "blue");
        admin.deleteRule("java-admin-topic", "blue", "$Default");
        admin.createRule("java-admin-topic", "BlueSqlRule", "blue", new CreateRuleOptions()
            .setFilter(new SqlRuleFilter("Color = 'Blue'"))
            .setAction(new SqlRuleAction("SET Color = 'BlueProcessed'")));
        admin.createRule("java-admin-topic", "ImportantCorrelationRule", "blue", new CreateRuleOptions()
            .setFilter(new CorrelationRuleFilter().setCorrelationId("important").setLabel("Red")));
        List<String> rules = new ArrayList<>();
        for (RuleProperties r : admin.listRules("java-admin-topic", "blue")) {
            rules.add(r.getName() + ":" + r.getFilter().getClass().getSimpleName());
        }
        out.put("rules", rules);
        ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(cs);
        ServiceBusSenderClient topicSender = builder.sender().topicName("java-admin-topic").buildClient();
        List<ServiceBusMessage> batch = new ArrayList<>();
        for (String[] cc : new String[][] {{"Red", "important"}, {"Blue", "x"}, {"Green", "important"}}) {
            ServiceBusMessage msg = new ServiceBusMessage(cc[0]).setCorrelationId(cc[1]);
            msg.getApplicationProperties().put("Color", cc[0]);
            if (cc[0].equals("Red")) {
                msg.setSubject("Red");
            }
            batch.add(msg);
        }
        topicSender.sendMessages(batch);
        topicSender.close();
        long active = admin.getSubscriptionRuntimeProperties("java-admin-topic", "blue").getActiveMessageCount();
        ServiceBusReceiverClient receiver = builder.receiver().topicName("java-admin-topic")
            .subscriptionName("blue").receiveMode(ServiceBusReceiveMode.RECEIVE_AND_DELETE).buildClient();
        List<String> got = new ArrayList<>();
        for (ServiceBusReceivedMessage m : receiver.receiveMessages(5, Duration.ofSeconds(3))) {
            got.add(m.getBody() + "/" + m.getApplicationProperties().get("Color"));
        }
        receiver.close();
        out.put("subscription", Map.of("active_before", active, "received", got));
        out.put("topic_subscriptions", admin.getTopicRuntimeProperties("java-admin-topic").getSubscriptionCount());

        admin.deleteTopic("java-admin-topic");
        admin.deleteQueue("java-admin");
        out.put("exist_after_delete", List.of(admin.getQueueExists("java-admin"),
            admin.getTopicExists("java-admin-topic")));
        return out;
    }
}
