// idem's gateway (idem serve) driven by stripe-node, Stripe's Node.js SDK,
// as its users' clients will: form-encoded POSTs, an Idempotency-Key the
// SDK makes up when the caller gives none, its telemetry header, and its
// own retries (on 409 and 5xx) with the same key. The upstream is a fake
// payments API that counts its effects; every test asserts how many
// happened, and that every answer of the gateway's own reaches the caller
// as an error: stripe-node tells an error by an "error" member in the body,
// not by the status.
//
// cd compat/stripe-node && npm ci && npm test
// (IDEM_BIN names an idem binary; without it the test builds one.)
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn, execFileSync } = require('node:child_process');
const Stripe = require('stripe');

// The fake payments API: POST /v1/payment_intents creates one and counts
// it under the Idempotency-Key the gateway forwarded. fail answers that
// many requests 503 first (a plain-text body, as a load balancer's);
// slowMS delays every answer.
const upstream = {
  effects: new Map(),
  arrived: new Set(), // keys whose request has reached the upstream
  total: 0,
  calls: 0,
  fail: 0,
  slowMS: 0,
  server: null,
  effectsOf(key) { return this.effects.get(key) || 0; },
};

function serveUpstream(req, res) {
  upstream.calls++;
  let body = '';
  req.on('data', (c) => { body += c; });
  req.on('end', () => {
    if (req.method !== 'POST' || req.url !== '/v1/payment_intents') {
      res.writeHead(404).end();
      return;
    }
    upstream.arrived.add(req.headers['idempotency-key'] || '');
    if (upstream.fail > 0) {
      upstream.fail--;
      res.writeHead(503, { 'Content-Type': 'text/plain' }).end('nothing done, try again');
      return;
    }
    setTimeout(() => {
      const form = new URLSearchParams(body);
      const n = ++upstream.total;
      const key = req.headers['idempotency-key'] || '';
      upstream.effects.set(key, upstream.effectsOf(key) + 1);
      res.writeHead(200, { 'Content-Type': 'application/json', 'Request-Id': `req_${n}` });
      res.end(JSON.stringify({
        id: `pi_${n}`, object: 'payment_intent',
        amount: Number(form.get('amount')), currency: form.get('currency'), status: 'requires_payment_method',
      }));
    }, upstream.slowMS);
  });
}

let gateway; // the idem serve process
let port; // the gateway's
let dir;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'idem-stripe-node-'));
  upstream.server = http.createServer(serveUpstream);
  await new Promise((resolve) => upstream.server.listen(0, '127.0.0.1', resolve));
  let bin = process.env.IDEM_BIN;
  if (!bin) {
    bin = path.join(dir, 'idem');
    execFileSync('go', ['build', '-o', bin, './cmd/idem'], { cwd: path.join(__dirname, '..', '..'), stdio: 'inherit' });
  }
  gateway = spawn(bin, ['serve',
    '--upstream', `http://127.0.0.1:${upstream.server.address().port}`,
    '--listen', '127.0.0.1:0',
    '--db', `sqlite:${path.join(dir, 'idem.db')}`,
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  port = await new Promise((resolve, reject) => {
    const seen = (chunk) => {
      out += chunk;
      const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    };
    gateway.stdout.on('data', seen);
    gateway.stderr.on('data', seen);
    gateway.on('exit', (code) => reject(new Error(`idem serve exited (${code}):\n${out}`)));
  });
});

after(async () => {
  if (gateway) gateway.kill('SIGTERM');
  if (upstream.server) upstream.server.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

// client is stripe-node pointed at the gateway, retrying as configured
// (its pauses: 0.5 s, doubling).
function client(secret = 'sk_test_idem', retries = 3) {
  return new Stripe(secret, {
    host: '127.0.0.1', port, protocol: 'http',
    maxNetworkRetries: retries,
  });
}

const create = (s, params, opts) => s.paymentIntents.create({ currency: 'usd', ...params }, opts);

test('a retry after completion gets the stored answer', async () => {
  const s = client();
  const a = await create(s, { amount: 1000 }, { idempotencyKey: 'node-replay' });
  const b = await create(s, { amount: 1000 }, { idempotencyKey: 'node-replay' });
  assert.equal(b.id, a.id);
  assert.equal(b.lastResponse.headers['idempotent-replayed'], 'true');
  assert.equal(upstream.effectsOf('node-replay'), 1);
});

test("the SDK's own key carries its retries of a 503 that did nothing", async () => {
  const total0 = upstream.total;
  upstream.fail = 2;
  const pi = await create(client(), { amount: 2000 });
  assert.equal(pi.amount, 2000);
  assert.equal(upstream.total - total0, 1, 'one effect');
  const keys = [...upstream.effects.keys()].filter((k) => k.startsWith('stripe-node-retry-'));
  assert.equal(keys.length, 1, `the SDK made one key for the call and its retries: ${keys}`);
  assert.equal(upstream.effectsOf(keys[0]), 1);
});

test('a mismatched reuse is an error, not a payment intent', async () => {
  const s = client();
  await create(s, { amount: 3000 }, { idempotencyKey: 'node-mismatch' });
  const calls = upstream.calls;
  await assert.rejects(create(s, { amount: 3001 }, { idempotencyKey: 'node-mismatch' }), (err) => {
    assert.equal(err.statusCode, 422);
    assert.equal(err.rawType, 'key-mismatch');
    assert.match(err.message, /different request/);
    return true;
  });
  assert.equal(upstream.calls, calls, 'the mismatched request reached the upstream');
  assert.equal(upstream.effectsOf('node-mismatch'), 1);
});

test('concurrent calls with one key make one effect', async () => {
  upstream.slowMS = 300;
  try {
    const s = client('sk_test_idem', 6);
    const got = await Promise.all(Array.from({ length: 8 }, () => create(s, { amount: 4000 }, { idempotencyKey: 'node-concurrent' })));
    assert.equal(new Set(got.map((pi) => pi.id)).size, 1, `every caller gets the one payment intent: ${got.map((pi) => pi.id)}`);
  } finally {
    upstream.slowMS = 0;
  }
  assert.equal(upstream.effectsOf('node-concurrent'), 1);
});

test('a 409 left after the retries is an error', async () => {
  upstream.slowMS = 1500;
  try {
    const first = create(client(), { amount: 5000 }, { idempotencyKey: 'node-inflight' });
    for (let i = 0; !upstream.arrived.has('node-inflight'); i++) {
      assert.ok(i < 1000, 'the first request did not reach the upstream in 10 s');
      await new Promise((r) => setTimeout(r, 10));
    }
    await assert.rejects(create(client('sk_test_idem', 0), { amount: 5000 }, { idempotencyKey: 'node-inflight' }), (err) => {
      assert.equal(err.statusCode, 409);
      assert.equal(err.rawType, 'request-in-flight');
      return true;
    });
    await first;
  } finally {
    upstream.slowMS = 0;
  }
  assert.equal(upstream.effectsOf('node-inflight'), 1);
});

test("the gateway's 400 for a bad key is an error", async () => {
  const calls = upstream.calls;
  await assert.rejects(create(client(), { amount: 6000 }, { idempotencyKey: 'k'.repeat(300) }), (err) => {
    assert.equal(err.statusCode, 400);
    assert.equal(err.rawType, 'key-invalid');
    return true;
  });
  assert.equal(upstream.calls, calls);
});

test('two secret keys with one Idempotency-Key are two callers', async () => {
  const a = await create(client('sk_test_tenant_a'), { amount: 7000 }, { idempotencyKey: 'node-tenants' });
  const b = await create(client('sk_test_tenant_b'), { amount: 7000 }, { idempotencyKey: 'node-tenants' });
  assert.notEqual(a.id, b.id);
  assert.equal(upstream.effectsOf('node-tenants'), 2);
});
