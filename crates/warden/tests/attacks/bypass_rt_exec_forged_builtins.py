# Exec code with a forged __builtins__ dict whose __import__ is the real one.


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
ns = {"__builtins__": {"__import__": imp, "print": print}}
exec("imp" + "ort os as m", ns)
attempt(ns["m"])
print("ATTEMPTED")
