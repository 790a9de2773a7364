package org.lakemq.compat;

import java.lang.reflect.Field;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.compression.CompressorFactory;
import org.apache.rocketmq.common.message.Message;

/** Timer messages and LZ4 / ZSTD bodies, as the 4.9 Java client sends them. */
final class TimerScenarios {
    private TimerScenarios() {
    }

    /**
     * TIMER_DELIVER_MS and TIMER_DELAY_SEC set as user properties (the 4.9 client has no method
     * for them; RocketMQ 5's broker reads the same properties); one push consumer reads them.
     */
    static void timer(Ctx ctx) throws Exception {
        String topic = ctx.topic("t");
        DefaultMQProducer producer = ctx.producer("p");
        ctx.createTopic(producer, topic, 2);
        long due = System.currentTimeMillis() + 3000;
        for (int i = 0; i < 3; i++) {
            Message msg = ProduceScenarios.message(topic, "deliver", i);
            msg.putUserProperty("TIMER_DELIVER_MS", Long.toString(due));
            ctx.emit("sent", Out.sent(msg, producer.send(msg)));
        }
        for (int i = 0; i < 3; i++) {
            Message msg = ProduceScenarios.message(topic, "delaySec", i);
            msg.putUserProperty("TIMER_DELAY_SEC", "3");
            ctx.emit("sent", Out.sent(msg, producer.send(msg)));
        }
        new Push(ctx, ctx.group("c"), "c").subscribe(topic, "*").start().awaitAll(6, 2000);
    }

    /** Bodies over compressMsgBodyOverHowmuch sent LZ4-, ZSTD- and zlib-compressed; one push consumer reads them. */
    static void compress(Ctx ctx) throws Exception {
        String topic = ctx.topic("t");
        int sent = 0;
        for (CompressionType type : new CompressionType[] {CompressionType.LZ4, CompressionType.ZSTD,
            CompressionType.ZLIB}) {
            DefaultMQProducer producer = ctx.producer(type.name().toLowerCase());
            compressWith(producer, type);
            if (sent == 0) {
                ctx.createTopic(producer, topic, 2);
            }
            for (int size : new int[] {5000, 100_000}) {
                Message msg = ProduceScenarios.message(topic, type.name(), size);
                msg.setBody(ProduceScenarios.bigBody(size));
                ctx.emit("sent", Out.sent(msg, producer.send(msg)));
                sent++;
            }
        }
        new Push(ctx, ctx.group("c"), "c").subscribe(topic, "*").start().awaitAll(sent, 2000);
    }

    /**
     * The producer's compression, which the client reads from rocketmq.message.compressType when a
     * producer is made: set on this producer alone, as the other scenarios run in the same JVM.
     */
    @SuppressWarnings("deprecation")  // the client offers no other way to a producer's compression
    private static void compressWith(DefaultMQProducer producer, CompressionType type) throws Exception {
        Object impl = producer.getDefaultMQProducerImpl();
        Field kind = impl.getClass().getDeclaredField("compressType");
        kind.setAccessible(true);
        kind.set(impl, type);
        Field compressor = impl.getClass().getDeclaredField("compressor");
        compressor.setAccessible(true);
        compressor.set(impl, CompressorFactory.getCompressor(type));
    }
}
