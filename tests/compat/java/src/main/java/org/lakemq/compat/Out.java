package org.lakemq.compat;

import com.alibaba.fastjson.JSON;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;

/** JSON lines on stdout, one object per event; every line names its scenario. */
final class Out {
    private Out() {
    }

    static synchronized void emit(String scenario, String event, Map<String, Object> fields) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("scenario", scenario);
        line.put("event", event);
        line.putAll(fields);
        System.out.println(JSON.toJSONString(line));
        System.out.flush();
    }

    static Map<String, Object> fields(Object... keyValues) {
        Map<String, Object> map = new LinkedHashMap<>();
        for (int i = 0; i < keyValues.length; i += 2) {
            map.put((String) keyValues[i], keyValues[i + 1]);
        }
        return map;
    }

    static String b64(byte[] body) {
        return body == null ? null : Base64.getEncoder().encodeToString(body);
    }

    static byte[] utf8(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }

    /** What a sender put into a message, and what the broker answered. */
    static Map<String, Object> sent(Message msg, SendResult result) {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("topic", msg.getTopic());
        map.put("body", b64(msg.getBody()));
        map.put("tags", msg.getTags());
        map.put("keys", msg.getKeys());
        map.put("props", msg.getProperties());
        map.put("sentAt", System.currentTimeMillis());
        if (result != null) {
            map.put("status", String.valueOf(result.getSendStatus()));
            map.put("msgId", result.getMsgId());
            map.put("offsetMsgId", result.getOffsetMsgId());
            map.put("queueId", result.getMessageQueue().getQueueId());
            map.put("brokerName", result.getMessageQueue().getBrokerName());
            map.put("queueOffset", result.getQueueOffset());
            map.put("transactionId", result.getTransactionId());
        }
        return map;
    }

    /** Everything a consumer was handed, as the Java client decoded it. */
    static Map<String, Object> received(MessageExt msg) {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("topic", msg.getTopic());
        map.put("queueId", msg.getQueueId());
        map.put("queueOffset", msg.getQueueOffset());
        map.put("msgId", msg.getMsgId());
        map.put("offsetMsgId", msg instanceof MessageClientExt ? ((MessageClientExt) msg).getOffsetMsgId() : null);
        map.put("body", b64(msg.getBody()));
        map.put("tags", msg.getTags());
        map.put("keys", msg.getKeys());
        map.put("props", msg.getProperties());
        map.put("bornTimestamp", msg.getBornTimestamp());
        map.put("storeTimestamp", msg.getStoreTimestamp());
        map.put("reconsumeTimes", msg.getReconsumeTimes());
        map.put("sysFlag", msg.getSysFlag());
        map.put("bodyCRC", msg.getBodyCRC());
        map.put("commitLogOffset", msg.getCommitLogOffset());
        map.put("storeSize", msg.getStoreSize());
        map.put("bornHost", String.valueOf(msg.getBornHost()));
        map.put("storeHost", String.valueOf(msg.getStoreHost()));
        map.put("receivedAt", System.currentTimeMillis());
        return map;
    }
}
