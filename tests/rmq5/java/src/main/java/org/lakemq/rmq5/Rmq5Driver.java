package org.lakemq.rmq5;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * Apache RocketMQ's 5.x Java client against a lakemq broker's gRPC front door, over TLS (the
 * client's default; it trusts any certificate). Arguments: ENDPOINT TOPIC. Sends three normal
 * messages (tag, key, property), three of one message group, and a transaction it commits; one
 * JSON line per receipt, then "done".
 */
public final class Rmq5Driver {
    private Rmq5Driver() {
    }

    private static void out(String event, String body, String messageId) {
        System.out.println("{\"event\": \"" + event + "\", \"body\": \"" + body + "\", \"message_id\": \""
            + messageId + "\"}");
        System.out.flush();
    }

    private static Message message(ClientServiceProvider provider, String topic, String body, String group) {
        MessageBuilder builder = provider.newMessageBuilder().setTopic(topic).setTag("TagJ").setKeys("key-" + body)
            .addProperty("lang", "java").setBody(body.getBytes(StandardCharsets.UTF_8));
        if (group != null) {
            builder.setMessageGroup(group);
        }
        return builder.build();
    }

    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[1];
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration configuration = ClientConfiguration.newBuilder().setEndpoints(endpoint)
            .enableSsl(true).setRequestTimeout(Duration.ofSeconds(10)).build();
        try (Producer producer = provider.newProducerBuilder().setClientConfiguration(configuration)
            .setTopics(topic).setTransactionChecker(view -> TransactionResolution.COMMIT).build()) {
            for (int i = 0; i < 3; i++) {
                String body = "j" + i;
                SendReceipt receipt = producer.send(message(provider, topic, body, null));
                out("sent", body, receipt.getMessageId().toString());
            }
            for (int i = 0; i < 3; i++) {
                String body = "g" + i;
                SendReceipt receipt = producer.send(message(provider, topic, body, "java-group"));
                out("sent", body, receipt.getMessageId().toString());
            }
            Transaction transaction = producer.beginTransaction();
            SendReceipt receipt = producer.send(message(provider, topic, "t0", null), transaction);
            transaction.commit();
            out("sent", "t0", receipt.getMessageId().toString());
        }
        out("done", "", "");
    }
}
