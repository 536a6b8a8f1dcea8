/* Programs with known lock behaviour, for `lockmeter run`'s tests: each
 * mode does exactly what its comment says, so the profile can be checked
 * number by number. Build: gcc -g -O0 -pthread subjects.c -o subjects */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms) {
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&t, &t) != 0) {}
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* hold: main holds cache_lock 200 ms while a thread waits for it, then the
 * thread holds it 50 ms. 2 acquisitions, 1 contended, 1 nowait. */
pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static void *hold_waiter(void *arg) {
    pthread_mutex_lock(&cache_lock);
    sleep_ms(50);
    pthread_mutex_unlock(&cache_lock);
    return arg;
}

static int hold(void) {
    pthread_t t;
    pthread_mutex_lock(&cache_lock);
    pthread_create(&t, NULL, hold_waiter, NULL);
    sleep_ms(200);
    pthread_mutex_unlock(&cache_lock);
    pthread_join(t, NULL);
    return 0;
}

/* xunlock: main holds xunlock_lock, another thread unlocks it (undefined
 * in POSIX for a normal mutex, allowed by glibc); prints what the unlock
 * returned and what main's trylock then returns. */
pthread_mutex_t xunlock_lock = PTHREAD_MUTEX_INITIALIZER;

static void *unlock_it(void *arg) {
    (void)arg;
    return (void *)(long)pthread_mutex_unlock(&xunlock_lock);
}

static int xunlock(void) {
    pthread_t t;
    void *unlocked;
    pthread_mutex_lock(&xunlock_lock);
    pthread_create(&t, NULL, unlock_it, NULL);
    pthread_join(t, &unlocked);
    int tried = pthread_mutex_trylock(&xunlock_lock);
    printf("unlock %ld trylock %d\n", (long)unlocked, tried);
    pthread_mutex_unlock(&xunlock_lock);
    return 0;
}

/* timedwait: main holds timed_lock 50 ms while a thread waits for it in
 * pthread_mutex_timedlock with a 2 s deadline: 1 contended acquisition. */
pthread_mutex_t timed_lock = PTHREAD_MUTEX_INITIALIZER;

static void *timed_waiter(void *arg) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 2;
    if (pthread_mutex_timedlock(&timed_lock, &deadline) != 0) abort();
    pthread_mutex_unlock(&timed_lock);
    return arg;
}

static int timedwait(void) {
    pthread_t t;
    pthread_mutex_lock(&timed_lock);
    pthread_create(&t, NULL, timed_waiter, NULL);
    sleep_ms(50);
    pthread_mutex_unlock(&timed_lock);
    pthread_join(t, NULL);
    return 0;
}

/* timeouts: main holds timeout_lock while a thread makes 9 timed
 * attempts with 1 ms deadlines, all of which time out. */
pthread_mutex_t timeout_lock = PTHREAD_MUTEX_INITIALIZER;

static void *give_up(void *arg) {
    for (int i = 0; i < 9; i++) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_nsec += 1000000;
        if (deadline.tv_nsec >= 1000000000) { deadline.tv_sec++; deadline.tv_nsec -= 1000000000; }
        if (pthread_mutex_timedlock(&timeout_lock, &deadline) == 0) abort();
    }
    return arg;
}

static int timeouts(void) {
    pthread_t t;
    pthread_mutex_lock(&timeout_lock);
    pthread_create(&t, NULL, give_up, NULL);
    pthread_join(t, NULL);
    pthread_mutex_unlock(&timeout_lock);
    return 0;
}

/* periodic: one thread takes periodic_lock 1,048,576 times, and holds it
 * 20 us every 1,024th time (a period that is a multiple of the profiler's
 * 1 in 16 sample); prints the long holds' total and the loop's wall time
 * (ns), which bounds the short holds' total. */
pthread_mutex_t periodic_lock = PTHREAD_MUTEX_INITIALIZER;

static int periodic(void) {
    long long long_ns = 0, loop_start = now_ns();
    for (int i = 1; i <= 1 << 20; i++) {
        pthread_mutex_lock(&periodic_lock);
        if (i % 1024 == 0) {
            long long start = now_ns();
            while (now_ns() - start < 20000) {}
            long_ns += now_ns() - start;
        }
        pthread_mutex_unlock(&periodic_lock);
    }
    printf("%lld %lld\n", long_ns, now_ns() - loop_start);
    return 0;
}

static void *idle_thread(void *arg) {
    sleep_ms(10000);
    return arg;
}

/* trylock: 137 trylocks of a held lock fail, then one succeeds. */
pthread_mutex_t reject_lock = PTHREAD_MUTEX_INITIALIZER;

static void *try_many(void *arg) {
    for (int i = 0; i < 137; i++)
        if (pthread_mutex_trylock(&reject_lock) == 0) abort();
    return arg;
}

static int trylock(void) {
    pthread_t t;
    pthread_mutex_lock(&reject_lock);
    pthread_create(&t, NULL, try_many, NULL);
    pthread_join(t, NULL);
    pthread_mutex_unlock(&reject_lock);
    if (pthread_mutex_trylock(&reject_lock) != 0) abort();
    pthread_mutex_unlock(&reject_lock);
    return 0;
}

/* heap: a lock made by make_lock() and used 3 times, destroyed, and a new
 * one initialised at the same address and used 5 times. */
static pthread_mutex_t *make_lock(void) {
    pthread_mutex_t *m = malloc(sizeof *m);
    pthread_mutex_init(m, NULL);
    return m;
}

static int heap(void) {
    pthread_mutex_t *m = make_lock();
    for (int i = 0; i < 3; i++) { pthread_mutex_lock(m); pthread_mutex_unlock(m); }
    pthread_mutex_destroy(m);
    pthread_mutex_init(m, NULL);
    for (int i = 0; i < 5; i++) { pthread_mutex_lock(m); pthread_mutex_unlock(m); }
    pthread_mutex_destroy(m);
    free(m);
    return 0;
}

/* rwlock: 3 uncontended reads, then a writer holds 150 ms while a reader
 * waits for it. read: 4 acquisitions, 1 contended; write: 1, 0. */
pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;

static void *late_reader(void *arg) {
    pthread_rwlock_rdlock(&table_lock);
    pthread_rwlock_unlock(&table_lock);
    return arg;
}

static int rwlock(void) {
    pthread_t t;
    for (int i = 0; i < 3; i++) { pthread_rwlock_rdlock(&table_lock); pthread_rwlock_unlock(&table_lock); }
    pthread_rwlock_wrlock(&table_lock);
    pthread_create(&t, NULL, late_reader, NULL);
    sleep_ms(150);
    pthread_rwlock_unlock(&table_lock);
    pthread_join(t, NULL);
    return 0;
}

/* cond: a consumer waits on queue_cond; 100 ms later the producer signals.
 * queue_lock: 3 acquisitions (consumer, producer, re-acquisition in the
 * wait), of which 1 is a condvar re-acquisition. queue_cond: 1 wait. */
pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t queue_cond = PTHREAD_COND_INITIALIZER;
static int ready;

static void *consumer(void *arg) {
    pthread_mutex_lock(&queue_lock);
    while (!ready) pthread_cond_wait(&queue_cond, &queue_lock);
    pthread_mutex_unlock(&queue_lock);
    return arg;
}

static int cond(void) {
    pthread_t t;
    pthread_create(&t, NULL, consumer, NULL);
    sleep_ms(100);
    pthread_mutex_lock(&queue_lock);
    ready = 1;
    pthread_cond_signal(&queue_cond);
    pthread_mutex_unlock(&queue_lock);
    pthread_join(t, NULL);
    return 0;
}

/* fork: the parent locks parent_lock twice; a child execs this program in
 * mode "child", which locks child_lock 7 times. One profile each. */
pthread_mutex_t parent_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t child_lock = PTHREAD_MUTEX_INITIALIZER;

static int forks(const char *self) {
    pthread_mutex_lock(&parent_lock);
    pthread_mutex_unlock(&parent_lock);
    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, "child", (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    pthread_mutex_lock(&parent_lock);
    pthread_mutex_unlock(&parent_lock);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

static int child(void) {
    for (int i = 0; i < 7; i++) { pthread_mutex_lock(&child_lock); pthread_mutex_unlock(&child_lock); }
    return 0;
}

/* fork_threads: a child forked without exec prints the threads it has
 * (from /proc/self/status) as it comes out of fork. */
static int fork_threads(void) {
    pid_t pid = fork();
    if (pid == 0) {
        char line[256];
        FILE *status = fopen("/proc/self/status", "r");
        while (fgets(line, sizeof line, status))
            if (!strncmp(line, "Threads:", 8)) fputs(line, stdout);
        return 0;
    }
    waitpid(pid, NULL, 0);
    return 0;
}

/* fork_holds: the thread that forks has taken parent_lock; its child
 * holds child_lock 10 ms, 10 times, and prints its pid. */
static int fork_holds(void) {
    pthread_mutex_lock(&parent_lock);
    pthread_mutex_unlock(&parent_lock);
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 10; i++) {
            pthread_mutex_lock(&child_lock);
            sleep_ms(10);
            pthread_mutex_unlock(&child_lock);
        }
        printf("%d\n", (int)getpid());
        return 0;
    }
    waitpid(pid, NULL, 0);
    return 0;
}

/* cancelled_waits: one thread waits on idle_cond, another in sem_wait on
 * idle_sem, both for ever; main cancels both after 50 ms. The condvar's
 * waiter, cancelled, holds idle_lock again: its cleanup keeps it 100 ms. */
pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;
sem_t idle_sem;

static void unlock_idle(void *arg) {
    (void)arg;
    sleep_ms(100);
    pthread_mutex_unlock(&idle_lock);
}

static void *wait_on_cond(void *arg) {
    pthread_mutex_lock(&idle_lock);
    pthread_cleanup_push(unlock_idle, NULL);
    for (;;) pthread_cond_wait(&idle_cond, &idle_lock);
    pthread_cleanup_pop(0);
    return arg;
}

static void *wait_on_sem(void *arg) {
    for (;;) sem_wait(&idle_sem);
    return arg;
}

static int cancelled_waits(void) {
    pthread_t t[2];
    sem_init(&idle_sem, 0, 0);
    pthread_create(&t[0], NULL, wait_on_cond, NULL);
    pthread_create(&t[1], NULL, wait_on_sem, NULL);
    sleep_ms(50);
    for (int i = 0; i < 2; i++) pthread_cancel(t[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    return 0;
}

/* bad_wait: main holds bad_wait_lock 100 ms, calling a timed condvar
 * wait with an invalid deadline (EINVAL) on the way; prints its result. */
pthread_mutex_t bad_wait_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t bad_wait_cond = PTHREAD_COND_INITIALIZER;

static int bad_wait(void) {
    struct timespec bad = { 0, -1 };
    pthread_mutex_lock(&bad_wait_lock);
    printf("%d\n", pthread_cond_timedwait(&bad_wait_cond, &bad_wait_lock, &bad));
    sleep_ms(100);
    pthread_mutex_unlock(&bad_wait_lock);
    return 0;
}

/* readers: 3 threads hold readers_lock for reading at once, 100, 105 and
 * 110 ms; a writer comes 20 ms in and waits for them (about 90 ms). (The
 * releases 5 ms apart: two readers releasing at the same instant can each
 * see the other still in, and neither charges the writer's wait, a race
 * the profiler leaves; with equal holds the test failed 1 run in 12.) */
pthread_rwlock_t readers_lock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_barrier_t readers_in;

static void *long_reader(void *arg) {
    pthread_rwlock_rdlock(&readers_lock);
    pthread_barrier_wait(&readers_in);
    sleep_ms(100 + 5 * (int)(long)arg);
    pthread_rwlock_unlock(&readers_lock);
    return arg;
}

static int readers(void) {
    pthread_t t[3];
    pthread_barrier_init(&readers_in, NULL, 4);
    for (long i = 0; i < 3; i++) pthread_create(&t[i], NULL, long_reader, (void *)i);
    pthread_barrier_wait(&readers_in);
    sleep_ms(20);
    pthread_rwlock_wrlock(&readers_lock);
    pthread_rwlock_unlock(&readers_lock);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    return 0;
}

/* owner_died: main takes parent_lock once; a thread takes the robust
 * robust_lock, holds it 40 ms and exits holding it; main takes it
 * (EOWNERDEAD), makes it consistent, holds it 30 ms and frees it. 2
 * acquisitions, 70 ms held, nothing held at exit. */
pthread_mutex_t robust_lock;

static void *take_and_exit(void *arg) {
    pthread_mutex_lock(&robust_lock);
    sleep_ms(40);
    return arg;
}

static int owner_died(void) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&robust_lock, &attr);
    /* main's counters are its own before the thread's exit frees the
     * thread's (else main takes those over, and its hold's end clears). */
    pthread_mutex_lock(&parent_lock);
    pthread_mutex_unlock(&parent_lock);
    pthread_t t;
    pthread_create(&t, NULL, take_and_exit, NULL);
    pthread_join(t, NULL);
    if (pthread_mutex_lock(&robust_lock) != EOWNERDEAD) abort();
    pthread_mutex_consistent(&robust_lock);
    sleep_ms(30);
    pthread_mutex_unlock(&robust_lock);
    return 0;
}

/* alloc_threads: 4 threads each allocate 10,000 blocks (aligned ones
 * among them: jemalloc takes a mutex for those) and count under
 * alloc_lock; prints the count (40000). */
pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static long allocated;

static void *allocate(void *arg) {
    for (int i = 0; i < 10000; i++) {
        void *block = NULL;
        if (i % 4 == 0) {
            if (posix_memalign(&block, 4096, 64 + i % 512) != 0) abort();
        } else {
            block = malloc(64 + i % 512);
        }
        pthread_mutex_lock(&alloc_lock);
        allocated++;
        pthread_mutex_unlock(&alloc_lock);
        free(block);
    }
    return arg;
}

static int alloc_threads(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, allocate, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("%ld\n", allocated);
    return 0;
}

/* orphan: the process exits at once, leaving a child that outlives it by
 * 300 ms and then locks orphan_lock 5 times. daemon: the child starts a
 * session of its own, prints its pid, lets go of the output and sleeps
 * 20 s before doing the same (a daemon ^C does not reach). */
pthread_mutex_t orphan_lock = PTHREAD_MUTEX_INITIALIZER;

static void *orphan_thread(void *arg) {
    (void)arg;
    sleep_ms(300);
    for (int i = 0; i < 5; i++) { pthread_mutex_lock(&orphan_lock); pthread_mutex_unlock(&orphan_lock); }
    exit(0);
}

/* orphan_thread: as orphan, but the child's main thread exits at once and
 * a second thread does the work (the process then reads as a zombie in
 * /proc while it runs). */
static int orphan_main_exits(void) {
    pid_t pid = fork();
    if (pid != 0) return pid < 0;
    pthread_t t;
    pthread_create(&t, NULL, orphan_thread, NULL);
    pthread_exit(NULL);
}

/* orphan_retitled: as orphan, but the child first writes over its
 * environment's strings, as setproctitle does (its /proc environ then
 * holds no variable). */
extern char **environ;

static int orphan_retitled(void) {
    pid_t pid = fork();
    if (pid != 0) return pid < 0;
    for (char **e = environ; *e; e++) memset(*e, 'x', strlen(*e));
    sleep_ms(300);
    for (int i = 0; i < 5; i++) { pthread_mutex_lock(&orphan_lock); pthread_mutex_unlock(&orphan_lock); }
    return 0;
}

static int orphan(int daemon) {
    pid_t pid = fork();
    if (pid != 0) return pid < 0;
    if (daemon) {
        setsid();
        printf("%d\n", (int)getpid());
        fflush(stdout);
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) return 1;
    }
    sleep_ms(daemon ? 20000 : 300);
    for (int i = 0; i < 5; i++) { pthread_mutex_lock(&orphan_lock); pthread_mutex_unlock(&orphan_lock); }
    return 0;
}

/* orphan_hold: the process exits at once; its child waits until it has
 * ended (the child then belongs to whoever reaps the tree's orphans) and
 * executes this program in mode "hold". */
static int orphan_hold(const char *self) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid < 0;
    while (getppid() == parent) sleep_ms(1);
    execl(self, self, "hold", (char *)NULL);
    _exit(127);
}

/* sem: 4 posts, 4 waits without waiting; then a thread waits 100 ms for a
 * post; then 2 failed trywaits. */
static sem_t work_sem;

static void *poster(void *arg) {
    sleep_ms(100);
    sem_post(&work_sem);
    return arg;
}

static int sem(void) {
    pthread_t t;
    sem_init(&work_sem, 0, 0);
    for (int i = 0; i < 4; i++) sem_post(&work_sem);
    for (int i = 0; i < 4; i++) sem_wait(&work_sem);
    pthread_create(&t, NULL, poster, NULL);
    sem_wait(&work_sem);
    pthread_join(t, NULL);
    if (sem_trywait(&work_sem) == 0 || sem_trywait(&work_sem) == 0) abort();
    return 0;
}

/* holds: nested_lock, recursive, held 20 times 5 ms and re-locked inside
 * each hold: 40 acquisitions, 100 ms held. Then a thread holds mixed_lock
 * 10 times 10 ms, and after it main takes it 400,000 times for nothing:
 * about 100 ms held in all, nearly all of it in the 10 long holds.
 * Prints what it measured (a busy machine stretches the sleeps): the
 * nested holds' total, timed inside the holds and around the lock and
 * unlock calls (the profile's holds lie between: a thread preempted
 * between a lock call's return and the program's clock read lengthens
 * the profile's hold only), the same two for the long holds, and the
 * wall time of the short holds' loop, which bounds their total. */
pthread_mutex_t nested_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
pthread_mutex_t mixed_lock = PTHREAD_MUTEX_INITIALIZER;
static long long long_holds_ns, long_holds_around_ns;

static void *long_holder(void *arg) {
    for (int i = 0; i < 10; i++) {
        long long before = now_ns();
        pthread_mutex_lock(&mixed_lock);
        long long start = now_ns();
        sleep_ms(10);
        long_holds_ns += now_ns() - start;
        pthread_mutex_unlock(&mixed_lock);
        long_holds_around_ns += now_ns() - before;
    }
    return arg;
}

static int holds(void) {
    long long nested_ns = 0, nested_around_ns = 0;
    for (int i = 0; i < 20; i++) {
        long long before = now_ns();
        pthread_mutex_lock(&nested_lock);
        long long start = now_ns();
        pthread_mutex_lock(&nested_lock);
        sleep_ms(5);
        pthread_mutex_unlock(&nested_lock);
        nested_ns += now_ns() - start;
        pthread_mutex_unlock(&nested_lock);
        nested_around_ns += now_ns() - before;
    }
    pthread_t t;
    pthread_create(&t, NULL, long_holder, NULL);
    pthread_join(t, NULL);
    long long loop_start = now_ns();
    for (int i = 0; i < 400000; i++) {
        pthread_mutex_lock(&mixed_lock);
        pthread_mutex_unlock(&mixed_lock);
    }
    printf("%lld %lld %lld %lld %lld\n", nested_ns, nested_around_ns, long_holds_ns, long_holds_around_ns, now_ns() - loop_start);
    return 0;
}

/* malloc_term: main allocates and frees in a loop, taking a lock each
 * time, until a thread sends it SIGTERM 30 ms in: the signal usually
 * lands inside malloc. */
pthread_mutex_t malloc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_t malloc_thread;

static void *terminator(void *arg) {
    sleep_ms(30);
    pthread_kill(malloc_thread, SIGTERM);
    return arg;
}

static int malloc_term(void) {
    malloc_thread = pthread_self();
    pthread_t t;
    pthread_create(&t, NULL, terminator, NULL);
    void *kept[64] = {0};
    for (unsigned i = 0;; i++) {
        pthread_mutex_lock(&malloc_lock);
        pthread_mutex_unlock(&malloc_lock);
        free(kept[i % 64]);
        kept[i % 64] = malloc(16 + (i * 2654435761u) % 4000);
    }
    return 0;
}

/* churn N: N objects, each with a mutex initialised by one line, used
 * twice and destroyed with its object (malloc reuses a few addresses);
 * then late_lock taken 3 times. churn_static N: the same, each mutex
 * statically initialised (no init call) and first used by one line. */
pthread_mutex_t late_lock = PTHREAD_MUTEX_INITIALIZER;

static void take_late_lock(void) {
    for (int i = 0; i < 3; i++) { pthread_mutex_lock(&late_lock); pthread_mutex_unlock(&late_lock); }
}

static int churn(int n, int initialised) {
    for (int i = 0; i < n; i++) {
        pthread_mutex_t *m = malloc(sizeof *m * (1 + i % 5));
        if (initialised) {
            pthread_mutex_init(m, NULL);
        } else {
            pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
            *m = fresh;
        }
        for (int j = 0; j < 2; j++) { pthread_mutex_lock(m); pthread_mutex_unlock(m); }
        pthread_mutex_destroy(m);
        free(m);
    }
    take_late_lock();
    return 0;
}

/* many N: N mutexes alive together, each used once; then late_lock. */
static int many(int n) {
    pthread_mutex_t *m = calloc(n, sizeof *m);
    for (int i = 0; i < n; i++) {
        pthread_mutex_init(&m[i], NULL);
        pthread_mutex_lock(&m[i]);
        pthread_mutex_unlock(&m[i]);
    }
    take_late_lock();
    return 0;
}

/* outlier: 16,000 short holds of outlier_lock, then one of 50 ms at
 * another line, the acquisition the 1-in-16 hold sample times; then
 * 500 ms outside the lock. */
pthread_mutex_t outlier_lock = PTHREAD_MUTEX_INITIALIZER;

static int outlier(void) {
    for (int i = 0; i < 16000; i++) { pthread_mutex_lock(&outlier_lock); pthread_mutex_unlock(&outlier_lock); }
    pthread_mutex_lock(&outlier_lock);
    sleep_ms(50);
    pthread_mutex_unlock(&outlier_lock);
    sleep_ms(500); /* outside the lock: the run is 11 times the hold */
    return 0;
}

/* first_long N: takes first_long_lock N times at one line, the first
 * hold 10 ms, the others empty; then 90 ms outside the lock. */
pthread_mutex_t first_long_lock = PTHREAD_MUTEX_INITIALIZER;

static int first_long(int n) {
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&first_long_lock);
        if (i == 0) sleep_ms(10);
        pthread_mutex_unlock(&first_long_lock);
    }
    sleep_ms(90);
    return 0;
}

/* given_up: main holds given_up_lock 100 ms; a thread waits for it from
 * the start and holds it 100 ms; another waits from 10 ms with a 140 ms
 * timed lock, and gives up at 150 ms, during the first thread's hold. */
pthread_mutex_t given_up_lock = PTHREAD_MUTEX_INITIALIZER;

static void *hold_100ms(void *arg) {
    pthread_mutex_lock(&given_up_lock);
    sleep_ms(100);
    pthread_mutex_unlock(&given_up_lock);
    return arg;
}

static void *give_up_at_150ms(void *arg) {
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    at.tv_nsec += 140 * 1000000L;
    if (at.tv_nsec >= 1000000000L) { at.tv_sec++; at.tv_nsec -= 1000000000L; }
    if (pthread_mutex_timedlock(&given_up_lock, &at) == 0) abort();
    return arg;
}

static int given_up(void) {
    pthread_t holder, quitter;
    pthread_mutex_lock(&given_up_lock);
    pthread_create(&holder, NULL, hold_100ms, NULL);
    sleep_ms(10);
    pthread_create(&quitter, NULL, give_up_at_150ms, NULL);
    sleep_ms(90);
    pthread_mutex_unlock(&given_up_lock);
    pthread_join(holder, NULL);
    pthread_join(quitter, NULL);
    return 0;
}

/* alternate: 20,000 rounds, each taking alternate_lock at one line for
 * nothing and at another for 5 us: held about 100 ms in all. */
pthread_mutex_t alternate_lock = PTHREAD_MUTEX_INITIALIZER;

static void busy_us(long us) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < us * 1000);
}

static int alternate(void) {
    for (int i = 0; i < 20000; i++) {
        pthread_mutex_lock(&alternate_lock);
        pthread_mutex_unlock(&alternate_lock);
        pthread_mutex_lock(&alternate_lock);
        busy_us(5);
        pthread_mutex_unlock(&alternate_lock);
    }
    return 0;
}

/* rare_long: main takes rare_lock 40,000 times at one line, every
 * 4,000th time for 2 ms, the others for nothing; a second thread takes it
 * every 100 us meanwhile, and each long hold waits for it to come (so that
 * it waits through every one, however the machine schedules it). Prints
 * the long holds' total, the second thread's waits' total and the loop's
 * wall time (ns): every wait of the second thread is main's doing, and
 * the holds together lasted no longer than the loop. rare_read: the same
 * with rare_rwlock, main reading and the second thread writing. */
pthread_mutex_t rare_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_rwlock_t rare_rwlock = PTHREAD_RWLOCK_INITIALIZER;
static int rare_done, poke_coming, rare_reads;
static long long poke_waited_ns;

static void *poke(void *arg) {
    while (!__atomic_load_n(&rare_done, __ATOMIC_ACQUIRE)) {
        long long start = now_ns();
        __atomic_store_n(&poke_coming, 1, __ATOMIC_RELEASE);
        if (rare_reads) pthread_rwlock_wrlock(&rare_rwlock);
        else pthread_mutex_lock(&rare_lock);
        __atomic_store_n(&poke_coming, 0, __ATOMIC_RELEASE);
        poke_waited_ns += now_ns() - start;
        if (rare_reads) pthread_rwlock_unlock(&rare_rwlock);
        else pthread_mutex_unlock(&rare_lock);
        usleep(100);
    }
    return arg;
}

__attribute__((noinline)) static long long rare_hold(int i) {
    long long held = 0;
    if (rare_reads) pthread_rwlock_rdlock(&rare_rwlock);
    else pthread_mutex_lock(&rare_lock);
    if (i % 4000 == 1) {
        long long start = now_ns();
        while (!__atomic_load_n(&poke_coming, __ATOMIC_ACQUIRE)) {}
        busy_us(2000);
        held = now_ns() - start;
    }
    if (rare_reads) pthread_rwlock_unlock(&rare_rwlock);
    else pthread_mutex_unlock(&rare_lock);
    return held;
}

static int rare_long(int reads) {
    pthread_t t;
    long long long_ns = 0, loop_start = now_ns();
    rare_reads = reads;
    pthread_create(&t, NULL, poke, NULL);
    for (int i = 0; i < 40000; i++) {
        long_ns += rare_hold(i);
        for (volatile int k = 0; k < 300; k++) {}
    }
    long long loop_ns = now_ns() - loop_start;
    __atomic_store_n(&rare_done, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    printf("%lld %lld %lld\n", long_ns, poke_waited_ns, loop_ns);
    return 0;
}

/* kind_reuse: a zeroed mutex on the heap taken 5 times and freed without
 * a destroy call, its memory then used as a zeroed rwlock, read 100 times
 * and written 7; prints whether the two had one address. */
static int kind_reuse(void) {
    /* (malloc and memset: calloc passes over the chunk free put back) */
    pthread_mutex_t *m = malloc(64);
    memset(m, 0, 64);
    for (int i = 0; i < 5; i++) {
        pthread_mutex_lock(m);
        pthread_mutex_unlock(m);
    }
    free(m);
    pthread_rwlock_t *rw = malloc(64);
    memset(rw, 0, 64);
    for (int i = 0; i < 100; i++) {
        pthread_rwlock_rdlock(rw);
        pthread_rwlock_unlock(rw);
    }
    for (int i = 0; i < 7; i++) {
        pthread_rwlock_wrlock(rw);
        pthread_rwlock_unlock(rw);
    }
    printf("%d\n", (void *)m == (void *)rw);
    return 0;
}

/* lock_word: locks a mutex and prints what its first word holds: "tid"
 * when it names the locking thread (a served adaptive, futex-tid or pi
 * mutex), else the number (glibc's normal mutex keeps 1); then exits 3. */
static int lock_word(void) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&m);
    unsigned word;
    memcpy(&word, &m, sizeof word);
    if ((word & 0x3fffff) == (unsigned)syscall(SYS_gettid)) printf("tid\n");
    else printf("%u\n", word);
    pthread_mutex_unlock(&m);
    return 3;
}

/* fork_first: fork before any lock is taken (a daemon at start-up) but in
 * the fork's own prepare handler; the child holds a lock another of its
 * threads waits for, then releases it: exit 0 once that thread got it, 1
 * if the child died. */
static pthread_mutex_t first_lock = PTHREAD_MUTEX_INITIALIZER;

static void touch_first_lock(void) {
    pthread_mutex_lock(&first_lock);
    pthread_mutex_unlock(&first_lock);
}

static void *take_first_lock(void *arg) {
    pthread_mutex_lock(&first_lock);
    pthread_mutex_unlock(&first_lock);
    return arg;
}

static int fork_first(void) {
    pthread_atfork(touch_first_lock, NULL, NULL);
    pid_t pid = fork();
    if (pid == 0) {
        pthread_mutex_lock(&first_lock);
        pthread_t t;
        pthread_create(&t, NULL, take_first_lock, NULL);
        sleep_ms(100); /* t now waits */
        pthread_mutex_unlock(&first_lock);
        pthread_join(t, NULL);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

/* fork_twice: main holds three mutexes (normal, error-checking, recursive
 * twice) and forks, and its child forks again without touching them (a
 * daemon's double fork). The grandchild prints which of them another
 * thread's trylock finds busy (a mask, 7: all), what main's unlocks of
 * each return, and the mask another thread finds busy after them. Exit 0
 * when the grandchild and child ran. */
static pthread_mutex_t twice_normal = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t twice_checked = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static pthread_mutex_t twice_recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static void *try_twice_locks(void *unused) {
    (void)unused;
    long busy = 0;
    pthread_mutex_t *all[] = { &twice_normal, &twice_checked, &twice_recursive };
    for (int i = 0; i < 3; i++) {
        int r = pthread_mutex_trylock(all[i]);
        if (r == 0) pthread_mutex_unlock(all[i]);
        if (r == EBUSY) busy |= 1L << i;
    }
    return (void *)busy;
}

static int fork_twice(void) {
    pthread_mutex_lock(&twice_normal);
    pthread_mutex_lock(&twice_checked);
    pthread_mutex_lock(&twice_recursive);
    pthread_mutex_lock(&twice_recursive);
    pid_t child = fork();
    if (child == 0) {
        pid_t grandchild = fork();
        if (grandchild == 0) {
            pthread_t t;
            void *before, *after;
            pthread_create(&t, NULL, try_twice_locks, NULL);
            pthread_join(t, &before);
            int r1 = pthread_mutex_unlock(&twice_normal);
            int r2 = pthread_mutex_unlock(&twice_checked);
            int r3 = pthread_mutex_unlock(&twice_recursive);
            int r4 = pthread_mutex_unlock(&twice_recursive);
            pthread_create(&t, NULL, try_twice_locks, NULL);
            pthread_join(t, &after);
            printf("busy %ld, unlocks %d %d %d %d, then busy %ld\n", (long)before, r1, r2, r3, r4, (long)after);
            fflush(stdout);
            _exit(0);
        }
        int status;
        waitpid(grandchild, &status, 0);
        _exit(WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1);
    }
    int status;
    waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

/* fork_mid_refresh R: main holds REFRESHED mutexes and forks, R rounds.
 * In each child a thread makes the child's first use of each mutex
 * (trylock: EBUSY, the forking thread holds it) while the child's main
 * forks again, at a point that moves from round to round; in the
 * grandchild another thread counts the mutexes it finds free, all held by
 * its forking thread. Prints "free F in B of R rounds" (glibc: 0). */
#define REFRESHED 4096
static pthread_mutex_t refreshed[REFRESHED];
static int refreshed_so_far;

static void *first_use_of_each(void *unused) {
    (void)unused;
    for (int i = 0; i < REFRESHED; i++) {
        if (pthread_mutex_trylock(&refreshed[i]) == 0) pthread_mutex_unlock(&refreshed[i]);
        __atomic_store_n(&refreshed_so_far, i + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void *count_free(void *unused) {
    (void)unused;
    long free_ones = 0;
    for (int i = 0; i < REFRESHED; i++) {
        if (pthread_mutex_trylock(&refreshed[i]) == 0) {
            free_ones++;
            pthread_mutex_unlock(&refreshed[i]);
        }
    }
    return (void *)free_ones;
}

static int fork_mid_refresh(int rounds) {
    for (int i = 0; i < REFRESHED; i++) pthread_mutex_lock(&refreshed[i]);
    long total_free = 0;
    int bad_rounds = 0;
    for (int round = 0; round < rounds; round++) {
        int fds[2];
        if (pipe(fds) != 0) return 1;
        pid_t child = fork();
        if (child == 0) {
            pthread_t t;
            pthread_create(&t, NULL, first_use_of_each, NULL);
            int at = (round * 397) % REFRESHED;
            while (__atomic_load_n(&refreshed_so_far, __ATOMIC_ACQUIRE) < at) {}
            pid_t grandchild = fork();
            if (grandchild == 0) {
                pthread_t u;
                void *free_ones;
                pthread_create(&u, NULL, count_free, NULL);
                pthread_join(u, &free_ones);
                long n = (long)free_ones;
                _exit(write(fds[1], &n, sizeof n) == sizeof n ? 0 : 1);
            }
            pthread_join(t, NULL);
            int status;
            waitpid(grandchild, &status, 0);
            _exit(WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1);
        }
        close(fds[1]);
        long n = -1;
        if (read(fds[0], &n, sizeof n) != sizeof n) n = -1;
        close(fds[0]);
        int status;
        waitpid(child, &status, 0);
        if (n < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
        total_free += n;
        bad_rounds += n > 0;
    }
    printf("free %ld in %d of %d rounds\n", total_free, bad_rounds, rounds);
    return 0;
}

/* stuck: a thread takes stuck_lock and never lets go; main says
 * "waiting" and waits for it (a hung program, stopped by a signal). */
pthread_mutex_t stuck_lock = PTHREAD_MUTEX_INITIALIZER;

static void *stuck_holder(void *arg) {
    pthread_mutex_lock(&stuck_lock);
    for (;;) pause();
    return arg;
}

static int stuck(void) {
    pthread_t t;
    pthread_create(&t, NULL, stuck_holder, NULL);
    sleep_ms(100);
    printf("waiting\n");
    fflush(stdout);
    pthread_mutex_lock(&stuck_lock);
    return 0;
}

pthread_mutex_t status_lock = PTHREAD_MUTEX_INITIALIZER;

/* crowded_hot N: N mutexes each locked once, then two threads lock
 * hot_lock 20,000 times each, contending (a small lock table loses it). */
pthread_mutex_t hot_lock = PTHREAD_MUTEX_INITIALIZER;

static void *hot_worker(void *arg) {
    for (int i = 0; i < 20000; i++) { pthread_mutex_lock(&hot_lock); pthread_mutex_unlock(&hot_lock); }
    return arg;
}

static int crowded_hot(int n) {
    pthread_mutex_t *m = calloc(n, sizeof *m);
    for (int i = 0; i < n; i++) { pthread_mutex_lock(&m[i]); pthread_mutex_unlock(&m[i]); }
    pthread_t a, b;
    pthread_create(&a, NULL, hot_worker, NULL);
    pthread_create(&b, NULL, hot_worker, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return 0;
}

/* sysv_term: puts back the SIGTERM handler it found through
 * sysv_signal (one-shot: reset to the default as it is delivered, as
 * signal() is under -std=c99), then raises SIGTERM: it must die of it,
 * its profile written. */
static int sysv_term(void) {
    pthread_mutex_lock(&status_lock);
    pthread_mutex_unlock(&status_lock);
    sighandler_t found = signal(SIGTERM, SIG_IGN);
    sysv_signal(SIGTERM, found);
    raise(SIGTERM);
    printf("survived SIGTERM\n");
    return 0;
}

/* chain_pipe: installs its own SIGPIPE handler, which calls the one it
 * found (as the JVM does, which ignores SIGPIPE), then writes to a pipe
 * nobody reads: it must live on and say so. */
static struct sigaction found_pipe_action;

static void on_pipe(int signal) {
    if (found_pipe_action.sa_handler != SIG_DFL && found_pipe_action.sa_handler != SIG_IGN)
        found_pipe_action.sa_handler(signal);
}

static int chain_pipe(void) {
    struct sigaction mine;
    memset(&mine, 0, sizeof mine);
    mine.sa_handler = on_pipe;
    sigaction(SIGPIPE, &mine, &found_pipe_action);
    int fds[2];
    if (pipe(fds) != 0) return 1;
    close(fds[0]);
    pthread_mutex_lock(&status_lock);
    pthread_mutex_unlock(&status_lock);
    ssize_t written = write(fds[1], "x", 1);
    printf("survived %zd\n", written);
    return 0;
}

/* status N: exit with status N after one lock; abort: die by SIGABRT
 * holding a lock; quick_exit: leave through _exit (no exit handlers);
 * interrupt: ^C to itself, exit 3 only if it survives; alarm: an alarm
 * nobody handles ends it 50 ms in; pipe: write lines until the reader of
 * stdout leaves (SIGPIPE ends it). */

/* clock_jump: four threads wait 20 s, each by a deadline on its clock: on
 * a condvar on CLOCK_REALTIME, on one on CLOCK_MONOTONIC, and for a mutex
 * main holds, by pthread_mutex_timedlock (CLOCK_REALTIME) and by
 * pthread_mutex_clocklock on CLOCK_MONOTONIC. Main sets the wall clock
 * 25 s forward (root only) and back once both realtime waits have ended
 * or 5 s have passed. POSIX and glibc: the realtime waits time out at the
 * jump, the monotonic ones wait on (main then signals and unlocks).
 * Prints "cond: realtime R after N ms, monotonic M; mutex: ..." (R and M
 * the waits' results as they stood, N from the jump to the realtime
 * wait's end, -1 if it had not), or "unprivileged" when the clock cannot
 * be set. */
#define CLOCK_JUMP_S 25
static pthread_mutex_t jump_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t jump_held = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jump_cond[2];
static int jump_result[4] = { -1, -1, -1, -1 };
static long long jump_done_ns[4];

/* Waiter i: on a condvar (i < 2) or the held mutex, CLOCK_REALTIME for
 * even i, CLOCK_MONOTONIC for odd. */
static void *jump_waiter(void *arg) {
    int i = (int)(long)arg;
    struct timespec at;
    clock_gettime(i % 2 ? CLOCK_MONOTONIC : CLOCK_REALTIME, &at);
    at.tv_sec += 20;
    int r;
    if (i < 2) {
        pthread_mutex_lock(&jump_lock);
        r = pthread_cond_timedwait(&jump_cond[i], &jump_lock, &at);
        pthread_mutex_unlock(&jump_lock);
    } else {
        r = i == 2 ? pthread_mutex_timedlock(&jump_held, &at) : pthread_mutex_clocklock(&jump_held, CLOCK_MONOTONIC, &at);
        if (r == 0) pthread_mutex_unlock(&jump_held);
    }
    pthread_mutex_lock(&jump_lock);
    jump_result[i] = r;
    jump_done_ns[i] = now_ns();
    pthread_mutex_unlock(&jump_lock);
    return NULL;
}

/* A timed wait's result as the test reads it (-1: not returned yet). */
static const char *wait_result(int r, char name[16]) {
    if (r == -1) return "waiting";
    if (r == ETIMEDOUT) return "ETIMEDOUT";
    snprintf(name, 16, "%d", r);
    return name;
}

static int shift_wall_clock(int seconds) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += seconds;
    return clock_settime(CLOCK_REALTIME, &t);
}

static int clock_jump(void) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_cond_init(&jump_cond[0], &attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&jump_cond[1], &attr);
    pthread_mutex_lock(&jump_held);
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, jump_waiter, (void *)i);
    sleep_ms(350); /* mid-way through the served timed lock's 100 ms look */
    long long jumped = now_ns();
    if (shift_wall_clock(CLOCK_JUMP_S) != 0) {
        printf("unprivileged\n");
        return 0;
    }
    int ended = 0;
    while (!ended && now_ns() - jumped < 5000000000LL) {
        sleep_ms(10);
        pthread_mutex_lock(&jump_lock);
        ended = jump_result[0] != -1 && jump_result[2] != -1;
        pthread_mutex_unlock(&jump_lock);
    }
    sleep_ms(100);
    shift_wall_clock(-CLOCK_JUMP_S);
    pthread_mutex_lock(&jump_lock);
    int result[4];
    long long after_ms[4];
    for (int i = 0; i < 4; i++) {
        result[i] = jump_result[i];
        after_ms[i] = result[i] == -1 ? -1 : (jump_done_ns[i] - jumped) / 1000000;
    }
    for (int i = 0; i < 2; i++) pthread_cond_signal(&jump_cond[i]);
    pthread_mutex_unlock(&jump_lock);
    pthread_mutex_unlock(&jump_held);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    char name[4][16];
    printf("cond: realtime %s after %lld ms, monotonic %s; mutex: realtime %s after %lld ms, monotonic %s\n",
           wait_result(result[0], name[0]), after_ms[0], wait_result(result[1], name[1]),
           wait_result(result[2], name[2]), after_ms[2], wait_result(result[3], name[3]));
    return 0;
}

/* destroy_waited: a thread waits on a condvar nobody signals, and another
 * destroys it (undefined in POSIX: glibc's destroy then blocks for ever).
 * After 500 ms, prints the CPU time the destroying thread has used, in ms,
 * and exits with both threads still blocked. */
static pthread_mutex_t destroyed_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t destroyed_cond = PTHREAD_COND_INITIALIZER;

static void *never_signalled(void *arg) {
    pthread_mutex_lock(&destroyed_lock);
    for (;;) pthread_cond_wait(&destroyed_cond, &destroyed_lock);
    return arg;
}

static void *destroyer(void *arg) {
    pthread_cond_destroy(&destroyed_cond);
    return arg;
}

static int destroy_waited(void) {
    pthread_t waiter, destroying;
    pthread_create(&waiter, NULL, never_signalled, NULL);
    sleep_ms(100);
    pthread_create(&destroying, NULL, destroyer, NULL);
    sleep_ms(500);
    clockid_t cpu;
    struct timespec used;
    pthread_getcpuclockid(destroying, &cpu);
    clock_gettime(cpu, &used);
    printf("destroying thread used %ld ms of CPU\n", used.tv_sec * 1000L + used.tv_nsec / 1000000L);
    fflush(stdout);
    _exit(0);
}

/* realtime_futex_refused: a seccomp filter makes every futex call with
 * FUTEX_CLOCK_REALTIME fail (ENOSYS), as a sandbox may; then a thread
 * waits 200 ms on a CLOCK_REALTIME condvar nobody signals, calling the
 * timed wait again on each 0 (a spurious wake-up), for 3 s at most.
 * Prints "R after N calls, M ms". (glibc aborts on the unexpected
 * error: run it served.) */
static int realtime_futex_refused(void) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_futex, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, FUTEX_CLOCK_REALTIME, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = { sizeof filter / sizeof filter[0], filter };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
        perror("seccomp");
        return 1;
    }
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    at.tv_nsec += 200000000;
    if (at.tv_nsec >= 1000000000) { at.tv_sec++; at.tv_nsec -= 1000000000; }
    long long start = now_ns();
    long calls = 0;
    int r = 0;
    pthread_mutex_lock(&m);
    while (r == 0 && now_ns() - start < 3000000000LL) {
        r = pthread_cond_timedwait(&c, &m, &at);
        calls++;
    }
    pthread_mutex_unlock(&m);
    char name[16];
    printf("%s after %ld calls, %lld ms\n", wait_result(r, name), calls, (now_ns() - start) / 1000000);
    return 0;
}

/* destroy_cancelled: a waiter woken by a broadcast spends 1 s in a signal
 * handler before it leaves the wait, while another thread destroys the
 * condvar (which waits for it) and is cancelled meanwhile (deferred).
 * pthread_cond_destroy is not a cancellation point: the thread must come
 * out of it and be cancelled at its pthread_testcancel. Prints "destroy
 * returned D, cancelled C" (D 1: destroy returned). */
static pthread_mutex_t cancel_destroy_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cancel_destroy_cond = PTHREAD_COND_INITIALIZER;
static volatile int destroy_returned;
static int cancel_destroy_woken;

static void slow_handler(int sig) {
    (void)sig;
    struct timespec t = { 1, 0 };
    nanosleep(&t, NULL);
}

static void *slow_leaver(void *arg) {
    pthread_mutex_lock(&cancel_destroy_lock);
    while (!cancel_destroy_woken) pthread_cond_wait(&cancel_destroy_cond, &cancel_destroy_lock);
    pthread_mutex_unlock(&cancel_destroy_lock);
    return arg;
}

static void *cancelled_destroyer(void *arg) {
    pthread_cond_destroy(&cancel_destroy_cond);
    destroy_returned = 1;
    pthread_testcancel();
    return arg;
}

static int destroy_cancelled(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = slow_handler;
    sigaction(SIGUSR1, &action, NULL);
    pthread_t waiter, destroying;
    pthread_create(&waiter, NULL, slow_leaver, NULL);
    sleep_ms(100);
    pthread_mutex_lock(&cancel_destroy_lock);
    cancel_destroy_woken = 1;
    pthread_cond_broadcast(&cancel_destroy_cond);
    pthread_kill(waiter, SIGUSR1);
    pthread_mutex_unlock(&cancel_destroy_lock);
    pthread_create(&destroying, NULL, cancelled_destroyer, NULL);
    sleep_ms(200);
    pthread_cancel(destroying);
    void *result;
    pthread_join(destroying, &result);
    pthread_join(waiter, NULL);
    printf("destroy returned %d, cancelled %d\n", destroy_returned, result == PTHREAD_CANCELED);
    return 0;
}

#include <fcntl.h> /* (here: the line numbers above are the tests') */

/* nonblocking_stdout: takes 2000 heap locks (a profile of megabytes),
 * then makes its stdout non-blocking, as an event loop does, and exits. */
static int nonblocking_stdout(void) {
    for (int i = 0; i < 2000; i++) {
        pthread_mutex_t *m = malloc(sizeof *m);
        pthread_mutex_init(m, NULL);
        pthread_mutex_lock(m);
        pthread_mutex_unlock(m);
    }
    fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
    return 0;
}

#include <ucontext.h>

/* cancel_stepped: a thread loops in condvar timed waits whose deadline
 * has passed, each instruction trapped (the trap flag); at its Nth
 * instruction the trap's handler cancels it, for every N through one
 * wait and a little more. Where asynchronous cancellation is on, the
 * cancellation unwinds from that very instruction, as a cancellation
 * signal landing there does; elsewhere it is acted on at the wait's next
 * cancellation point. Every thread must be cancelled with the mutex held
 * in its cleanup handler, and the program live: an instruction that the
 * exception table of its function does not list aborted the program
 * (SIGABRT, with nothing said; landing there at random, 8 times in 2
 * million cancellations). Prints "cancelled C of N, held H" (on x86_64;
 * elsewhere "cancelled 0 of 0, held 0"). */
static pthread_mutex_t stepped_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stepped_cond = PTHREAD_COND_INITIALIZER;
static volatile long stepped_steps, stepped_cancel_at, stepped_held;

#if defined(__x86_64__)
#define TRAP_FLAG 0x100L

static void stepped_trap(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)info;
    if (++stepped_steps == stepped_cancel_at) {
        ((ucontext_t *)context)->uc_mcontext.gregs[REG_EFL] &= ~TRAP_FLAG;
        pthread_cancel(pthread_self());
    }
}

static void trap_each_instruction(int on) {
    if (on) __asm__ volatile("pushfq\n\torq $0x100, (%%rsp)\n\tpopfq" ::: "memory", "cc");
    else __asm__ volatile("pushfq\n\tandq $~0x100, (%%rsp)\n\tpopfq" ::: "memory", "cc");
}

static void stepped_cleanup(void *arg) {
    (void)arg;
    stepped_held = pthread_mutex_trylock(&stepped_lock) == EBUSY;
    pthread_mutex_unlock(&stepped_lock);
}

/* arg null: one trapped wait, returns its instruction count; else waits
 * trapped until cancelled. */
static void *stepped_waiter(void *arg) {
    struct timespec past = { 0, 0 };
    long counted = 0;
    pthread_mutex_lock(&stepped_lock);
    pthread_cleanup_push(stepped_cleanup, NULL);
    pthread_cond_timedwait(&stepped_cond, &stepped_lock, &past); /* whatever a first wait sets up */
    stepped_steps = 0;
    trap_each_instruction(1);
    if (!arg) {
        pthread_cond_timedwait(&stepped_cond, &stepped_lock, &past);
        trap_each_instruction(0);
        counted = stepped_steps;
    } else {
        for (;;) pthread_cond_timedwait(&stepped_cond, &stepped_lock, &past);
    }
    pthread_cleanup_pop(0);
    pthread_mutex_unlock(&stepped_lock);
    return (void *)counted;
}

static int cancel_stepped(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = stepped_trap;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGTRAP, &action, NULL);
    pthread_t t;
    void *result;
    stepped_cancel_at = -1;
    pthread_create(&t, NULL, stepped_waiter, NULL);
    pthread_join(t, &result);
    long points = (long)result + 20, cancelled = 0, held = 0;
    for (long n = 1; n <= points; n++) {
        stepped_cancel_at = n;
        stepped_held = 0;
        pthread_create(&t, NULL, stepped_waiter, (void *)1);
        pthread_join(t, &result);
        cancelled += result == PTHREAD_CANCELED;
        held += stepped_held;
    }
    printf("cancelled %ld of %ld, held %ld\n", cancelled, points, held);
    return 0;
}
#else
static int cancel_stepped(void) {
    printf("cancelled 0 of 0, held 0\n");
    return 0;
}
#endif

/* readers_delay: 8 rounds: main write-holds delay_rw 50 ms while two
 * readers queue for it; they then read-hold it 10 and 35 ms side by
 * side, and main, asking to write 5 ms after its release, waits about
 * 30 ms for the second. */
static pthread_rwlock_t delay_rw = PTHREAD_RWLOCK_INITIALIZER;

static void *delay_reader(void *longer) {
    pthread_rwlock_rdlock(&delay_rw);
    sleep_ms(longer ? 35 : 10);
    pthread_rwlock_unlock(&delay_rw);
    return NULL;
}

static int readers_delay(void) {
    for (int i = 0; i < 8; i++) {
        pthread_t a, b;
        pthread_rwlock_wrlock(&delay_rw);
        pthread_create(&a, NULL, delay_reader, NULL);
        pthread_create(&b, NULL, delay_reader, (void *)1);
        sleep_ms(50);
        pthread_rwlock_unlock(&delay_rw);
        sleep_ms(5);
        pthread_rwlock_wrlock(&delay_rw);
        pthread_rwlock_unlock(&delay_rw);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
    }
    return 0;
}

#include <threads.h>

/* c11: C11 <threads.h> locks. A consumer waits on c11_cond for a flag
 * set 100 ms in; then main holds c11_lock 100 ms while a thread waits
 * for it. */
static mtx_t c11_lock;
static cnd_t c11_cond;
static int c11_flag;

static int c11_consumer(void *unused) {
    (void)unused;
    mtx_lock(&c11_lock);
    while (!c11_flag) cnd_wait(&c11_cond, &c11_lock);
    mtx_unlock(&c11_lock);
    return 0;
}

static int c11_waiter(void *unused) {
    (void)unused;
    mtx_lock(&c11_lock);
    mtx_unlock(&c11_lock);
    return 0;
}

static int c11(void) {
    thrd_t t;
    if (mtx_init(&c11_lock, mtx_plain) != thrd_success || cnd_init(&c11_cond) != thrd_success) return 1;
    thrd_create(&t, c11_consumer, NULL);
    sleep_ms(100);
    mtx_lock(&c11_lock);
    c11_flag = 1;
    cnd_signal(&c11_cond);
    mtx_unlock(&c11_lock);
    thrd_join(t, NULL);
    mtx_lock(&c11_lock);
    thrd_create(&t, c11_waiter, NULL);
    sleep_ms(100);
    mtx_unlock(&c11_lock);
    thrd_join(t, NULL);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "nonblocking_stdout")) return nonblocking_stdout();
    if (!strcmp(mode, "hold")) return hold();
    if (!strcmp(mode, "xunlock")) return xunlock();
    if (!strcmp(mode, "periodic")) return periodic();
    if (!strcmp(mode, "rare_long")) return rare_long(0);
    if (!strcmp(mode, "rare_read")) return rare_long(1);
    if (!strcmp(mode, "kind_reuse")) return kind_reuse();
    if (!strcmp(mode, "lock_word")) return lock_word();
    if (!strcmp(mode, "timedwait")) return timedwait();
    if (!strcmp(mode, "timeouts")) return timeouts();
    if (!strcmp(mode, "trylock")) return trylock();
    if (!strcmp(mode, "heap")) return heap();
    if (!strcmp(mode, "rwlock")) return rwlock();
    if (!strcmp(mode, "cond")) return cond();
    if (!strcmp(mode, "c11")) return c11();
    if (!strcmp(mode, "readers_delay")) return readers_delay();
    if (!strcmp(mode, "fork")) return forks(argv[0]);
    if (!strcmp(mode, "child")) return child();
    if (!strcmp(mode, "alloc_threads")) return alloc_threads();
    if (!strcmp(mode, "fork_holds")) return fork_holds();
    if (!strcmp(mode, "owner_died")) return owner_died();
    if (!strcmp(mode, "readers")) return readers();
    if (!strcmp(mode, "bad_wait")) return bad_wait();
    if (!strcmp(mode, "cancelled_waits")) return cancelled_waits();
    if (!strcmp(mode, "fork_threads")) return fork_threads();
    if (!strcmp(mode, "orphan")) return orphan(0);
    if (!strcmp(mode, "orphan_thread")) return orphan_main_exits();
    if (!strcmp(mode, "orphan_retitled")) return orphan_retitled();
    if (!strcmp(mode, "daemon")) return orphan(1);
    if (!strcmp(mode, "orphan_hold")) return orphan_hold(argv[0]);
    if (!strcmp(mode, "sem")) return sem();
    if (!strcmp(mode, "holds")) return holds();
    if (!strcmp(mode, "stuck")) return stuck();
    if (!strcmp(mode, "chain_pipe")) return chain_pipe();
    if (!strcmp(mode, "sysv_term")) return sysv_term();
    if (!strcmp(mode, "crowded_hot") && argc > 2) return crowded_hot(atoi(argv[2]));
    if (!strcmp(mode, "malloc_term")) return malloc_term();
    if (!strcmp(mode, "fork_first")) return fork_first();
    if (!strcmp(mode, "fork_twice")) return fork_twice();
    if (!strcmp(mode, "clock_jump")) return clock_jump();
    if (!strcmp(mode, "destroy_waited")) return destroy_waited();
    if (!strcmp(mode, "destroy_cancelled")) return destroy_cancelled();
    if (!strcmp(mode, "cancel_stepped")) return cancel_stepped();
    if (!strcmp(mode, "realtime_futex_refused")) return realtime_futex_refused();
    if (!strcmp(mode, "fork_mid_refresh") && argc > 2) return fork_mid_refresh(atoi(argv[2]));
    if (!strcmp(mode, "outlier")) return outlier();
    if (!strcmp(mode, "alternate")) return alternate();
    if (!strcmp(mode, "given_up")) return given_up();
    if (!strcmp(mode, "first_long") && argc > 2) return first_long(atoi(argv[2]));
    if (!strcmp(mode, "churn") && argc > 2) return churn(atoi(argv[2]), 1);
    if (!strcmp(mode, "churn_static") && argc > 2) return churn(atoi(argv[2]), 0);
    if (!strcmp(mode, "many") && argc > 2) return many(atoi(argv[2]));
    pthread_mutex_lock(&status_lock);
    pthread_mutex_unlock(&status_lock);
    if (!strcmp(mode, "status")) return atoi(argv[2]);
    if (!strcmp(mode, "abort")) { pthread_mutex_lock(&status_lock); abort(); }
    if (!strcmp(mode, "quick_exit")) _exit(4);
    if (!strcmp(mode, "interrupt")) { raise(SIGINT); return 3; }
    if (!strcmp(mode, "alarm")) { ualarm(50000, 0); for (;;) pause(); }
    if (!strcmp(mode, "pipe")) { for (;;) { puts("a line"); fflush(stdout); } }
    if (!strcmp(mode, "linger_crowded")) {
        /* as linger, with 20,000 locks used (a profile that takes a while
         * to write) and three more threads idle beside main */
        static pthread_mutex_t many_locks[20000];
        pthread_t idle;
        for (int i = 0; i < 20000; i++) {
            pthread_mutex_init(&many_locks[i], NULL);
            pthread_mutex_lock(&many_locks[i]);
            pthread_mutex_unlock(&many_locks[i]);
        }
        for (int i = 0; i < 3; i++) pthread_create(&idle, NULL, idle_thread, NULL);
        printf("ready\n");
        fflush(stdout);
        sleep_ms(10000);
        return 0;
    }
    if (!strcmp(mode, "linger")) {
        /* takes the lock again, says so, and waits 10 s for a signal */
        pthread_mutex_lock(&status_lock);
        pthread_mutex_unlock(&status_lock);
        printf("ready\n");
        fflush(stdout);
        sleep_ms(10000);
        return 0;
    }
    fprintf(stderr, "usage: subjects hold|trylock|heap|rwlock|cond|fork|sem|holds|malloc_term|fork_first|outlier|alternate|churn N|churn_static N|many N|status N|abort|quick_exit|interrupt\n");
    return 2;
}
