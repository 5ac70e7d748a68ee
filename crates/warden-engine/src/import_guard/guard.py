"""Warden's import guard: the forbidden_imports allow-list, enforced by the interpreter itself.

Delivered into the sandbox in one of two ways, so that CPython's ``site`` start-up runs it before
the program (or a context's driver):

- as ``usercustomize.py`` in the user site-packages of ``PYTHONUSERBASE``
  (``$PYTHONUSERBASE/lib/python3.X/site-packages``; the jail, which knows the interpreter's
  version): ``site`` runs it last, after the installation's ``.pth`` files and its own
  ``sitecustomize``, and no folder of the guard's comes before the standard library on the
  import path while the interpreter starts (the cheaper way, docs/benchmarks.md, session 26);
- as ``sitecustomize.py`` in a folder named by ``PYTHONPATH`` (docker, Kubernetes: an image's
  interpreter version is not known beforehand), which shadows the installation's own.

It installs two checks and then removes every trace of itself that the program could observe:

- an audit hook (``sys.addaudithook``: it cannot be removed) that sees every module the
  interpreter loads (the ``import`` event, whatever path led there: ``importlib``, loaders,
  ``_imp``), every ``pickle`` class lookup (``pickle.find_class``), and code that user code makes
  run as another file (``compile``, ``exec`` of a code object, ``code.__new__``,
  ``function.__new__``, ``__code__`` assignment, ``marshal.loads``);
- ``builtins.__import__`` replaced by a checking function: every ``import`` statement and every
  ``__import__`` call, also of a module already in ``sys.modules`` (which raises no audit event).

Who imports decides: the importer is the nearest frame outside the import machinery. When its
code comes from the interpreter's own installation (the standard library, site-packages: the
read-only folders on ``sys.path`` at start-up, or frozen modules) the import is the allowed
module's own business and passes (``json`` needs ``re``, ``pandas`` needs ``os``). Otherwise it is
user code, and the module must be in the allow-list (an entry ``a`` allows ``a`` and ``a.*``). A
file name that user code handed to ``compile`` or to a code object, and the file of any code
object it ran with ``exec`` or bound to a function, is *tainted*: frames of that file count as
user code from then on (so code compiled under a forged name does not pass for the standard
library; the real module's later imports are then refused too, which harms only this run).

A refusal writes one report to the report descriptor (a dup of descriptor 3, the run's report
pipe, made before the program starts) and ends the process at once with ``os._exit``: user code
cannot catch it. The report is a u32 little-endian length and a JSON object, the framing of the
context driver's replies: ``{"type": "import_guard"}`` once installed, then at most one
``{"type": "import_refused", "module": ..., "line": ...}``. ``line`` is the line of the outermost
user frame (the program's statement that led to the import), or 0.

What the program observes is unchanged: ``sys.argv``, ``__file__``, ``__name__``, ``sys.path``
(the guard's folder is removed), ``sys.modules`` (the guard leaves: as ``usercustomize`` it
ends by raising the ``ImportError`` that ``site`` ignores, as when no ``usercustomize`` exists;
as ``sitecustomize``, Debian's own is imported in its place), ``site.USER_BASE`` and
``site.USER_SITE`` (set back to what they are without ``PYTHONUSERBASE``), ``os.environ`` (the
guard's variables, ``PYTHONPATH`` and ``PYTHONUSERBASE`` are removed), descriptors (3 is closed
in a one-shot run; a gated run's start descriptor too),
tracebacks (the checking ``__import__`` drops its own entry from any exception it passes on) and
exit codes. Its functions carry the file name ``<warden importlib._bootstrap guard>``, which
``warnings`` skips like the import machinery.

One thing differs on purpose, for speed: the objects that exist when the program starts (the
standard library's start-up, ``site``, the guard's) are frozen (``gc.freeze``: the collector
leaves them alone from then on), so the interpreter's exit does not take apart, one cycle at a
time, what it built before the program began — the kernel frees that memory at the exit
anyway; ≈ 1.8 ms of a ``print(1)`` run's exit here (docs/benchmarks.md, session 30). The program's
``__main__`` is a module made after that, with the same contents, so the program's own objects,
its globals included, are collected as before, at its exit too (their ``__del__`` runs while
``print`` still works, as without the guard). What the program can see: ``gc.get_freeze_count()``
is not 0; ``gc.get_objects()`` and ``gc.get_referrers()`` leave the frozen objects out; and an
object it hangs on a module loaded before it started (``os``, ``sys``, ``builtins``) in a
reference cycle is finalized later in the exit, once those modules are wiped (CPython promises
no ``__del__`` for objects still alive at the exit). ``gc.unfreeze()`` undoes it. ``gc`` is not
left in ``sys.modules``.

This is defence in depth, never the boundary: code in the same interpreter can reach objects
already loaded (``json.decoder.re.enum.sys.modules["os"]``), or rewrite the guard's own state
(the closure of ``__import__``); docs/threat-model.md lists what still gets through, and the
sandbox's isolation contains it.
"""

import builtins
import os
import sys


def _install():
    environ = os.environ
    allowed = frozenset(n for n in environ.pop("WARDEN_IMPORT_ALLOW", "").split(",") if n)
    driver = environ.pop("WARDEN_IMPORT_GUARD_DRIVER", "")
    start = environ.pop("WARDEN_IMPORT_GUARD_START", "")
    here = os.path.dirname(os.path.abspath(__file__))
    if environ.get("PYTHONPATH") == here:
        del environ["PYTHONPATH"]
    # Set by the backend so that no user site-packages (a workspace folder) runs code at
    # start-up or passes for the installation: the guard's own folder's base (as
    # usercustomize) or a folder inside it with no site-packages (as sitecustomize). Removed,
    # as in a run without the guard.
    userbase = environ.get("PYTHONUSERBASE", "")
    if userbase and (
        here.startswith(os.path.join(userbase, "")) or userbase.startswith(os.path.join(here, ""))
    ):
        del environ["PYTHONUSERBASE"]

    # The report descriptor: private and not inherited. A context's driver takes descriptor 3
    # for its own replies after this runs, so it stays open there; a one-shot program never
    # sees it.
    report_fd = os.dup(3)
    if not driver:
        os.close(3)

    guard_filename = "<warden importlib._bootstrap guard>"
    bootstrap = frozenset(["<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>"])
    machinery = bootstrap | frozenset([guard_filename, os.path.abspath(__file__)])
    # Modules that the standard library's C code imports by itself when user code calls an
    # allowed function (C code imports through __import__ from the caller's frame).
    implied = frozenset(
        [
            "_strptime",  # datetime.datetime.strptime and time.strptime load it on first use
        ]
    )
    stdlib = os.path.dirname(getattr(os, "__file__", None) or os.path.join(sys.prefix, "lib", "x"))
    # Standard-library modules that import a name given by their caller: their frames are
    # skipped like the import machinery's, so their caller is the importer.
    deputies = frozenset(
        os.path.join(stdlib, name)
        for name in [
            "importlib/__init__.py",
            "importlib/_bootstrap.py",
            "importlib/_bootstrap_external.py",
            "importlib/util.py",
            "pkgutil.py",
            "runpy.py",
            "pickle.py",
            "pydoc.py",
        ]
    )
    # The interpreter's installation: the folders on sys.path now, before the program's own
    # folder is added, except this one; and frozen modules.
    prefixes = tuple(
        os.path.join(os.path.abspath(p), "")
        for p in sys.path
        if p and os.path.isabs(p) and os.path.abspath(p) != here
    ) + ("<frozen ",)
    trusted_files = frozenset([driver]) if driver else frozenset()
    tainted = set()
    judged = [None]  # the checking __import__'s code, once relabelled
    getframe = sys._getframe
    exit_now = os._exit
    write = os.write
    original_import = builtins.__import__
    exact = str.__add__
    str_type = str
    int_type = int
    code_type = type(_install.__code__)

    def allows(name):
        if name in allowed or name in implied:
            return True
        dot = name.find(".")
        while dot != -1:
            if name[:dot] in allowed:
                return True
            dot = name.find(".", dot + 1)
        return False

    def is_user(code):
        """Whether frames of `code` are user code (None: import machinery, skipped)."""
        filename = code.co_filename
        if type(filename) is not str_type or filename in tainted:
            return True
        if filename in machinery or filename in deputies:
            return None
        if filename in trusted_files:
            return False
        return not filename.startswith(prefixes)

    def importer(frame):
        """Whether the import is user code's: the nearest frame outside the import machinery
        is user code. An import that the checking __import__ already judged is not."""
        while frame is not None:
            code = frame.f_code
            if code is judged[0]:
                return False
            user = is_user(code)
            if user is not None:
                return user
            frame = frame.f_back
        return False

    def machinery_call(frame):
        """Whether `frame` is the import machinery's own (not code compiled under its name)."""
        filename = frame.f_code.co_filename
        return filename in bootstrap and filename not in tainted

    def own_file(name, filename):
        """Whether `filename` is where the module `name` lives."""
        if type(filename) is not str_type:
            return False
        if filename.startswith("<frozen "):
            return filename == "<frozen " + name + ">"
        path = "/" + name.replace(".", "/")
        return filename.endswith(path + ".py") or filename.endswith(path + "/__init__.py")

    def loading(frame):
        """The name of the module whose code the import machinery is about to run."""
        while frame is not None:
            code = frame.f_code
            if code.co_name in ("_load_unlocked", "_exec") and machinery_call(frame):
                spec = frame.f_locals.get("spec")
                name = getattr(spec, "name", None)
                return name if type(name) is str_type else "?"
            frame = frame.f_back
        return None

    def program_line(frame):
        line = 0
        while frame is not None:
            if is_user(frame.f_code):
                line = frame.f_lineno or 0
            frame = frame.f_back
        return line

    def json_string(text):
        out = ['"']
        for ch in text[:256]:
            point = ord(ch)
            if ch == '"' or ch == "\\":
                out.append("\\" + ch)
            elif 0x20 <= point < 0x7F:
                out.append(ch)
            elif point < 0xD800 or 0xE000 <= point < 0x10000:
                out.append("\\u%04x" % point)
            else:
                out.append("\\ufffd")
        out.append('"')
        return "".join(out)

    def send(message):
        body = message.encode("ascii")
        data = len(body).to_bytes(4, "little") + body
        while data:
            data = data[write(report_fd, data) :]

    def refuse(module, frame):
        try:
            send(
                '{"type":"import_refused","module":%s,"line":%d}'
                % (json_string(module), program_line(frame))
            )
        finally:
            exit_now(121)

    def taint(filename):
        if type(filename) is str_type:
            tainted.add(exact("", filename))
        else:
            tainted.add(filename)

    watched = frozenset(
        [
            "import",
            "pickle.find_class",
            "compile",
            "exec",
            "code.__new__",
            "function.__new__",
            "object.__setattr__",
            "marshal.loads",
            "marshal.load",
        ]
    )

    def audit(event, args):
        if event not in watched:
            return
        try:
            frame = getframe(1)
        except ValueError:
            return  # raised by the interpreter itself, with no Python code running
        if event == "import" or event == "pickle.find_class":
            if importer(frame) and not allows(args[0]):
                refuse(args[0], frame)
        elif event == "exec" and machinery_call(frame):
            # A module's code about to run: also for loads that raise no import event
            # (importlib.import_module, a loader's load_module). For user code, the module
            # must be allowed and its code must come from that module's own file (not
            # socket.py loaded under the name json.socket).
            if importer(frame):
                name = loading(frame)
                code = args[0]
                if name is None or not allows(name):
                    refuse(name or "?", frame)
                if type(code) is code_type and not own_file(name, code.co_filename):
                    refuse(name, frame)
        elif not is_user(frame.f_code):
            return
        elif event == "compile" or event == "code.__new__":
            taint(args[1])
        elif event == "exec" or event == "function.__new__":
            if type(args[0]) is code_type:
                taint(args[0].co_filename)
        elif event == "object.__setattr__":
            if args[1] == "__code__":
                if type(args[2]) is code_type:
                    taint(args[2].co_filename)
                if args[0] in ours:
                    refuse("builtins", frame)
        else:
            # marshal: code objects from bytes carry any file name; only the import
            # machinery needs them.
            refuse("marshal", frame)

    def relative_package(globals, level):
        """The package a relative import resolves against, as CPython finds it (or None)."""
        if type(globals) is not dict:
            return None
        package = globals.get("__package__")
        if package is None:
            spec = globals.get("__spec__")
            if spec is not None:
                package = spec.parent
            else:
                package = globals.get("__name__")
                if type(package) is str_type and "__path__" not in globals:
                    package = package.rpartition(".")[0]
        return package if type(package) is str_type else None

    def checked_import(name, globals=None, locals=None, fromlist=(), level=0):
        try:
            frame = getframe(1)
        except ValueError:
            frame = None  # the interpreter itself (printing a traceback), no Python code running
        # Called by the import machinery itself (its C helpers import through __import__):
        # the machinery's own business.
        if frame is not None and not machinery_call(frame) and importer(frame):
            if type(name) is not str_type or type(level) is not int_type:
                if isinstance(name, str_type) or isinstance(level, int_type):
                    # A subclass could answer these checks unlike what the import uses.
                    refuse(exact("", name) if isinstance(name, str_type) else "?", frame)
                # Anything else: the original raises TypeError before importing anything.
            else:
                absolute = name
                if level > 0:
                    package = relative_package(globals, level)
                    if package is None:
                        refuse("." * level + name, frame)
                    bits = package.rsplit(".", level - 1)
                    if package and len(bits) >= level:
                        absolute = bits[0] + "." + name if name else bits[0]
                    # The original resolves against exactly this package (or raises
                    # ImportError as it would have): no second look at the caller's globals.
                    globals = {"__package__": exact("", package)}
                items = () if fromlist is None else tuple(fromlist)
                if level == 0 or absolute != name:
                    if not allows(absolute):
                        subs = [i for i in items if type(i) is str_type and i != "*"]
                        if not subs or len(subs) != len(items):
                            refuse(absolute, frame)
                        for sub in subs:
                            if not allows(absolute + "." + sub):
                                refuse(absolute, frame)
                fromlist = items
        try:
            return original_import(name, globals, locals, fromlist, level)
        except BaseException as error:
            # Drop this function's own entry: tracebacks show what a run without the guard shows.
            tb = error.__traceback__
            if tb is not None and tb.tb_frame.f_code is checked_import.__code__:
                error.__traceback__ = tb.tb_next
            raise

    def relabel(code):
        consts = tuple(relabel(c) if type(c) is code_type else c for c in code.co_consts)
        return code.replace(co_filename=guard_filename, co_consts=consts)

    functions = [
        allows, is_user, importer, program_line, json_string, send, refuse, taint, audit,
        machinery_call, own_file, loading, relative_package, checked_import,
    ]
    for function in functions:
        # Labelled already when delivered as bytecode (the build labels them).
        if function.__code__.co_filename != guard_filename:
            function.__code__ = relabel(function.__code__)
    ours = functions
    judged[0] = checked_import.__code__
    checked_import.__name__ = checked_import.__qualname__ = "__import__"
    sys.addaudithook(audit)
    builtins.__import__ = checked_import
    # Last: the backend refuses a run without this message, so it must mean both are in place
    # (an exception before it leaves the run unguarded and, without the message, refused).
    send('{"type":"import_guard"}')
    return here, int(start) if start.isdigit() else -1


def _leave(here):
    """Removes the guard from what the program can see; as sitecustomize, also runs the one it
    shadows."""
    if here in sys.path:
        sys.path.remove(here)
    sys.path_importer_cache.pop(here, None)
    site = sys.modules.get("site")
    if site is not None and hasattr(site, "_getuserbase") and hasattr(site, "_get_path"):
        # What site computed from PYTHONUSERBASE, now gone from the environment.
        if site.USER_BASE is not None:
            site.USER_BASE = site._getuserbase()
        if site.USER_SITE is not None:
            site.USER_SITE = site._get_path(site.USER_BASE)
    if __name__ == "usercustomize":
        return
    del sys.modules["sitecustomize"]
    try:
        import sitecustomize  # noqa: F401 - Debian's own, as in a run without the guard
    except ImportError:
        pass


def _freeze_start_up():
    """Freezes every object made so far, so the program's exit leaves them to the kernel
    instead of collecting them, and gives the program a ``__main__`` made after it (the
    module's docs say what the program can see of it)."""
    loaded = "gc" in sys.modules
    import gc

    freeze = getattr(gc, "freeze", None)  # 3.7 and later; an image's older one exits as before
    if freeze is not None:
        freeze()
    if not loaded:
        del sys.modules["gc"]  # as in a run without the guard
    # The program's globals live in __main__'s namespace: a frozen __main__ would keep a cycle
    # through them alive past the first collection of the exit, when print still works.
    main = sys.modules.get("__main__")
    if main is not None:
        fresh = type(sys)("__main__")
        namespace = fresh.__dict__
        namespace.clear()
        namespace.update(main.__dict__)
        annotations = namespace.get("__annotations__")
        if type(annotations) is dict and not annotations:
            namespace["__annotations__"] = {}
        sys.modules["__main__"] = fresh


def _wait_at_the_gate(start):
    """A gated run (the backend writes the program's file after the interpreter started, e.g.
    a pooled one-shot): waits for the one byte that says the file is in place, and closes the
    descriptor, so the program sees what a run that was never held sees."""
    if start < 0:
        return
    try:
        os.read(start, 1)  # retried by the interpreter when a signal interrupts it (PEP 475)
    finally:
        os.close(start)


_here, _start = _install()
_leave(_here)
_freeze_start_up()
_wait_at_the_gate(_start)
# The functions above keep what they need in their closures (and their builtins); the module's
# namespace, reachable as their __globals__, is left empty.
if __name__ == "usercustomize":
    globals().clear()
    # As in a run without the guard, where no usercustomize is found: the import machinery
    # drops the module, and site ignores an ImportError that names it.
    raise ImportError("No module named 'usercustomize'", name="usercustomize")
globals().clear()
