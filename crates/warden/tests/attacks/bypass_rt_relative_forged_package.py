# A relative import resolved against a forged __package__ (os), to get os.path.


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
m = imp("path", {"__package__": "os", "__name__": "os"}, None, ["join"], 1)
print("REACHED", m.__name__)
attempt(imp("o" + "s"))
print("ATTEMPTED")
