// Drives `toolgate mcp` with the MCP TypeScript SDK's client, a peer this
// project did not write, over stdio and over streamable HTTP, and asserts
// what each flow returns. Run by scripts/interop-ts.sh, which installs the
// SDK (npm ci, the version pinned in package-lock.json), builds toolgate and
// prepares the work directory:
//
//   TOOLGATE_BIN   the toolgate binary
//   INTEROP_WORK   a directory holding registry.yaml (interop.echo, which
//                  requires approval), server.json (the bearer token's
//                  principal, for --http) and data/hello.txt
//   INTEROP_TOKEN  the bearer token server.json maps
//
// Each transport gets its own database, INTEROP_WORK/TRANSPORT.db. Every
// flow prints one line, "ok" or "FAIL", with what it returned; the last
// line is a JSON summary. Exit status 1 when any flow failed.

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const bin = need('TOOLGATE_BIN');
const work = need('INTEROP_WORK');
const token = need('INTEROP_TOKEN');
const here = dirname(fileURLToPath(import.meta.url));
const sdkVersion = JSON.parse(readFileSync(join(here, 'node_modules/@modelcontextprotocol/sdk/package.json'), 'utf8')).version;

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`interop: $${name} is not set (run scripts/interop-ts.sh)`);
    process.exit(2);
  }
  return v;
}

const dataDir = join(work, 'data');
const serveArgs = (db) => [
  '--db', db, '--registry', join(work, 'registry.yaml'),
  'mcp', '--allow', `filesystem.read:${dataDir}`, '--allow', 'process.exec:echo',
];

const results = [];

class Failure extends Error {}

function check(cond, what) {
  if (!cond) throw new Failure(what);
}

// flow runs one named flow; fn returns what the flow returned, in words.
async function flow(transport, name, fn) {
  try {
    const got = await fn();
    results.push({ transport, flow: name, ok: true, got });
    console.log(`[${transport}] ok   ${name}: ${got}`);
  } catch (e) {
    const msg = e instanceof Failure ? e.message : `${e?.constructor?.name ?? 'Error'}: ${e?.message ?? e}`;
    results.push({ transport, flow: name, ok: false, got: msg });
    console.log(`[${transport}] FAIL ${name}: ${msg}`);
  }
}

// toolgate runs the CLI and returns its stdout; it fails on a non-zero exit.
function toolgate(...args) {
  const r = spawnSync(bin, args, { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) {
    throw new Failure(`toolgate ${args.join(' ')}: exit ${r.status}: ${r.stderr || r.stdout}`);
  }
  return r.stdout;
}

const meta = (res, key) => res._meta?.[`io.toolgate/${key}`];
const textOf = (res) => res.content?.find((c) => c.type === 'text')?.text ?? '';

// errorOf is the outcome an isError answer carries in its text block.
function errorOf(res) {
  check(res.isError === true, `want isError, got ${JSON.stringify(res).slice(0, 300)}`);
  return JSON.parse(textOf(res));
}

async function flows(transport, client, db) {
  const call = (name, args) => client.callTool({ name, arguments: args });

  await flow(transport, 'tools/list', async () => {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    for (const want of ['file.read', 'interop.echo', 'toolgate.execute_intent']) {
      check(names.includes(want), `tools/list lacks ${want}: ${names.join(', ')}`);
    }
    // Each caller sees the tools it may call: nothing grants file.write.
    check(!names.includes('file.write'), `tools/list shows file.write, which the caller may not call`);
    for (const t of tools) {
      check(t.outputSchema?.type === 'object', `${t.name}: outputSchema ${JSON.stringify(t.outputSchema)}`);
    }
    const echo = tools.find((t) => t.name === 'interop.echo');
    check(echo._meta?.['io.toolgate/requiresApproval'] === true, 'interop.echo is not marked as requiring approval');
    return `${tools.length} tools, each with an object outputSchema (the SDK compiled them all)`;
  });

  await flow(transport, 'granted call', async () => {
    const res = await call('file.read', { path: join(dataDir, 'hello.txt') });
    check(!res.isError, `isError: ${textOf(res)}`);
    check(meta(res, 'state') === 'COMPLETED', `state ${meta(res, 'state')}`);
    check(res.structuredContent?.content === 'hello from interop\n', `structuredContent ${JSON.stringify(res.structuredContent)}`);
    return `COMPLETED, structuredContent.content ${JSON.stringify(res.structuredContent.content)}, execution ${meta(res, 'executionId')}`;
  });

  await flow(transport, 'denied call', async () => {
    // file.write requires filesystem.write, which nothing grants.
    const path = join(dataDir, 'denied.txt');
    const res = await call('file.write', { path, content: 'must not be written' });
    const o = errorOf(res);
    check(o.state === 'DENIED' && o.error?.type === 'AuthorizationError', `got ${textOf(res)}`);
    check(o.error.message.includes('filesystem.write'), `the message names no capability: ${o.error.message}`);
    check(!existsSync(path), `${path} was written`);
    return `isError, DENIED, ${o.error.type}: ${o.error.message}`;
  });

  await flow(transport, 'schema violation', async () => {
    const res = await call('file.read', { path: 5 });
    const o = errorOf(res);
    check(o.state === 'FAILED' && o.error?.type === 'ValidationError' && o.error.code === 'invalid_input', `got ${textOf(res)}`);
    check(o.error.message.includes('/path'), `the message does not name the field: ${o.error.message}`);
    return `isError, FAILED, ${o.error.type} ${o.error.code}: ${o.error.message}`;
  });

  await flow(transport, 'unknown tool', async () => {
    try {
      const res = await call('no.such.tool', {});
      throw new Failure(`answered ${JSON.stringify(res).slice(0, 300)}`);
    } catch (e) {
      if (e instanceof Failure) throw e;
      check(e instanceof McpError && e.code === -32602, `threw ${e?.constructor?.name} ${e?.code}: ${e?.message}`);
      return `JSON-RPC error ${e.code}: ${e.message}`;
    }
  });

  // A call that needs approval, approved out of band, run once, replayed.
  const args = { msg: `stamp ${transport} ${randomUUID()}` };
  let intent;
  await flow(transport, 'call needing approval', async () => {
    const res = await call('interop.echo', args);
    check(!res.isError, `isError: ${textOf(res)}`);
    check(meta(res, 'state') === 'APPROVAL_REQUIRED', `state ${meta(res, 'state')}`);
    const sc = res.structuredContent;
    check(sc?.status === 'approval_required' && sc.intentId && sc.hash, `structuredContent ${JSON.stringify(sc)}`);
    check(sc.intentId === meta(res, 'intent')?.intentId, `_meta io.toolgate/intent ${JSON.stringify(meta(res, 'intent'))}`);
    check(sc.approve.includes(`intent approve ${sc.intentId}`), `approve says ${sc.approve}`);
    intent = sc;
    return `not an error, APPROVAL_REQUIRED, structuredContent {status: ${sc.status}, intentId: ${sc.intentId}, hash: ${sc.hash.slice(0, 12)}..., approve: "${sc.approve}"}`;
  });

  await flow(transport, 'approved out of band', async () => {
    check(intent, 'no intent');
    // toolgate mcp holds the database: the command reaches it through its
    // local socket (toolgate.db.sock).
    const out = toolgate('--db', db, 'intent', 'approve', intent.intentId, '--yes', '--approver', 'alice');
    const shown = JSON.parse(toolgate('--db', db, '--json', 'intent', 'show', intent.intentId));
    check(shown.status === 'approved', `intent show: ${JSON.stringify(shown).slice(0, 300)}`);
    return `toolgate intent approve: ${out.trim().split('\n')[0]}`;
  });

  let first;
  await flow(transport, 'executed once via toolgate.execute_intent', async () => {
    check(intent, 'no intent');
    const res = await call('toolgate.execute_intent', { intentId: intent.intentId, hash: intent.hash });
    check(!res.isError, `isError: ${textOf(res)}`);
    check(meta(res, 'state') === 'COMPLETED' && meta(res, 'replayed') !== true, `_meta ${JSON.stringify(res._meta)}`);
    check(meta(res, 'intentId') === intent.intentId, `ran intent ${meta(res, 'intentId')}`);
    check(res.structuredContent?.stdout === `${args.msg}\n`, `structuredContent ${JSON.stringify(res.structuredContent)}`);
    first = res;
    return `COMPLETED (not replayed), execution ${meta(res, 'executionId')}, stdout ${JSON.stringify(res.structuredContent.stdout)}`;
  });

  await flow(transport, 'replayed without running again', async () => {
    check(first, 'no first run');
    const answers = {
      'toolgate.execute_intent {id, hash}': await call('toolgate.execute_intent', { id: intent.intentId, hash: intent.hash }),
      'the identical call': await call('interop.echo', args),
    };
    for (const [how, res] of Object.entries(answers)) {
      check(!res.isError, `${how}: isError: ${textOf(res)}`);
      check(meta(res, 'replayed') === true, `${how}: _meta ${JSON.stringify(res._meta)}`);
      check(meta(res, 'executionId') === meta(first, 'executionId'), `${how}: execution ${meta(res, 'executionId')}, want ${meta(first, 'executionId')}`);
      check(JSON.stringify(res.structuredContent) === JSON.stringify(first.structuredContent), `${how}: another outcome`);
    }
    // The records, through the server's local socket: one execution of
    // the tool, completed.
    const recs = JSON.parse(toolgate('--db', db, '--json', 'executions', '--tool', 'interop.echo', '--limit', '0'));
    const list = Array.isArray(recs) ? recs : (recs.executions ?? recs.records ?? []);
    check(list.length === 1 && list[0].state === 'COMPLETED', `toolgate executions --tool interop.echo: ${JSON.stringify(recs).slice(0, 400)}`);
    return `_meta io.toolgate/replayed true and execution ${meta(first, 'executionId')} for both; toolgate executions: 1 record, COMPLETED`;
  });
}

async function overStdio() {
  const db = join(work, 'stdio.db');
  const transport = new StdioClientTransport({
    command: bin,
    args: [...serveArgs(db), '--principal', 'interop-agent'],
    stderr: 'inherit',
  });
  let protocol = '?';
  transport.setProtocolVersion = (v) => { protocol = v; }; // the client tells a transport what it negotiated
  const client = new Client({ name: 'toolgate-interop-ts', version: '1.0.0' });
  await client.connect(transport);
  const info = client.getServerVersion();
  console.log(`[stdio] connected: protocol ${protocol}, server ${info?.name} ${info?.version}`);
  try {
    await flows('stdio', client, db);
  } finally {
    await client.close(); // ends toolgate's stdin: it closes the database and exits
  }
}

async function overHTTP() {
  const db = join(work, 'http.db');
  const server = spawn(bin, [...serveArgs(db), '--http', '127.0.0.1:0', '--config', join(work, 'server.json')], {
    stdio: ['ignore', 'inherit', 'pipe'],
  });
  const exited = new Promise((resolve) => server.once('exit', (code, signal) => resolve({ code, signal })));
  const addr = await new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`toolgate mcp --http did not start: ${seen}`)), 30_000);
    server.stderr.on('data', (b) => {
      process.stderr.write(b);
      seen += b;
      const m = seen.match(/serving MCP on (http:\/\/[^\s]+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    server.once('exit', (code) => reject(new Error(`toolgate mcp --http exited (${code}): ${seen}`)));
  });
  const transport = new StreamableHTTPClientTransport(new URL(`${addr}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'toolgate-interop-ts', version: '1.0.0' });
  try {
    await client.connect(transport);
    console.log(`[http] connected to ${addr}/mcp: session ${transport.sessionId ?? '(none)'}, protocol ${transport.protocolVersion ?? '?'}`);
    await flows('http', client, db);
    await transport.terminateSession().catch(() => {});
    await client.close();
  } finally {
    server.kill('SIGTERM'); // finishes running calls, closes the database, exits 0
    const { code, signal } = await exited;
    if (code !== 0) {
      results.push({ transport: 'http', flow: 'server exit', ok: false, got: `exit ${code} ${signal ?? ''}` });
      console.log(`[http] FAIL server exit: ${code} ${signal ?? ''}`);
    }
  }
}

console.log(`interop: @modelcontextprotocol/sdk ${sdkVersion} (TypeScript SDK) client, Node ${process.version}, against ${bin}`);
for (const [name, run] of [['stdio', overStdio], ['http', overHTTP]]) {
  try {
    await run();
  } catch (e) {
    results.push({ transport: name, flow: 'connect', ok: false, got: String(e?.message ?? e) });
    console.log(`[${name}] FAIL connect: ${e?.message ?? e}`);
  }
}
const failed = results.filter((r) => !r.ok);
console.log(JSON.stringify({ sdk: `@modelcontextprotocol/sdk@${sdkVersion}`, node: process.version, passed: results.length - failed.length, failed: failed.length, results }));
process.exit(failed.length ? 1 : 0);
