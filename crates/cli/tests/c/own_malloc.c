/* A program with its own allocator (glibc lets a program replace malloc:
 * libc and every library then allocate through it), killed by SIGTERM
 * while that allocator holds its lock, as a signal lands in a real
 * allocator's locked section. The allocator's lock waits for ever, as a
 * real one's does: a signal handler that allocates deadlocks.
 *
 * own_malloc [SIGNAL]: takes own_malloc_lock 1000 times, then allocates
 * with SIGTERM raised inside the allocator; with SIGNAL (a number), a
 * second thread raises that 1 ms later, while the profile is written.
 * own_malloc exit: takes the lock as much, then exits, and the first
 * allocation after its exit handler raises SIGTERM: inside the exit
 * profile's write, whose handler runs after the program's.
 * own_malloc dump: takes the lock as much, lets the periodic dumps run
 * for 10 ms, then allocates until the library's dump thread waits for
 * the allocator's lock (inside a dump), and raises SIGTERM while holding
 * it: the dump can never finish. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Bumped, never reused: each block has its size in the 16 bytes before it. */
static _Alignas(4096) char heap[256 << 20];
static size_t heap_used;
static int heap_locked;
static int raise_inside;
static int raised;
static int raise_when_dump_waits;
static int dump_waits;

/* Whether the calling thread is the library's periodic dump thread. */
static int in_dump_thread(void) {
    char name[16] = "";
    prctl(PR_GET_NAME, name);
    return !strcmp(name, "lockmeter-dump");
}

static void *take(size_t size, size_t align) {
    if (align < 16) align = 16;
    int dump = raise_when_dump_waits && in_dump_thread();
    if (dump) __atomic_store_n(&dump_waits, 1, __ATOMIC_RELEASE);
    while (__atomic_exchange_n(&heap_locked, 1, __ATOMIC_ACQUIRE)) sched_yield();
    if (dump) __atomic_store_n(&dump_waits, 0, __ATOMIC_RELEASE);
    if (raise_when_dump_waits && !dump) {
        /* Hold the lock until the dump thread waits for it. */
        struct timespec pause = { 0, 100000 };
        while (!__atomic_load_n(&dump_waits, __ATOMIC_ACQUIRE)) nanosleep(&pause, NULL);
        raise_when_dump_waits = 0;
        raise(SIGTERM);
    }
    if (raise_inside) {
        raise_inside = 0;
        __atomic_store_n(&raised, 1, __ATOMIC_RELEASE);
        raise(SIGTERM);
    }
    void *block = NULL;
    size_t start = (heap_used + 16 + align - 1) & ~(align - 1);
    if (size <= sizeof heap && start <= sizeof heap - size) {
        memcpy(heap + start - sizeof size, &size, sizeof size);
        heap_used = start + size;
        block = heap + start;
    }
    __atomic_store_n(&heap_locked, 0, __ATOMIC_RELEASE);
    if (!block) errno = ENOMEM;
    return block;
}

static size_t size_of(void *block) {
    size_t size;
    memcpy(&size, (char *)block - sizeof size, sizeof size);
    return size;
}

void *malloc(size_t size) { return take(size, 16); }
void free(void *block) { (void)block; }
void *calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) { errno = ENOMEM; return NULL; }
    return take(n * size, 16); /* never reused: still zero */
}
void *realloc(void *block, size_t size) {
    void *moved = take(size, 16);
    if (block && moved) memcpy(moved, block, size_of(block) < size ? size_of(block) : size);
    return moved;
}
void *memalign(size_t align, size_t size) { return take(size, align); }
void *aligned_alloc(size_t align, size_t size) { return take(size, align); }
void *valloc(size_t size) { return take(size, 4096); }
void *pvalloc(size_t size) { return take((size + 4095) & ~(size_t)4095, 4096); }
int posix_memalign(void **out, size_t align, size_t size) {
    void *block = take(size, align);
    if (!block) return ENOMEM;
    *out = block;
    return 0;
}
size_t malloc_usable_size(void *block) { return block ? size_of(block) : 0; }

pthread_mutex_t own_malloc_lock = PTHREAD_MUTEX_INITIALIZER;

static void *raise_second(void *signal) {
    while (!__atomic_load_n(&raised, __ATOMIC_ACQUIRE)) sched_yield();
    struct timespec pause = { 0, 1000000 };
    nanosleep(&pause, NULL);
    raise((int)(intptr_t)signal);
    return NULL;
}

static void raise_in_next_allocation(void) { raise_inside = 1; }

int main(int argc, char **argv) {
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&own_malloc_lock);
        pthread_mutex_unlock(&own_malloc_lock);
    }
    if (argc > 1 && !strcmp(argv[1], "exit")) {
        atexit(raise_in_next_allocation);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "dump")) {
        struct timespec dumps = { 0, 10000000 };
        nanosleep(&dumps, NULL);
        raise_when_dump_waits = 1;
        free(malloc(32));
        return 0;
    }
    if (argc > 1) {
        pthread_t second;
        pthread_create(&second, NULL, raise_second, (void *)(intptr_t)atoi(argv[1]));
    }
    raise_inside = 1;
    free(malloc(32));
    return 0;
}
