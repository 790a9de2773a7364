package org.lakemq.compat;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A DefaultMQPushConsumer that reports every delivery ("received", with its label) and every
 * queue allocation ("allocate"), and can be waited on: a count reached, then a quiet period in
 * which nothing more (no duplicate) arrives.
 */
final class Push {
    interface Concurrently {
        ConsumeConcurrentlyStatus handle(MessageExt msg, ConsumeConcurrentlyContext context);
    }

    final DefaultMQPushConsumer consumer;
    final String label;
    private final Ctx ctx;
    private final AtomicInteger count = new AtomicInteger();
    private volatile long lastAt = System.currentTimeMillis();
    /** topic -> [client ids seen, queue ids allocated to this consumer] of the latest rebalance */
    final Map<String, List<List<String>>> allocations = new ConcurrentHashMap<>();

    Push(Ctx ctx, String group, String label) {
        this.ctx = ctx;
        this.label = label;
        this.consumer = ctx.pushConsumer(group, label);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setAllocateMessageQueueStrategy(new Recording());
    }

    Push subscribe(String topic, String tags) throws Exception {
        consumer.subscribe(topic, tags);
        return this;
    }

    Push subscribeSql(String topic, String sql) throws Exception {
        consumer.subscribe(topic, MessageSelector.bySql(sql));
        return this;
    }

    private void record(Map<String, Object> fields, Map<String, Object> extra) {
        fields.put("consumer", label);
        fields.putAll(extra);
        ctx.emit("received", fields);
        lastAt = System.currentTimeMillis();
        count.incrementAndGet();
    }

    Push startConcurrently(Concurrently handler) throws Exception {
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            ConsumeConcurrentlyStatus status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            for (MessageExt msg : msgs) {
                Map<String, Object> fields = Out.received(msg);  // receivedAt: before the handler
                ConsumeConcurrentlyStatus one = handler.handle(msg, context);
                record(fields, Out.fields("status", one.name()));
                if (one != ConsumeConcurrentlyStatus.CONSUME_SUCCESS) {
                    status = one;
                }
            }
            return status;
        });
        consumer.start();
        return this;
    }

    Push start() throws Exception {
        return startConcurrently((msg, context) -> ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
    }

    /** Orderly: also reports whether the client held the broker's lock on the queue. */
    Push startOrderly() throws Exception {
        consumer.registerMessageListener((MessageListenerOrderly) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                record(Out.received(msg), Out.fields("locked", locked(context)));
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        consumer.start();
        return this;
    }

    @SuppressWarnings("deprecation")  // the push consumer's internals: the only view of its locks
    private boolean locked(ConsumeOrderlyContext context) {
        ProcessQueue pq = consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable()
            .get(context.getMessageQueue());
        return pq != null && pq.isLocked() && !pq.isLockExpired();
    }

    int count() {
        return count.get();
    }

    void awaitCount(int expected) throws InterruptedException {
        ctx.waitFor(label + " receiving " + expected + " messages (has " + count.get() + ")",
            () -> count.get() >= expected);
    }

    /** Until nothing arrived for {@code quietMs}: what a duplicate or a stray would break. */
    void awaitQuiet(long quietMs) throws InterruptedException {
        ctx.waitFor(label + " quiet for " + quietMs + " ms", () -> System.currentTimeMillis() - lastAt >= quietMs);
    }

    void awaitAll(int expected, long quietMs) throws InterruptedException {
        awaitCount(expected);
        awaitQuiet(quietMs);
    }

    /** The queues of ``topic`` with a live process queue (their start offset is computed). */
    @SuppressWarnings("deprecation")
    int processQueues(String topic) {
        int n = 0;
        for (MessageQueue mq : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable()
            .keySet()) {
            if (mq.getTopic().equals(topic)) {
                n++;
            }
        }
        return n;
    }

    void shutdown() {
        consumer.shutdown();
    }

    /** The default averaging strategy, reporting each allocation. */
    final class Recording implements AllocateMessageQueueStrategy {
        private final AllocateMessageQueueAveragely inner = new AllocateMessageQueueAveragely();

        @Override
        public List<MessageQueue> allocate(String group, String currentCID, List<MessageQueue> mqAll,
            List<String> cidAll) {
            List<MessageQueue> result = inner.allocate(group, currentCID, mqAll, cidAll);
            if (!mqAll.isEmpty()) {
                String topic = mqAll.get(0).getTopic();
                List<String> queues = new ArrayList<>();
                Map<Integer, String> sorted = new TreeMap<>();
                for (MessageQueue mq : result) {
                    sorted.put(mq.getQueueId(), mq.getBrokerName() + ":" + mq.getQueueId());
                }
                queues.addAll(sorted.values());
                allocations.put(topic, List.of(new ArrayList<>(cidAll), queues));
                ctx.emit("allocate", Out.fields("consumer", label, "topic", topic, "cids", cidAll.size(),
                    "queues", queues));
            }
            return result;
        }

        @Override
        public String getName() {
            return inner.getName();
        }
    }
}
