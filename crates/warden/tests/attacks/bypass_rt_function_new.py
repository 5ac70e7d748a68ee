# Build a function from a code object with json's file name and json's globals.


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
import json
code = (lambda i: i("sub" + "process")).__code__.replace(co_filename=json.__file__)
f = type(lambda: 0)(code, vars(json), "f", (imp,))
attempt(f())
print("ATTEMPTED")
