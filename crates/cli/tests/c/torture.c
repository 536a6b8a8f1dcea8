/* The torture of `lockmeter torture` through the real pthread API, for
 * replace mode: `lockmeter run --lock ALG -- torture THREADS SECONDS SEED`.
 * Writers lock, trylock and timed-lock one mutex at random, checking
 * exclusion on shadow data; producers and consumers pass numbered tokens
 * through a queue under a second mutex and two condvars; a watchdog in
 * main fails the run when a thread stops making progress. Exit 0 when
 * clean, 1 with the violation and the seed.
 * Build: gcc -O1 -pthread torture.c -o torture */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define QUEUE 8
#define MAX_THREADS 512

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER, not_full = PTHREAD_COND_INITIALIZER;
static unsigned long owner, counter, slots[QUEUE], head, tail;
static unsigned long produced, consumed, produced_sum, consumed_sum;
static unsigned long progress[MAX_THREADS], acquisitions[MAX_THREADS];
static volatile int stop;
static unsigned long seed;

static void fail(const char *what, long a, long b) {
    fprintf(stderr, "torture: violation (seed %lu): %s (%ld, %ld)\n", seed, what, a, b);
    fflush(stderr);
    _exit(1);
}

static unsigned long next(unsigned long *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static unsigned long hash(unsigned long t) {
    t = (t ^ (t >> 30)) * 0xbf58476d1ce4e5b9UL;
    t = (t ^ (t >> 27)) * 0x94d049bb133111ebUL;
    return t ^ (t >> 31);
}

static void *writer(void *arg) {
    long me = (long)arg + 1;
    unsigned long rng = seed ^ (me * 0x9e3779b97f4a7c15UL);
    if (!rng) rng = 1;
    while (!stop) {
        unsigned long choice = next(&rng) % 100;
        int acquired;
        if (choice < 70) {
            acquired = pthread_mutex_lock(&lock) == 0;
        } else if (choice < 85) {
            acquired = pthread_mutex_trylock(&lock) == 0;
        } else {
            struct timespec at;
            clock_gettime(CLOCK_REALTIME, &at);
            at.tv_nsec += next(&rng) % 200000;
            if (at.tv_nsec >= 1000000000L) { at.tv_sec++; at.tv_nsec -= 1000000000L; }
            int r = pthread_mutex_timedlock(&lock, &at);
            if (r != 0 && r != ETIMEDOUT) fail("timedlock returned an error", me, r);
            acquired = r == 0;
        }
        if (acquired) {
            unsigned long other = __atomic_load_n(&owner, __ATOMIC_RELAXED);
            if (other) fail("exclusion: acquired while another thread held the lock", me - 1, (long)other - 1);
            __atomic_store_n(&owner, me, __ATOMIC_RELAXED);
            unsigned long value = __atomic_load_n(&counter, __ATOMIC_RELAXED);
            for (unsigned long i = next(&rng) % 64; i; i--) __asm__ volatile("pause");
            if (next(&rng) % 512 == 0) sched_yield();
            __atomic_store_n(&counter, value + 1, __ATOMIC_RELAXED);
            if (__atomic_load_n(&owner, __ATOMIC_RELAXED) != (unsigned long)me) fail("exclusion: another thread entered", me - 1, 0);
            __atomic_store_n(&owner, 0, __ATOMIC_RELAXED);
            if (pthread_mutex_unlock(&lock) != 0) fail("unlock failed", me - 1, 0);
            acquisitions[me - 1]++;
        }
        __atomic_fetch_add(&progress[me - 1], 1, __ATOMIC_RELAXED);
        for (unsigned long i = next(&rng) % 64; i; i--) __asm__ volatile("pause");
    }
    return NULL;
}

static void *producer(void *arg) {
    long index = (long)arg;
    unsigned long sequence = 0;
    while (!stop) {
        pthread_mutex_lock(&queue_lock);
        while (tail - head == QUEUE && !stop) pthread_cond_wait(&not_full, &queue_lock);
        if (stop) { pthread_mutex_unlock(&queue_lock); break; }
        unsigned long token = ((unsigned long)index << 40) | sequence++;
        slots[tail % QUEUE] = token;
        tail++;
        produced++;
        produced_sum += hash(token);
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&queue_lock);
        __atomic_fetch_add(&progress[index], 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void *consumer(void *arg) {
    long index = (long)arg;
    for (;;) {
        pthread_mutex_lock(&queue_lock);
        while (tail == head) {
            if (stop) { pthread_mutex_unlock(&queue_lock); return NULL; }
            pthread_cond_wait(&not_empty, &queue_lock);
        }
        unsigned long token = slots[head % QUEUE];
        head++;
        consumed++;
        consumed_sum += hash(token);
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&queue_lock);
        __atomic_fetch_add(&progress[index], 1, __ATOMIC_RELAXED);
    }
}

int main(int argc, char **argv) {
    int writers = argc > 1 ? atoi(argv[1]) : 4;
    double seconds = argc > 2 ? atof(argv[2]) : 1.0;
    seed = argc > 3 ? strtoul(argv[3], NULL, 10) : (unsigned long)time(NULL);
    int pairs = writers / 8 > 0 ? writers / 8 : 1;
    int total = writers + 2 * pairs;
    if (writers < 1 || total > MAX_THREADS || seconds <= 0) {
        fprintf(stderr, "usage: torture [WRITERS 1..%d] [SECONDS] [SEED]\n", MAX_THREADS - 128);
        return 2;
    }
    pthread_t threads[MAX_THREADS];
    for (long i = 0; i < writers; i++) pthread_create(&threads[i], NULL, writer, (void *)i);
    for (long p = 0; p < pairs; p++) {
        pthread_create(&threads[writers + p], NULL, producer, (void *)(long)(writers + p));
        pthread_create(&threads[writers + pairs + p], NULL, consumer, (void *)(long)(writers + pairs + p));
    }
    unsigned long last[MAX_THREADS] = {0};
    int idle[MAX_THREADS] = {0};
    for (int tick = 0; tick < seconds * 50; tick++) {
        usleep(20000);
        for (int i = 0; i < total; i++) {
            unsigned long seen = __atomic_load_n(&progress[i], __ATOMIC_RELAXED);
            idle[i] = seen == last[i] ? idle[i] + 1 : 0;
            last[i] = seen;
            if (idle[i] > 250) fail("no progress for 5 s (a lost wake-up or a deadlock) in thread", i, 0);
        }
    }
    stop = 1;
    pthread_mutex_lock(&queue_lock);
    pthread_cond_broadcast(&not_empty);
    pthread_cond_broadcast(&not_full);
    pthread_mutex_unlock(&queue_lock);
    alarm(10); /* a thread that never finishes ends the run (SIGALRM) */
    for (int i = 0; i < total; i++) pthread_join(threads[i], NULL);
    unsigned long total_acquisitions = 0, least = ~0UL, most = 0;
    for (int i = 0; i < writers; i++) {
        total_acquisitions += acquisitions[i];
        if (acquisitions[i] < least) least = acquisitions[i];
        if (acquisitions[i] > most) most = acquisitions[i];
    }
    if (counter != total_acquisitions) fail("lost updates: counter vs acquisitions", counter, total_acquisitions);
    if (produced != consumed || produced_sum != consumed_sum) fail("condvar queue lost or duplicated a token", produced, consumed);
    printf("torture: ok, %d writers, %lu acquisitions (%.0f/s, per thread %lu..%lu), %lu tokens, seed %lu\n", writers,
           total_acquisitions, total_acquisitions / seconds, least, most, consumed, seed);
    return 0;
}
