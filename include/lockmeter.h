/* lockmeter: lock algorithms for C programs.
 *
 * Link with -llockmeter (liblockmeter.so, built by `cargo build --release`
 * into target/release/; it has no SONAME and is not installed, so give the
 * loader its directory: cc prog.c -Iinclude -Ltarget/release -llockmeter
 * -Wl,-rpath,$PWD/target/release). Every function returns 0 or an errno value, like
 * the pthread functions it mirrors. Storage has the size of the pthread
 * type it replaces, and an all-zero object (the *_INITIALIZER macros) is a
 * valid unlocked `adaptive` mutex / an idle condition variable.
 *
 * Algorithms (names for lm_mutex_init):
 *   "adaptive"   spins only while the owner runs on a CPU, else sleeps (default)
 *   "futex"      0/1/2 futex mutex, no spinning
 *   "futex-tid"  TID|WAITERS futex mutex, no spinning
 *   "pi"         kernel priority-inheritance futex
 *   "ticket"     FIFO ticket lock, proportional backoff, gated when oversubscribed
 *   "mcs"        FIFO MCS queue lock, spins on its own node then parks
 *   "spin"       test-and-test-and-set spinlock, never sleeps
 *
 * The locks are private to a process: in memory shared between processes
 * (MAP_SHARED, after fork) a waiter of another process is never woken
 * (their futexes are process-private, and mcs's queue holds pointers).
 * After fork, give the child fresh ticket and mcs locks: threads that
 * waited in the parent's line are still in it.
 *
 * The library also carries lockmeter's pthread interposition: linking it
 * hooks the program's own pthread locks (under 1 ns per lock+unlock: a
 * jump to glibc's function), and with LOCKMETER_LOCK in the environment
 * serves its mutexes and condvars with that algorithm (an unknown name
 * stops the program, exit 127), as LD_PRELOAD would.
 * x86-64 Linux only.
 */
#ifndef LOCKMETER_H
#define LOCKMETER_H

#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Declared here too: <time.h> declares it only for C11 or POSIX builds. */
struct timespec;

typedef union {
    unsigned char lm_bytes[40];
    long lm_align;
} lm_mutex_t;

typedef union {
    unsigned char lm_bytes[48];
    long lm_align;
} lm_cond_t;

#define LM_MUTEX_INITIALIZER { { 0 } }
#define LM_COND_INITIALIZER { { 0 } }

/* Initialises `m` with the named algorithm (NULL or "" for "adaptive").
 * EINVAL for an unknown name (m is left untouched). */
int lm_mutex_init(lm_mutex_t *m, const char *algorithm);
int lm_mutex_lock(lm_mutex_t *m);
/* EBUSY if the mutex is held; for "spin", also while a waiter that has
 * waited too long is owed the lock (its bound on starvation). */
int lm_mutex_trylock(lm_mutex_t *m);
/* Absolute CLOCK_REALTIME deadline, as pthread_mutex_timedlock.
 * ETIMEDOUT when it passes; EINVAL for a tv_nsec outside [0, 1e9) when
 * the mutex is held (a free one is taken without reading the deadline, as
 * glibc's is).
 * A "ticket" or "mcs" waiter that runs out of time leaves its place in
 * line to the unlock that reaches it, which passes the lock on. */
int lm_mutex_timedlock(lm_mutex_t *m, const struct timespec *abstime);
/* Any thread may unlock, as with a normal pthread mutex; but "pi", like
 * glibc's PTHREAD_PRIO_INHERIT mutex, returns EPERM to a thread that does
 * not hold it (the lock stays held). EPERM for a mutex nobody holds. */
int lm_mutex_unlock(lm_mutex_t *m);
/* EBUSY if the mutex is held. */
int lm_mutex_destroy(lm_mutex_t *m);
/* The algorithm's name (a static string). */
const char *lm_mutex_algorithm(const lm_mutex_t *m);

int lm_cond_init(lm_cond_t *c);
/* A cancellation point, as pthread_cond_wait: a thread cancelled while it
 * waits holds the mutex again when its cleanup handlers run. EPERM (no
 * wait) when the mutex cannot be released. */
int lm_cond_wait(lm_cond_t *c, lm_mutex_t *m);
/* Absolute CLOCK_REALTIME deadline; ETIMEDOUT (the mutex is held again). */
int lm_cond_timedwait(lm_cond_t *c, lm_mutex_t *m, const struct timespec *abstime);
int lm_cond_signal(lm_cond_t *c);
int lm_cond_broadcast(lm_cond_t *c);
/* Waits for threads a signal or broadcast woke to leave (destroying right
 * after a broadcast is allowed), sleeping between looks; EBUSY if a
 * thread still waits after a second (one blocked, not woken). */
int lm_cond_destroy(lm_cond_t *c);

/* The number of algorithms, and the name of algorithm i (NULL past the end). */
int lm_algorithm_count(void);
const char *lm_algorithm_name(int i);

/* Turns optimistic spinning on (1) or off (0) process-wide, like the
 * environment variable LOCKMETER_SPIN=0. */
void lm_set_spinning(int enabled);

#ifdef __cplusplus
}
#endif

#endif /* LOCKMETER_H */
