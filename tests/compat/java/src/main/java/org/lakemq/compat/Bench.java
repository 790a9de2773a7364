package org.lakemq.compat;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * bench/peer_bench.py's workload (bench/peers/workload.py) run by Apache RocketMQ's Java client,
 * against any RocketMQ-protocol NameServer: produce with 1 and N producers (threads, each its own
 * client instance, every send synchronous), N producers sending batches, one consumer group
 * reading it all, then end-to-end latency at fixed rates, open loop (each body carries its
 * scheduled send time; at most --max-in-flight async sends outstanding). The broker's CPU
 * seconds (/proc/PID/stat of --cpu-pids) are read around every phase. One JSON line per phase.
 */
public final class Bench {
    private static final long TICKS = 100;  // USER_HZ, as the Python side's SC_CLK_TCK on Linux
    private static final long WARM_UP = 0L;

    private final Map<String, String> opts;
    private final String namesrv;
    private final int bodySize;
    private final List<Long> cpuPids = new ArrayList<>();
    private final AtomicInteger instances = new AtomicInteger();

    private Bench(Map<String, String> opts) {
        this.opts = opts;
        this.namesrv = opts.get("namesrv");
        this.bodySize = Integer.parseInt(opts.getOrDefault("body-size", "1024"));
        for (String pid : opts.getOrDefault("cpu-pids", "").split(",")) {
            if (!pid.isBlank()) {
                cpuPids.add(Long.parseLong(pid.trim()));
            }
        }
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new LinkedHashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            opts.put(args[i].substring(2), args[i + 1]);
        }
        try {
            new Bench(opts).run();
        } catch (Throwable e) {
            emit(Out.fields("phase", "error", "message", String.valueOf(e)));
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    private static void emit(Map<String, Object> fields) {
        Out.emit("bench", "phase", fields);
    }

    private double cpu() {
        long ticks = 0;
        for (long pid : cpuPids) {
            for (long task : pidsOfSession(pid)) {
                try {
                    String stat = Files.readString(Path.of("/proc/" + task + "/stat"));
                    String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
                    ticks += Long.parseLong(fields[11]) + Long.parseLong(fields[12]);
                } catch (Exception e) {
                    // exited: its time is no longer readable
                }
            }
        }
        return ticks / (double) TICKS;
    }

    /** The live processes of ``sid``'s session (a broker and its children). */
    private static List<Long> pidsOfSession(long sid) {
        List<Long> pids = new ArrayList<>();
        java.io.File[] entries = new java.io.File("/proc").listFiles();
        if (entries == null) {
            return pids;
        }
        for (java.io.File entry : entries) {
            String name = entry.getName();
            if (!name.chars().allMatch(Character::isDigit)) {
                continue;
            }
            try {
                String stat = Files.readString(Path.of("/proc/" + name + "/stat"));
                String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
                if (Long.parseLong(fields[3]) == sid && !fields[0].equals("Z")) {
                    pids.add(Long.parseLong(name));
                }
            } catch (Exception e) {
                // gone
            }
        }
        return pids;
    }

    private byte[] body(long stampNanos) {
        ByteBuffer buffer = ByteBuffer.allocate(bodySize);
        buffer.putLong(stampNanos);
        while (buffer.hasRemaining()) {
            buffer.put((byte) 'x');
        }
        return buffer.array();
    }

    private DefaultMQProducer producer() throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("bench_producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("bench-" + instances.incrementAndGet());
        producer.setSendMsgTimeout(10_000);
        producer.start();
        return producer;
    }

    @SuppressWarnings("deprecation")  // MQAdmin.createTopic: what the Python client's bench does too
    private void createTopic(String topic) throws Exception {
        DefaultMQProducer admin = producer();
        try {
            admin.createTopic("TBW102", topic, Integer.parseInt(opts.getOrDefault("queues", "8")));
            long deadline = System.currentTimeMillis() + 40_000;
            while (true) {
                try {
                    if (!admin.fetchPublishMessageQueues(topic).isEmpty()) {
                        return;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) {
                        throw e;
                    }
                }
                Thread.sleep(100);
            }
        } finally {
            admin.shutdown();
        }
    }

    private void run() throws Exception {
        double phaseSeconds = Double.parseDouble(opts.getOrDefault("phase-seconds", "5"));
        int producers = Integer.parseInt(opts.getOrDefault("producers", "16"));
        int batch = Integer.parseInt(opts.getOrDefault("batch", "32"));
        String stamp = Long.toString(System.currentTimeMillis() % 1_000_000);
        String warmTopic = "bench-java-warm-" + stamp;
        createTopic(warmTopic);  // unmeasured: the JITs of client and broker warm up
        produce(warmTopic, producers, 1, Double.parseDouble(opts.getOrDefault("warmup-seconds", "5")), false);
        String topic = "bench-java-" + stamp;
        createTopic(topic);
        long total = 0;
        for (int[] shape : new int[][] {{1, 1}, {producers, 1}, {producers, batch}}) {
            total += produce(topic, shape[0], shape[1], phaseSeconds, true);
        }
        consume(topic, total, Double.parseDouble(opts.getOrDefault("consume-timeout", "25")));
        for (String rate : opts.getOrDefault("rates", "500,2000").split(",")) {
            String latencyTopic = "bench-java-lat" + rate + "-" + stamp;
            createTopic(latencyTopic);
            latency(latencyTopic, Integer.parseInt(rate));
        }
    }

    private long produce(String topic, int producers, int batch, double seconds, boolean report) throws Exception {
        List<DefaultMQProducer> handles = new ArrayList<>();
        for (int i = 0; i < producers; i++) {
            handles.add(producer());
        }
        AtomicLong sent = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        double cpuStart = cpu();
        long start = System.nanoTime();
        long deadline = start + (long) (seconds * 1e9);
        List<Thread> threads = new ArrayList<>();
        for (DefaultMQProducer handle : handles) {
            Thread thread = new Thread(() -> {
                try {
                    while (System.nanoTime() < deadline) {
                        if (batch == 1) {
                            handle.send(new Message(topic, body(System.nanoTime())));
                            sent.incrementAndGet();
                        } else {
                            List<Message> msgs = new ArrayList<>(batch);
                            long stampNow = System.nanoTime();
                            for (int i = 0; i < batch; i++) {
                                msgs.add(new Message(topic, body(stampNow)));
                            }
                            handle.send(msgs);
                            sent.addAndGet(batch);
                        }
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            });
            thread.start();
            threads.add(thread);
        }
        for (Thread thread : threads) {
            thread.join();
        }
        double elapsed = (System.nanoTime() - start) / 1e9;
        double cpuSpent = cpu() - cpuStart;
        for (DefaultMQProducer handle : handles) {
            handle.shutdown();
        }
        if (failure.get() != null) {
            throw new IllegalStateException("a producer failed", failure.get());
        }
        if (report) {
            emit(Out.fields("kind", "produce", "producers", producers, "batch", batch, "messages", sent.get(),
                "seconds", elapsed, "cpu_seconds", cpuSpent));
        }
        return sent.get();
    }

    private DefaultMQPushConsumer consumer(String group, String topic, MessageListenerConcurrently listener)
        throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("bench-" + instances.incrementAndGet());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeMessageBatchMaxSize(32);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener(listener);
        return consumer;
    }

    private void consume(String topic, long expected, double timeoutSeconds) throws Exception {
        AtomicLong received = new AtomicLong();
        AtomicLong bytes = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);
        DefaultMQPushConsumer consumer = consumer("bench-group", topic, (msgs, context) -> {
            for (MessageExt msg : msgs) {
                bytes.addAndGet(msg.getBody().length);
            }
            if (received.addAndGet(msgs.size()) >= expected) {
                done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        double cpuStart = cpu();
        long start = System.nanoTime();
        consumer.start();
        done.await((long) (timeoutSeconds * 1000), TimeUnit.MILLISECONDS);
        double elapsed = (System.nanoTime() - start) / 1e9;
        double cpuSpent = cpu() - cpuStart;
        consumer.shutdown();
        emit(Out.fields("kind", "consume", "expected", expected, "messages", received.get(), "seconds", elapsed,
            "mbytes", bytes.get() / 1e6, "cpu_seconds", cpuSpent));
    }

    private void latency(String topic, int rate) throws Exception {
        double seconds = Double.parseDouble(opts.getOrDefault("latency-seconds", "10"));
        double drain = Double.parseDouble(opts.getOrDefault("drain-timeout", "5"));
        int maxInFlight = Integer.parseInt(opts.getOrDefault("max-in-flight", "256"));
        int total = (int) (rate * seconds);
        ConcurrentLinkedQueue<Double> latencies = new ConcurrentLinkedQueue<>();
        CountDownLatch warmed = new CountDownLatch(1);
        DefaultMQPushConsumer consumer = consumer("bench-latency", topic, (msgs, context) -> {
            long now = System.nanoTime();
            for (MessageExt msg : msgs) {
                long scheduled = ByteBuffer.wrap(msg.getBody()).getLong();
                if (scheduled == WARM_UP) {
                    warmed.countDown();
                } else {
                    latencies.add((now - scheduled) / 1e6);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        DefaultMQProducer producer = producer();
        producer.send(new Message(topic, body(WARM_UP)));
        if (!warmed.await(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("the warm-up message never arrived");
        }
        Semaphore inFlight = new Semaphore(maxInFlight);
        AtomicInteger failed = new AtomicInteger();
        AtomicReference<String> firstError = new AtomicReference<>();
        int heldBack = 0;
        double cpuStart = cpu();
        long startNs = System.nanoTime() + 50_000_000L;
        double intervalNs = 1e9 / rate;
        for (int i = 0; i < total; i++) {
            long scheduled = startNs + (long) (i * intervalNs);
            long wait = scheduled - System.nanoTime();
            if (wait > 0) {
                TimeUnit.NANOSECONDS.sleep(wait);
            }
            if (!inFlight.tryAcquire()) {
                heldBack++;
                inFlight.acquire();
            }
            producer.send(new Message(topic, body(scheduled)), new SendCallback() {
                @Override
                public void onSuccess(SendResult sendResult) {
                    inFlight.release();
                }

                @Override
                public void onException(Throwable e) {
                    failed.incrementAndGet();
                    firstError.compareAndSet(null, String.valueOf(e));
                    inFlight.release();
                }
            }, 10_000);
        }
        inFlight.acquire(maxInFlight);  // every send answered
        double sendSeconds = (System.nanoTime() - startNs) / 1e9;
        int expected = total - failed.get();
        long drainEnd = System.nanoTime() + (long) (drain * 1e9);
        while (latencies.size() < expected && System.nanoTime() < drainEnd) {
            Thread.sleep(20);
        }
        double cpuSpent = cpu() - cpuStart;
        producer.shutdown();
        consumer.shutdown();
        double[] values = latencies.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        Map<String, Object> percentiles = new LinkedHashMap<>();
        for (double q : new double[] {50, 90, 99, 99.9}) {
            String name = "p" + (q == Math.floor(q) ? Integer.toString((int) q) : Double.toString(q));
            percentiles.put(name, percentile(values, q));
        }
        emit(Out.fields("kind", "latency", "rate", rate, "sent", total, "received", values.length,
            "send_seconds", sendSeconds, "percentiles_ms", percentiles, "failed_sends", failed.get(),
            "first_error", firstError.get(), "held_back", heldBack, "cpu_seconds", cpuSpent));
    }

    /** The same nearest-rank percentile as bench/peers/workload.py. */
    private static double percentile(double[] sorted, double q) {
        if (sorted.length == 0) {
            return Double.NaN;
        }
        int index = (int) Math.min(sorted.length - 1, Math.max(0, Math.round(q / 100 * sorted.length + 0.5) - 1));
        return sorted[index];
    }
}
