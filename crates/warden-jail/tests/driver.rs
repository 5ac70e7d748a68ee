//! The Python driver on its own, outside any sandbox: /usr/bin/python3 runs the embedded
//! driver with its protocol pipes at descriptors 0 (requests) and 3 (replies), as the
//! sandbox's init sets them up, and these tests speak the protocol to it.

mod common;

use common::{Driver, Runtime};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

const PYTHON: &str = "/usr/bin/python3";

const RUNTIME: Runtime = Runtime {
    interpreter: PYTHON,
    file: warden_jail::context::PYTHON_DRIVER_FILE,
    source: warden_jail::context::PYTHON_DRIVER,
    language: "python",
    env: &[("PYTHONUNBUFFERED", "1")],
};

fn has_module(name: &str) -> bool {
    Command::new(PYTHON)
        .args(["-c", &format!("import {name}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn globals_persist_and_the_trailing_expression_is_the_result() {
    let Some(mut d) = Driver::start(&RUNTIME, &[]) else {
        return;
    };
    let r = d.run("x = 40\nprint('hello')");
    assert_eq!(r["execution_count"], 1);
    assert!(r["text"].is_null() && r["error"].is_null(), "{r}");
    assert_eq!(r["results"], serde_json::json!([]));
    let r = d.run("x + 2");
    assert_eq!(
        (r["text"].as_str(), r["execution_count"].as_u64()),
        (Some("42"), Some(2))
    );
    assert_eq!(
        r["results"],
        serde_json::json!([{"data": {"text/plain": "42"}, "is_main_result": true}])
    );
    // A trailing `;` hides the value, None is no result, `_` is the last value.
    assert!(d.run("x;")["text"].is_null());
    assert!(d.run("None")["text"].is_null());
    assert_eq!(d.run("_ * 2")["text"], "84");
    assert_eq!(d.run("'a' + 'b'")["text"], "'ab'");
    // Code after the last expression's line is not mistaken for an expression.
    assert!(d.run("for i in range(2):\n    x += i")["text"].is_null());
    assert_eq!(d.run("x")["text"], "41");
    let (out, err) = d.finish();
    assert_eq!(out, "hello\n");
    assert_eq!(err, "");
}

#[test]
fn exceptions_are_reported_with_the_users_frames_only() {
    let Some(mut d) = Driver::start(&RUNTIME, &[]) else {
        return;
    };
    let r = d.run(
        "def inner():\n    raise ValueError('bad value')\n\ndef outer():\n    inner()\n\nouter()",
    );
    let e = &r["error"];
    assert_eq!(
        (e["name"].as_str(), e["value"].as_str()),
        (Some("ValueError"), Some("bad value"))
    );
    let tb = e["traceback"].as_str().unwrap();
    assert!(
        tb.starts_with("Traceback (most recent call last):\n  File \"<cell 1>\", line 7"),
        "{tb}"
    );
    assert!(
        tb.contains("raise ValueError('bad value')"),
        "the source line is shown: {tb}"
    );
    assert!(!tb.contains("warden_driver"), "{tb}");
    // A syntax error never ran: no traceback, just where it is.
    let r = d.run("x = (1,");
    let e = &r["error"];
    assert_eq!(e["name"], "SyntaxError");
    let tb = e["traceback"].as_str().unwrap();
    assert!(tb.starts_with("  File \"<cell 2>\", line 1"), "{tb}");
    // SystemExit and exceptions whose str() fails end the cell, not the driver.
    assert_eq!(
        d.run("import sys\nsys.exit(3)")["error"]["name"],
        "SystemExit"
    );
    let r =
        d.run("class E(Exception):\n    def __str__(self):\n        raise RuntimeError\nraise E()");
    assert_eq!(
        (r["error"]["name"].as_str(), r["error"]["value"].as_str()),
        (Some("E"), Some("<str failed>"))
    );
    assert_eq!(d.run("1 + 1")["execution_count"], 5);
    // Huge values are cut, so a reply stays bounded.
    let r = d.run("raise ValueError('v' * 1_000_000)");
    let value = r["error"]["value"].as_str().unwrap();
    assert!(
        value.len() < 70_000 && value.ends_with("cut at 65536 characters]"),
        "{}",
        value.len()
    );
    assert!(r["error"]["traceback"].as_str().unwrap().len() < 70_000);
    let r = d.run("'t' * 1_000_000");
    let text = r["text"].as_str().unwrap();
    assert!(
        text.len() < 300_000 && text.ends_with("characters]"),
        "{}",
        text.len()
    );
    d.finish();
}

#[test]
fn the_protocol_descriptors_are_out_of_the_users_reach() {
    let Some(mut d) = Driver::start(&RUNTIME, &[]) else {
        return;
    };
    // stdin is empty for the user's code; descriptor 3 is not the reply pipe any more.
    assert_eq!(d.run("input()")["error"]["name"], "EOFError");
    let r = d.run("import os\nos.write(3, b'forged')");
    assert_eq!(r["error"]["name"], "OSError", "{r}");
    let r = d.run("import subprocess\nsubprocess.run(['ls', '/proc/self/fd'], capture_output=True, text=True).stdout.split()");
    assert_eq!(
        r["text"], "['0', '1', '2', '3']",
        "only ls's own descriptors: {r}"
    );
    assert_eq!(d.run("2 + 2")["text"], "4");
    d.finish();
}

#[test]
fn sigint_interrupts_a_cell_and_is_ignored_between_cells() {
    let Some(mut d) = Driver::start(&RUNTIME, &[]) else {
        return;
    };
    d.run("state = 'kept'");
    d.interrupt();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        d.run("state")["text"],
        "'kept'",
        "an idle interrupt changes nothing"
    );
    d.send("import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.01)");
    std::thread::sleep(Duration::from_millis(300));
    d.interrupt();
    let r = d.receive();
    assert_eq!(r["error"]["name"], "KeyboardInterrupt", "{r}");
    assert!(
        r["error"]["traceback"]
            .as_str()
            .unwrap()
            .contains("<cell 3>")
    );
    assert_eq!(d.run("state")["text"], "'kept'");
    d.finish();
}

#[test]
fn rich_outputs_come_from_display_and_repr_methods() {
    let Some(mut d) = Driver::start(&RUNTIME, &[]) else {
        return;
    };
    let r = d.run(
        "class Rich:\n    def _repr_html_(self):\n        return '<b>rich</b>'\n    def _repr_markdown_(self):\n        return '**rich**'\n    def _repr_png_(self):\n        return b'\\x89PNG fake'\n    def __repr__(self):\n        return 'Rich()'\nclass Broken:\n    def _repr_html_(self):\n        raise RuntimeError('no')\ndisplay(Broken())\nRich()",
    );
    assert!(r["error"].is_null(), "{r}");
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{r}");
    assert_eq!(
        results[0]["data"],
        serde_json::json!({"text/plain": results[0]["data"]["text/plain"]})
    );
    assert_eq!(results[0]["is_main_result"], false);
    let main = &results[1];
    assert_eq!(main["is_main_result"], true);
    assert_eq!(main["data"]["text/plain"], "Rich()");
    assert_eq!(main["data"]["text/html"], "<b>rich</b>");
    assert_eq!(main["data"]["text/markdown"], "**rich**");
    assert_eq!(
        main["data"]["image/png"], "iVBORyBmYWtl",
        "PNG bytes are base64"
    );
    assert_eq!(r["text"], "Rich()");
    // A class is shown by its repr, not by calling its unbound _repr_html_.
    let r = d.run("Rich");
    assert_eq!(r["results"][0]["data"].as_object().unwrap().len(), 1, "{r}");
    d.finish();
}

#[test]
fn results_over_the_budget_are_replaced_by_a_note() {
    let Some(mut d) = Driver::start(&RUNTIME, &[("WARDEN_RESULT_BUDGET", "1000")]) else {
        return;
    };
    let r = d.run("class Big:\n    def _repr_html_(self):\n        return 'x' * 5000\ndisplay(Big())\n'small'");
    let results = r["results"].as_array().unwrap();
    let note = results[0]["data"]["text/plain"].as_str().unwrap();
    assert!(note.contains("left out"), "{note}");
    assert!(results[0]["data"].get("text/html").is_none());
    assert_eq!(results[1]["data"]["text/plain"], "'small'");
    d.finish();
}

/// With pyplot imported before the first cell (a profile's `preload_modules`), show() is
/// patched before pyplot picks its backend; the first figure must still work.
#[test]
fn the_first_figure_works_with_pyplot_preloaded() {
    prerequisite!(
        (!has_module("matplotlib"))
            .then(|| format!("needs matplotlib for {PYTHON} (scripts/setup.sh installs it)"))
    );
    let Some(mut d) = Driver::start(&RUNTIME, &[]) else {
        return;
    };
    assert!(d.run("import matplotlib.pyplot as plt")["error"].is_null());
    let r = d.run("fig, ax = plt.subplots()\nax.plot([1, 2, 3]);");
    assert!(r["error"].is_null(), "{r}");
    assert!(r["results"][0]["data"]["image/png"].is_string(), "{r}");
    d.finish();
}

#[test]
fn figures_become_png_results_and_dataframes_html() {
    prerequisite!(
        (!has_module("matplotlib") || !has_module("pandas")).then(|| format!(
            "needs matplotlib and pandas for {PYTHON} (scripts/setup.sh installs them)"
        ))
    );
    let Some(mut d) = Driver::start(&RUNTIME, &[]) else {
        return;
    };
    let r = d.run("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nplt.figure()\nplt.bar([1], [2])\nprint('drawn')");
    assert!(r["error"].is_null(), "{r}");
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "both figures, once each: {r}");
    for fig in results {
        let png = fig["data"]["image/png"].as_str().unwrap();
        assert!(png.starts_with("iVBORw0KGgo"), "a PNG: {}", &png[..20]);
        assert!(
            fig["data"]["text/plain"]
                .as_str()
                .unwrap()
                .starts_with("<Figure size")
        );
    }
    // Shown figures are closed: the next cell starts with none.
    assert_eq!(d.run("len(plt.get_fignums())")["text"], "0");
    let r = d.run("fig = plt.figure()\nfig");
    assert_eq!(
        r["results"].as_array().unwrap().len(),
        1,
        "a figure as the value is shown once: {r}"
    );
    assert!(r["results"][0]["data"]["image/png"].is_string());
    let r = d.run("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})");
    let main = &r["results"][0];
    assert_eq!(main["is_main_result"], true);
    assert!(
        main["data"]["text/html"]
            .as_str()
            .unwrap()
            .contains("<table"),
        "{r}"
    );
    assert_eq!(r["text"], "   a  b\n0  1  3\n1  2  4");
    let (out, _) = d.finish();
    assert_eq!(out, "drawn\n");
}

#[test]
fn preloaded_modules_are_loaded_before_ready_and_stay_out_of_the_globals() {
    // `colorsys` and `xml.dom.minidom` are not imported by the driver itself.
    let Some(mut d) = Driver::launch(&RUNTIME, &[], &["--preload", "colorsys,xml.dom.minidom"])
    else {
        return;
    };
    let ready = d.receive();
    assert_eq!(ready["type"], "ready", "{ready}");
    let r = d.run(
        "import sys\n(sorted(m for m in ('colorsys', 'xml.dom.minidom') if m in sys.modules), \
         [n for n in ('colorsys', 'xml') if n in globals()], sys.argv[1:])",
    );
    assert_eq!(
        r["text"], "(['colorsys', 'xml.dom.minidom'], [], [])",
        "{r}"
    );
    d.finish();
}

#[test]
fn a_module_that_cannot_be_preloaded_ends_the_driver_before_ready() {
    let Some(mut d) = Driver::launch(&RUNTIME, &[], &["--preload", "json,no_such_module_here"])
    else {
        return;
    };
    let status = d.child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let mut err = String::new();
    d.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("preloading no_such_module_here failed: ModuleNotFoundError"),
        "{err}"
    );
    // Nothing was sent on the reply channel: no `ready`.
    let mut rest = Vec::new();
    d.replies.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{rest:?}");
}
