package org.lakemq.rmq5;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

/**
 * Apache RocketMQ's 5.x Java client consuming from a lakemq broker's gRPC front door over TLS.
 * Arguments: ENDPOINT TOPIC MODE GROUP COUNT. MODE "simple": a SimpleConsumer receives until
 * COUNT messages arrived (one receive at least), hides the first one longer (changeInvisibleDuration) and acks each;
 * "push": a PushConsumer consumes COUNT messages. One JSON line per message, then "done".
 */
public final class Rmq5Consumer {
    private static final long TIMEOUT_MS = 90_000;

    private Rmq5Consumer() {
    }

    private static synchronized void out(String event, MessageView view) {
        String body = StandardCharsets.UTF_8.decode(view.getBody()).toString();
        System.out.println("{\"event\": \"" + event + "\", \"body\": \"" + body + "\", \"message_id\": \""
            + view.getMessageId() + "\", \"attempt\": " + view.getDeliveryAttempt() + ", \"tag\": \""
            + view.getTag().orElse("") + "\", \"group\": \"" + view.getMessageGroup().orElse("") + "\"}");
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[1];
        String mode = args[2];
        String group = args[3];
        int count = Integer.parseInt(args[4]);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration configuration = ClientConfiguration.newBuilder().setEndpoints(endpoint)
            .enableSsl(true).setRequestTimeout(Duration.ofSeconds(10)).build();
        Map<String, FilterExpression> subscription =
            Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG));
        if (mode.equals("simple")) {
            try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder().setClientConfiguration(configuration)
                .setConsumerGroup(group).setAwaitDuration(Duration.ofSeconds(5))
                .setSubscriptionExpressions(subscription).build()) {
                int got = 0;
                boolean changed = false;
                long deadline = System.currentTimeMillis() + TIMEOUT_MS;
                do {  // once at least: COUNT 0 reports what one receive finds
                    List<MessageView> views = consumer.receive(16, Duration.ofSeconds(30));
                    for (MessageView view : views) {
                        if (!changed) {
                            consumer.changeInvisibleDuration(view, Duration.ofSeconds(60));
                            changed = true;
                        }
                        consumer.ack(view);
                        out("acked", view);
                        got++;
                    }
                } while (got < count && System.currentTimeMillis() < deadline);
            }
        } else {
            CountDownLatch latch = new CountDownLatch(count);
            PushConsumer consumer = provider.newPushConsumerBuilder().setClientConfiguration(configuration)
                .setConsumerGroup(group).setSubscriptionExpressions(subscription).setMessageListener(view -> {
                    out("consumed", view);
                    latch.countDown();
                    return ConsumeResult.SUCCESS;
                }).build();
            try {
                if (!latch.await(TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
                    throw new IllegalStateException("consumed " + (count - latch.getCount()) + " of " + count);
                }
            } finally {
                consumer.close();
            }
        }
        System.out.println("{\"event\": \"done\"}");
        System.out.flush();
    }
}
