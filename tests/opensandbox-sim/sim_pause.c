/* Pause / resume: the state machine (Running -> [Pausing ->] Paused -> [Resuming ->] Running),
 * freezing the sandbox's process groups with SIGSTOP/SIGCONT, and execd being unreachable
 * (requests hang) while the sandbox is paused.
 *
 * Matched against alibaba/OpenSandbox server/opensandbox_server/services/docker/docker_service.py
 * (DockerSandboxService.pause_sandbox / resume_sandbox):
 *   - pause checks the container's State.Running, else 409 DOCKER::SANDBOX_NOT_RUNNING
 *     "Sandbox is not in a running state."; Docker keeps State.Running true for a paused
 *     container, so pausing a Paused sandbox reaches container.pause(), which Docker refuses
 *     ("is already paused"): 500 DOCKER::SANDBOX_PAUSE_FAILED "Failed to pause sandbox
 *     container: ...".
 *   - resume checks State.Paused, else 409 DOCKER::SANDBOX_NOT_PAUSED "Sandbox is not in a
 *     paused state."; a Docker failure is 500 DOCKER::SANDBOX_RESUME_FAILED.
 *   - docker pause/unpause are synchronous, so Pausing/Resuming are not observable with the
 *     Docker provider (the spec's states; the pause_delay_ms/resume_delay_ms switches show them).
 * Kubernetes (services/k8s/kubernetes_service.py) answers both with 501
 * SANDBOX::API_NOT_SUPPORTED "Pause operation is not supported in Kubernetes runtime"
 * (switch pause_unsupported). A paused container's execd is frozen: connections are accepted
 * by the kernel but nothing answers (shared/contracts/opensandbox-api.md 3.5), and the
 * server proxy gives up after its 180 s I/O timeout with 502 GENERAL::UNKNOWN_ERROR. */
#include "sim.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#define SIM_PAUSED_EXECD_HOLD_MS (180 * 1000)

/* Mark a command frozen/thawed (its stream then sends nothing, not even pings). */
static void sim_cmd_set_frozen(struct sim_cmd *cmd, bool frozen)
{
    pthread_mutex_lock(&cmd->mu);
    cmd->frozen = frozen;
    pthread_cond_broadcast(&cmd->cv);
    pthread_mutex_unlock(&cmd->mu);
}

/* Send sig (SIGSTOP/SIGCONT) to every process group of the sandbox and freeze/thaw the
 * streams of its commands and session runs; caller holds g_sim.mu. */
void sim_signal_all_locked(struct sim_sandbox *sb, int sig)
{
    bool frozen = sig == SIGSTOP;
    for (int i = 0; i < sb->ncmds; i++) {
        sim_cmd_set_frozen(sb->cmds[i], frozen);
        sim_cmd_kill(sb->cmds[i], sig);
    }
    for (struct sim_session *s = sb->sessions; s; s = s->next) {
        if (s->running) {
            sim_cmd_set_frozen(s->running, frozen);
            sim_cmd_kill(s->running, sig);
        }
    }
    for (int i = 0; i < sb->npgids; i++)
        kill(-sb->pgids[i], sig);
}

/* POST /sandboxes/<id>/pause or /resume; caller holds g_sim.mu. */
enum MHD_Result sim_pause_handle(struct MHD_Connection *c, struct sim_sandbox *sb, bool pause,
                                 int64_t now)
{
    struct sim_faults f;
    sim_faults_get(&f);
    if (f.pause_unsupported || g_sim.no_pause)
        return sim_reply_error(c, 501, "SANDBOX::API_NOT_SUPPORTED",
                               pause ? "Pause operation is not supported in Kubernetes runtime"
                                     : "Resume operation is not supported in Kubernetes runtime");
    enum sim_state st = sim_effective_state(sb, now);
    char msg[256];
    if (pause) {
        if (st == SIM_PAUSED) {
            snprintf(msg, sizeof msg,
                     "Failed to pause sandbox container: 409 Client Error: Conflict (\"Container "
                     "%s is already paused\")",
                     sb->id);
            return sim_reply_error(c, 500, "DOCKER::SANDBOX_PAUSE_FAILED", msg);
        }
        if (st != SIM_RUNNING)
            return sim_reply_error(c, 409, "DOCKER::SANDBOX_NOT_RUNNING",
                                   "Sandbox is not in a running state.");
        if (f.pause_fail)
            return sim_reply_error(c, 500, "DOCKER::SANDBOX_PAUSE_FAILED",
                                   "Failed to pause sandbox container: injected failure "
                                   "(opensandbox-sim)");
        sim_signal_all_locked(sb, SIGSTOP);
        sb->transition_ms = now;
        if (f.pause_delay_ms > 0) {
            sb->state = SIM_PAUSING;
            sb->transition_due_ms = now + f.pause_delay_ms;
            snprintf(sb->reason, sizeof sb->reason, "CONTAINER_PAUSING");
        } else {
            sb->state = SIM_PAUSED;
            snprintf(sb->reason, sizeof sb->reason, "CONTAINER_PAUSED");
        }
        /* the docker runtime's text (services/docker/docker_service.py) */
        snprintf(sb->message, sizeof sb->message, "%s",
                 sb->state == SIM_PAUSED ? "Sandbox container is paused." : "");
        return sim_reply_empty(c, 202);
    }
    if (st != SIM_PAUSED)
        return sim_reply_error(c, 409, "DOCKER::SANDBOX_NOT_PAUSED",
                               "Sandbox is not in a paused state.");
    if (f.resume_fail)
        return sim_reply_error(c, 500, "DOCKER::SANDBOX_RESUME_FAILED",
                               "Failed to resume sandbox container: injected failure "
                               "(opensandbox-sim)");
    sb->transition_ms = now;
    if (f.resume_delay_ms > 0) {
        sb->state = SIM_RESUMING;
        sb->transition_due_ms = now + f.resume_delay_ms;
        snprintf(sb->reason, sizeof sb->reason, "CONTAINER_RESUMING");
    } else {
        sim_signal_all_locked(sb, SIGCONT);
        sb->state = SIM_RUNNING;
        snprintf(sb->reason, sizeof sb->reason, "CONTAINER_RUNNING");
    }
    snprintf(sb->message, sizeof sb->message, "%s",
             sb->state == SIM_RUNNING ? "Sandbox container is running." : "");
    return sim_reply_empty(c, 202);
}

/* True while the sandbox's processes are frozen (execd does not answer). */
static bool sim_frozen_state(enum sim_state st)
{
    return st == SIM_PAUSING || st == SIM_PAUSED || st == SIM_RESUMING;
}

/* Hold an execd/egress/proxy request while the sandbox is paused, like a frozen execd: returns
 * true once it is no longer paused (the caller then handles the request as usual), false after
 * 180 s, at shutdown, or at once with the paused_execd_refuse switch (caller answers 502). */
bool sim_wait_unpaused(const char *id)
{
    int64_t until = sim_now_ms() + SIM_PAUSED_EXECD_HOLD_MS;
    for (;;) {
        pthread_mutex_lock(&g_sim.mu);
        struct sim_sandbox *sb = sim_find_locked(id);
        bool frozen = sb && sim_frozen_state(sim_effective_state(sb, sim_now_ms()));
        pthread_mutex_unlock(&g_sim.mu);
        if (!frozen)
            return true;
        struct sim_faults f;
        sim_faults_get(&f);
        if (f.paused_execd_refuse || g_sim.shutting_down || sim_now_ms() >= until)
            return false;
        sim_sleep_ms(50);
    }
}
