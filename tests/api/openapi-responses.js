// SPDX-License-Identifier: Apache-2.0
// Every response the integration tests received from rock-admin conforms to
// api/openapi.json: the harness (tests/lib/harness.py) records them to
// $ROCK_RECORD_RESPONSES/*.jsonl when that variable is set, and this test
// (run after them: see tests/Makefile.am) matches each one to its operation
// and status code and validates its JSON body with Ajv (JSON Schema 2020-12,
// the dialect of OpenAPI 3.1).
//
// A response fails when its path or status code is not documented, when its
// content type is not one the operation declares, or when its body does not
// match the schema. Relayed (proxy) answers are the sandbox service's own and
// are declared as any content.
"use strict";
const fs = require("fs");
const path = require("path");

const modules = process.env.ROCK_TEST_NODE_MODULES;
const srcdir = process.env.ROCK_SRCDIR || path.join(__dirname, "..", "..");
const recordDir = process.env.ROCK_RECORD_RESPONSES;
if (!modules || !fs.existsSync(path.join(modules, "ajv"))) {
  console.error("openapi-responses: ajv not found in ROCK_TEST_NODE_MODULES (run scripts/install-deps.sh)");
  process.exit(1);
}
const Ajv2020 = require(path.join(modules, "ajv/dist/2020")).default;
const addFormats = require(path.join(modules, "ajv-formats"));

const doc = JSON.parse(fs.readFileSync(path.join(srcdir, "api", "openapi.json"), "utf8"));
// The whole document is one schema resource, so that "#/components/..."
// references resolve; non-schema keywords (openapi, paths, ...) are ignored.
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addSchema(doc, "openapi");
const validators = new Map();
function validatorFor(pointer) {
  if (!validators.has(pointer)) validators.set(pointer, ajv.compile({ $ref: "openapi#" + pointer }));
  return validators.get(pointer);
}
const esc = (s) => s.replace(/~/g, "~0").replace(/\//g, "~1");

// Path templates as regexes. "{path}" is the rest of the path (may be empty
// or contain '/'); other parameters are one non-empty segment. Literal
// characters rank a match, so /proxy/{id}/port/{port} beats /proxy/{id}/{path}
// as in the daemon's route tables.
const templates = Object.keys(doc.paths).map((t) => {
  let re = "";
  let literal = 0;
  for (const part of t.split(/(\{[^}]+\})/)) {
    if (part === "{path}") re += "(.*)";
    else if (part.startsWith("{")) re += "([^/]+)";
    else {
      re += part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
      literal += part.length;
    }
  }
  return { template: t, re: new RegExp("^" + re + "$"), literal };
});
function findPath(p) {
  let best = null;
  for (const t of templates) if (t.re.test(p) && (!best || t.literal > best.literal)) best = t;
  return best;
}

function responseFor(op, status) {
  const r = op.responses || {};
  const code = String(status);
  const key = r[code] ? code : r[code[0] + "XX"] ? code[0] + "XX" : r.default ? "default" : null;
  return key ? { key, resp: r[key] } : null;
}
function deref(resp) {
  if (resp && resp.$ref) {
    const name = resp.$ref.split("/").pop();
    return { resp: doc.components.responses[name], pointer: "/components/responses/" + esc(name) };
  }
  return { resp, pointer: null };
}

function check(rec) {
  const rawPath = rec.path.split("?")[0];
  let p;
  try {
    p = decodeURIComponent(rawPath);
  } catch (e) {
    p = rawPath;
  }
  const method = rec.method.toLowerCase();
  const found = findPath(p);
  // CORS preflight, answered by the daemon on any path (see info.description):
  // 204 without a body, or 403 for an origin that is not allowed. Relay paths
  // document OPTIONS themselves (the upstream's answer).
  if (method === "options" && !(found && doc.paths[found.template].options)) {
    if (rec.status === 204) return null;
    if (rec.status !== 403) return `OPTIONS answered ${rec.status}: not a CORS preflight answer`;
  }
  let resp = null;
  let pointer = null;
  if (!found) {
    // Unknown paths: FastAPI-style 404, or a 307 to the path without its slash.
    if (rec.status === 404) ({ resp, pointer } = deref({ $ref: "#/components/responses/NotFound" }));
    // With token authentication on, unknown paths are refused before routing (not disclosed).
    else if (rec.status === 401) ({ resp, pointer } = deref({ $ref: "#/components/responses/Unauthorized" }));
    else if (rec.status === 403 && method === "options") ({ resp, pointer } = deref({ $ref: "#/components/responses/Forbidden" }));
    else if (rec.status === 307 && p.endsWith("/") && findPath(p.slice(0, -1))) return null;
    else return `undocumented path (HTTP ${rec.status})`;
  } else {
    const item = doc.paths[found.template];
    const op = item[method] || (method === "head" ? item.get : null);
    if (!op) {
      if (rec.status === 405) ({ resp, pointer } = deref({ $ref: "#/components/responses/MethodNotAllowed" }));
      // With token authentication on, the token is checked before the method.
      else if (rec.status === 401) ({ resp, pointer } = deref({ $ref: "#/components/responses/Unauthorized" }));
      else if (rec.status === 403 && method === "options") ({ resp, pointer } = deref({ $ref: "#/components/responses/Forbidden" }));
      else if (rec.status === 307 && p.endsWith("/")) return null;
      else return `method ${rec.method} not documented for ${found.template} (HTTP ${rec.status})`;
    } else {
      const m = item[method] ? method : "get";
      const hit = responseFor(op, rec.status);
      if (!hit) return `HTTP ${rec.status} not documented for ${m.toUpperCase()} ${found.template}`;
      ({ resp, pointer } = deref(hit.resp));
      if (!pointer) pointer = `/paths/${esc(found.template)}/${m}/responses/${esc(hit.key)}`;
    }
  }
  if (method === "head" || rec.status === 204 || rec.status === 304 || rec.status === 101) return null;
  const content = resp.content || {};
  const types = Object.keys(content);
  if (types.length === 0) return null;
  if (types.includes("*/*")) return null;
  const ct = (rec.content_type || "").split(";")[0].trim().toLowerCase();
  if (!types.includes(ct)) return `content type "${ct}" not in [${types.join(", ")}] (${pointer})`;
  if (ct !== "application/json" || rec.body === null || rec.truncated) return null;
  let body;
  try {
    body = JSON.parse(rec.body);
  } catch (e) {
    return `body is not JSON: ${e.message}`;
  }
  const v = validatorFor(`${pointer}/content/${esc(ct)}/schema`);
  if (v(body)) return null;
  const errs = v.errors.slice(0, 6).map((e) => `${e.instancePath || "/"} ${e.message}`).join("; ");
  return `body does not match ${pointer}: ${errs}; body: ${rec.body.slice(0, 400)}`;
}

// Self-check: the validator must reject what the document forbids.
const P = "/apis/envs/sandbox/v1";
const selfCheck = [
  [{ method: "POST", path: P + "/execute", status: 200, content_type: "application/json",
     body: '{"status":"Success","message":null,"error":null,"result":{"stdout":"x","stderr":""}}' }, true],
  [{ method: "POST", path: P + "/execute", status: 200, content_type: "application/json",
     body: '{"status":"Success","message":null,"error":null,"result":{"stdout":5,"stderr":""}}' }, false],
  [{ method: "POST", path: P + "/execute", status: 418, content_type: "application/json", body: "{}" }, false],
  [{ method: "GET", path: P + "/get_status?sandbox_id=x", status: 200, content_type: "text/plain", body: "x" }, false],
  [{ method: "GET", path: "/no/such/route", status: 200, content_type: "application/json", body: "{}" }, false],
];
for (const [rec, good] of selfCheck) {
  if ((check(rec) === null) !== good) {
    console.log(`not ok - self-check: ${rec.method} ${rec.path} ${rec.status} should be ${good ? "accepted" : "rejected"}`);
    process.exit(1);
  }
}

if (!recordDir || !fs.existsSync(recordDir)) {
  console.error("openapi-responses: no recorded responses (ROCK_RECORD_RESPONSES=" + recordDir + ")");
  process.exit(1);
}
const files = fs.readdirSync(recordDir).filter((f) => f.endsWith(".jsonl")).sort();
let passed = 0;
let failed = 0;
const covered = new Set();
for (const f of files) {
  const lines = fs.readFileSync(path.join(recordDir, f), "utf8").split("\n").filter(Boolean);
  for (const line of lines) {
    const rec = JSON.parse(line);
    const problem = check(rec);
    if (problem) {
      failed++;
      if (failed <= 50) console.log(`not ok - ${f}: ${rec.method} ${rec.path} -> ${problem}`);
    } else {
      passed++;
      const t = findPath(decodeURIComponent(rec.path.split("?")[0]));
      if (t) covered.add(rec.method.toUpperCase() + " " + t.template);
    }
  }
}
const ops = [];
for (const [t, item] of Object.entries(doc.paths)) for (const m of Object.keys(item)) ops.push(m.toUpperCase() + " " + t);
console.log(`openapi-responses: ${files.length} files, ${passed + failed} responses; ` +
            `${covered.size} of ${ops.length} documented operations seen`);
if (passed + failed === 0) {
  console.log("openapi-responses: no responses recorded: the harness hook is not working");
  failed = 1;
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
