# SPDX-License-Identifier: Apache-2.0
"""The command line: -t on the shipped config and on broken ones, --version,
plugin refusals, secret redaction, the scheduler warning."""
import os
import re
import subprocess

from harness import ADMIN_BIN, OS_PLUGIN_DIR, TEST_PLUGIN_DIR, run, test, tmpdir

SRCDIR = os.environ.get("ROCK_SRCDIR", ".")


def admin(args, env=None, config_text=None):
    e = dict(os.environ)
    e.pop("ROCK_CONFIG", None)
    e.update(env or {})
    if config_text is not None:
        path = os.path.join(tmpdir(), "c.yml")
        with open(path, "w") as f:
            f.write(config_text)
        args = ["-c", path] + args
    p = subprocess.run([ADMIN_BIN] + args, capture_output=True, text=True, env=e, timeout=30)
    return p.returncode, p.stdout, p.stderr


@test
def version_and_help():
    rc, out, _ = admin(["--version"])
    # The version comes from the header (one source of truth).
    hdr = open(os.path.join(os.environ["ROCK_SRCDIR"], "include/rock-admin/operator.h")).read()
    abi = "%s.%s" % (re.search(r"#define RK_OPERATOR_ABI_MAJOR (\d+)", hdr).group(1),
                     re.search(r"#define RK_OPERATOR_ABI_MINOR (\d+)", hdr).group(1))
    assert rc == 0 and "rock-admin" in out and "operator ABI %s)" % abi in out, (out, abi)
    rc, out, _ = admin(["-h"])
    assert rc == 0 and "-t" in out and "--config" in out
    rc, _, err = admin(["--bogus"])
    assert rc == 2


@test
def shipped_config_is_valid():
    rc, out, err = admin(["-t", "-c", os.path.join(SRCDIR, "conf", "rock-admin.yml")],
                         env={"ROCK_PLUGIN_DIR": OS_PLUGIN_DIR})
    assert rc == 0, (out, err)
    assert "is valid" in out and "operator opensandbox" in out, out


@test
def config_from_rock_config_env():
    rc, out, err = admin(["-t"], env={"ROCK_CONFIG": os.path.join(SRCDIR, "conf",
                                                                  "rock-admin.yml"),
                                      "ROCK_PLUGIN_DIR": OS_PLUGIN_DIR})
    assert rc == 0, err


@test
def unknown_key_refused_with_file_and_line():
    rc, out, err = admin(["-t"], config_text=(
        "runtime:\n  operator_type: testop\n  plugin_dir: %s\nserver:\n  port: 1\n  bogus: 2\n"
        % TEST_PLUGIN_DIR))
    lines = [l for l in err.splitlines() if l]
    assert rc == 1 and len(lines) == 1, err
    assert lines[0].endswith("c.yml:6: server.bogus: unknown key"), lines


@test
def unknown_plugin_key_and_type_errors():
    rc, out, err = admin(["-t"], config_text=(
        "runtime:\n  operator_type: testop\n  plugin_dir: %s\ntestop:\n  nope: 1\n"
        "  required_flag: maybe\n" % TEST_PLUGIN_DIR))
    assert rc == 1, err
    assert "c.yml:5: testop.nope: unknown key" in err, err
    assert "c.yml:6: testop.required_flag:" in err, err


@test
def unknown_operator_type_lists_plugins():
    rc, out, err = admin(["-t"], config_text=(
        "runtime:\n  operator_type: kubernetes\n  plugin_dir: %s\n" % TEST_PLUGIN_DIR))
    lines = [l for l in err.splitlines() if l]
    assert rc == 1 and len(lines) == 1, err
    assert "unknown operator type \"kubernetes\"" in lines[0] and "testop" in lines[0], lines


@test
def descriptor_limit_raised_and_connections_fitted():
    """-t raises the soft RLIMIT_NOFILE to the hard limit and says whether
    server.max_connections fits it (lowered when it does not)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(1024, hard)

    def run_t(max_conn):
        text = ("server:\n  max_connections: %d\nruntime:\n  operator_type: testop\n"
                "  plugin_dir: %s\n" % (max_conn, TEST_PLUGIN_DIR))
        path = os.path.join(tmpdir(), "fd.yml")
        with open(path, "w") as f:
            f.write(text)
        p = subprocess.run([ADMIN_BIN, "-t", "-c", path], capture_output=True, text=True,
                           timeout=30, preexec_fn=lambda: resource.setrlimit(
                               resource.RLIMIT_NOFILE, (low, hard)))
        assert p.returncode == 0, p.stderr
        line = [l for l in p.stdout.splitlines() if "file descriptors:" in l]
        assert len(line) == 1, p.stdout
        return line[0]
    hard_text = str(hard) if hard != resource.RLIM_INFINITY else "-1"
    line = run_t(16)
    assert "(was %d, hard %s)" % (low, hard_text) in line, line
    assert "server.max_connections 16 fits" in line, line
    if hard != resource.RLIM_INFINITY:
        line = run_t(hard * 4)
        assert "lowered to fit" in line, line
        assert "server.max_connections %d " % ((hard - 1024) // 2) in line, line


@test
def plugin_for_another_abi_major_refused():
    rc, out, err = admin(["-t"], config_text=(
        "runtime:\n  operator_type: abi_other_major\n  plugin_dir: %s\n" % TEST_PLUGIN_DIR))
    lines = [l for l in err.splitlines() if l]
    assert rc == 1 and len(lines) == 1, err
    assert "ABI major check failed" in lines[0] and "operator ABI 2." in lines[0], lines


@test
def secrets_never_printed():
    secret = "S3cr3t-value-xyz"
    rc, out, err = admin(["-t"], env={"TESTOP_TOKEN": secret}, config_text=(
        "runtime:\n  operator_type: testop\n  plugin_dir: %s\nredis:\n  password: %s\n"
        % (TEST_PLUGIN_DIR, secret + "2")))
    assert rc == 0, err
    assert secret not in out + err and (secret + "2") not in out + err
    assert "testop.token: ********" in out and "redis.password: ********" in out, out
    # A semantic problem reported by the plugin's init names the key, not the value.
    rc, out, err = admin(["-t"], config_text=(
        "runtime:\n  operator_type: testop\n  plugin_dir: %s\ntestop:\n  token: bad\n"
        % TEST_PLUGIN_DIR))
    assert rc == 1 and "testop.token" in err, err


@test
def scheduler_enabled_warns_once():
    rc, out, err = admin(["-t"], config_text=(
        "runtime:\n  operator_type: testop\n  plugin_dir: %s\nscheduler:\n  enabled: true\n"
        % TEST_PLUGIN_DIR))
    assert rc == 0, err
    warn = [l for l in err.splitlines() if "Scheduler is enabled but unsupported" in l]
    assert len(warn) == 1 and "operator_type=testop" in warn[0], err


if __name__ == "__main__":
    run()
