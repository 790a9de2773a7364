package org.lakemq.compat;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/**
 * Runs named scenarios of Apache RocketMQ's Java client against a NameServer, all at once, each
 * on its own topics and groups ({@code <prefix>_<name>}), and prints what was sent and received
 * as JSON lines. The Python tests decide what is right; this side only reports.
 *
 * <pre>
 * java -cp ... org.lakemq.compat.Driver --namesrv 127.0.0.1:9876 --prefix run1 --scenarios basic,filter
 * </pre>
 *
 * Every scenario ends with a "done" line, or an "error" line with the exception; the exit code
 * is 1 when any scenario failed.
 */
public final class Driver {
    private Driver() {
    }

    interface Scenario {
        void run(Ctx ctx) throws Exception;
    }

    static final Map<String, Scenario> SCENARIOS = new LinkedHashMap<>();

    static {
        SCENARIOS.put("basic", ProduceScenarios::basic);
        SCENARIOS.put("request", ProduceScenarios::requestReply);
        SCENARIOS.put("transaction", ProduceScenarios::transaction);
        SCENARIOS.put("store", ProduceScenarios::storeMix);
        SCENARIOS.put("cluster", ConsumeScenarios::cluster);
        SCENARIOS.put("broadcast", ConsumeScenarios::broadcast);
        SCENARIOS.put("orderly", ConsumeScenarios::orderly);
        SCENARIOS.put("filter", ConsumeScenarios::filter);
        SCENARIOS.put("retry", ConsumeScenarios::retryToDlq);
        SCENARIOS.put("from", ConsumeScenarios::consumeFrom);
        SCENARIOS.put("restart", ConsumeScenarios::restart);
        SCENARIOS.put("litepull", ConsumeScenarios::litePull);
        SCENARIOS.put("sendto", ProduceScenarios::sendTo);
        SCENARIOS.put("readall", ConsumeScenarios::readAll);
        SCENARIOS.put("online", ConsumeScenarios::online);
        SCENARIOS.put("timer", TimerScenarios::timer);
        SCENARIOS.put("compress", TimerScenarios::compress);
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new LinkedHashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --option value, got " + args[i]);
            }
            opts.put(args[i].substring(2), args[i + 1]);
        }
        String namesrv = require(opts, "namesrv");
        String prefix = require(opts, "prefix");
        long timeoutMs = Long.parseLong(opts.getOrDefault("timeout-s", "120")) * 1000;
        List<String> names = List.of(require(opts, "scenarios").split(","));
        for (String name : names) {
            if (!SCENARIOS.containsKey(name)) {
                throw new IllegalArgumentException("unknown scenario " + name + "; known: " + SCENARIOS.keySet());
            }
        }
        ExecutorService pool = Executors.newFixedThreadPool(names.size());
        List<Future<Boolean>> results = new ArrayList<>();
        for (String name : names) {
            Ctx ctx = new Ctx(namesrv, prefix, name, timeoutMs, opts);
            results.add(pool.submit(() -> runOne(ctx)));
        }
        boolean ok = true;
        for (Future<Boolean> result : results) {
            ok &= result.get();
        }
        pool.shutdown();
        pool.awaitTermination(10, TimeUnit.SECONDS);
        System.out.flush();
        // Client threads (netty, timers) of a failed scenario may linger: exit explicitly.
        System.exit(ok ? 0 : 1);
    }

    private static boolean runOne(Ctx ctx) {
        long start = System.currentTimeMillis();
        try {
            SCENARIOS.get(ctx.scenario).run(ctx);
            Out.emit(ctx.scenario, "done", Out.fields("ms", System.currentTimeMillis() - start));
            return true;
        } catch (Throwable e) {
            java.io.StringWriter trace = new java.io.StringWriter();
            e.printStackTrace(new java.io.PrintWriter(trace));
            Out.emit(ctx.scenario, "error", Out.fields("message", String.valueOf(e), "trace", trace.toString()));
            return false;
        } finally {
            ctx.closeAll();
        }
    }

    private static String require(Map<String, String> opts, String key) {
        String value = opts.get(key);
        if (value == null) {
            throw new IllegalArgumentException("missing --" + key);
        }
        return value;
    }
}
