# Compile an import under json's own file name and run it in json's namespace, to pass for json's
# code.


# prelude: attempt (prelude/attempt.py, put here by the runner)

import json
code = compile("imp" + "ort os as m", json.__file__, "exec")
exec(code, vars(json))
attempt(vars(json)["m"])
print("ATTEMPTED")
