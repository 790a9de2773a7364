package org.lakemq.compat;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageQueue;

/** One scenario's names, clients and deadlines. Every client gets its own instance name. */
final class Ctx {
    private static final AtomicInteger INSTANCES = new AtomicInteger();

    final String namesrv;
    final String prefix;
    final String scenario;
    final long timeoutMs;
    final Map<String, String> opts;
    private final List<Runnable> closers = new ArrayList<>();

    Ctx(String namesrv, String prefix, String scenario, long timeoutMs, Map<String, String> opts) {
        this.namesrv = namesrv;
        this.prefix = prefix;
        this.scenario = scenario;
        this.timeoutMs = timeoutMs;
        this.opts = opts;
    }

    String topic(String suffix) {
        return prefix + "_" + scenario + "_" + suffix;
    }

    String group(String suffix) {
        return "G_" + prefix + "_" + scenario + "_" + suffix;
    }

    String instance(String label) {
        return scenario + "-" + label + "-" + INSTANCES.incrementAndGet();
    }

    void emit(String event, Map<String, Object> fields) {
        Out.emit(scenario, event, fields);
    }

    DefaultMQProducer producer(String label) throws MQClientException {
        DefaultMQProducer producer = new DefaultMQProducer(group(label));
        configure(producer, label);
        producer.start();
        onClose(producer::shutdown);
        return producer;
    }

    <T extends org.apache.rocketmq.client.ClientConfig> T configure(T client, String label) {
        client.setNamesrvAddr(namesrv);
        client.setInstanceName(instance(label));
        return client;
    }

    DefaultMQPushConsumer pushConsumer(String group, String label) {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        configure(consumer, label);
        onClose(consumer::shutdown);
        return consumer;
    }

    DefaultLitePullConsumer litePullConsumer(String group, String label) {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        configure(consumer, label);
        onClose(consumer::shutdown);
        return consumer;
    }

    /** Create a topic through the Java client's MQAdmin API (UPDATE_AND_CREATE_TOPIC to every
     *  broker that serves TBW102), then wait until the NameServer routes all its queues. The API
     *  is deprecated in favour of mqadmin, and still what many applications call. */
    @SuppressWarnings("deprecation")
    void createTopic(DefaultMQProducer producer, String topic, int queues) throws Exception {
        producer.createTopic("TBW102", topic, queues);
        waitFor("route of " + topic, () -> {
            try {
                Collection<MessageQueue> mqs = producer.fetchPublishMessageQueues(topic);
                return mqs.size() == queues;
            } catch (MQClientException e) {
                return false;
            }
        });
    }

    void waitFor(String what, BooleanSupplier condition) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!condition.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("timed out after " + timeoutMs + " ms waiting for " + what);
            }
            Thread.sleep(20);
        }
    }

    void onClose(Runnable closer) {
        synchronized (closers) {
            closers.add(closer);
        }
    }

    /** Shut down every client still open, newest first; shutting one down twice is harmless. */
    void closeAll() {
        List<Runnable> todo;
        synchronized (closers) {
            todo = new ArrayList<>(closers);
            closers.clear();
        }
        for (int i = todo.size() - 1; i >= 0; i--) {
            try {
                todo.get(i).run();
            } catch (RuntimeException e) {
                Out.emit(scenario, "closeError", Out.fields("message", String.valueOf(e)));
            }
        }
    }
}
