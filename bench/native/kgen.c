/* kgen: a small load generator on librdkafka, the same client for Apache Kafka and kbroker
 * (bench/kafka_vs_kbroker.py --pinned). Built by `make bench-tools`.
 *
 *   kgen produce -b HOST:PORT -t TOPIC [-s SIZE] [--acks 1|all|0] [--idempotence]
 *                [--linger-ms MS] [--batch-size BYTES] [--seconds S | --count N]
 *                [--partitions N] [--schema-id ID] [-X key=value ...]
 *   kgen consume -b HOST:PORT -t TOPIC --count N [--seconds S] [--idle-ms MS]
 *                [--partitions N] [-X key=value ...]
 *
 * produce: fixed-size records (random bytes, no key) for S seconds or N records, then waits for
 *   every delivery report. Without --partitions librdkafka's default partitioner places them
 *   (sticky for keyless records, as Kafka's Java producer); with it, round-robin over 0..N-1.
 *   The clock runs from the first record handed to librdkafka to the last delivery report.
 *   --schema-id frames every value as Confluent's serializers do (magic byte 0, the id as a
 *   4-byte big-endian int, then the random bytes; SIZE counts the 5 bytes): load for a
 *   topic with schema validation (bench/schema_validation.py).
 * consume: reads the topic from the beginning (assign, no group membership, no commits) until
 *   N records were read; with --seconds, reads it again from the beginning until S seconds
 *   passed (every pass reads N records). Stops early after --idle-ms without a record. The
 *   clock runs from the assignment to the last record read.
 *
 * One JSON line on stdout: mode, messages, bytes, seconds, msgs_per_s, mb_per_s (10^6 bytes),
 * delivery_errors (produce: failed delivery reports; consume: error messages), complete
 * (the target was reached), first_error. Exit status 0 when complete without errors. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

struct opts {
    int produce;
    const char *brokers, *topic, *acks;
    long size, linger_ms, batch_size, partitions, idle_ms, schema_id;
    int idempotence;
    double seconds;
    long long count;
    char **extra;   /* key=value pairs for librdkafka */
    int n_extra;
};

struct tally {
    long long messages, bytes, errors;
    char first_error[256];
};

static volatile sig_atomic_t stop_now;

static void on_signal(int sig) {
    (void)sig;
    stop_now = 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *why) {
    fprintf(stderr, "kgen: %s: %s\n", what, why);
    exit(2);
}

static void usage(void) {
    fputs("usage: kgen produce -b HOST:PORT -t TOPIC [-s SIZE] [--acks 1|all|0] [--idempotence]\n"
          "                    [--linger-ms MS] [--batch-size BYTES] [--seconds S | --count N]\n"
          "                    [--partitions N] [--schema-id ID] [-X key=value ...]\n"
          "       kgen consume -b HOST:PORT -t TOPIC --count N [--seconds S] [--idle-ms MS]\n"
          "                    [--partitions N] [-X key=value ...]\n", stderr);
    exit(2);
}

static void set_conf(rd_kafka_conf_t *conf, const char *key, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK)
        die(key, err);
}

static void set_conf_long(rd_kafka_conf_t *conf, const char *key, long value) {
    char text[32];
    snprintf(text, sizeof text, "%ld", value);
    set_conf(conf, key, text);
}

static void apply_extra(rd_kafka_conf_t *conf, const struct opts *o) {
    for (int i = 0; i < o->n_extra; i++) {
        char *kv = o->extra[i], *eq = strchr(kv, '=');
        if (!eq)
            die(kv, "-X takes key=value");
        *eq = '\0';
        set_conf(conf, kv, eq + 1);
        *eq = '=';
    }
}

static void print_result(const struct opts *o, const struct tally *t, double seconds, int complete) {
    double rate = seconds > 0 ? (double)t->messages / seconds : 0.0;
    double mb = seconds > 0 ? (double)t->bytes / seconds / 1e6 : 0.0;
    printf("{\"mode\": \"%s\", \"messages\": %lld, \"bytes\": %lld, \"seconds\": %.6f, "
           "\"msgs_per_s\": %.1f, \"mb_per_s\": %.3f, \"delivery_errors\": %lld, \"complete\": %s, "
           "\"first_error\": \"",
           o->produce ? "produce" : "consume", t->messages, t->bytes, seconds, rate, mb, t->errors,
           complete ? "true" : "false");
    for (const char *p = t->first_error; *p; p++)   /* JSON-safe: librdkafka's texts are ASCII */
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if ((unsigned char)*p >= 0x20)
            putchar(*p);
    printf("\"}\n");
    fflush(stdout);
}

static void note_error(struct tally *t, const char *text) {
    t->errors++;
    if (!t->first_error[0])
        snprintf(t->first_error, sizeof t->first_error, "%s", text);
}

/* ------------------------------------------------------------------ produce */

static double last_report;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    struct tally *t = opaque;
    (void)rk;
    if (m->err)
        note_error(t, rd_kafka_err2str(m->err));
    else {
        t->messages++;
        t->bytes += (long long)m->len;
    }
    last_report = now_s();
}

static int run_produce(const struct opts *o) {
    struct tally t = {0};
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set_conf(conf, "bootstrap.servers", o->brokers);
    set_conf(conf, "acks", o->acks);
    set_conf(conf, "enable.idempotence", o->idempotence ? "true" : "false");
    set_conf_long(conf, "linger.ms", o->linger_ms);
    set_conf_long(conf, "batch.size", o->batch_size);
    set_conf(conf, "compression.type", "none");
    apply_extra(conf, o);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_opaque(conf, &t);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk)
        die("rd_kafka_new", err);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, o->topic, NULL);

    /* one payload of random bytes, handed to librdkafka without a copy (flags 0: it is
     * neither copied nor freed; it outlives every record that points at it) */
    unsigned char *payload = malloc((size_t)o->size + 1);
    if (!payload)
        die("malloc", strerror(errno));
    uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
    for (long i = 0; i < o->size; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        payload[i] = (unsigned char)x;
    }
    if (o->schema_id >= 0) {
        if (o->size < 5)
            die("--schema-id", "needs a SIZE of at least 5 (the frame's magic byte and id)");
        uint32_t id = (uint32_t)o->schema_id;
        payload[0] = 0;
        payload[1] = (unsigned char)(id >> 24);
        payload[2] = (unsigned char)(id >> 16);
        payload[3] = (unsigned char)(id >> 8);
        payload[4] = (unsigned char)id;
    }

    double start = now_s(), deadline = o->seconds > 0 ? start + o->seconds : 0;
    long long sent = 0;
    while (!stop_now) {
        if (o->count > 0 && sent >= o->count)
            break;
        if (deadline && (sent & 255) == 0 && now_s() >= deadline)
            break;
        int32_t part = o->partitions > 0 ? (int32_t)(sent % o->partitions) : RD_KAFKA_PARTITION_UA;
        if (rd_kafka_produce(rkt, part, 0, payload, (size_t)o->size, NULL, 0, NULL) == 0) {
            sent++;
            if ((sent & 1023) == 0)
                rd_kafka_poll(rk, 0);
            continue;
        }
        rd_kafka_resp_err_t e = rd_kafka_last_error();
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(rk, 1);          /* librdkafka's queue is full: serve delivery reports */
            if (deadline && now_s() >= deadline)
                break;
        } else {
            note_error(&t, rd_kafka_err2str(e));
            break;
        }
    }
    last_report = now_s();
    while (rd_kafka_outq_len(rk) > 0 && !stop_now)
        rd_kafka_poll(rk, 50);
    double seconds = last_report - start;
    int complete = !stop_now && t.errors == 0 && t.messages == sent && (o->count <= 0 || sent >= o->count);
    print_result(o, &t, seconds, complete);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_flush(rk, 10000);
    rd_kafka_destroy(rk);
    free(payload);
    return complete ? 0 : 1;
}

/* ------------------------------------------------------------------ consume */

static int partition_count(rd_kafka_t *rk, const char *topic) {
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 30000);
    rd_kafka_topic_destroy(rkt);
    if (e)
        die("metadata", rd_kafka_err2str(e));
    int n = (md->topic_cnt == 1 && !md->topics[0].err) ? md->topics[0].partition_cnt : 0;
    rd_kafka_metadata_destroy(md);
    if (n <= 0)
        die(topic, "no such topic (or no partitions)");
    return n;
}

static void assign_from_start(rd_kafka_t *rk, const char *topic, int partitions) {
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++)
        rd_kafka_topic_partition_list_add(list, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_resp_err_t e = rd_kafka_assign(rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (e)
        die("assign", rd_kafka_err2str(e));
}

static int run_consume(const struct opts *o) {
    struct tally t = {0};
    char err[512];
    if (o->count <= 0)
        die("consume", "--count N is required (the records a pass reads)");
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set_conf(conf, "bootstrap.servers", o->brokers);
    set_conf(conf, "group.id", "kgen");          /* needed by assign; never joined, never committed */
    set_conf(conf, "enable.auto.commit", "false");
    set_conf(conf, "enable.auto.offset.store", "false");
    set_conf(conf, "auto.offset.reset", "earliest");
    apply_extra(conf, o);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk)
        die("rd_kafka_new", err);
    int partitions = o->partitions > 0 ? (int)o->partitions : partition_count(rk, o->topic);
    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(rk);

    enum { BATCH = 4096 };
    rd_kafka_message_t **msgs = malloc(sizeof *msgs * BATCH);
    if (!msgs)
        die("malloc", strerror(errno));
    double start = now_s(), last = start, deadline = o->seconds > 0 ? start + o->seconds : 0;
    long long in_pass = 0;
    int complete = 0;
    assign_from_start(rk, o->topic, partitions);
    while (!stop_now) {
        ssize_t n = rd_kafka_consume_batch_queue(q, 100, msgs, BATCH);
        if (n < 0)
            die("consume", rd_kafka_err2str(rd_kafka_last_error()));
        double t_now = now_s();
        for (ssize_t i = 0; i < n; i++) {
            rd_kafka_message_t *m = msgs[i];
            if (m->err) {
                if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                    note_error(&t, rd_kafka_message_errstr(m));
            } else if (in_pass < o->count) {   /* a pass counts at most N records */
                t.messages++;
                t.bytes += (long long)m->len;
                in_pass++;
                last = t_now;
            }
            rd_kafka_message_destroy(m);
        }
        if (in_pass >= o->count) {
            if (!deadline || t_now >= deadline) {
                complete = 1;
                break;
            }
            in_pass = 0;                       /* once more from the beginning */
            assign_from_start(rk, o->topic, partitions);
        } else if (n == 0 && (t_now - last) * 1000.0 >= (double)o->idle_ms) {
            break;                             /* nothing for --idle-ms: give up, incomplete */
        }
    }
    double seconds = last - start;
    complete = complete && t.errors == 0;
    print_result(o, &t, seconds, complete);
    free(msgs);
    rd_kafka_queue_destroy(q);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return complete ? 0 : 1;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
    struct opts o = {.acks = "1", .size = 100, .linger_ms = 5, .batch_size = 131072, .idle_ms = 10000, .schema_id = -1};
    if (argc < 2)
        usage();
    if (!strcmp(argv[1], "produce"))
        o.produce = 1;
    else if (strcmp(argv[1], "consume"))
        usage();
    o.extra = calloc((size_t)argc, sizeof *o.extra);
    enum { ACKS = 256, IDEM, LINGER, BATCHSZ, SECONDS, COUNT, PARTS, IDLE, SCHEMA };
    static const struct option longopts[] = {
        {"brokers", required_argument, 0, 'b'}, {"topic", required_argument, 0, 't'},
        {"size", required_argument, 0, 's'}, {"acks", required_argument, 0, ACKS},
        {"idempotence", no_argument, 0, IDEM}, {"linger-ms", required_argument, 0, LINGER},
        {"batch-size", required_argument, 0, BATCHSZ}, {"seconds", required_argument, 0, SECONDS},
        {"count", required_argument, 0, COUNT}, {"partitions", required_argument, 0, PARTS},
        {"idle-ms", required_argument, 0, IDLE}, {"schema-id", required_argument, 0, SCHEMA},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    optind = 2;
    for (int c; (c = getopt_long(argc, argv, "b:t:s:X:h", longopts, NULL)) != -1;) {
        switch (c) {
        case 'b': o.brokers = optarg; break;
        case 't': o.topic = optarg; break;
        case 's': o.size = atol(optarg); break;
        case 'X': o.extra[o.n_extra++] = optarg; break;
        case ACKS: o.acks = optarg; break;
        case IDEM: o.idempotence = 1; break;
        case LINGER: o.linger_ms = atol(optarg); break;
        case BATCHSZ: o.batch_size = atol(optarg); break;
        case SECONDS: o.seconds = atof(optarg); break;
        case COUNT: o.count = atoll(optarg); break;
        case PARTS: o.partitions = atol(optarg); break;
        case IDLE: o.idle_ms = atol(optarg); break;
        case SCHEMA: o.schema_id = atol(optarg); break;
        default: usage();
        }
    }
    if (!o.brokers || !o.topic || optind != argc || o.size < 0)
        usage();
    if (o.produce && o.seconds <= 0 && o.count <= 0)
        die("produce", "give --seconds S or --count N");
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    int rc = o.produce ? run_produce(&o) : run_consume(&o);
    free(o.extra);
    return rc;
}
