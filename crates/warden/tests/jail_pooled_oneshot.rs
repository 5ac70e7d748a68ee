//! Pooled one-shots are indistinguishable from cold ones: a corpus of programs, each run cold
//! (`Backend::exec`) and in a held sandbox (`Backend::hold`, then `HeldRun::run`) of the same
//! plan, must give equal results — every observable the programs print (argv, `__file__`,
//! `__name__`, tracebacks, stdin, atexit, signals, threads, buffering, environment, working
//! directory, resource limits, `sys.modules`, descriptors, the program's file, the mounts,
//! the isolation probe), their exit codes, signals, reasons and artifacts. The same for node
//! (`process.argv`, `execArgv`, `require.main`, module paths, `process.env`, descriptors,
//! uncaught exceptions, timers and the event loop, worker threads, child processes, …).

mod common;

use std::sync::Arc;
use std::time::Duration;
use warden_engine::import_guard::ImportGuard;
use warden_engine::{Backend, BackendError, ExecPlan};
use warden_jail::JailBackend;
use warden_types::{ExecResult, Language, Limits, Reason};

/// The tests that hold sandboxes in this process take turns: one kills the held sandboxes of
/// this process's helpers, which must not be the other's.
static IN_THIS_PROCESS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn backend() -> Arc<JailBackend> {
    Arc::new(JailBackend::new(common::jail_settings()))
}

/// A one-shot of the default profile's kind: Python under the run-time import guard.
fn plan(code: &str, stdin: &str, timeout: Duration) -> ExecPlan {
    ExecPlan {
        import_guard: Some(ImportGuard {
            allowed: [
                "atexit",
                "inspect",
                "json",
                "os",
                "resource",
                "signal",
                "socket",
                "subprocess",
                "sys",
                "threading",
                "time",
                "traceback",
            ]
            .map(String::from)
            .to_vec(),
        }),
        profile: "standard".into(),
        language: Language::new("python").unwrap(),
        command: vec!["python3".into()],
        file_name: "main.py".into(),
        code: code.into(),
        args: vec![],
        stdin: stdin.as_bytes().to_vec(),
        env: Default::default(),
        cwd: None,
        limits: Limits {
            timeout,
            memory_mb: 128,
            max_pids: 32,
            cpus: 1.0,
            max_output_bytes: 1 << 20,
            max_file_size_bytes: 1 << 20,
            workspace_mb: 16,
            max_artifacts: 4,
            max_artifact_bytes: 1 << 20,
        },
        network_enabled: false,
        egress: Default::default(),
        image: None,
        container_runtime: None,
    }
}

/// A JavaScript one-shot of the built-in runtime (node), with arguments.
fn js_plan(code: &str, stdin: &str, timeout: Duration) -> ExecPlan {
    ExecPlan {
        import_guard: None,
        language: Language::new("javascript").unwrap(),
        command: vec!["node".into()],
        file_name: "main.js".into(),
        args: vec!["first".into(), "sec ond".into()],
        ..plan(code, stdin, timeout)
    }
}

/// What a run shows, without what differs between any two runs (its duration).
fn observed(outcome: Result<ExecResult, BackendError>) -> String {
    match outcome {
        Ok(r) => format!(
            "exit {:?} signal {:?} reason {:?}\n--- stdout{}\n{}\n--- stderr{}\n{}\n--- artifacts {:?} skipped {:?}",
            r.exit_code,
            r.signal,
            r.reason,
            if r.stdout_truncated {
                " (truncated)"
            } else {
                ""
            },
            r.stdout,
            if r.stderr_truncated {
                " (truncated)"
            } else {
                ""
            },
            r.stderr,
            r.artifacts
                .iter()
                .map(|a| (a.name.clone(), a.size))
                .collect::<Vec<_>>(),
            r.skipped_artifacts,
        ),
        Err(e) => format!("error: {e}"),
    }
}

/// The corpus: (name, code, stdin, timeout in seconds).
const CORPUS: &[(&str, &str, &str, u64)] = &[
    (
        "argv, file, name, path, flags",
        r#"import sys
print(sys.argv, __file__, __name__, sys.path, sys.orig_argv)
print(sys.flags, sys.warnoptions, sys._xoptions, sys.executable, sys.prefix)
print(__spec__, __loader__.__class__.__name__, __package__, __builtins__.__name__)
print(sorted(k for k in globals()))"#,
        "",
        10,
    ),
    (
        "traceback with the line's text",
        "def f():\n    return 1 / 0\n\nf()\n",
        "",
        10,
    ),
    ("syntax error", "print('a'\nx = (\n", "", 10),
    (
        "the stack as inspect sees it",
        "import inspect\nprint([(f.filename, f.lineno, f.function, f.code_context) for f in inspect.stack()])",
        "",
        10,
    ),
    (
        "stdin",
        "import sys\nprint(repr(sys.stdin.read()))\nprint(sys.stdin.isatty(), sys.stdin.encoding)",
        "hello\nworld\n\u{e9}",
        10,
    ),
    (
        "no stdin",
        "import sys\nprint(repr(sys.stdin.read()))",
        "",
        10,
    ),
    (
        "atexit and exit code",
        "import atexit, sys\natexit.register(print, 'bye')\nprint('hi')\nsys.exit(3)",
        "",
        10,
    ),
    (
        "signals: dispositions, mask, a signal's death",
        r#"import signal, os
print([str(signal.getsignal(s)) for s in range(1, signal.NSIG) if s not in (signal.SIGKILL, signal.SIGSTOP, 32, 33)])
print(sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
status = dict(l.split(':\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\t' in l)
print({k: status[k].strip() for k in ('SigQ', 'SigPnd', 'ShdPnd', 'SigBlk', 'SigIgn', 'SigCgt')})
os.kill(os.getpid(), signal.SIGTERM)"#,
        "",
        10,
    ),
    (
        "threads",
        r#"import threading
print(threading.active_count(), [t.name for t in threading.enumerate()])
t = threading.Thread(target=print, args=('from a thread',))
t.start(); t.join()"#,
        "",
        10,
    ),
    (
        "buffering and interleaving",
        r#"import sys, os
print(sys.stdout.line_buffering, sys.stdout.write_through, sys.stdout.encoding, sys.stdout.errors)
print(sys.stderr.line_buffering, sys.stderr.encoding, sys.stderr.errors, type(sys.stdout.buffer).__name__)
print(os.isatty(1), os.get_blocking(0), os.get_blocking(1))
for i in range(3):
    print('out', i)
    print('err', i, file=sys.stderr)
sys.stdout.write('no newline')"#,
        "",
        10,
    ),
    (
        "environment",
        r#"import os
print(sorted(os.environ.items()))
print(sorted(open('/proc/self/environ', 'rb').read().split(b'\0')))"#,
        "",
        10,
    ),
    (
        "working directory, umask, ids, limits",
        r#"import os, resource
print(os.getcwd(), oct(os.umask(0o22)), os.getuid(), os.geteuid(), os.getgid(), os.getgroups())
print(os.getpid(), os.getppid(), os.getpgrp(), os.getsid(0), os.uname().nodename)
print([(r, resource.getrlimit(getattr(resource, r))) for r in sorted(dir(resource)) if r.startswith('RLIMIT_')])
print(os.sched_getaffinity(0) == os.sched_getaffinity(1), os.nice(0))"#,
        "",
        10,
    ),
    (
        "sys.modules",
        "import sys\nprint(sorted(sys.modules))\nprint(sorted(sys.builtin_module_names) == sorted(sys.builtin_module_names))\nprint(sys.path_importer_cache.keys())",
        "",
        10,
    ),
    (
        "descriptors, of the program and of a child",
        r#"import os, subprocess
def kinds(pid):
    d = f'/proc/{pid}/fd'
    seen = []
    for n in os.listdir(d):
        try:
            seen.append((int(n), os.readlink(f'{d}/{n}').split(':')[0]))
        except FileNotFoundError:
            pass  # the listing's own
    return sorted(seen)
print(kinds(os.getpid()))
print(subprocess.run(['/bin/sh', '-c', 'ls /proc/self/fd'], capture_output=True, text=True).stdout.split())"#,
        "",
        10,
    ),
    (
        "the program's file and the root",
        r#"import os
st = os.stat(__file__)
print(oct(st.st_mode), st.st_uid, st.st_gid, st.st_size, st.st_nlink, st.st_ino)
print(open(__file__).read() == __loader__.get_source('__main__'))
print(sorted(os.listdir('/code')), sorted(os.listdir('/')), os.stat('/code').st_ino)
v = os.statvfs('/')
print(v.f_bsize, v.f_blocks, v.f_bfree, v.f_files, v.f_ffree, v.f_flag)
w = os.statvfs('/workspace')
print(w.f_blocks, w.f_bfree, w.f_files, w.f_ffree, sorted(os.listdir('/workspace')), sorted(os.listdir('/tmp')))"#,
        "",
        10,
    ),
    (
        "the mounts",
        r#"for line in open('/proc/self/mountinfo'):
    fields = line.split()
    cut = fields.index('-')
    # The sandbox's host uid, in the options, differs between any two sandboxes.
    options = [o for o in fields[cut + 3].split(',') if not o.startswith(('uid=', 'gid='))]
    print(fields[3:6], fields[cut + 1:cut + 3], options)"#,
        "",
        10,
    ),
    (
        "the isolation probe",
        r#"import os, socket
status = open('/proc/self/status').read()
fields = dict(l.split(':\t', 1) for l in status.splitlines() if ':\t' in l)
def reach(host, port):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port))
        return 'connected'
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()
print(os.getuid(), {k: fields[k].strip() for k in ('Seccomp', 'Seccomp_filters', 'NoNewPrivs', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')},
      [n for _, n in socket.if_nameindex()], reach('127.0.0.1', 22), reach('1.1.1.1', 53),
      os.path.exists('/root'), os.path.exists('/home'), os.access('/usr', os.W_OK))"#,
        "",
        10,
    ),
    (
        "an artifact",
        "import os\nos.makedirs('/workspace/output', exist_ok=True)\nopen('/workspace/output/a.txt', 'w').write('x' * 10)\nprint(os.listdir('/workspace/output'))",
        "",
        10,
    ),
    (
        "a refused import (the import guard)",
        "print('before')\nimport ctypes\nprint('after')",
        "",
        10,
    ),
    (
        "a refused import built at run time",
        "m = 'c' + 'types'\n__import__(m)",
        "",
        10,
    ),
    ("the time limit", "while True:\n    pass", "", 1),
    (
        "output from a double-forked child after the program",
        "import os\nif os.fork() == 0:\n    if os.fork() == 0:\n        import time; time.sleep(0.3); print('late')\n    os._exit(0)\nprint('main')",
        "",
        10,
    ),
];

/// The JavaScript corpus: (name, code, stdin, timeout in seconds).
const JS_CORPUS: &[(&str, &str, &str, u64)] = &[
    (
        "argv, execArgv, the main module, module paths",
        r##"const Module = require('module');
console.log(process.argv, process.argv0, process.execArgv, process.execPath, process.title);
console.log(require.main === module, __filename, __dirname, module.id, module.filename, module.paths);
console.log(module.parent, module.children.length, module.loaded, Object.keys(require.cache));
console.log(Object.keys(Module._pathCache), Module.globalPaths, process.mainModule === module);
console.log(typeof require.resolve, require.resolve.paths('x'), process.config.variables.node_prefix);"##,
        "",
        10,
    ),
    (
        "globals and the internal modules loaded",
        r##"console.log(Object.getOwnPropertyNames(globalThis).sort());
console.log([...process.moduleLoadList].sort());
console.log(Object.keys(process).sort());
console.log(process.features, process.release.name, process.versions.node, Error.stackTraceLimit);"##,
        "",
        10,
    ),
    (
        "an uncaught exception and its stack",
        "function f() {\n  throw new Error('boom');\n}\n\nf();\n",
        "",
        10,
    ),
    ("a syntax error", "console.log('a'\nlet x = (;\n", "", 10),
    (
        "an unhandled rejection",
        "Promise.reject(new TypeError('nope'));\nsetTimeout(() => console.log('never'), 50);",
        "",
        10,
    ),
    (
        "the stack as Error sees it",
        "console.log(new Error('here').stack);\nconsole.log(require('util').inspect(module, { depth: 0 }));",
        "",
        10,
    ),
    (
        "stdin read at once",
        "const fs = require('fs');\nconsole.log(JSON.stringify(fs.readFileSync(0, 'utf8')));\nconsole.log(process.stdin.isTTY, require('tty').isatty(0));",
        "hello\nworld\n\u{e9}",
        10,
    ),
    (
        "stdin as a stream",
        "let got = '';\nprocess.stdin.setEncoding('utf8');\nprocess.stdin.on('data', d => got += d);\nprocess.stdin.on('end', () => console.log(JSON.stringify(got), process.stdin.constructor.name));",
        "line one\nline two\n",
        10,
    ),
    (
        "no stdin",
        "const fs = require('fs');\nconsole.log(JSON.stringify(fs.readFileSync(0, 'utf8')));",
        "",
        10,
    ),
    (
        "exit handlers and exit code",
        "process.on('beforeExit', c => console.log('beforeExit', c));\nprocess.on('exit', c => console.log('exit', c));\nconsole.log('hi');\nprocess.exitCode = 3;",
        "",
        10,
    ),
    (
        "process.exit from a timer",
        "setTimeout(() => { console.error('leaving'); process.exit(7); }, 10);\nconsole.log('waiting');",
        "",
        10,
    ),
    (
        "signals: listeners, dispositions, a signal's death",
        r##"const fs = require('fs');
const status = Object.fromEntries(fs.readFileSync('/proc/self/status', 'utf8').split('\n').filter(l => l.includes(':\t')).map(l => l.split(':\t')));
console.log(['SigQ', 'SigPnd', 'ShdPnd', 'SigBlk', 'SigIgn', 'SigCgt'].map(k => [k, status[k].trim()]));
console.log(process.listenerCount('SIGINT'), process.listenerCount('SIGTERM'), process.eventNames());
process.kill(process.pid, 'SIGTERM');
setTimeout(() => console.log('survived'), 1000);"##,
        "",
        10,
    ),
    (
        "a signal handler",
        "process.on('SIGUSR2', s => { console.log('got', s); process.exit(0); });\nprocess.kill(process.pid, 'SIGUSR2');\nsetTimeout(() => {}, 5000);",
        "",
        10,
    ),
    (
        "timers, ticks, immediates and promises in order",
        r##"const order = [];
const t0 = process.hrtime.bigint();
// A zero timeout against an immediate is a race in node itself, except in an I/O callback.
require('fs').readFile(__filename, () => {
  setTimeout(() => order.push('timeout 0'), 0);
  setImmediate(() => order.push('immediate'));
});
process.nextTick(() => order.push('tick'));
Promise.resolve().then(() => order.push('promise'));
queueMicrotask(() => order.push('microtask'));
setTimeout(() => {
  const waited = Number(process.hrtime.bigint() - t0) / 1e6;
  // node's timers count whole milliseconds: a 200 ms timer on time may have waited 199.01.
  console.log(order, waited >= 199);
  const i = setInterval(() => { order.push('interval'); if (order.length > 7) { clearInterval(i); console.log(order); } }, 20);
}, 200);
order.push('sync');"##,
        "",
        10,
    ),
    (
        "a timer set at the start waits its whole delay",
        // Node's timers count whole milliseconds of the monotonic clock, from a start that
        // is truncated too: a timer that waited its 300 ms by that count may have waited
        // 299.01 by a finer clock (seen 3 times in 32 runs of this file under load, cold).
        // A loop time left stale by a pooled node's wait at the gate would show far more.
        "const start = performance.now();\nsetTimeout(() => console.log(performance.now() - start >= 299), 300);",
        "",
        10,
    ),
    (
        "buffering and interleaving",
        r##"console.log(process.stdout.isTTY, process.stdout.constructor.name, process.stdout.writableHighWaterMark, process.stdout._type);
console.log(process.stderr.isTTY, process.stderr.constructor.name, process.stdin.constructor.name);
for (let i = 0; i < 3; i++) { console.log('out', i); console.error('err', i); }
process.stdout.write('no newline');"##,
        "",
        10,
    ),
    (
        // (Not ended by process.exit: what node has not written yet of a pipe's output is
        // then lost, however much the reader took meanwhile, cold or pooled.)
        "a large output, flushed at the end",
        "process.stdout.write('x'.repeat(200000) + '\\n');\nprocess.stderr.write('e'.repeat(100000));",
        "",
        10,
    ),
    (
        "environment",
        r##"const fs = require('fs');
console.log(Object.entries(process.env).sort());
console.log(fs.readFileSync('/proc/self/environ', 'latin1').split('\0').sort());"##,
        "",
        10,
    ),
    (
        "working directory, umask, ids, limits",
        r##"const os = require('os'), fs = require('fs');
console.log(process.cwd(), process.umask().toString(8), process.getuid(), process.geteuid(), process.getgid(), process.getgroups());
console.log(process.pid, process.ppid, os.hostname(), os.userInfo(), os.homedir(), os.tmpdir());
console.log(fs.readFileSync('/proc/self/limits', 'utf8'));
console.log(os.availableParallelism(), os.cpus().length, os.constants.priority.PRIORITY_NORMAL === os.getPriority());"##,
        "",
        10,
    ),
    (
        "descriptors, of the program and of a child",
        r##"const fs = require('fs'), cp = require('child_process');
const kinds = pid => fs.readdirSync(`/proc/${pid}/fd`).flatMap(n => { try { return [[Number(n), fs.readlinkSync(`/proc/${pid}/fd/${n}`).split(':')[0]]]; } catch { return []; } }).sort((a, b) => a[0] - b[0]);
console.log(kinds(process.pid));
console.log(cp.execFileSync('/bin/sh', ['-c', 'ls /proc/self/fd'], { encoding: 'utf8' }).split(/\s+/));"##,
        "",
        10,
    ),
    (
        "a child node and a worker thread",
        r##"const cp = require('child_process');
const { Worker } = require('worker_threads');
console.log(cp.execFileSync(process.execPath, ['-e', 'console.log(process.env.NODE_OPTIONS, process.execArgv, Object.keys(require.cache), Object.keys(process.env).sort())'], { encoding: 'utf8' }));
const w = new Worker("const fs = require('fs'); require('worker_threads').parentPort.postMessage([Object.keys(require.cache), Object.keys(process.env).sort(), fs.readdirSync('/proc/self/fd').length])", { eval: true });
w.on('message', m => console.log('worker', m));
w.on('exit', c => console.log('worker exit', c));"##,
        "",
        10,
    ),
    (
        "the program's file and the root",
        r##"const fs = require('fs');
const st = fs.statSync(__filename);
console.log(st.mode.toString(8), st.uid, st.gid, st.size, st.nlink, st.ino);
console.log(fs.readdirSync('/code'), fs.readdirSync('/').sort(), fs.statSync('/code').ino, fs.readdirSync('/warden').sort());
const v = fs.statfsSync('/');
console.log(v.bsize, v.blocks, v.bfree, v.files, v.ffree);
const w = fs.statfsSync('/workspace');
console.log(w.blocks, w.bfree, w.files, w.ffree, fs.readdirSync('/workspace').sort(), fs.readdirSync('/tmp').sort());"##,
        "",
        10,
    ),
    (
        "the mounts",
        r##"for (const line of require('fs').readFileSync('/proc/self/mountinfo', 'utf8').trim().split('\n')) {
  const f = line.split(' ');
  const cut = f.indexOf('-');
  // The sandbox's host uid, in the options, differs between any two sandboxes.
  console.log(f.slice(3, 6), f.slice(cut + 1, cut + 3), f[cut + 3].split(',').filter(o => !o.startsWith('uid=') && !o.startsWith('gid=')));
}"##,
        "",
        10,
    ),
    (
        "the isolation probe",
        r##"const fs = require('fs'), net = require('net'), os = require('os');
const status = Object.fromEntries(fs.readFileSync('/proc/self/status', 'utf8').split('\n').filter(l => l.includes(':\t')).map(l => l.split(':\t')));
const reach = (host, port) => new Promise(done => {
  const s = net.connect({ host, port, timeout: 2000 });
  s.on('connect', () => { s.destroy(); done('connected'); });
  s.on('timeout', () => { s.destroy(); done('timeout'); });
  s.on('error', e => done(e.code));
});
(async () => {
  console.log(process.getuid(), ['Seccomp', 'Seccomp_filters', 'NoNewPrivs', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'].map(k => [k, status[k].trim()]),
    Object.keys(os.networkInterfaces()), await reach('127.0.0.1', 22), await reach('1.1.1.1', 53),
    fs.existsSync('/root'), fs.existsSync('/home'), (() => { try { fs.accessSync('/usr', fs.constants.W_OK); return true; } catch { return false; } })());
})();"##,
        "",
        10,
    ),
    (
        "an artifact",
        "const fs = require('fs');\nfs.mkdirSync('/workspace/output', { recursive: true });\nfs.writeFileSync('/workspace/output/a.txt', 'x'.repeat(10));\nconsole.log(fs.readdirSync('/workspace/output'));",
        "",
        10,
    ),
    ("the time limit", "for (;;) {}", "", 1),
    (
        "output from a detached child after the program",
        "const cp = require('child_process');\ncp.spawn('/bin/sh', ['-c', 'sleep 0.3; echo late'], { detached: true, stdio: 'inherit' }).unref();\nconsole.log('main');",
        "",
        10,
    ),
];

#[test]
fn a_pooled_one_shot_and_a_cold_one_are_indistinguishable() {
    require_root!();
    let _turn = IN_THIS_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    compare_pooled_and_cold(CORPUS, plan, |name| name.contains("refused import"));
}

#[test]
fn a_pooled_javascript_one_shot_and_a_cold_one_are_indistinguishable() {
    require_root!();
    prerequisite!(common::missing_path("/usr/bin/node", "scripts/setup.sh"));
    let _turn = IN_THIS_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    compare_pooled_and_cold(JS_CORPUS, js_plan, |_| false);
}

/// The gate loads what a first write to stdout needs before it waits, so that a pooled run
/// does not compile it after its code came; a cold run passes the same gate.
#[test]
fn the_node_gate_loads_the_standard_streams_modules_before_the_program() {
    require_root!();
    prerequisite!(common::missing_path("/usr/bin/node", "scripts/setup.sh"));
    let _turn = IN_THIS_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    common::runtime().block_on(async {
        // Read before anything is written: the arguments are evaluated before the first write.
        let code = "console.log(['net', 'stream'].map(m => process.moduleLoadList.includes('NativeModule ' + m)))";
        let b = backend();
        let plan = js_plan(code, "", Duration::from_secs(10));
        let cold = b.exec(plan.clone()).await.unwrap();
        let held = b.hold(&js_plan("", "", Duration::from_secs(10))).await.unwrap();
        let pooled = held.run(plan, None).await.unwrap();
        for r in [cold, pooled] {
            assert_eq!((r.stdout.as_str(), r.exit_code), ("[ true, true ]\n", Some(0)), "{r:?}");
        }
    });
}

/// Runs each program of `corpus` cold and in a held sandbox of the same plan (`plan_of`), and
/// fails with every difference. `refused`: the programs that end without a result (an error).
fn compare_pooled_and_cold(
    corpus: &[(&str, &str, &str, u64)],
    plan_of: fn(&str, &str, Duration) -> ExecPlan,
    refused: fn(&str) -> bool,
) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let b = backend();
        b.check(&plan_of("", "", Duration::from_secs(10))).unwrap();
        let mut differ = Vec::new();
        for (name, code, stdin, timeout) in corpus {
            let full = plan_of(code, stdin, Duration::from_secs(*timeout));
            let cold = observed(b.exec(full.clone()).await);
            assert_eq!(cold.starts_with("error:"), refused(name), "{name}: {cold}");
            // Held with the profile's default timeout: a request's own comes with its code.
            let held = b
                .hold(&plan_of("", "", Duration::from_secs(10)))
                .await
                .unwrap_or_else(|e| panic!("{name}: not held: {e}"));
            assert!(held.alive() && held.fits(&full), "{name}");
            let pooled = observed(held.run(full, None).await);
            if cold != pooled {
                differ.push(format!(
                    "=== {name}\n--- cold:\n{cold}\n--- pooled:\n{pooled}"
                ));
            } else {
                eprintln!("=== {name}: equal\n{cold}");
            }
        }
        assert!(differ.is_empty(), "{}", differ.join("\n"));
    });
}

trait Exec {
    async fn exec(&self, plan: ExecPlan) -> Result<ExecResult, BackendError>;
}

impl Exec for Arc<JailBackend> {
    async fn exec(&self, plan: ExecPlan) -> Result<ExecResult, BackendError> {
        Backend::exec(self.as_ref(), plan, None).await
    }
}

#[test]
fn a_held_sandbox_dropped_unused_leaves_nothing_and_a_killed_one_is_not_alive() {
    require_root!();
    let _turn = IN_THIS_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let b = backend();
        let template = plan("", "", Duration::from_secs(10));
        let held = b.hold(&template).await.unwrap();
        assert!(held.alive());
        assert_eq!(pooled_helpers().len(), 1);
        drop(held);
        // Its helper sees the end of its input, tears the sandbox down and exits (reaped in
        // the background); the next helper is another process.
        let mut left = 1;
        for _ in 0..200 {
            left = pooled_helpers()
                .into_iter()
                .filter(|pid| running(*pid))
                .count();
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(left, 0, "a dropped held sandbox's helper still runs");
        // Its interpreter waits as the sandbox user's program in the sandbox's cgroup: kill
        // every such run, as an operator (or the OOM killer) might; the held run notices.
        let held = b.hold(&template).await.unwrap();
        let cgroups = warden_jail::cgroup::Hierarchy::detect().unwrap();
        let mut alive = true;
        for _ in 0..100 {
            for helper in pooled_helpers() {
                cgroups.kill_runs_of(helper);
            }
            alive = held.alive();
            if !alive {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            !alive,
            "a held sandbox whose processes were killed still says alive"
        );
        let r = held
            .run(plan("print(1)", "", Duration::from_secs(5)), None)
            .await;
        assert!(
            !matches!(&r, Ok(r) if r.reason == Reason::Exited && r.stdout == "1\n"),
            "{r:?}"
        );
    });
}

#[test]
fn a_run_streams_its_output_to_a_caller_that_follows_it_and_returns_it_to_every_caller() {
    require_root!();
    let _turn = IN_THIS_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    common::runtime().block_on(async {
        let b = backend();
        let code = "import sys, time\nprint('a', flush=True)\ntime.sleep(0.3)\nprint('b', file=sys.stderr)\nprint('c')";
        let template = plan("", "", Duration::from_secs(10));
        // Followed: the output comes as events while the program runs, before its result.
        let held = b.hold(&template).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        let run = tokio::spawn(held.run(plan(code, "", Duration::from_secs(10)), Some(tx)));
        let first = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert!(
            matches!(&first, Ok(Some(warden_types::ExecEvent::Stdout { .. }))),
            "{first:?}"
        );
        assert!(!run.is_finished(), "the first output came only with the result");
        let followed = run.await.unwrap().unwrap();
        let (mut out, mut err) = (String::new(), String::new());
        for event in std::iter::once(first.unwrap().unwrap())
            .chain(std::iter::from_fn(|| rx.try_recv().ok()))
        {
            match event {
                warden_types::ExecEvent::Stdout { text, .. } => out.push_str(&text),
                warden_types::ExecEvent::Stderr { text, .. } => err.push_str(&text),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!((out.as_str(), err.as_str()), ("a\nc\n", "b\n"));
        // Not followed (a quiet start: no output frames before the result): the same result.
        let held = b.hold(&template).await.unwrap();
        let quiet = held
            .run(plan(code, "", Duration::from_secs(10)), None)
            .await
            .unwrap();
        // Cold, followed and not (the plan's `quiet_output`): the same again, with events.
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        let cold = Backend::exec(b.as_ref(), plan(code, "", Duration::from_secs(10)), Some(tx))
            .await
            .unwrap();
        let mut streamed = String::new();
        while let Ok(event) = rx.try_recv() {
            if let warden_types::ExecEvent::Stdout { text, .. } = event {
                streamed.push_str(&text);
            }
        }
        assert_eq!(streamed, "a\nc\n");
        let cold_quiet = b.exec(plan(code, "", Duration::from_secs(10))).await.unwrap();
        for r in [&followed, &quiet, &cold, &cold_quiet] {
            assert_eq!(
                (r.stdout.as_str(), r.stderr.as_str(), r.exit_code),
                ("a\nc\n", "b\n", Some(0)),
                "{r:?}"
            );
        }
    });
}

/// This process's children that are helpers in pooled mode.
fn pooled_helpers() -> Vec<u32> {
    pooled_helpers_of(std::process::id())
}

/// `parent`'s helpers in pooled mode: its children, or its fork server's, named after that
/// mode.
fn pooled_helpers_of(parent: u32) -> Vec<u32> {
    let name = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Some(up) = common::parent_of(*pid) else {
                return false;
            };
            name(*pid).trim_end() == "warden pooled"
                && (up == parent
                    || (common::is_fork_server(up) && common::parent_of(up) == Some(parent)))
        })
        .collect()
}

#[test]
fn the_daemon_serves_one_shots_from_its_pool_each_in_a_fresh_sandbox_and_leaves_none_behind() {
    require_root!();
    let (server, _settings) = common::serve_settings(
        "[sandbox]\ndefault_profile = \"pooled\"\n[sandbox.profiles.pooled]\noneshot_pool_size = 2\nenabled_policies = [\"forbidden_imports\"]\n[sandbox.profiles.pooled.policies.forbidden_imports]\nallowed_modules = [\"os\"]\n",
    );
    let daemon = server.child.id();
    let mut held = vec![];
    for _ in 0..200 {
        held = pooled_helpers_of(daemon);
        if held.len() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(held.len() >= 2, "the pool did not fill: {held:?} held");
    // Each run finds a sandbox nobody used: what the last one left in /tmp is not there.
    let code = "import os\nprint(os.path.exists('/tmp/mark'), os.listdir('/workspace'))\nopen('/tmp/mark', 'w').close()";
    for _ in 0..6 {
        let (status, body) = common::http_request(
            &server.addr,
            "POST",
            "/v1/execute",
            "",
            &serde_json::json!({ "code": code }).to_string(),
        );
        assert_eq!(status, 200, "{body}");
        let out: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(out["stdout"], "False ['output']\n", "{out}");
    }
    // The import guard holds in a held sandbox as in a cold one.
    let (status, body) = common::http_request(
        &server.addr,
        "POST",
        "/v1/execute",
        "",
        r#"{"code": "m = 'sock' + 'et'\n__import__(m)"}"#,
    );
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("forbidden_import"), "{body}");
    // A clean stop destroys the held sandboxes.
    let held = pooled_helpers_of(daemon);
    assert!(!held.is_empty());
    stop_and_expect_held_gone(server, &held);
}

#[test]
fn the_daemon_serves_javascript_one_shots_from_its_pool_each_in_a_fresh_sandbox() {
    require_root!();
    prerequisite!(common::missing_path("/usr/bin/node", "scripts/setup.sh"));
    let (server, _settings) = common::serve_settings(
        "[sandbox]\ndefault_profile = \"pooled\"\n[sandbox.profiles.pooled]\noneshot_pool_size = 2\noneshot_pool_languages = [\"javascript\"]\nenabled_policies = []\n",
    );
    let daemon = server.child.id();
    // Each run finds a sandbox nobody used (what the last one left in /tmp is not there),
    // and got it from the pool: the pool was full before it, and its taken count grows by one.
    let code = "const fs = require('fs');\nconsole.log(fs.existsSync('/tmp/mark'), fs.readdirSync('/workspace'), process.argv.slice(1), fs.readFileSync(0, 'utf8'), process.env.NODE_OPTIONS);\nfs.writeFileSync('/tmp/mark', '');";
    for taken in 1..=4 {
        wait_for_oneshot_metric(&server.addr, "ready", 2);
        // (More while a used one's helper still tears its sandbox down.)
        assert!(pooled_helpers_of(daemon).len() >= 2);
        let (status, body) = common::http_request(
            &server.addr,
            "POST",
            "/v1/execute",
            "",
            &serde_json::json!({ "language": "javascript", "code": code, "stdin": "in" })
                .to_string(),
        );
        assert_eq!(status, 200, "{body}");
        let out: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            out["stdout"], "false [ 'output' ] [ '/code/main.js' ] in undefined\n",
            "{out}"
        );
        // A request built otherwise (its own memory limit) runs cold and takes nothing.
        let (status, body) = common::http_request(
            &server.addr,
            "POST",
            "/v1/execute",
            "",
            &serde_json::json!({ "language": "javascript", "code": code, "memory_mb": 100 })
                .to_string(),
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(oneshot_metric(&server.addr, "taken_total"), taken);
    }
    assert_eq!(oneshot_metric(&server.addr, "discarded_total"), 0);
    // An uncaught exception in a held sandbox is the program's own failure, as when cold.
    wait_for_oneshot_metric(&server.addr, "ready", 2);
    let (status, body) = common::http_request(
        &server.addr,
        "POST",
        "/v1/execute",
        "",
        r#"{"language": "js", "code": "throw new Error('boom')"}"#,
    );
    assert_eq!(status, 200, "{body}");
    let out: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(out["exit_code"], 1, "{out}");
    assert!(
        out["stderr"].as_str().unwrap().contains("/code/main.js:1"),
        "{out}"
    );
    assert_eq!(oneshot_metric(&server.addr, "taken_total"), 5);
    // A clean stop destroys the held sandboxes.
    let held = pooled_helpers_of(daemon);
    assert!(!held.is_empty());
    stop_and_expect_held_gone(server, &held);
}

/// A metric of the JavaScript one-shot pool of the profile `pooled` (`ready`, `size`,
/// `taken_total`, `discarded_total`).
fn oneshot_metric(addr: &str, name: &str) -> u64 {
    common::metric(
        addr,
        &format!("warden_oneshot_pool_{name}{{profile=\"pooled\",language=\"javascript\"}}"),
    )
}

/// Waits until the JavaScript one-shot pool's metric `name` is `value`.
fn wait_for_oneshot_metric(addr: &str, name: &str, value: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while oneshot_metric(addr, name) != value {
        assert!(
            std::time::Instant::now() < deadline,
            "the pool's {name} never was {value}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `pid` runs: not gone, nor a zombie not yet reaped by whoever it was reparented to.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// Stops the daemon (SIGTERM) and checks that every held sandbox's process (`held`) is gone
/// within 5 s.
fn stop_and_expect_held_gone(mut server: common::Server, held: &[u32]) {
    // SAFETY: kill with the pid of our own child and a signal number.
    unsafe { libc::kill(server.child.id() as libc::pid_t, libc::SIGTERM) };
    server.child.wait().unwrap();
    let mut left = held.to_vec();
    for _ in 0..100 {
        left.retain(|pid| running(*pid));
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        left.is_empty(),
        "held sandboxes outlived the daemon: {left:?}"
    );
}
