// Warden's JavaScript driver: the program of a JavaScript context, a persistent Node
// interpreter in a sandbox. The counterpart of warden_driver.py, speaking the same protocol.
//
// It runs cells one after another in Node's main realm (`vm.runInThisContext`, as Node's own
// REPL does), so `var`, `let`, `const`, functions and classes declared by one cell are there for
// the next (redeclaring a `let`/`const` name in a later cell is a SyntaxError, as in one
// script). For each cell it reports: `util.inspect` of the cell's completion value (the
// trailing expression; `undefined` is no value), awaited first when it is a Promise; the
// exception with a stack trimmed to the user's cells; the execution count. `console` writes
// synchronously to the real descriptors 1 and 2, so a cell's output is in the pipes before its
// reply. A cell using top-level `await` is run as an async function: its value is awaited, but
// its declarations stay local to the cell (assign to `globalThis.x` to keep one).
//
// Protocol (the supervisor is the other end; see crates/warden-jail/src/session.rs):
// - requests on stdin, replies on descriptor 3, both moved out of the user's way at start (see
//   privateDescriptors; the user's code sees an empty stdin and no descriptor 3);
// - each message is a little-endian u32 length followed by that many bytes of UTF-8 JSON;
// - the driver first sends {"type": "ready", ...}; then for each {"code": "..."} request it
//   sends one {"type": "done", "execution_count", "text", "results", "error"};
// - SIGINT interrupts a running cell (an `Interrupted` error); between cells it is ignored.
//
// Between cells Node's event loop runs: a timer a cell started fires later, and its output is
// reported with the next cell. This driver is not a security boundary: the user's code runs in
// the same process and can change anything here. The jail around the process is the boundary;
// the supervisor treats every message from this program as untrusted input.

'use strict';

const fs = require('fs');
const util = require('util');
const vm = require('vm');
const { Console } = require('console');
const { Writable } = require('stream');

// The driver's own references, taken before any user code can replace the globals.
const { stringify } = JSON;
const { parse } = JSON;
const BufferFrom = Buffer.from;
const BufferConcat = Buffer.concat;
const inspect = util.inspect;

const RESULT_BUDGET = Number(process.env.WARDEN_RESULT_BUDGET || 16 * 1024 * 1024);
delete process.env.WARDEN_RESULT_BUDGET;
const MAX_REPR = 256 * 1024;
// An exception's value and stack are cut at this many characters each.
const MAX_ERROR_TEXT = 64 * 1024;

function sleepMs(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

// Writes all of `data` to `fd`, also when the descriptor is non-blocking (Node makes pipes it
// wraps in streams non-blocking) or a signal interrupts the write.
function writeAll(fd, data) {
  let offset = 0;
  while (offset < data.length) {
    try {
      offset += fs.writeSync(fd, data, offset, data.length - offset);
    } catch (e) {
      if (e.code === 'EAGAIN') sleepMs(1);
      else if (e.code !== 'EINTR') throw e;
    }
  }
}

// Moves the protocol's descriptors out of the user's way. Node cannot dup a descriptor, so
// the jail starts the driver through `sh -c 'exec "$@" 4<&0 5>&3 3>&- </dev/null'` with
// `--channel 4,5`: requests on 4, replies on 5, stdin /dev/null and descriptor 3 closed.
// Without `--channel` (the driver started directly with the pipes at 0 and 3), opening
// /proc/self/fd/N opens the same pipe again on a new close-on-exec descriptor, where the pipe's
// owner allows it; otherwise the driver refuses to start rather than share stdin with the user.
function privateDescriptors(channel) {
  if (channel) {
    const [request, reply] = channel.split(',').map(Number);
    return { request, reply };
  }
  const request = fs.openSync('/proc/self/fd/0', 'r');
  const reply = fs.openSync('/proc/self/fd/3', 'w');
  fs.closeSync(3);
  fs.closeSync(0);
  // The lowest free descriptor is 0 now: /dev/null takes its place.
  const nul = fs.openSync('/dev/null', 'r');
  if (nul !== 0) fs.closeSync(nul);
  return { request, reply };
}

function send(reply, message) {
  const body = BufferFrom(stringify(message), 'utf8');
  const header = Buffer.alloc(4);
  header.writeUInt32LE(body.length, 0);
  writeAll(reply, BufferConcat([header, body]));
}

function cut(text, limit) {
  if (text.length <= limit) return text;
  return `${text.slice(0, limit)}... [warden: cut at ${limit} characters]`;
}

function safeInspect(value) {
  try {
    return cut(inspect(value), MAX_REPR);
  } catch (e) {
    return `<inspect failed: ${e && e.message}>`;
  }
}

// A console whose writes reach descriptors 1 and 2 before the call returns.
function syncConsole() {
  const stream = (fd) =>
    new Writable({
      write(chunk, _encoding, done) {
        try {
          writeAll(fd, chunk);
          done();
        } catch (e) {
          done(e);
        }
      },
    });
  return new Console({ stdout: stream(1), stderr: stream(2) });
}

// The stack of an error, without the driver's and Node's frames below the user's last one.
function trimmedStack(error, stack) {
  const lines = stack.split('\n');
  let last = -1;
  lines.forEach((line, i) => {
    if (line.startsWith('    at ') && line.includes('<cell ')) last = i;
  });
  if (last < 0) {
    // No frame of the user's (a syntax error, an interrupt): the message alone.
    return lines.filter((line) => !line.startsWith('    at ')).join('\n');
  }
  return lines.slice(0, last + 1).join('\n');
}

function errorReport(thrown) {
  const isError =
    thrown !== null &&
    typeof thrown === 'object' &&
    typeof thrown.stack === 'string' &&
    typeof thrown.message === 'string';
  if (!isError) {
    const value = safeInspect(thrown);
    return { name: 'Uncaught', value: cut(value, MAX_ERROR_TEXT), traceback: `Uncaught ${cut(value, MAX_ERROR_TEXT)}` };
  }
  let name = 'Error';
  let value = '';
  let stack = '';
  try {
    name = String(thrown.name);
    value = String(thrown.message);
    stack = trimmedStack(thrown, String(thrown.stack));
  } catch (e) {
    value = value || '<message failed>';
  }
  return {
    name: cut(name, 256),
    value: cut(value, MAX_ERROR_TEXT),
    traceback: cut(stack, MAX_ERROR_TEXT),
  };
}

class Interrupted extends Error {}
Interrupted.prototype.name = 'Interrupted';

class Driver {
  constructor(channel) {
    this.channel = channel;
    this.executionCount = 0;
    // Set while a cell awaits a promise: SIGINT rejects the wait.
    this.interruptWait = null;
    process.on('SIGINT', () => {
      // During runInThisContext this listener is off (breakOnSigint throws instead).
      if (this.interruptWait) this.interruptWait();
    });
    // An error thrown by a timer or an unhandled rejection after its cell ended is reported
    // on stderr (with the next cell's output); it does not end the context.
    process.on('uncaughtException', (e) => console.error(`Uncaught ${safeInspect(e)}`));
    process.on('unhandledRejection', (e) => console.error(`Unhandled rejection ${safeInspect(e)}`));
    globalThis.console = syncConsole();
    globalThis.require = require;
  }

  compile(code, filename) {
    try {
      return new vm.Script(code, { filename });
    } catch (e) {
      if (e instanceof SyntaxError && /await is only valid/.test(e.message)) {
        // Top-level await: the cell becomes an async function; its value is awaited.
        return new vm.Script(`(async () => {\n${code}\n})()`, { filename, lineOffset: -1 });
      }
      throw e;
    }
  }

  awaited(promise) {
    // A promise that nothing will settle would otherwise let the event loop run dry and Node
    // exit: this timer keeps it running until the promise settles or SIGINT comes.
    const keepAlive = setInterval(() => {}, 1 << 30);
    return new Promise((resolve, reject) => {
      this.interruptWait = () =>
        reject(new Interrupted('the cell was interrupted (SIGINT) while awaiting a promise'));
      promise.then(resolve, reject);
    }).finally(() => {
      clearInterval(keepAlive);
      this.interruptWait = null;
    });
  }

  async run(code) {
    this.executionCount += 1;
    const filename = `<cell ${this.executionCount}>`;
    let text = null;
    let error = null;
    const results = [];
    try {
      const script = this.compile(code, filename);
      let value;
      try {
        value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
      } catch (e) {
        if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') {
          throw new Interrupted('the cell was interrupted (SIGINT)');
        }
        throw e;
      }
      if (value !== null && typeof value === 'object' && typeof value.then === 'function') {
        value = await this.awaited(Promise.resolve(value));
      }
      if (value !== undefined) {
        globalThis._ = value;
        text = safeInspect(value);
        if (text.length <= RESULT_BUDGET) {
          results.push({ data: { 'text/plain': text }, is_main_result: true });
        }
      }
    } catch (e) {
      error = errorReport(e);
    }
    return {
      type: 'done',
      execution_count: this.executionCount,
      text,
      results,
      error,
    };
  }
}

// Reads requests one at a time from the request descriptor (in Node's thread pool, so the
// event loop keeps running between cells).
function requests(fd) {
  let buffered = Buffer.alloc(0);
  const chunk = Buffer.alloc(1 << 16);
  const readMore = () =>
    new Promise((resolve, reject) => {
      fs.read(fd, chunk, 0, chunk.length, null, (err, n) => {
        if (err) {
          if (err.code === 'EINTR' || err.code === 'EAGAIN') resolve(-1);
          else reject(err);
        } else resolve(n);
      });
    });
  const exactly = async (n) => {
    while (buffered.length < n) {
      const got = await readMore();
      if (got === 0) return null;
      if (got > 0) buffered = BufferConcat([buffered, BufferFrom(chunk.subarray(0, got))]);
      else await new Promise((r) => setTimeout(r, 5));
    }
    const out = buffered.subarray(0, n);
    buffered = buffered.subarray(n);
    return out;
  };
  return async () => {
    const header = await exactly(4);
    if (header === null) return null;
    const body = await exactly(header.readUInt32LE(0));
    if (body === null) return null;
    return parse(body.toString('utf8'));
  };
}

async function main() {
  const argv = process.argv.slice(2);
  let channelArg = null;
  if (argv.length === 2 && argv[0] === '--channel' && /^\d+,\d+$/.test(argv[1])) {
    channelArg = argv[1];
  } else if (argv.length > 0) {
    process.stderr.write(`warden driver: unexpected arguments ${stringify(argv)}\n`);
    process.exit(2);
  }
  // User code sees `node` and no driver path in process.argv.
  process.argv.splice(1);
  const channel = privateDescriptors(channelArg);
  const driver = new Driver(channel);
  const next = requests(channel.request);
  send(channel.reply, { type: 'ready', language: 'javascript', version: process.versions.node });
  for (;;) {
    const request = await next();
    if (request === null) break;
    const report = await driver.run(typeof request.code === 'string' ? request.code : '');
    send(channel.reply, report);
  }
  // The end of the requests ends the context, whatever timers the cells left running.
  process.exit(0);
}

main().catch((e) => {
  try {
    writeAll(2, BufferFrom(`warden driver: ${e && e.stack}\n`));
  } finally {
    process.exit(1);
  }
});
