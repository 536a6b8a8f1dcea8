/* A small threaded cache, the program `lockmeter demo` profiles (and the
 * kind of program lockmeter is for): worker threads look keys up in a hash
 * table behind one global lock, count hits under a second lock, and every
 * so often a maintenance thread rewrites the table under a reader-writer
 * lock. It prints its throughput. With "hang", the maintenance thread's
 * tenth pass returns without unlocking (a bug), the workers block, and a
 * watchdog alarm ends the program 0.3 s in.
 * Usage: cache [THREADS] [OPS_PER_THREAD] [PROBES: work under the lock, 48 = about 0.2 us] [hang] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUCKETS 4096

static unsigned long table[BUCKETS];
pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_rwlock_t config_lock = PTHREAD_RWLOCK_INITIALIZER;
static unsigned long hits, misses, config_generation;
static long ops_per_thread = 100000;
static int probes = 48;
static int hang;

static unsigned long mix(unsigned long x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdUL;
    x ^= x >> 33;
    return x;
}

/* About a microsecond of work on the table, under the lock. */
static int lookup(unsigned long key) {
    unsigned long h = key;
    int hit = 0;
    for (int probe = 0; probe < probes; probe++) {
        h = mix(h + probe);
        hit |= table[h % BUCKETS] == key;
    }
    table[key % BUCKETS] = key;
    return hit;
}

static void *worker(void *arg) {
    unsigned long key = (unsigned long)(size_t)arg * 7919;
    for (long i = 0; i < ops_per_thread; i++) {
        key = mix(key + i) % (BUCKETS * 4);
        pthread_rwlock_rdlock(&config_lock);
        unsigned long generation = config_generation;
        pthread_rwlock_unlock(&config_lock);
        pthread_mutex_lock(&cache_lock);
        int hit = lookup(key + generation);
        pthread_mutex_unlock(&cache_lock);
        /* Work outside the lock: about as long as inside. */
        volatile unsigned long spin = key;
        for (int j = 0; j < probes; j++) spin = mix(spin);
        pthread_mutex_lock(&stats_lock);
        if (hit) hits++; else misses++;
        pthread_mutex_unlock(&stats_lock);
    }
    return NULL;
}

static void *maintenance(void *arg) {
    struct timespec pause = { 0, 2000000 };
    int passes = 0;
    while (!*(volatile int *)arg) {
        pthread_rwlock_wrlock(&config_lock);
        config_generation++;
        if (hang && ++passes == 10) return NULL; /* the bug: still locked */
        pthread_rwlock_unlock(&config_lock);
        nanosleep(&pause, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2) ops_per_thread = atol(argv[2]);
    if (argc > 3) probes = atoi(argv[3]);
    if (argc > 4 && !strcmp(argv[4], "hang")) {
        hang = 1;
        ualarm(300000, 0); /* the watchdog: SIGALRM ends the program */
    }
    if (threads < 1 || threads > 1024 || ops_per_thread < 1 || probes < 1) {
        fprintf(stderr, "usage: cache [THREADS 1..1024] [OPS_PER_THREAD] [PROBES] [hang]\n");
        return 2;
    }
    pthread_t *t = calloc(threads, sizeof *t), keeper;
    int done = 0;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pthread_create(&keeper, NULL, maintenance, &done);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(size_t)(i + 1));
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    done = 1;
    pthread_join(keeper, NULL);
    clock_gettime(CLOCK_MONOTONIC, &end);
    double seconds = (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9;
    printf("cache: %d threads, %.0f ops/s (%lu hits, %lu misses)\n", threads, threads * ops_per_thread / seconds, hits, misses);
    return 0;
}
