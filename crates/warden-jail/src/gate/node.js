// Warden's start gate for node (see crates/warden-jail/src/gate.rs): node loads this file
// (`NODE_OPTIONS=--require <this file>`) before its program's file, which does not exist yet
// when node starts. It says that node reached the gate (one byte on the ready descriptor,
// then closed), waits for the start byte on the start descriptor (a blocking read), closes
// it, and returns: node then loads the program, which the supervisor wrote before it sent
// the byte. A cold run's byte is already there; a pooled run's comes with its code.
//
// What the program observes is what a cold run shows: the gate's variables and NODE_OPTIONS
// are gone from process.env (a child process does not load this file; a worker thread, which
// preloads it too, gets a copy of that environment and so does nothing but leave the caches),
// both descriptors are closed, this file is not in the loader's caches, and nothing of it is
// left on the stack or in the globals. Only clocks that count from node's own start
// (process.uptime(), performance.now()) include a pooled sandbox's wait.
//
// Before it waits it loads the built-in modules that a program's first write to stdout or
// stderr loads (in a sandbox both are pipes: a net.Socket over the stream classes), so that a
// pooled run does not compile them after its code came (≈ 2.3 ms, docs/benchmarks.md,
// session 30); a cold run loads them here too, so process.moduleLoadList is the same in both
// (it lists them even for a program that never writes).
'use strict';
(function gate() {
  const env = process.env;
  const start = env.WARDEN_GATE_START;
  const ready = env.WARDEN_GATE_READY;
  // The loader's caches name this file: its module and the resolution of its path.
  delete require.cache[__filename];
  const paths = module.constructor._pathCache;
  for (const request of Object.keys(paths)) {
    if (paths[request] === __filename) {
      delete paths[request];
    }
  }
  if (start === undefined || ready === undefined) {
    return;
  }
  delete env.WARDEN_GATE_START;
  delete env.WARDEN_GATE_READY;
  if (env.NODE_OPTIONS === '--require ' + __filename) {
    delete env.NODE_OPTIONS;
  }
  const fs = require('fs');
  require('stream');
  require('net');
  const readyFd = Number(ready);
  const startFd = Number(start);
  try {
    // A cold run's supervisor does not read it (and may have closed it: EPIPE, node ignores
    // SIGPIPE); a pooled one's waits for it.
    fs.writeSync(readyFd, 'r');
  } catch (e) {}
  try {
    fs.closeSync(readyFd);
  } catch (e) {}
  const byte = new Uint8Array(1);
  for (;;) {
    try {
      // One byte, or end of file when the sandbox is torn down unused (then init kills node).
      fs.readSync(startFd, byte, 0, 1, null);
      break;
    } catch (e) {
      // libuv does not retry a read that a signal interrupted.
      if (e.code !== 'EINTR') {
        break;
      }
    }
  }
  try {
    fs.closeSync(startFd);
  } catch (e) {}
})();
