package org.lakemq.compat;

import com.alibaba.fastjson.JSON;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * mqadmin as a user runs it (MQAdminStartup, rocketmq-tools 4.9.8), one command after another in
 * one JVM: each stdin line is a JSON array of arguments ({@code ["topicList", "-n", "host:port"]});
 * each command's stdout and stderr come back as one JSON line. mqadmin prints a failure's stack
 * trace and carries on, as it does from the shell (where it still exits 0).
 */
public final class AdminBatch {
    private AdminBatch() {
    }

    public static void main(String[] args) throws Exception {
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (line.isBlank()) {
                continue;
            }
            List<String> command = JSON.parseArray(line, String.class);
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            long start = System.currentTimeMillis();
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            try {
                MQAdminStartup.main0(command.toArray(new String[0]), null);
            } catch (RuntimeException e) {
                e.printStackTrace();
            } finally {
                System.out.flush();
                System.err.flush();
                System.setOut(realOut);
                System.setErr(realErr);
            }
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("command", command);
            result.put("stdout", out.toString(StandardCharsets.UTF_8));
            result.put("stderr", err.toString(StandardCharsets.UTF_8));
            result.put("ms", System.currentTimeMillis() - start);
            realOut.println(JSON.toJSONString(result));
            realOut.flush();
        }
        System.exit(0);
    }
}
