/* Loads liblockmeter with dlopen, as a plugin host or an interpreter's
 * foreign-function interface would, and runs every algorithm through it:
 * four rounds of threads created and exited, each counting under the
 * lock, each holding a second lock over the first (two queue nodes a
 * thread for mcs, whose thread pools live in the static TLS block that
 * a library loaded this way must find room in). Takes the library's path;
 * exits non-zero on any failure. */
#include "lockmeter.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* The header's functions, found in the loaded library. */
static __typeof__(&lm_mutex_init) mutex_init;
static __typeof__(&lm_mutex_lock) mutex_lock;
static __typeof__(&lm_mutex_unlock) mutex_unlock;
static __typeof__(&lm_mutex_destroy) mutex_destroy;
static __typeof__(&lm_algorithm_count) algorithm_count;
static __typeof__(&lm_algorithm_name) algorithm_name;

static lm_mutex_t outer, inner;
static volatile long counter;

enum { THREADS = 4, ROUNDS = 4, EACH = 20000 };

static void *increment(void *arg) {
    (void)arg;
    for (int i = 0; i < EACH; i++) {
        if (mutex_lock(&outer) || mutex_lock(&inner)) abort();
        long v = counter; /* non-atomic read-modify-write: needs exclusion */
        __asm__ volatile("pause");
        counter = v + 1;
        if (mutex_unlock(&inner) || mutex_unlock(&outer)) abort();
    }
    return NULL;
}

static void *symbol(void *library, const char *name) {
    void *found = dlsym(library, name);
    if (!found) {
        printf("FAIL: %s not found: %s\n", name, dlerror());
        exit(1);
    }
    return found;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        printf("FAIL: dlopen: %s\n", dlerror());
        return 1;
    }
    mutex_init = symbol(library, "lm_mutex_init");
    mutex_lock = symbol(library, "lm_mutex_lock");
    mutex_unlock = symbol(library, "lm_mutex_unlock");
    mutex_destroy = symbol(library, "lm_mutex_destroy");
    algorithm_count = symbol(library, "lm_algorithm_count");
    algorithm_name = symbol(library, "lm_algorithm_name");
    int failed = 0;
    for (int a = 0; a < algorithm_count(); a++) {
        const char *name = algorithm_name(a);
        if (mutex_init(&outer, name) || mutex_init(&inner, name)) {
            printf("FAIL %s: init\n", name);
            return 1;
        }
        counter = 0;
        for (int round = 0; round < ROUNDS; round++) {
            pthread_t t[THREADS];
            for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, increment, NULL);
            for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
        }
        int ok = counter == (long)ROUNDS * THREADS * EACH;
        printf("%-10s %s (%ld of %ld)\n", name, ok ? "ok" : "FAIL", counter, (long)ROUNDS * THREADS * EACH);
        failed += !ok;
        mutex_destroy(&inner);
        mutex_destroy(&outer);
    }
    return failed != 0;
}
