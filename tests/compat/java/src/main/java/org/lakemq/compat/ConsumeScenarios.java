package org.lakemq.compat;

import java.text.SimpleDateFormat;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Date;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

/** Consumer-side scenarios: push (clustering, broadcasting, orderly, filters, retries, where to
 *  start, restarts) and lite pull (subscribe, assign, seek, commit). */
final class ConsumeScenarios {
    private ConsumeScenarios() {
    }

    private static void send(Ctx ctx, DefaultMQProducer producer, String topic, String mode, int count)
        throws Exception {
        for (int i = 0; i < count; i++) {
            Message msg = ProduceScenarios.message(topic, mode, i);
            ctx.emit("sent", Out.sent(msg, producer.send(msg)));
        }
    }

    /** Two consumers of one group: the second one's arrival rebalances the first through
     *  NOTIFY_CONSUMER_IDS_CHANGED (the driver runs with a long periodic rebalance interval). */
    static void cluster(Ctx ctx) throws Exception {
        String topic = ctx.topic("t");
        String group = ctx.group("c");
        DefaultMQProducer producer = ctx.producer("p");
        ctx.createTopic(producer, topic, 4);
        Push c1 = new Push(ctx, group, "c1").subscribe(topic, "*").start();
        ctx.waitFor("c1 owning all 4 queues", () -> c1.processQueues(topic) == 4);
        long joined = System.currentTimeMillis();
        Push c2 = new Push(ctx, group, "c2").subscribe(topic, "*").start();
        ctx.waitFor("both consumers rebalanced to 2 queues each",
            () -> c1.processQueues(topic) == 2 && c2.processQueues(topic) == 2);
        ctx.emit("rebalanced", Out.fields("ms", System.currentTimeMillis() - joined,
            "c1", c1.allocations.get(topic).get(1), "c2", c2.allocations.get(topic).get(1)));
        send(ctx, producer, topic, "cluster", 40);
        ctx.waitFor("40 deliveries in the group", () -> c1.count() + c2.count() >= 40);
        c1.awaitQuiet(2000);
        c2.awaitQuiet(0);
    }

    static void broadcast(Ctx ctx) throws Exception {
        String topic = ctx.topic("t");
        String group = ctx.group("c");
        DefaultMQProducer producer = ctx.producer("p");
        ctx.createTopic(producer, topic, 2);
        send(ctx, producer, topic, "broadcast", 10);
        List<Push> consumers = new ArrayList<>();
        for (String label : new String[] {"c1", "c2"}) {
            Push consumer = new Push(ctx, group, label).subscribe(topic, "*");
            consumer.consumer.setMessageModel(MessageModel.BROADCASTING);
            consumers.add(consumer.start());
        }
        for (Push consumer : consumers) {
            consumer.awaitAll(10, 1500);
        }
    }

    /** MessageQueueSelector sends, MessageListenerOrderly (LOCK_BATCH_MQ); a second consumer of
     *  the group takes over at once after the first shut down (UNLOCK_BATCH_MQ). */
    static void orderly(Ctx ctx) throws Exception {
        String topic = ctx.topic("t");
        String group = ctx.group("c");
        DefaultMQProducer producer = ctx.producer("p");
        ctx.createTopic(producer, topic, 4);
        for (int round = 0; round < 2; round++) {
            for (int n = 0; n < 40; n++) {
                Message msg = ProduceScenarios.message(topic, "orderly" + round, n);
                int key = n % 4;
                msg.putUserProperty("orderKey", Integer.toString(key));
                ctx.emit("sent", Out.sent(msg, producer.send(msg, (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size()),
                    key)));
            }
            Push consumer = new Push(ctx, group, "c" + round).subscribe(topic, "*").startOrderly();
            consumer.awaitAll(40, 1500);
            consumer.shutdown();
            ctx.emit("stopped", Out.fields("consumer", "c" + round, "at", System.currentTimeMillis()));
        }
    }

    /** Tag expressions and SQL92 (MessageSelector.bySql), evaluated by the broker. */
    static void filter(Ctx ctx) throws Exception {
        String topic = ctx.topic("t");
        DefaultMQProducer producer = ctx.producer("p");
        ctx.createTopic(producer, topic, 2);
        String[] tags = {"TagA", "TagB", "TagC"};
        String[] colors = {"red", "green", "blue"};
        int tagMatches = 0;
        int sqlMatches = 0;
        int tagSqlMatches = 0;
        for (int i = 0; i < 30; i++) {
            Message msg = new Message(topic, tags[i % 3], Out.utf8("filter-" + i));
            msg.putUserProperty("a", Integer.toString(i));
            msg.putUserProperty("color", colors[(i / 3) % 3]);
            if (i % 5 == 0) {
                msg.putUserProperty("flag", "true");
            }
            ctx.emit("sent", Out.sent(msg, producer.send(msg)));
            tagMatches += i % 3 != 2 ? 1 : 0;
            sqlMatches += i >= 10 && colors[(i / 3) % 3].equals("red") ? 1 : 0;
            boolean aRange = i >= 3 && i <= 20;
            tagSqlMatches += (aRange || i % 5 == 0) && !tags[i % 3].equals("TagA") ? 1 : 0;
        }
        Push byTag = new Push(ctx, ctx.group("tag"), "tag").subscribe(topic, "TagA || TagB").start();
        Push bySql = new Push(ctx, ctx.group("sql"), "sql")
            .subscribeSql(topic, "a >= 10 AND color = 'red'").start();
        Push bySql2 = new Push(ctx, ctx.group("sql2"), "sql2")
            .subscribeSql(topic, "(a BETWEEN 3 AND 20 OR flag IS NOT NULL) AND TAGS <> 'TagA'").start();
        ctx.emit("expected", Out.fields("tag", tagMatches, "sql", sqlMatches, "sql2", tagSqlMatches));
        byTag.awaitAll(tagMatches, 1500);
        bySql.awaitAll(sqlMatches, 0);
        bySql2.awaitAll(tagSqlMatches, 0);
    }

    /** RECONSUME_LATER each time: %RETRY%group, then %DLQ%group after maxReconsumeTimes. */
    static void retryToDlq(Ctx ctx) throws Exception {
        String topic = ctx.topic("t");
        String group = ctx.group("c");
        DefaultMQProducer producer = ctx.producer("p");
        ctx.createTopic(producer, topic, 2);
        // A first heartbeat creates the group's retry topic on the broker, so that the consumer
        // below finds its route at start instead of at its next periodic rebalance.
        Push warm = new Push(ctx, group, "warm").subscribe(topic, "*").start();
        ctx.waitFor("route of the retry topic", () -> {
            try {
                return !producer.fetchPublishMessageQueues(MixAll.getRetryTopic(group)).isEmpty();
            } catch (Exception e) {
                return false;
            }
        });
        warm.shutdown();
        send(ctx, producer, topic, "retry", 3);
        Push failing = new Push(ctx, group, "failing").subscribe(topic, "*");
        failing.consumer.setMaxReconsumeTimes(2);
        failing.startConcurrently((msg, context) -> {
            context.setDelayLevelWhenNextConsume(1);
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        failing.awaitAll(9, 2500);
        failing.shutdown();
        Push dlq = new Push(ctx, ctx.group("dlq"), "dlq").subscribe(MixAll.getDLQTopic(group), "*").start();
        dlq.awaitAll(3, 1500);
    }

    /** New groups starting from the first offset, the last offset and a timestamp. */
    static void consumeFrom(Ctx ctx) throws Exception {
        String topic = ctx.topic("t");
        DefaultMQProducer producer = ctx.producer("p");
        ctx.createTopic(producer, topic, 2);
        send(ctx, producer, topic, "before", 4);
        // CONSUME_FROM_TIMESTAMP has a resolution of one second (yyyyMMddHHmmss).
        long boundary = (System.currentTimeMillis() / 1000 + 2) * 1000;
        Thread.sleep(boundary - System.currentTimeMillis());
        String stamp = new SimpleDateFormat("yyyyMMddHHmmss").format(new Date(boundary));
        ctx.emit("timestamp", Out.fields("stamp", stamp, "ms", boundary));
        Thread.sleep(200);
        send(ctx, producer, topic, "after", 4);
        Map<String, Push> consumers = new HashMap<>();
        for (ConsumeFromWhere where : new ConsumeFromWhere[] {ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, ConsumeFromWhere.CONSUME_FROM_TIMESTAMP}) {
            String label = where.name();
            Push consumer = new Push(ctx, ctx.group(label), label).subscribe(topic, "*");
            consumer.consumer.setConsumeFromWhere(where);
            consumer.consumer.setConsumeTimestamp(stamp);
            consumers.put(label, consumer.start());
        }
        for (Push consumer : consumers.values()) {
            ctx.waitFor(consumer.label + " starting offsets", () -> consumer.processQueues(topic) == 2);
        }
        send(ctx, producer, topic, "live", 4);
        consumers.get("CONSUME_FROM_FIRST_OFFSET").awaitAll(12, 1500);
        consumers.get("CONSUME_FROM_LAST_OFFSET").awaitAll(4, 0);
        consumers.get("CONSUME_FROM_TIMESTAMP").awaitAll(8, 0);
    }

    /** Offsets committed by a consumer survive its shutdown: the next one starts after them. */
    static void restart(Ctx ctx) throws Exception {
        String topic = ctx.topic("t");
        String group = ctx.group("c");
        DefaultMQProducer producer = ctx.producer("p");
        ctx.createTopic(producer, topic, 2);
        for (int round = 0; round < 2; round++) {
            send(ctx, producer, topic, "round" + round, 10);
            Push consumer = new Push(ctx, group, "c" + round).subscribe(topic, "*").start();
            consumer.awaitAll(10, 1500);
            consumer.shutdown();
        }
    }

    /** DefaultLitePullConsumer: subscribe + poll + commitSync; assign + seek + commitSync. */
    static void litePull(Ctx ctx) throws Exception {
        String topic = ctx.topic("t");
        DefaultMQProducer producer = ctx.producer("p");
        ctx.createTopic(producer, topic, 2);
        send(ctx, producer, topic, "lite", 20);

        DefaultLitePullConsumer subscriber = ctx.litePullConsumer(ctx.group("sub"), "sub");
        subscriber.setAutoCommit(false);
        subscriber.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        subscriber.subscribe(topic, "TagA || TagB");
        subscriber.start();
        poll(ctx, subscriber, "sub", 20);
        subscriber.commitSync();
        subscriber.shutdown();  // persists the committed offsets to the broker

        DefaultLitePullConsumer assigned = ctx.litePullConsumer(ctx.group("assign"), "assign");
        assigned.setAutoCommit(false);
        assigned.start();
        List<MessageQueue> queues = new ArrayList<>(assigned.fetchMessageQueues(topic));
        queues.sort(null);
        assigned.assign(queues);
        assigned.seek(queues.get(0), 3);
        assigned.seekToBegin(queues.get(1));
        int expected = 20 - 3;
        poll(ctx, assigned, "assign", expected);
        Map<MessageQueue, Long> offsets = new HashMap<>();
        for (MessageQueue mq : queues) {
            offsets.put(mq, 5L + mq.getQueueId());
        }
        assigned.commitSync(offsets, true);
        Map<String, Object> committed = new HashMap<>();
        for (MessageQueue mq : queues) {
            committed.put(Integer.toString(mq.getQueueId()), assigned.committed(mq));
        }
        ctx.emit("committed", Out.fields("consumer", "assign", "offsets", committed));
        assigned.seek(queues.get(1), 8);
        List<MessageExt> again = pollSome(ctx, assigned);
        ctx.emit("afterSeek", Out.fields("queueId", again.get(0).getQueueId(), "offset", again.get(0).getQueueOffset()));
    }

    private static void poll(Ctx ctx, DefaultLitePullConsumer consumer, String label, int expected)
        throws Exception {
        int got = 0;
        long deadline = System.currentTimeMillis() + ctx.timeoutMs;
        while (got < expected && System.currentTimeMillis() < deadline) {
            for (MessageExt msg : consumer.poll(500)) {
                Map<String, Object> fields = Out.received(msg);
                fields.put("consumer", label);
                ctx.emit("received", fields);
                got++;
            }
        }
        // Nothing more may come.
        Collection<MessageExt> extra = consumer.poll(1000);
        for (MessageExt msg : extra) {
            Map<String, Object> fields = Out.received(msg);
            fields.put("consumer", label);
            ctx.emit("received", fields);
        }
        if (got < expected) {
            throw new IllegalStateException(label + " polled " + got + " of " + expected);
        }
    }

    private static List<MessageExt> pollSome(Ctx ctx, DefaultLitePullConsumer consumer) throws Exception {
        long deadline = System.currentTimeMillis() + ctx.timeoutMs;
        while (System.currentTimeMillis() < deadline) {
            List<MessageExt> msgs = consumer.poll(500);
            if (!msgs.isEmpty()) {
                return msgs;
            }
        }
        throw new IllegalStateException("nothing polled after seek");
    }

    /**
     * A producer and a push consumer that stay online until --release-file exists, for mqadmin's
     * connection, tracking and offset-reset commands: 10 messages sent and consumed, then every
     * further delivery (a reset offset re-delivers) is reported as it comes.
     */
    static void online(Ctx ctx) throws Exception {
        String topic = ctx.topic("t");
        DefaultMQProducer producer = ctx.producer("p");
        ctx.createTopic(producer, topic, 2);
        send(ctx, producer, topic, "online", 10);
        Push consumer = new Push(ctx, ctx.group("c"), "c").subscribe(topic, "*");
        consumer.consumer.setPersistConsumerOffsetInterval(500);
        consumer.start();
        consumer.awaitAll(10, 500);
        ctx.emit("ready", Out.fields());
        java.nio.file.Path release = java.nio.file.Path.of(ctx.opts.get("release-file"));
        ctx.waitFor("the release file " + release, () -> java.nio.file.Files.exists(release));
    }

    /** Read --topics (comma-separated) from the first offset until --expect messages came and
     *  it has been quiet: what a consumer of another broker's store sees. */
    static void readAll(Ctx ctx) throws Exception {
        Push reader = new Push(ctx, ctx.opts.getOrDefault("group", ctx.group("reader")), "reader");
        for (String topic : ctx.opts.get("topics").split(",")) {
            reader.subscribe(topic, "*");
        }
        reader.start();
        reader.awaitAll(Integer.parseInt(ctx.opts.get("expect")), 2000);
    }
}
