/* Process runner: spawns bash in its own process group, reads its pipes incrementally in a
 * helper thread, turns output into execd stream events and streams them to the client. */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Partial-line buffer for one output pipe. */
struct sim_linebuf {
    char *buf;
    size_t len, cap;
    bool last_cr;
};

/* Take a reference on cmd. */
void sim_cmd_ref(struct sim_cmd *cmd)
{
    pthread_mutex_lock(&cmd->mu);
    cmd->refs++;
    pthread_mutex_unlock(&cmd->mu);
}

/* Drop a reference; frees cmd with the last one. */
void sim_cmd_unref(struct sim_cmd *cmd)
{
    pthread_mutex_lock(&cmd->mu);
    int left = --cmd->refs;
    pthread_mutex_unlock(&cmd->mu);
    if (left > 0)
        return;
    struct sim_event *e = cmd->head;
    while (e) {
        struct sim_event *n = e->next;
        free(e->text);
        free(e);
        e = n;
    }
    free(cmd->trailer);
    free(cmd->log);
    free(cmd->state);
    free(cmd->session_id);
    pthread_mutex_destroy(&cmd->mu);
    pthread_cond_destroy(&cmd->cv);
    free(cmd);
}

/* Send sig to the command's process group if it is still running. */
void sim_cmd_kill(struct sim_cmd *cmd, int sig)
{
    pthread_mutex_lock(&cmd->mu);
    if (cmd->running && cmd->pid > 0)
        kill(-cmd->pid, sig);
    pthread_mutex_unlock(&cmd->mu);
}

/* Queue one serialised event (takes ownership of text); applies backpressure. Locked by caller
 * not required. */
static void sim_cmd_push(struct sim_cmd *cmd, char *text)
{
    pthread_mutex_lock(&cmd->mu);
    while (cmd->queued > SIM_MAX_QUEUED && !cmd->consumer_gone && !g_sim.shutting_down) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&cmd->cv, &cmd->mu, &ts);
    }
    if (cmd->consumer_gone || cmd->kind == SIM_CMD_BACKGROUND) {
        pthread_mutex_unlock(&cmd->mu);
        free(text);
        return;
    }
    struct sim_event *e = sim_xmalloc(sizeof *e);
    e->next = NULL;
    e->text = text;
    e->len = strlen(text);
    if (cmd->tail)
        cmd->tail->next = e;
    else
        cmd->head = e;
    cmd->tail = e;
    cmd->queued += e->len;
    pthread_cond_broadcast(&cmd->cv);
    pthread_mutex_unlock(&cmd->mu);
}

/* Build and queue an event with a type and optional text of tlen bytes. */
static void sim_cmd_event_len(struct sim_cmd *cmd, const char *type, const char *text, size_t tlen)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "type", json_object_new_string(type));
    if (text && tlen)
        json_object_object_add(o, "text", json_object_new_string_len(text, (int)tlen));
    json_object_object_add(o, "timestamp", json_object_new_int64(sim_now_ms()));
    char *s = sim_json_event_string(o);
    json_object_put(o);
    sim_cmd_push(cmd, s);
}

/* Build and queue an event with a type and optional NUL-terminated text. */
static void sim_cmd_event(struct sim_cmd *cmd, const char *type, const char *text)
{
    sim_cmd_event_len(cmd, type, text, text ? strlen(text) : 0);
}

/* Append bytes to the background log (bounded). */
static void sim_cmd_log(struct sim_cmd *cmd, const char *data, size_t n)
{
    pthread_mutex_lock(&cmd->mu);
    if (cmd->log_len + n <= SIM_MAX_LOG) {
        cmd->log = sim_xrealloc(cmd->log, cmd->log_len + n + 1);
        memcpy(cmd->log + cmd->log_len, data, n);
        cmd->log_len += n;
        cmd->log[cmd->log_len] = 0;
    }
    pthread_mutex_unlock(&cmd->mu);
}

/* Emit one complete output line as an event following execd's per-kind rules. */
static void sim_emit_line(struct sim_cmd *cmd, const char *type, const char *line, size_t n)
{
    if (cmd->kind == SIM_CMD_BACKGROUND)
        return;
    if (n == 0) {
        if (cmd->kind == SIM_CMD_SESSION)
            return; /* sessions drop empty lines */
        sim_cmd_event(cmd, type, "\n");
        return;
    }
    size_t clen;
    char *clean = sim_sanitize_utf8(line, n, &clen);
    sim_cmd_event_len(cmd, cmd->kind == SIM_CMD_SESSION ? "stdout" : type, clean, clen);
    free(clean);
}

/* Feed raw bytes from a pipe, emitting an event per complete line. */
static void sim_feed(struct sim_cmd *cmd, struct sim_linebuf *lb, const char *type,
                     const char *data, size_t n)
{
    if (cmd->kind == SIM_CMD_BACKGROUND) {
        sim_cmd_log(cmd, data, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = data[i];
        bool brk = ch == '\n' || (ch == '\r' && cmd->kind != SIM_CMD_SESSION);
        if (ch == '\n' && lb->last_cr && lb->len == 0) {
            lb->last_cr = false; /* \r\n counts as one break */
            continue;
        }
        lb->last_cr = ch == '\r';
        if (brk) {
            size_t len = lb->len;
            if (cmd->kind == SIM_CMD_SESSION && len > 0 && lb->buf[len - 1] == '\r')
                len--;
            sim_emit_line(cmd, type, lb->buf, len);
            lb->len = 0;
            continue;
        }
        if (lb->len >= SIM_MAX_LINE) {
            sim_emit_line(cmd, type, lb->buf, lb->len);
            lb->len = 0;
        }
        if (lb->len == lb->cap) {
            lb->cap = lb->cap ? lb->cap * 2 : 256;
            lb->buf = sim_xrealloc(lb->buf, lb->cap);
        }
        lb->buf[lb->len++] = ch;
    }
}

/* Read what is available on *fd; closes it and sets -1 at EOF. Returns bytes read. */
static size_t sim_drain(struct sim_cmd *cmd, int *fd, struct sim_linebuf *lb, const char *type,
                        bool is_state)
{
    char buf[65536];
    size_t total = 0;
    for (;;) {
        ssize_t k = read(*fd, buf, sizeof buf);
        if (k > 0) {
            total += (size_t)k;
            if (is_state) {
                pthread_mutex_lock(&cmd->mu);
                if (cmd->state_len + (size_t)k <= SIM_MAX_STATE) {
                    cmd->state = sim_xrealloc(cmd->state, cmd->state_len + (size_t)k + 1);
                    memcpy(cmd->state + cmd->state_len, buf, (size_t)k);
                    cmd->state_len += (size_t)k;
                    cmd->state[cmd->state_len] = 0;
                }
                pthread_mutex_unlock(&cmd->mu);
            } else {
                sim_feed(cmd, lb, type, buf, (size_t)k);
            }
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return total;
        close(*fd);
        *fd = -1;
        return total;
    }
}

/* Format a millisecond duration like Go's time.Duration String(). */
static void sim_go_duration(int64_t ms, char *out, size_t n)
{
    if (ms < 1000) {
        snprintf(out, n, "%lldms", (long long)ms);
    } else if (ms % 1000 == 0) {
        snprintf(out, n, "%llds", (long long)(ms / 1000));
    } else {
        char frac[8];
        snprintf(frac, sizeof frac, "%03lld", (long long)(ms % 1000));
        for (int i = 2; i > 0 && frac[i] == '0'; i--)
            frac[i] = 0;
        snprintf(out, n, "%lld.%ss", (long long)(ms / 1000), frac);
    }
}

/* Queue the terminal event (or session-timeout trailer) and mark the command done. */
static void sim_cmd_finish(struct sim_cmd *cmd)
{
    int64_t now = sim_now_ms();
    /* The session's state dump is complete (all pipes drained): publish it before the client
     * can see the end of the run, as execd's bashSession.run stores env/cwd before its
     * OnExecuteComplete hook (components/execd/pkg/runtime/bash_session.go). */
    pthread_mutex_lock(&cmd->mu);
    cmd->state_ready = true;
    pthread_mutex_unlock(&cmd->mu);
    if (cmd->kind == SIM_CMD_SESSION && cmd->timed_out) {
        char dur[32], msg[128];
        sim_go_duration(cmd->timeout_ms, dur, sizeof dur);
        snprintf(msg, sizeof msg, "error running in session. timeout after %s", dur);
        json_object *o = json_object_new_object();
        json_object_object_add(o, "code", json_object_new_string("RUNTIME_ERROR"));
        json_object_object_add(o, "message", json_object_new_string(msg));
        char *s = sim_json_event_string(o);
        json_object_put(o);
        pthread_mutex_lock(&cmd->mu);
        cmd->trailer = s;
        pthread_mutex_unlock(&cmd->mu);
    } else if (cmd->kind != SIM_CMD_BACKGROUND) {
        json_object *o = json_object_new_object();
        if (cmd->exit_code == 0) {
            json_object_object_add(o, "type", json_object_new_string("execution_complete"));
            json_object_object_add(o, "timestamp", json_object_new_int64(now));
            if (now - cmd->started_ms > 0)
                json_object_object_add(o, "execution_time",
                                       json_object_new_int64(now - cmd->started_ms));
        } else {
            char evalue[32], tb[96];
            json_object_object_add(o, "type", json_object_new_string("error"));
            json_object_object_add(o, "timestamp", json_object_new_int64(now));
            snprintf(evalue, sizeof evalue, "%d", cmd->exit_code);
            if (cmd->term_signal) {
                const char *name = strsignal(cmd->term_signal);
                snprintf(tb, sizeof tb, "signal: %s", name ? name : "unknown");
                tb[8] = (char)(tb[8] >= 'A' && tb[8] <= 'Z' ? tb[8] + 32 : tb[8]);
            } else {
                snprintf(tb, sizeof tb, "exit status %d", cmd->exit_code);
            }
            json_object *err = json_object_new_object();
            json_object_object_add(err, "ename", json_object_new_string("CommandExecError"));
            json_object_object_add(err, "evalue", json_object_new_string(evalue));
            json_object *arr = json_object_new_array();
            json_object_array_add(arr, json_object_new_string(tb));
            json_object_object_add(err, "traceback", arr);
            json_object_object_add(o, "error", err);
        }
        sim_cmd_push(cmd, sim_json_event_string(o));
        json_object_put(o);
    }
    pthread_mutex_lock(&cmd->mu);
    cmd->done = true;
    cmd->running = false;
    cmd->finished_ms = now;
    pthread_cond_broadcast(&cmd->cv);
    pthread_mutex_unlock(&cmd->mu);
}

/* Reader thread: poll the pipes, enforce the timeout, reap the child, emit the end. */
static void *sim_reader_main(void *arg)
{
    struct sim_cmd *cmd = arg;
    struct sim_linebuf out = {0}, err = {0};
    bool exited = false;
    int status = 0;
    /* Once the pipes are closed (the usual sign of exit), a pidfd, readable when the child exits,
     * makes completion seen at once instead of at the next 100 ms poll timeout. It is opened only
     * then, so a running command costs three descriptors, not four (5,000 concurrent commands
     * fit under a 20,000 descriptor limit); a child whose pipes outlive it (a background
     * grandchild holds them) is still seen within 100 ms, and old kernels fall back to that.
     * (execd ends a command when cmd.Wait() returns, at the process exit: runCommand in
     * components/execd/pkg/runtime/command.go.) */
    int pid_fd = -1;
    for (;;) {
#ifdef SYS_pidfd_open
        if (pid_fd < 0 && cmd->out_fd < 0 && cmd->err_fd < 0 && cmd->state_fd < 0)
            pid_fd = (int)syscall(SYS_pidfd_open, cmd->pid, 0);
#endif
        struct pollfd pfd[4];
        int nfd = 0;
        if (cmd->out_fd >= 0)
            pfd[nfd++] = (struct pollfd){.fd = cmd->out_fd, .events = POLLIN};
        if (cmd->err_fd >= 0)
            pfd[nfd++] = (struct pollfd){.fd = cmd->err_fd, .events = POLLIN};
        if (cmd->state_fd >= 0)
            pfd[nfd++] = (struct pollfd){.fd = cmd->state_fd, .events = POLLIN};
        if (pid_fd >= 0)
            pfd[nfd++] = (struct pollfd){.fd = pid_fd, .events = POLLIN};
        if (exited || g_sim.shutting_down)
            break;
        int rc = poll(pfd, (nfds_t)nfd, 100);
        if (rc > 0) {
            if (cmd->out_fd >= 0)
                sim_drain(cmd, &cmd->out_fd, &out, "stdout", false);
            if (cmd->err_fd >= 0)
                sim_drain(cmd, &cmd->err_fd, &err, "stderr", false);
            if (cmd->state_fd >= 0)
                sim_drain(cmd, &cmd->state_fd, NULL, NULL, true);
        }
        int64_t now = sim_now_ms();
        pthread_mutex_lock(&cmd->mu);
        bool gone = cmd->consumer_gone;
        int64_t deadline = cmd->deadline_ms;
        pthread_mutex_unlock(&cmd->mu);
        /* Strictly after: both times are whole milliseconds (started_ms rounded down), so
         * now == deadline can be up to 1 ms before the timeout really ran out. execd's timer
         * (context.WithTimeout in components/execd/pkg/runtime/ctrl.go) never kills a command
         * early, and the plugin relies on that: a -1 before t0 + timeout is not a timeout kill. */
        if (deadline > 0 && now > deadline && !cmd->timed_out) {
            cmd->timed_out = true;
            kill(-cmd->pid, SIGKILL);
        }
        if (gone && cmd->kind == SIM_CMD_SESSION)
            kill(-cmd->pid, SIGKILL); /* session runs are tied to the request */
        pid_t w = waitpid(cmd->pid, &status, WNOHANG);
        if (w == cmd->pid)
            exited = true;
    }
    if (pid_fd >= 0)
        close(pid_fd);
    if (!exited) {
        kill(-cmd->pid, SIGKILL);
        waitpid(cmd->pid, &status, 0);
    }
    /* Final drain of whatever the process left in the pipes (do not wait for grandchildren). */
    if (cmd->out_fd >= 0)
        sim_drain(cmd, &cmd->out_fd, &out, "stdout", false);
    if (cmd->err_fd >= 0)
        sim_drain(cmd, &cmd->err_fd, &err, "stderr", false);
    if (cmd->state_fd >= 0)
        sim_drain(cmd, &cmd->state_fd, NULL, NULL, true);
    if (out.len)
        sim_emit_line(cmd, "stdout", out.buf, out.len);
    if (err.len)
        sim_emit_line(cmd, "stderr", err.buf, err.len);
    free(out.buf);
    free(err.buf);
    int fds[3] = {cmd->out_fd, cmd->err_fd, cmd->state_fd};
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    cmd->out_fd = cmd->err_fd = cmd->state_fd = -1;
    if (WIFEXITED(status)) {
        cmd->exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        cmd->exit_code = -1;
        cmd->term_signal = WTERMSIG(status);
    }
    sim_cmd_finish(cmd);
    sim_cmd_unref(cmd);
    sim_thread_finished();
    return NULL;
}

/* Spawn bash -c script in its own process group; returns a cmd with one ref for the caller. */
struct sim_cmd *sim_cmd_spawn(enum sim_cmd_kind kind, const char *script, const char *cwd,
                              char **envp, int64_t timeout_ms, const char *session_id, char *err,
                              size_t errn)
{
    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, statep[2] = {-1, -1};
    if (pipe2(outp, O_CLOEXEC) != 0 || (kind != SIM_CMD_SESSION && pipe2(errp, O_CLOEXEC) != 0) ||
        (kind == SIM_CMD_SESSION && pipe2(statep, O_CLOEXEC) != 0)) {
        snprintf(err, errn, "pipe: %s", strerror(errno));
        int all[6] = {outp[0], outp[1], errp[0], errp[1], statep[0], statep[1]};
        for (int i = 0; i < 6; i++)
            if (all[i] >= 0)
                close(all[i]);
        return NULL;
    }
    char *argv[6];
    int ac = 0;
    argv[ac++] = "bash";
    if (kind == SIM_CMD_SESSION) {
        argv[ac++] = "--noprofile";
        argv[ac++] = "--norc";
    }
    argv[ac++] = "-c";
    argv[ac++] = (char *)script;
    argv[ac] = NULL;
    sigset_t all;
    sigemptyset(&all);
    /* vfork, as execd's exec.CommandContext(...).Start() spawns on Linux (Go's forkExec clones
     * with CLONE_VFORK|CLONE_VM, syscall/exec_linux.go): fork() copies
     * the page tables of a process with thousands of threads, which made spawning 5,000
     * concurrent commands take minutes. The child below only makes system calls, then execs. */
    pid_t pid = vfork();
    if (pid < 0) {
        snprintf(err, errn, "fork: %s", strerror(errno));
        close(outp[0]);
        close(outp[1]);
        if (errp[0] >= 0) {
            close(errp[0]);
            close(errp[1]);
        }
        if (statep[0] >= 0) {
            close(statep[0]);
            close(statep[1]);
        }
        return NULL;
    }
    if (pid == 0) {
        /* Child: only async-signal-safe calls from here on. */
        setpgid(0, 0);
        sigprocmask(SIG_SETMASK, &all, NULL);
        signal(SIGPIPE, SIG_DFL);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(outp[1], 1);
        dup2(kind == SIM_CMD_SESSION ? outp[1] : errp[1], 2);
        if (statep[1] == 3)
            fcntl(3, F_SETFD, 0);
        else if (statep[1] >= 0)
            dup2(statep[1], 3);
        close_range(statep[1] >= 0 ? 4 : 3, ~0U, 0);
        if (chdir(cwd) != 0)
            _exit(126);
        execve("/bin/bash", argv, envp);
        execve("/usr/bin/bash", argv, envp);
        _exit(127);
    }
    setpgid(pid, pid);
    close(outp[1]);
    if (errp[1] >= 0)
        close(errp[1]);
    if (statep[1] >= 0)
        close(statep[1]);
    struct sim_cmd *cmd = calloc(1, sizeof *cmd);
    if (!cmd)
        abort();
    pthread_mutex_init(&cmd->mu, NULL);
    pthread_cond_init(&cmd->cv, NULL);
    cmd->refs = 2; /* caller + reader thread */
    sim_hex_id(cmd->id);
    cmd->kind = kind;
    cmd->pid = pid;
    cmd->out_fd = outp[0];
    cmd->err_fd = errp[0];
    cmd->state_fd = statep[0];
    cmd->started_ms = sim_now_ms();
    cmd->timeout_ms = timeout_ms;
    cmd->deadline_ms = timeout_ms > 0 ? cmd->started_ms + timeout_ms : 0;
    cmd->running = true;
    cmd->session_id = sim_strdup(session_id);
    int fds[3] = {cmd->out_fd, cmd->err_fd, cmd->state_fd};
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
            fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
    if (kind != SIM_CMD_BACKGROUND)
        sim_cmd_event(cmd, "init", session_id ? session_id : cmd->id);
    sim_thread_started();
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, sim_reader_main, cmd) != 0) {
        /* Cannot read it: kill it and report failure. */
        kill(-pid, SIGKILL);
        waitpid(pid, NULL, 0);
        sim_thread_finished();
        cmd->refs = 1;
        close(cmd->out_fd);
        if (cmd->err_fd >= 0)
            close(cmd->err_fd);
        if (cmd->state_fd >= 0)
            close(cmd->state_fd);
        sim_cmd_unref(cmd);
        pthread_attr_destroy(&attr);
        snprintf(err, errn, "cannot start reader thread");
        return NULL;
    }
    pthread_attr_destroy(&attr);
    return cmd;
}

/* Streaming state for one HTTP response. */
struct sim_stream {
    struct sim_cmd *cmd;
    char *pending;
    size_t plen, poff;
    bool finished;
    int64_t last_send_ms;
    int64_t events;
};

/* Set the stream's pending output (takes ownership). */
static void sim_stream_set(struct sim_stream *st, char *data, size_t len)
{
    free(st->pending);
    st->pending = data;
    st->plen = len;
    st->poff = 0;
}

/* MHD content reader: blocks until an event, a ping or the end is due. */
static ssize_t sim_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct sim_stream *st = cls;
    size_t out = 0; /* bytes already placed in buf: never block once we have some */
    (void)pos;
    for (;;) {
        if (st->pending && st->poff < st->plen) {
            size_t n = st->plen - st->poff;
            if (n > max - out)
                n = max - out;
            memcpy(buf + out, st->pending + st->poff, n);
            st->poff += n;
            out += n;
            if (out == max)
                return (ssize_t)out;
            continue;
        }
        if (st->finished)
            return out ? (ssize_t)out : MHD_CONTENT_READER_END_OF_STREAM;
        struct sim_faults f;
        sim_faults_get(&f);
        bool cut = f.cut_stream_after >= 0 && st->events >= f.cut_stream_after;
        if (g_sim.shutting_down || cut)
            return out ? (ssize_t)out : MHD_CONTENT_READER_END_WITH_ERROR;
        pthread_mutex_lock(&st->cmd->mu);
        /* Paused sandbox: a frozen execd sends nothing, until the command ends (killed by a
         * delete or expiry of the paused sandbox). */
        bool frozen = st->cmd->frozen && !st->cmd->done;
        pthread_mutex_unlock(&st->cmd->mu);
        if (frozen || (f.stall_stream_after >= 0 && st->events >= f.stall_stream_after)) {
            if (out)
                return (ssize_t)out;
            sim_sleep_ms(100);
            continue;
        }
        if (out) {
            pthread_mutex_lock(&st->cmd->mu);
            bool more = st->cmd->head != NULL;
            pthread_mutex_unlock(&st->cmd->mu);
            if (!more)
                return (ssize_t)out;
        }
        struct sim_cmd *cmd = st->cmd;
        pthread_mutex_lock(&cmd->mu);
        int64_t due = st->last_send_ms + SIM_PING_INTERVAL_MS;
        while (!cmd->head && !cmd->done && sim_now_ms() < due && !g_sim.shutting_down) {
            int64_t wait = due - sim_now_ms();
            if (wait > 200)
                wait = 200;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += (long)(wait * 1000000);
            ts.tv_sec += ts.tv_nsec / 1000000000;
            ts.tv_nsec %= 1000000000;
            pthread_cond_timedwait(&cmd->cv, &cmd->mu, &ts);
        }
        if (cmd->head) {
            struct sim_event *e = cmd->head;
            cmd->head = e->next;
            if (!cmd->head)
                cmd->tail = NULL;
            cmd->queued -= e->len;
            pthread_cond_broadcast(&cmd->cv);
            pthread_mutex_unlock(&cmd->mu);
            char *data = sim_xmalloc(e->len + 3);
            memcpy(data, e->text, e->len);
            memcpy(data + e->len, "\n\n", 3);
            sim_stream_set(st, data, e->len + 2);
            free(e->text);
            free(e);
            st->events++;
            st->last_send_ms = sim_now_ms();
            continue;
        }
        if (cmd->done) {
            char *trailer = cmd->trailer ? sim_strdup(cmd->trailer) : NULL;
            pthread_mutex_unlock(&cmd->mu);
            st->finished = true;
            if (trailer)
                sim_stream_set(st, trailer, strlen(trailer));
            continue;
        }
        pthread_mutex_unlock(&cmd->mu);
        if (sim_now_ms() >= due) {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "type", json_object_new_string("ping"));
            json_object_object_add(o, "text", json_object_new_string("pong"));
            json_object_object_add(o, "timestamp", json_object_new_int64(sim_now_ms()));
            char *s = sim_json_event_string(o);
            json_object_put(o);
            size_t n = strlen(s);
            s = sim_xrealloc(s, n + 3);
            memcpy(s + n, "\n\n", 3);
            sim_stream_set(st, s, n + 2);
            st->last_send_ms = sim_now_ms();
        }
    }
}

/* MHD free callback: the client is gone or the stream ended. */
static void sim_stream_free(void *cls)
{
    struct sim_stream *st = cls;
    pthread_mutex_lock(&st->cmd->mu);
    st->cmd->consumer_gone = true;
    pthread_cond_broadcast(&st->cmd->cv);
    pthread_mutex_unlock(&st->cmd->mu);
    sim_cmd_unref(st->cmd);
    free(st->pending);
    free(st);
}

/* Build a chunked text/event-stream response for cmd (takes a ref of its own). */
struct MHD_Response *sim_cmd_stream_response(struct sim_cmd *cmd)
{
    struct sim_stream *st = calloc(1, sizeof *st);
    if (!st)
        abort();
    sim_cmd_ref(cmd);
    st->cmd = cmd;
    st->last_send_ms = sim_now_ms();
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 64 * 1024, sim_stream_read, st, sim_stream_free);
    if (!r) {
        sim_stream_free(st);
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return r;
}

/* Append "KEY=VALUE" to env, replacing an existing KEY. */
static void sim_env_set(char ***envp, int *n, const char *key, const char *val)
{
    size_t kl = strlen(key);
    char *kv = sim_xmalloc(kl + strlen(val) + 2);
    sprintf(kv, "%s=%s", key, val);
    for (int i = 0; i < *n; i++) {
        if (strncmp((*envp)[i], key, kl) == 0 && (*envp)[i][kl] == '=') {
            free((*envp)[i]);
            (*envp)[i] = kv;
            return;
        }
    }
    *envp = sim_xrealloc(*envp, sizeof(char *) * (size_t)(*n + 2));
    (*envp)[(*n)++] = kv;
    (*envp)[*n] = NULL;
}

/* Environment for a sandbox process: PATH, HOME, LANG, then sandbox env, then extra. */
char **sim_build_env(struct sim_sandbox *sb, json_object *extra)
{
    char **envp = sim_xmalloc(sizeof(char *));
    int n = 0;
    envp[0] = NULL;
    const char *path = getenv("PATH");
    sim_env_set(&envp, &n, "PATH", path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
    sim_env_set(&envp, &n, "HOME", sb->dir);
    sim_env_set(&envp, &n, "LANG", "C.UTF-8");
    json_object *srcs[2] = {sb->env, extra};
    for (int s = 0; s < 2; s++) {
        if (!srcs[s] || !json_object_is_type(srcs[s], json_type_object))
            continue;
        json_object_object_foreach(srcs[s], k, v)
        {
            if (json_object_is_type(v, json_type_string) && *k && !strchr(k, '='))
                sim_env_set(&envp, &n, k, json_object_get_string(v));
        }
    }
    return envp;
}

/* Free an environment built by sim_build_env. */
void sim_free_env(char **envp)
{
    if (!envp)
        return;
    for (char **p = envp; *p; p++)
        free(*p);
    free(envp);
}
