# Rewrite a function's code object to carry json's file name, then run it.


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
import json
def f():
    return imp("o" + "s")
f.__code__ = f.__code__.replace(co_filename=json.__file__)
attempt(f())
print("ATTEMPTED")
