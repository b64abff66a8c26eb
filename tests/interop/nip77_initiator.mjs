// The NIP-77 Negentropy of the npm package nostr-tools, as the initiator,
// against a responder of ours: a command that speaks the reference harness
// line protocol (python -m openprocurement_feed.reconcile.harness), or the
// feed's reconcile endpoint over HTTP.
//
// Usage:
//   node nip77_initiator.mjs SPEC.json        (or the spec on standard input)
//
// SPEC.json:
//   {
//     "nostr_tools": "/path/to/node_modules/nostr-tools",
//     "cases": [
//       {
//         "name": "overlap",
//         "items": [[timestamp, "id hex"], ...],      // the initiator's set
//         "frame_size_limit": 60000,                   // the initiator's (>= 4096)
//         "max_rounds": 200,                           // an error after so many (default 200)
//         "peer": {"harness": "python -m ...harness",  // a command and its set, or
//                  "items": [[timestamp, "id hex"], ...], "frame_size_limit": 0}
//         // "peer": {"url": "http://host/api/2.5/feeds/tenders/reconcile?until=...",
//         //          "headers": {"Authorization": "..."}}
//       }
//     ]
//   }
//
// The cases run concurrently. Standard output is one JSON document:
//   {"results": {"<name>": {"rounds": n, "have": [...], "need": [...],
//                          "bytes_up": n, "bytes_down": n, "largest_up": n,
//                          "largest_down": n} | {"error": "..."}}}
// "have": ids only the initiator holds; "need": ids only the peer holds.
// Exit status 0 when every case ran (its result may still be wrong: the
// caller compares), 1 when a case failed, 2 on a bad spec.
//
// nostr-tools does not export nip77 in its package.json: it is imported by
// its path, lib/esm/nip77.js.

import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';

function fail(message) {
  process.stderr.write(`nip77_initiator: ${message}\n`);
  process.exit(2);
}

// A responder of ours speaking the harness line protocol in a child process.
class HarnessPeer {
  constructor(command, items, frameSizeLimit) {
    const env = { ...process.env };
    delete env.FRAMESIZELIMIT;
    if (frameSizeLimit) env.FRAMESIZELIMIT = String(frameSizeLimit);
    this.child = spawn('sh', ['-c', command], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.stderr = '';
    this.child.stderr.on('data', (chunk) => { this.stderr += chunk; });
    this.exited = new Promise((resolve) => this.child.on('close', (code) => resolve(code)));
    this.lines = createInterface({ input: this.child.stdout })[Symbol.asyncIterator]();
    const setup = items.map(([timestamp, id]) => `item,${timestamp},${id}\n`).join('') + 'seal\n';
    this.child.stdin.write(setup);
  }

  async send(hex) {
    this.child.stdin.write(`msg,${hex}\n`);
    const { value, done } = await this.lines.next();
    if (done) {
      const code = await this.exited;
      throw new Error(`the harness ended with status ${code}: ${this.stderr.trim()}`);
    }
    if (!value.startsWith('msg,')) throw new Error(`unexpected line from the harness: ${value.slice(0, 200)}`);
    return value.slice(4);
  }

  close() {
    this.child.stdin.end();
  }
}

// The reconcile endpoint over HTTP: a POST per round, the message as the body.
class HttpPeer {
  constructor(url, headers) {
    this.url = url;
    this.headers = headers || {};
  }

  async send(hex) {
    const response = await fetch(this.url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/octet-stream', ...this.headers },
      body: Buffer.from(hex, 'hex'),
    });
    const body = Buffer.from(await response.arrayBuffer());
    if (response.status !== 200) {
      throw new Error(`HTTP ${response.status} from ${this.url}: ${body.toString('utf8').slice(0, 500)}`);
    }
    return body.toString('hex');
  }

  close() {}
}

async function runCase(nip77, spec) {
  const storage = new nip77.NegentropyStorageVector();
  for (const [timestamp, id] of spec.items) storage.insert(timestamp, id);
  storage.seal();
  const negentropy = new nip77.Negentropy(storage, spec.frame_size_limit || 60000);
  const peer = spec.peer.url
    ? new HttpPeer(spec.peer.url, spec.peer.headers)
    : new HarnessPeer(spec.peer.harness, spec.peer.items || [], spec.peer.frame_size_limit || 0);
  const result = { rounds: 0, have: [], need: [], bytes_up: 0, bytes_down: 0, largest_up: 0, largest_down: 0 };
  try {
    let message = negentropy.initiate();
    const maxRounds = spec.max_rounds || 200;
    while (message !== null) {
      if (result.rounds >= maxRounds) throw new Error(`no end after ${maxRounds} rounds`);
      result.rounds += 1;
      result.bytes_up += message.length / 2;
      result.largest_up = Math.max(result.largest_up, message.length / 2);
      const answer = await peer.send(message);
      result.bytes_down += answer.length / 2;
      result.largest_down = Math.max(result.largest_down, answer.length / 2);
      message = negentropy.reconcile(answer, (id) => result.have.push(id), (id) => result.need.push(id));
    }
  } finally {
    peer.close();
  }
  return result;
}

async function main() {
  const path = process.argv[2];
  let spec;
  try {
    spec = JSON.parse(path ? readFileSync(path, 'utf8') : readFileSync(0, 'utf8'));
  } catch (error) {
    fail(`cannot read the spec: ${error.message}`);
  }
  if (!spec.nostr_tools || !Array.isArray(spec.cases)) fail('the spec needs "nostr_tools" and "cases"');
  const nip77 = await import(pathToFileURL(join(spec.nostr_tools, 'lib', 'esm', 'nip77.js')).href);
  const results = {};
  let failed = false;
  await Promise.all(spec.cases.map(async (c) => {
    try {
      results[c.name] = await runCase(nip77, c);
    } catch (error) {
      failed = true;
      results[c.name] = { error: String(error && error.message ? error.message : error) };
    }
  }));
  process.stdout.write(JSON.stringify({ results }) + '\n');
  process.exitCode = failed ? 1 : 0;
}

main();
