// Warden playground: a notebook over Warden's public REST API (docs/api.md), plain JS, no build
// step. Everything it does, an SDK can do with the same routes:
//   GET  /v1/profiles                       the profile and language pickers
//   POST /v1/sandboxes, GET /v1/sandboxes, DELETE /v1/sandboxes/{id}
//   POST /v1/sandboxes/{id}/exec            {"context": "default", "stream": true}: a cell
//   POST /v1/sandboxes/{id}/contexts        a JavaScript context
//   GET|PUT /v1/sandboxes/{id}/files/...    the files panel
//   POST /v1/execute                        {"stream": true}: the one-shot switch
// With API keys configured, the key the user gives is kept in sessionStorage (this tab only)
// and sent as `Authorization: Bearer` with each call. Output of sandboxed code is never
// inserted as HTML: text goes in as text, HTML results (DataFrames) through an allow-list of
// table elements, images as data: URLs.
"use strict";
(function () {
  const KEY_STORAGE = "warden.playground.key";
  const $ = (id) => document.getElementById(id);
  const state = {
    key: sessionStorage.getItem(KEY_STORAGE),
    profiles: [],
    defaultProfile: null,
    languages: [],
    sandbox: null, // SandboxInfo of the open sandbox
    contexts: {}, // language -> context id in the open sandbox
    running: false,
    violation: null, // {marks, line} shown in the editor
  };

  // ---- the API ----

  class ApiError extends Error {
    constructor(status, code, message, violation) {
      super(message);
      this.status = status;
      this.code = code;
      this.violation = violation || null;
    }
  }

  let keyPrompt = null; // one pending prompt shared by every call that got a 401

  function askKey(refused) {
    if (!keyPrompt) {
      keyPrompt = new Promise((resolve) => {
        $("key-message").textContent = refused ? "That key was refused; try another." : "";
        $("key-overlay").hidden = false;
        const input = $("key-input");
        input.value = "";
        input.focus();
        const submit = () => {
          const key = input.value.trim();
          if (!key) return;
          $("key-submit").removeEventListener("click", submit);
          input.removeEventListener("keydown", onKey);
          $("key-overlay").hidden = true;
          state.key = key;
          sessionStorage.setItem(KEY_STORAGE, key);
          $("forget-key").hidden = false;
          keyPrompt = null;
          resolve();
        };
        const onKey = (e) => {
          if (e.key === "Enter") submit();
        };
        $("key-submit").addEventListener("click", submit);
        input.addEventListener("keydown", onKey);
      });
    }
    return keyPrompt;
  }

  // A fetch with the key; a 401 asks for a key and tries again.
  async function request(method, path, opts) {
    opts = opts || {};
    for (;;) {
      const headers = {};
      if (state.key) headers.Authorization = "Bearer " + state.key;
      let body = opts.body;
      if (opts.json !== undefined) {
        headers["Content-Type"] = "application/json";
        body = JSON.stringify(opts.json);
      }
      const sentKey = state.key;
      const resp = await fetch(path, { method, headers, body });
      if (resp.status === 401) {
        if (sentKey && state.key === sentKey) {
          sessionStorage.removeItem(KEY_STORAGE);
          state.key = null;
        }
        await askKey(Boolean(sentKey));
        continue;
      }
      if (!resp.ok) throw await errorOf(resp);
      return resp;
    }
  }

  async function errorOf(resp) {
    let code = "http_" + resp.status;
    let message = resp.statusText || "request failed";
    let violation = null;
    try {
      const body = await resp.json();
      if (body && body.error) {
        code = body.error.code || code;
        message = body.error.message || message;
        violation = body.error.violation || null;
      }
    } catch (_) {
      /* not JSON */
    }
    return new ApiError(resp.status, code, message, violation);
  }

  async function api(method, path, json) {
    const resp = await request(method, path, json === undefined ? {} : { json });
    return resp.json();
  }

  // POST with `stream: true`: NDJSON events as they arrive, each given to `onEvent`.
  async function stream(path, body, onEvent) {
    const resp = await request("POST", path, { json: Object.assign({}, body, { stream: true }) });
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    const flush = (final) => {
      let at;
      while ((at = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, at);
        buffered = buffered.slice(at + 1);
        if (line.trim()) onEvent(JSON.parse(line));
      }
      if (final && buffered.trim()) onEvent(JSON.parse(buffered));
    };
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      flush(false);
    }
    buffered += decoder.decode();
    flush(true);
  }

  const enc = encodeURIComponent;
  const filePath = (p) => p.split("/").map(enc).join("/");

  // ---- small DOM helpers ----

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  function setStatus(text) {
    $("status").textContent = text;
  }

  function fmtBytes(n) {
    if (n < 1024) return n + " B";
    if (n < 1024 * 1024) return (n / 1024).toFixed(1) + " KiB";
    return (n / 1024 / 1024).toFixed(1) + " MiB";
  }

  function fmtIn(iso) {
    const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
    if (!isFinite(s)) return "";
    if (s <= 0) return "expiring";
    if (s < 120) return "expires in " + s + " s";
    return "expires in " + Math.round(s / 60) + " min";
  }

  function b64ToBlob(b64, type) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return new Blob([bytes], { type: type || "application/octet-stream" });
  }

  function saveBlob(blob, name) {
    const url = URL.createObjectURL(blob);
    const a = el("a", { href: url, download: name.split("/").pop() });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  // ---- the editor ----

  const MODES = { python: "python", javascript: "javascript", bash: "shell", sh: "shell" };
  const editor = CodeMirror.fromTextArea($("editor"), {
    mode: "python",
    lineNumbers: true,
    indentUnit: 4,
    matchBrackets: true,
    viewportMargin: Infinity,
    gutters: ["violations", "CodeMirror-linenumbers"],
    extraKeys: {
      "Ctrl-Enter": () => run(),
      "Cmd-Enter": () => run(),
      "Shift-Enter": () => run(),
      Tab: (cm) =>
        cm.somethingSelected() ? cm.indentSelection("add") : cm.replaceSelection(" ".repeat(cm.getOption("indentUnit"))),
    },
  });
  editor.on("change", () => clearViolation());

  function clearViolation() {
    if (!state.violation) return;
    for (const m of state.violation.marks) m.clear();
    editor.removeLineClass(state.violation.line, "background", "violation-line");
    editor.clearGutter("violations");
    state.violation = null;
    $("refusal").hidden = true;
  }

  // A policy refusal: the message, and its module, line and column marked in the editor.
  function showViolation(err) {
    clearViolation();
    const v = err.violation || {};
    const box = $("refusal");
    // The import guard's refusal stops a run at the import (its line, no column).
    const atRunTime = (err.message || "").includes("refused at run time");
    box.textContent = (atRunTime ? "Stopped while running: " : "Refused before running: ") + err.message;
    box.hidden = false;
    if (!v.line) return;
    const line = Math.min(v.line - 1, editor.lineCount() - 1);
    const text = editor.getLine(line);
    let from = v.column ? Math.max(0, Math.min(v.column - 1, text.length)) : 0;
    let to = v.column && v.module ? Math.min(text.length, from + v.module.length) : text.length;
    if (to <= from) {
      from = 0;
      to = text.length;
    }
    const marks = [
      editor.markText(
        { line, ch: from },
        { line, ch: to },
        { className: "cm-violation", attributes: { title: err.message } },
      ),
    ];
    editor.addLineClass(line, "background", "violation-line");
    editor.setGutterMarker(line, "violations", el("span", { class: "violation-marker", title: err.message }, "!"));
    editor.setCursor({ line, ch: from });
    state.violation = { marks, line };
  }

  // ---- pickers ----

  function profile() {
    return $("profile").value || state.defaultProfile;
  }

  function language() {
    return $("language").value;
  }

  function profileInfo(name) {
    return state.profiles.find((p) => p.name === name) || null;
  }

  function setLanguage(lang) {
    if ([...$("language").options].some((o) => o.value === lang)) $("language").value = lang;
    editor.setOption("mode", MODES[language()] || null);
  }

  async function loadProfiles() {
    const list = await api("GET", "/v1/profiles");
    state.profiles = list.profiles;
    state.defaultProfile = list.default_profile;
    state.languages = list.languages;
    const p = $("profile");
    p.replaceChildren(
      ...list.profiles.map((x) =>
        el("option", { value: x.name, title: `timeout ${x.timeout_seconds} s, ${x.memory_mb} MB` }, x.name),
      ),
    );
    p.value = list.default_profile;
    $("language").replaceChildren(...list.languages.map((l) => el("option", { value: l }, l)));
    setLanguage((profileInfo(p.value) || {}).language || "python");
  }

  $("profile").addEventListener("change", () => {
    const info = profileInfo(profile());
    if (info) setLanguage(info.language);
    // Another profile is another sandbox: the next run makes one (the open one stays listed).
    if (state.sandbox && state.sandbox.profile !== profile()) leaveSandbox();
    editor.focus();
  });
  $("language").addEventListener("change", () => {
    setLanguage(language());
    editor.focus();
  });
  $("oneshot").addEventListener("change", () => {
    showSandbox();
    editor.focus();
  });

  // ---- sandboxes ----

  function showSandbox() {
    const label = $("sandbox-label");
    if ($("oneshot").checked) {
      label.textContent = "One-shot: each run is a fresh sandbox (POST /v1/execute); nothing is kept.";
    } else if (state.sandbox) {
      label.replaceChildren("Sandbox ", el("code", {}, state.sandbox.id), ` (${state.sandbox.profile})`);
    } else {
      label.textContent = "No sandbox yet: the first run makes one.";
    }
    for (const li of $("sandboxes").children) {
      li.classList.toggle("current", Boolean(state.sandbox) && li.dataset.id === state.sandbox.id);
    }
  }

  function leaveSandbox() {
    state.sandbox = null;
    state.contexts = {};
    $("cells").replaceChildren();
    $("editor-prompt").textContent = "In [ ]:";
    showSandbox();
    loadFiles();
  }

  async function ensureSandbox() {
    if (state.sandbox) return state.sandbox;
    setStatus("creating a sandbox…");
    state.sandbox = await api("POST", "/v1/sandboxes", {
      profile: profile(),
      labels: { client: "playground" },
    });
    state.contexts = {};
    showSandbox();
    loadSandboxes();
    return state.sandbox;
  }

  async function loadSandboxes() {
    const ul = $("sandboxes");
    let list;
    try {
      list = await api("GET", "/v1/sandboxes");
    } catch (e) {
      ul.replaceChildren(el("li", { class: "empty" }, "Could not list: " + e.message));
      return;
    }
    if (!list.sandboxes.length) {
      ul.replaceChildren(el("li", { class: "empty" }, "None yet."));
      return;
    }
    ul.replaceChildren(
      ...list.sandboxes.map((s) =>
        el(
          "li",
          { "data-id": s.id, class: state.sandbox && state.sandbox.id === s.id ? "current" : "" },
          el("code", { class: "name" }, s.id),
          el("button", { type: "button", class: "small open", onclick: () => openSandbox(s) }, "Open"),
          ...(s.state === "paused"
            ? [el("button", { type: "button", class: "small resume", onclick: () => resumeSandbox(s.id) }, "Resume")]
            : [
                el("button", { type: "button", class: "small pause", title: "Freeze its processes; the next run resumes it", onclick: () => pauseSandbox(s.id, false) }, "Pause"),
                el("button", { type: "button", class: "small evict", title: "Save its Python variables, end its interpreters to free their memory, and freeze it", onclick: () => pauseSandbox(s.id, true) }, "Pause & free memory"),
              ]),
          // Durable sandboxes only; the API's answer says why another cannot.
          el("button", { type: "button", class: "small snapshot", title: "Record its files and its Python variables under a name", onclick: () => snapshotSandbox(s.id) }, "Snapshot"),
          el("button", { type: "button", class: "small fork", title: "Make independent copies of it as it is now: files and variables", onclick: () => forkSandbox(s.id) }, "Fork"),
          el("button", { type: "button", class: "small danger destroy", onclick: () => destroySandbox(s.id) }, "Destroy"),
          el(
            "span",
            { class: "meta" },
            `${s.state === "paused" ? "paused · " : ""}${s.profile} · ${s.language} · ${s.executions} runs · ${fmtIn(s.expires_at)} (idle TTL ${s.idle_ttl_seconds} s)`,
          ),
        ),
      ),
    );
  }

  async function openSandbox(s) {
    if (state.sandbox && state.sandbox.id === s.id) return;
    leaveSandbox();
    state.sandbox = s;
    $("oneshot").checked = false;
    if (profileInfo(s.profile)) $("profile").value = s.profile;
    setLanguage(s.language);
    showSandbox();
    loadFiles();
    editor.focus();
  }

  // What a pause or a resume did with the contexts, in words: what was saved, what was lost.
  function contextsReport(list, kept, verb) {
    const parts = [];
    for (const c of list || []) {
      const names = c.saved || c.restored || [];
      let text = `${c.context}: ${verb} ${names.length ? names.join(", ") : "nothing"}`;
      if ((c.unsaved || []).length) text += "; lost: " + c.unsaved.map((u) => `${u.name} (${u.why})`).join("; ");
      parts.push(text);
    }
    for (const k of kept || []) parts.push(`${k.context}: ${k.why}`);
    return parts.join(" · ");
  }

  async function pauseSandbox(id, evict) {
    try {
      const paused = await api("POST", "/v1/sandboxes/" + enc(id) + "/pause", evict ? { evict: true } : {});
      const report = contextsReport(paused.evicted, paused.kept_in_memory, "saved");
      setStatus(`sandbox ${id} paused` + (report ? ": " + report : ""));
    } catch (e) {
      setStatus("pause failed: " + e.message);
    }
    loadSandboxes();
  }

  async function resumeSandbox(id) {
    try {
      const resumed = await api("POST", "/v1/sandboxes/" + enc(id) + "/resume");
      const report = contextsReport(resumed.restored, [], "loaded");
      setStatus(`sandbox ${id} resumed` + (report ? ": " + report : ""));
    } catch (e) {
      setStatus("resume failed: " + e.message);
    }
    loadSandboxes();
  }

  // ---- snapshots and forks (durable sandboxes) ----

  async function snapshotSandbox(id) {
    const name = window.prompt("Snapshot name (a-z, 0-9 and '-')", "snap-" + Date.now().toString(36));
    if (!name) return;
    try {
      const snap = await api("POST", "/v1/sandboxes/" + enc(id) + "/snapshot", { name });
      const report = contextsReport(snap.contexts, [], "saved");
      setStatus(`snapshot ${snap.name} of ${id} recorded (${fmtBytes(snap.size_bytes)})` + (report ? ": " + report : ""));
    } catch (e) {
      setStatus("snapshot failed: " + e.message);
    }
    loadSnapshots();
    loadSandboxes();
  }

  async function forkSandbox(id) {
    const asked = window.prompt("How many copies (1-16)?", "1");
    if (!asked) return;
    try {
      const forked = await api("POST", "/v1/sandboxes/" + enc(id) + "/fork", { count: Number(asked) });
      const report = contextsReport(forked.contexts, [], "copied");
      setStatus(`${forked.count} copies of ${id}: ${forked.sandboxes.map((s) => s.id).join(", ")}` + (report ? " · " + report : ""));
    } catch (e) {
      setStatus("fork failed: " + e.message);
    }
    loadSandboxes();
  }

  async function loadSnapshots() {
    const ul = $("snapshots");
    let list;
    try {
      list = await api("GET", "/v1/snapshots");
    } catch (e) {
      ul.replaceChildren(el("li", { class: "empty" }, "Could not list: " + e.message));
      return;
    }
    if (!list.snapshots.length) {
      ul.replaceChildren(el("li", { class: "empty" }, "None yet."));
      return;
    }
    ul.replaceChildren(
      ...list.snapshots.map((snap) =>
        el(
          "li",
          { "data-name": snap.name },
          el("code", { class: "name" }, snap.name),
          el("button", { type: "button", class: "small from-snapshot", title: "A new sandbox with its files and variables", onclick: () => sandboxFromSnapshot(snap.name) }, "New sandbox"),
          el("button", { type: "button", class: "small danger delete-snapshot", onclick: () => deleteSnapshot(snap.name) }, "Delete"),
          el("span", { class: "meta" }, `of ${snap.sandbox_id} · ${fmtBytes(snap.size_bytes)} · ${(snap.contexts || []).map((c) => c.context).join(", ") || "no contexts"}`),
        ),
      ),
    );
  }

  async function sandboxFromSnapshot(name) {
    try {
      const made = await api("POST", "/v1/sandboxes", { from_snapshot: name, labels: { client: "playground" } });
      setStatus(`sandbox ${made.id} made from snapshot ${name}`);
      await loadSandboxes();
      openSandbox(made);
    } catch (e) {
      setStatus("create from the snapshot failed: " + e.message);
    }
  }

  async function deleteSnapshot(name) {
    try {
      await api("DELETE", "/v1/snapshots/" + enc(name));
      setStatus(`snapshot ${name} deleted`);
    } catch (e) {
      setStatus("delete failed: " + e.message);
    }
    loadSnapshots();
  }

  $("refresh-snapshots").addEventListener("click", () => loadSnapshots());

  async function destroySandbox(id) {
    try {
      await api("DELETE", "/v1/sandboxes/" + enc(id));
    } catch (e) {
      if (e.status !== 404) setStatus("destroy failed: " + e.message);
    }
    if (state.sandbox && state.sandbox.id === id) leaveSandbox();
    loadSandboxes();
  }

  $("new-sandbox").addEventListener("click", () => {
    leaveSandbox();
    loadSandboxes();
    editor.focus();
  });
  $("refresh-sandboxes").addEventListener("click", () => loadSandboxes());

  // ---- files ----

  async function loadFiles() {
    const ul = $("files");
    if (!state.sandbox) {
      ul.replaceChildren(el("li", { class: "empty" }, "No sandbox yet."));
      return;
    }
    const id = state.sandbox.id;
    let list;
    try {
      list = await api("GET", `/v1/sandboxes/${enc(id)}/files`);
    } catch (e) {
      ul.replaceChildren(el("li", { class: "empty" }, "Could not list: " + e.message));
      return;
    }
    if (!state.sandbox || state.sandbox.id !== id) return;
    const files = list.files.filter((f) => !f.is_dir);
    if (!files.length) {
      ul.replaceChildren(el("li", { class: "empty" }, "The workspace is empty."));
      return;
    }
    ul.replaceChildren(
      ...files.map((f) =>
        el(
          "li",
          { "data-path": f.path },
          el("code", { class: "name" }, f.path),
          el("span", { class: "size" }, fmtBytes(f.size)),
          el("button", { type: "button", class: "small download", onclick: () => download(id, f.path) }, "Download"),
        ),
      ),
    );
  }

  async function download(id, path) {
    try {
      const resp = await request("GET", `/v1/sandboxes/${enc(id)}/files/${filePath(path)}`);
      saveBlob(await resp.blob(), path);
    } catch (e) {
      setStatus("download failed: " + e.message);
    }
  }

  async function upload(fileList) {
    const files = [...fileList];
    if (!files.length) return;
    try {
      const sb = await ensureSandbox();
      for (const f of files) {
        setStatus("uploading " + f.name + "…");
        await request("PUT", `/v1/sandboxes/${enc(sb.id)}/files/${filePath(f.name)}`, { body: f });
      }
      setStatus("uploaded " + files.map((f) => f.name).join(", "));
    } catch (e) {
      setStatus("upload failed: " + e.message);
    }
    loadFiles();
  }

  $("upload").addEventListener("change", (e) => {
    upload(e.target.files).then(() => (e.target.value = ""));
  });
  const drop = $("dropzone");
  drop.addEventListener("dragover", (e) => {
    e.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    upload(e.dataTransfer.files);
  });
  $("refresh-files").addEventListener("click", () => loadFiles());

  // ---- rendering a cell ----

  // HTML results (a DataFrame's _repr_html_) are rebuilt from an allow-list of table elements
  // and their text: nothing else of the sandbox's HTML reaches the page.
  const TABLE_TAGS = new Set(["TABLE", "THEAD", "TBODY", "TFOOT", "TR", "TH", "TD", "CAPTION"]);

  function safeTable(html) {
    const doc = new DOMParser().parseFromString(html, "text/html");
    const table = doc.querySelector("table");
    if (!table) return null;
    const copy = (node) => {
      if (node.nodeType === Node.TEXT_NODE) return document.createTextNode(node.textContent);
      if (node.nodeType !== Node.ELEMENT_NODE) return null;
      if (!TABLE_TAGS.has(node.tagName)) return document.createTextNode(node.textContent);
      const out = document.createElement(node.tagName.toLowerCase());
      for (const a of ["colspan", "rowspan"]) {
        const v = node.getAttribute(a);
        if (v && /^\d{1,3}$/.test(v)) out.setAttribute(a, v);
      }
      for (const c of node.childNodes) {
        const x = copy(c);
        if (x) out.append(x);
      }
      return out;
    };
    return el("div", { class: "table-wrap" }, copy(table));
  }

  function richElement(r) {
    const d = r.data || {};
    if (d["image/png"]) return el("img", { class: "rich", alt: "image/png result", src: "data:image/png;base64," + d["image/png"] });
    if (d["image/jpeg"]) return el("img", { class: "rich", alt: "image/jpeg result", src: "data:image/jpeg;base64," + d["image/jpeg"] });
    if (d["image/svg+xml"]) {
      // As an image: an SVG shown by <img> runs no script.
      const url = URL.createObjectURL(new Blob([d["image/svg+xml"]], { type: "image/svg+xml" }));
      return el("img", { class: "rich", alt: "image/svg+xml result", src: url });
    }
    if (d["text/html"]) {
      const t = safeTable(d["text/html"]);
      if (t) return t;
    }
    for (const mime of ["text/plain", "text/markdown", "application/json", "text/latex"]) {
      if (d[mime] !== undefined) return el("pre", { class: "text" }, typeof d[mime] === "string" ? d[mime] : JSON.stringify(d[mime], null, 2));
    }
    return null;
  }

  function limitOf(reason, limits) {
    if (!limits) return "";
    switch (reason) {
      case "timeout":
        return limits.timeout_ms ? ` (${limits.timeout_ms / 1000} s)` : "";
      case "memory":
        return limits.memory_mb ? ` (${limits.memory_mb} MB)` : "";
      case "pids":
        return limits.max_pids ? ` (${limits.max_pids} processes)` : "";
      case "output":
        return limits.max_output_bytes ? ` (${fmtBytes(limits.max_output_bytes)})` : "";
      default:
        return "";
    }
  }

  function newCell(code, lang) {
    const li = el("li", { class: "cell running" });
    const prompt = el("span", { class: "prompt" }, "In [*]:");
    const again = el("button", { type: "button", class: "small", title: "Copy into the editor", onclick: () => {
      editor.setValue(code);
      setLanguage(lang);
      editor.focus();
      editor.setCursor(editor.lineCount(), 0);
    } }, "Edit");
    const out = el("div", { class: "out" });
    const streamPre = el("pre", { class: "stream" });
    out.append(streamPre);
    li.append(el("div", { class: "cell-head" }, prompt, again), el("pre", { class: "code" }, code), out);
    $("cells").append(li);
    li.scrollIntoView({ block: "nearest" });
    let streamed = 0;
    return {
      li,
      chunk(kind, text) {
        streamed += text.length;
        const last = streamPre.lastElementChild;
        if (last && last.className === kind) last.append(text);
        else streamPre.append(el("span", { class: kind }, text));
      },
      end(res, limits, oneshot) {
        li.classList.remove("running");
        const n = res.execution_count;
        prompt.textContent = oneshot ? "One-shot:" : n ? `In [${n}]:` : "Run:";
        if (!streamed) {
          if (res.stdout) this.chunk("stdout", res.stdout);
          if (res.stderr) this.chunk("stderr", res.stderr);
        }
        const rich = (res.results || []).filter((r) => !r.is_main_result);
        for (const r of rich) {
          const e = richElement(r);
          if (e) out.append(e);
        }
        const main = (res.results || []).find((r) => r.is_main_result);
        const mainEl = main ? richElement(main) : res.text !== undefined && res.text !== null ? el("pre", { class: "text" }, res.text) : null;
        if (mainEl) {
          out.append(el("div", { class: "out-prompt" }, n ? `Out[${n}]:` : "Out:"), mainEl);
        }
        if (res.error) {
          out.append(el("pre", { class: "traceback" }, res.error.traceback || `${res.error.name}: ${res.error.value}`));
        }
        if (res.artifacts && res.artifacts.length) {
          out.append(
            el(
              "div",
              { class: "artifacts" },
              "Artifacts: ",
              ...res.artifacts.map((a) =>
                el("a", { href: "#", onclick: (e) => {
                  e.preventDefault();
                  saveBlob(b64ToBlob(a.bytes, a.mime_type), a.name);
                } }, `${a.name} (${fmtBytes(a.size)})`),
              ),
            ),
          );
        }
        const failed = res.exit_code !== 0 || res.reason !== "exited";
        const parts = [
          `exit ${res.exit_code === null || res.exit_code === undefined ? "–" : res.exit_code}`,
          res.reason,
          `${res.duration_ms} ms`,
        ];
        if (res.signal) parts.push(`signal ${res.signal}`);
        if (res.reason && res.reason !== "exited" && res.reason !== "signal") {
          parts.push(`stopped by the ${res.reason} limit${limitOf(res.reason, limits)}`);
        }
        if (res.stdout_truncated || res.stderr_truncated) parts.push("output truncated");
        if (res.context_restarted) parts.push("context restarted: its state is lost");
        li.append(el("div", { class: "result-line" + (failed ? " failed" : "") }, parts.join(" · ")));
        li.scrollIntoView({ block: "nearest" });
      },
      fail(message) {
        li.classList.remove("running");
        prompt.textContent = "Failed:";
        out.append(el("pre", { class: "traceback" }, message));
        li.append(el("div", { class: "result-line failed" }, "not run"));
      },
    };
  }

  // ---- running ----

  async function contextFor(sb, lang) {
    if (lang === "python" && sb.language === "python") return "default";
    if (lang !== "python" && lang !== "javascript") return null; // a fresh process per run
    if (!state.contexts[lang]) {
      setStatus(`starting a ${lang} context…`);
      const ctx = await api("POST", `/v1/sandboxes/${enc(sb.id)}/contexts`, { language: lang });
      state.contexts[lang] = ctx.id;
    }
    return state.contexts[lang];
  }

  async function runIn(code, lang, onEvent) {
    const oneshot = $("oneshot").checked;
    if (oneshot) {
      await stream("/v1/execute", { code, language: lang, profile: profile() }, onEvent);
      return null;
    }
    const sb = await ensureSandbox();
    const context = await contextFor(sb, lang);
    const body = context ? { code, context } : { code, language: lang };
    setStatus("running…");
    await stream(`/v1/sandboxes/${enc(sb.id)}/exec`, body, onEvent);
    return sb;
  }

  async function run() {
    if (state.running) return;
    const code = editor.getValue();
    if (!code.trim()) {
      editor.focus();
      return;
    }
    const lang = language();
    const oneshot = $("oneshot").checked;
    state.running = true;
    $("run").disabled = true;
    clearViolation();
    setStatus("running…");
    let cell = null;
    const onEvent = (ev) => {
      if (!cell) {
        // The request was accepted: the code becomes a cell and the editor is free again.
        cell = newCell(code, lang);
        editor.setValue("");
      }
      if (ev.type === "stdout" || ev.type === "stderr") cell.chunk(ev.type, ev.text);
      else if (ev.type === "end") {
        const info = oneshot ? profileInfo(profile()) : state.sandbox;
        const limits = oneshot && info ? { timeout_ms: info.timeout_seconds * 1000, memory_mb: info.memory_mb } : info && info.limits;
        cell.end(ev, limits, oneshot);
        if (ev.execution_count) $("editor-prompt").textContent = `In [${ev.execution_count + 1}]:`;
      } else if (ev.type === "error") cell.fail(`${ev.name}: ${ev.value}`);
    };
    let attempt = 0;
    for (;;) {
      try {
        await runIn(code, lang, onEvent);
        setStatus("");
        break;
      } catch (e) {
        if (!cell && e.code === "policy_violation") {
          showViolation(e);
          setStatus("");
        } else if (!cell && !oneshot && attempt === 0 && (e.code === "sandbox_not_found" || e.code === "sandbox_gone")) {
          // The open sandbox expired or was destroyed elsewhere: a fresh one, once.
          attempt += 1;
          leaveSandbox();
          continue;
        } else if (cell) {
          cell.fail(e.message);
          setStatus("");
        } else {
          setStatus(`${e.code || "error"}: ${e.message}`);
        }
        break;
      }
    }
    state.running = false;
    $("run").disabled = false;
    editor.focus();
    if (!oneshot && state.sandbox) {
      loadFiles();
      loadSandboxes();
    }
  }

  $("run").addEventListener("click", () => run());
  $("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORAGE);
    location.reload();
  });

  // ---- start ----

  async function start() {
    $("forget-key").hidden = !state.key;
    editor.focus();
    try {
      await loadProfiles();
    } catch (e) {
      setStatus("could not load the profiles: " + e.message);
    }
    await Promise.all([loadSandboxes(), loadSnapshots()]);
    showSandbox();
    document.body.dataset.ready = "true";
    editor.focus();
  }
  start();
})();
