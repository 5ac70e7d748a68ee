# Reach __import__ through vars(__builtins__) with a built key; import os.


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
attempt(imp("o" + "s"))
print("ATTEMPTED")
