# Load subprocess.py with a SourceFileLoader under another module name.


# prelude: attempt (prelude/attempt.py, put here by the runner)

g = type(__loader__).__init__.__globals__
import json
path = json.__file__.rsplit("/", 2)[0] + "/subprocess.py"
m = g["SourceFileLoader"]("json_helpers", path).load_module()
attempt(m)
print("ATTEMPTED")
