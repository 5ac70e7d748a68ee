# Reach __import__ with object.__getattribute__ on the builtins module; import socket.


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = object.__getattribute__(__builtins__, "__imp" + "ort__") if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
attempt(imp("sock" + "et"))
print("ATTEMPTED")
