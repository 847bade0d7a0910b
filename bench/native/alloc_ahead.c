/* What allocating a segment's blocks ahead of its writes saves (issue 22): pwrite(2)s of
 * --chunk bytes into 1 GiB segment files, back to back, the way the broker appends a
 * Produce request's batches, in one of two modes:
 *
 *   plain   pwrite into a file that grows (the file system reserves blocks page by page)
 *   ahead   before a write past the allocated end, fallocate(2) FALLOC_FL_KEEP_SIZE the
 *           range up to the write's end plus --ahead bytes (the broker's segment.pyx);
 *           what is left beyond the end is freed with ftruncate(2) when a file is done
 *
 * By default every file is deleted once written, as the pinned comparison deletes its
 * topics: what is measured is the write into the page cache. With --keep the files stay
 * until every byte has been written back (syncfs), so the writeback's own work (block
 * allocation for plain, unwritten-extent conversion for ahead), done by kernel threads, is
 * in the machine-wide busy time.
 *
 * One JSON line: mode, bytes, wall seconds, this process's user and system CPU seconds and
 * CPU s per GB, and the whole machine's busy CPU seconds (all cores, /proc/stat) over the
 * run (with --keep, the writeback included).
 *
 * Usage: alloc_ahead plain|ahead [--gb N] [--chunk BYTES] [--ahead BYTES] [--dir DIR] [--keep]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define SEGMENT (1UL << 30)

static double busy_seconds(void) {
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[10] = {0};
    if (!f || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                     &v[6], &v[7]) != 8) {
        fprintf(stderr, "alloc_ahead: cannot read /proc/stat\n");
        exit(1);
    }
    fclose(f);
    /* user nice system idle iowait irq softirq steal: busy is all but idle and iowait */
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / sysconf(_SC_CLK_TCK);
}

static double seconds(struct timeval t) { return t.tv_sec + t.tv_usec / 1e6; }

int main(int argc, char **argv) {
    double gb = 2.0;
    size_t chunk = 128 * 1024, ahead = 1 << 20;
    const char *dir = "/var/tmp";
    int keep = 0;
    static struct option opts[] = {{"gb", required_argument, 0, 'g'}, {"chunk", required_argument, 0, 'c'},
                                   {"ahead", required_argument, 0, 'a'}, {"dir", required_argument, 0, 'd'},
                                   {"keep", no_argument, 0, 'k'}, {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'g': gb = atof(optarg); break;
        case 'c': chunk = strtoul(optarg, NULL, 10); break;
        case 'a': ahead = strtoul(optarg, NULL, 10); break;
        case 'd': dir = optarg; break;
        case 'k': keep = 1; break;
        default: return 2;
        }
    }
    if (optind != argc - 1 || (strcmp(argv[optind], "plain") && strcmp(argv[optind], "ahead")) || chunk == 0 ||
        gb <= 0) {
        fprintf(stderr, "usage: alloc_ahead plain|ahead [--gb N] [--chunk BYTES] [--ahead BYTES] [--dir DIR] "
                        "[--keep]\n");
        return 2;
    }
    int allocate = !strcmp(argv[optind], "ahead");
    char *buf = malloc(chunk);
    if (!buf) return 1;
    memset(buf, 'x', chunk);
    size_t total = (size_t)(gb * 1e9), done = 0;
    int files = 0;
    struct rusage r0, r1;
    struct timespec t0, t1;
    double busy0 = busy_seconds();
    getrusage(RUSAGE_SELF, &r0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (done < total) {
        char name[512];
        snprintf(name, sizeof name, "%s/alloc_ahead.%d.%d.log", dir, (int)getpid(), files);
        files++;
        int fd = open(name, O_CREAT | O_RDWR | O_TRUNC, 0644);
        if (fd < 0) {
            fprintf(stderr, "alloc_ahead: %s: %s\n", name, strerror(errno));
            return 1;
        }
        size_t alloc_end = 0, off = 0;
        for (; off < SEGMENT && done < total; off += chunk, done += chunk) {
            if (allocate && off + chunk > alloc_end) {
                size_t start = alloc_end > off ? alloc_end : off;
                if (fallocate(fd, FALLOC_FL_KEEP_SIZE, start, off + chunk + ahead - start) == 0)
                    alloc_end = off + chunk + ahead;
            }
            if (pwrite(fd, buf, chunk, off) != (ssize_t)chunk) {
                fprintf(stderr, "alloc_ahead: pwrite: %s\n", strerror(errno));
                return 1;
            }
        }
        if (allocate && alloc_end > off) ftruncate(fd, off);
        close(fd);
        if (!keep) unlink(name);
    }
    if (keep) {
        int fd = open(dir, O_RDONLY);
        syncfs(fd);
        close(fd);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    getrusage(RUSAGE_SELF, &r1);
    double busy = busy_seconds() - busy0;
    if (keep)
        for (int i = 0; i < files; i++) {
            char name[512];
            snprintf(name, sizeof name, "%s/alloc_ahead.%d.%d.log", dir, (int)getpid(), i);
            unlink(name);
        }
    double user = seconds(r1.ru_utime) - seconds(r0.ru_utime), sys = seconds(r1.ru_stime) - seconds(r0.ru_stime);
    printf("{\"mode\": \"%s\", \"bytes\": %zu, \"chunk\": %zu, \"ahead\": %zu, \"keep\": %s, \"wall_s\": %.3f, "
           "\"user_s\": %.3f, \"sys_s\": %.3f, \"cpu_s_per_gb\": %.3f, \"machine_busy_s\": %.2f}\n",
           argv[optind], done, chunk, allocate ? ahead : 0, keep ? "true" : "false",
           (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9, user, sys, (user + sys) / (done / 1e9), busy);
    return 0;
}
