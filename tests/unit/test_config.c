/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for core/config*.c: core sections, raw sections, plugin views, dump. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"

#define SECRET_TEXT "Zq9-very-distinctive-s3cret"

/* Temporary config file written by a test. */
struct tmpcfg {
    char path[64];
};

/* Write yaml to a fresh temporary file. */
static void tmp_write(struct tmpcfg *t, const char *yaml)
{
    snprintf(t->path, sizeof t->path, "/tmp/rk_test_config_XXXXXX");
    int fd = mkstemp(t->path);
    assert_true(fd >= 0);
    size_t len = strlen(yaml);
    assert_int_equal(write(fd, yaml, len), (ssize_t)len);
    close(fd);
}

/* Load yaml through a temporary file into cfg, collecting problems in p. */
static struct rk_config *load_str(struct tmpcfg *t, const char *yaml, struct rk_problems *p)
{
    tmp_write(t, yaml);
    return rk_config_load(t->path, p);
}

/* Print the problems (helps when an assertion fails). */
static void print_problems(const struct rk_problems *p)
{
    for (size_t i = 0; i < p->n; i++)
        fprintf(stderr, "  problem: %s\n", p->lines[i]);
}

/* Assert that p holds exactly the line "<path><rest>". */
static void assert_problem(const struct rk_problems *p, const char *path, const char *rest)
{
    char want[512];
    snprintf(want, sizeof want, "%s%s", path, rest);
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->lines[i], want))
            return;
    fprintf(stderr, "missing problem: %s\n", want);
    print_problems(p);
    fail();
}

/* Assert that no problem line contains needle. */
static void assert_no_problem_contains(const struct rk_problems *p, const char *needle)
{
    for (size_t i = 0; i < p->n; i++)
        assert_null(strstr(p->lines[i], needle));
}

/* Assert there are no problems at all. */
static void assert_no_problems(const struct rk_problems *p)
{
    if (p->n)
        print_problems(p);
    assert_int_equal(p->n, 0);
}

/* Defaults from rk_config_defaults and from a minimal file. */
static void test_defaults(void **state)
{
    (void)state;
    struct rk_config *c = rk_config_defaults();
    assert_string_equal(c->path, "");
    assert_string_equal(c->server.host, "0.0.0.0");
    assert_int_equal(c->server.port, 8080);
    assert_int_equal(c->server.max_connections, 4096);
    assert_int_equal(c->server.per_ip_connections, -1);
    assert_int_equal(c->server.connection_timeout_s, 60);
    assert_int_equal(c->server.max_body_bytes, 64 * 1024 * 1024);
    assert_int_equal(c->server.max_header_bytes, 16384);
    assert_true(c->server.max_upload_bytes == 1024LL * 1024 * 1024);
    assert_true(c->server.max_buffered_bytes == 512LL * 1024 * 1024);
    assert_true(c->server.max_spool_bytes == 1024LL * 1024 * 1024);
    assert_int_equal(c->server.header_timeout_s, 15);
    assert_int_equal(c->server.min_body_rate, 1024);
    assert_int_equal(c->server.reserved_connections, 4);
    assert_int_equal(c->server.max_output_bytes, 16 * 1024 * 1024);
    assert_int_equal(c->server.max_read_bytes, 64 * 1024 * 1024);
    assert_int_equal(c->server.drain_timeout_s, 30);
    assert_int_equal(c->server.thread_stack_kib, 256);
    assert_string_equal(c->runtime.operator_type, "");
    assert_true(c->runtime.plugin_dir[0] == '/');
    assert_int_equal(c->runtime.stop_as_delete, 0);
    assert_int_equal(c->runtime.default_auto_clear_minutes, 30);
    assert_true(c->runtime.max_cpus == 16.0);
    assert_string_equal(c->runtime.max_memory, "64g");
    assert_string_equal(c->runtime.max_disk, "256g");
    assert_int_equal(c->runtime.sweep_interval_s, 30);
    assert_int_equal(c->runtime.session_reservation_ttl_s, 120);
    assert_int_equal(c->runtime.start_wait_s, 85);
    assert_string_equal(c->redis.host, "");
    assert_int_equal(c->redis.port, 6379);
    assert_string_equal(c->redis.password, "");
    assert_int_equal(c->redis.db, 0);
    assert_int_equal(c->redis.connect_timeout_ms, 1000);
    assert_int_equal(c->redis.timeout_ms, 2000);
    assert_int_equal(c->redis.pool_size, 64);
    assert_string_equal(c->redis.key_prefix, "rock:");
    assert_int_equal(c->scheduler.enabled, 0);
    assert_int_equal(c->proxy.timeout_s, 120);
    assert_int_equal(c->proxy.connect_timeout_s, 5);
    assert_string_equal(c->log.level, "info");
    assert_int_equal(c->n_sections, 0);
    rk_config_free(c);

    struct tmpcfg t;
    struct rk_problems p = {0};
    c = load_str(&t, "runtime:\n  operator_type: test_op\n", &p);
    assert_non_null(c);
    assert_no_problems(&p);
    assert_string_equal(c->path, t.path);
    assert_string_equal(c->runtime.operator_type, "test_op");
    assert_int_equal(c->server.port, 8080);
    assert_string_equal(c->redis.key_prefix, "rock:");
    rk_config_free(c);
    unlink(t.path);
}

/* An empty file is all defaults but lacks runtime.operator_type. */
static void test_empty_file(void **state)
{
    (void)state;
    struct tmpcfg t;
    struct rk_problems p = {0};
    struct rk_config *c = load_str(&t, "# only a comment\n", &p);
    assert_non_null(c);
    assert_int_equal(p.n, 1);
    assert_problem(&p, t.path, ": runtime.operator_type: required key is missing");
    assert_int_equal(c->server.port, 8080);
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);

    c = load_str(&t, "runtime:\n  plugin_dir: /x\n", &p);
    assert_non_null(c);
    assert_problem(&p, t.path, ":1: runtime.operator_type: required key is missing");
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);
}

/* Every core key is parsed into its field. */
static void test_all_core_keys(void **state)
{
    (void)state;
    const char *yaml = "server:\n"
                       "  host: 127.0.0.1\n"
                       "  port: 0\n"
                       "  max_connections: 100\n"
                       "  per_ip_connections: 7\n"
                       "  connection_timeout: 15\n"
                       "  max_body_bytes: 1048576\n"
                       "  max_header_bytes: 4096\n"
                       "  max_upload_bytes: 10737418240\n"
                       "  max_output_bytes: 2048\n"
                       "  max_read_bytes: 4096\n"
                       "  drain_timeout: 0\n"
                       "  thread_stack_kib: 512\n"
                       "runtime:\n"
                       "  operator_type: opensandbox\n"
                       "  plugin_dir: /opt/plugins\n"
                       "  stop_as_delete: yes\n"
                       "  default_auto_clear_minutes: 45\n"
                       "  max_cpus: 2.5\n"
                       "  max_memory: 8Gi\n"
                       "  max_disk: \"100g\"\n"
                       "  sweep_interval: 0\n"
                       "  session_reservation_ttl: 60\n"
                       "  start_wait: 10\n"
                       "redis:\n"
                       "  host: redis.local\n"
                       "  port: 6380\n"
                       "  password: '" SECRET_TEXT "'\n"
                       "  db: 3\n"
                       "  connect_timeout_ms: 250\n"
                       "  timeout_ms: 500\n"
                       "  pool_size: 4\n"
                       "  key_prefix: \"x:\"\n"
                       "scheduler:\n"
                       "  enabled: On\n"
                       "  worker_cache_ttl: 3600\n"
                       "  tasks:\n"
                       "    - task_class: a.b.C\n"
                       "      enabled: true\n"
                       "proxy:\n"
                       "  timeout: 30\n"
                       "  connect_timeout: 2\n"
                       "log:\n"
                       "  level: debug\n";
    struct tmpcfg t;
    struct rk_problems p = {0};
    struct rk_config *c = load_str(&t, yaml, &p);
    assert_non_null(c);
    assert_no_problems(&p);
    assert_string_equal(c->server.host, "127.0.0.1");
    assert_int_equal(c->server.port, 0);
    assert_int_equal(c->server.max_connections, 100);
    assert_int_equal(c->server.per_ip_connections, 7);
    assert_int_equal(c->server.connection_timeout_s, 15);
    assert_int_equal(c->server.max_body_bytes, 1048576);
    assert_int_equal(c->server.max_header_bytes, 4096);
    assert_true(c->server.max_upload_bytes == 10737418240LL);
    assert_int_equal(c->server.max_output_bytes, 2048);
    assert_int_equal(c->server.max_read_bytes, 4096);
    assert_int_equal(c->server.drain_timeout_s, 0);
    assert_int_equal(c->server.thread_stack_kib, 512);
    assert_string_equal(c->runtime.operator_type, "opensandbox");
    assert_string_equal(c->runtime.plugin_dir, "/opt/plugins");
    assert_int_equal(c->runtime.stop_as_delete, 1);
    assert_int_equal(c->runtime.default_auto_clear_minutes, 45);
    assert_true(c->runtime.max_cpus == 2.5);
    assert_string_equal(c->runtime.max_memory, "8Gi");
    assert_string_equal(c->runtime.max_disk, "100g");
    assert_int_equal(c->runtime.sweep_interval_s, 0);
    assert_int_equal(c->runtime.session_reservation_ttl_s, 60);
    assert_int_equal(c->runtime.start_wait_s, 10);
    assert_string_equal(c->redis.host, "redis.local");
    assert_int_equal(c->redis.port, 6380);
    assert_string_equal(c->redis.password, SECRET_TEXT);
    assert_int_equal(c->redis.db, 3);
    assert_int_equal(c->redis.connect_timeout_ms, 250);
    assert_int_equal(c->redis.timeout_ms, 500);
    assert_int_equal(c->redis.pool_size, 4);
    assert_string_equal(c->redis.key_prefix, "x:");
    assert_int_equal(c->scheduler.enabled, 1);
    assert_int_equal(c->proxy.timeout_s, 30);
    assert_int_equal(c->proxy.connect_timeout_s, 2);
    assert_string_equal(c->log.level, "debug");
    assert_int_equal(c->n_sections, 0);
    rk_config_free(c);
    unlink(t.path);
}

/* Unknown core key: exact line; null values keep defaults; booleans. */
static void test_unknown_key_and_nulls(void **state)
{
    (void)state;
    const char *yaml = "runtime:\n"
                       "  operator_type: x\n"
                       "  stop_as_delete: OFF\n"
                       "server:\n"
                       "  port: ~\n"
                       "  host:\n"
                       "\n"
                       "  bogus: 2\n"
                       "log:\n"
                       "  level: null\n";
    struct tmpcfg t;
    struct rk_problems p = {0};
    struct rk_config *c = load_str(&t, yaml, &p);
    assert_non_null(c);
    assert_int_equal(p.n, 1);
    assert_problem(&p, t.path, ":8: server.bogus: unknown key");
    assert_int_equal(c->server.port, 8080);
    assert_string_equal(c->server.host, "0.0.0.0");
    assert_string_equal(c->log.level, "info");
    assert_int_equal(c->runtime.stop_as_delete, 0);
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);
}

/* Wrong types and bad values of core keys. */
static void test_wrong_types_and_ranges(void **state)
{
    (void)state;
    const char *yaml = "runtime:\n"                         /* 1 */
                       "  operator_type: Open-Sandbox\n"    /* 2 */
                       "  max_cpus: 0\n"                    /* 3 */
                       "  max_memory: lots\n"               /* 4 */
                       "server:\n"                          /* 5 */
                       "  port: abc\n"                      /* 6 */
                       "  max_connections: 1.5\n"           /* 7 */
                       "  per_ip_connections: \"8\"\n"      /* 8 */
                       "  connection_timeout: 0\n"          /* 9 */
                       "  max_body_bytes: -1\n"             /* 10 */
                       "  host: [a, b]\n"                   /* 11 */
                       "redis:\n"                           /* 12 */
                       "  port: 0\n"                        /* 13 */
                       "  password: {a: " SECRET_TEXT "}\n" /* 14 */
                       "scheduler:\n"                       /* 15 */
                       "  enabled: maybe\n"                 /* 16 */
                       "proxy: 5\n"                         /* 17 */
                       "log:\n"                             /* 18 */
                       "  level: verbose\n"                 /* 19 */
                       "  level: info\n";                   /* 20 */
    struct tmpcfg t;
    struct rk_problems p = {0};
    struct rk_config *c = load_str(&t, yaml, &p);
    assert_non_null(c);
    assert_problem(&p, t.path,
                   ":2: runtime.operator_type: must contain only a-z, 0-9 and _, got "
                   "\"Open-Sandbox\"");
    assert_problem(&p, t.path, ":3: runtime.max_cpus: must be positive");
    assert_problem(&p, t.path,
                   ":4: runtime.max_memory: expected a size such as \"64g\", got \"lots\"");
    assert_problem(&p, t.path, ":6: server.port: expected an integer, got \"abc\"");
    assert_problem(&p, t.path, ":7: server.max_connections: expected an integer, got \"1.5\"");
    assert_problem(&p, t.path,
                   ":8: server.per_ip_connections: expected an integer, got the quoted string "
                   "\"8\"");
    assert_problem(&p, t.path,
                   ":9: server.connection_timeout: must be at least 1 (0 disables the idle "
                   "timeout, which is unsafe)");
    assert_problem(&p, t.path, ":10: server.max_body_bytes: must not be negative");
    assert_problem(&p, t.path, ":11: server.host: expected a string, got a sequence");
    assert_problem(&p, t.path, ":13: redis.port: must be between 1 and 65535");
    assert_problem(&p, t.path, ":14: redis.password: expected a string, got a mapping");
    assert_problem(&p, t.path, ":16: scheduler.enabled: expected a boolean, got \"maybe\"");
    assert_problem(&p, t.path, ":17: proxy: expected a mapping, got a scalar");
    assert_problem(&p, t.path, ":19: log.level: must be one of: error, warning, info, debug");
    assert_problem(&p, t.path, ":20: log.level: duplicate key");
    assert_int_equal(p.n, 15);
    assert_no_problem_contains(&p, SECRET_TEXT);
    assert_int_equal(c->server.port, 8080);
    assert_int_equal(c->server.connection_timeout_s, 60);
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);
}

/* Port limits and a null section. */
static void test_ports_and_null_section(void **state)
{
    (void)state;
    const char *yaml = "runtime:\n  operator_type: x\n"
                       "server:\n  port: 70000\n"
                       "redis:\n  port: 65535\n"
                       "scheduler:\n"
                       "proxy:\n  timeout: 99999999999\n"
                       "server:\n  port: 1\n"
                       "test:\n  a: \"x\\ny\"\n  a: 2\n";
    struct tmpcfg t;
    struct rk_problems p = {0};
    struct rk_config *c = load_str(&t, yaml, &p);
    assert_non_null(c);
    assert_problem(&p, t.path, ":4: server.port: must be between 0 and 65535");
    assert_problem(&p, t.path, ":7: scheduler: expected a mapping, got null");
    assert_problem(&p, t.path, ":9: proxy.timeout: must be at most 2147483647");
    assert_problem(&p, t.path, ":10: server: duplicate section");
    assert_problem(&p, t.path, ":14: test.a: duplicate key");
    assert_int_equal(p.n, 5);
    assert_int_equal(c->redis.port, 65535);
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);
}

/* Syntax errors and unreadable files return NULL with one problem. */
static void test_syntax_and_io_errors(void **state)
{
    (void)state;
    struct tmpcfg t;
    struct rk_problems p = {0};
    struct rk_config *c = load_str(&t, "runtime:\n  operator_type: x\nserver: [1, 2\n", &p);
    assert_null(c);
    assert_int_equal(p.n, 1);
    char want[128];
    snprintf(want, sizeof want, "%s:", t.path);
    assert_true(!strncmp(p.lines[0], want, strlen(want)));
    assert_non_null(strstr(p.lines[0], ": YAML syntax error: "));
    rk_problems_free(&p);
    unlink(t.path);

    c = rk_config_load("/nonexistent/rock-admin.yml", &p);
    assert_null(c);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.lines[0],
                        "/nonexistent/rock-admin.yml: cannot open: No such file or directory");
    rk_problems_free(&p);

    c = rk_config_load("/tmp", &p);
    assert_null(c);
    assert_string_equal(p.lines[0], "/tmp: cannot open: Is a directory");
    rk_problems_free(&p);

    c = load_str(&t, "runtime:\n  operator_type: x\n---\nserver: {\n", &p);
    assert_null(c);
    assert_int_equal(p.n, 1);
    assert_non_null(strstr(p.lines[0], ": YAML syntax error: "));
    rk_problems_free(&p);
    unlink(t.path);

    c = load_str(&t, "runtime:\n  operator_type: x\n---\nserver: {}\n", &p);
    assert_non_null(c);
    assert_int_equal(p.n, 1);
    assert_problem(&p, t.path, ":4: only one YAML document is supported");
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);

    c = load_str(&t, "- a\n- b\n", &p);
    assert_non_null(c);
    assert_problem(&p, t.path,
                   ":1: expected a mapping of sections at the top level, got a sequence");
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);
}

/* Unknown top-level sections are kept raw with text, quoting and lines. */
static void test_raw_sections(void **state)
{
    (void)state;
    const char *yaml = "runtime:\n"
                       "  operator_type: opensandbox\n"
                       "opensandbox:\n"
                       "  endpoint: localhost:8080\n"
                       "  protocol: 'http'\n"
                       "  api_key:\n"
                       "  extra: {a: 1}\n"
                       "  default_timeout: 600\n"
                       "_base: other.yml\n"
                       "nacos:\n"
                       "  endpoint: x\n";
    struct tmpcfg t;
    struct rk_problems p = {0};
    struct rk_config *c = load_str(&t, yaml, &p);
    assert_non_null(c);
    assert_no_problems(&p);
    assert_int_equal(c->n_sections, 2);
    const struct rk_cfg_raw_section *s = &c->sections[0];
    assert_string_equal(s->name, "opensandbox");
    assert_int_equal(s->line, 3);
    assert_int_equal(s->n, 5);
    assert_string_equal(s->values[0].key, "endpoint");
    assert_string_equal(s->values[0].value, "localhost:8080");
    assert_int_equal(s->values[0].is_scalar, 1);
    assert_int_equal(s->values[0].is_quoted, 0);
    assert_int_equal(s->values[0].line, 4);
    assert_string_equal(s->values[1].value, "http");
    assert_int_equal(s->values[1].is_quoted, 1);
    assert_null(s->values[2].value);
    assert_int_equal(s->values[2].is_scalar, 1);
    assert_null(s->values[3].value);
    assert_int_equal(s->values[3].is_scalar, 0);
    assert_int_equal(s->values[3].line, 7);
    assert_string_equal(c->sections[1].name, "nacos");
    rk_config_free(c);
    unlink(t.path);

    c = load_str(&t, "runtime:\n  operator_type: opensandbox\nopensandbox: 3\n", &p);
    assert_non_null(c);
    assert_problem(&p, t.path, ":3: opensandbox: expected a mapping, got a scalar");
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);
}

static const char *const protocols[] = {"http", "https", NULL};

/* A schema exercising every type and flag. */
static const struct rk_cfg_key schema[] = {
    {"endpoint", RK_CFG_STR, RK_CFGF_REQUIRED, NULL, NULL, NULL, "server"},
    {"protocol", RK_CFG_ENUM, 0, "https", protocols, NULL, "scheme"},
    {"default_timeout", RK_CFG_INT, RK_CFGF_POSITIVE, "600", NULL, NULL, "seconds"},
    {"use_server_proxy", RK_CFG_BOOL, 0, "false", NULL, NULL, "proxy"},
    {"api_key", RK_CFG_STR, RK_CFGF_SECRET | RK_CFGF_NULLABLE, NULL, NULL, "RK_TEST_API_KEY",
     "key"},
    {"image_registry_prefix", RK_CFG_STR, RK_CFGF_NULLABLE, "docker.io", NULL, NULL, "prefix"},
    {"ratio", RK_CFG_DOUBLE, 0, "1.5", NULL, NULL, "ratio"},
    {"pin", RK_CFG_INT, RK_CFGF_SECRET, NULL, NULL, NULL, "secret number"},
    {NULL, 0, 0, NULL, NULL, NULL, NULL},
};

/* A valid plugin section: typed values, defaults, env fallback, nullable. */
static void test_plugin_view_ok(void **state)
{
    (void)state;
    const char *yaml = "runtime:\n"
                       "  operator_type: test\n"
                       "test:\n"
                       "  endpoint: 10.0.0.1:8080\n"
                       "  protocol: http\n"
                       "  use_server_proxy: Yes\n"
                       "  api_key: \"\"\n"
                       "  image_registry_prefix: ~\n"
                       "  ratio: 2\n";
    setenv("RK_TEST_API_KEY", SECRET_TEXT, 1);
    struct tmpcfg t;
    struct rk_problems p = {0};
    struct rk_config *c = load_str(&t, yaml, &p);
    assert_non_null(c);
    struct rk_cfg *v = rk_config_plugin_view(c, "test", schema, &p);
    assert_no_problems(&p);
    assert_non_null(v);
    assert_string_equal(rk_cfg_get_str(v, "endpoint"), "10.0.0.1:8080");
    assert_string_equal(rk_cfg_get_str(v, "protocol"), "http");
    assert_int_equal(rk_cfg_get_int(v, "default_timeout"), 600);
    assert_int_equal(rk_cfg_get_bool(v, "use_server_proxy"), 1);
    assert_string_equal(rk_cfg_get_str(v, "api_key"), SECRET_TEXT);
    assert_null(rk_cfg_get_str(v, "image_registry_prefix"));
    assert_true(rk_cfg_get_double(v, "ratio") == 2.0);
    assert_int_equal(rk_cfg_get_int(v, "pin"), 0);
    /* Keys outside the schema (plugin bugs) read as unset. */
    assert_null(rk_cfg_get_str(v, "nope"));
    assert_null(rk_cfg_get_str(v, "nope"));
    assert_int_equal(rk_cfg_get_int(v, "nope"), 0);
    assert_int_equal(rk_cfg_get_bool(v, "nope"), 0);
    assert_true(rk_cfg_get_double(v, "nope") == 0.0);
    assert_int_equal(rk_cfg_get_int(v, "endpoint"), 0);

    rk_cfg_problem(v, "endpoint", "cannot reach %s", "it");
    rk_cfg_problem(v, "default_timeout", "too large");
    rk_cfg_problem(v, NULL, "whole section");
    assert_problem(&p, t.path, ":4: test.endpoint: cannot reach it");
    assert_problem(&p, t.path, ":3: test.default_timeout: too large");
    assert_problem(&p, t.path, ":3: test: whole section");
    assert_no_problem_contains(&p, SECRET_TEXT);
    rk_cfg_free(v);
    rk_problems_free(&p);
    rk_config_free(c);
    unlink(t.path);
    unsetenv("RK_TEST_API_KEY");

    c = load_str(&t, "runtime:\n  operator_type: test\ntest:\n  endpoint: e\n", &p);
    assert_non_null(c);
    v = rk_config_plugin_view(c, "test", schema, &p);
    assert_non_null(v);
    assert_null(rk_cfg_get_str(v, "api_key"));
    assert_string_equal(rk_cfg_get_str(v, "protocol"), "https");
    assert_string_equal(rk_cfg_get_str(v, "image_registry_prefix"), "docker.io");
    assert_int_equal(rk_cfg_get_bool(v, "use_server_proxy"), 0);
    assert_true(rk_cfg_get_double(v, "ratio") == 1.5);
    rk_cfg_free(v);
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);
}

/* Every kind of plugin-section problem, with its line; secrets never shown. */
static void test_plugin_view_problems(void **state)
{
    (void)state;
    const char *yaml = "runtime:\n"                      /* 1 */
                       "  operator_type: test\n"         /* 2 */
                       "test:\n"                         /* 3 */
                       "  protocol: ftp\n"               /* 4 */
                       "  default_timeout: 0\n"          /* 5 */
                       "  use_server_proxy: \"true\"\n"  /* 6 */
                       "  ratio: fast\n"                 /* 7 */
                       "  pin: " SECRET_TEXT "\n"        /* 8 */
                       "  bogus: 1\n"                    /* 9 */
                       "  api_key: [" SECRET_TEXT "]\n"; /* 10 */
    struct tmpcfg t;
    struct rk_problems p = {0};
    struct rk_config *c = load_str(&t, yaml, &p);
    assert_non_null(c);
    assert_no_problems(&p);
    struct rk_cfg *v = rk_config_plugin_view(c, "test", schema, &p);
    assert_null(v);
    assert_problem(&p, t.path, ":3: test.endpoint: required key is missing");
    assert_problem(&p, t.path, ":4: test.protocol: must be one of: http, https");
    assert_problem(&p, t.path, ":5: test.default_timeout: must be positive");
    assert_problem(&p, t.path,
                   ":6: test.use_server_proxy: expected a boolean, got the quoted string "
                   "\"true\"");
    assert_problem(&p, t.path, ":7: test.ratio: expected a number, got \"fast\"");
    assert_problem(&p, t.path, ":8: test.pin: expected an integer, got a string");
    assert_problem(&p, t.path, ":9: test.bogus: unknown key");
    assert_problem(&p, t.path, ":10: test.api_key: expected a string, got a mapping or a sequence");
    assert_int_equal(p.n, 8);
    assert_no_problem_contains(&p, SECRET_TEXT);
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);

    /* A missing section validates as empty: only the required key is reported. */
    c = load_str(&t, "runtime:\n  operator_type: test\n", &p);
    assert_non_null(c);
    v = rk_config_plugin_view(c, "test", schema, &p);
    assert_null(v);
    assert_int_equal(p.n, 1);
    assert_problem(&p, t.path, ": test.endpoint: required key is missing");
    rk_problems_free(&p);

    /* The environment can satisfy a required key; empty and null cannot. */
    static const struct rk_cfg_key env_schema[] = {
        {"token", RK_CFG_STR, RK_CFGF_REQUIRED | RK_CFGF_SECRET, NULL, NULL, "RK_TEST_TOKEN", NULL},
        {"count", RK_CFG_INT, 0, NULL, NULL, "RK_TEST_COUNT", NULL},
        {NULL, 0, 0, NULL, NULL, NULL, NULL},
    };
    setenv("RK_TEST_TOKEN", SECRET_TEXT, 1);
    setenv("RK_TEST_COUNT", "12", 1);
    v = rk_config_plugin_view(c, "test", env_schema, &p);
    assert_non_null(v);
    assert_string_equal(rk_cfg_get_str(v, "token"), SECRET_TEXT);
    assert_int_equal(rk_cfg_get_int(v, "count"), 12);
    rk_cfg_free(v);
    setenv("RK_TEST_COUNT", "twelve", 1);
    unsetenv("RK_TEST_TOKEN");
    v = rk_config_plugin_view(c, "test", env_schema, &p);
    assert_null(v);
    assert_problem(&p, t.path, ": test.token: required key is missing");
    assert_problem(&p, t.path,
                   ": test.count: environment variable RK_TEST_COUNT: expected an integer, got "
                   "\"twelve\"");
    unsetenv("RK_TEST_COUNT");
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);

    c = load_str(&t, "runtime:\n  operator_type: test\ntest:\n  endpoint: ''\n", &p);
    assert_non_null(c);
    v = rk_config_plugin_view(c, "test", schema, &p);
    assert_null(v);
    assert_int_equal(p.n, 1);
    assert_problem(&p, t.path, ":4: test.endpoint: required key is missing");
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);
}

/* Collects dump lines into one buffer. */
struct dumpbuf {
    char text[8192];
    size_t len;
};

/* rk_config_dump callback appending a line to a struct dumpbuf. */
static void collect(const char *line, void *ctx)
{
    struct dumpbuf *d = ctx;
    int n = snprintf(d->text + d->len, sizeof d->text - d->len, "%s\n", line);
    assert_true(n > 0 && (size_t)n < sizeof d->text - d->len);
    d->len += (size_t)n;
}

/* The dump shows every setting and redacts secrets. */
static void test_dump(void **state)
{
    (void)state;
    const char *yaml = "runtime:\n"
                       "  operator_type: test\n"
                       "redis:\n"
                       "  password: " SECRET_TEXT "\n"
                       "test:\n"
                       "  endpoint: e:1\n"
                       "  api_key: " SECRET_TEXT "\n"
                       "  pin: 1234\n";
    struct tmpcfg t;
    struct rk_problems p = {0};
    struct rk_config *c = load_str(&t, yaml, &p);
    assert_non_null(c);
    struct rk_cfg *v = rk_config_plugin_view(c, "test", schema, &p);
    assert_non_null(v);
    assert_no_problems(&p);
    struct dumpbuf d = {.len = 0};
    rk_config_dump(c, v, schema, collect, &d);
    assert_null(strstr(d.text, SECRET_TEXT));
    assert_null(strstr(d.text, "1234"));
    assert_non_null(strstr(d.text, "server.port: 8080\n"));
    assert_non_null(strstr(d.text, "server.host: 0.0.0.0\n"));
    assert_non_null(strstr(d.text, "server.max_body_bytes: 67108864\n"));
    assert_non_null(strstr(d.text, "runtime.operator_type: test\n"));
    assert_non_null(strstr(d.text, "runtime.max_cpus: 16\n"));
    assert_non_null(strstr(d.text, "redis.host: \"\"\n"));
    assert_non_null(strstr(d.text, "redis.password: ********\n"));
    assert_non_null(strstr(d.text, "scheduler.enabled: false\n"));
    assert_non_null(strstr(d.text, "log.level: info\n"));
    assert_non_null(strstr(d.text, "test.endpoint: e:1\n"));
    assert_non_null(strstr(d.text, "test.protocol: https\n"));
    assert_non_null(strstr(d.text, "test.default_timeout: 600\n"));
    assert_non_null(strstr(d.text, "test.use_server_proxy: false\n"));
    assert_non_null(strstr(d.text, "test.api_key: ********\n"));
    assert_non_null(strstr(d.text, "test.pin: ********\n"));
    assert_non_null(strstr(d.text, "test.ratio: 1.5\n"));
    rk_cfg_free(v);
    rk_config_free(c);
    unlink(t.path);

    c = rk_config_defaults();
    d.len = 0;
    d.text[0] = '\0';
    rk_config_dump(c, NULL, NULL, collect, &d);
    assert_non_null(strstr(d.text, "redis.password: \"\"\n"));
    rk_config_free(c);
}

/* Redis HA keys: sentinels as a sequence of host:port,
 * master_name required with them, bad addresses named, secrets hidden. */
static void test_redis_ha_keys(void **state)
{
    (void)state;
    struct tmpcfg t;
    struct rk_problems p = {0};
    struct rk_config *c = load_str(&t,
                                   "runtime:\n"
                                   "  operator_type: testop\n"
                                   "redis:\n"
                                   "  sentinels: [10.0.0.1:26379, \"[::1]:26380\"]\n"
                                   "  master_name: rock\n"
                                   "  username: rock-admin\n"
                                   "  password_file: /etc/rock-admin/redis.pw\n"
                                   "  sentinel_password: " SECRET_TEXT "\n"
                                   "  min_replicas_ack: 1\n"
                                   "  wait_timeout_ms: 500\n"
                                   "  deleted_retention: 3600\n",
                                   &p);
    assert_no_problems(&p);
    assert_string_equal(c->redis.sentinels[0], "10.0.0.1:26379");
    assert_string_equal(c->redis.sentinels[1], "[::1]:26380");
    assert_null(c->redis.sentinels[2]);
    assert_string_equal(c->redis.master_name, "rock");
    assert_string_equal(c->redis.username, "rock-admin");
    assert_int_equal(c->redis.min_replicas_ack, 1);
    assert_int_equal(c->redis.wait_timeout_ms, 500);
    assert_int_equal(c->redis.deleted_retention_s, 3600);
    rk_config_free(c);
    rk_problems_free(&p);
    unlink(t.path);

    struct rk_problems q = {0};
    c = load_str(&t,
                 "runtime:\n"                                /* 1 */
                 "  operator_type: testop\n"                 /* 2 */
                 "redis:\n"                                  /* 3 */
                 "  sentinels: [a:1, nohost, \"b:70000\"]\n" /* 4 */
                 "  min_replicas_ack: -1\n"                  /* 5 */
                 "  deleted_retention: x\n",                 /* 6 */
                 &q);
    assert_problem(&q, t.path, ":4: redis.sentinels: expected host:port, got \"nohost\"");
    assert_problem(&q, t.path, ":4: redis.sentinels: expected host:port, got \"b:70000\"");
    assert_problem(&q, t.path, ":4: redis.master_name: required when redis.sentinels is set");
    assert_problem(&q, t.path, ":5: redis.min_replicas_ack: must not be negative");
    assert_problem(&q, t.path, ":6: redis.deleted_retention: expected an integer, got \"x\"");
    assert_no_problem_contains(&q, "a:1\"");
    rk_config_free(c);
    rk_problems_free(&q);
    unlink(t.path);
}

/* Runs the config tests. */
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_empty_file),
        cmocka_unit_test(test_all_core_keys),
        cmocka_unit_test(test_unknown_key_and_nulls),
        cmocka_unit_test(test_wrong_types_and_ranges),
        cmocka_unit_test(test_ports_and_null_section),
        cmocka_unit_test(test_syntax_and_io_errors),
        cmocka_unit_test(test_raw_sections),
        cmocka_unit_test(test_plugin_view_ok),
        cmocka_unit_test(test_plugin_view_problems),
        cmocka_unit_test(test_dump),
        cmocka_unit_test(test_redis_ha_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
