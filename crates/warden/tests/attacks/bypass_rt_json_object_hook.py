# Import from a callback that json's own code calls (object_hook).


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
import json
found = []
def hook(d):
    found.append(imp("o" + "s"))
    return d
json.loads("{}", object_hook=hook)
attempt(found[0])
print("ATTEMPTED")
