# Take the interpreter's own __import__ out of the checking function's closure (the guard's own
# state).


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
real = imp
for cell in getattr(imp, "__closure__", None) or ():
    c = cell.cell_contents
    if type(c).__name__ == "builtin_function_or_method" and getattr(c, "__name__", "") == "__import__":
        real = c
attempt(real("o" + "s"))
print("ATTEMPTED")
