/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of librkutil's curl-multi transfer loop (rkcurlloop.h): a file:// transfer ends
 * with its result on the loop thread, a job that never gets an answer (a loopback listener
 * that accepts nothing) is ended by should_abort, a wake runs on the loop thread, and a
 * stopped loop takes nothing more. A driven loop (no thread: its owner polls its descriptor
 * and runs passes) does the same on the owner's thread, reports when a stopped loop is
 * drained, and ends what is still open with CURLE_ABORTED_BY_CALLBACK when it is freed. */
#include "rkcurlloop.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int failures;

/* Count a failed expectation with its line. */
#define EXPECT(c)                                                                                  \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #c);                       \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

struct probe {
    struct rku_curl_job job; /* first: the callbacks get &job */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, code, woken, abort_now;
    pthread_t done_thread, wake_thread;
    size_t bytes;
};

static size_t sink(char *p, size_t sz, size_t n, void *ud)
{
    (void)p;
    ((struct probe *)ud)->bytes += sz * n;
    return sz * n;
}

static void on_done(struct rku_curl_job *j, int code)
{
    struct probe *p = (struct probe *)j;
    pthread_mutex_lock(&p->mu);
    p->done = 1;
    p->code = code;
    p->done_thread = pthread_self();
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void on_wake(struct rku_curl_job *j)
{
    struct probe *p = (struct probe *)j;
    pthread_mutex_lock(&p->mu);
    p->woken++;
    p->wake_thread = pthread_self();
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static int should_abort(struct rku_curl_job *j, int64_t now)
{
    (void)now;
    struct probe *p = (struct probe *)j;
    pthread_mutex_lock(&p->mu);
    int a = p->abort_now;
    pthread_mutex_unlock(&p->mu);
    return a;
}

static void probe_init(struct probe *p, const char *url)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->job.curl = curl_easy_init();
    curl_easy_setopt(p->job.curl, CURLOPT_URL, url);
    curl_easy_setopt(p->job.curl, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(p->job.curl, CURLOPT_WRITEDATA, p);
    p->job.on_done = on_done;
    p->job.on_wake = on_wake;
    p->job.should_abort = should_abort;
}

/* Wait (at most 10 s) until *flag is non-zero. */
static int wait_flag(struct probe *p, int *flag)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&p->mu);
    while (!*flag && pthread_cond_timedwait(&p->cv, &p->mu, &until) == 0)
        ;
    int v = *flag;
    pthread_mutex_unlock(&p->mu);
    return v;
}

static void probe_free(struct probe *p)
{
    curl_easy_cleanup(p->job.curl);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
}

/* Drive lp on this thread until *flag is set or 10 s passed: poll its descriptor for as long
 * as its last pass asked, then run a pass. */
static int drive_until(struct rku_curl_loop *lp, int *flag)
{
    int wait = 0;
    for (int i = 0; i < 10000 && !*flag; i++) {
        struct pollfd pfd = {.fd = rku_curl_loop_fd(lp), .events = POLLIN};
        poll(&pfd, 1, wait < 10 ? wait : 10);
        wait = rku_curl_loop_run(lp);
    }
    return *flag;
}

/* The driven loop: every callback on the driving thread, submissions from another one. */
static void *submit_from_thread(void *arg)
{
    void **a = arg;
    return (void *)(long)rku_curl_loop_submit(a[0], a[1]);
}

static void driven_loop(const char *hung_url)
{
    struct rku_curl_loop *lp = rku_curl_loop_new_driven(50, 0);
    EXPECT(lp != NULL && rku_curl_loop_fd(lp) >= 0);
    struct probe f;
    probe_init(&f, "file:///proc/self/status");
    pthread_t t;
    void *args[2] = {lp, &f.job};
    void *rc = (void *)1L;
    EXPECT(pthread_create(&t, NULL, submit_from_thread, args) == 0 && pthread_join(t, &rc) == 0);
    EXPECT(rc == NULL);
    EXPECT(drive_until(lp, &f.done));
    EXPECT(f.code == CURLE_OK && f.bytes > 0);
    EXPECT(pthread_equal(f.done_thread, pthread_self()));

    /* A wake runs on the driving thread too. */
    struct probe h;
    probe_init(&h, hung_url);
    EXPECT(rku_curl_loop_submit(lp, &h.job) == 0);
    EXPECT(rku_curl_loop_wake_job(lp, &h.job) == 1);
    EXPECT(drive_until(lp, &h.woken));
    EXPECT(pthread_equal(h.wake_thread, pthread_self()) && !h.done);

    /* Stopped with a transfer open: not drained until the owner's passes end it. */
    rku_curl_loop_stop(lp);
    EXPECT(rku_curl_loop_submit(lp, &f.job) == -1);
    rku_curl_loop_run(lp);
    EXPECT(!rku_curl_loop_drained(lp) && !h.done);
    /* Freed while still open: the transfer ends aborted, on this thread. */
    rku_curl_loop_free(lp);
    EXPECT(h.done && h.code == CURLE_ABORTED_BY_CALLBACK);

    /* A stopped driven loop with nothing open says so after one pass. */
    lp = rku_curl_loop_new_driven(50, 0);
    rku_curl_loop_stop(lp);
    rku_curl_loop_run(lp);
    EXPECT(rku_curl_loop_drained(lp));
    rku_curl_loop_free(lp);
    probe_free(&f);
    probe_free(&h);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct rku_curl_loop *lp = rku_curl_loop_new(50, 0);
    EXPECT(lp != NULL);

    /* A wake before the loop runs anything queues nothing. */
    struct probe f;
    probe_init(&f, "file:///proc/self/status");
    EXPECT(rku_curl_loop_wake_job(lp, &f.job) == 0);

    /* A transfer that ends on its own: its result on the loop thread. */
    EXPECT(rku_curl_loop_submit(lp, &f.job) == 0);
    EXPECT(wait_flag(&f, &f.done));
    EXPECT(f.code == CURLE_OK && f.bytes > 0);
    EXPECT(!pthread_equal(f.done_thread, pthread_self()));

    /* A transfer that gets no answer: ended by should_abort, not before. */
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    EXPECT(bind(ls, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(ls, 4) == 0);
    getsockname(ls, (struct sockaddr *)&sa, &sl);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", ntohs(sa.sin_port));
    struct probe h;
    probe_init(&h, url);
    EXPECT(rku_curl_loop_submit(lp, &h.job) == 0);
    usleep(300 * 1000); /* several sweeps: still open */
    pthread_mutex_lock(&h.mu);
    EXPECT(!h.done);
    pthread_mutex_unlock(&h.mu);

    /* A wake runs on_wake on the loop thread, once per queued wake. */
    EXPECT(rku_curl_loop_wake_job(lp, &h.job) == 1);
    EXPECT(wait_flag(&h, &h.woken));
    EXPECT(!pthread_equal(h.wake_thread, pthread_self()));

    pthread_mutex_lock(&h.mu);
    h.abort_now = 1;
    pthread_mutex_unlock(&h.mu);
    EXPECT(wait_flag(&h, &h.done));
    EXPECT(h.code == CURLE_ABORTED_BY_CALLBACK);

    driven_loop(url);

    /* Stopped: no submission, no wake. */
    rku_curl_loop_stop(lp);
    struct probe s;
    probe_init(&s, "file:///proc/self/status");
    EXPECT(rku_curl_loop_submit(lp, &s.job) == -1);
    EXPECT(rku_curl_loop_wake_job(lp, &s.job) == 0);
    rku_curl_loop_free(lp);
    close(ls);
    probe_free(&f);
    probe_free(&h);
    probe_free(&s);
    curl_global_cleanup();
    if (failures)
        fprintf(stderr, "%d expectation(s) failed\n", failures);
    return failures ? 1 : 0;
}
