/* ingest: what receiving produced bytes into a log costs the receiving core, per mechanism
 * (issue 22: choose how a Produce's record batches reach the active segment). Built by
 * `make bench-tools`; run by bench/produce_copies.py.
 *
 *   ingest MODE [--gb N] [--frame BYTES] [--segment BYTES] [--dir DIR]
 *               [--recv-cpu C] [--send-cpu C] [--warm]
 *
 * A sender process (on --send-cpu) writes N GB over loopback TCP in frames of --frame bytes
 * (random content). The receiver (on --recv-cpu) takes each frame into a log of segment
 * files of --segment bytes in DIR, computes the CRC-32C of every frame (what validating a
 * record batch costs at least) and, MODE:
 *   copy3     recv 64 KiB reads into a read buffer, memcpy into a frame buffer, pwrite
 *             (the broker's produce path before issue 22's first step: three copies)
 *   copy2     recv straight into a frame buffer (MSG_WAITALL), pwrite (today's path:
 *             socket -> user buffer -> page cache, two copies)
 *   mmap      segment fallocate'd and mapped (MAP_SHARED); recv straight into the mapped
 *             tail: one copy, socket -> page cache, each new page faulted in (and zeroed)
 *             by the recv
 *   mmap-pop  as mmap, the next frame's pages populated in one call before it is received
 *             (madvise MADV_POPULATE_WRITE, Linux 5.14): the same zeroing, fewer faults
 *   splice    socket -> pipe -> segment file with splice(2) (the pipe holds references to
 *             the socket's pages; the second splice copies them into the page cache), then
 *             the CRC is read from a read-only mapping of the segment
 *
 * --warm: before the clock starts, N GB of anonymous memory are written and freed, so that
 * the page cache is then filled from pages the machine has just used. On a virtual machine
 * whose guest hands free pages back to the host (virtio-balloon free page reporting), the
 * first write into a page handed back costs a fault on the host: without --warm a run may
 * pay it for many of its pages, a cost that is the hypervisor's, not the mechanism's.
 *
 * One JSON line: mode, bytes, wall seconds, the receiver's user and system CPU seconds,
 * its CPU seconds per GB (10^9 bytes), its minor page faults, the sender's CPU seconds,
 * and a checksum of every frame's CRC (equal across modes for the same input: every mode
 * saw the same bytes). Segment files are removed at the end. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kb_crc32c.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static void die(const char *what) {
    fprintf(stderr, "ingest: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void pin(int cpu) {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) die("sched_setaffinity");
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double tv(struct timeval t) { return (double)t.tv_sec + t.tv_usec / 1e6; }

static void sender(int port, uint64_t total, size_t frame, int cpu) {
    pin(cpu);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) die("connect");
    unsigned char *buf = malloc(frame);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < frame; i++) {       /* xorshift: incompressible, reproducible */
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    for (uint64_t sent = 0; sent < total;) {
        size_t want = frame;
        if (total - sent < want) want = (size_t)(total - sent);
        size_t off = 0;
        while (off < want) {
            ssize_t n = write(s, buf + off, want - off);
            if (n < 0) { if (errno == EINTR) continue; die("write"); }
            off += (size_t)n;
        }
        sent += want;
    }
    close(s);
    _exit(0);
}

/* read exactly len bytes into dst (MSG_WAITALL, resumed after short reads); 0 at EOF */
static size_t recv_full(int s, unsigned char *dst, size_t len) {
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(s, dst + got, len - got, MSG_WAITALL);
        if (n < 0) { if (errno == EINTR) continue; die("recv"); }
        if (n == 0) break;
        got += (size_t)n;
    }
    return got;
}

struct seg {
    int fd;
    int index;
    unsigned char *map;
    uint64_t used;
};

static void seg_open(struct seg *g, const char *dir, uint64_t size, int mapped) {
    char path[4096];
    snprintf(path, sizeof path, "%s/ingest-%05d.log", dir, g->index);
    g->fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (g->fd < 0) die("open segment");
    g->used = 0;
    g->map = NULL;
    if (mapped) {
        if (fallocate(g->fd, 0, 0, (off_t)size) != 0) die("fallocate");
        g->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, 0);
        if (g->map == MAP_FAILED) die("mmap");
    }
}

static void seg_close(struct seg *g, const char *dir, uint64_t size) {
    if (g->map != NULL) {
        munmap(g->map, size);
        if (ftruncate(g->fd, (off_t)g->used) != 0) die("ftruncate");
    }
    close(g->fd);
    char path[4096];
    snprintf(path, sizeof path, "%s/ingest-%05d.log", dir, g->index);
    unlink(path);
    g->index++;
}

int main(int argc, char **argv) {
    double gb = 4;
    size_t frame = 1 << 20;
    uint64_t segment = 1ull << 30;
    const char *dir = ".";
    int recv_cpu = 0, send_cpu = 1;
    static struct option opts[] = {
        {"gb", required_argument, 0, 'g'}, {"frame", required_argument, 0, 'f'},
        {"segment", required_argument, 0, 's'}, {"dir", required_argument, 0, 'd'},
        {"recv-cpu", required_argument, 0, 'r'}, {"send-cpu", required_argument, 0, 'c'},
        {"warm", no_argument, 0, 'w'}, {0, 0, 0, 0}};
    int warm = 0;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'g': gb = atof(optarg); break;
        case 'f': frame = (size_t)atol(optarg); break;
        case 's': segment = (uint64_t)atoll(optarg); break;
        case 'd': dir = optarg; break;
        case 'r': recv_cpu = atoi(optarg); break;
        case 'c': send_cpu = atoi(optarg); break;
        case 'w': warm = 1; break;
        default: return 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "usage: ingest copy3|copy2|mmap|mmap-pop|splice [--gb N] [--frame BYTES] "
                        "[--segment BYTES] [--dir DIR] [--recv-cpu C] [--send-cpu C] [--warm]\n");
        return 2;
    }
    const char *mode = argv[optind];
    int m_copy3 = !strcmp(mode, "copy3"), m_copy2 = !strcmp(mode, "copy2"), m_mmap = !strcmp(mode, "mmap"),
        m_pop = !strcmp(mode, "mmap-pop"), m_splice = !strcmp(mode, "splice");
    if (!(m_copy3 || m_copy2 || m_mmap || m_pop || m_splice)) {
        fprintf(stderr, "ingest: unknown mode %s\n", mode);
        return 2;
    }
    if (segment % frame != 0) {
        fprintf(stderr, "ingest: --segment must be a multiple of --frame\n");
        return 2;
    }
    uint64_t total = (uint64_t)(gb * 1e9) / frame * frame;
    kb_crc32c_init();
    signal(SIGPIPE, SIG_IGN);

    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1) != 0) die("listen");
    socklen_t al = sizeof a;
    getsockname(ls, (struct sockaddr *)&a, &al);
    pid_t child = fork();
    if (child == 0) sender(ntohs(a.sin_port), total, frame, send_cpu);
    pin(recv_cpu);
    int s = accept(ls, NULL, NULL);
    if (s < 0) die("accept");
    close(ls);

    unsigned char *fbuf = NULL, *rbuf = NULL;
    int pipefd[2] = {-1, -1};
    if (m_copy3 || m_copy2) {
        fbuf = malloc(frame);
        rbuf = malloc(65536);
        memset(fbuf, 0, frame);
    }
    if (m_splice) {
        if (pipe(pipefd) != 0) die("pipe");
        if (fcntl(pipefd[0], F_SETPIPE_SZ, 1 << 20) < 0) die("F_SETPIPE_SZ");
    }
    struct seg g = {.index = 0};
    seg_open(&g, dir, segment, m_mmap || m_pop);
    unsigned char *rmap = NULL;          /* splice: the segment mapped read-only for the CRC */
    if (m_splice) {
        if (ftruncate(g.fd, (off_t)segment) != 0) die("ftruncate");
        rmap = mmap(NULL, segment, PROT_READ, MAP_SHARED, g.fd, 0);
        if (rmap == MAP_FAILED) die("mmap");
    }

    if (warm) {
        size_t len = (size_t)total + segment;
        unsigned char *anon = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (anon == MAP_FAILED) die("mmap (--warm)");
        memset(anon, 1, len);
        munmap(anon, len);
    }
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now();
    uint64_t received = 0;
    uint32_t crcsum = 0;
    while (received < total) {
        if (g.used == segment) {
            if (rmap) munmap(rmap, segment);
            seg_close(&g, dir, segment);
            seg_open(&g, dir, segment, m_mmap || m_pop);
            if (m_splice) {
                if (ftruncate(g.fd, (off_t)segment) != 0) die("ftruncate");
                rmap = mmap(NULL, segment, PROT_READ, MAP_SHARED, g.fd, 0);
                if (rmap == MAP_FAILED) die("mmap");
            }
        }
        size_t got;
        uint32_t crc;
        if (m_copy3) {
            got = 0;
            while (got < frame) {
                size_t want = frame - got < 65536 ? frame - got : 65536;
                ssize_t n = recv(s, rbuf, want, 0);
                if (n < 0) { if (errno == EINTR) continue; die("recv"); }
                if (n == 0) break;
                memcpy(fbuf + got, rbuf, (size_t)n);
                got += (size_t)n;
            }
            crc = kb_crc32c(0, fbuf, got);
            if (pwrite(g.fd, fbuf, got, (off_t)g.used) != (ssize_t)got) die("pwrite");
        } else if (m_copy2) {
            got = recv_full(s, fbuf, frame);
            crc = kb_crc32c(0, fbuf, got);
            if (pwrite(g.fd, fbuf, got, (off_t)g.used) != (ssize_t)got) die("pwrite");
        } else if (m_mmap || m_pop) {
            unsigned char *dst = g.map + g.used;
            if (m_pop && madvise(dst, frame, MADV_POPULATE_WRITE) != 0) die("madvise(MADV_POPULATE_WRITE)");
            got = recv_full(s, dst, frame);
            crc = kb_crc32c(0, dst, got);
        } else {
            got = 0;
            while (got < frame) {
                ssize_t n = splice(s, NULL, pipefd[1], NULL, frame - got, SPLICE_F_MOVE);
                if (n < 0) { if (errno == EINTR) continue; die("splice from socket"); }
                if (n == 0) break;
                ssize_t left = n;
                while (left > 0) {
                    loff_t off = (loff_t)(g.used + got + (size_t)(n - left));
                    ssize_t w = splice(pipefd[0], NULL, g.fd, &off, (size_t)left, SPLICE_F_MOVE);
                    if (w <= 0) die("splice to file");
                    left -= w;
                }
                got += (size_t)n;
            }
            crc = kb_crc32c(0, rmap + g.used, got);
        }
        if (got == 0) break;
        crcsum ^= crc + (uint32_t)(received / frame);
        g.used += got;
        received += got;
        if (got < frame) break;
    }
    double wall = now() - t0;
    getrusage(RUSAGE_SELF, &r1);
    if (rmap) munmap(rmap, segment);
    if (m_splice) g.map = NULL;
    seg_close(&g, dir, segment);
    int status;
    struct rusage rc;
    if (wait4(child, &status, 0, &rc) < 0) die("wait4");
    double user = tv(r1.ru_utime) - tv(r0.ru_utime), sys = tv(r1.ru_stime) - tv(r0.ru_stime);
    printf("{\"mode\": \"%s\", \"bytes\": %llu, \"frame\": %zu, \"wall_s\": %.3f, \"user_s\": %.3f, "
           "\"sys_s\": %.3f, \"cpu_s_per_gb\": %.4f, \"gb_per_s\": %.3f, \"minor_faults\": %ld, "
           "\"sender_cpu_s\": %.3f, \"crc_xor\": %u, \"warm\": %s, \"complete\": %s}\n",
           mode, (unsigned long long)received, frame, wall, user, sys, (user + sys) / (received / 1e9),
           received / 1e9 / wall, r1.ru_minflt - r0.ru_minflt, tv(rc.ru_utime) + tv(rc.ru_stime), crcsum,
           warm ? "true" : "false", received == total ? "true" : "false");
    return received == total ? 0 : 1;
}
