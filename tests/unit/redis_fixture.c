/* SPDX-License-Identifier: Apache-2.0 */
/* Starts and stops a private redis-server for the store tests. */
#include "redis_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Find an executable redis-server ($REDIS_SERVER or on PATH) into out. */
static int find_redis_server(char *out, size_t outlen)
{
    const char *env = getenv("REDIS_SERVER");
    if (env && env[0]) {
        snprintf(out, outlen, "%s", env);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path && path[0] ? path : "/usr/local/bin:/usr/bin:/bin");
    char *save = NULL;
    for (char *dir = strtok_r(buf, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        int n = snprintf(out, outlen, "%s/redis-server", dir);
        if (n > 0 && (size_t)n < outlen && access(out, X_OK) == 0)
            return 0;
    }
    snprintf(out, outlen, "%s", "/usr/sbin/redis-server");
    return access(out, X_OK) == 0 ? 0 : -1;
}

/* Ask the kernel for a free loopback port. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* 1 if the server on port answers PING (authenticating when needed). */
static int answers_ping(int port, const char *username, const char *password)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c)
        return 0;
    int ok = 0;
    if (!c->err) {
        redisReply *r = NULL;
        if (password && password[0] && username && username[0]) {
            r = redisCommand(c, "AUTH %s %s", username, password);
            if (r)
                freeReplyObject(r);
        } else if (password && password[0]) {
            r = redisCommand(c, "AUTH %s", password);
            if (r)
                freeReplyObject(r);
        }
        r = redisCommand(c, "PING");
        ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
        if (r)
            freeReplyObject(r);
    }
    redisFree(c);
    return ok;
}

/* Exec redis-server in the child; never returns. */
static void exec_server(const char *bin, int port, const char *password, const char *const *extra,
                        const char *sentinel_conf)
{
    char portbuf[16], dbfile[64];
    snprintf(portbuf, sizeof portbuf, "%d", port);
    /* A replica's full sync writes an RDB file: keep it private, never the
     * shared /tmp/dump.rdb that the next server would load at start. */
    snprintf(dbfile, sizeof dbfile, "rk-test-%d-%d.rdb", (int)getppid(), port);
    if (sentinel_conf || (extra && extra[0])) {
        const char *argv[64];
        int n = 0;
        argv[n++] = "redis-server";
        if (sentinel_conf)
            argv[n++] = sentinel_conf;
        const char *base[] = {"--save", "",          "--appendonly", "no",
                              "--bind", "127.0.0.1", "--port",       portbuf,
                              "--dir",  "/tmp",      "--dbfilename", dbfile};
        for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
            if (!sentinel_conf || (i >= 4 && i < 10))
                argv[n++] = base[i];
        if (password && password[0]) {
            argv[n++] = "--requirepass";
            argv[n++] = password;
        }
        for (size_t i = 0; extra && extra[i] && n < 60; i++)
            argv[n++] = extra[i];
        if (sentinel_conf)
            argv[n++] = "--sentinel";
        argv[n] = NULL;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO);
            dup2(devnull, STDOUT_FILENO);
            if (devnull > STDERR_FILENO)
                close(devnull);
        }
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        dup2(devnull, STDIN_FILENO);
        dup2(devnull, STDOUT_FILENO);
        if (devnull > STDERR_FILENO)
            close(devnull);
    }
    if (password && password[0])
        execl(bin, "redis-server", "--save", "", "--appendonly", "no", "--bind", "127.0.0.1",
              "--port", portbuf, "--dir", "/tmp", "--dbfilename", dbfile, "--requirepass", password,
              (char *)NULL);
    else
        execl(bin, "redis-server", "--save", "", "--appendonly", "no", "--bind", "127.0.0.1",
              "--port", portbuf, "--dir", "/tmp", "--dbfilename", dbfile, (char *)NULL);
    _exit(127);
}

/* Start redis-server (extra arguments, or a sentinel config) and wait (up to
 * 5 s) until it answers PING. */
static int start_server(struct rk_redis_fixture *fx, int port, const char *password,
                        const char *const *extra, const char *sentinel_conf, char *msg,
                        size_t msglen)
{
    char bin[1024];
    if (find_redis_server(bin, sizeof bin) != 0) {
        snprintf(msg, msglen,
                 "redis-server not found (install the Debian package redis-server, or set "
                 "REDIS_SERVER); the store tests need a real Redis");
        return -1;
    }
    fx->port = port > 0 ? port : free_port();
    if (fx->port <= 0) {
        snprintf(msg, msglen, "no free loopback port: %s", strerror(errno));
        return -1;
    }
    if (password || !sentinel_conf) /* a sentinel's ACL password is set by the caller */
        snprintf(fx->password, sizeof fx->password, "%s", password ? password : "");
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(msg, msglen, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0)
        exec_server(bin, fx->port, password, extra, sentinel_conf);
    fx->pid = pid;
    for (int i = 0; i < 100; i++) {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fx->pid = 0;
            snprintf(msg, msglen, "%s exited early (status %d) on port %d", bin, status, fx->port);
            return -1;
        }
        if (answers_ping(fx->port, fx->username, fx->password))
            return 0;
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    rk_redis_fixture_stop(fx);
    snprintf(msg, msglen, "%s did not answer PING on port %d within 5 s", bin, fx->port);
    return -1;
}

/* Start redis-server and wait until it answers PING. */
int rk_redis_fixture_start(struct rk_redis_fixture *fx, int port, const char *password, char *msg,
                           size_t msglen)
{
    return start_server(fx, port, password, NULL, NULL, msg, msglen);
}

/* Start redis-server with extra arguments. */
int rk_redis_fixture_start_ex(struct rk_redis_fixture *fx, int port, const char *password,
                              const char *const *extra, char *msg, size_t msglen)
{
    return start_server(fx, port, password, extra, NULL, msg, msglen);
}

/* Start a sentinel monitoring 127.0.0.1:master_port (config in /tmp), with
 * an ACL user when user is not NULL. */
int rk_redis_fixture_start_sentinel_acl(struct rk_redis_fixture *fx, int master_port,
                                        const char *master_name, const char *user,
                                        const char *password, char *msg, size_t msglen)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/rk-test-sentinel-%d-%d.conf", (int)getpid(), master_port);
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(msg, msglen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "sentinel monitor %s 127.0.0.1 %d 1\n", master_name, master_port);
    if (user)
        fprintf(f, "user default off\nuser %s on >%s +@all\n", user, password);
    fclose(f);
    snprintf(fx->conf, sizeof fx->conf, "%s", path);
    snprintf(fx->username, sizeof fx->username, "%s", user ? user : "");
    snprintf(fx->password, sizeof fx->password, "%s", user ? password : "");
    return start_server(fx, 0, NULL, NULL, path, msg, msglen);
}

/* Start a sentinel monitoring 127.0.0.1:master_port. */
int rk_redis_fixture_start_sentinel(struct rk_redis_fixture *fx, int master_port,
                                    const char *master_name, char *msg, size_t msglen)
{
    return rk_redis_fixture_start_sentinel_acl(fx, master_port, master_name, NULL, NULL, msg,
                                               msglen);
}

/* Kill and reap the server. */
void rk_redis_fixture_stop(struct rk_redis_fixture *fx)
{
    if (fx->pid <= 0)
        return;
    kill(fx->pid, SIGKILL);
    while (waitpid(fx->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    fx->pid = 0;
    char dbfile[80];
    snprintf(dbfile, sizeof dbfile, "/tmp/rk-test-%d-%d.rdb", (int)getpid(), fx->port);
    unlink(dbfile);
    if (fx->conf[0])
        unlink(fx->conf);
    fx->conf[0] = '\0';
}
