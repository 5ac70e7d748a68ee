# Compile code under the import machinery's file name, then import from a callback that trusted
# code calls.


# prelude: attempt (prelude/attempt.py, put here by the runner)

import json
ns = {"imp": vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"], "found": []}
exec(compile("def hook(d):\n    found.append(imp('o' + 's'))\n    return d\n", "<frozen importlib._bootstrap>", "exec"), ns)
json.loads("{}", object_hook=ns["hook"])
attempt(ns["found"][0])
print("ATTEMPTED")
