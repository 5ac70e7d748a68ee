# Walk attributes of an allowed module to sys, then take os from sys.modules (no import at all).


# prelude: attempt (prelude/attempt.py, put here by the runner)

import json
attempt(json.decoder.re.enum.sys)
print("ATTEMPTED")
