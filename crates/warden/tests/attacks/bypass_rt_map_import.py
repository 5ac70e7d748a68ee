# Call __import__ from C code (map), with no Python frame of its own.


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
attempt(list(map(imp, ["sub" + "process"]))[0])
print("ATTEMPTED")
