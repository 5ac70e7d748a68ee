# Import sys by a computed name, then take os from sys.modules.


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
attempt(imp("s" + "ys"))
print("ATTEMPTED")
