/* inline_site: the lock call inlined from a system header's wrapper, as
 * C++'s std::lock_guard inlines std::mutex::lock and glibc's gthread
 * wrapper down to pthread_mutex_lock. The profile places the site at
 * this file's line that led to it: the line of take() in main. */
#include <pthread.h>

pthread_mutex_t inline_lock = PTHREAD_MUTEX_INITIALIZER;

static inline __attribute__((always_inline)) void take(pthread_mutex_t *m) {
/* As if from a header of the system's. */
#line 749 "/usr/include/lockmeter-test/gthr-like.h"
    pthread_mutex_lock(m);
#line 14 "inline_site.c"
}

int main(void) {
    for (int i = 0; i < 1000; i++) {
        take(&inline_lock); /* line 18 */
        pthread_mutex_unlock(&inline_lock);
    }
    return 0;
}
