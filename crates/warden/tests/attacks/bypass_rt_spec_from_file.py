# Load socket.py under the allowed name json.socket through spec_from_file_location.


# prelude: attempt (prelude/attempt.py, put here by the runner)

g = type(__loader__).__init__.__globals__
import json
path = json.__file__.rsplit("/", 2)[0] + "/socket.py"
spec = g["spec_from_file_location"]("json.socket", path)
m = g["_bootstrap"]._load(spec)
attempt(m)
print("ATTEMPTED")
