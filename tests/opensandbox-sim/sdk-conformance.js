// SDK conformance: drive opensandbox-sim with the official OpenSandbox JavaScript SDK and check
// everything the SDK returns. Started by sdk-conformance.test (which owns the simulator).
"use strict";

const assert = require("node:assert/strict");
const http = require("node:http");
const net = require("node:net");
const fs = require("node:fs");
const path = require("node:path");

const nm = process.env.ROCK_TEST_NODE_MODULES;
const sdk = require(require.resolve("@alibaba-group/opensandbox", { paths: [nm] }));
const { Sandbox, ConnectionConfig, SandboxManager } = sdk;

const HOSTPORT = process.env.SIM_HOSTPORT;
const ROOT = process.env.SIM_ROOT;
const API_KEY = process.env.SIM_API_KEY;
const EXECD_HEADER = process.env.SIM_EXECD_HEADER_NAME;
const EXECD_VALUE = process.env.SIM_EXECD_HEADER_VALUE;

let step = "start";
function log(msg) {
  step = msg;
  process.stdout.write(`# ${msg}\n`);
}

function conn(extra = {}) {
  return new ConnectionConfig({
    domain: HOSTPORT,
    protocol: "http",
    apiKey: API_KEY,
    requestTimeoutSeconds: 30,
    ...extra,
  });
}

function texts(msgs) {
  return msgs.map((m) => m.text);
}

async function expectReject(promise, status, code) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `expected a rejection with status ${status}`);
  assert.equal(err.statusCode, status, `status of ${err}`);
  if (code) assert.equal(err.error && err.error.code, code);
  return err;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function httpGet(url, timeoutMs) {
  return new Promise((resolve, reject) => {
    const req = http
      .get(url, (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode, body: Buffer.concat(chunks) }));
      })
      .on("error", reject);
    if (timeoutMs) req.setTimeout(timeoutMs, () => req.destroy(new Error("timed out")));
  });
}

async function waitFor(pred, ms) {
  const deadline = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms: ${pred}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function waitHttp(url, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      const r = await httpGet(url);
      if (r.status === 200) return r;
    } catch (e) {
      if (Date.now() > deadline) throw e;
    }
    if (Date.now() > deadline) throw new Error(`no 200 from ${url}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function main() {
  log("create (SDK resolves execd + egress endpoints and pings execd)");
  const sbx = await Sandbox.create({
    connectionConfig: conn(),
    image: "python:3.11",
    timeoutSeconds: 600,
    env: { GREETING: "hello world" },
    metadata: { suite: "conformance", run: String(process.pid) },
    readyTimeoutSeconds: 15,
  });
  assert.match(sbx.id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  const sdir = path.join(ROOT, sbx.id);

  log("getInfo");
  const info = await sbx.getInfo();
  assert.equal(info.id, sbx.id);
  assert.equal(info.status.state, "Running");
  assert.deepEqual(info.metadata, { suite: "conformance", run: String(process.pid) });
  assert.deepEqual(info.entrypoint, ["tail", "-f", "/dev/null"]);
  assert.ok(info.expiresAt instanceof Date);
  const ttl = info.expiresAt.getTime() - info.createdAt.getTime();
  assert.ok(Math.abs(ttl - 600000) < 2000, `ttl ${ttl}`);
  assert.equal(await sbx.isHealthy(), true);

  log("run: exit 0, stdout/stderr, sandbox env");
  let ex = await sbx.commands.run('echo out1; echo err1 >&2; echo "$GREETING"; echo "$HOME"');
  assert.equal(ex.exitCode, 0);
  assert.deepEqual(texts(ex.logs.stdout), ["out1", "hello world", sdir]);
  assert.deepEqual(texts(ex.logs.stderr), ["err1"]);
  assert.equal(ex.error, undefined);
  assert.ok(ex.complete, "execution_complete seen");
  assert.match(ex.id, /^[0-9a-f]{32}$/);

  log("run: non-zero exit code");
  ex = await sbx.commands.run("echo before; exit 7");
  assert.equal(ex.exitCode, 7);
  assert.equal(ex.error.name, "CommandExecError");
  assert.equal(ex.error.value, "7");
  assert.deepEqual(ex.error.traceback, ["exit status 7"]);
  assert.equal(ex.complete, undefined);
  assert.deepEqual(texts(ex.logs.stdout), ["before"]);

  log("run: command not found is 127");
  ex = await sbx.commands.run("definitely-not-a-command-xyz");
  assert.equal(ex.exitCode, 127);

  log("run: timeout kills the process group and reports -1");
  let t0 = Date.now();
  ex = await sbx.commands.run("echo started; sleep 30; echo never", { timeoutSeconds: 0.5 });
  const took = Date.now() - t0;
  assert.ok(took < 5000, `timeout took ${took} ms`);
  assert.equal(ex.exitCode, -1);
  assert.equal(ex.error.value, "-1");
  assert.deepEqual(ex.error.traceback, ["signal: killed"]);
  assert.deepEqual(texts(ex.logs.stdout), ["started"]);

  log("run: cwd + envs + blank line + streaming handlers");
  await sbx.files.createDirectories([{ path: path.join(sdir, "work"), mode: 755 }]);
  const seen = [];
  ex = await sbx.commands.run('pwd; echo; echo "$EXTRA"', {
    workingDirectory: path.join(sdir, "work"),
    envs: { EXTRA: "x<y&z" },
  }, { onStdout: (m) => seen.push(m.text) });
  assert.equal(ex.exitCode, 0);
  assert.deepEqual(texts(ex.logs.stdout), [path.join(sdir, "work"), "\n", "x<y&z"]);
  assert.deepEqual(seen, [path.join(sdir, "work"), "\n", "x<y&z"]);

  log("run: bad working directory is rejected before the stream");
  await expectReject(sbx.commands.run("true", { workingDirectory: "/nonexistent/dir" }), 400,
    "INVALID_REQUEST_BODY");

  log("background command + status + logs");
  ex = await sbx.commands.run("echo bg-out; sleep 0.2; exit 3", { background: true });
  assert.match(ex.id, /^[0-9a-f]{32}$/);
  let st;
  for (let i = 0; i < 50; i++) {
    st = await sbx.commands.getCommandStatus(ex.id);
    if (!st.running) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(st.running, false);
  assert.equal(st.exitCode, 3);
  const logs = await sbx.commands.getBackgroundCommandLogs(ex.id);
  assert.equal(logs.content, "bg-out\n");
  assert.equal(logs.cursor, 7);

  log("interrupt a running command (DELETE /command?id=<init id>)");
  // The SDK gives the execution id only when the run returns; use runStream to get init first.
  const stream = sbx.commands.runStream("sleep 30");
  const it = stream[Symbol.asyncIterator]();
  const first = (await it.next()).value;
  assert.equal(first.type, "init");
  t0 = Date.now();
  await sbx.commands.interrupt(first.text);
  let last;
  for (;;) {
    const n = await it.next();
    if (n.done) break;
    last = n.value;
  }
  assert.equal(last.type, "error");
  assert.equal(last.error.evalue, "-1");
  assert.ok(Date.now() - t0 < 5000);

  log("session: exported vars and cwd persist, stderr merged, exit codes");
  const sid = await sbx.commands.createSession({ workingDirectory: path.join(sdir, "sess") });
  assert.match(sid, /^[0-9a-f-]{36}$/);
  ex = await sbx.commands.runInSession(sid, "export A=1; B=2; mkdir -p sub; cd sub");
  assert.equal(ex.exitCode, 0);
  ex = await sbx.commands.runInSession(sid, 'echo "A=$A B=$B"; pwd; echo to-stderr >&2; echo; echo end');
  assert.equal(ex.exitCode, 0);
  assert.deepEqual(texts(ex.logs.stdout), ["A=1 B=", path.join(sdir, "sess", "sub"), "to-stderr", "end"]);
  assert.deepEqual(ex.logs.stderr, []);
  assert.equal(ex.id, sid);
  ex = await sbx.commands.runInSession(sid, "false");
  assert.equal(ex.exitCode, 1);
  ex = await sbx.commands.runInSession(sid, "pwd", { workingDirectory: sdir });
  assert.deepEqual(texts(ex.logs.stdout), [sdir]);

  log("session: timeout gives the bare error object (SDK: no error, no completion)");
  t0 = Date.now();
  const events = [];
  ex = await sbx.commands.runInSession(sid, "echo tick; sleep 30", { timeoutSeconds: 0.5 },
    { onEvent: (e) => events.push(e) });
  assert.ok(Date.now() - t0 < 5000);
  assert.equal(ex.exitCode, null);
  assert.equal(ex.error, undefined);
  assert.equal(ex.complete, undefined);
  assert.deepEqual(texts(ex.logs.stdout), ["tick"]);
  const raw = [];
  for await (const ev of sbx.commands.runInSessionStream(sid, "sleep 30", { timeoutSeconds: 0.3 })) {
    raw.push(ev);
  }
  assert.equal(raw[0].type, "init");
  assert.deepEqual(raw[raw.length - 1], {
    code: "RUNTIME_ERROR",
    message: "error running in session. timeout after 300ms",
  });

  log("session: delete, then runs fail");
  await sbx.commands.deleteSession(sid);
  await expectReject(sbx.commands.runInSession(sid, "true"), 500, "RUNTIME_ERROR");
  await expectReject(sbx.commands.deleteSession(sid), 404, "CONTEXT_NOT_FOUND");

  log("files: write bytes, read back, info, range");
  const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
  const binPath = path.join(sdir, "data", "all.bin");
  await sbx.files.writeFiles([{ path: binPath, data: bytes, mode: 640 }]);
  const back = await sbx.files.readBytes(binPath);
  assert.deepEqual(Buffer.from(back), Buffer.from(bytes));
  const fi = await sbx.files.getFileInfo([binPath]);
  assert.equal(fi[binPath].type, "file");
  assert.equal(fi[binPath].size, 256);
  assert.equal(fi[binPath].mode, 640);
  assert.equal(fi[binPath].path, binPath);
  assert.ok(fi[binPath].modifiedAt instanceof Date);
  const part = await sbx.files.readBytes(binPath, { range: "bytes=10-19" });
  assert.deepEqual(Array.from(part), [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]);
  const tail = await sbx.files.readBytes(binPath, { range: "bytes=-3" });
  assert.deepEqual(Array.from(tail), [253, 254, 255]);

  log("files: text write, read via command, default mode");
  const txtPath = path.join(sdir, "hello.txt");
  await sbx.files.writeFiles([{ path: txtPath, data: "héllo\nwörld\n" }]);
  assert.equal(await sbx.files.readFile(txtPath), "héllo\nwörld\n");
  ex = await sbx.commands.run(`cat ${txtPath}; stat -c %a ${txtPath}`);
  // No mode in the metadata: not chmodded, created 0777 minus the umask (like execd).
  const umask = process.umask();
  assert.deepEqual(texts(ex.logs.stdout), ["héllo", "wörld", (0o777 & ~umask).toString(8)]);

  log("files: streaming upload (SDK builds the multipart body by hand)");
  async function* gen() {
    for (let i = 0; i < 64; i++) yield Buffer.alloc(4096, i);
  }
  const bigPath = path.join(sdir, "big.bin");
  await sbx.files.writeFiles([{ path: bigPath, data: gen(), mode: 600 }]);
  const big = await sbx.files.readBytes(bigPath);
  assert.equal(big.length, 64 * 4096);
  for (let i = 0; i < 64; i++) assert.equal(big[i * 4096 + 100], i);
  assert.equal((await sbx.files.getFileInfo([bigPath]))[bigPath].mode, 600);

  log("files: a file created by a command is downloadable byte for byte");
  ex = await sbx.commands.run(`printf '\\x00\\xff\\x80abc' > ${path.join(sdir, "raw.bin")}`);
  assert.equal(ex.exitCode, 0);
  assert.deepEqual(Array.from(await sbx.files.readBytes(path.join(sdir, "raw.bin"))),
    [0, 255, 128, 97, 98, 99]);

  log("files: not found");
  await expectReject(sbx.files.readBytes(path.join(sdir, "missing")), 404);
  await expectReject(sbx.files.getFileInfo([path.join(sdir, "missing")]), 404, "FILE_NOT_FOUND");

  log("files: search, move, delete");
  const found = await sbx.files.search({ path: sdir, pattern: "*.bin" });
  assert.deepEqual(found.map((f) => path.basename(f.path)).sort(), ["all.bin", "big.bin", "raw.bin"]);
  await sbx.files.moveFiles([{ src: txtPath, dest: path.join(sdir, "moved.txt") }]);
  assert.equal(await sbx.files.readFile(path.join(sdir, "moved.txt")), "héllo\nwörld\n");
  await sbx.files.deleteFiles([path.join(sdir, "moved.txt")]);
  await expectReject(sbx.files.getFileInfo([path.join(sdir, "moved.txt")]), 404);

  log("endpoints: execd (with header), application port (host loopback)");
  const ep = await sbx.getEndpoint(44772);
  assert.equal(ep.endpoint, `${HOSTPORT}/sandboxes/${sbx.id}/execd/proxy/44772`);
  assert.deepEqual(ep.headers, { [EXECD_HEADER]: EXECD_VALUE });
  const appPort = await freePort();
  const appEp = await sbx.getEndpoint(appPort);
  assert.equal(appEp.endpoint, `127.0.0.1:${appPort}`);
  assert.equal(await sbx.getEndpointUrl(appPort), `http://127.0.0.1:${appPort}`);

  log("application port: a server started in the sandbox is reachable at its endpoint");
  await sbx.files.writeFiles([{ path: path.join(sdir, "www", "index.txt"), data: "served" }]);
  ex = await sbx.commands.run(
    `cd www && exec python3 -m http.server ${appPort} --bind 127.0.0.1 >/dev/null 2>&1`,
    { background: true });
  const served = await waitHttp(`http://${appEp.endpoint}/index.txt`, 10000);
  assert.equal(served.body.toString(), "served");

  log("server proxy: execd and application port through /sandboxes/<id>/proxy/<port>");
  const proxied = await Sandbox.connect({
    sandboxId: sbx.id,
    connectionConfig: conn({ useServerProxy: true }),
    readyTimeoutSeconds: 10,
  });
  const pep = await proxied.getEndpoint(44772);
  assert.equal(pep.endpoint, `${HOSTPORT}/sandboxes/${sbx.id}/proxy/44772`);
  assert.deepEqual(pep.headers, { [EXECD_HEADER]: EXECD_VALUE });
  ex = await proxied.commands.run("echo via-proxy");
  assert.equal(ex.exitCode, 0);
  assert.deepEqual(texts(ex.logs.stdout), ["via-proxy"]);
  assert.deepEqual(Buffer.from(await proxied.files.readBytes(binPath)), Buffer.from(bytes));
  const papp = await proxied.getEndpoint(appPort);
  assert.equal(papp.endpoint, `${HOSTPORT}/sandboxes/${sbx.id}/proxy/${appPort}`);
  const viaProxy = await httpGet(`http://${papp.endpoint}/index.txt`);
  assert.equal(viaProxy.status, 200);
  assert.equal(viaProxy.body.toString(), "served");
  await proxied.close();

  log("manager: list with metadata filter and paging, renew");
  const mgr = SandboxManager.create({ connectionConfig: conn() });
  const other = await Sandbox.create({
    connectionConfig: conn(),
    image: "busybox",
    metadata: { suite: "other" },
    skipHealthCheck: true,
  });
  let list = await mgr.listSandboxInfos({ metadata: { suite: "conformance" } });
  assert.deepEqual(list.items.map((s) => s.id), [sbx.id]);
  assert.equal(list.pagination.totalItems, 1);
  list = await mgr.listSandboxInfos({ pageSize: 1, page: 1 });
  assert.equal(list.items.length, 1);
  assert.equal(list.pagination.totalItems, 2);
  assert.equal(list.pagination.hasNextPage, true);
  list = await mgr.listSandboxInfos({ states: ["running"], metadata: { suite: "other" } });
  assert.ok(list.items.length <= 1);
  const renewed = await sbx.renew(1800);
  assert.ok(renewed.expiresAt instanceof Date);
  assert.ok(renewed.expiresAt.getTime() > info.expiresAt.getTime() + 1000 * 1000);
  assert.equal((await sbx.getInfo()).expiresAt.getTime(), renewed.expiresAt.getTime());

  log("pause / resume: processes stop, execd does not answer, everything carries on after");
  for (let i = 0; i < 50; i++) {
    if ((await other.getInfo()).status.state === "Running") break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const tick = path.join(ROOT, other.id, "tick");
  const bg = await other.commands.run("while :; do echo t >> tick; sleep 0.05; done",
    { background: true });
  const tickSize = () => (fs.existsSync(tick) ? fs.statSync(tick).size : 0);
  await waitFor(() => tickSize() > 0, 10000);
  await other.pause();
  assert.equal((await mgr.getSandboxInfo(other.id)).status.state, "Paused");
  await new Promise((r) => setTimeout(r, 200)); // a write already in flight may still land
  const frozenAt = tickSize();
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(tickSize(), frozenAt, "a paused sandbox's processes must not run");
  const oep = await other.getEndpoint(44772);
  await assert.rejects(httpGet(`http://${oep.endpoint}/ping`, 1000), "paused execd must not answer");
  await expectReject(other.pause(), 500, "DOCKER::SANDBOX_PAUSE_FAILED");
  const resumed = await other.resume({ readyTimeoutSeconds: 10 });
  assert.equal((await resumed.getInfo()).status.state, "Running");
  ex = await resumed.commands.run("echo resumed");
  assert.deepEqual(texts(ex.logs.stdout), ["resumed"]);
  await waitFor(() => tickSize() > frozenAt, 10000);
  assert.equal((await resumed.commands.getCommandStatus(bg.id)).running, true);
  await expectReject(mgr.resumeSandbox(other.id), 409, "DOCKER::SANDBOX_NOT_PAUSED");

  log("metrics");
  const metrics = await resumed.getMetrics();
  assert.ok(metrics.cpuCount >= 1 && metrics.memoryTotalMiB > 0, JSON.stringify(metrics));
  assert.ok(metrics.cpuUsedPercentage >= 0 && metrics.cpuUsedPercentage <= 100);
  assert.ok(metrics.memoryUsedMiB > 0 && metrics.memoryUsedMiB <= metrics.memoryTotalMiB);
  assert.ok(Math.abs(metrics.timestamp - Date.now()) < 60000);

  log("snapshots: create, poll until Ready, list, restore into a new sandbox, delete");
  await resumed.files.writeFiles([{ path: path.join(ROOT, other.id, "keep.txt"), data: "kept" }]);
  let snap = await mgr.createSnapshot(other.id, { name: "conformance" });
  assert.equal(snap.sandboxId, other.id);
  assert.equal(snap.name, "conformance");
  assert.equal(snap.status.state, "Creating");
  for (let i = 0; i < 100 && snap.status.state === "Creating"; i++) {
    await new Promise((r) => setTimeout(r, 100));
    snap = await mgr.getSnapshot(snap.id);
  }
  assert.equal(snap.status.state, "Ready");
  assert.ok(snap.createdAt instanceof Date);
  const snaps = await mgr.listSnapshots({ sandboxId: other.id });
  assert.deepEqual(snaps.items.map((x) => x.id), [snap.id]);
  const restored = await Sandbox.create({
    connectionConfig: conn(),
    snapshotId: snap.id,
    readyTimeoutSeconds: 10,
  });
  assert.equal((await restored.getInfo()).snapshotId, snap.id);
  assert.equal(await restored.files.readFile(path.join(ROOT, restored.id, "keep.txt")), "kept");
  await expectReject(mgr.deleteSnapshot(snap.id), 409, "SNAPSHOT::DELETE_CONFLICT");
  await restored.kill();
  await restored.close();
  await mgr.deleteSnapshot(snap.id);
  await expectReject(mgr.getSnapshot(snap.id), 404, "SNAPSHOT::NOT_FOUND");
  await resumed.pause();
  await expectReject(mgr.createSnapshot(other.id), 409, "SNAPSHOT::INVALID_SOURCE_STATE");
  await mgr.resumeSandbox(other.id);

  log("kill");
  await resumed.kill();
  await expectReject(mgr.getSandboxInfo(other.id), 404, "DOCKER::SANDBOX_NOT_FOUND");
  await sbx.kill();
  await expectReject(sbx.getInfo(), 404);
  await expectReject(mgr.killSandbox(sbx.id), 404);
  // The application server started in the sandbox must be gone with it.
  await new Promise((r) => setTimeout(r, 300));
  await assert.rejects(httpGet(`http://127.0.0.1:${appPort}/index.txt`));

  await resumed.close();
  await other.close();
  await sbx.close();
  await mgr.close?.();
  process.stdout.write("ok - SDK conformance\n");
}

main().catch((e) => {
  process.stderr.write(`FAIL at step "${step}": ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
