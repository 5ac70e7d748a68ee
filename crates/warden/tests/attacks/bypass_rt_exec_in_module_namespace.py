# Exec a built import in json's module namespace (globals that pass for json's).


# prelude: attempt (prelude/attempt.py, put here by the runner)

import json
exec("imp" + "ort socket as m", vars(json))
attempt(vars(json)["m"])
print("ATTEMPTED")
