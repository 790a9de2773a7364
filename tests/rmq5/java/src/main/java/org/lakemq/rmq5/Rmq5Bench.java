package org.lakemq.rmq5;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Collections;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * bench/rmq5_bench.py's phases run by Apache RocketMQ's 5.x Java client over TLS (its default):
 * send COUNT messages of SIZE bytes with sendAsync, at most IN_FLIGHT outstanding (as the
 * client's users pipeline sends), then one PushConsumer of GROUP (its defaults: receive batches
 * of 32, 20 consumption threads) consumes them all. The broker's CPU seconds (/proc/PID/stat of
 * BROKER_PID) are read around each phase. Arguments: ENDPOINT TOPIC GROUP COUNT SIZE IN_FLIGHT
 * BROKER_PID. One JSON line per phase.
 */
public final class Rmq5Bench {
    private static final double TICKS = 100.0;  // USER_HZ, as the Python side's SC_CLK_TCK on Linux
    private static final int WARM_UP = 200;

    private Rmq5Bench() {
    }

    private static double cpu(long pid) throws Exception {
        String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
        String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
        return (Long.parseLong(fields[11]) + Long.parseLong(fields[12])) / TICKS;
    }

    private static void phase(String name, long messages, double seconds, double cpuSeconds) {
        System.out.println("{\"phase\": \"" + name + "\", \"messages\": " + messages + ", \"seconds\": " + seconds
            + ", \"cpu_seconds\": " + cpuSeconds + "}");
        System.out.flush();
    }

    private static void send(Producer producer, ClientServiceProvider provider, String topic, byte[] body, int count,
                             int inFlight) throws Exception {
        Semaphore slots = new Semaphore(inFlight);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        for (int i = 0; i < count && failure.get() == null; i++) {
            slots.acquire();
            producer.sendAsync(provider.newMessageBuilder().setTopic(topic).setBody(body).build())
                .whenComplete((receipt, error) -> {
                    if (error != null) {
                        failure.compareAndSet(null, error);
                    }
                    slots.release();
                });
        }
        slots.acquire(inFlight);  // every send answered
        slots.release(inFlight);
        if (failure.get() != null) {
            throw new IllegalStateException("a send failed", failure.get());
        }
    }

    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[1];
        String group = args[2];
        int count = Integer.parseInt(args[3]);
        byte[] body = new byte[Integer.parseInt(args[4])];
        int inFlight = Integer.parseInt(args[5]);
        long brokerPid = Long.parseLong(args[6]);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration configuration = ClientConfiguration.newBuilder().setEndpoints(endpoint)
            .setRequestTimeout(Duration.ofSeconds(30)).build();
        try (Producer producer = provider.newProducerBuilder().setClientConfiguration(configuration)
            .setTopics(topic).build()) {
            send(producer, provider, topic, body, WARM_UP, inFlight);  // unmeasured: routes, TLS, the JIT
            double cpuStart = cpu(brokerPid);
            long start = System.nanoTime();
            send(producer, provider, topic, body, count, inFlight);
            phase("send", count, (System.nanoTime() - start) / 1e9, cpu(brokerPid) - cpuStart);
        }
        long expected = count + WARM_UP;
        CountDownLatch done = new CountDownLatch(1);
        AtomicLong received = new AtomicLong();
        double cpuStart = cpu(brokerPid);
        long start = System.nanoTime();
        PushConsumer consumer = provider.newPushConsumerBuilder().setClientConfiguration(configuration)
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(topic, new FilterExpression("*",
                FilterExpressionType.TAG)))
            .setMessageListener(view -> {
                if (received.incrementAndGet() >= expected) {
                    done.countDown();
                }
                return ConsumeResult.SUCCESS;
            }).build();
        try {
            if (!done.await(600, TimeUnit.SECONDS)) {
                throw new IllegalStateException("consumed " + received.get() + " of " + expected);
            }
            phase("receive", received.get(), (System.nanoTime() - start) / 1e9, cpu(brokerPid) - cpuStart);
        } finally {
            consumer.close();
        }
    }
}
