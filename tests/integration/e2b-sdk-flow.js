// SPDX-License-Identifier: Apache-2.0
// Drives rock-admin with the unmodified E2B JavaScript SDK (npm `e2b`), pointed at it the way a
// self-hosting user does: E2B_API_URL and E2B_SANDBOX_URL (both rock-admin's base URL) and
// E2B_API_KEY. Run by tests/integration/test_e2b.py as `node e2b-sdk-flow.js <step>`; prints one
// JSON object with what the SDK returned or threw, and the Python side asserts on it.
'use strict';
const { Sandbox, SandboxNotFoundError, NotFoundError, SandboxError, AuthenticationError,
        TimeoutError, CommandExitError } = require('e2b');

function errInfo(e) {
  return {
    name: e && e.name, message: e && String(e.message), statusCode: e && e.statusCode,
    notFound: e instanceof NotFoundError, sandboxNotFound: e instanceof SandboxNotFoundError,
    sandboxError: e instanceof SandboxError, auth: e instanceof AuthenticationError,
    timeout: e instanceof TimeoutError, exit: e instanceof CommandExitError,
    exitCode: e instanceof CommandExitError ? e.exitCode : undefined,
  };
}

async function attempt(fn) {
  try { return { ok: true, value: await fn() }; } catch (e) { return { ok: false, error: errInfo(e) }; }
}

const tag = process.env.E2B_TEST_TAG || 'e2b-test';

async function lifecycle() {
  const out = {};
  const sbx = await Sandbox.create('python:3.11', { metadata: { suite: tag, 'with space': 'a b&c' },
                                                     envs: { GREETING: 'hello' }, timeoutMs: 61000 });
  out.sandboxId = sbx.sandboxId;
  out.hasToken = !!sbx.envdAccessToken;
  const pager = Sandbox.list({ query: { metadata: { suite: tag, 'with space': 'a b&c' } } });
  const listed = await pager.nextItems();
  out.listed = listed.map((s) => ({ id: s.sandboxId, state: s.state, metadata: s.metadata,
                                    template: s.templateId }));
  out.listedOther = (await Sandbox.list({ query: { metadata: { suite: 'no-such' } } }).nextItems()).length;
  const info = await sbx.getInfo();
  out.info = { id: info.sandboxId, template: info.templateId, state: info.state, metadata: info.metadata,
               cpuCount: info.cpuCount, memoryMB: info.memoryMB, envdVersion: info.envdVersion,
               startedAt: info.startedAt.getTime(), endAt: info.endAt.getTime(), now: Date.now() };
  out.kill = await sbx.kill();
  out.killAgain = await Sandbox.kill(sbx.sandboxId);
  out.afterKill = await attempt(() => Sandbox.getInfo(sbx.sandboxId));
  return out;
}

async function errors() {
  return {
    unknownInfo: await attempt(() => Sandbox.getInfo('no-such-sandbox')),
    unknownKill: await attempt(() => Sandbox.kill('no-such-sandbox')),
    badTemplate: await attempt(() => Sandbox.create('bad template!')),
  };
}

async function page() {
  // Three sandboxes, listed two per page: the SDK follows x-next-token.
  const ids = [];
  for (let i = 0; i < 3; i++)
    ids.push((await Sandbox.create('python:3.11', { metadata: { page: tag } })).sandboxId);
  const pager = Sandbox.list({ limit: 2, query: { metadata: { page: tag } } });
  const pages = [];
  while (pager.hasNext) pages.push((await pager.nextItems()).map((s) => s.sandboxId));
  for (const id of ids) await Sandbox.kill(id);
  return { ids, pages };
}

async function auth() {
  return { create: await attempt(() => Sandbox.create('python:3.11')) };
}

async function envd() {
  const out = {};
  const sbx = await Sandbox.create('python:3.11', { metadata: { suite: tag }, envs: { GREETING: 'hello' } });
  out.sandboxId = sbx.sandboxId;
  out.token = sbx.envdAccessToken;
  try {
    const hi = await sbx.commands.run('echo hi');
    out.hi = { stdout: hi.stdout, stderr: hi.stderr, exitCode: hi.exitCode };
    const env = await sbx.commands.run('echo "$GREETING $EXTRA" && pwd && echo err >&2',
                                       { envs: { EXTRA: 'there' }, cwd: '/tmp' });
    out.env = { stdout: env.stdout, stderr: env.stderr };
    out.fail = await attempt(() => sbx.commands.run('exit 3'));
    // streaming: each line reaches onStdout while the command still runs
    const seen = [];
    const t0 = Date.now();
    const long = await sbx.commands.run('for i in 1 2 3 4 5; do echo line$i; sleep 0.4; done',
                                        { onStdout: (d) => seen.push([d, Date.now() - t0]) });
    out.stream = { stdout: long.stdout, chunks: seen.length, firstAt: seen.length ? seen[0][1] : null,
                   total: Date.now() - t0 };
    out.timeout = await attempt(() => sbx.commands.run('sleep 30', { timeoutMs: 1500 }));
    // background: start, see its pid listed, wait for it; a second one killed
    const bg = await sbx.commands.run('sleep 1; echo done', { background: true });
    out.bgListed = (await sbx.commands.list()).some((p) => p.pid === bg.pid);
    const bgRes = await bg.wait();
    out.bg = { stdout: bgRes.stdout, exitCode: bgRes.exitCode };
    const victim = await sbx.commands.run('sleep 60', { background: true, timeoutMs: 0 });
    out.killed = await victim.kill();
    out.victim = await attempt(() => victim.wait());
    out.killUnknown = await sbx.commands.kill(999999);
    // files (the simulator's sandboxes share the host's file system: a directory of our own)
    const dir = '/tmp/rock-e2b-' + sbx.sandboxId;
    out.dir = dir;
    const w = await sbx.files.write(dir + '/a.txt', 'hello file\n');
    out.write = { name: w.name, path: w.path, type: w.type };
    out.read = await sbx.files.read(dir + '/a.txt');
    const bytes = Uint8Array.from([0, 1, 2, 255, 254, 10]);
    await sbx.files.write(dir + '/b.bin', bytes.buffer);
    out.readBytes = Array.from(await sbx.files.read(dir + '/b.bin', { format: 'bytes' }));
    out.exists = [await sbx.files.exists(dir + '/a.txt'), await sbx.files.exists(dir + '/none')];
    out.mkdir = [await sbx.files.makeDir(dir + '/sub'), await sbx.files.makeDir(dir + '/sub')];
    out.list = (await sbx.files.list(dir)).map((e) => ({ name: e.name, type: e.type, size: e.size }))
      .sort((a, b) => a.name.localeCompare(b.name));
    const info = await sbx.files.getInfo(dir + '/a.txt');
    out.info = { name: info.name, type: info.type, size: info.size, mtime: info.modifiedTime instanceof Date };
    await sbx.files.remove(dir + '/a.txt');
    out.afterRemove = await sbx.files.exists(dir + '/a.txt');
    out.readMissing = await attempt(() => sbx.files.read(dir + '/a.txt'));
    const moved = await sbx.files.rename(dir + '/b.bin', dir + '/sub/c.bin');
    out.rename = { name: moved.name, path: moved.path, type: moved.type,
                   from: await sbx.files.exists(dir + '/b.bin'),
                   bytes: Array.from(await sbx.files.read(dir + '/sub/c.bin', { format: 'bytes' })) };
    out.watch = await attempt(() => sbx.files.watchDir('/tmp', () => {}));
    out.running = await sbx.isRunning();
    await sbx.files.remove(dir);
    out.dirGone = !(await sbx.files.exists(dir));
  } finally {
    await sbx.kill();
  }
  out.afterKill = await attempt(() => sbx.commands.run('echo hi'));
  return out;
}

async function envdAuth() {
  // One sandbox's token cannot drive another.
  const a = await Sandbox.create('python:3.11');
  const b = await Sandbox.create('python:3.11');
  try {
    b.envdAccessToken = a.envdAccessToken;
    return { own: (await a.commands.run('echo ok')).stdout,
             other: await attempt(() => b.commands.run('echo no')) };
  } finally {
    await a.kill();
    await b.kill();
  }
}

async function bigFile() {
  // A file larger than rock-admin's memory budget, written and read back through the SDK
  // (multipart upload, then a streamed read); the Python side compares the hashes and the
  // daemon's peak RSS.
  const crypto = require('crypto');
  const n = Number(process.env.E2B_TEST_BYTES);
  const data = Buffer.alloc(n);
  for (let off = 0; off < n; off += 1 << 20)
    crypto.randomFillSync(data, off, Math.min(1 << 20, n - off));
  const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');
  const sbx = await Sandbox.create('python:3.11');
  const path = '/tmp/rock-e2b-big-' + sbx.sandboxId + '/big.bin';
  try {
    const t0 = Date.now();
    const w = await sbx.files.write(path, data.buffer.slice(data.byteOffset, data.byteOffset + n),
                                    { requestTimeoutMs: 600000 });
    const t1 = Date.now();
    const back = Buffer.from(await sbx.files.read(path, { format: 'bytes', requestTimeoutMs: 600000 }));
    const t2 = Date.now();
    const info = await sbx.files.getInfo(path);
    await sbx.files.remove(path.replace(/\/big\.bin$/, ''));
    return { sandboxId: sbx.sandboxId, path, written: { name: w.name, path: w.path },
             size: info.size, sent: sha(data), got: sha(back), gotBytes: back.length,
             writeMs: t1 - t0, readMs: t2 - t1 };
  } finally {
    await sbx.kill();
  }
}

async function lifetime() {
  // setTimeout, Sandbox.connect (a second handle with its own envd token) and pause.
  const out = {};
  const sbx = await Sandbox.create('python:3.11', { timeoutMs: 61000 });
  try {
    const end = async () => { const i = await sbx.getInfo(); return (i.endAt.getTime() - Date.now()) / 1000; };
    out.before = await end();
    await sbx.setTimeout(600000);
    out.after = await end();
    const other = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 1200000 });
    out.afterConnect = await end();
    out.otherToken = !!other.envdAccessToken && other.envdAccessToken !== sbx.envdAccessToken;
    out.viaConnect = (await other.commands.run('echo connected')).stdout;
    out.viaCreate = (await sbx.commands.run('echo still')).stdout;
    out.pause = await attempt(() => sbx.pause());
    out.betaPause = await attempt(() => Sandbox.betaPause(sbx.sandboxId));
    out.stillRunning = await sbx.isRunning();
  } finally {
    await sbx.kill();
  }
  out.connectGone = await attempt(() => Sandbox.connect(sbx.sandboxId));
  out.timeoutGone = await attempt(() => Sandbox.setTimeout(sbx.sandboxId, 60000));
  out.connectUnknown = await attempt(() => Sandbox.connect('no-such-sandbox'));
  return out;
}

async function pauseResume() {
  const out = {};
  const sbx = await Sandbox.create('python:3.11');
  out.sandboxId = sbx.sandboxId;
  try {
    out.paused = await sbx.pause();
    out.pausedAgain = await sbx.pause();
    out.stateWhilePaused = (await sbx.getInfo()).state;
    out.envdWhilePaused = await attempt(() => sbx.commands.run('echo no'));
    const back = await Sandbox.connect(sbx.sandboxId);
    out.stateAfterConnect = (await back.getInfo()).state;
    out.afterResume = (await back.commands.run('echo back')).stdout;
  } catch (e) {
    await sbx.kill();
    throw e;
  }
  return out;
}

const steps = { lifecycle, errors, page, auth, envd, envdAuth, bigFile, lifetime, pauseResume };
steps[process.argv[2]]().then(
  (r) => { process.stdout.write(JSON.stringify(r) + '\n'); },
  (e) => { process.stdout.write(JSON.stringify({ crashed: errInfo(e), stack: e && e.stack }) + '\n'); });
