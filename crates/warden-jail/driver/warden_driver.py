"""Warden's Python driver: the program of a context, a persistent interpreter in a sandbox.

It runs cells (pieces of code) one after another in one globals dict, so that a variable defined
by one cell is there for the next, and reports for each cell: the repr of a trailing expression
(like a notebook's Out[n]), rich outputs (matplotlib figures as PNG, ``display()``, objects with
``_repr_html_`` / ``_repr_png_`` / ``_repr_markdown_`` / ...), the exception with a traceback
trimmed to the user's code, and the execution count. ``print`` goes to the real stdout and
stderr (file descriptors 1 and 2), which the supervisor relays as they happen.

Protocol (the supervisor is the other end; see crates/warden-jail/src/session.rs):
- requests on stdin (moved to a private descriptor at start; the user's code sees an empty
  stdin), replies on descriptor 3 (made private too);
- each message is a little-endian u32 length followed by that many bytes of UTF-8 JSON;
- the driver first sends ``{"type": "ready", ...}``; then for each ``{"code": "..."}`` request
  it sends one ``{"type": "done", "execution_count", "text", "results", "error"}``, after
  flushing the cell's stdout and stderr;
- SIGINT interrupts a running cell (KeyboardInterrupt); between cells it is ignored;
- ``{"op": "save_state", "path": ...}`` writes what can be saved of the globals to that file
  (a pause that evicts the context; the interpreter is ended after it) and
  ``{"op": "restore_state", "path": ...}`` loads it into a fresh interpreter and removes it;
  both answer a ``done`` whose ``text`` is a JSON report (see ``save_state``/``restore_state``).

Arguments: ``--preload a,b.c`` imports those modules before ``ready`` (a warm pool's sandbox has
then paid for them before a request arrives). They land in ``sys.modules`` only, not in the
user's globals: a cell still says ``import pandas as pd``, as in any notebook, and that import
is now a dictionary lookup. A module that fails to import ends the driver before ``ready``,
with the error on stderr (the context's start fails; nothing runs half-prepared). The
arguments are removed from ``sys.argv`` before any user code runs.

This driver is not a security boundary: the user's code runs in the same interpreter and can
change anything here. The jail around the process is the boundary; the supervisor treats every
message from this program as untrusted input.
"""

import ast
import base64
import builtins
import io
import json
import linecache
import os
import pickle
import signal
import struct
import sys
import traceback
import types

REQUEST_FD = 0
REPLY_FD = 3
# The rich outputs of one cell, in bytes, at most (the supervisor refuses larger messages).
RESULT_BUDGET = int(os.environ.pop("WARDEN_RESULT_BUDGET", str(16 * 1024 * 1024)))
MAX_REPR = 256 * 1024
# An exception's value and traceback are cut at this many characters each.
MAX_ERROR_TEXT = 64 * 1024

# MIME type -> the _repr_*_ method that gives it, and whether its data is binary (base64).
REPR_METHODS = [
    ("text/html", "_repr_html_", False),
    ("text/markdown", "_repr_markdown_", False),
    ("image/svg+xml", "_repr_svg_", False),
    ("image/png", "_repr_png_", True),
    ("image/jpeg", "_repr_jpeg_", True),
    ("text/latex", "_repr_latex_", False),
    ("application/json", "_repr_json_", False),
]


class Channel:
    """Length-prefixed JSON messages over two file descriptors."""

    def __init__(self, request_fd, reply_fd):
        self.request_fd = request_fd
        self.reply_fd = reply_fd

    def _read_exact(self, n):
        chunks = []
        while n > 0:
            chunk = os.read(self.request_fd, min(n, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def receive(self):
        """The next request, or None at the end of the input."""
        header = self._read_exact(4)
        if header is None:
            return None
        (length,) = struct.unpack("<I", header)
        body = self._read_exact(length)
        if body is None:
            return None
        return json.loads(body.decode("utf-8"))

    def send(self, message):
        body = json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")
        data = struct.pack("<I", len(body)) + body
        view = memoryview(data)
        while view:
            written = os.write(self.reply_fd, view)
            view = view[written:]


def _private_descriptors():
    """Moves the protocol's descriptors out of the user's way: the requests and replies get
    private, non-inheritable descriptors; stdin becomes /dev/null."""
    request = os.dup(REQUEST_FD)
    reply = os.dup(REPLY_FD)
    os.close(REPLY_FD)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return Channel(request, reply)


def _safe_repr(value):
    try:
        text = repr(value)
    except BaseException as e:  # a broken __repr__ must not end the cell's report
        if isinstance(e, KeyboardInterrupt):
            raise
        text = "<repr failed: %s: %s>" % (type(e).__name__, e)
    return _cut(text, MAX_REPR)


def _cut(text, limit):
    if len(text) <= limit:
        return text
    return text[:limit] + "... [warden: cut at %d characters]" % limit


def _is_matplotlib_figure(value):
    module = type(value).__module__ or ""
    return module.startswith("matplotlib") and type(value).__name__ == "Figure"


def _figure_png(figure):
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def mime_bundle(value):
    """The MIME types a value can be shown as: always text/plain, plus what its _repr_*_
    methods give (a method that fails or returns None is left out)."""
    data = {"text/plain": _safe_repr(value)}
    if isinstance(value, type):
        return data  # a class's _repr_html_ is an unbound function, not a representation
    if _is_matplotlib_figure(value):
        data["image/png"] = _figure_png(value)
        return data
    bundle = getattr(value, "_repr_mimebundle_", None)
    if callable(bundle):
        try:
            got = bundle()
            if isinstance(got, tuple):
                got = got[0]
            for mime, item in (got or {}).items():
                if isinstance(item, bytes):
                    item = base64.b64encode(item).decode("ascii")
                elif not isinstance(item, str):
                    item = json.dumps(item)
                data[mime] = item
        except Exception:
            pass
    for mime, method_name, binary in REPR_METHODS:
        if mime in data:
            continue
        method = getattr(value, method_name, None)
        if not callable(method):
            continue
        try:
            item = method()
        except Exception:
            continue
        if isinstance(item, tuple):  # (data, metadata)
            item = item[0]
        if item is None:
            continue
        if binary:
            if isinstance(item, str):
                item = item.encode("ascii", "replace")  # already base64
            else:
                item = base64.b64encode(bytes(item))
            item = item.decode("ascii")
        elif mime == "application/json" and not isinstance(item, str):
            item = json.dumps(item)
        elif not isinstance(item, str):
            item = str(item)
        data[mime] = item
    return data


class _Discard:
    """A file that keeps nothing: what pickle can save is tried against it."""

    def write(self, data):
        return len(data)


class Cell:
    """The outputs of the running cell."""

    def __init__(self):
        self.results = []
        self.size = 0
        self.dropped = 0

    def add(self, data, is_main_result=False):
        size = sum(len(v) for v in data.values())
        if self.size + size > RESULT_BUDGET:
            self.dropped += 1
            data = {
                "text/plain": "[warden: a result of %d bytes was left out: the cell's results "
                "are limited to %d bytes]" % (size, RESULT_BUDGET)
            }
            size = len(data["text/plain"])
        self.size += size
        self.results.append({"data": data, "is_main_result": is_main_result})


class Driver:
    def __init__(self, channel):
        self.channel = channel
        self.execution_count = 0
        self.namespace = {"__name__": "__main__", "__builtins__": builtins}
        self.cell = None
        self.in_cell = False
        self.pyplot_patched = False
        # name -> (cell file name, first line, source) of the latest top-level def or class of
        # that name: what a saved state keeps of functions and classes (see save_state).
        self.definitions = {}
        builtins.display = self.display
        signal.signal(signal.SIGINT, self._on_interrupt)

    # -- called from user code -------------------------------------------------------------

    def display(self, *objects, **_options):
        """Shows objects as rich outputs of the current cell (IPython's display())."""
        for value in objects:
            if self.cell is None:
                print(_safe_repr(value))
            else:
                self.cell.add(mime_bundle(value))

    def _show(self, *_args, **_kwargs):
        """pyplot.show(): the open figures become PNG results now, and are closed."""
        self._flush_figures()

    # -- internals ---------------------------------------------------------------------------

    def _on_interrupt(self, signum, frame):
        if self.in_cell:
            raise KeyboardInterrupt
        # Between cells (a late interrupt after the cell ended): nothing to interrupt.

    def _patch_pyplot(self):
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None or self.pyplot_patched:
            return
        driver = self

        # A plain function, not the bound method: pyplot's switch_backend (run at the first
        # figure) sets `show.__signature__`, which a bound method refuses — with matplotlib
        # imported before the first cell (preload_modules), the first figure failed.
        def show(*args, **kwargs):
            """pyplot.show(): the open figures become PNG results now, and are closed."""
            driver._show(*args, **kwargs)

        pyplot.show = show
        self.pyplot_patched = True

    def _flush_figures(self):
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None or self.cell is None:
            return
        for number in list(pyplot.get_fignums()):
            figure = pyplot.figure(number)
            try:
                data = {"text/plain": _safe_repr(figure), "image/png": _figure_png(figure)}
            except Exception as e:
                data = {"text/plain": "[warden: figure %s could not be rendered: %s]" % (number, e)}
            self.cell.add(data)
        pyplot.close("all")

    def _trim(self, tb):
        """Leaves out the driver's own frames at the top of a traceback."""
        here = os.path.abspath(__file__)
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == here:
            tb = tb.tb_next
        return tb

    def _error(self, exc, trim=True):
        if trim:
            lines = traceback.format_exception(type(exc), exc, self._trim(exc.__traceback__))
        else:
            lines = traceback.format_exception_only(type(exc), exc)
        try:
            value = str(exc)
        except Exception:
            value = "<str failed>"
        return {
            "name": type(exc).__name__,
            "value": _cut(value, MAX_ERROR_TEXT),
            "traceback": _cut("".join(lines), MAX_ERROR_TEXT),
        }

    def run(self, code):
        """Runs one cell; returns its report."""
        self.execution_count += 1
        filename = "<cell %d>" % self.execution_count
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        self.cell = Cell()
        text = None
        error = None
        self.in_cell = True
        try:
            self._patch_pyplot()
            try:
                tree = ast.parse(code, filename=filename, mode="exec")
            except (SyntaxError, ValueError) as e:
                # The code never ran: the parser's own frames are no help to the user.
                return self._report(text, self._error(e, trim=False))
            self._record_definitions(tree, filename, code)
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, filename, "exec"), self.namespace)
            self._patch_pyplot()
            if last is not None:
                value = eval(compile(last, filename, "eval"), self.namespace)
                if value is not None:
                    self.namespace["_"] = value
                    bundle = mime_bundle(value)
                    text = bundle["text/plain"]
                    # Figures are shown once: as the main result, not again below.
                    if _is_matplotlib_figure(value):
                        pyplot = sys.modules.get("matplotlib.pyplot")
                        if pyplot is not None:
                            pyplot.close(value)
                    self._flush_figures()
                    self.cell.add(bundle, is_main_result=True)
            self._flush_figures()
        except BaseException as e:  # SystemExit and KeyboardInterrupt end the cell, not the context
            error = self._error(e)
            try:
                self._flush_figures()
            except BaseException:
                pass
        finally:
            self.in_cell = False
        return self._report(text, error)

    def _record_definitions(self, tree, filename, code):
        lines = code.splitlines(True)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                source = "".join(lines[first - 1 : node.end_lineno])
                self.definitions[node.name] = (filename, first, source)

    def _defined_here(self, name, value):
        """The recorded source of a function or class that a cell defined under this name."""
        found = self.definitions.get(name)
        if found is None or not isinstance(value, (types.FunctionType, type)):
            return None
        if isinstance(value, types.FunctionType):
            made_by = value.__code__.co_filename
        else:
            made_by = next(
                (
                    f.__code__.co_filename
                    for f in vars(value).values()
                    if isinstance(f, types.FunctionType)
                ),
                found[0],
            )
        if value.__name__ != name or made_by != found[0]:
            return None
        return found

    def save_state(self, path):
        """Writes what can be saved of the globals to ``path``; returns the report
        ``{"saved": [names], "unsaved": [{"name", "why"}], "bytes": n}``.

        The file holds two pickles: a header (modules kept by name, functions and classes
        defined in cells kept by their source, to be run again on restore) and then every other
        value in one dict, so that two names for one object stay one object. Each value is
        first tried against a sink that keeps nothing (no copy in memory); what pickle refuses
        is named with its reason.
        """
        values, modules, sources, unsaved = {}, {}, {}, []
        sink = pickle.Pickler(_Discard(), pickle.HIGHEST_PROTOCOL)
        for name, value in list(self.namespace.items()):
            # The interpreter's own entries, not the user's state (the warnings module's
            # cache of this namespace is remade by the next warning).
            if name in ("__builtins__", "__name__", "__warningregistry__"):
                continue
            if isinstance(value, types.ModuleType):
                modules[name] = value.__name__
                continue
            found = self._defined_here(name, value)
            if found is not None:
                sources[name] = found
                continue
            try:
                sink.clear_memo()
                sink.dump(value)
            except BaseException as e:  # noqa: BLE001 - any failure is this value's reason
                if isinstance(e, KeyboardInterrupt):
                    raise
                unsaved.append({"name": name, "why": _cut("%s: %s" % (type(e).__name__, e), 300)})
                continue
            values[name] = value
        header = {
            "version": 2,
            "execution_count": self.execution_count,
            "modules": modules,
            "sources": sources,
        }
        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = path + ".partial"
        with open(partial, "wb") as f:
            pickle.dump(header, f, pickle.HIGHEST_PROTOCOL)
            pickle.dump(values, f, pickle.HIGHEST_PROTOCOL)
            size = f.tell()
        os.replace(partial, path)
        saved = sorted(list(values) + list(modules) + list(sources))
        return {"saved": saved, "unsaved": unsaved, "bytes": size}

    def restore_state(self, path):
        """Loads a state written by ``save_state`` and removes the file; returns
        ``{"restored": [names], "unsaved": [{"name", "why"}]}`` (what failed to load).

        The file is in the sandbox, so it is user input: everything it asks for (modules,
        pickled classes) is imported by code the import guard judges as the user's (compiled
        under ``<warden restore>``), never by this driver's trusted frames.
        """
        scope = {"__builtins__": builtins}
        exec(_RESTORE_CODE, scope)
        with open(path, "rb") as f:
            os.unlink(path)
            restored, failed, count, sources = scope["restore"](
                f, self.namespace, sys.modules, pickle.load, linecache.cache
            )
        if type(count) is int and count >= 0:
            self.execution_count = count
        for name, found in sources.items():
            self.definitions[name] = found
        return {"restored": sorted(restored), "unsaved": failed}

    def _report(self, text, error):
        self.in_cell = False
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        cell, self.cell = self.cell, None
        return {
            "type": "done",
            "execution_count": self.execution_count,
            "text": text,
            "results": cell.results,
            "error": error,
        }

    def serve(self):
        self.channel.send(
            {"type": "ready", "language": "python", "version": sys.version.split()[0]}
        )
        while True:
            try:
                request = self.channel.receive()
            except KeyboardInterrupt:
                continue
            if request is None:
                return
            # A late interrupt (after the cell ended) is ignored by the handler, so nothing
            # raises between here and the reply.
            op = request.get("op")
            if op in ("save_state", "restore_state"):
                self.channel.send(self.state_op(op, request.get("path", "")))
            else:
                self.channel.send(self.run(request.get("code", "")))

    def state_op(self, op, path):
        """Runs a save or restore like a cell: its report is the ``text`` (JSON), a failure
        the ``error``."""
        self.cell = Cell()
        text, error = None, None
        self.in_cell = True
        try:
            report = self.save_state(path) if op == "save_state" else self.restore_state(path)
            text = json.dumps(report)
        except BaseException as e:  # noqa: BLE001 - the engine reports it
            error = self._error(e, trim=False)
        finally:
            self.in_cell = False
        return self._report(text, error)


# The restore, compiled under a file name that the import guard judges as user code: the
# state's modules and the classes its pickles name are imported as if by a cell.
_RESTORE_CODE = compile(
    """
def restore(file, namespace, modules, load, lines):
    restored, failed, sources = [], [], {}
    state = load(file)
    for name, module in state["modules"].items():
        try:
            __import__(module)
            namespace[name] = modules[module]
            restored.append(name)
        except Exception as e:
            failed.append({"name": name, "why": "%s: %s" % (type(e).__name__, e)})
    try:
        values = load(file)
        values = {k: v for k, v in values.items() if type(k) is str}
        namespace.update(values)
        restored.extend(values)
    except Exception as e:
        failed.append({"name": "*", "why": "the values could not be loaded: %s: %s" % (type(e).__name__, e)})
    for name, (filename, first, source) in state["sources"].items():
        try:
            text = "\\n" * (first - 1) + source
            known = lines.get(filename)
            kept = list(known[2]) if known else []
            segment = text.splitlines(True)
            kept.extend(["\\n"] * (len(segment) - len(kept)))
            kept[first - 1 : len(segment)] = segment[first - 1 :]
            lines[filename] = (sum(map(len, kept)), None, kept, filename)
            exec(compile(text, filename, "exec"), namespace)
            sources[name] = (filename, first, source)
            restored.append(name)
        except Exception as e:
            failed.append({"name": name, "why": "%s: %s" % (type(e).__name__, e)})
    return restored, failed, state.get("execution_count"), sources
""",
    "<warden restore>",
    "exec",
)


def _preload_from_argv():
    """Takes ``--preload a,b`` off sys.argv and imports those modules."""
    args = sys.argv[1:]
    sys.argv = sys.argv[:1]
    if len(args) != 2 or args[0] != "--preload":
        if args:
            sys.stderr.write("warden driver: unexpected arguments %r\n" % (args,))
            sys.exit(2)
        return
    import importlib

    for name in [n for n in args[1].split(",") if n]:
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: BLE001 - any failure ends the start, with its reason
            sys.stderr.write("warden driver: preloading %s failed: %s: %s\n" % (name, type(e).__name__, e))
            sys.stderr.flush()
            sys.exit(1)


def main():
    os.environ.setdefault("MPLBACKEND", "Agg")
    channel = _private_descriptors()
    _preload_from_argv()
    driver = Driver(channel)
    # The driver's own names stay out of the user's namespace; only display() is added.
    driver.serve()


if __name__ == "__main__":
    main()
