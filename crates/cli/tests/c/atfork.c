/* A library that keeps its mutex across fork the usual way, from its own
 * constructor: locked in the prepare handler, unlocked in the parent and
 * child handlers. Loaded before lockmeter's constructor runs, its child
 * handler runs before lockmeter's. Built twice: with -DATFORK_LIBRARY as
 * libatfork.so, and without as the program that links it, calls it,
 * forks, and calls it again in the child and in the parent (each call
 * locks and unlocks; each prints its result, 0 for success). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef ATFORK_LIBRARY
static pthread_mutex_t library_lock = PTHREAD_MUTEX_INITIALIZER;
static void prepare(void) { pthread_mutex_lock(&library_lock); }
static void parent(void) { pthread_mutex_unlock(&library_lock); }
static void child(void) {
    int r = pthread_mutex_unlock(&library_lock);
    if (r != 0) fprintf(stderr, "child handler: unlock returned %d\n", r);
}
__attribute__((constructor)) static void library_init(void) { pthread_atfork(prepare, parent, child); }
int library_call(void) {
    int r = pthread_mutex_lock(&library_lock);
    return r != 0 ? r : pthread_mutex_unlock(&library_lock);
}
#else
int library_call(void);
int main(void) {
    printf("parent %d\n", library_call());
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        printf("child %d\n", library_call());
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    printf("parent after child %d, child status %d\n", library_call(), status);
    return 0;
}
#endif
