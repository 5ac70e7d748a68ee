# Import importlib by a computed name, then import_module('os').


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
il = imp("import" + "lib")
attempt(getattr(il, "import_" + "module")("o" + "s"))
print("ATTEMPTED")
