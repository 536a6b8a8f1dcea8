/* POSIX conformance of the pthread mutex and condvar functions that
 * `lockmeter run --lock ALG` (LOCKMETER_LOCK=ALG) serves with its own
 * algorithms, and of the locks it leaves to glibc. It passes under
 * glibc's own locks too: every expectation here is glibc's behaviour.
 * Prints "ok: N checks" or the first failure.
 * Build: gcc -O1 -pthread conformance.c -o conformance */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

static int checks;
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        checks++;                                                          \
        if (!(cond)) {                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            exit(1);                                                       \
        }                                                                  \
    } while (0)
/* Each part of the suite names itself on stderr as it starts: a crash
 * (no message, stdout's buffer lost) then says where it happened. */
#define SECTION(call)                                                      \
    do {                                                                   \
        fprintf(stderr, "-- %s\n", #call);                                 \
        call;                                                              \
    } while (0)
/* Each side evaluated once: the message shows the value the check saw. */
#define EQ(a, b)                                                           \
    do {                                                                   \
        long eq_got_ = (long)(a), eq_want_ = (long)(b);                    \
        CHECK(eq_got_ == eq_want_, "%s is %ld, not %ld", #a, eq_got_, eq_want_); \
    } while (0)

/* A thread that cannot start (a limit on threads or memory) says so:
 * unchecked, its pthread_t was joined uninitialised (SIGSEGV). */
static void start_thread(pthread_t *t, void *(*body)(void *), void *arg) {
    int error = pthread_create(t, NULL, body, arg);
    if (error) {
        fprintf(stderr, "FAIL: pthread_create: %s\n", strerror(error));
        exit(1);
    }
}

static long now_ms(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

static struct timespec in_ms(clockid_t clock, long ms) {
    struct timespec t;
    clock_gettime(clock, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) { t.tv_sec++; t.tv_nsec -= 1000000000L; }
    return t;
}

/* Runs fn(arg) on another thread and returns its int result. */
static void *call(void *arg) {
    void **pair = arg;
    int (*fn)(void *) = (int (*)(void *))pair[0];
    return (void *)(long)fn(pair[1]);
}
static int on_other_thread(int (*fn)(void *), void *arg) {
    pthread_t t;
    void *pair[2] = { (void *)fn, arg }, *result;
    start_thread(&t, call, pair);
    pthread_join(t, &result);
    return (int)(long)result;
}
static int try_it(void *m) { return pthread_mutex_trylock(m); }
static int unlock_it(void *m) { return pthread_mutex_unlock(m); }
static int timed_50ms(void *m) {
    struct timespec at = in_ms(CLOCK_REALTIME, 50);
    long start = now_ms(CLOCK_MONOTONIC);
    int r = pthread_mutex_timedlock(m, &at);
    long waited = now_ms(CLOCK_MONOTONIC) - start;
    return r == ETIMEDOUT && waited >= 40 ? ETIMEDOUT : (r ? r : -1);
}
static int clocked_50ms(void *m) {
    struct timespec at = in_ms(CLOCK_MONOTONIC, 50);
    return pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &at);
}
static int bad_timespec(void *m) {
    struct timespec at = in_ms(CLOCK_REALTIME, 50);
    at.tv_nsec = 1000000000L;
    return pthread_mutex_timedlock(m, &at);
}
/* glibc looks at a deadline's seconds first: one before the epoch has
 * passed, whatever its nanoseconds say. */
static int past_bad_timespec(void *m) {
    struct timespec at = { -1, 2000000000L };
    return pthread_mutex_timedlock(m, &at);
}
static int bad_clock(void *m) {
    struct timespec at = in_ms(CLOCK_MONOTONIC, 50);
    return pthread_mutex_clocklock(m, CLOCK_PROCESS_CPUTIME_ID, &at);
}

static pthread_mutex_t static_normal = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t static_recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t static_errorcheck = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static pthread_mutex_t static_adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;

static void normal_semantics(pthread_mutex_t *m) {
    EQ(pthread_mutex_lock(m), 0);
    EQ(on_other_thread(try_it, m), EBUSY);
    EQ(on_other_thread(timed_50ms, m), ETIMEDOUT);
    EQ(on_other_thread(clocked_50ms, m), ETIMEDOUT);
    EQ(on_other_thread(bad_timespec, m), EINVAL);
    EQ(on_other_thread(past_bad_timespec, m), ETIMEDOUT);
    EQ(on_other_thread(bad_clock, m), EINVAL);
    EQ(pthread_mutex_destroy(m), EBUSY);
    EQ(pthread_mutex_unlock(m), 0);
    EQ(pthread_mutex_trylock(m), 0);
    EQ(pthread_mutex_unlock(m), 0);
    struct timespec at = in_ms(CLOCK_REALTIME, 50);
    at.tv_nsec = -1;
    EQ(pthread_mutex_timedlock(m, &at), 0); /* free: the timespec need not be checked */
    EQ(pthread_mutex_unlock(m), 0);
    /* glibc lets any thread unlock a normal mutex. (Served by `pi`, the
     * kernel refuses an unlock by a thread that does not hold it.) */
    const char *served_by = getenv("LOCKMETER_LOCK");
    if (served_by && strcmp(served_by, "pi") == 0) return;
    EQ(pthread_mutex_lock(m), 0);
    EQ(on_other_thread(unlock_it, m), 0);
    EQ(on_other_thread(try_it, m), 0); /* and left held by a thread that exits */
    EQ(pthread_mutex_trylock(m), EBUSY);
    EQ(pthread_mutex_unlock(m), 0);
    EQ(pthread_mutex_trylock(m), 0);
    EQ(on_other_thread(try_it, m), EBUSY);
    EQ(pthread_mutex_unlock(m), 0);
}

/* Unlocking a normal mutex nobody holds: undefined in POSIX; glibc
 * returns 0 and the mutex locks and unlocks on (its destroy then refuses
 * it, EBUSY, which is why this mutex is never destroyed). */
static pthread_mutex_t unlocked_while_free = PTHREAD_MUTEX_INITIALIZER;
static void unlocking_a_free_normal_mutex(void) {
    pthread_mutex_t *m = &unlocked_while_free;
    EQ(pthread_mutex_unlock(m), 0);
    EQ(pthread_mutex_trylock(m), 0);
    EQ(on_other_thread(try_it, m), EBUSY);
    EQ(pthread_mutex_unlock(m), 0);
    EQ(on_other_thread(try_it, m), 0); /* left held by a thread that exits */
    EQ(pthread_mutex_trylock(m), EBUSY);
}

static void recursive_semantics(pthread_mutex_t *m) {
    EQ(pthread_mutex_lock(m), 0);
    EQ(pthread_mutex_lock(m), 0);
    EQ(pthread_mutex_trylock(m), 0);
    EQ(on_other_thread(try_it, m), EBUSY);
    EQ(on_other_thread(unlock_it, m), EPERM);
    EQ(pthread_mutex_unlock(m), 0);
    EQ(pthread_mutex_unlock(m), 0);
    EQ(on_other_thread(try_it, m), EBUSY); /* still held once */
    EQ(pthread_mutex_unlock(m), 0);
    EQ(pthread_mutex_unlock(m), EPERM); /* not held any more */
    EQ(on_other_thread(try_it, m), 0);  /* taken by a thread that exits... */
}

static void errorcheck_semantics(pthread_mutex_t *m) {
    EQ(pthread_mutex_lock(m), 0);
    EQ(pthread_mutex_lock(m), EDEADLK);
    EQ(pthread_mutex_trylock(m), EBUSY);
    EQ(on_other_thread(unlock_it, m), EPERM);
    EQ(pthread_mutex_unlock(m), 0);
    EQ(pthread_mutex_unlock(m), EPERM);
}

/* Exclusion: threads increment a plain counter under the lock. */
struct count { pthread_mutex_t *m; long counter; int rounds; };
static void *increment(void *arg) {
    struct count *c = arg;
    for (int i = 0; i < c->rounds; i++) {
        pthread_mutex_lock(c->m);
        long v = c->counter;
        if (i % 64 == 0) sched_yield();
        c->counter = v + 1;
        pthread_mutex_unlock(c->m);
    }
    return NULL;
}
static void exclusion(pthread_mutex_t *m, int threads, int rounds) {
    struct count c = { m, 0, rounds };
    pthread_t t[16];
    for (int i = 0; i < threads; i++) start_thread(&t[i], increment, &c);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    EQ(c.counter, (long)threads * c.rounds);
}

/* Condvars: a bounded queue, producers and consumers, every token once. */
#define TOKENS 5000
struct queue {
    pthread_mutex_t m;
    pthread_cond_t not_empty, not_full;
    int items[8], head, tail, size, taken;
    char seen[TOKENS];
};
static void *produce(void *arg) {
    struct queue *q = arg;
    static int next;
    for (;;) {
        pthread_mutex_lock(&q->m);
        while (q->size == 8) pthread_cond_wait(&q->not_full, &q->m);
        if (next >= TOKENS) { pthread_mutex_unlock(&q->m); return NULL; }
        q->items[q->tail] = next++;
        q->tail = (q->tail + 1) % 8;
        q->size++;
        pthread_cond_signal(&q->not_empty);
        pthread_mutex_unlock(&q->m);
    }
}
static void *consume(void *arg) {
    struct queue *q = arg;
    for (;;) {
        pthread_mutex_lock(&q->m);
        while (q->size == 0 && q->taken < TOKENS) pthread_cond_wait(&q->not_empty, &q->m);
        if (q->taken >= TOKENS) { pthread_cond_broadcast(&q->not_empty); pthread_mutex_unlock(&q->m); return NULL; }
        int token = q->items[q->head];
        q->head = (q->head + 1) % 8;
        q->size--;
        q->seen[token]++;
        if (++q->taken == TOKENS) pthread_cond_broadcast(&q->not_empty);
        pthread_cond_broadcast(&q->not_full);
        pthread_mutex_unlock(&q->m);
    }
}
static void queue_passes_every_token_once(void) {
    static struct queue q = { .m = PTHREAD_MUTEX_INITIALIZER, .not_empty = PTHREAD_COND_INITIALIZER, .not_full = PTHREAD_COND_INITIALIZER };
    pthread_t p[3], c[3];
    for (int i = 0; i < 3; i++) start_thread(&p[i], produce, &q);
    for (int i = 0; i < 3; i++) start_thread(&c[i], consume, &q);
    for (int i = 0; i < 3; i++) pthread_join(p[i], NULL);
    for (int i = 0; i < 3; i++) pthread_join(c[i], NULL);
    int once = 1;
    for (int i = 0; i < TOKENS; i++) once &= q.seen[i] == 1;
    CHECK(once, "a token was lost or delivered twice");
    EQ(q.taken, TOKENS);
}

static void timed_waits(void) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t realtime = PTHREAD_COND_INITIALIZER, monotonic;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    EQ(pthread_cond_init(&monotonic, &attr), 0);
    pthread_mutex_lock(&m);
    long start = now_ms(CLOCK_MONOTONIC);
    struct timespec at = in_ms(CLOCK_REALTIME, 60);
    EQ(pthread_cond_timedwait(&realtime, &m, &at), ETIMEDOUT);
    at = in_ms(CLOCK_MONOTONIC, 60);
    EQ(pthread_cond_timedwait(&monotonic, &m, &at), ETIMEDOUT);
    at = in_ms(CLOCK_MONOTONIC, 60);
    EQ(pthread_cond_clockwait(&realtime, &m, CLOCK_MONOTONIC, &at), ETIMEDOUT);
    long waited = now_ms(CLOCK_MONOTONIC) - start;
    CHECK(waited >= 170 && waited < 2000, "three 60 ms timed waits took %ld ms", waited);
    EQ(pthread_mutex_trylock(&m), EBUSY); /* held again after each timeout */
    at = in_ms(CLOCK_REALTIME, 60);
    at.tv_nsec = 2000000000L;
    EQ(pthread_cond_timedwait(&realtime, &m, &at), EINVAL);
    pthread_mutex_unlock(&m);
    EQ(pthread_cond_destroy(&monotonic), 0);
}

/* A clocked wait on a clock futexes cannot wait on is refused (EINVAL)
 * before the lock is tried: a free lock stays free, a semaphore keeps its
 * count, a condvar wait keeps the mutex. Then invalid deadlines. */
static void unwaitable_clock(void) {
    const clockid_t cpu = CLOCK_PROCESS_CPUTIME_ID;
    struct timespec at = in_ms(CLOCK_REALTIME, 1000);
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    EQ(pthread_mutex_clocklock(&m, cpu, &at), EINVAL);
    EQ(pthread_mutex_trylock(&m), 0);
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    EQ(pthread_cond_clockwait(&c, &m, cpu, &at), EINVAL);
    EQ(pthread_mutex_unlock(&m), 0);
    pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
    EQ(pthread_rwlock_clockrdlock(&l, cpu, &at), EINVAL);
    EQ(pthread_rwlock_clockwrlock(&l, cpu, &at), EINVAL);
    EQ(pthread_rwlock_trywrlock(&l), 0);
    pthread_rwlock_unlock(&l);
    sem_t sem;
    sem_init(&sem, 0, 1);
    errno = 0;
    EQ(sem_clockwait(&sem, cpu, &at), -1);
    EQ(errno, EINVAL);
    int value = -1;
    sem_getvalue(&sem, &value);
    EQ(value, 1);
    /* A deadline that is no time at all, likewise for rwlocks and
     * semaphores (a mutex is tried first: glibc takes a free one). */
    struct timespec bad = { 0, 2000000000 };
    EQ(pthread_rwlock_timedrdlock(&l, &bad), EINVAL);
    EQ(pthread_rwlock_timedwrlock(&l, &bad), EINVAL);
    EQ(pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &bad), EINVAL);
    EQ(pthread_rwlock_trywrlock(&l), 0);
    pthread_rwlock_unlock(&l);
    errno = 0;
    EQ(sem_timedwait(&sem, &bad), -1);
    EQ(errno, EINVAL);
    EQ(sem_clockwait(&sem, CLOCK_MONOTONIC, &bad), -1);
    sem_getvalue(&sem, &value);
    EQ(value, 1);
    sem_destroy(&sem);
}

/* A semaphore's wait is a cancellation point even when the count lets it
 * through: a thread cancelled while its cancellation was disabled is
 * cancelled at its next sem_wait and takes nothing. And a wait that blocks
 * and then succeeds leaves errno as it was. */
static sem_t sem_pending, sem_asked, sem_cancelled;
static void *sem_wait_after_pending_cancel(void *arg) {
    (void)arg;
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    sem_post(&sem_asked);
    sem_wait(&sem_cancelled); /* posted once the cancellation is pending */
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
    sem_wait(&sem_pending);
    return NULL;
}
static sem_t sem_later;
static void *post_later(void *arg) {
    (void)arg;
    usleep(30000);
    sem_post(&sem_later);
    return NULL;
}
static void semaphore_waits(void) {
    sem_init(&sem_pending, 0, 1);
    sem_init(&sem_asked, 0, 0);
    sem_init(&sem_cancelled, 0, 0);
    pthread_t t;
    void *result;
    start_thread(&t, sem_wait_after_pending_cancel, NULL);
    sem_wait(&sem_asked);
    pthread_cancel(t);
    sem_post(&sem_cancelled);
    pthread_join(t, &result);
    EQ(result == PTHREAD_CANCELED, 1);
    int value = -1;
    sem_getvalue(&sem_pending, &value);
    EQ(value, 1);
    sem_init(&sem_later, 0, 0);
    start_thread(&t, post_later, NULL);
    errno = 4242;
    EQ(sem_wait(&sem_later), 0);
    EQ(errno, 4242);
    pthread_join(t, NULL);
    start_thread(&t, post_later, NULL);
    struct timespec at = in_ms(CLOCK_REALTIME, 5000);
    errno = 4242;
    EQ(sem_timedwait(&sem_later, &at), 0);
    EQ(errno, 4242);
    pthread_join(t, NULL);
    sem_destroy(&sem_later);
    sem_destroy(&sem_cancelled);
    sem_destroy(&sem_asked);
    sem_destroy(&sem_pending);
}

/* Rwlocks, spinlocks and semaphores, which replace mode leaves to glibc
 * (in a process never profiled their calls go to glibc's functions
 * straight): readers share, a writer excludes, tries answer as glibc's,
 * and increments under each lock from several threads all count. */
static pthread_rwlock_t unserved_rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_spinlock_t unserved_spin;
static long under_write, under_spin;
static void *count_under_each(void *arg) {
    (void)arg;
    for (int i = 0; i < 20000; i++) {
        pthread_rwlock_wrlock(&unserved_rw);
        under_write++;
        pthread_rwlock_unlock(&unserved_rw);
        pthread_spin_lock(&unserved_spin);
        under_spin++;
        pthread_spin_unlock(&unserved_spin);
        pthread_rwlock_rdlock(&unserved_rw);
        pthread_rwlock_unlock(&unserved_rw);
    }
    return NULL;
}
static int try_read(void *l) {
    int result = pthread_rwlock_tryrdlock(l);
    if (result == 0) pthread_rwlock_unlock(l);
    return result;
}
static int try_write(void *l) { return pthread_rwlock_trywrlock(l); }
static int try_spin(void *l) { return pthread_spin_trylock(l); }
static void unserved_locks(void) {
    EQ(pthread_rwlock_rdlock(&unserved_rw), 0);
    EQ(pthread_rwlock_tryrdlock(&unserved_rw), 0);
    EQ(on_other_thread(try_read, &unserved_rw), 0);
    EQ(on_other_thread(try_write, &unserved_rw), EBUSY);
    EQ(pthread_rwlock_trywrlock(&unserved_rw), EBUSY);
    EQ(pthread_rwlock_unlock(&unserved_rw), 0);
    EQ(pthread_rwlock_unlock(&unserved_rw), 0);
    EQ(pthread_rwlock_wrlock(&unserved_rw), 0);
    EQ(on_other_thread(try_read, &unserved_rw), EBUSY);
    EQ(on_other_thread(try_write, &unserved_rw), EBUSY);
    EQ(pthread_rwlock_unlock(&unserved_rw), 0);
    EQ(pthread_rwlock_trywrlock(&unserved_rw), 0);
    EQ(pthread_rwlock_unlock(&unserved_rw), 0);

    EQ(pthread_spin_init(&unserved_spin, PTHREAD_PROCESS_PRIVATE), 0);
    EQ(pthread_spin_lock(&unserved_spin), 0);
    EQ(on_other_thread(try_spin, (void *)&unserved_spin), EBUSY);
    EQ(pthread_spin_unlock(&unserved_spin), 0);
    EQ(pthread_spin_trylock(&unserved_spin), 0);
    EQ(pthread_spin_unlock(&unserved_spin), 0);

    sem_t sem;
    EQ(sem_init(&sem, 0, 0), 0);
    errno = 0;
    EQ(sem_trywait(&sem), -1);
    EQ(errno, EAGAIN);
    EQ(sem_post(&sem), 0);
    EQ(sem_post(&sem), 0);
    EQ(sem_trywait(&sem), 0);
    EQ(sem_wait(&sem), 0);
    EQ(sem_trywait(&sem), -1);
    EQ(sem_destroy(&sem), 0);

    pthread_t threads[4];
    for (int i = 0; i < 4; i++) start_thread(&threads[i], count_under_each, NULL);
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
    EQ(under_write, 4 * 20000);
    EQ(under_spin, 4 * 20000);
    EQ(pthread_spin_destroy(&unserved_spin), 0);
}

/* Cancellation of a thread blocked in a condvar wait: the mutex is held
 * again when its cleanup handler runs. */
static pthread_mutex_t cancel_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cancel_c = PTHREAD_COND_INITIALIZER;
static int cancel_waiting, held_in_cleanup;
static void cleanup(void *arg) {
    (void)arg;
    held_in_cleanup = pthread_mutex_trylock(&cancel_m) == EBUSY;
    pthread_mutex_unlock(&cancel_m);
}
static void *wait_forever(void *arg) {
    pthread_mutex_lock(&cancel_m);
    pthread_cleanup_push(cleanup, NULL);
    cancel_waiting = 1;
    for (;;) pthread_cond_wait(&cancel_c, &cancel_m);
    pthread_cleanup_pop(0);
    return arg;
}
static void cancellation(void) {
    pthread_t t;
    void *result;
    start_thread(&t, wait_forever, NULL);
    for (;;) {
        pthread_mutex_lock(&cancel_m);
        int waiting = cancel_waiting;
        pthread_mutex_unlock(&cancel_m);
        if (waiting) break;
        usleep(1000);
    }
    usleep(20000);
    EQ(pthread_cancel(t), 0);
    EQ(pthread_join(t, &result), 0);
    CHECK(result == PTHREAD_CANCELED, "the waiter was not cancelled");
    CHECK(held_in_cleanup, "the mutex was not held again before the cleanup handler");
    EQ(pthread_mutex_trylock(&cancel_m), 0);
    pthread_mutex_unlock(&cancel_m);
}

/* Cancellation landing anywhere in a wait: a thread loops in timed waits
 * whose deadline has passed (so it is mostly not blocked) and is
 * cancelled after 0-300 us, 500 times; each time it is cancelled, its
 * cleanup handler finds the mutex held, and the condvar can then be
 * destroyed (it aborted the program when the cancellation came outside
 * the system call). */
static pthread_cond_t *racing_c;
static void *timed_waits_forever(void *arg) {
    struct timespec past = { 0, 0 };
    pthread_mutex_lock(&cancel_m);
    pthread_cleanup_push(cleanup, NULL);
    for (;;) pthread_cond_timedwait(racing_c, &cancel_m, &past);
    pthread_cleanup_pop(0);
    return arg;
}
static void cancellation_anywhere_in_a_wait(void) {
    srand(1);
    int held = 0;
    for (int i = 0; i < 500; i++) {
        pthread_cond_t c = PTHREAD_COND_INITIALIZER;
        pthread_t t;
        void *result;
        racing_c = &c;
        held_in_cleanup = 0;
        start_thread(&t, timed_waits_forever, NULL);
        usleep(rand() % 300);
        EQ(pthread_cancel(t), 0);
        EQ(pthread_join(t, &result), 0);
        CHECK(result == PTHREAD_CANCELED, "the waiter was not cancelled");
        held += held_in_cleanup;
        EQ(pthread_cond_destroy(&c), 0);
    }
    EQ(held, 500);
}

/* A signal sent as one waiter is cancelled reaches the other waiter (the
 * cancelled one had taken it: 63 of 100 lost). 30 times. */
static pthread_cond_t two_c = PTHREAD_COND_INITIALIZER;
static int two_waiting, two_go, two_done;
static void *wait_until_cancelled(void *arg) {
    pthread_mutex_lock(&cancel_m);
    two_waiting++;
    pthread_cleanup_push(cleanup, NULL);
    for (;;) pthread_cond_wait(&two_c, &cancel_m);
    pthread_cleanup_pop(0);
    return arg;
}
static void *wait_for_go(void *arg) {
    pthread_mutex_lock(&cancel_m);
    two_waiting++;
    while (!two_go) pthread_cond_wait(&two_c, &cancel_m);
    two_done = 1;
    pthread_mutex_unlock(&cancel_m);
    return arg;
}
static int waiting_now(void) {
    pthread_mutex_lock(&cancel_m);
    int waiting = two_waiting;
    pthread_mutex_unlock(&cancel_m);
    return waiting;
}
static void cancellation_keeps_a_signal(void) {
    int reached = 0;
    for (int i = 0; i < 30; i++) {
        pthread_t a, b;
        two_waiting = two_go = two_done = 0;
        start_thread(&a, wait_until_cancelled, NULL);
        while (waiting_now() < 1) usleep(100);
        usleep(1000);
        start_thread(&b, wait_for_go, NULL);
        while (waiting_now() < 2) usleep(100);
        usleep(1000);
        pthread_mutex_lock(&cancel_m);
        two_go = 1;
        pthread_cancel(a);
        pthread_cond_signal(&two_c);
        pthread_mutex_unlock(&cancel_m);
        pthread_join(a, NULL);
        for (int k = 0; k < 200; k++) {
            pthread_mutex_lock(&cancel_m);
            int done = two_done;
            pthread_mutex_unlock(&cancel_m);
            if (done) break;
            usleep(1000);
        }
        reached += two_done;
        pthread_mutex_lock(&cancel_m);
        pthread_cond_broadcast(&two_c);
        pthread_mutex_unlock(&cancel_m);
        pthread_join(b, NULL);
    }
    EQ(reached, 30);
}

/* fork while another thread holds a lock: the atfork handlers take the
 * lock around fork, and the child can use it and fresh ones. */
static pthread_mutex_t fork_m = PTHREAD_MUTEX_INITIALIZER;
static void prepare(void) { pthread_mutex_lock(&fork_m); }
static void release(void) { pthread_mutex_unlock(&fork_m); }
static void *hold_briefly(void *arg) {
    for (int i = 0; i < 200; i++) { pthread_mutex_lock(&fork_m); usleep(100); pthread_mutex_unlock(&fork_m); }
    return arg;
}
static void fork_with_held_locks(void) {
    pthread_atfork(prepare, release, release);
    pthread_t t;
    start_thread(&t, hold_briefly, NULL);
    usleep(2000);
    pid_t pid = fork();
    if (pid == 0) {
        pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
        int ok = pthread_mutex_lock(&fork_m) == 0 && pthread_mutex_unlock(&fork_m) == 0 &&
                 pthread_mutex_lock(&fresh) == 0 && pthread_mutex_unlock(&fresh) == 0;
        _exit(ok ? 0 : 3);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child could not use its locks (status %d)", status);
    pthread_join(t, NULL);
}

/* fork while this thread holds locks: in the child they are still held,
 * by the child's thread (the replica of the one that forked): another
 * thread of the child finds them taken until it releases the normal one.
 * (glibc's recursive and error-checking mutexes keep the parent's thread
 * id, so the child cannot release those: only their being taken is
 * checked.) A mutex released before the fork is free in the child; one
 * held across two forks is held in the grandchild too. */
static pthread_mutex_t held_normal = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t held_adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t held_recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t held_errorcheck = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static void fork_holding_locks(void) {
    EQ(pthread_mutex_lock(&held_normal), 0);
    EQ(pthread_mutex_lock(&held_adaptive), 0);
    EQ(pthread_mutex_lock(&held_recursive), 0);
    EQ(pthread_mutex_lock(&held_recursive), 0);
    EQ(pthread_mutex_lock(&held_errorcheck), 0);
    pid_t pid = fork();
    if (pid == 0) {
        int failed = 0;
        if (on_other_thread(try_it, &held_normal) != EBUSY) failed |= 1;
        /* The adaptive type as the normal one (the last bit of an exit
         * status for all three). */
        if (on_other_thread(try_it, &held_adaptive) != EBUSY || pthread_mutex_unlock(&held_adaptive) != 0 ||
            on_other_thread(try_it, &held_adaptive) != 0)
            failed |= 128;
        if (on_other_thread(try_it, &held_recursive) != EBUSY) failed |= 2;
        if (on_other_thread(try_it, &held_errorcheck) != EBUSY) failed |= 4;
        /* And in a child of the child, still held. */
        pid_t grandchild = fork();
        if (grandchild == 0) _exit(on_other_thread(try_it, &held_normal) == EBUSY ? 0 : 1);
        int status;
        if (waitpid(grandchild, &status, 0) != grandchild || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed |= 64;
        if (pthread_mutex_unlock(&held_normal) != 0) failed |= 8;
        if (on_other_thread(try_it, &held_normal) != 0) failed |= 16;
        /* Released before the fork (many times, by several threads). */
        if (on_other_thread(try_it, &static_adaptive) != 0) failed |= 32;
        _exit(failed);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's copies of held locks (failures %d)", WEXITSTATUS(status));
    EQ(pthread_mutex_unlock(&held_errorcheck), 0);
    EQ(pthread_mutex_unlock(&held_recursive), 0);
    EQ(pthread_mutex_unlock(&held_recursive), 0);
    EQ(pthread_mutex_unlock(&held_adaptive), 0);
    EQ(pthread_mutex_unlock(&held_normal), 0);
}

/* Two threads fork at once, each holding its own mutex: each child must
 * find its forking thread's mutex held (taken for another thread). */
static pthread_mutex_t fork_own[2] = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};
static pthread_barrier_t fork_together;
static int forks_gone_wrong;
static void *fork_holding_own(void *arg) {
    int me = (int)(long)arg;
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&fork_own[me]);
        pthread_barrier_wait(&fork_together);
        pid_t pid = fork();
        if (pid == 0) _exit(on_other_thread(try_it, &fork_own[me]) == EBUSY ? 0 : 1);
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            __atomic_fetch_add(&forks_gone_wrong, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&fork_own[me]);
    }
    return arg;
}
static void forks_at_once(void) {
    pthread_barrier_init(&fork_together, NULL, 2);
    pthread_t t[2];
    for (long i = 0; i < 2; i++) start_thread(&t[i], fork_holding_own, (void *)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK(forks_gone_wrong == 0, "%d of 400 children found their forking thread's mutex free", forks_gone_wrong);
}

/* Robust, PI and process-shared objects stay glibc's, next to served ones. */
static pthread_mutex_t robust;
static int die_holding(void *arg) { (void)arg; return pthread_mutex_lock(&robust); }
static void passthrough_objects(void) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    EQ(pthread_mutex_init(&robust, &attr), 0);
    EQ(on_other_thread(die_holding, NULL), 0);
    EQ(pthread_mutex_lock(&robust), EOWNERDEAD);
    EQ(pthread_mutex_consistent(&robust), 0);
    EQ(pthread_mutex_unlock(&robust), 0);

    pthread_mutex_t pi;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setprotocol(&attr, PTHREAD_PRIO_INHERIT);
    EQ(pthread_mutex_init(&pi, &attr), 0);
    EQ(pthread_mutex_lock(&pi), 0);
    EQ(on_other_thread(try_it, &pi), EBUSY);
    EQ(pthread_mutex_unlock(&pi), 0);

    /* A process-shared mutex and condvar in shared memory, used by a child. */
    struct shared { pthread_mutex_t m; pthread_cond_t c; int flag; } *s =
        mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_condattr_t cattr;
    pthread_condattr_init(&cattr);
    pthread_condattr_setpshared(&cattr, PTHREAD_PROCESS_SHARED);
    EQ(pthread_mutex_init(&s->m, &attr), 0);
    EQ(pthread_cond_init(&s->c, &cattr), 0);
    pid_t pid = fork();
    if (pid == 0) {
        pthread_mutex_lock(&s->m);
        s->flag = 1;
        pthread_cond_signal(&s->c);
        pthread_mutex_unlock(&s->m);
        _exit(0);
    }
    pthread_mutex_lock(&s->m);
    while (!s->flag) pthread_cond_wait(&s->c, &s->m);
    pthread_mutex_unlock(&s->m);
    waitpid(pid, NULL, 0);
    EQ(s->flag, 1);

    /* A served condvar with a glibc-kept (robust) mutex. */
    pthread_cond_t served = PTHREAD_COND_INITIALIZER;
    pthread_mutex_lock(&robust);
    struct timespec at = in_ms(CLOCK_REALTIME, 20);
    EQ(pthread_cond_timedwait(&served, &robust, &at), ETIMEDOUT);
    EQ(pthread_mutex_unlock(&robust), 0);
}

/* Destroying (and freeing) a condvar right after a broadcast is allowed:
 * woken waiters must not touch it afterwards. */
struct gate { pthread_mutex_t m; pthread_cond_t c; int open; };
static void *wait_at_gate(void *arg) {
    struct gate *g = arg;
    pthread_mutex_lock(&g->m);
    while (!g->open) pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
    return NULL;
}
static void destroy_after_broadcast(void) {
    for (int round = 0; round < 200; round++) {
        struct gate *g = malloc(sizeof *g);
        pthread_mutex_init(&g->m, NULL);
        pthread_cond_init(&g->c, NULL);
        g->open = 0;
        pthread_t t[3];
        for (int i = 0; i < 3; i++) start_thread(&t[i], wait_at_gate, g);
        usleep(100);
        pthread_mutex_lock(&g->m);
        g->open = 1;
        pthread_cond_broadcast(&g->c);
        pthread_mutex_unlock(&g->m);
        for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
        EQ(pthread_cond_destroy(&g->c), 0);
        EQ(pthread_mutex_destroy(&g->m), 0);
        memset(g, 0xa5, sizeof *g); /* what a reused allocation would do */
        free(g);
    }
}

/* A served condvar with a robust mutex whose owner dies during the wait:
 * the wait returns EOWNERDEAD with the mutex held. */
static pthread_mutex_t robust_for_cond;
static pthread_cond_t cond_for_robust = PTHREAD_COND_INITIALIZER;
static void *die_holding_robust(void *arg) {
    (void)arg;
    usleep(20000);
    pthread_mutex_lock(&robust_for_cond);
    return NULL; /* exits holding it */
}
static void owner_dies_during_condvar_wait(void) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    EQ(pthread_mutex_init(&robust_for_cond, &attr), 0);
    pthread_t t;
    pthread_mutex_lock(&robust_for_cond);
    start_thread(&t, die_holding_robust, NULL);
    struct timespec at = in_ms(CLOCK_REALTIME, 100);
    int r = pthread_cond_timedwait(&cond_for_robust, &robust_for_cond, &at);
    EQ(r, EOWNERDEAD);
    EQ(pthread_mutex_consistent(&robust_for_cond), 0);
    EQ(pthread_mutex_unlock(&robust_for_cond), 0);
    pthread_join(t, NULL);
    EQ(pthread_mutex_lock(&robust_for_cond), 0);
    EQ(pthread_mutex_unlock(&robust_for_cond), 0);
}

/* Lock functions leave errno alone, contended or not. Now and then the
 * holder sleeps, so that waiters park (a futex wait that finds the word
 * changed fails with EAGAIN: the way a parking lock sets errno). */
static pthread_mutex_t errno_m = PTHREAD_MUTEX_INITIALIZER;
static void *hammer_keeping_errno(void *arg) {
    (void)arg;
    long changed = 0;
    for (int i = 0; i < 20000; i++) {
        errno = 4242;
        if (i % 2 == 0 || pthread_mutex_trylock(&errno_m) == EBUSY) {
            changed += errno != 4242;
            errno = 4242;
            pthread_mutex_lock(&errno_m);
        }
        changed += errno != 4242;
        if (i % 64 == 0) usleep(50);
        errno = 4242;
        pthread_mutex_unlock(&errno_m);
        changed += errno != 4242;
    }
    return (void *)changed;
}
static void errno_is_kept(void) {
    pthread_t t[4];
    void *changed;
    long total = 0;
    for (int i = 0; i < 4; i++) start_thread(&t[i], hammer_keeping_errno, NULL);
    for (int i = 0; i < 4; i++) { pthread_join(t[i], &changed); total += (long)changed; }
    EQ(total, 0);
}

/* A deadline further than any clock counts is "no deadline". */
static pthread_mutex_t far_m = PTHREAD_MUTEX_INITIALIZER;
static int far_held;
static void *hold_50ms(void *arg) {
    pthread_mutex_lock(&far_m);
    __atomic_store_n(&far_held, 1, __ATOMIC_RELEASE);
    usleep(50000);
    pthread_mutex_unlock(&far_m);
    return arg;
}
static void far_future_deadline(void) {
    pthread_t t;
    start_thread(&t, hold_50ms, NULL);
    while (!__atomic_load_n(&far_held, __ATOMIC_ACQUIRE)) usleep(1000);
    struct timespec far = { .tv_sec = 0x7fffffffffffffffL, .tv_nsec = 999999999L };
    long start = now_ms(CLOCK_MONOTONIC);
    EQ(pthread_mutex_timedlock(&far_m, &far), 0);
    CHECK(now_ms(CLOCK_MONOTONIC) - start < 5000, "waited %ld ms", now_ms(CLOCK_MONOTONIC) - start);
    EQ(pthread_mutex_unlock(&far_m), 0);
    pthread_join(t, NULL);
}

/* A process-shared condvar with a default (private) mutex, in one
 * process: valid POSIX, and glibc's. Served, the mutex is ours and the
 * condvar glibc's, whose wait cannot release it: EINVAL at every wait made
 * the usual loop spin for ever holding the mutex. The wait returns, the
 * loop ends, and a timed wait times out. */
static pthread_mutex_t bridged_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bridged_c;
static int bridged_ready;
static void *ready_later(void *arg) {
    usleep(20000);
    pthread_mutex_lock(&bridged_m);
    bridged_ready = 1;
    pthread_cond_signal(&bridged_c);
    pthread_mutex_unlock(&bridged_m);
    return arg;
}
static void shared_condvar_with_a_private_mutex(void) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    EQ(pthread_cond_init(&bridged_c, &attr), 0);
    pthread_t t;
    start_thread(&t, ready_later, NULL);
    long start = now_ms(CLOCK_MONOTONIC);
    EQ(pthread_mutex_lock(&bridged_m), 0);
    while (!bridged_ready) EQ(pthread_cond_wait(&bridged_c, &bridged_m), 0);
    EQ(pthread_mutex_unlock(&bridged_m), 0);
    CHECK(now_ms(CLOCK_MONOTONIC) - start < 5000, "the ready flag took %ld ms", now_ms(CLOCK_MONOTONIC) - start);
    pthread_join(t, NULL);
    EQ(pthread_mutex_lock(&bridged_m), 0);
    struct timespec at = in_ms(CLOCK_REALTIME, 30);
    int timed;
    while ((timed = pthread_cond_timedwait(&bridged_c, &bridged_m, &at)) == 0) {}
    EQ(timed, ETIMEDOUT);
    EQ(pthread_mutex_unlock(&bridged_m), 0);
    EQ(pthread_cond_destroy(&bridged_c), 0);
}

/* A signal handler that runs during a condvar wait notifies nothing: the
 * wait goes on (glibc returns from none of 50 signals; a served wait
 * returned from every one, and a timed one even under SA_RESTART). */
static pthread_mutex_t signalled_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t signalled_c = PTHREAD_COND_INITIALIZER;
static int signalled_ready, signalled_waiting;
static void on_usr1(int signal) { (void)signal; }
static void *wait_through_signals(void *timed) {
    long returns = 0;
    pthread_mutex_lock(&signalled_m);
    __atomic_store_n(&signalled_waiting, 1, __ATOMIC_RELEASE);
    while (!signalled_ready) {
        if (timed) {
            struct timespec at = in_ms(CLOCK_REALTIME, 20000);
            pthread_cond_timedwait(&signalled_c, &signalled_m, &at);
        } else {
            pthread_cond_wait(&signalled_c, &signalled_m);
        }
        returns += !signalled_ready;
    }
    pthread_mutex_unlock(&signalled_m);
    return (void *)returns;
}
static void signals_notify_no_condvar_wait(void) {
    for (int restart = 0; restart < 2; restart++) {
        struct sigaction action = { .sa_handler = on_usr1, .sa_flags = restart ? SA_RESTART : 0 }, previous;
        sigemptyset(&action.sa_mask);
        sigaction(SIGUSR1, &action, &previous);
        for (long timed = 0; timed < 2; timed++) {
            pthread_t t;
            void *returns;
            signalled_ready = 0;
            __atomic_store_n(&signalled_waiting, 0, __ATOMIC_RELEASE);
            start_thread(&t, wait_through_signals, (void *)timed);
            while (!__atomic_load_n(&signalled_waiting, __ATOMIC_ACQUIRE)) usleep(1000);
            usleep(5000);
            for (int i = 0; i < 50; i++) {
                pthread_kill(t, SIGUSR1);
                usleep(300);
            }
            pthread_mutex_lock(&signalled_m);
            signalled_ready = 1;
            pthread_cond_signal(&signalled_c);
            pthread_mutex_unlock(&signalled_m);
            pthread_join(t, &returns);
            CHECK((long)returns == 0, "%ld of 50 signals returned from a %s wait (SA_RESTART %d)", (long)returns, timed ? "timed" : "plain", restart);
        }
        sigaction(SIGUSR1, &previous, NULL);
    }
}

/* C11 <threads.h>: glibc's mtx_* and cnd_* are its pthread functions on
 * the same objects, served and profiled as those, their results thrd_*
 * (a preload library that left them alone served none of a C11 program's
 * locks). */
static mtx_t c11_m;
static cnd_t c11_c;
static int c11_ready;
static long c11_count;
static int c11_trylock(void *m) {
    int result = mtx_trylock(m);
    if (result == thrd_success) mtx_unlock(m);
    return result;
}
static int c11_timedlock(void *m) {
    struct timespec at = in_ms(CLOCK_REALTIME, 20);
    int result = mtx_timedlock(m, &at);
    if (result == thrd_success) mtx_unlock(m);
    return result;
}
static int c11_increment(void *m) {
    for (int i = 0; i < 20000; i++) {
        mtx_lock(m);
        c11_count++;
        mtx_unlock(m);
    }
    return 0;
}
static int c11_consumer(void *unused) {
    (void)unused;
    mtx_lock(&c11_m);
    while (c11_ready == 0) cnd_wait(&c11_c, &c11_m);
    c11_ready = 2;
    mtx_unlock(&c11_m);
    return 0;
}
static void c11_semantics(void) {
    mtx_t m, recursive;
    EQ(mtx_init(&m, mtx_timed), thrd_success);
    EQ(mtx_lock(&m), thrd_success);
    EQ(on_other_thread(c11_trylock, &m), thrd_busy);
    EQ(on_other_thread(c11_timedlock, &m), thrd_timedout);
    EQ(mtx_unlock(&m), thrd_success);
    EQ(on_other_thread(c11_trylock, &m), thrd_success);
    thrd_t t[2];
    for (int i = 0; i < 2; i++) EQ(thrd_create(&t[i], c11_increment, &m), thrd_success);
    for (int i = 0; i < 2; i++) EQ(thrd_join(t[i], NULL), thrd_success);
    EQ(c11_count, 40000);
    mtx_destroy(&m);

    EQ(mtx_init(&recursive, mtx_plain | mtx_recursive), thrd_success);
    EQ(mtx_lock(&recursive), thrd_success);
    EQ(mtx_trylock(&recursive), thrd_success);
    EQ(on_other_thread(c11_trylock, &recursive), thrd_busy);
    EQ(mtx_unlock(&recursive), thrd_success);
    EQ(on_other_thread(c11_trylock, &recursive), thrd_busy);
    EQ(mtx_unlock(&recursive), thrd_success);
    EQ(on_other_thread(c11_trylock, &recursive), thrd_success);
    mtx_destroy(&recursive);

    EQ(mtx_init(&c11_m, mtx_plain), thrd_success);
    EQ(cnd_init(&c11_c), thrd_success);
    EQ(mtx_lock(&c11_m), thrd_success);
    struct timespec at = in_ms(CLOCK_REALTIME, 10);
    EQ(cnd_timedwait(&c11_c, &c11_m, &at), thrd_timedout);
    EQ(on_other_thread(c11_trylock, &c11_m), thrd_busy); /* held again */
    EQ(mtx_unlock(&c11_m), thrd_success);
    thrd_t consumer;
    EQ(thrd_create(&consumer, c11_consumer, NULL), thrd_success);
    usleep(20000);
    EQ(mtx_lock(&c11_m), thrd_success);
    c11_ready = 1;
    EQ(cnd_signal(&c11_c), thrd_success);
    EQ(mtx_unlock(&c11_m), thrd_success);
    EQ(thrd_join(consumer, NULL), thrd_success);
    EQ(c11_ready, 2);
    EQ(cnd_broadcast(&c11_c), thrd_success);
    cnd_destroy(&c11_c);
    mtx_destroy(&c11_m);
}

int main(void) {
    pthread_mutexattr_t attr;
    pthread_mutex_t normal, recursive, errorcheck;
    pthread_mutexattr_init(&attr);
    EQ(pthread_mutex_init(&normal, NULL), 0);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    EQ(pthread_mutex_init(&recursive, &attr), 0);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
    EQ(pthread_mutex_init(&errorcheck, &attr), 0);

    SECTION(normal_semantics(&normal));
    SECTION(normal_semantics(&static_normal));
    SECTION(normal_semantics(&static_adaptive));
    SECTION(unlocking_a_free_normal_mutex());
    SECTION(recursive_semantics(&recursive));
    EQ(pthread_mutex_trylock(&recursive), EBUSY); /* left locked by an exited thread */
    SECTION(recursive_semantics(&static_recursive));
    SECTION(errorcheck_semantics(&errorcheck));
    SECTION(errorcheck_semantics(&static_errorcheck));
    EQ(pthread_mutex_destroy(&normal), 0);
    EQ(pthread_mutex_destroy(&errorcheck), 0);

    pthread_mutex_t fresh;
    EQ(pthread_mutex_init(&fresh, NULL), 0);
    SECTION(exclusion(&fresh, 2, 40000)); /* 80,000 acquisitions: 16-bit counters wrap */
    SECTION(exclusion(&static_adaptive, 8, 2000));
    SECTION(queue_passes_every_token_once());
    SECTION(timed_waits());
    SECTION(unwaitable_clock());
    SECTION(cancellation());
    SECTION(cancellation_anywhere_in_a_wait());
    SECTION(cancellation_keeps_a_signal());
    SECTION(fork_with_held_locks());
    SECTION(fork_holding_locks());
    SECTION(forks_at_once());
    SECTION(passthrough_objects());
    SECTION(destroy_after_broadcast());
    SECTION(owner_dies_during_condvar_wait());
    SECTION(errno_is_kept());
    SECTION(far_future_deadline());
    SECTION(signals_notify_no_condvar_wait());
    SECTION(shared_condvar_with_a_private_mutex());
    SECTION(c11_semantics());
    SECTION(semaphore_waits());
    SECTION(unserved_locks());
    printf("ok: %d checks\n", checks);
    return 0;
}
