/* Exercises every algorithm through include/lockmeter.h, as a C program
 * linked only against liblockmeter and pthreads. Prints one line per check
 * and closes with "N passed, N failed"; exits non-zero on any failure. */
#define _GNU_SOURCE
#include "lockmeter.h"
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int passed, failed;

static void check(int ok, const char *algorithm, const char *what) {
    if (ok) {
        passed++;
    } else {
        failed++;
        printf("FAIL %s: %s\n", algorithm, what);
    }
}

static lm_mutex_t mutex;
static lm_cond_t cond;
static volatile long counter;
static long per_thread;

static void *increment(void *arg) {
    (void)arg;
    for (long i = 0; i < per_thread; i++) {
        lm_mutex_lock(&mutex);
        long v = counter; /* non-atomic read-modify-write: needs exclusion */
        __asm__ volatile("pause");
        counter = v + 1;
        lm_mutex_unlock(&mutex);
    }
    return NULL;
}

static int exclusion(int threads, long each) {
    pthread_t t[64];
    counter = 0;
    per_thread = each;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, increment, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    return counter == threads * each;
}

static void *try_from_other_thread(void *arg) {
    (void)arg;
    return (void *)(long)lm_mutex_trylock(&mutex);
}

static void *unlock_from_other_thread(void *arg) {
    (void)arg;
    return (void *)(long)lm_mutex_unlock(&mutex);
}

static struct timespec in_ms(long ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (ms % 1000) * 1000000L;
    ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return ts;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *timed_from_other_thread(void *arg) {
    (void)arg;
    struct timespec deadline = in_ms(50);
    double start = now_ms();
    int r = lm_mutex_timedlock(&mutex, &deadline);
    double waited = now_ms() - start;
    return (void *)(long)(r == ETIMEDOUT && waited >= 45 && waited < 2000);
}

static void *bad_timespec_from_other_thread(void *arg) {
    (void)arg;
    struct timespec bad = {.tv_sec = 0, .tv_nsec = 2000000000L};
    return (void *)(long)lm_mutex_timedlock(&mutex, &bad);
}

/* A deadline before 1970 is a valid one that has passed. */
static void *past_deadline_from_other_thread(void *arg) {
    (void)arg;
    struct timespec past = {.tv_sec = -1, .tv_nsec = 0};
    return (void *)(long)lm_mutex_timedlock(&mutex, &past);
}

static volatile long turn;
enum { ROUNDS = 2000 };

static void *ping_pong(void *arg) {
    long me = (long)arg;
    for (int i = 0; i < ROUNDS; i++) {
        lm_mutex_lock(&mutex);
        while (turn % 2 != me) lm_cond_wait(&cond, &mutex);
        turn++;
        lm_cond_broadcast(&cond);
        lm_mutex_unlock(&mutex);
    }
    return NULL;
}

static volatile int flag;

static void *set_flag_and_signal(void *arg) {
    (void)arg;
    lm_mutex_lock(&mutex);
    flag = 1;
    lm_cond_signal(&cond);
    lm_mutex_unlock(&mutex);
    return NULL;
}

/* A deadline centuries away (tv_sec = LONG_MAX, a common "forever") must
 * wait for the signal, not wrap into a spurious timeout. */
static int far_deadline_waits_for_signal(void) {
    struct timespec forever = {.tv_sec = (time_t)0x7fffffffffffffffL, .tv_nsec = 0};
    int result = 0;
    pthread_t t;
    flag = 0;
    lm_mutex_lock(&mutex);
    pthread_create(&t, NULL, set_flag_and_signal, NULL);
    while (!flag && result == 0) result = lm_cond_timedwait(&cond, &mutex, &forever);
    lm_mutex_unlock(&mutex);
    pthread_join(t, NULL);
    return result == 0 && flag;
}

/* A condvar destroyed right after a broadcast, its woken waiter maybe
 * not yet gone (POSIX allows it): 0 every time, 200 times (it read EBUSY
 * when the waiter had not left yet). */
static lm_cond_t doomed;
static void *wait_for_flag(void *condvar) {
    lm_mutex_lock(&mutex);
    while (!flag) lm_cond_wait(condvar, &mutex);
    lm_mutex_unlock(&mutex);
    return NULL;
}
static int destroy_right_after_broadcast(void) {
    int destroyed = 0;
    for (int i = 0; i < 200; i++) {
        pthread_t t;
        lm_cond_init(&doomed);
        flag = 0;
        pthread_create(&t, NULL, wait_for_flag, &doomed);
        usleep(200);
        lm_mutex_lock(&mutex);
        flag = 1;
        lm_cond_broadcast(&doomed);
        destroyed += lm_cond_destroy(&doomed) == 0;
        lm_mutex_unlock(&mutex);
        pthread_join(t, NULL);
    }
    return destroyed == 200;
}

/* A condvar a thread waits on, never woken, is busy: EBUSY after a second,
 * spent mostly asleep (it yielded for the whole second: a CPU's worth). */
static lm_cond_t occupied;
static int destroy_with_a_blocked_waiter_is_ebusy_and_sleeps(void) {
    pthread_t t;
    struct timespec cpu_before, cpu_after;
    lm_cond_init(&occupied);
    flag = 0;
    pthread_create(&t, NULL, wait_for_flag, &occupied);
    usleep(20000);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu_before);
    int busy = lm_cond_destroy(&occupied) == EBUSY;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu_after);
    double cpu_ms = (cpu_after.tv_sec - cpu_before.tv_sec) * 1e3 + (cpu_after.tv_nsec - cpu_before.tv_nsec) / 1e6;
    lm_mutex_lock(&mutex);
    flag = 1;
    lm_cond_broadcast(&occupied);
    lm_mutex_unlock(&mutex);
    pthread_join(t, NULL);
    if (cpu_ms > 300) printf("destroy took %.0f ms of CPU\n", cpu_ms);
    return busy && cpu_ms <= 300;
}

/* A wait is a cancellation point, as pthread_cond_wait's: the cancelled
 * waiter holds the mutex again in its cleanup handler (it could not be
 * cancelled there: the join waited for ever). */
static int held_in_cleanup;
static void note_held_and_unlock(void *arg) {
    (void)arg;
    held_in_cleanup = lm_mutex_trylock(&mutex) == EBUSY;
    lm_mutex_unlock(&mutex);
}
static void *wait_to_be_cancelled(void *arg) {
    lm_mutex_lock(&mutex);
    pthread_cleanup_push(note_held_and_unlock, NULL);
    for (;;) lm_cond_wait(&cond, &mutex);
    pthread_cleanup_pop(0);
    return arg;
}
static int cancelled_in_a_wait(void) {
    pthread_t t;
    held_in_cleanup = 0;
    pthread_create(&t, NULL, wait_to_be_cancelled, NULL);
    usleep(20000);
    pthread_cancel(t);
    struct timespec give_up;
    clock_gettime(CLOCK_REALTIME, &give_up);
    give_up.tv_sec += 5;
    void *result = NULL;
    if (pthread_timedjoin_np(t, &result, &give_up) != 0) {
        /* Still waiting, it would take part in every later check: stop. */
        check(0, "-", "a thread cancelled in a cond wait ends within 5 s");
        printf("%d passed, %d failed\n", passed, failed);
        exit(1);
    }
    return result == PTHREAD_CANCELED && held_in_cleanup && lm_mutex_trylock(&mutex) == 0 && lm_mutex_unlock(&mutex) == 0;
}

static void test_algorithm(const char *name) {
    check(lm_mutex_init(&mutex, name) == 0, name, "init");
    check(strcmp(lm_mutex_algorithm(&mutex), name) == 0, name, "algorithm name round-trips");
    check(exclusion(2, 20000), name, "mutual exclusion, 2 threads");
    check(exclusion(8, 5000), name, "mutual exclusion, 8 threads");
    check(exclusion(64, 300), name, "mutual exclusion, 64 threads");

    pthread_t t;
    void *result;
    lm_mutex_lock(&mutex);
    pthread_create(&t, NULL, try_from_other_thread, NULL);
    pthread_join(t, &result);
    check((long)result == EBUSY, name, "trylock on a held mutex is EBUSY");
    pthread_create(&t, NULL, timed_from_other_thread, NULL);
    pthread_join(t, &result);
    check((long)result == 1, name, "timedlock on a held mutex times out after its deadline");
    pthread_create(&t, NULL, bad_timespec_from_other_thread, NULL);
    pthread_join(t, &result);
    check((long)result == EINVAL, name, "timedlock with tv_nsec >= 1e9 is EINVAL");
    pthread_create(&t, NULL, past_deadline_from_other_thread, NULL);
    pthread_join(t, &result);
    check((long)result == ETIMEDOUT, name, "timedlock with a negative tv_sec times out, as pthread's does");
    check(lm_mutex_destroy(&mutex) == EBUSY, name, "destroying a held mutex is EBUSY");
    struct timespec relock = in_ms(20);
    check(lm_mutex_timedlock(&mutex, &relock) == ETIMEDOUT, name, "a timed relock by the holder times out");
    if (strcmp(name, "pi") == 0) {
        /* As glibc's PI mutex: only the holder unlocks. */
        pthread_create(&t, NULL, unlock_from_other_thread, NULL);
        pthread_join(t, &result);
        check((long)result == EPERM, name, "unlock by a thread that does not hold it is EPERM");
        check(lm_mutex_trylock(&mutex) == EBUSY, name, "and the mutex is still held");
    }
    check(lm_mutex_unlock(&mutex) == 0, name, "unlock by the holder");
    check(lm_mutex_unlock(&mutex) == EPERM, name, "unlocking a free mutex is EPERM");
    check(lm_mutex_trylock(&mutex) == 0, name, "trylock on a free mutex succeeds");
    lm_mutex_unlock(&mutex);
    struct timespec soon = in_ms(20);
    check(lm_mutex_timedlock(&mutex, &soon) == 0, name, "timedlock on a free mutex succeeds");
    lm_mutex_unlock(&mutex);

    check(lm_cond_init(&cond) == 0, name, "cond init");
    turn = 0;
    pthread_t a, b;
    pthread_create(&a, NULL, ping_pong, (void *)0L);
    pthread_create(&b, NULL, ping_pong, (void *)1L);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    check(turn == 2 * ROUNDS, name, "condvar ping-pong, no lost wake-up");
    lm_mutex_lock(&mutex);
    struct timespec deadline = in_ms(30);
    check(lm_cond_timedwait(&cond, &mutex, &deadline) == ETIMEDOUT, name, "cond timedwait times out");
    check(lm_mutex_trylock(&mutex) == EBUSY, name, "the mutex is held again after a timed-out wait");
    lm_mutex_unlock(&mutex);
    check(far_deadline_waits_for_signal(), name, "cond timedwait with a far-future deadline waits for the signal");
    check(cancelled_in_a_wait(), name, "a thread cancelled in a cond wait holds the mutex in its cleanup");
    check(lm_cond_destroy(&cond) == 0, name, "cond destroy");
    check(destroy_right_after_broadcast(), name, "cond destroy right after a broadcast");
    check(lm_mutex_destroy(&mutex) == 0, name, "destroy a free mutex");
}

int main(void) {
    lm_mutex_t fresh = LM_MUTEX_INITIALIZER;
    check(strcmp(lm_mutex_algorithm(&fresh), "adaptive") == 0, "-", "the initializer is an adaptive mutex");
    lm_mutex_init(&mutex, "adaptive");
    check(destroy_with_a_blocked_waiter_is_ebusy_and_sleeps(), "-", "cond destroy with a blocked waiter is EBUSY, asleep");
    check(lm_mutex_lock(&fresh) == 0 && lm_mutex_unlock(&fresh) == 0, "-", "the initializer locks and unlocks");
    check(lm_mutex_init(&fresh, "fastest") == EINVAL, "-", "an unknown algorithm is EINVAL");
    check(lm_algorithm_name(lm_algorithm_count()) == NULL, "-", "no name past the last algorithm");
    for (int i = 0; i < lm_algorithm_count(); i++) {
        const char *name = lm_algorithm_name(i);
        int before = failed;
        test_algorithm(name);
        printf("%-10s %s\n", name, failed == before ? "ok" : "FAILED");
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
