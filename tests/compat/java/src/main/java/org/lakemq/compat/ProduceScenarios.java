package org.lakemq.compat;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/** Producer-side scenarios: every way DefaultMQProducer and TransactionMQProducer send. */
final class ProduceScenarios {
    private ProduceScenarios() {
    }

    static Message message(String topic, String mode, int i) {
        Message msg = new Message(topic, i % 2 == 0 ? "TagA" : "TagB", Out.utf8(mode + "-body-" + i));
        msg.setKeys(Arrays.asList("key-" + mode + "-" + i, "alt-" + i));
        msg.putUserProperty("mode", mode);
        msg.putUserProperty("seq", Integer.toString(i));
        msg.putUserProperty("color", new String[] {"red", "green", "blue"}[i % 3]);
        msg.putUserProperty("text", "h\u00e9llo w\u00f6rld \u20ac \uD834\uDD1E");
        return msg;
    }

    /** A text body that compresses well, over compressMsgBodyOverHowmuch (4 KiB). */
    static byte[] bigBody(int size) {
        StringBuilder text = new StringBuilder(size);
        for (int i = 0; text.length() < size; i++) {
            text.append("line ").append(i).append(" of a large compressible body\n");
        }
        return Out.utf8(text.substring(0, size));
    }

    /**
     * sync, async, oneway, batch, a compressed body, delayed, keys/tags/user properties and a
     * topic auto-created through TBW102; then one push consumer reads both topics.
     */
    static void basic(Ctx ctx) throws Exception {
        String topic = ctx.topic("main");
        String auto = ctx.topic("auto");
        DefaultMQProducer producer = ctx.producer("p");
        ctx.createTopic(producer, topic, 4);
        int total = 0;
        for (int i = 0; i < 10; i++, total++) {
            Message msg = message(topic, "sync", i);
            ctx.emit("sent", Out.sent(msg, producer.send(msg)));
        }
        CountDownLatch acked = new CountDownLatch(10);
        for (int i = 0; i < 10; i++, total++) {
            Message msg = message(topic, "async", i);
            producer.send(msg, new SendCallback() {
                @Override
                public void onSuccess(SendResult result) {
                    ctx.emit("sent", Out.sent(msg, result));
                    acked.countDown();
                }

                @Override
                public void onException(Throwable e) {
                    ctx.emit("sendError", Out.fields("message", String.valueOf(e)));
                    acked.countDown();
                }
            });
        }
        if (!acked.await(ctx.timeoutMs, TimeUnit.MILLISECONDS)) {
            throw new IllegalStateException("async sends not acknowledged");
        }
        for (int i = 0; i < 5; i++, total++) {
            Message msg = message(topic, "oneway", i);
            producer.sendOneway(msg);
            ctx.emit("sent", Out.sent(msg, null));
        }
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 8; i++, total++) {
            batch.add(message(topic, "batch", i));
        }
        SendResult batchResult = producer.send(batch);
        for (Message msg : batch) {
            ctx.emit("sent", Out.sent(msg, batchResult));
        }
        for (int size : new int[] {5000, 200_000}) {
            Message msg = message(topic, "big", size);
            msg.setBody(bigBody(size));
            ctx.emit("sent", Out.sent(msg, producer.send(msg)));
            total++;
        }
        for (int level : new int[] {1, 2}) {
            Message msg = message(topic, "delayed", level);
            msg.setDelayTimeLevel(level);
            ctx.emit("sent", Out.sent(msg, producer.send(msg)));
            total++;
        }
        for (int i = 0; i < 3; i++, total++) {
            Message msg = message(auto, "auto", i);
            ctx.emit("sent", Out.sent(msg, producer.send(msg)));
        }
        Push consumer = new Push(ctx, ctx.group("c"), "c1").subscribe(topic, "*").subscribe(auto, "*").start();
        consumer.awaitAll(total, 2000);
    }

    /** {@code --count} sync sends to an existing {@code --topic}, bodies labelled {@code --label}
     *  (a topic that another step of the test created, such as one on a master/slave pair). */
    static void sendTo(Ctx ctx) throws Exception {
        String topic = ctx.opts.get("topic");
        String label = ctx.opts.getOrDefault("label", "sendto");
        DefaultMQProducer producer = ctx.producer("p");
        for (int i = 0; i < Integer.parseInt(ctx.opts.get("count")); i++) {
            Message msg = message(topic, label, i);
            ctx.emit("sent", Out.sent(msg, producer.send(msg)));
        }
    }

    /** request() answered through SEND_REPLY_MESSAGE_V2 and PUSH_REPLY_MESSAGE_TO_CLIENT. */
    static void requestReply(Ctx ctx) throws Exception {
        String topic = ctx.topic("req");
        DefaultMQProducer requester = ctx.producer("requester");
        ctx.createTopic(requester, topic, 2);
        DefaultMQProducer replier = ctx.producer("replier");
        AtomicInteger replied = new AtomicInteger();
        Push responder = new Push(ctx, ctx.group("responder"), "responder").subscribe(topic, "*");
        responder.startConcurrently((msg, context) -> {
            try {
                Message reply = MessageUtil.createReplyMessage(msg, Out.utf8("reply-to-" + new String(msg.getBody(),
                    java.nio.charset.StandardCharsets.UTF_8)));
                SendResult result = replier.send(reply);
                ctx.emit("replied", Out.sent(reply, result));
                replied.incrementAndGet();
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            } catch (Exception e) {
                ctx.emit("replyError", Out.fields("message", String.valueOf(e)));
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            }
        });
        ctx.waitFor("the responder's queues", () -> responder.processQueues(topic) == 2);
        for (int i = 0; i < 3; i++) {
            Message request = message(topic, "request", i);
            long start = System.currentTimeMillis();
            Message reply = requester.request(request, 15_000);
            ctx.emit("reply", Out.fields("request", Out.sent(request, null), "body", Out.b64(reply.getBody()),
                "topic", reply.getTopic(), "props", reply.getProperties(),
                "ms", System.currentTimeMillis() - start));
        }
        CountDownLatch answered = new CountDownLatch(1);
        Message request = message(topic, "request-async", 0);
        requester.request(request, new RequestCallback() {
            @Override
            public void onSuccess(Message reply) {
                ctx.emit("reply", Out.fields("request", Out.sent(request, null), "body", Out.b64(reply.getBody()),
                    "topic", reply.getTopic(), "props", reply.getProperties()));
                answered.countDown();
            }

            @Override
            public void onException(Throwable e) {
                ctx.emit("replyError", Out.fields("message", String.valueOf(e)));
                answered.countDown();
            }
        }, 15_000);
        if (!answered.await(ctx.timeoutMs, TimeUnit.MILLISECONDS)) {
            throw new IllegalStateException("no answer to the async request");
        }
        // The replier's send is answered after the push: let it finish before shutting down.
        ctx.waitFor("the replier's four sends", () -> replied.get() == 4);
    }

    /** COMMIT, ROLLBACK, and UNKNOW settled as COMMIT when the broker checks back. */
    static void transaction(Ctx ctx) throws Exception {
        String topic = ctx.topic("tx");
        DefaultMQProducer admin = ctx.producer("admin");
        ctx.createTopic(admin, topic, 2);
        Map<String, AtomicInteger> checks = new ConcurrentHashMap<>();
        TransactionMQProducer producer = new TransactionMQProducer(ctx.group("tx"));
        ctx.configure(producer, "tx");
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String mode = msg.getUserProperty("mode");
                ctx.emit("executed", Out.fields("mode", mode, "transactionId", msg.getTransactionId()));
                return mode.startsWith("commit") ? LocalTransactionState.COMMIT_MESSAGE
                    : mode.startsWith("rollback") ? LocalTransactionState.ROLLBACK_MESSAGE
                    : LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String mode = msg.getUserProperty("mode");
                int n = checks.computeIfAbsent(msg.getTransactionId(), k -> new AtomicInteger()).incrementAndGet();
                java.util.Map<String, Object> fields = Out.received(msg);
                fields.put("check", n);
                fields.put("transactionId", msg.getTransactionId());
                ctx.emit("checked", fields);
                return mode.startsWith("rollback") ? LocalTransactionState.ROLLBACK_MESSAGE
                    : LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.start();
        ctx.onClose(producer::shutdown);
        int visible = 0;
        for (String mode : new String[] {"commit", "rollback", "unknown", "commit2", "rollback2", "unknown2"}) {
            Message msg = message(topic, mode, 0);
            TransactionSendResult result = producer.sendMessageInTransaction(msg, null);
            Map<String, Object> fields = Out.sent(msg, result);
            fields.put("localState", String.valueOf(result.getLocalTransactionState()));
            ctx.emit("sent", fields);
            visible += mode.startsWith("rollback") ? 0 : 1;
        }
        Push consumer = new Push(ctx, ctx.group("c"), "c1").subscribe(topic, "*").start();
        consumer.awaitCount(visible);
        // Long enough for another round of check-backs, which must not deliver anything again.
        consumer.awaitQuiet(Long.parseLong(ctx.opts.getOrDefault("tx-quiet-ms", "3000")));
    }

    /**
     * What a store must hold for the cross-format checks: normal, tagged, keyed, delayed,
     * transactional (committed and rolled back) and batched messages; then read once from the
     * start by a check group, which also waits for the delayed message's real put.
     */
    static void storeMix(Ctx ctx) throws Exception {
        String topic = ctx.topic("mix");
        DefaultMQProducer producer = ctx.producer("p");
        ctx.createTopic(producer, topic, 4);
        for (int i = 0; i < 6; i++) {
            Message plain = new Message(topic, Out.utf8("plain-" + i));
            ctx.emit("sent", Out.sent(plain, producer.send(plain)));
            Message rich = message(topic, "rich", i);
            ctx.emit("sent", Out.sent(rich, producer.send(rich)));
        }
        Message big = message(topic, "big", 0);
        big.setBody(bigBody(20_000));
        ctx.emit("sent", Out.sent(big, producer.send(big)));
        Message delayed = message(topic, "delayed", 0);
        delayed.setDelayTimeLevel(1);
        ctx.emit("sent", Out.sent(delayed, producer.send(delayed)));
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            batch.add(message(topic, "batch", i));
        }
        SendResult batchResult = producer.send(batch);
        for (Message msg : batch) {
            ctx.emit("sent", Out.sent(msg, batchResult));
        }
        TransactionMQProducer tx = new TransactionMQProducer(ctx.group("tx"));
        ctx.configure(tx, "tx");
        tx.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return "commit".equals(msg.getUserProperty("mode")) ? LocalTransactionState.COMMIT_MESSAGE
                    : LocalTransactionState.ROLLBACK_MESSAGE;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                return LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        tx.start();
        ctx.onClose(tx::shutdown);
        for (String mode : new String[] {"commit", "rollback"}) {
            Message msg = message(topic, mode, 0);
            ctx.emit("sent", Out.sent(msg, tx.sendMessageInTransaction(msg, null)));
        }
        // The delayed message is due after level 1 (1 s): wait for its real put.
        Push reader = new Push(ctx, ctx.group("check"), "check").subscribe(topic, "*").start();
        reader.awaitAll(6 + 6 + 1 + 1 + 5 + 1, 1000);
    }
}
