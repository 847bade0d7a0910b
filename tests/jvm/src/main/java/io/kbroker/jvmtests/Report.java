package io.kbroker.jvmtests;

import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * What a check found, one JSON object a line on stdout: {"check": NAME, fact: value, ...}.
 * The Python side asserts on the facts; a broken expectation inside a check throws instead
 * (require), so the program exits non-zero with the reason on stderr.
 */
final class Report {
    private Report() {}

    static void emit(String check, Object... facts) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("check", check);
        for (int i = 0; i < facts.length; i += 2) {
            m.put((String) facts[i], facts[i + 1]);
        }
        StringBuilder sb = new StringBuilder();
        json(sb, m);
        System.out.println(sb);
        System.out.flush();
    }

    static void require(boolean condition, String what) {
        if (!condition) {
            throw new IllegalStateException("check failed: " + what);
        }
    }

    /** The simple name of the exception a future failed with (its cause), or "none". */
    static String failure(org.apache.kafka.common.KafkaFuture<?> future) {
        try {
            future.get();
            return "none";
        } catch (java.util.concurrent.ExecutionException e) {
            return e.getCause().getClass().getSimpleName();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return "InterruptedException";
        }
    }

    private static void json(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof Number || v instanceof Boolean) {
            sb.append(v);
        } else if (v instanceof Map<?, ?> map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : map.entrySet()) {
                if (!first) sb.append(',');
                first = false;
                string(sb, String.valueOf(e.getKey()));
                sb.append(':');
                json(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof Collection<?> list) {
            sb.append('[');
            boolean first = true;
            for (Object o : list) {
                if (!first) sb.append(',');
                first = false;
                json(sb, o);
            }
            sb.append(']');
        } else {
            string(sb, v.toString());
        }
    }

    private static void string(StringBuilder sb, String s) {
        sb.append('"');
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                default -> {
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
                }
            }
        }
        sb.append('"');
    }
}
