# Reach marshal through the loader's globals and load a code object with a forged file name.


# prelude: attempt (prelude/attempt.py, put here by the runner)

import json
g = type(__loader__).__init__.__globals__
marshal = g["marshal"]
code = compile("imp" + "ort os as m", json.__file__, "exec")
ns = {}
exec(marshal.loads(marshal.dumps(code)), ns)
attempt(ns["m"])
print("ATTEMPTED")
