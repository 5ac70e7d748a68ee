//! The JavaScript driver on its own, outside any sandbox: /usr/bin/node runs the embedded
//! driver with its protocol pipes at descriptors 0 (requests) and 3 (replies), as the
//! sandbox's init sets them up, and these tests speak the protocol to it.

mod common;

use common::{Driver, Runtime};
use std::io::Read;
use std::time::Duration;

const NODE: &str = "/usr/bin/node";

const RUNTIME: Runtime = Runtime {
    interpreter: NODE,
    file: warden_jail::context::JAVASCRIPT_DRIVER_FILE,
    source: warden_jail::context::JAVASCRIPT_DRIVER,
    language: "javascript",
    env: &[],
};

#[test]
fn declarations_persist_and_the_completion_value_is_the_result() {
    let Some(mut d) = Driver::start(&RUNTIME, &[]) else {
        return;
    };
    let r = d.run("var v = 1; let l = 10; const c = 100;\nfunction f() { return 1000 }\nclass K { get k() { return 10000 } }\nconsole.log('first'); console.error('err')");
    assert_eq!(r["execution_count"], 1);
    assert!(r["text"].is_null() && r["error"].is_null(), "{r}");
    assert_eq!(r["results"], serde_json::json!([]));
    let r = d.run("console.log('second'); v + l + c + f() + new K().k");
    assert_eq!(
        (r["text"].as_str(), r["execution_count"].as_u64()),
        (Some("11111"), Some(2)),
        "{r}"
    );
    assert_eq!(
        r["results"],
        serde_json::json!([{"data": {"text/plain": "11111"}, "is_main_result": true}])
    );
    // util.inspect of the value; undefined is no value; `_` is the last value.
    assert_eq!(d.run("({a: [1, 'x']})")["text"], "{ a: [ 1, 'x' ] }");
    assert!(d.run("undefined")["text"].is_null());
    assert_eq!(d.run("'s'")["text"], "'s'");
    assert_eq!(d.run("_ + _")["text"], "'ss'");
    // A promise as the value is awaited; top-level await runs (its value is not reported).
    assert_eq!(
        d.run("new Promise(r => setTimeout(() => r(42), 20))")["text"],
        "42"
    );
    let r = d.run("globalThis.late = await new Promise(r => setTimeout(() => r('done'), 20))");
    assert!(r["error"].is_null(), "{r}");
    assert_eq!(d.run("late")["text"], "'done'");
    // Redeclaring a `let` is an error, as in one script; the old value stays.
    assert_eq!(d.run("let l = 2")["error"]["name"], "SyntaxError");
    assert_eq!(d.run("l")["text"], "10");
    let (out, err) = d.finish();
    assert_eq!(out, "first\nsecond\n");
    assert_eq!(err, "err\n");
}

#[test]
fn console_output_is_written_before_the_reply() {
    let Some(mut d) = Driver::start(&RUNTIME, &[]) else {
        return;
    };
    let mut stdout = d.child.stdout.take().unwrap();
    for i in 0..3 {
        let r = d.run(&format!(
            "console.log('cell {i}', 'x'.repeat(100000).length)"
        ));
        assert!(r["error"].is_null(), "{r}");
        // The line is in the pipe already: a read does not wait for later output.
        let want = format!("cell {i} 100000\n");
        let mut got = vec![0u8; want.len()];
        stdout.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), want);
    }
    drop(d.requests);
    assert!(d.child.wait().unwrap().success());
}

#[test]
fn exceptions_are_reported_from_the_users_cell_only() {
    let Some(mut d) = Driver::start(&RUNTIME, &[]) else {
        return;
    };
    d.run("let ok = 1");
    let r = d.run("function inner() { throw new RangeError('bad value') }\nfunction outer() { inner() }\nouter()");
    let e = &r["error"];
    assert_eq!(
        (e["name"].as_str(), e["value"].as_str()),
        (Some("RangeError"), Some("bad value")),
        "{r}"
    );
    let tb = e["traceback"].as_str().unwrap();
    assert!(
        tb.starts_with("RangeError: bad value\n    at inner (<cell 2>:1:26)\n    at outer (<cell 2>:2:20)\n    at <cell 2>:3:1"),
        "{tb}"
    );
    assert!(
        tb.trim_end().ends_with("<cell 2>:3:1"),
        "nothing below the cell: {tb}"
    );
    assert!(
        !tb.contains("warden_driver") && !tb.contains("node:"),
        "{tb}"
    );
    // A syntax error never ran: where it is, no frames.
    let r = d.run("x = (1,");
    assert_eq!(r["error"]["name"], "SyntaxError");
    let tb = r["error"]["traceback"].as_str().unwrap();
    assert!(tb.starts_with("<cell 3>:1"), "{tb}");
    assert!(!tb.contains("    at "), "{tb}");
    // Anything can be thrown; a rejected promise is the cell's error.
    assert_eq!(d.run("throw {code: 7}")["error"]["value"], "{ code: 7 }");
    let r = d.run("Promise.reject(new TypeError('later'))");
    assert_eq!(r["error"]["name"], "TypeError", "{r}");
    // An error thrown by a timer after its cell ended does not end the context.
    d.run("setTimeout(() => { throw new Error('from a timer') }, 1); 0");
    std::thread::sleep(Duration::from_millis(200));
    let r = d.run("ok");
    assert_eq!(
        (r["text"].as_str(), r["execution_count"].as_u64()),
        (Some("1"), Some(7)),
        "{r}"
    );
    // Huge values are cut, so a reply stays bounded.
    let r = d.run("throw new Error('v'.repeat(1000000))");
    let value = r["error"]["value"].as_str().unwrap();
    assert!(
        value.len() < 70_000 && value.ends_with("cut at 65536 characters]"),
        "{}",
        value.len()
    );
    let (_, err) = d.finish();
    assert!(err.contains("from a timer"), "{err}");
}

#[test]
fn the_protocol_descriptors_are_out_of_the_users_reach() {
    let Some(mut d) = Driver::start(&RUNTIME, &[]) else {
        return;
    };
    assert_eq!(d.run("require('fs').readFileSync(0).length")["text"], "0");
    let r = d.run("require('fs').writeSync(3, 'forged')");
    assert_eq!(r["error"]["name"], "Error", "{r}");
    assert!(
        r["error"]["value"].as_str().unwrap().contains("EBADF"),
        "{r}"
    );
    assert_eq!(d.run("process.argv.length")["text"], "1");
    assert_eq!(d.run("2 + 2")["text"], "4");
    d.finish();
}

#[test]
fn sigint_interrupts_a_cell_and_is_ignored_between_cells() {
    let Some(mut d) = Driver::start(&RUNTIME, &[]) else {
        return;
    };
    d.run("var state = 'kept'");
    d.interrupt();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        d.run("state")["text"],
        "'kept'",
        "an idle interrupt changes nothing"
    );
    d.send("console.log('started'); while (true) {}");
    std::thread::sleep(Duration::from_millis(300));
    d.interrupt();
    let r = d.receive();
    assert_eq!(r["error"]["name"], "Interrupted", "{r}");
    assert_eq!(r["execution_count"], 3);
    assert_eq!(d.run("state")["text"], "'kept'");
    // A cell waiting on a promise that never settles is interrupted too.
    d.send("await new Promise(() => {})");
    std::thread::sleep(Duration::from_millis(300));
    d.interrupt();
    assert_eq!(d.receive()["error"]["name"], "Interrupted");
    assert_eq!(d.run("state")["execution_count"], 6);
    let (out, _) = d.finish();
    assert_eq!(out, "started\n");
}

#[test]
fn arguments_are_refused() {
    let Some(mut d) = Driver::launch(&RUNTIME, &[], &["--preload", "fs"]) else {
        return;
    };
    assert_eq!(d.child.wait().unwrap().code(), Some(2));
}

#[test]
fn started_as_the_jail_starts_it_the_channel_is_on_4_and_5() {
    let Some(mut d) = Driver::launch(&RUNTIME, &[], &["--channel", "4,5"]) else {
        return;
    };
    assert_eq!(d.receive()["type"], "ready");
    assert_eq!(d.run("let kept = 'yes'; process.argv.length")["text"], "1");
    assert_eq!(d.run("require('fs').readFileSync(0).length")["text"], "0");
    // A child process does not get the protocol pipes.
    let r = d.run("require('child_process').execSync('ls /proc/self/fd').toString().split('\\n').filter(f => f === '4' || f === '5')");
    assert_eq!(r["text"], "[]", "{r}");
    // Descriptor 3 is closed by the shell (Node may reuse the number): a write there forges
    // no reply.
    d.run("try { require('fs').writeSync(3, 'forged') } catch (e) {}");
    d.send("while (true) {}");
    std::thread::sleep(Duration::from_millis(200));
    d.interrupt();
    assert_eq!(d.receive()["error"]["name"], "Interrupted");
    let r = d.run("kept");
    assert_eq!(
        (r["text"].as_str(), r["execution_count"].as_u64()),
        (Some("'yes'"), Some(6)),
        "{r}"
    );
    d.finish();
}
